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

// freshDirs keeps a directory's attributes as the reply to a creation or
// removal in it left them, and a file's as its open's reply gave them,
// for one GetAttr (KeepDirsAfterCreate): a ttlCache taken from once. A request that changes a directory notes its
// generation before it is sent and keeps what its reply says only if no
// drop of the directory came in between, so an answer overtaken by
// another change is never kept.
type freshDirs struct {
	c *ttlCache[uint64]

	mu   sync.Mutex // orders put's check against drop's bump
	gens [64]uint64 // drops, per bucket of inode numbers
}

// freshMax bounds freshDirs (entries also expire).
const freshMax = 4096

func newFreshDirs(ttl time.Duration, now func() time.Time) *freshDirs {
	if ttl <= 0 {
		return nil
	}
	return &freshDirs{c: newTTLCache[uint64](ttl, freshMax, now)}
}

func bucketOf(ino uint64) int { return int((ino ^ ino>>17 ^ ino>>41) % 64) }

// gen is the generation to pass to put for a request about to change ino.
func (f *freshDirs) gen(ino uint64) uint64 {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gens[bucketOf(ino)]
}

// put keeps a for ino unless ino (or another inode of its bucket) was
// dropped since gen.
func (f *freshDirs) put(ino uint64, a Attr, gen uint64) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gens[bucketOf(ino)] != gen {
		f.c.drop(ino)
		return
	}
	f.c.put(ino, a)
}

// take returns and forgets what is kept for ino, if it has not expired.
func (f *freshDirs) take(ino uint64) (Attr, bool) {
	if f == nil {
		return Attr{}, false
	}
	a, ok := f.c.get(ino)
	f.c.drop(ino)
	return a, ok
}

// drop forgets ino and makes the puts of requests under way about it
// (or about an inode of its bucket) void.
func (f *freshDirs) drop(ino uint64) {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.gens[bucketOf(ino)]++
	f.c.drop(ino)
	f.mu.Unlock()
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
