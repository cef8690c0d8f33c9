package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/fuse"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
)

// mountOptions are the flags of `octofs mount`.
type mountOptions struct {
	cluster        []string
	tokenFile      string
	provider       string
	rdmaDevice     string
	softAddr       string
	daemon         bool
	logFile        string
	logLevel       string
	entryTimeout   time.Duration
	attrTimeout    time.Duration
	negTimeout     time.Duration
	noCache        bool
	noACL          bool
	serverPerms    bool
	maxWrite       int
	writeBehind    int
	readAhead      int
	background     int
	opTimeout      time.Duration
	connectTimeout time.Duration
	// reported is set once a daemon child has told its parent how the
	// mount went (fd 3 is closed then, and may be reused).
	reported   bool
	allowOther string
	debug      bool
	readOnly   bool
	noAtime    bool
	noExec     bool
	// fsName is the source /proc/mounts shows (the mount helper sets
	// the cluster addresses, as fstab names them).
	fsName string
}

// daemonEnv marks the child of `octofs mount --daemon`: it runs in the
// foreground, with its own session, and reports on fd 3 when mounted.
const daemonEnv = "OCTOFS_MOUNT_DAEMON_CHILD"

// maxWriteBehind bounds --write-behind: the client keeps at most 64 MiB
// behind over all its files anyway.
const maxWriteBehind = 64 << 20

func newMountCmd() *cobra.Command {
	o := &mountOptions{}
	cmd := &cobra.Command{
		Use:   "mount --cluster ADDR[,ADDR...] MOUNTPOINT",
		Short: "Mount an octofs cluster with FUSE",
		Long: `Mount an octofs cluster at MOUNTPOINT. ADDR is the admin address of any
cluster member (the client follows the cluster map from there). The cluster
token comes from --token-file or the OCTOFS_TOKEN environment variable.

Mounted by root, the file system serves every local user (allow_other):
the kernel checks each caller's permissions with the attributes it caches
(default_permissions) and the cluster checks them again. The mount runs in
the foreground until it is unmounted (fusermount3 -u MOUNTPOINT, umount
MOUNTPOINT) or receives SIGINT or SIGTERM, which unmount it; --daemon
returns once the file system is mounted and serves it in the background.

Defaults are set for speed within close-to-open consistency: 1 MiB reads
and writes, 1 MiB read-ahead with 64 requests in flight, names and
attributes trusted for 1s, no negative caching, requests served in
parallel; no writeback cache (see docs/fuse.md for why and for every
option).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if o.daemon && os.Getenv(daemonEnv) == "" {
				return startMountDaemon(o, args[0], cmd.ErrOrStderr())
			}
			err := runMount(ctx, o, args[0], cmd.ErrOrStderr())
			if err != nil {
				o.reportFailure(err)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.cluster, "cluster", nil, "admin address(es) of cluster members, host:port (required)")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the cluster token (or set OCTOFS_TOKEN)")
	f.StringVar(&o.provider, "rdma-provider", provider.Default, "RDMA provider: "+strings.Join(provider.Names(), ", "))
	f.StringVar(&o.rdmaDevice, "rdma-device", "", "verbs: device name such as rxe0 (default: the first active one)")
	f.StringVar(&o.softAddr, "soft-addr", "", "soft provider: host:port of this client's software NIC, which the nodes must reach (default: the local address that routes to the first --cluster address, any port)")
	f.BoolVar(&o.daemon, "daemon", false, "return once mounted and keep serving in the background")
	f.StringVar(&o.logFile, "log-file", "", "write logs here (default: standard error; with --daemon, /dev/null)")
	f.StringVar(&o.logLevel, "log-level", "warn", "debug, info, warn or error")
	f.DurationVar(&o.entryTimeout, "entry-timeout", fuse.DefaultTimeout, "how long the kernel trusts a name lookup")
	f.DurationVar(&o.attrTimeout, "attr-timeout", fuse.DefaultTimeout, "how long the kernel trusts an inode's attributes")
	f.DurationVar(&o.negTimeout, "negative-timeout", 0, "how long the kernel remembers that a name does not exist")
	f.BoolVar(&o.noCache, "no-cache", false, "ask the cluster for every lookup and getattr (sees other mounts' changes at once)")
	f.BoolVar(&o.noACL, "no-acl", false, "turn POSIX ACLs off (setfacl fails with EOPNOTSUPP; by default the kernel enforces them and the cluster keeps them)")
	f.BoolVar(&o.serverPerms, "server-permissions", false, "leave every permission check to the cluster, none to the kernel (implies --no-cache; for testing the cluster)")
	f.IntVar(&o.maxWrite, "max-write", fuse.DefaultMaxWrite, "largest read or write request the kernel sends, in bytes (at most 1 MiB)")
	f.IntVar(&o.writeBehind, "write-behind", fuse.DefaultMaxWrite, "bytes of small sequential writes to a file collected before they go to the cluster as one write (0: none); other mounts see them at close or fsync either way")
	f.IntVar(&o.readAhead, "max-readahead", fuse.DefaultMaxReadAhead, "the kernel's read-ahead, in bytes (set through sysfs, which takes root)")
	f.IntVar(&o.background, "max-background", fuse.DefaultMaxBackground, "asynchronous requests (read-ahead) the kernel keeps in flight")
	f.DurationVar(&o.opTimeout, "op-timeout", client.DefaultOpTimeout, "a call that cannot complete within this fails with ETIMEDOUT or EIO")
	f.DurationVar(&o.connectTimeout, "connect-timeout", 30*time.Second, "give up if the cluster cannot be reached within this")
	f.StringVar(&o.allowOther, "allow-other", "auto", "let every local user use the mount: yes, no or auto (yes when root)")
	f.BoolVar(&o.debug, "debug", false, "log every FUSE request")
	f.BoolVar(&o.readOnly, "read-only", false, "mount read-only: every change fails with EROFS, reads leave atime alone")
	f.BoolVar(&o.noAtime, "noatime", false, "reads and listings leave atime alone (default: relatime)")
	f.BoolVar(&o.noExec, "noexec", false, "refuse to execute files of the mount")
	f.StringVar(&o.fsName, "fsname", "", "the source shown in /proc/mounts and by df (default: octofs)")
	return cmd
}

func readToken(file string) (string, error) {
	if file != "" {
		t, err := cluster.ReadTokenFile(file)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return t, nil
	}
	if t := os.Getenv("OCTOFS_TOKEN"); t != "" {
		return t, nil
	}
	return "", errors.New("no cluster token: give --token-file (the file <data-dir>/token of any node) or set OCTOFS_TOKEN")
}

func runMount(ctx context.Context, o *mountOptions, dir string, stderr io.Writer) (err error) {
	if len(o.cluster) == 0 {
		return errors.New("--cluster is required: the admin address of any cluster member, e.g. --cluster 127.0.0.1:7400")
	}
	token, err := readToken(o.tokenFile)
	if err != nil {
		return err
	}
	logOut := stderr
	if o.logFile != "" {
		f, err := os.OpenFile(o.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("--log-file: %w", err)
		}
		defer f.Close()
		logOut = f
	}
	log, err := newLogger(logOut, o.logLevel, "text")
	if err != nil {
		return err
	}
	allow, err := parseAllowOther(o.allowOther)
	if err != nil {
		return err
	}
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("mount point: %w", err)
	} else if !st.IsDir() {
		return fmt.Errorf("mount point %s is not a directory", dir)
	}
	// An empty soft address lets the client pick the local address that
	// routes to the cluster, which the nodes can reach back.
	softAddr := o.softAddr
	hostname, _ := os.Hostname()
	cctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
	defer cancel()
	c, err := client.New(cctx, client.Config{
		Admin:     o.cluster,
		Token:     token,
		Provider:  o.provider,
		Device:    rdma.DeviceConfig{Device: o.rdmaDevice, GIDIndex: rdma.AutoGID, Addr: softAddr, Logger: log},
		Name:      fmt.Sprintf("mount %s:%s", hostname, dir),
		Logger:    log,
		OpTimeout: o.opTimeout,
	})
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("connect to the cluster: no answer within --connect-timeout %v: %w (check --cluster %s, that the nodes run, and the token)",
				o.connectTimeout, err, strings.Join(o.cluster, ","))
		}
		return fmt.Errorf("connect to the cluster: %w", err)
	}
	defer c.Close()
	if o.maxWrite > fuse.DefaultMaxWrite || o.maxWrite < 4096 {
		return fmt.Errorf("--max-write %d: give 4096 to %d", o.maxWrite, fuse.DefaultMaxWrite)
	}
	if o.writeBehind != 0 && (o.writeBehind < 8192 || o.writeBehind > maxWriteBehind) {
		return fmt.Errorf("--write-behind %d: give 0 (none) or 8192 to %d", o.writeBehind, maxWriteBehind)
	}
	srv, err := fuse.Mount(dir, c, fuse.Options{
		EntryTimeout: o.entryTimeout, AttrTimeout: o.attrTimeout, NegativeTimeout: o.negTimeout,
		NoCache: o.noCache, ServerPermissions: o.serverPerms, NoACL: o.noACL, AllowOther: allow, Debug: o.debug, Logger: log,
		MaxWrite: o.maxWrite, MaxReadAhead: o.readAhead, MaxBackground: o.background,
		WriteBehind: cmp.Or(o.writeBehind, -1),
		ReadOnly:    o.readOnly, NoAtime: o.noAtime, NoExec: o.noExec, FSName: o.fsName,
	})
	if err != nil {
		return err
	}
	log.Info("mounted", "dir", dir, "cluster", strings.Join(o.cluster, ","))
	if os.Getenv(daemonEnv) != "" {
		// Relative paths of the command line are resolved by now; a
		// daemon keeps no directory of the caller's busy.
		os.Chdir("/")
	}
	o.reportReady()
	done := make(chan struct{})
	go func() {
		srv.Wait()
		close(done)
	}()
	select {
	case <-done:
		log.Info("unmounted from outside", "dir", dir)
		return nil
	case <-ctx.Done():
	}
	log.Info("signal received; unmounting", "dir", dir)
	if err := unmountRetry(srv, done); err != nil {
		return fmt.Errorf("unmount %s: %w (files are still open in it; close them and run fusermount3 -u %s)", dir, err, dir)
	}
	return nil
}

// unmountRetry unmounts, retrying for a few seconds while the mount is busy.
func unmountRetry(srv *fuse.Server, done <-chan struct{}) error {
	var err error
	for range 50 {
		if err = srv.Unmount(); err == nil {
			<-done
			return nil
		}
		select {
		case <-done:
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
	return err
}

func parseAllowOther(s string) (*bool, error) {
	var v bool
	switch s {
	case "auto", "":
		return nil, nil
	case "yes", "true":
		v = true
	case "no", "false":
		v = false
	default:
		return nil, fmt.Errorf("--allow-other %q: use yes, no or auto", s)
	}
	return &v, nil
}

// reportFailure tells the parent of a daemon child why the mount failed,
// so that `octofs mount --daemon` prints the reason, not only a log file.
func (o *mountOptions) reportFailure(err error) {
	if os.Getenv(daemonEnv) == "" || o.reported {
		return
	}
	o.reported = true
	if f := os.NewFile(3, "ready"); f != nil {
		fmt.Fprintf(f, "error: %v\n", err)
		f.Close()
	}
}

// reportReady tells the parent of a daemon child that the mount is up.
func (o *mountOptions) reportReady() {
	if os.Getenv(daemonEnv) == "" || o.reported {
		return
	}
	o.reported = true
	f := os.NewFile(3, "ready")
	if f != nil {
		f.Write([]byte("ok\n"))
		f.Close()
	}
}

// startMountDaemon re-runs this command as a detached child and returns
// once the child has mounted (or failed, with its error).
func startMountDaemon(o *mountOptions, dir string, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--daemon: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("--daemon: %w", err)
	}
	defer r.Close()
	logPath := o.logFile
	if logPath == "" {
		logPath = os.DevNull
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		w.Close()
		return fmt.Errorf("--log-file: %w", err)
	}
	defer logf.Close()
	abs, err := filepath.Abs(dir)
	if err != nil {
		w.Close()
		return err
	}
	args := append([]string{}, os.Args[1:]...)
	for i, a := range args {
		if a == dir {
			args[i] = abs
		}
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), daemonEnv+"=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("--daemon: %w", err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The child writes "ok" once mounted, or "error: why", on fd 3.
	ready := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
		ready <- strings.TrimSpace(string(b))
	}()
	msg := <-ready
	if msg == "ok" {
		fmt.Fprintf(stderr, "octofs: mounted %s (pid %d)\n", abs, cmd.Process.Pid)
		return nil
	}
	err = <-exited
	if why, ok := strings.CutPrefix(msg, "error: "); ok {
		return fmt.Errorf("%s (log: %s)", why, logPath)
	}
	return fmt.Errorf("mount failed (%v); see %s", err, logPath)
}
