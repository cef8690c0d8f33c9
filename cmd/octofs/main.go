// Command octofs runs the parts of an octofs cluster: `octofs serve` for a
// storage node and `octofs mount` for a client.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "octofs:", err)
		os.Exit(1)
	}
}

// newRootCmd builds the command tree; each subcommand lives in its own file.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "octofs",
		Short:         "A distributed persistent-memory file system over RDMA",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newFormatCmd(),
		newServeCmd(),
		newMountCmd(),
	)
	return root
}
