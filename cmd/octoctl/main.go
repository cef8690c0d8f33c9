// Command octoctl is the operator's tool for an octofs cluster: status,
// membership, offline checks and benchmarks.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "octoctl:", err)
		os.Exit(1)
	}
}

// newRootCmd builds the command tree. Each subcommand lives in its own file
// and is added here, so the tree is visible in one place.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "octoctl",
		Short:         "Operate an octofs cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newBenchCmd(),
		newStatusCmd(),
		newNodesCmd(),
		newMapCmd(),
		newJoinCmd(),
		newRemoveCmd(),
		newDrainCmd(),
		newFsckCmd(),
		newFSCmd(),
		newProbeCmd(),
	)
	return root
}
