package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/octofs/octofs/cluster"
)

// Client is a connection to an octofs cluster, safe for concurrent use.
// FUSE, octoctl and programs use one per process (or per mount).
type Client struct {
	cfg Config
	log *slog.Logger
	// id and incarnation name this client to the nodes: at-most-once
	// request ids, sessions, opens and locks are keyed by them.
	id          uint64
	incarnation uint64

	maps cluster.MapSource
	ns   namespace
	data dataIO
	// remote is the production backend (nil for Memory's clients).
	remote *remote

	opens   openTable
	entries *ttlCache[entryKey]
	attrs   *ttlCache[uint64]
	// fresh keeps directories' attributes after creations in them
	// (KeepDirsAfterCreate); dropAttrs drops both caches.
	fresh *freshDirs
	// mapsAsOf: the data version each file's cached extent maps were
	// last checked against at an open (keepMaps).
	mapsAsOf dataVersions

	// writeBehind is the write-behind buffer's size (SetWriteBehind);
	// behind counts the bytes kept behind over all open inodes.
	writeBehind int
	behind      atomic.Int64

	// noAtime: reads and listings never update atime (SetNoAtime).
	noAtime bool

	// nextOwner hands out lock owners for files the native API opens.
	nextOwner atomic.Uint64

	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool
	// shutdown releases what New opened (watch, device, connections).
	shutdown func() error
}

// New connects to the cluster named by cfg: it follows the cluster map
// over the admin API, opens the RDMA device, and connects to the nodes as
// operations need them (one RPC connection and one data connection per
// node). It returns once the map is known, or fails when ctx ends first.
func New(ctx context.Context, cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := newClient(cfg)
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// newClient builds a client without its cluster parts; New and the
// tests (with fakes) fill them in.
func newClient(cfg Config) *Client {
	c := &Client{
		cfg: cfg,
		log: cfg.Logger.With("client", cfg.Name),
		id:  randomID(),
		// Nodes compare incarnations numerically, a newer one fencing
		// older ones: the start time grows across restarts.
		incarnation: uint64(time.Now().UnixNano()),
		shutdown:    func() error { return nil },
	}
	c.opens.m = make(map[uint64]*openInode)
	if cfg.Cache.EntryTTL > 0 {
		c.entries = newTTLCache[entryKey](cfg.Cache.EntryTTL, cfg.Cache.MaxEntries, cfg.Now)
	}
	if cfg.Cache.AttrTTL > 0 {
		c.attrs = newTTLCache[uint64](cfg.Cache.AttrTTL, cfg.Cache.MaxEntries, cfg.Now)
	}
	return c
}

// KeepDirsAfterCreate makes the client keep, for ttl, the attributes of a
// directory as a creation in it left them (the reply carries them), for
// the next GetAttr of the directory only: the FUSE kernel asks for them
// after every creation, which then costs no request. Any other change of
// the directory through this client drops them; 0 turns it off. The
// mount calls it with its attribute timeout, for which the kernel would
// have kept them itself. Call it before the client is used.
func (c *Client) KeepDirsAfterCreate(ttl time.Duration) {
	c.fresh = newFreshDirs(ttl, c.cfg.Now)
}

// dropAttrs forgets what the caches hold of ino's attributes.
func (c *Client) dropAttrs(ino uint64) {
	c.attrs.drop(ino)
	c.fresh.drop(ino)
}

// randomID returns a random non-zero 64-bit id.
func randomID() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// ID is the client's id, as the nodes log it.
func (c *Client) ID() uint64 { return c.id }

// Map returns the newest cluster map the client knows.
func (c *Client) Map() *cluster.Map { return c.maps.Current() }

// Close closes the client's connections and stops following the map and
// renewing its sessions: the nodes release its remaining opens and locks
// when its session lease runs out (the namespace service's SessionLease,
// 30 s by default). Files still open are neither flushed nor released:
// close them first (File.Close releases the locks the File owns at once).
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.closeErr = c.shutdown()
	})
	return c.closeErr
}

// op prepares an operation: it fails at once on a closed client and bounds
// the operation by OpTimeout.
func (c *Client) op(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if c.closed.Load() {
		return ctx, func() {}, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	return ctx, cancel, nil
}

// fail maps err to an errno for the caller whose context is ctx.
func (c *Client) fail(ctx context.Context, op string, err error) error {
	return errno(ctx, c.log, op, err)
}
