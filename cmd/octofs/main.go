// Command octofs runs the parts of an octofs cluster: `octofs serve` for a
// storage node and `octofs mount` for a client.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

func main() {
	root := newRootCmd()
	// As a mount helper (mount.octofs, or `octofs ADDR DIR -o ...` from
	// mount.fuse3), the command line becomes an `octofs mount` one; the
	// daemon child re-runs os.Args, so they change too.
	args, err := helperArgs(filepath.Base(os.Args[0]), os.Args[1:])
	if errors.Is(err, errFakeMount) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "octofs: mount helper:", err)
		os.Exit(1)
	}
	if args != nil {
		os.Args = append(os.Args[:1], args...)
		root.SetArgs(args)
	}
	if err := root.Execute(); err != nil {
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
