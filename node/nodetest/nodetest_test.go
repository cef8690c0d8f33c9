package nodetest

import (
	"testing"

	"github.com/octofs/octofs/cluster"
)

func TestClusterStartsAndRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster; skipped with -short")
	}
	c := Start(t, Options{})
	if len(c.Nodes) != 3 || c.Token == "" {
		t.Fatalf("cluster of %d nodes, token %q", len(c.Nodes), c.Token)
	}
	m := c.Nodes[0].Cluster.Map()
	owners := m.PartitionCounts()
	for _, n := range c.Nodes {
		if owners[n.ID] == 0 {
			t.Errorf("node %s owns no partition: %v", n.ID, owners)
		}
		info, _ := m.Node(n.ID)
		if info.RDMAAddr == "" || info.Region.UUID == "" {
			t.Errorf("node %s has no storage in the map: %+v", n.ID, info)
		}
	}
	c.Crash(1)
	c.Restart(1)
	c.WaitUp()
	if info, _ := c.Nodes[0].Cluster.Map().Node("n2"); info.State != cluster.StateUp {
		t.Fatalf("restarted node is %s", info.State)
	}
}
