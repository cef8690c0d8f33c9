package client

import (
	"sync"
	"time"
)

// entryKey names a directory entry in the entry cache.
type entryKey struct {
	parent uint64
	name   string
}

// ttlCache keeps attributes for a fixed time. It is the client's only
// metadata cache and is off unless Config.Cache asks for it; the rules
// (what, how long, what invalidates) are in docs/client.md.
type ttlCache[K comparable] struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.Mutex
	m  map[K]cached
}

type cached struct {
	attr    Attr
	expires time.Time
}

func newTTLCache[K comparable](ttl time.Duration, max int, now func() time.Time) *ttlCache[K] {
	return &ttlCache[K]{ttl: ttl, max: max, now: now, m: make(map[K]cached)}
}

// get returns the attributes cached for k if they have not expired. A nil
// cache holds nothing.
func (c *ttlCache[K]) get(k K) (Attr, bool) {
	if c == nil {
		return Attr{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return Attr{}, false
	}
	if !c.now().Before(e.expires) {
		delete(c.m, k)
		return Attr{}, false
	}
	return e.attr, true
}

// put caches a for k. When the cache is full it first drops expired
// entries, then arbitrary ones, so it never grows past max.
func (c *ttlCache[K]) put(k K, a Attr) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for k2, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, k2)
			}
		}
		for k2 := range c.m {
			if len(c.m) < c.max {
				break
			}
			delete(c.m, k2)
		}
	}
	c.m[k] = cached{attr: a, expires: now.Add(c.ttl)}
}

// drop forgets k.
func (c *ttlCache[K]) drop(k K) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.m, k)
	c.mu.Unlock()
}

// len reports how many entries are held (expired ones included).
func (c *ttlCache[K]) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
