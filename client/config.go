package client

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/octofs/octofs/rdma"
)

// Config says how to reach a cluster and how the client behaves.
type Config struct {
	// Admin lists admin API addresses (host:port or URLs) of any cluster
	// members; the client fails over between them while it follows the
	// cluster map.
	Admin []string
	// Token is the cluster token (the file <data-dir>/token of any node).
	// The map's region keys and every RDMA connection need it.
	Token string
	// AdminTLS verifies the admin API when it serves HTTPS (nil: plain
	// HTTP unless an address is an https:// URL).
	AdminTLS *tls.Config

	// Provider is the RDMA provider's name ("" means soft).
	Provider string
	// Device configures the RDMA device (device name, GID index, the soft
	// NIC's address).
	Device rdma.DeviceConfig

	// Name names this client in the nodes' logs (default: "client").
	Name string
	// Logger receives the client's diagnostics (default: discard).
	Logger *slog.Logger

	// OpTimeout bounds every operation: a call that cannot complete
	// within it (a node down, the network gone) fails with ETIMEDOUT or
	// EIO instead of hanging. Default 30s.
	OpTimeout time.Duration
	// KeepAlive is how often the client renews its session with each node
	// it has talked to (default 2s). A node that hears nothing for its
	// session lease releases the client's opens and locks.
	KeepAlive time.Duration
	// WatchWait is the long-poll duration of the cluster-map watch
	// (default: cluster.DefaultWatchWait).
	WatchWait time.Duration

	// Cache configures what the library caches. The zero value caches
	// nothing but the cluster map and the data engine's extent leases.
	Cache CacheConfig

	// Now is the clock (default time.Now); tests inject their own.
	Now func() time.Time
}

// CacheConfig configures the client's metadata caches. Both are off by
// default: the FUSE mount relies on the kernel's entry and attribute
// caches, and a program that wants them opts in knowing the rules in
// docs/client.md.
type CacheConfig struct {
	// EntryTTL keeps the result of a successful Lookup (parent, name ->
	// inode) for this long, for path resolution. 0: off.
	EntryTTL time.Duration
	// AttrTTL keeps an inode's attributes for this long for GetAttr and
	// Stat. 0: off.
	AttrTTL time.Duration
	// MaxEntries bounds each cache (default 65536 when a TTL is set).
	MaxEntries int
}

// Defaults.
const (
	DefaultOpTimeout = 30 * time.Second
	DefaultKeepAlive = 2 * time.Second
	defaultCacheMax  = 65536
)

func (c Config) withDefaults() (Config, error) {
	if len(c.Admin) == 0 {
		return c, fmt.Errorf("%w: no admin address (give the admin API address of any cluster member)", ErrConfig)
	}
	if c.Token == "" {
		return c, fmt.Errorf("%w: no cluster token (read <data-dir>/token on any node)", ErrConfig)
	}
	if c.Name == "" {
		c.Name = "client"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Cache = c.Cache.withDefaults()
	return c, nil
}

func (c CacheConfig) withDefaults() CacheConfig {
	if c.MaxEntries <= 0 {
		c.MaxEntries = defaultCacheMax
	}
	return c
}
