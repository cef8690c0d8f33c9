package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Files in a node's data directory.
const (
	nodeIDFile   = "node-id"
	raftDir      = "raft"
	raftDBFile   = "raft.db"
	snapshotsDir = "snapshots"
)

// Config configures a node. Zero durations take the defaults below.
type Config struct {
	// ID is the node's id. Empty: the id stored in DataDir, or a new random one.
	ID NodeID
	// DataDir holds the raft log, snapshots, the node id and the token.
	DataDir string

	// AdminAddr is the address other nodes and octoctl reach the admin API
	// at. AdminListener, if set, is served instead of listening on AdminAddr.
	AdminAddr     string
	AdminListener net.Listener
	// AdminTLS, if set, makes the admin API serve HTTPS.
	AdminTLS *tls.Config
	// ClientTLS, if set, is used for calls to other nodes' admin APIs.
	ClientTLS *tls.Config

	// RaftAddr is the address other nodes reach raft at. RaftListener, if
	// set, is used instead of listening on RaftAddr.
	RaftAddr     string
	RaftListener net.Listener

	// RDMAAddr and Region describe the node's storage side; empty until the
	// storage layers provide them.
	RDMAAddr string
	Region   RegionDescriptor

	// Bootstrap creates a new cluster if DataDir holds no state.
	Bootstrap bool
	// Join lists admin addresses of members to join through if DataDir
	// holds no state. With neither Bootstrap nor Join, a node without state
	// waits to be told to join (octoctl join).
	Join []string
	// Token is the cluster token, needed to join. A bootstrapping node
	// generates one when Token is empty.
	Token string
	// JoinSecret is what `octoctl join` must present to a waiting node
	// (one with no state, told neither to bootstrap nor to join) that has
	// no Token: without it the node cannot be captured by whoever reaches
	// its admin port first. Empty: a random secret, written to
	// <data-dir>/join-secret.
	JoinSecret string
	// DataDirLock is the data directory's lock if the caller took it
	// already (LockDataDir); Start then owns it. Otherwise Start takes it.
	DataDirLock *DataDirLock

	// Partitions is P for a new cluster (default DefaultPartitions).
	Partitions int
	// FilePlacement is where a new cluster puts new files (default
	// PlaceWithDirectory).
	FilePlacement FilePlacement
	// MaxVoters is how many nodes vote in raft (default 3); others are
	// non-voters.
	MaxVoters int

	// HeartbeatInterval is how often nodes heartbeat the leader (default 1s).
	HeartbeatInterval time.Duration
	// DownAfter is how long the leader waits for a heartbeat before marking
	// a node down (default 5s).
	DownAfter time.Duration
	// ApplyTimeout bounds one raft apply or configuration change (default 5s).
	ApplyTimeout time.Duration
	// ForwardTimeout bounds a request a follower forwards to the leader
	// (default ApplyTimeout + 1s): a stopped leader costs that long, then
	// the caller hears which leader did not answer.
	ForwardTimeout time.Duration
	// Raft timeouts (defaults: hashicorp/raft's, 1s/1s/500ms/50ms).
	RaftHeartbeatTimeout   time.Duration
	RaftElectionTimeout    time.Duration
	RaftLeaderLeaseTimeout time.Duration
	RaftCommitTimeout      time.Duration
	// SnapshotThreshold is how many log entries trigger a snapshot (default 1024).
	SnapshotThreshold uint64
	// SnapshotInterval is how often the node takes a raft snapshot if its
	// map changed since the last one (default 2m), so that a restart
	// restores from a snapshot and replays few entries; a clean shutdown
	// takes one too.
	SnapshotInterval time.Duration
	// RaftLimits bound the raft port's connections (see RaftLimits).
	RaftLimits RaftLimits

	// Logger receives all logs, raft's included (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Validate reports the first setting that cannot work, as ErrBadRequest
// with what to change. Start calls it; programs call it before opening
// anything else, so a typo fails at once.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadRequest}, a...)...)
	}
	switch {
	case c.DataDir == "":
		return bad("no data directory")
	case c.ID != "" && !ValidNodeID(c.ID):
		return bad("node id %q: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", c.ID)
	case c.Partitions < 0 || c.Partitions > MaxPartitions:
		return bad("%d partitions: a cluster has 1 to %d", c.Partitions, MaxPartitions)
	case c.FilePlacement != "" && !c.FilePlacement.Valid():
		return bad("file placement %q: use %q or %q", c.FilePlacement, PlaceWithDirectory, PlaceHashed)
	case c.MaxVoters < 0:
		return bad("max voters %d: use 3 or 5", c.MaxVoters)
	case c.Bootstrap && len(c.Join) > 0:
		return bad("bootstrap creates a new cluster and join joins one: give only one")
	case c.HeartbeatInterval < 0 || c.DownAfter < 0 || c.ApplyTimeout < 0 || c.ForwardTimeout < 0 || c.SnapshotInterval < 0:
		return bad("negative duration")
	case c.HeartbeatInterval > 0 && c.DownAfter > 0 && c.DownAfter <= 2*c.HeartbeatInterval:
		return bad("down-after %v must exceed two heartbeat intervals (%v); a node would be marked down between two heartbeats", c.DownAfter, 2*c.HeartbeatInterval)
	}
	return nil
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.FilePlacement == "" {
		c.FilePlacement = PlaceWithDirectory
	}
	if c.MaxVoters == 0 {
		c.MaxVoters = 3
	}
	def(&c.HeartbeatInterval, time.Second)
	def(&c.DownAfter, 5*time.Second)
	def(&c.ApplyTimeout, 5*time.Second)
	def(&c.ForwardTimeout, c.ApplyTimeout+time.Second)
	def(&c.SnapshotInterval, 2*time.Minute)
	c.RaftLimits.setDefaults()
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 1024
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidNodeID reports whether id is usable as a node id: 1 to 63 letters,
// digits, '.', '_' or '-', starting with a letter or digit.
func ValidNodeID(id NodeID) bool { return nodeIDPattern.MatchString(string(id)) }

// Node is a running cluster member: a raft peer holding the cluster map,
// with its admin API. Create it with Start; stop it with Close.
type Node struct {
	cfg Config
	id  NodeID
	log *slog.Logger

	lock      *DataDirLock
	fsm       *fsm
	raft      *raft.Raft
	stream    *tlsStream
	transport *raft.NetworkTransport
	store     *raftboltdb.BoltStore
	notifyCh  chan bool
	metrics   *metrics

	// pki is the node's raft credentials (nil until it has joined).
	pki atomic.Pointer[raftPKI]
	// pendingKey and pendingCSR are the key and certificate request a
	// joining node sends with its join, until it has its certificate.
	pendingKey, pendingCSR []byte

	adminLn net.Listener
	httpSrv *http.Server
	// peers is the HTTP client (one connection pool) for every call to
	// other nodes: forwarding, heartbeats, joins.
	peers *http.Client

	tokenMu sync.RWMutex
	token   string
	// joinSecret is what a waiting node without a token requires.
	joinSecret string

	joined  atomic.Bool
	joinMu  sync.Mutex
	removed atomic.Bool
	// raftStopped is set once raft has shut down after removal. raft's own
	// State() may read Follower after Shutdown if an RPC raced with it.
	raftStopped atomic.Bool

	// Leader-only state, valid while ready is true.
	leaderMu    sync.Mutex
	ready       bool
	leaderSince time.Time
	beats       map[NodeID]*heartbeatRecord
	// opMu serializes the leader's map changes.
	opMu sync.Mutex

	// snapshotIndex is the FSM index of the last snapshot this node took.
	snapshotIndex atomic.Uint64

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	done      chan struct{}
	doneErr   error
	doneOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
}

// heartbeatRecord is what the leader knows about a node's liveness.
type heartbeatRecord struct {
	last    time.Time
	heard   bool // a heartbeat arrived in this leadership term
	applied uint64
	info    JoinRequest
}

// JoinSecretFile is the file in a waiting node's data directory that holds
// the join secret it generated (mode 0600).
const JoinSecretFile = "join-secret"

// Start opens the data directory, starts raft and the admin API, and
// bootstraps or joins as configured. It returns once the node is running;
// joining proceeds in the background (see Done).
func Start(cfg Config) (n *Node, err error) {
	if err := cfg.Validate(); err != nil {
		if cfg.DataDirLock != nil {
			cfg.DataDirLock.Release()
		}
		return nil, err
	}
	cfg.setDefaults()
	lock := cfg.DataDirLock
	cfg.DataDirLock = nil
	if lock == nil {
		if lock, err = LockDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
	} else if filepath.Clean(lock.Dir()) != filepath.Clean(cfg.DataDir) {
		lock.Release()
		return nil, fmt.Errorf("%w: the data directory lock is for %s, not %s", ErrBadRequest, lock.Dir(), cfg.DataDir)
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, raftDir), 0o700); err != nil {
		lock.Release()
		return nil, fmt.Errorf("cluster: data directory: %w", err)
	}
	id, err := loadNodeID(cfg.DataDir, cfg.ID)
	if err != nil {
		lock.Release()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n = &Node{
		cfg:      cfg,
		id:       id,
		log:      cfg.Logger.With("node", id),
		lock:     lock,
		notifyCh: make(chan bool, 16),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		beats:    map[NodeID]*heartbeatRecord{},
		peers:    newHTTPClient(cfg.ClientTLS),
	}
	// Undo whatever was opened if a later step fails. (The named result is
	// nil by then: returning nil, err sets it.)
	started := n
	defer func() {
		if err != nil {
			started.shutdown(false)
		}
	}()

	// The lock above keeps other octofs processes out; the timeout keeps
	// this one from waiting forever if something else holds the file.
	n.store, err = raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.DataDir, raftDir, raftDBFile),
		BoltOptions: &bbolt.Options{Timeout: 2 * time.Second},
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: open raft store %s: %w", filepath.Join(cfg.DataDir, raftDir, raftDBFile), err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(cfg.DataDir, raftDir), 2, newHclog(n.log, "raft-snapshot"))
	if err != nil {
		return nil, fmt.Errorf("cluster: open snapshot store: %w", err)
	}
	hasState, err := raft.HasExistingState(n.store, n.store, snaps)
	if err != nil {
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	if err := n.setupToken(hasState); err != nil {
		return nil, err
	}
	if err := n.setupPKI(hasState); err != nil {
		return nil, err
	}
	statePath := filepath.Join(cfg.DataDir, raftDir, mapStateFile)
	if !hasState {
		// A saved map without raft state belongs to a cluster this
		// directory no longer is in; its index would hide the new log.
		if err := os.Remove(statePath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cluster: remove the stale saved map: %w", err)
		}
	}
	if n.fsm, err = openFSM(n.log.With("component", "fsm"), statePath); err != nil {
		return nil, err
	}

	// Raft transport: mutual TLS with the cluster's certificates.
	rl := cfg.RaftListener
	if rl == nil {
		if rl, err = net.Listen("tcp", cfg.RaftAddr); err != nil {
			return nil, fmt.Errorf("cluster: raft listen on %s: %w", cfg.RaftAddr, err)
		}
	}
	if cfg.RaftAddr == "" || strings.HasSuffix(cfg.RaftAddr, ":0") {
		n.cfg.RaftAddr = rl.Addr().String()
	}
	adv, err := net.ResolveTCPAddr("tcp", n.cfg.RaftAddr)
	if err != nil {
		rl.Close()
		return nil, fmt.Errorf("cluster: raft address %q: %w", n.cfg.RaftAddr, err)
	}
	n.stream = newTLSStream(rl, adv, cfg.RaftLimits, n.log.With("component", "raft-tls"), n.raftPeerAllowed)
	if p := n.pki.Load(); p != nil {
		n.stream.setPKI(p)
	}
	n.transport = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  n.stream,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  newHclog(n.log, "raft-net"),
		// One RPC in flight per peer turns raft's pipelined replication
		// off. With pipelining, a follower's refusal (a newer term, after a
		// leadership change) can end the pipeline's decoder while the
		// sender waits to hand it the next request: the replication
		// goroutine then blocks forever and raft.Shutdown never returns
		// (TestRaftIdleConnectionsAreReplaced hung that way, one run in a
		// few). The map changes rarely; synchronous replication is plenty.
		MaxRPCsInFlight: 1,
	})

	// Admin listener (before raft, so our address is known).
	n.adminLn = cfg.AdminListener
	if n.adminLn == nil {
		if n.adminLn, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
			return nil, fmt.Errorf("cluster: admin listen on %s: %w", cfg.AdminAddr, err)
		}
	}
	if cfg.AdminAddr == "" || strings.HasSuffix(cfg.AdminAddr, ":0") {
		n.cfg.AdminAddr = n.adminLn.Addr().String()
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.Logger = newHclog(n.log, "raft")
	rc.NotifyCh = n.notifyCh
	rc.NoLegacyTelemetry = true
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	setDur := func(d *time.Duration, v time.Duration) {
		if v != 0 {
			*d = v
		}
	}
	setDur(&rc.HeartbeatTimeout, cfg.RaftHeartbeatTimeout)
	setDur(&rc.ElectionTimeout, cfg.RaftElectionTimeout)
	setDur(&rc.LeaderLeaseTimeout, cfg.RaftLeaderLeaseTimeout)
	setDur(&rc.CommitTimeout, cfg.RaftCommitTimeout)
	n.raft, err = raft.NewRaft(rc, n.fsm, n.store, n.store, snaps, n.transport)
	if err != nil {
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	n.snapshotIndex.Store(n.fsm.index.Load())
	n.metrics = newMetrics(n)

	switch {
	case hasState:
		n.joined.Store(true)
		n.log.Info("restarting from existing state; not bootstrapping or joining", "data_dir", cfg.DataDir, "saved_epoch", n.Map().Epoch)
	case cfg.Bootstrap:
		f := n.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			ID: raft.ServerID(id), Address: raft.ServerAddress(n.cfg.RaftAddr), Suffrage: raft.Voter,
		}}})
		if err := f.Error(); err != nil {
			return nil, fmt.Errorf("cluster: bootstrap: %w", err)
		}
		n.joined.Store(true)
		n.log.Info("bootstrapped a new cluster", "token_file", filepath.Join(cfg.DataDir, TokenFile), "raft_ca", filepath.Join(cfg.DataDir, tlsDir, caCertFile))
	}

	waiting := !hasState && !cfg.Bootstrap && len(cfg.Join) == 0
	if waiting {
		// Before the admin API serves: it reads the join secret.
		if err := n.waitToBeAdded(); err != nil {
			return nil, err
		}
	}
	n.startAdmin()
	n.goRun(n.watchLeadership)
	n.goRun(n.heartbeatLoop)
	n.goRun(n.watchSelfRemoval)
	n.goRun(n.snapshotLoop)
	if !hasState && !cfg.Bootstrap && !waiting {
		n.goRun(func() {
			if err := n.joinCluster(n.ctx, cfg.Join); err != nil {
				n.fail(err)
			}
		})
	}
	return n, nil
}

// waitToBeAdded prepares a node with no state and nothing to join to be
// told to join by `octoctl join`, which must prove it may: with the
// cluster token if the node was given one, otherwise with the node's join
// secret.
func (n *Node) waitToBeAdded() error {
	if n.getToken() != "" {
		n.log.Warn("no cluster state and nothing to join: waiting to be added with `octoctl join " + n.cfg.AdminAddr + " --token-file TOKEN`; only this node's cluster token is accepted")
		return nil
	}
	n.joinSecret = n.cfg.JoinSecret
	path := filepath.Join(n.cfg.DataDir, JoinSecretFile)
	if n.joinSecret == "" {
		stored, err := ReadTokenFile(path)
		switch {
		case err == nil:
			n.joinSecret = stored
		case errors.Is(err, os.ErrNotExist):
			n.joinSecret = NewToken()
			if err := writeFileSync(path, []byte(n.joinSecret+"\n")); err != nil {
				return fmt.Errorf("cluster: store the join secret: %w", err)
			}
		default:
			return fmt.Errorf("cluster: read the join secret: %w", err)
		}
	}
	n.log.Warn("no cluster state and nothing to join: waiting to be added with `octoctl join "+n.cfg.AdminAddr+" --join-secret-file "+path+" --server MEMBER --token-file TOKEN`; without that secret the node refuses to join any cluster",
		"join_secret_file", path)
	return nil
}

func (n *Node) goRun(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// fail records a fatal error and closes Done.
func (n *Node) fail(err error) {
	n.doneOnce.Do(func() {
		n.doneErr = err
		close(n.done)
	})
}

// Done is closed when the node hits an error it cannot recover from (such
// as a refused join); Err returns it.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err returns the error that closed Done.
func (n *Node) Err() error {
	select {
	case <-n.done:
		return n.doneErr
	default:
		return nil
	}
}

func loadNodeID(dir string, want NodeID) (NodeID, error) {
	p := filepath.Join(dir, nodeIDFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		stored := NodeID(strings.TrimSpace(string(b)))
		if want != "" && want != stored {
			return "", fmt.Errorf("%w: data directory %s belongs to node %q, not %q; use another --data-dir or drop --node-id", ErrBadRequest, dir, stored, want)
		}
		return stored, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("cluster: read node id: %w", err)
	}
	if want == "" {
		want = NodeID("node-" + randomHex(4))
	}
	if !ValidNodeID(want) {
		return "", fmt.Errorf("%w: node id %q: use 1-63 letters, digits, '.', '_' or '-'", ErrBadRequest, want)
	}
	return want, os.WriteFile(p, []byte(string(want)+"\n"), 0o600)
}

func (n *Node) setupToken(hasState bool) error {
	stored, err := loadToken(n.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("cluster: read token: %w", err)
	}
	switch {
	case stored != "":
		if n.cfg.Token != "" && !TokensEqual(stored, n.cfg.Token) {
			return fmt.Errorf("%w: the token given differs from the one in %s", ErrUnauthorized, filepath.Join(n.cfg.DataDir, TokenFile))
		}
		n.token = stored
	case hasState:
		if n.cfg.Token == "" {
			return fmt.Errorf("%w: %s has raft state but no token file; copy the token file from another node", ErrUnauthorized, n.cfg.DataDir)
		}
		n.token = n.cfg.Token
		return storeToken(n.cfg.DataDir, n.token)
	case n.cfg.Bootstrap:
		n.token = n.cfg.Token
		if n.token == "" {
			n.token = NewToken()
		}
		return storeToken(n.cfg.DataDir, n.token)
	default:
		// Joining: kept in memory until the join succeeds.
		n.token = n.cfg.Token
	}
	return nil
}

// setupPKI loads the node's raft credentials, creates the cluster CA when
// bootstrapping, or prepares the key and certificate request a joining
// node sends.
func (n *Node) setupPKI(hasState bool) error {
	p, ok, err := loadPKI(n.cfg.DataDir, n.id)
	switch {
	case err != nil:
		return err
	case ok:
		n.pki.Store(p)
		return nil
	case hasState:
		return fmt.Errorf("%w: %s has raft state but no raft credentials in %s: it was written by a version of octofs without raft TLS; "+
			"start this node on a new data directory and join it to the cluster again (or create a new cluster)",
			ErrBadRequest, n.cfg.DataDir, filepath.Join(n.cfg.DataDir, tlsDir))
	case n.cfg.Bootstrap:
		p, key, err := bootstrapPKI(n.id, n.cfg.Now())
		if err != nil {
			return fmt.Errorf("cluster: create the cluster CA: %w", err)
		}
		if err := storePKI(n.cfg.DataDir, p, key); err != nil {
			return err
		}
		n.pki.Store(p)
		return nil
	}
	n.pendingKey, n.pendingCSR, err = newNodeKey(n.id)
	return err
}

// adoptCredentials installs the certificate the cluster issued with a join.
func (n *Node) adoptCredentials(r *JoinResponse) error {
	if r.Certificate == "" || r.CA == "" {
		return fmt.Errorf("%w: the cluster answered the join without raft credentials; upgrade octofs on its members", ErrUnsupportedVersion)
	}
	p, err := newRaftPKI(n.id, []byte(r.CA), []byte(r.CAKey), []byte(r.Certificate), n.pendingKey)
	if err != nil {
		return fmt.Errorf("cluster: raft credentials from the join: %w", err)
	}
	if err := storePKI(n.cfg.DataDir, p, n.pendingKey); err != nil {
		return err
	}
	n.pki.Store(p)
	n.stream.setPKI(p)
	return nil
}

// raftPeerAllowed decides whether a peer that presented a certificate of
// the cluster CA for node id may talk raft with this node: it must be a
// node of the map that is not removed, and when this node dialed addr, no
// other node may be placed at addr. A node that has no map yet (joining,
// or restarted without a saved map) trusts the CA alone.
func (n *Node) raftPeerAllowed(id NodeID, dialed string) error {
	if n.fsm == nil {
		return nil
	}
	m := n.Map()
	if !m.Initialized() {
		return nil
	}
	info, ok := m.Node(id)
	switch {
	case !ok:
		return refuse(ErrUnauthorized, "cluster: raft peer %s is not a member of this cluster", id)
	case info.State == StateRemoved:
		return refuse(ErrUnauthorized, "cluster: raft peer %s was removed from the cluster", id)
	}
	if dialed != "" && info.RaftAddr != dialed {
		for _, o := range m.Nodes {
			if o.RaftAddr == dialed && o.State != StateRemoved {
				return refuse(ErrUnauthorized, "cluster: the raft peer at %s presented the certificate of %s, but the map places %s there", dialed, id, o.ID)
			}
		}
	}
	return nil
}

func (n *Node) getToken() string {
	n.tokenMu.RLock()
	defer n.tokenMu.RUnlock()
	return n.token
}

// ID returns the node's id.
func (n *Node) ID() NodeID { return n.id }

// AdminAddr returns the admin API address.
func (n *Node) AdminAddr() string { return n.cfg.AdminAddr }

// RaftAddr returns the raft address.
func (n *Node) RaftAddr() string { return n.cfg.RaftAddr }

// Token returns the cluster token this node holds ("" before joining).
func (n *Node) Token() string { return n.getToken() }

// Map returns the current cluster map (immutable).
func (n *Node) Map() *Map {
	m, _ := n.fsm.current()
	return m
}

// Watch returns the first map with an epoch above since, waiting for it
// until ctx ends.
func (n *Node) Watch(ctx context.Context, since uint64) (*Map, error) {
	return n.fsm.wait(ctx, since, n.ctx.Done())
}

// IsLeader reports whether this node is the leader and ready for writes.
func (n *Node) IsLeader() bool {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	return n.ready && n.raft.State() == raft.Leader
}

// Leader returns the current leader's id and admin address, if known.
func (n *Node) Leader() (NodeID, string) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return "", ""
	}
	if info, ok := n.Map().Node(NodeID(id)); ok {
		return info.ID, info.AdminAddr
	}
	if NodeID(id) == n.id {
		return n.id, n.cfg.AdminAddr
	}
	return NodeID(id), ""
}

// notLeader returns the error for a leader-only call on this node.
func (n *Node) notLeader() error {
	id, addr := n.Leader()
	if id == n.id {
		// We lead but have not finished the barrier yet.
		return &NotLeaderError{}
	}
	return &NotLeaderError{LeaderID: id, LeaderAdminAddr: addr}
}

func (n *Node) requireLeader() error {
	if n.ctx.Err() != nil {
		return ErrClosed
	}
	if !n.IsLeader() {
		return n.notLeader()
	}
	return nil
}

// Close stops the node: it hands leadership to another voter if it leads,
// stops the admin API and raft, and closes the stores.
func (n *Node) Close() error { return n.shutdown(true) }

// shutdown stops everything; graceful hands leadership over first and
// takes a last snapshot, which a crash (tests) does not.
func (n *Node) shutdown(graceful bool) error {
	n.closeOnce.Do(func() {
		var errs []error
		if graceful && n.raft != nil && !n.raftStopped.Load() {
			if n.raft.State() == raft.Leader && len(n.voters()) > 1 {
				if err := n.raft.LeadershipTransfer().Error(); err != nil {
					n.log.Warn("leadership transfer on shutdown failed", "err", err)
				}
			}
			n.snapshotIfChanged("shutdown")
		}
		n.cancel()
		if n.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := n.httpSrv.Shutdown(ctx); err != nil {
				n.httpSrv.Close()
			}
			cancel()
		} else if n.adminLn != nil {
			n.adminLn.Close()
		}
		if n.raft != nil {
			// Close the transport before waiting for raft's goroutines: one
			// may be waiting on a peer that does not answer (a stopped
			// process) for the whole RPC timeout.
			f := n.raft.Shutdown()
			if n.transport != nil {
				n.transport.Close()
			}
			if err := f.Error(); err != nil {
				errs = append(errs, err)
			}
		}
		n.wg.Wait()
		if n.transport != nil {
			n.transport.Close()
		} else if n.stream != nil {
			n.stream.Close()
		} else if n.cfg.RaftListener != nil {
			n.cfg.RaftListener.Close()
		}
		if n.store != nil {
			if err := n.store.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if n.peers != nil {
			n.peers.CloseIdleConnections()
		}
		if err := n.lock.Release(); err != nil {
			errs = append(errs, err)
		}
		n.fail(ErrClosed)
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// snapshotLoop takes a raft snapshot every SnapshotInterval if the map
// changed since the last one, so that a restart restores from a recent
// snapshot instead of replaying the log (which needs a leader to say what
// is committed).
func (n *Node) snapshotLoop() {
	t := time.NewTicker(n.cfg.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		if n.raftStopped.Load() {
			return
		}
		n.snapshotIfChanged("schedule")
	}
}

func (n *Node) snapshotIfChanged(why string) {
	idx := n.fsm.index.Load()
	if idx == 0 || idx <= n.snapshotIndex.Load() {
		return
	}
	if err := n.await(n.raft.Snapshot()); err != nil {
		if !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			n.log.Warn("raft snapshot failed", "why", why, "err", err)
		}
		return
	}
	n.snapshotIndex.Store(idx)
	n.log.Info("took a raft snapshot", "why", why, "index", idx, "epoch", n.Map().Epoch)
}

// await is f.Error() for the node's goroutines and handlers, which
// shutdown waits for: raft does not answer every future it took once it
// shuts down (hashicorp/raft#498: an apply or a configuration change
// accepted in its last moments is never answered), so the wait also ends
// when the node closes, with ErrClosed. The goroutine left on f ends if
// raft ever answers.
func (n *Node) await(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-n.ctx.Done():
		return ErrClosed
	}
}

// voters returns the ids of the voters in the latest raft configuration.
func (n *Node) voters() []NodeID {
	v, _ := n.suffrages()
	return v
}

func (n *Node) suffrages() (voters, nonvoters []NodeID) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil, nil
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, NodeID(s.ID))
		} else {
			nonvoters = append(nonvoters, NodeID(s.ID))
		}
	}
	slices.Sort(voters)
	slices.Sort(nonvoters)
	return voters, nonvoters
}

// selfInfo is this node's join request / heartbeat identity.
func (n *Node) selfInfo() JoinRequest {
	return JoinRequest{ID: n.id, AdminAddr: n.cfg.AdminAddr, RaftAddr: n.cfg.RaftAddr, RDMAAddr: n.cfg.RDMAAddr, Region: n.cfg.Region}
}

// joinInfo is selfInfo with the certificate request a joining node sends.
func (n *Node) joinInfo() JoinRequest {
	r := n.selfInfo()
	r.CSR = string(n.pendingCSR)
	return r
}

// client returns an admin client for other nodes that shares the node's
// connection pool.
func (n *Node) client(servers []string) *AdminClient {
	return newAdminClient(servers, n.getToken(), n.cfg.ClientTLS, n.peers)
}

// Status returns this node's view of the cluster.
func (n *Node) Status() Status {
	m := n.Map()
	leader, leaderAddr := n.Leader()
	s := Status{
		ClusterID:       m.ClusterID,
		NodeID:          n.id,
		RaftState:       n.raftState().String(),
		Leader:          leader,
		LeaderAdminAddr: leaderAddr,
		Term:            n.raft.CurrentTerm(),
		CommitIndex:     n.raft.CommitIndex(),
		AppliedIndex:    n.raft.AppliedIndex(),
		Epoch:           m.Epoch,
		Partitions:      len(m.Partitions),
		NodeStates:      map[NodeState]int{},
		Joined:          n.joined.Load(),
		Pinned:          len(m.Pinned),
	}
	s.NotCaughtUp = n.notCaughtUp()
	s.CaughtUp = s.NotCaughtUp == ""
	if info, ok := m.Node(n.id); ok {
		s.NodeState = info.State
	}
	if n.removed.Load() {
		// It may have learned it from the leader before the map entry
		// reached it.
		s.NodeState = StateRemoved
	}
	s.Voters, s.NonVoters = n.suffrages()
	for _, node := range m.Nodes {
		s.NodeStates[node.State]++
	}
	return s
}

// notCaughtUp says why this node's view of the cluster may be old, or ""
// when it is in a cluster and in touch with a leader (or is it).
func (n *Node) notCaughtUp() string {
	switch {
	case n.removed.Load():
		return "this node was removed from the cluster"
	case !n.joined.Load():
		return "this node is not in a cluster yet"
	case n.ctx.Err() != nil:
		return "this node is shutting down"
	}
	leader, _ := n.raft.LeaderWithID()
	if leader == "" {
		return "no leader in reach: this node cannot reach a majority of the voters, so its map may be older than the cluster's"
	}
	if n.raft.State() != raft.Leader {
		// raft forgets the leader only after the heartbeat timeout; a
		// follower that heard nothing for longer is cut off too.
		if since := time.Since(n.raft.LastContact()); since > 3*n.raftHeartbeatTimeout() {
			return fmt.Sprintf("no word from the leader for %v: this node's map may be older than the cluster's", since.Round(time.Millisecond))
		}
	}
	if !n.Map().Initialized() {
		return "the cluster map has not reached this node yet"
	}
	return ""
}

func (n *Node) raftHeartbeatTimeout() time.Duration {
	if n.cfg.RaftHeartbeatTimeout > 0 {
		return n.cfg.RaftHeartbeatTimeout
	}
	return raft.DefaultConfig().HeartbeatTimeout
}

func (n *Node) raftState() raft.RaftState {
	if n.raftStopped.Load() || n.ctx.Err() != nil {
		return raft.Shutdown
	}
	return n.raft.State()
}

// Nodes returns the node table from this node's view. Heartbeat ages are
// known only on the leader (-1 elsewhere).
func (n *Node) Nodes() NodesResponse {
	m := n.Map()
	counts := m.PartitionCounts()
	pinned := m.PinnedCounts()
	voters, nonvoters := n.suffrages()
	leader, _ := n.Leader()
	isLeader := n.IsLeader()
	now := n.cfg.Now()
	r := NodesResponse{Epoch: m.Epoch, From: n.id}
	for _, info := range m.Nodes {
		ns := NodeStatus{NodeInfo: info, Suffrage: "none", Partitions: counts[info.ID], Pinned: pinned[info.ID], Leader: info.ID == leader, HeartbeatAgeMillis: -1}
		switch {
		case slices.Contains(voters, info.ID):
			ns.Suffrage = "voter"
		case slices.Contains(nonvoters, info.ID):
			ns.Suffrage = "nonvoter"
		}
		if isLeader {
			n.leaderMu.Lock()
			if b := n.beats[info.ID]; b != nil && b.heard {
				ns.HeartbeatAgeMillis = now.Sub(b.last).Milliseconds()
			}
			n.leaderMu.Unlock()
		}
		r.Nodes = append(r.Nodes, ns)
	}
	return r
}
