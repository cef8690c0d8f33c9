package main

import (
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
	cluster      []string
	tokenFile    string
	provider     string
	rdmaDevice   string
	softAddr     string
	daemon       bool
	logFile      string
	logLevel     string
	entryTimeout time.Duration
	attrTimeout  time.Duration
	negTimeout   time.Duration
	noCache      bool
	opTimeout    time.Duration
	allowOther   string
	debug        bool
	readyFD      int
}

// daemonEnv marks the child of `octofs mount --daemon`: it runs in the
// foreground, with its own session, and reports on fd 3 when mounted.
const daemonEnv = "OCTOFS_MOUNT_DAEMON_CHILD"

func newMountCmd() *cobra.Command {
	o := &mountOptions{}
	cmd := &cobra.Command{
		Use:   "mount --cluster ADDR[,ADDR...] MOUNTPOINT",
		Short: "Mount an octofs cluster with FUSE",
		Long: `Mount an octofs cluster at MOUNTPOINT. ADDR is the admin address of any
cluster member (the client follows the cluster map from there). The cluster
token comes from --token-file or the OCTOFS_TOKEN environment variable.

Mounted by root, the file system serves every local user (allow_other), and
the cluster checks each caller's permissions. The mount runs in the
foreground until it is unmounted (fusermount3 -u MOUNTPOINT, umount
MOUNTPOINT) or receives SIGINT or SIGTERM, which unmount it; --daemon
returns once the file system is mounted and serves it in the background.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if o.daemon && os.Getenv(daemonEnv) == "" {
				return startMountDaemon(o, args[0], cmd.ErrOrStderr())
			}
			return runMount(ctx, o, args[0], cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.cluster, "cluster", nil, "admin address(es) of cluster members, host:port (required)")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the cluster token (or set OCTOFS_TOKEN)")
	f.StringVar(&o.provider, "rdma-provider", provider.Default, "RDMA provider: "+strings.Join(provider.Names(), ", "))
	f.StringVar(&o.rdmaDevice, "rdma-device", "", "verbs: device name such as rxe0 (default: the first active one)")
	f.StringVar(&o.softAddr, "soft-addr", "", "soft provider: host:port of this client's software NIC (default: loopback, any port)")
	f.BoolVar(&o.daemon, "daemon", false, "return once mounted and keep serving in the background")
	f.StringVar(&o.logFile, "log-file", "", "write logs here (default: standard error; with --daemon, /dev/null)")
	f.StringVar(&o.logLevel, "log-level", "warn", "debug, info, warn or error")
	f.DurationVar(&o.entryTimeout, "entry-timeout", fuse.DefaultTimeout, "how long the kernel trusts a name lookup")
	f.DurationVar(&o.attrTimeout, "attr-timeout", fuse.DefaultTimeout, "how long the kernel trusts an inode's attributes")
	f.DurationVar(&o.negTimeout, "negative-timeout", 0, "how long the kernel remembers that a name does not exist")
	f.BoolVar(&o.noCache, "no-cache", false, "ask the cluster for every lookup and getattr (sees other mounts' changes at once)")
	f.DurationVar(&o.opTimeout, "op-timeout", client.DefaultOpTimeout, "a call that cannot complete within this fails with ETIMEDOUT or EIO")
	f.StringVar(&o.allowOther, "allow-other", "auto", "let every local user use the mount: yes, no or auto (yes when root)")
	f.BoolVar(&o.debug, "debug", false, "log every FUSE request")
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
	softAddr := o.softAddr
	if softAddr == "" {
		softAddr = "127.0.0.1:0"
	}
	hostname, _ := os.Hostname()
	c, err := client.New(ctx, client.Config{
		Admin:     o.cluster,
		Token:     token,
		Provider:  o.provider,
		Device:    rdma.DeviceConfig{Device: o.rdmaDevice, GIDIndex: rdma.AutoGID, Addr: softAddr, Logger: log},
		Name:      fmt.Sprintf("mount %s:%s", hostname, dir),
		Logger:    log,
		OpTimeout: o.opTimeout,
	})
	if err != nil {
		return fmt.Errorf("connect to the cluster: %w", err)
	}
	defer c.Close()
	srv, err := fuse.Mount(dir, c, fuse.Options{
		EntryTimeout: o.entryTimeout, AttrTimeout: o.attrTimeout, NegativeTimeout: o.negTimeout,
		NoCache: o.noCache, AllowOther: allow, Debug: o.debug, Logger: log,
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
	reportReady()
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

// reportReady tells the parent of a daemon child that the mount is up.
func reportReady() {
	if os.Getenv(daemonEnv) == "" {
		return
	}
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
	ready := make(chan bool, 1)
	go func() {
		b := make([]byte, 3)
		n, _ := io.ReadFull(r, b)
		ready <- n == 3
	}()
	select {
	case ok := <-ready:
		if ok {
			fmt.Fprintf(stderr, "octofs: mounted %s (pid %d)\n", abs, cmd.Process.Pid)
			return nil
		}
		err := <-exited
		return fmt.Errorf("mount failed (%v); see %s", err, logPath)
	case err := <-exited:
		return fmt.Errorf("mount failed (%v); see %s", err, logPath)
	}
}
