package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
)

// This file is `octoctl fs`: file system commands for operators and
// scripts, through the client library's native API (package client), the
// same code the FUSE mount uses. The commands' work is in fs_ops.go, on a
// *client.FS, so that tests run it against client.Memory.

func newFSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fs",
		Short: "Use the file system without mounting it: ls, stat, mkdir, put, get, cat, rm, mv, ln, chmod, chown, df",
		Long: `File system commands that reach the cluster through the client library
(metadata RPCs and one-sided RDMA), without FUSE. Paths are absolute in the
cluster's namespace. They act as the calling user (uid, gid and groups of
this process) unless --uid/--gid say otherwise; the nodes check permissions.

  octoctl fs mkdir -p /data/in --token-file d1/token
  octoctl fs put -r ./src /data/in --token-file d1/token
  octoctl fs ls -l /data/in/src --token-file d1/token
  octoctl fs get /data/in/src/main.go - --token-file d1/token`,
	}
	cmd.AddCommand(
		newFSLsCmd(), newFSStatCmd(), newFSMkdirCmd(), newFSPutCmd(), newFSGetCmd(), newFSCatCmd(),
		newFSRmCmd(), newFSMvCmd(), newFSLnCmd(), newFSChmodCmd(), newFSChownCmd(), newFSDfCmd(),
	)
	return cmd
}

// fsFlags are the connection flags of every fs command: the cluster's
// (--server, --token...), the RDMA device's, and whom to act as.
type fsFlags struct {
	cluster  *clusterFlags
	provider string
	device   string
	gidIndex int
	softAddr string
	uid      int
	gid      int
}

func addFSFlags(cmd *cobra.Command) *fsFlags {
	f := &fsFlags{cluster: addClusterFlags(cmd)}
	fl := cmd.Flags()
	fl.StringVar(&f.provider, "provider", provider.Default, "RDMA provider: "+strings.Join(provider.Names(), "|"))
	fl.StringVar(&f.device, "device", "", "verbs: device name such as rxe0 (default: the first active one)")
	fl.IntVar(&f.gidIndex, "gid-index", -1, "verbs: GID index (negative: pick a RoCE v2 GID automatically)")
	fl.StringVar(&f.softAddr, "soft-addr", "", "soft provider: host:port of this client's software NIC (default: the address that reaches the first --server, port 0)")
	fl.IntVar(&f.uid, "uid", -1, "act as this uid (default: this process's)")
	fl.IntVar(&f.gid, "gid", -1, "act as this gid (default: this process's)")
	return f
}

// fsSession is an open connection to the cluster for one command.
type fsSession struct {
	c    *client.Client
	fsys *client.FS
	// json is --json: print for scripts.
	json bool
}

// open connects to the cluster. --timeout bounds connecting and every
// single operation, not the command: a large put runs as long as it must.
func (f *fsFlags) open(cmd *cobra.Command) (*fsSession, error) {
	tok, err := f.cluster.tokenValue()
	if err != nil {
		return nil, err
	}
	if tok == "" {
		return nil, errors.New("file system commands need the cluster token: pass --token-file <data-dir>/token (of any node), --token or OCTOFS_TOKEN")
	}
	tc, err := f.cluster.tlsConfig()
	if err != nil {
		return nil, err
	}
	dev := rdma.DeviceConfig{Device: f.device, GIDIndex: f.gidIndex, Addr: f.softAddr}
	if dev.Addr == "" && f.provider == "soft" && len(f.cluster.servers) > 0 {
		if host, err := localHostFor(adminHostPort(f.cluster.servers[0])); err == nil {
			dev.Addr = net.JoinHostPort(host, "0")
		}
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.cluster.timeout)
	defer cancel()
	c, err := client.New(ctx, client.Config{
		Admin: f.cluster.servers, Token: tok, AdminTLS: tc,
		Provider: f.provider, Device: dev, Name: "octoctl", OpTimeout: f.cluster.timeout,
	})
	if err != nil {
		return nil, err
	}
	cred := client.ProcessCred()
	if f.uid >= 0 {
		cred.UID = uint32(f.uid)
	}
	if f.gid >= 0 {
		cred.GID = uint32(f.gid)
		cred.Groups = nil
	}
	return &fsSession{c: c, fsys: c.FS(cred).WithContext(cmd.Context()), json: f.cluster.json}, nil
}

func (s *fsSession) close() { s.c.Close() }

// adminHostPort turns an admin address or URL into host:port.
func adminHostPort(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	return s
}

// fsCommand builds an fs subcommand whose body runs on an open session.
func fsCommand(use, short string, args cobra.PositionalArgs, setup func(*cobra.Command), run func(cmd *cobra.Command, s *fsSession, args []string) error) *cobra.Command {
	var f *fsFlags
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.close()
			return run(cmd, s, args)
		},
	}
	f = addFSFlags(cmd)
	if setup != nil {
		setup(cmd)
	}
	return cmd
}

func newFSLsCmd() *cobra.Command {
	var long bool
	return fsCommand("ls [-l] PATH...", "List directories (sorted by name) or show files", cobra.MinimumNArgs(1),
		func(cmd *cobra.Command) {
			cmd.Flags().BoolVarP(&long, "long", "l", false, "mode, links, owner, group, size, mtime")
		},
		func(cmd *cobra.Command, s *fsSession, args []string) error {
			return fsList(cmd.OutOrStdout(), s.fsys, args, long)
		})
}

func newFSStatCmd() *cobra.Command {
	return fsCommand("stat PATH...", "Show every attribute of files (inode, generation, mode, times; --json for scripts)", cobra.MinimumNArgs(1), nil,
		func(cmd *cobra.Command, s *fsSession, args []string) error {
			return fsStat(cmd.OutOrStdout(), s.fsys, args, s.json)
		})
}

func newFSMkdirCmd() *cobra.Command {
	var parents bool
	var mode string
	return fsCommand("mkdir [-p] PATH...", "Make directories", cobra.MinimumNArgs(1),
		func(cmd *cobra.Command) {
			cmd.Flags().BoolVarP(&parents, "parents", "p", false, "make missing parents; no error if the directory exists")
			cmd.Flags().StringVarP(&mode, "mode", "m", "755", "permission bits, octal")
		},
		func(cmd *cobra.Command, s *fsSession, args []string) error {
			perm, err := parseMode(mode)
			if err != nil {
				return err
			}
			for _, p := range args {
				if parents {
					err = s.fsys.MkdirAll(p, perm)
				} else {
					err = s.fsys.Mkdir(p, perm)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
}

func newFSPutCmd() *cobra.Command {
	var recursive bool
	return fsCommand("put [-r] LOCAL REMOTE", "Copy a local file (or tree with -r; - for standard input) into the cluster", cobra.ExactArgs(2),
		func(cmd *cobra.Command) {
			cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy directories with everything under them")
		},
		func(cmd *cobra.Command, s *fsSession, args []string) error {
			st, err := fsPut(s.fsys, cmd.InOrStdin(), args[0], args[1], recursive)
			if err == nil {
				fmt.Fprintln(cmd.ErrOrStderr(), st)
			}
			return err
		})
}

func newFSGetCmd() *cobra.Command {
	var recursive bool
	return fsCommand("get [-r] REMOTE LOCAL", "Copy a file (or tree with -r) out of the cluster (- for standard output)", cobra.ExactArgs(2),
		func(cmd *cobra.Command) {
			cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy directories with everything under them")
		},
		func(cmd *cobra.Command, s *fsSession, args []string) error {
			st, err := fsGet(s.fsys, cmd.OutOrStdout(), args[0], args[1], recursive)
			if err == nil && args[1] != "-" {
				fmt.Fprintln(cmd.ErrOrStderr(), st)
			}
			return err
		})
}

func newFSCatCmd() *cobra.Command {
	return fsCommand("cat PATH...", "Write files to standard output", cobra.MinimumNArgs(1), nil,
		func(cmd *cobra.Command, s *fsSession, args []string) error {
			for _, p := range args {
				if _, err := fsGet(s.fsys, cmd.OutOrStdout(), p, "-", false); err != nil {
					return err
				}
			}
			return nil
		})
}

func newFSRmCmd() *cobra.Command {
	var recursive, force bool
	return fsCommand("rm [-r] [-f] PATH...", "Remove files, empty directories, or trees with -r", cobra.MinimumNArgs(1),
		func(cmd *cobra.Command) {
			cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories with everything under them")
			cmd.Flags().BoolVarP(&force, "force", "f", false, "no error for paths that do not exist")
		},
		func(cmd *cobra.Command, s *fsSession, args []string) error {
			return fsRemove(s.fsys, args, recursive, force)
		})
}

func newFSMvCmd() *cobra.Command {
	var noReplace, exchange bool
	return fsCommand("mv OLD NEW", "Rename (atomically, also across directories and nodes)", cobra.ExactArgs(2),
		func(cmd *cobra.Command) {
			cmd.Flags().BoolVarP(&noReplace, "no-clobber", "n", false, "fail if NEW exists (RENAME_NOREPLACE)")
			cmd.Flags().BoolVar(&exchange, "exchange", false, "swap OLD and NEW (RENAME_EXCHANGE)")
		},
		func(cmd *cobra.Command, s *fsSession, args []string) error {
			var flags uint32
			if noReplace {
				flags |= client.RenameNoReplace
			}
			if exchange {
				flags |= client.RenameExchange
			}
			return s.fsys.Rename2(args[0], args[1], flags)
		})
}

func newFSLnCmd() *cobra.Command {
	var symbolic bool
	return fsCommand("ln [-s] TARGET NAME", "Make a hard link, or a symbolic link with -s", cobra.ExactArgs(2),
		func(cmd *cobra.Command) {
			cmd.Flags().BoolVarP(&symbolic, "symbolic", "s", false, "make a symbolic link whose target is TARGET as given")
		},
		func(cmd *cobra.Command, s *fsSession, args []string) error {
			if symbolic {
				return s.fsys.Symlink(args[0], args[1])
			}
			return s.fsys.Link(args[0], args[1])
		})
}

func newFSChmodCmd() *cobra.Command {
	return fsCommand("chmod MODE PATH...", "Change permission bits (octal MODE, e.g. 644 or 1777)", cobra.MinimumNArgs(2), nil,
		func(cmd *cobra.Command, s *fsSession, args []string) error {
			m, err := parseMode(args[0])
			if err != nil {
				return err
			}
			for _, p := range args[1:] {
				if err := s.fsys.Chmod(p, m); err != nil {
					return err
				}
			}
			return nil
		})
}

func newFSChownCmd() *cobra.Command {
	return fsCommand("chown UID[:GID] PATH...", "Change owner and group (numeric ids)", cobra.MinimumNArgs(2), nil,
		func(cmd *cobra.Command, s *fsSession, args []string) error {
			uid, gid, err := parseOwner(args[0])
			if err != nil {
				return err
			}
			for _, p := range args[1:] {
				if err := s.fsys.Chown(p, uid, gid); err != nil {
					return err
				}
			}
			return nil
		})
}

func newFSDfCmd() *cobra.Command {
	return fsCommand("df", "Show the cluster's capacity and free space (summed over the nodes)", cobra.NoArgs, nil,
		func(cmd *cobra.Command, s *fsSession, _ []string) error {
			st, err := s.fsys.StatFS()
			if err != nil {
				return err
			}
			return fsDf(cmd.OutOrStdout(), st)
		})
}

// parseMode parses an octal mode such as 644, 0755 or 1777.
func parseMode(s string) (os.FileMode, error) {
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, fmt.Errorf("mode %q: give octal permission bits such as 644 or 1777", s)
	}
	m := os.FileMode(v & 0o777)
	if v&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if v&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if v&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m, nil
}

// parseOwner parses UID, UID:GID or :GID (numeric).
func parseOwner(s string) (uid, gid int, err error) {
	u, g, hasGroup := strings.Cut(s, ":")
	uid, gid = -1, -1
	bad := fmt.Errorf("owner %q: give numeric UID, UID:GID or :GID", s)
	if u != "" {
		if uid, err = strconv.Atoi(u); err != nil || uid < 0 {
			return 0, 0, bad
		}
	}
	if hasGroup && g != "" {
		if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
			return 0, 0, bad
		}
	}
	if uid < 0 && gid < 0 {
		return 0, 0, bad
	}
	return uid, gid, nil
}

// formatTime is how ls -l shows a time.
func formatTime(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") }
