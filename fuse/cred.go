package fuse

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/octofs/octofs/client"
)

// credCache remembers the supplementary groups of recent callers. FUSE
// gives uid, gid and pid; the groups come from /proc/<pid>/status.
type credCache struct {
	proc string // "/proc", or a test directory
	ttl  time.Duration
	now  func() time.Time

	mu sync.Mutex
	m  map[credKey]credEntry
}

type credKey struct{ pid, uid, gid uint32 }

type credEntry struct {
	groups []uint32
	at     time.Time
}

// maxCredEntries bounds the cache; it is cleared when full.
const maxCredEntries = 4096

func newCredCache(proc string, ttl time.Duration, now func() time.Time) *credCache {
	return &credCache{proc: proc, ttl: ttl, now: now, m: make(map[credKey]credEntry)}
}

// cred returns the caller of the request in ctx.
func (cc *credCache) cred(ctx context.Context) client.Cred {
	caller, ok := fuse.FromContext(ctx)
	if !ok {
		return client.Cred{UID: ^uint32(0), GID: ^uint32(0)} // nobody: never more rights than the caller
	}
	c := client.Cred{UID: caller.Uid, GID: caller.Gid}
	if caller.Pid == 0 {
		return c
	}
	k := credKey{caller.Pid, caller.Uid, caller.Gid}
	now := cc.now()
	cc.mu.Lock()
	e, ok := cc.m[k]
	cc.mu.Unlock()
	if ok && now.Sub(e.at) < cc.ttl {
		c.Groups = e.groups
		return c
	}
	groups, err := readGroups(fmt.Sprintf("%s/%d/status", cc.proc, caller.Pid), caller.Uid)
	if err != nil {
		// The process is gone or not ours to read: its primary group
		// only, which never grants more than the caller has.
		return c
	}
	cc.mu.Lock()
	if len(cc.m) >= maxCredEntries {
		clear(cc.m)
	}
	cc.m[k] = credEntry{groups: groups, at: now}
	cc.mu.Unlock()
	c.Groups = groups
	return c
}

// readGroups parses the Groups: line of a /proc status file. It checks that
// the file describes a process with the request's uid (the pid may have been
// reused by another user's process since the request was sent).
func readGroups(path string, uid uint32) ([]uint32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var groups []uint32
	sawUID := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("Uid:")):
			// Real, effective, saved, filesystem: FUSE reports the
			// filesystem uid.
			f := bytes.Fields(line[4:])
			if len(f) < 4 {
				return nil, fmt.Errorf("fuse: %s: malformed Uid line", path)
			}
			fsuid, err := strconv.ParseUint(string(f[3]), 10, 32)
			if err != nil || uint32(fsuid) != uid {
				return nil, fmt.Errorf("fuse: %s: process belongs to another user", path)
			}
			sawUID = true
		case bytes.HasPrefix(line, []byte("Groups:")):
			for _, f := range bytes.Fields(line[7:]) {
				g, err := strconv.ParseUint(string(f), 10, 32)
				if err != nil {
					return nil, fmt.Errorf("fuse: %s: malformed Groups line", path)
				}
				groups = append(groups, uint32(g))
			}
		}
	}
	if !sawUID {
		return nil, fmt.Errorf("fuse: %s: no Uid line", path)
	}
	return groups, nil
}
