package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPinPartition is the metadata service's view: a node pins the
// partitions it writes to; another node's partition is refused with its
// owner; a node holding data cannot be drained or removed without losing
// it; a new node gets only unpinned partitions.
func TestPinPartition(t *testing.T) {
	tc := newTestCluster(t)
	n1, n2, n3 := tc.formThree()
	ctx := context.Background()
	all := []*Node{n1, n2, n3}
	m := n2.Map()
	mine := ownedBy(m, "n2", 5)
	theirs := ownedBy(m, "n3", 1)[0]

	// Pin from n2 (leader or follower: the call forwards), every partition
	// n2 will write to.
	for _, p := range mine {
		require.NoError(t, n2.PinPartition(ctx, p))
		require.True(t, n2.Map().IsPinned(p), "n2's own map shows the pin when PinPartition returns")
	}
	tc.waitFor("every node sees the pins", func() bool {
		for _, n := range all {
			if len(n.Map().Pinned) != len(mine) {
				return false
			}
		}
		return true
	})
	requireSameMap(t, all...)
	epoch := n2.Map().Epoch
	require.NoError(t, n2.PinPartition(ctx, mine[0]), "pinning again is a no-op")
	require.Equal(t, epoch, n2.Map().Epoch)

	// Another node's partition: refused with the owner, from the leader
	// and through a follower alike.
	var no *NotOwnerError
	require.ErrorAs(t, n2.PinPartition(ctx, theirs), &no)
	require.Equal(t, NotOwnerError{Partition: theirs, Owner: "n3", Requester: "n2"}, *no)
	_, err := tc.client(n3, n1.Token()).Pin(ctx, theirs, "n1")
	require.ErrorAs(t, err, &no)
	require.Equal(t, NodeID("n3"), no.Owner)
	t.Logf("pin of another node's partition: %v", err)

	// Pinning needs the token over the API.
	_, err = tc.client(n1, "").Pin(ctx, mine[1], "n2")
	require.ErrorIs(t, err, ErrUnauthorized)

	// n2 holds data: drain and remove are refused, through any node.
	c := tc.client(n3, n1.Token())
	_, err = c.Drain(ctx, "n2")
	require.ErrorIs(t, err, ErrHoldsData)
	require.Contains(t, err.Error(), "node n2 holds file-system data in 5 partitions; moving partitions with their data is not built yet")
	t.Logf("drain refused: %v", err)
	_, err = c.Remove(ctx, "n2")
	require.ErrorIs(t, err, ErrHoldsData)
	require.Contains(t, err.Error(), "--force-lose-data")
	requireSameMap(t, all...)

	// A new node takes unpinned partitions only; the pinned stay with n2.
	before := n1.Map()
	n4 := tc.join("n4", n1)
	tc.waitFor("n4 up", func() bool { return tc.converged(4) })
	after := n4.Map()
	keepsPinned(t, before, after)
	checkBalancedUnpinned(t, after, []NodeID{"n1", "n2", "n3", "n4"})
	t.Logf("after n4 came up: owners %v, pinned %v", after.PartitionCounts(), after.PinnedCounts())

	// n2 gone for good: a forced removal loses its data, says so in the
	// log, and hands its partitions (unpinned now) to the others.
	m, err = c.ForceRemove(ctx, "n2")
	require.NoError(t, err)
	info, _ := m.Node("n2")
	require.Equal(t, StateRemoved, info.State)
	require.Empty(t, m.Pinned)
	checkBalanced(t, m.Partitions, []NodeID{"n1", "n3", "n4"})
	require.Contains(t, tc.logs.String(), "removed a node that held file-system data; its data is lost")
}

// TestPinPartitionWaitsForALeader: a pin asked while no leader is known
// waits for one (bounded by the caller's context), then completes.
func TestPinPartitionWaitsForALeader(t *testing.T) {
	tc := newTestCluster(t)
	n1, n2, _ := tc.formThree()
	ld := tc.waitLeader()
	var asker *Node
	for _, n := range []*Node{n1, n2} {
		if n != ld {
			asker = n
		}
	}
	if asker == nil {
		asker = tc.nodes["n3"]
	}
	p := ownedBy(asker.Map(), asker.ID(), 1)[0]
	tc.crash(ld) // the others elect a new leader meanwhile
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, asker.PinPartition(ctx, p))
	t.Logf("pin across a leader crash took %v", time.Since(start).Round(time.Millisecond))
	require.True(t, asker.Map().IsPinned(p))
}
