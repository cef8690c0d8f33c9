package main

import (
	"context"
	"fmt"
	"io"

	"github.com/octofs/octofs/cluster"
	"github.com/spf13/cobra"
)

func newJoinCmd() *cobra.Command {
	var f *clusterFlags
	cmd := &cobra.Command{
		Use:   "join NODE_ADMIN_ADDR",
		Short: "Add a waiting node (started without --bootstrap or --join) to the cluster",
		Long: `Tell the node whose admin API is at NODE_ADMIN_ADDR to join the cluster
that --server belongs to. The node must have been started with no cluster
state and neither --bootstrap nor --join; it receives the token with this
call. It joins as a raft non-voter, is marked up once it has caught up, and
is promoted to voter while the cluster has fewer than --max-voters voters.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			node, err := f.clientFor([]string{args[0]}, true)
			if err != nil {
				return err
			}
			ctx, cancel := f.context(cmd)
			defer cancel()
			if err := node.SelfJoin(ctx, f.servers); err != nil {
				return fmt.Errorf("join %s: %w", args[0], err)
			}
			s, err := node.Status(ctx)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), s)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s at %s joined cluster %s (state %s); it is marked up once it has caught up: watch `octoctl nodes`\n",
				s.NodeID, args[0], dash(s.ClusterID), dash(string(s.NodeState)))
			return nil
		},
	}
	f = addClusterFlags(cmd)
	return cmd
}

func newRemoveCmd() *cobra.Command {
	var f *clusterFlags
	cmd := &cobra.Command{
		Use:   "remove NODE_ID",
		Short: "Remove a node: its partitions go to the others and it leaves raft",
		Long: `Remove a node from the cluster. Its partitions are reassigned to the other
nodes (moving as few as possible), it leaves the raft configuration, and
its id cannot join again. Drain it first to hand its partitions over while
it still runs.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return membershipChange(cmd, f, args[0], "removed", (*cluster.AdminClient).Remove)
		},
	}
	f = addClusterFlags(cmd)
	cmd.ValidArgsFunction = completeNodeIDs(f)
	return cmd
}

func newDrainCmd() *cobra.Command {
	var f *clusterFlags
	cmd := &cobra.Command{
		Use:   "drain NODE_ID",
		Short: "Hand a node's partitions to the other nodes; it stays a member until removed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return membershipChange(cmd, f, args[0], "draining", (*cluster.AdminClient).Drain)
		},
	}
	f = addClusterFlags(cmd)
	cmd.ValidArgsFunction = completeNodeIDs(f)
	return cmd
}

func membershipChange(cmd *cobra.Command, f *clusterFlags, id, verb string,
	call func(*cluster.AdminClient, context.Context, cluster.NodeID) (*cluster.Map, error)) error {
	c, err := f.client(true)
	if err != nil {
		return err
	}
	ctx, cancel := f.context(cmd)
	defer cancel()
	before, err := c.Map(ctx)
	if err != nil {
		return err
	}
	if _, ok := before.Node(cluster.NodeID(id)); !ok {
		return fmt.Errorf("node %q is not in the cluster map: list the nodes with `octoctl nodes`", id)
	}
	m, err := call(c, ctx, cluster.NodeID(id))
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(cmd.OutOrStdout(), m)
	}
	return printMoves(cmd.OutOrStdout(), id, verb, before, m)
}

// printMoves reports a change and how many partitions changed owner.
func printMoves(w io.Writer, id, verb string, before, after *cluster.Map) error {
	moved := 0
	if len(before.Partitions) == len(after.Partitions) {
		for p := range after.Partitions {
			if before.Partitions[p] != after.Partitions[p] {
				moved++
			}
		}
	}
	fmt.Fprintf(w, "node %s %s at epoch %d; %d of %d partitions changed owner\n", id, verb, after.Epoch, moved, len(after.Partitions))
	t := newTable(w, "ID", "STATE", "PARTITIONS")
	counts := after.PartitionCounts()
	for _, n := range after.Nodes {
		if n.State != cluster.StateRemoved || string(n.ID) == id {
			t.row(string(n.ID), string(n.State), fmt.Sprint(counts[n.ID]))
		}
	}
	return t.flush()
}
