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

	// Partitions is P for a new cluster (default DefaultPartitions).
	Partitions int
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
	// Raft timeouts (defaults: hashicorp/raft's, 1s/1s/500ms/50ms).
	RaftHeartbeatTimeout   time.Duration
	RaftElectionTimeout    time.Duration
	RaftLeaderLeaseTimeout time.Duration
	RaftCommitTimeout      time.Duration
	// SnapshotThreshold is how many log entries trigger a snapshot (default 1024).
	SnapshotThreshold uint64

	// Logger receives all logs, raft's included (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
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
	if c.MaxVoters == 0 {
		c.MaxVoters = 3
	}
	def(&c.HeartbeatInterval, time.Second)
	def(&c.DownAfter, 5*time.Second)
	def(&c.ApplyTimeout, 5*time.Second)
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

	fsm       *fsm
	raft      *raft.Raft
	transport *raft.NetworkTransport
	store     *raftboltdb.BoltStore
	notifyCh  chan bool
	metrics   *metrics

	adminLn net.Listener
	httpSrv *http.Server

	tokenMu sync.RWMutex
	token   string

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

// Start opens the data directory, starts raft and the admin API, and
// bootstraps or joins as configured. It returns once the node is running;
// joining proceeds in the background (see Done).
func Start(cfg Config) (n *Node, err error) {
	cfg.setDefaults()
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: no data directory", ErrBadRequest)
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, raftDir), 0o700); err != nil {
		return nil, fmt.Errorf("cluster: data directory: %w", err)
	}
	id, err := loadNodeID(cfg.DataDir, cfg.ID)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n = &Node{
		cfg:      cfg,
		id:       id,
		log:      cfg.Logger.With("node", id),
		notifyCh: make(chan bool, 16),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		beats:    map[NodeID]*heartbeatRecord{},
	}
	n.fsm = newFSM(n.log.With("component", "fsm"))
	// Undo whatever was opened if a later step fails.
	defer func() {
		if err != nil {
			n.shutdown(false)
		}
	}()

	n.store, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.DataDir, raftDir, raftDBFile)})
	if err != nil {
		return nil, fmt.Errorf("cluster: open raft store: %w", err)
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

	// Raft transport.
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
	n.transport = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &streamLayer{Listener: rl, advertise: adv},
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  newHclog(n.log, "raft-net"),
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
	n.metrics = newMetrics(n)

	switch {
	case hasState:
		n.joined.Store(true)
		n.log.Info("restarting from existing state; not bootstrapping or joining", "data_dir", cfg.DataDir)
	case cfg.Bootstrap:
		f := n.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			ID: raft.ServerID(id), Address: raft.ServerAddress(n.cfg.RaftAddr), Suffrage: raft.Voter,
		}}})
		if err := f.Error(); err != nil {
			return nil, fmt.Errorf("cluster: bootstrap: %w", err)
		}
		n.joined.Store(true)
		n.log.Info("bootstrapped a new cluster", "token_file", filepath.Join(cfg.DataDir, TokenFile))
	}

	n.startAdmin()
	n.goRun(n.watchLeadership)
	n.goRun(n.heartbeatLoop)
	n.goRun(n.watchSelfRemoval)
	if !hasState && !cfg.Bootstrap {
		if len(cfg.Join) > 0 {
			n.goRun(func() {
				if err := n.joinCluster(n.ctx, cfg.Join); err != nil {
					n.fail(err)
				}
			})
		} else {
			n.log.Warn("no cluster state and nothing to join: waiting to be added with `octoctl join " + n.cfg.AdminAddr + "`")
		}
	}
	return n, nil
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

// shutdown stops everything; graceful hands leadership over first, which a
// crash (tests) does not.
func (n *Node) shutdown(graceful bool) error {
	n.closeOnce.Do(func() {
		var errs []error
		if graceful && n.raft != nil && n.raft.State() == raft.Leader && len(n.voters()) > 1 {
			if err := n.raft.LeadershipTransfer().Error(); err != nil {
				n.log.Warn("leadership transfer on shutdown failed", "err", err)
			}
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
			if err := n.raft.Shutdown().Error(); err != nil {
				errs = append(errs, err)
			}
		}
		n.wg.Wait()
		if n.transport != nil {
			n.transport.Close()
		}
		if n.store != nil {
			if err := n.store.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		n.fail(ErrClosed)
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
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

func (n *Node) client(servers []string) *AdminClient {
	return NewAdminClient(servers, n.getToken(), n.cfg.ClientTLS)
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
	}
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
	voters, nonvoters := n.suffrages()
	leader, _ := n.Leader()
	isLeader := n.IsLeader()
	now := n.cfg.Now()
	r := NodesResponse{Epoch: m.Epoch, From: n.id}
	for _, info := range m.Nodes {
		ns := NodeStatus{NodeInfo: info, Suffrage: "none", Partitions: counts[info.ID], Leader: info.ID == leader, HeartbeatAgeMillis: -1}
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
