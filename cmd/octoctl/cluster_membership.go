package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/octofs/octofs/cluster"
	"github.com/spf13/cobra"
)

func newJoinCmd() *cobra.Command {
	var (
		f          *clusterFlags
		secretFile string
	)
	cmd := &cobra.Command{
		Use:   "join NODE_ADMIN_ADDR",
		Short: "Add a waiting node (started without --bootstrap or --join) to the cluster",
		Long: `Tell the node whose admin API is at NODE_ADMIN_ADDR to join the cluster
that --server belongs to. The node must have been started with no cluster
state and neither --bootstrap nor --join. It obeys only a caller that
proves it may: if it was started with the cluster's token (--token-file),
the token given here must be that one; otherwise pass its join secret with
--join-secret-file (the node wrote it to <data-dir>/join-secret, or was
started with --join-secret-file). It joins as a raft non-voter, is marked
up once it has caught up, and is promoted to voter while the cluster has
fewer than --max-voters voters.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			node, err := f.clientFor([]string{args[0]}, true)
			if err != nil {
				return err
			}
			if secretFile != "" {
				secret, err := cluster.ReadTokenFile(secretFile)
				if err != nil {
					return fmt.Errorf("--join-secret-file: %w", err)
				}
				node.SetJoinSecret(secret)
			}
			ctx, cancel := f.context(cmd)
			defer cancel()
			r, err := node.SelfJoin(ctx, f.servers)
			if err != nil {
				return fmt.Errorf("join %s: %w", args[0], explain(err))
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s at %s joined cluster %s through %s at epoch %d, state %s; it is marked up once it has caught up: watch `octoctl nodes`\n",
				r.NodeID, args[0], dash(r.ClusterID), r.Via, r.Epoch, dash(string(r.State)))
			return nil
		},
	}
	f = addClusterFlags(cmd)
	cmd.Flags().StringVar(&secretFile, "join-secret-file", "", "the waiting node's join secret (its <data-dir>/join-secret)")
	return cmd
}

func newRemoveCmd() *cobra.Command {
	var (
		f     *clusterFlags
		force bool
	)
	cmd := &cobra.Command{
		Use:   "remove NODE_ID",
		Short: "Remove a node: its partitions go to the others and it leaves raft",
		Long: `Remove a node from the cluster. Its partitions are reassigned to the other
nodes (moving as few as possible), it leaves the raft configuration, and
its id cannot join again. Drain it first to hand its partitions over while
it still runs.

A node that holds file-system data (pinned partitions) cannot be drained or
removed: partitions cannot move with their data yet. If such a node is gone
for good, --force-lose-data removes it anyway; the files in its partitions
are lost, and the partitions go to other nodes empty.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			call := (*cluster.AdminClient).Remove
			if force {
				call = (*cluster.AdminClient).ForceRemove
			}
			return membershipChange(cmd, f, args[0], "removed", call)
		},
	}
	f = addClusterFlags(cmd)
	cmd.Flags().BoolVar(&force, "force-lose-data", false, "remove a node that holds file-system data; the data in its partitions is lost")
	cmd.ValidArgsFunction = completeNodeIDs(f)
	return cmd
}

func newDrainCmd() *cobra.Command {
	var f *clusterFlags
	cmd := &cobra.Command{
		Use:   "drain NODE_ID",
		Short: "Hand a node's partitions to the other nodes; it stays a member until removed",
		Long: `Hand a node's partitions to the other nodes; it stays a raft member (a
voter gives its seat to an up non-voter if there is one) until removed.
A node that holds file-system data (pinned partitions) is refused:
partitions cannot move with their data yet.`,
		Args: cobra.ExactArgs(1),
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
		return explain(err)
	}
	if _, ok := before.Node(cluster.NodeID(id)); !ok {
		return fmt.Errorf("node %q is not in the cluster map: list the nodes with `octoctl nodes`", id)
	}
	m, err := call(c, ctx, cluster.NodeID(id))
	if err != nil {
		return explain(err)
	}
	if f.json {
		return printJSON(cmd.OutOrStdout(), m)
	}
	return printMoves(cmd.OutOrStdout(), id, verb, before, m)
}

// printMoves reports a change, how many partitions changed owner, and the
// file-system data a forced removal lost.
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
	if lost := before.PinnedOf(cluster.NodeID(id)); len(lost) > 0 && !slices.ContainsFunc(lost, after.IsPinned) {
		fmt.Fprintf(w, "file-system data in %d partitions was lost with %s: %s\n", len(lost), id, partitionList(lost))
	}
	t := newTable(w, "ID", "STATE", "PARTITIONS", "PINNED")
	counts, pinned := after.PartitionCounts(), after.PinnedCounts()
	for _, n := range after.Nodes {
		if n.State != cluster.StateRemoved || string(n.ID) == id {
			t.row(string(n.ID), string(n.State), fmt.Sprint(counts[n.ID]), fmt.Sprint(pinned[n.ID]))
		}
	}
	return t.flush()
}

// partitionList prints partition numbers as ranges: 0-3,7,9-12.
func partitionList(ps []uint32) string {
	var b strings.Builder
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if i == j {
			fmt.Fprintf(&b, "%d", ps[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", ps[i], ps[j])
		}
		i = j + 1
	}
	return b.String()
}
