package fuse

import (
	"strings"
	"sync"
	"syscall"
	"time"
)

// aclCache keeps the cluster's answers to getxattr of an inode's POSIX
// ACLs (the value, or ENODATA) for the attribute timeout. The kernel
// asks for a directory's ACL whenever it checks a non-owner's access
// through it after dropping its own copy, which it does far more often
// than the attributes expire (every path walk, measured: one getxattr
// round trip per directory of the path per call); ACLs change by
// setxattr, which this mount sees, or through another mount, which it
// sees as late as it would see a chmod. Anyone may read an ACL, so the
// answer does not depend on the caller.
type aclCache struct {
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	m  map[aclKey]aclAnswer
	// dropped is when this mount last changed an inode's ACLs, so that
	// an answer asked for before the change is not kept after it.
	dropped map[uint64]time.Time
}

type aclKey struct {
	ino  uint64
	name string
}

type aclAnswer struct {
	value []byte
	errno syscall.Errno // 0 or ENODATA
	at    time.Time
}

// maxACLAnswers bounds the cache; it is cleared when full.
const maxACLAnswers = 1 << 16

func newACLCache(ttl time.Duration, now func() time.Time) *aclCache {
	return &aclCache{ttl: ttl, now: now, m: make(map[aclKey]aclAnswer), dropped: make(map[uint64]time.Time)}
}

func isACLXattr(name string) bool { return strings.HasPrefix(name, "system.posix_acl_") }

// getxattr answers getxattr of name of ino: when name is an ACL, from a
// fresh answer if there is one, else from fetch (the cluster), whose
// answer is kept; any other name from fetch alone.
func (c *aclCache) getxattr(ino uint64, name string, fetch func() ([]byte, syscall.Errno)) ([]byte, syscall.Errno) {
	if !isACLXattr(name) {
		return fetch()
	}
	if a, ok := c.get(ino, name); ok {
		return a.value, a.errno
	}
	start := c.now()
	v, e := fetch()
	c.put(ino, name, v, e, start)
	return v, e
}

// get returns a fresh answer for name of ino, if there is one.
func (c *aclCache) get(ino uint64, name string) (aclAnswer, bool) {
	if c.ttl <= 0 {
		return aclAnswer{}, false
	}
	c.mu.Lock()
	a, ok := c.m[aclKey{ino, name}]
	c.mu.Unlock()
	if !ok || c.now().Sub(a.at) >= c.ttl {
		return aclAnswer{}, false
	}
	return a, true
}

// put records the cluster's answer, taken at start (before the request
// went out, so that a drop that raced with it wins).
func (c *aclCache) put(ino uint64, name string, value []byte, errno syscall.Errno, start time.Time) {
	if c.ttl <= 0 || (errno != 0 && errno != syscall.ENODATA) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxACLAnswers || len(c.dropped) >= maxACLAnswers {
		clear(c.m)
		clear(c.dropped)
	}
	if d, ok := c.dropped[ino]; ok && !d.Before(start) {
		return
	}
	k := aclKey{ino, name}
	if old, ok := c.m[k]; ok && old.at.After(start) {
		return
	}
	c.m[k] = aclAnswer{value: value, errno: errno, at: start}
}

// drop forgets ino's ACLs: this mount changed them (setxattr,
// removexattr) or the mode they follow (chmod).
func (c *aclCache) drop(ino uint64) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	delete(c.m, aclKey{ino, "system.posix_acl_access"})
	delete(c.m, aclKey{ino, "system.posix_acl_default"})
	c.dropped[ino] = c.now()
	c.mu.Unlock()
}
