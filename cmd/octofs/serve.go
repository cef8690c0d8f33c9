package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/rdma/provider"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Default ports: a node's admin API and raft. A second node on the same
// machine needs other ports and another data directory, nothing else.
const (
	defaultAdminAddr = "127.0.0.1:7400"
	defaultRaftAddr  = "127.0.0.1:7401"
	defaultDataDir   = "/var/lib/octofs"
)

// serveOptions are the flags of `octofs serve`; a config file may set any
// of them (flags given on the command line win).
type serveOptions struct {
	configFile    string
	dataDir       string
	nodeID        string
	adminAddr     string
	raftAddr      string
	advertiseHost string
	join          []string
	bootstrap     bool
	tokenFile     string
	joinSecret    string
	partitions    int
	placement     string
	maxVoters     int
	heartbeat     time.Duration
	downAfter     time.Duration
	tlsCert       string
	tlsKey        string
	tlsCA         string
	logLevel      string
	logFormat     string

	storage storageOptions
}

// storageSide is what the control plane needs from a node's data side: the
// RDMA address clients connect to and the region it exports.
type storageSide interface {
	RDMAAddr() string
	Region() cluster.RegionDescriptor
	Close() error
}

// noStorage is the storage side of a node started without --pmem: a
// control-plane-only member.
type noStorage struct{}

func (noStorage) RDMAAddr() string                 { return "" }
func (noStorage) Region() cluster.RegionDescriptor { return cluster.RegionDescriptor{} }
func (noStorage) Close() error                     { return nil }

func newServeCmd() *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a storage node: raft member, cluster map, admin API",
		Long: `Run an octofs node. The first node of a new cluster is started with
--bootstrap; it creates the cluster token in <data-dir>/token. Other nodes
join with --join ADDR (the admin address of any member) and the token
(--token-file or OCTOFS_TOKEN). A node restarted on its data directory
rejoins by itself; --bootstrap and --join are then ignored. A node started
with neither waits to be added with ` + "`octoctl join`" + `, which must present
this node's join secret (<data-dir>/join-secret) or, if the node was given
one, the cluster token.

A three-node cluster on one machine:

  octofs serve --bootstrap --data-dir d1 --admin-addr 127.0.0.1:7400 --raft-addr 127.0.0.1:7401
  octofs serve --join 127.0.0.1:7400 --token-file d1/token --data-dir d2 --admin-addr 127.0.0.1:7410 --raft-addr 127.0.0.1:7411
  octofs serve --join 127.0.0.1:7400 --token-file d1/token --data-dir d3 --admin-addr 127.0.0.1:7420 --raft-addr 127.0.0.1:7421`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.configFile != "" {
				if err := applyConfigFile(cmd.Flags(), o.configFile); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.configFile, "config", "", "JSON file whose keys are flag names (\"data-dir\": \"...\"); flags on the command line win")
	f.StringVar(&o.dataDir, "data-dir", defaultDataDir, "directory for the raft log, snapshots, node id and token")
	f.StringVar(&o.nodeID, "node-id", "", "node id (default: the one stored in --data-dir, or a new random one)")
	f.StringVar(&o.adminAddr, "admin-addr", defaultAdminAddr, "admin API listen address (HTTP, JSON, /metrics)")
	f.StringVar(&o.raftAddr, "raft-addr", defaultRaftAddr, "raft listen address")
	f.StringVar(&o.advertiseHost, "advertise-host", "", "host other nodes reach this one at (needed when listening on 0.0.0.0)")
	f.StringSliceVar(&o.join, "join", nil, "admin address(es) of cluster members to join through (first start only)")
	f.BoolVar(&o.bootstrap, "bootstrap", false, "create a new cluster with this node as its first member (first start only)")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the cluster token, for joining (or set OCTOFS_TOKEN)")
	f.StringVar(&o.joinSecret, "join-secret-file", "", "for a node that waits to be added: the secret `octoctl join` must present (default: a new one in <data-dir>/join-secret)")
	f.IntVar(&o.partitions, "partitions", cluster.DefaultPartitions, "number of partitions of a new cluster (with --bootstrap)")
	f.StringVar(&o.placement, "file-placement", string(cluster.PlaceWithDirectory),
		"where a new cluster (with --bootstrap) puts new files: \"directory\" (its directory's partition: create and unlink are one node's commit) or \"hash\" (spread by name: most creates are cross-node transactions); directories always spread")
	f.IntVar(&o.maxVoters, "max-voters", 3, "raft voters (3 or 5); further nodes are non-voters")
	f.DurationVar(&o.heartbeat, "heartbeat-interval", time.Second, "how often this node heartbeats the leader")
	f.DurationVar(&o.downAfter, "down-after", 5*time.Second, "silence after which the leader marks a node down")
	f.StringVar(&o.tlsCert, "tls-cert", "", "certificate (PEM) for the admin API; with --tls-key enables HTTPS")
	f.StringVar(&o.tlsKey, "tls-key", "", "private key (PEM) for --tls-cert")
	f.StringVar(&o.tlsCA, "tls-ca", "", "CA (PEM) to verify other nodes' admin API (default: --tls-cert itself)")
	f.StringVar(&o.storage.pmemPath, "pmem", "", "the node's persistent-memory region: a devdax device, a file on a DAX file system, or a plain file (created if missing); without it the node is a control-plane-only member")
	f.Int64Var(&o.storage.pmemSize, "pmem-size", defaultPmemSize, "size in bytes of a region file created by --pmem")
	f.StringVar(&o.storage.pmemRequire, "pmem-require", "none", "refuse a weaker --pmem backing: none, durable (no tmpfs) or pmem (DAX only)")
	f.StringVar(&o.storage.rdmaProvider, "rdma-provider", provider.Default, "RDMA provider: "+strings.Join(provider.Names(), ", "))
	f.StringVar(&o.storage.rdmaAddr, "rdma-addr", defaultRDMAAddr, "where clients connect over RDMA to reach the region (host:port)")
	f.StringVar(&o.storage.rdmaDevice, "rdma-device", "", "verbs: device name such as rxe0 or mlx5_0 (default: the first active one)")
	f.StringVar(&o.storage.softAddr, "soft-addr", "", "soft provider: host:port of the software NIC (default: --rdma-addr's host, any port)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "text or json")
	return cmd
}

// applyConfigFile sets every flag named in the JSON file that was not given
// on the command line.
func applyConfigFile(fs *pflag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var kv map[string]any
	if err := json.Unmarshal(b, &kv); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	for k, v := range kv {
		fl := fs.Lookup(k)
		if fl == nil || k == "config" {
			return fmt.Errorf("config file %s: unknown key %q (keys are the flag names of octofs serve)", path, k)
		}
		if fl.Changed {
			continue
		}
		var s string
		switch v := v.(type) {
		case []any:
			parts := make([]string, len(v))
			for i, p := range v {
				parts[i] = fmt.Sprint(p)
			}
			s = strings.Join(parts, ",")
		case float64:
			s = fmt.Sprint(v)
			if v == float64(int64(v)) {
				s = fmt.Sprint(int64(v))
			}
		default:
			s = fmt.Sprint(v)
		}
		if err := fs.Set(k, s); err != nil {
			return fmt.Errorf("config file %s: %s: %w", path, k, err)
		}
	}
	return nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// listenAdvertised listens on addr and returns the listener and the address
// other nodes should use.
func listenAdvertised(what, addr, advertiseHost string) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s: listen on %s: %w (is another node using this port? pick another with --%s)", what, addr, err, what)
	}
	host, _, _ := net.SplitHostPort(addr)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if advertiseHost != "" {
		host = advertiseHost
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		ln.Close()
		return nil, "", fmt.Errorf("%s %s listens on all interfaces: give --advertise-host so other nodes can reach it", what, addr)
	}
	return ln, net.JoinHostPort(host, port), nil
}

func loadTLS(o *serveOptions) (server, client *tls.Config, err error) {
	if o.tlsCert == "" && o.tlsKey == "" {
		return nil, nil, nil
	}
	if o.tlsCert == "" || o.tlsKey == "" {
		return nil, nil, errors.New("--tls-cert and --tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
	if err != nil {
		return nil, nil, fmt.Errorf("TLS: %w", err)
	}
	caFile := o.tlsCA
	if caFile == "" {
		caFile = o.tlsCert
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("TLS CA: no certificate in %s", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// validate checks every flag before anything is opened, so that a typo
// fails at once and names the flag.
func (o *serveOptions) validate() error {
	switch {
	case o.bootstrap && len(o.join) > 0:
		return errors.New("--bootstrap creates a new cluster and --join joins one: give only one")
	case o.dataDir == "":
		return errors.New("--data-dir is empty: give the directory for this node's raft log, token and certificates")
	case o.nodeID != "" && !cluster.ValidNodeID(cluster.NodeID(o.nodeID)):
		return fmt.Errorf("--node-id %q: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", o.nodeID)
	case o.partitions < 1 || o.partitions > cluster.MaxPartitions:
		return fmt.Errorf("--partitions %d: a cluster has 1 to %d partitions (inode numbers carry the partition in %d bits); the default is %d",
			o.partitions, cluster.MaxPartitions, cluster.PartitionBits, cluster.DefaultPartitions)
	case !cluster.FilePlacement(o.placement).Valid():
		return fmt.Errorf("--file-placement %q: use %q or %q", o.placement, cluster.PlaceWithDirectory, cluster.PlaceHashed)
	case o.maxVoters < 1:
		return fmt.Errorf("--max-voters %d: must be at least 1 (3 or 5 recommended)", o.maxVoters)
	case o.heartbeat <= 0:
		return fmt.Errorf("--heartbeat-interval %v: must be positive", o.heartbeat)
	case o.downAfter <= 2*o.heartbeat:
		return fmt.Errorf("--down-after %v must exceed two --heartbeat-interval (%v): a node would be marked down between two heartbeats", o.downAfter, 2*o.heartbeat)
	}
	addrs := [][2]string{{"admin-addr", o.adminAddr}, {"raft-addr", o.raftAddr}}
	if o.storage.pmemPath != "" {
		addrs = append(addrs, [2]string{"rdma-addr", o.storage.rdmaAddr})
		if o.storage.softAddr != "" {
			addrs = append(addrs, [2]string{"soft-addr", o.storage.softAddr})
		}
	}
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a[1]); err != nil || port == "" {
			return fmt.Errorf("--%s %q: want host:port, such as 127.0.0.1:7400", a[0], a[1])
		}
	}
	if o.storage.pmemPath != "" {
		if _, err := parseRequirement(o.storage.pmemRequire); err != nil {
			return err
		}
		if o.storage.pmemSize <= 0 {
			return fmt.Errorf("--pmem-size %d: must be positive", o.storage.pmemSize)
		}
		if !slices.Contains(provider.Names(), o.storage.rdmaProvider) {
			return fmt.Errorf("--rdma-provider %q: this binary has %s", o.storage.rdmaProvider, strings.Join(provider.Names(), ", "))
		}
	}
	return nil
}

// tokenAdvice is what serve adds to a token error: how to give the token.
const tokenAdvice = "give the cluster's token with --token-file (a member's <data-dir>/token) or OCTOFS_TOKEN"

func runServe(ctx context.Context, o *serveOptions, stderr io.Writer) error {
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	token := os.Getenv("OCTOFS_TOKEN")
	if o.tokenFile != "" {
		if token, err = cluster.ReadTokenFile(o.tokenFile); err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
	}
	var joinSecret string
	if o.joinSecret != "" {
		if joinSecret, err = cluster.ReadTokenFile(o.joinSecret); err != nil {
			return fmt.Errorf("--join-secret-file: %w", err)
		}
	}
	serverTLS, clientTLS, err := loadTLS(o)
	if err != nil {
		return err
	}
	// One process per data directory: a second one fails here at once,
	// naming the first, before it opens the region or any port.
	lock, err := cluster.LockDataDir(o.dataDir)
	if err != nil {
		return err
	}
	defer func() {
		if lock != nil { // not handed to the node
			lock.Release()
		}
	}()
	// The storage side opens first, since the map records its region; it
	// learns the token from the node once the node runs.
	var node atomic.Pointer[cluster.Node]
	clusterToken := func() string {
		if n := node.Load(); n != nil {
			return n.Token()
		}
		return ""
	}
	storage, err := openPmemStorage(o, clusterToken, log)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	defer storage.Close()

	adminLn, adminAddr, err := listenAdvertised("admin-addr", o.adminAddr, o.advertiseHost)
	if err != nil {
		return err
	}
	raftLn, raftAddr, err := listenAdvertised("raft-addr", o.raftAddr, o.advertiseHost)
	if err != nil {
		adminLn.Close()
		return err
	}
	cfg := cluster.Config{
		ID:                cluster.NodeID(o.nodeID),
		DataDir:           o.dataDir,
		DataDirLock:       lock,
		AdminAddr:         adminAddr,
		AdminListener:     adminLn,
		AdminTLS:          serverTLS,
		ClientTLS:         clientTLS,
		RaftAddr:          raftAddr,
		RaftListener:      raftLn,
		RDMAAddr:          storage.RDMAAddr(),
		Region:            storage.Region(),
		Bootstrap:         o.bootstrap,
		Join:              o.join,
		Token:             token,
		JoinSecret:        joinSecret,
		Partitions:        o.partitions,
		FilePlacement:     cluster.FilePlacement(o.placement),
		MaxVoters:         o.maxVoters,
		HeartbeatInterval: o.heartbeat,
		DownAfter:         o.downAfter,
		Logger:            log,
	}
	lock = nil // Start owns it now, and releases it on failure
	n, err := cluster.Start(cfg)
	if err != nil {
		adminLn.Close()
		raftLn.Close()
		if errors.Is(err, cluster.ErrUnauthorized) {
			return fmt.Errorf("%w; %s", err, tokenAdvice)
		}
		return err
	}
	node.Store(n)
	log.Info("octofs node running", "node", n.ID(), "admin", adminAddr, "raft", raftAddr, "rdma", storage.RDMAAddr(),
		"data_dir", o.dataDir, "token_file", filepath.Join(o.dataDir, cluster.TokenFile))
	bindCtx, stopBind := context.WithCancel(ctx)
	defer stopBind()
	// Only a refused binding ends serving; a bound region (or none) serves on.
	refused := make(chan error, 1)
	go func() {
		if err := bindStorage(bindCtx, n, storage); err != nil {
			refused <- err
		}
	}()
	var failure error
	select {
	case <-ctx.Done():
		log.Info("signal received; shutting down")
	case <-n.Done():
	case failure = <-refused:
		log.Error("refusing to serve", "err", failure)
	}
	if failure == nil {
		failure = n.Err()
	}
	if err := n.Close(); err != nil {
		log.Warn("shutdown", "err", err)
	}
	if failure != nil && !errors.Is(failure, cluster.ErrClosed) {
		if errors.Is(failure, cluster.ErrUnauthorized) {
			return fmt.Errorf("%w; %s", failure, tokenAdvice)
		}
		return failure
	}
	log.Info("stopped")
	return nil
}
