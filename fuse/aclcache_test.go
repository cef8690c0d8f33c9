package fuse

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestACLCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newACLCache(time.Second, func() time.Time { return now })
	const acc = "system.posix_acl_access"

	_, ok := c.get(1, acc)
	require.False(t, ok)
	c.put(1, acc, nil, syscall.ENODATA, now)
	a, ok := c.get(1, acc)
	require.True(t, ok)
	require.Equal(t, syscall.ENODATA, a.errno)

	c.put(2, acc, nil, syscall.EIO, now)
	_, ok = c.get(2, acc)
	require.False(t, ok, "only a value or ENODATA is an answer")

	now = now.Add(999 * time.Millisecond)
	_, ok = c.get(1, acc)
	require.True(t, ok)
	now = now.Add(time.Millisecond)
	_, ok = c.get(1, acc)
	require.False(t, ok, "kept for the attribute timeout only")

	c.put(3, acc, []byte{2, 0, 0, 0}, 0, now)
	c.drop(3)
	_, ok = c.get(3, acc)
	require.False(t, ok, "a change through this mount drops it")

	c.put(4, acc, []byte("new"), 0, now)
	c.put(4, acc, []byte("old"), 0, now.Add(-time.Millisecond))
	a, _ = c.get(4, acc)
	require.Equal(t, []byte("new"), a.value, "an answer asked for earlier does not replace a later one")

	start := now
	now = now.Add(time.Millisecond)
	c.drop(5)
	c.put(5, acc, []byte("before the change"), 0, start)
	_, ok = c.get(5, acc)
	require.False(t, ok, "an answer asked for before a change through this mount is not kept")

	off := newACLCache(0, time.Now)
	off.put(1, acc, nil, syscall.ENODATA, time.Now())
	_, ok = off.get(1, acc)
	require.False(t, ok, "no caching without an attribute timeout")
}

// TestACLCacheGetxattr: an ACL is fetched once per attribute timeout;
// other names every time; an error that is not ENODATA is not kept.
func TestACLCacheGetxattr(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newACLCache(time.Second, func() time.Time { return now })
	fetches := 0
	answer := syscall.ENODATA
	fetch := func() ([]byte, syscall.Errno) { fetches++; return nil, answer }
	for range 3 {
		_, e := c.getxattr(1, "system.posix_acl_access", fetch)
		require.Equal(t, syscall.ENODATA, e)
	}
	require.Equal(t, 1, fetches)
	for range 3 {
		c.getxattr(1, "user.x", fetch)
	}
	require.Equal(t, 4, fetches, "other xattrs are always asked")
	answer = syscall.EIO
	c.getxattr(2, "system.posix_acl_default", fetch)
	c.getxattr(2, "system.posix_acl_default", fetch)
	require.Equal(t, 6, fetches, "a failure is asked again")
}
