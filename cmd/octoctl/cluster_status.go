package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/spf13/cobra"
)

func newStatusCmd() *cobra.Command {
	var f *clusterFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's leader, epoch, voters and node states",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(cmd, f, (*cluster.AdminClient).Status, printStatus)
		},
	}
	f = addClusterFlags(cmd)
	return cmd
}

func printStatus(w io.Writer, s *cluster.Status) error {
	leader := "none yet (election in progress, or no majority of voters running)"
	if s.Leader != "" {
		leader = fmt.Sprintf("%s (%s)", s.Leader, dash(s.LeaderAdminAddr))
	}
	var states []string
	for _, st := range []cluster.NodeState{cluster.StateUp, cluster.StateJoining, cluster.StateDown, cluster.StateDraining, cluster.StateRemoved} {
		if k := s.NodeStates[st]; k > 0 {
			states = append(states, fmt.Sprintf("%d %s", k, st))
		}
	}
	t := newTable(w, "Cluster", dash(s.ClusterID))
	t.row("Epoch", strconv.FormatUint(s.Epoch, 10))
	t.row("Leader", leader)
	t.row("Term", strconv.FormatUint(s.Term, 10))
	t.row("Nodes", dash(strings.Join(states, ", ")))
	t.row("Voters", joinIDs(s.Voters))
	t.row("Non-voters", joinIDs(s.NonVoters))
	t.row("Partitions", fmt.Sprintf("%d (%d pinned: hold file-system data)", s.Partitions, s.Pinned))
	t.row("Answered by", fmt.Sprintf("%s (%s, node %s, commit %d, applied %d)", s.NodeID, s.RaftState, dash(string(s.NodeState)), s.CommitIndex, s.AppliedIndex))
	if s.NodeState == cluster.StateRemoved {
		t.row("Note", "this node was removed from the cluster: stop it and wipe its data directory; ask another node for the cluster's status")
	}
	if !s.Joined {
		t.row("Note", "this node is not in a cluster yet: add it with `octoctl join ADDR --server MEMBER --join-secret-file SECRET`")
	}
	if s.Joined && !s.CaughtUp {
		t.row("Warning", "NOT CAUGHT UP: "+s.NotCaughtUp)
	}
	return t.flush()
}

func newNodesCmd() *cobra.Command {
	var f *clusterFlags
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List the nodes with state, raft suffrage, partitions and heartbeat age",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(cmd, f, (*cluster.AdminClient).Nodes, printNodes)
		},
	}
	f = addClusterFlags(cmd)
	return cmd
}

func printNodes(w io.Writer, r *cluster.NodesResponse) error {
	t := newTable(w, "ID", "STATE", "RAFT", "PARTITIONS", "PINNED", "ADMIN", "RAFT ADDR", "RDMA", "HEARTBEAT")
	for _, n := range r.Nodes {
		role := n.Suffrage
		if n.Leader {
			role += " (leader)"
		}
		hb := "-"
		if n.HeartbeatAgeMillis >= 0 {
			hb = (time.Duration(n.HeartbeatAgeMillis) * time.Millisecond).String() + " ago"
		}
		t.row(string(n.ID), string(n.State), role, strconv.Itoa(n.Partitions), strconv.Itoa(n.Pinned), n.AdminAddr, n.RaftAddr, dash(n.RDMAAddr), hb)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "epoch %d, as seen by %s\n", r.Epoch, r.From)
	if r.Stale {
		fmt.Fprintf(w, "STALE: %s\n", r.StaleReason)
	}
	return nil
}

func newMapCmd() *cobra.Command {
	var (
		f          *clusterFlags
		partitions bool
	)
	cmd := &cobra.Command{
		Use:   "map",
		Short: "Show the cluster map: epoch, nodes with regions, partition ownership",
		Long: `Show the cluster map. Without the cluster token region keys (rkeys) are
withheld and the map is marked redacted; with --token-file they are shown.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(cmd, f, (*cluster.AdminClient).Map, func(w io.Writer, m *cluster.Map) error {
				return printMap(w, m, partitions)
			})
		},
	}
	f = addClusterFlags(cmd)
	cmd.Flags().BoolVar(&partitions, "partitions", false, "also list partition ranges and their owners")
	return cmd
}

func printMap(w io.Writer, m *cluster.Map, partitions bool) error {
	fmt.Fprintf(w, "cluster %s, epoch %d, %d partitions, %d pinned, file placement %s",
		dash(m.ClusterID), m.Epoch, len(m.Partitions), len(m.Pinned), m.Placement())
	if m.Redacted {
		fmt.Fprint(w, " (rkeys withheld: pass the token to see them)")
	}
	fmt.Fprintln(w)
	if m.Stale {
		fmt.Fprintf(w, "STALE: %s\n", m.StaleReason)
	}
	counts, pinned := m.PartitionCounts(), m.PinnedCounts()
	t := newTable(w, "ID", "STATE", "SINCE", "PARTITIONS", "PINNED", "RDMA", "REGION", "LENGTH", "RKEY")
	for _, n := range m.Nodes {
		rkey := fmt.Sprintf("%#x", n.Region.RKey)
		if m.Redacted {
			rkey = "(withheld)"
		}
		t.row(string(n.ID), string(n.State), "epoch "+strconv.FormatUint(n.StateEpoch, 10), strconv.Itoa(counts[n.ID]), strconv.Itoa(pinned[n.ID]),
			dash(n.RDMAAddr), dash(n.Region.UUID), strconv.FormatUint(n.Region.Length, 10), rkey)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if !partitions {
		return nil
	}
	fmt.Fprintln(w)
	pt := newTable(w, "PARTITIONS", "OWNER", "PINNED")
	for _, r := range partitionRanges(m) {
		pin := "no"
		if r.pinned {
			pin = "yes"
		}
		pt.row(r.span(), string(r.owner), pin)
	}
	return pt.flush()
}

type partitionRange struct {
	first, last int
	owner       cluster.NodeID
	pinned      bool
}

func (r partitionRange) span() string {
	if r.first == r.last {
		return strconv.Itoa(r.first)
	}
	return fmt.Sprintf("%d-%d", r.first, r.last)
}

// partitionRanges compresses the table into runs of one owner and one
// pinned state.
func partitionRanges(m *cluster.Map) []partitionRange {
	var out []partitionRange
	for p, id := range m.Partitions {
		pinned := m.IsPinned(uint32(p))
		if k := len(out); k > 0 && out[k-1].owner == id && out[k-1].pinned == pinned && out[k-1].last == p-1 {
			out[k-1].last = p
			continue
		}
		out = append(out, partitionRange{first: p, last: p, owner: id, pinned: pinned})
	}
	return out
}
