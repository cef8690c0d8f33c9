package metadata

import (
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/octofs/octofs/metadata/wire"
)

// Sessions: a client's opens and advisory locks at this node live as long
// as its session, a lease renewed by every request it sends (KeepAlive
// when idle). A session that expires, or whose client shows up with a
// newer incarnation, is ended: its opens are released (freeing orphans
// they kept) and its locks dropped. All of it is memory only: a node
// restart ends every session, and clients reclaim their opens.

type session struct {
	key     clientKey
	expires time.Time
	// opens: inode -> registered opens of this session.
	opens map[uint64]*openCount
}

type openCount struct{ n, writers int }

type sessionTable struct {
	mu       sync.Mutex
	byClient map[uint64]*session
	// latest is the newest incarnation seen per sender (clients and
	// nodes): older ones are fenced.
	latest map[uint64]uint64
}

func newSessions() *sessionTable {
	return &sessionTable{byClient: map[uint64]*session{}, latest: map[uint64]uint64{}}
}

// fence checks a sender's incarnation. It refuses an incarnation older
// than the newest seen, and returns the session a newer one replaces
// (ended by the caller), if any.
func (t *sessionTable) fence(id, inc uint64) (ok bool, replaced *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if last := t.latest[id]; inc < last {
		return false, nil
	} else if inc > last {
		t.latest[id] = inc
		if s := t.byClient[id]; s != nil && s.key.inc != inc {
			delete(t.byClient, id)
			return true, s
		}
	}
	return true, nil
}

// touch renews (creating) the session of k until now+lease.
func (t *sessionTable) touch(k clientKey, now time.Time, lease time.Duration) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.byClient[k.id]
	if s == nil || s.key != k {
		s = &session{key: k, opens: map[uint64]*openCount{}}
		t.byClient[k.id] = s
	}
	s.expires = now.Add(lease)
	return s
}

// renew extends k's session if it exists.
func (t *sessionTable) renew(k clientKey, now time.Time, lease time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.byClient[k.id]; s != nil && s.key == k {
		s.expires = now.Add(lease)
	}
}

// addOpen records an open of ino by k's session.
func (t *sessionTable) addOpen(k clientKey, ino uint64, write bool, now time.Time, lease time.Duration) {
	s := t.touch(k, now, lease)
	t.mu.Lock()
	defer t.mu.Unlock()
	oc := s.opens[ino]
	if oc == nil {
		oc = &openCount{}
		s.opens[ino] = oc
	}
	oc.n++
	if write {
		oc.writers++
	}
}

// dropOpen removes one open of ino by k's session; it reports whether
// there was one.
func (t *sessionTable) dropOpen(k clientKey, ino uint64, write bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.byClient[k.id]
	if s == nil || s.key != k {
		return false
	}
	oc := s.opens[ino]
	if oc == nil {
		return false
	}
	oc.n--
	if write && oc.writers > 0 {
		oc.writers--
	}
	if oc.n <= 0 {
		delete(s.opens, ino)
	}
	return true
}

// hasWriter reports whether k's session holds ino open for writing.
func (t *sessionTable) hasWriter(k clientKey, ino uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.byClient[k.id]
	if s == nil || s.key != k {
		return false
	}
	oc := s.opens[ino]
	return oc != nil && oc.writers > 0
}

// hasOpen reports whether k's session holds ino open.
func (t *sessionTable) hasOpen(k clientKey, ino uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.byClient[k.id]
	return s != nil && s.key == k && s.opens[ino] != nil
}

// expired removes and returns the sessions whose lease ended.
func (t *sessionTable) expired(now time.Time) []*session {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*session
	for id, s := range t.byClient {
		if now.After(s.expires) {
			delete(t.byClient, id)
			out = append(out, s)
		}
	}
	return out
}

// heldLock is an advisory lock and the client that holds it.
type heldLock struct {
	client uint64
	wire.Lock
}

// advisory holds a partition's advisory locks (memory only).
type advisory struct {
	mu    sync.Mutex
	byIno map[uint64][]heldLock
}

func overlaps(a, b *wire.Lock) bool { return a.Start <= b.End && b.Start <= a.End }

func sameOwner(a, b *heldLock) bool { return a.client == b.client && a.Owner == b.Owner }

// conflict reports whether held blocks want.
func conflict(held, want *heldLock) bool {
	return held.Kind == want.Kind && !sameOwner(held, want) && overlaps(&held.Lock, &want.Lock) &&
		(held.Type == wire.LockWrite || want.Type == wire.LockWrite)
}

// test returns the first lock conflicting with want, or want with Type
// LockUnlock.
func (a *advisory) test(ino uint64, want heldLock) wire.Lock {
	a.mu.Lock()
	defer a.mu.Unlock()
	if want.Kind == wire.LockFlock {
		want.Start, want.End = 0, wire.LockEOF
	}
	for i := range a.byIno[ino] {
		if h := &a.byIno[ino][i]; conflict(h, &want) {
			return h.Lock
		}
	}
	out := want.Lock
	out.Type = wire.LockUnlock
	return out
}

// set takes or releases want without waiting: EAGAIN on a conflict.
func (a *advisory) set(ino uint64, want heldLock) syscall.Errno {
	a.mu.Lock()
	defer a.mu.Unlock()
	if want.Kind == wire.LockFlock {
		want.Start, want.End = 0, wire.LockEOF
	}
	locks := a.byIno[ino]
	if want.Type != wire.LockUnlock {
		for i := range locks {
			if conflict(&locks[i], &want) {
				return syscall.EAGAIN
			}
		}
	}
	// Remove (or cut) the owner's locks of this kind over the range.
	var out []heldLock
	for _, h := range locks {
		if h.Kind != want.Kind || !sameOwner(&h, &want) || !overlaps(&h.Lock, &want.Lock) {
			out = append(out, h)
			continue
		}
		if h.Start < want.Start {
			left := h
			left.End = want.Start - 1
			out = append(out, left)
		}
		if h.End > want.End {
			right := h
			right.Start = want.End + 1
			out = append(out, right)
		}
	}
	if want.Type != wire.LockUnlock {
		out = append(out, want)
		out = mergeLocks(out, want)
	}
	if len(out) == 0 {
		delete(a.byIno, ino)
	} else {
		a.byIno[ino] = out
	}
	return 0
}

// mergeLocks joins the owner's locks of want's kind and type that touch.
func mergeLocks(locks []heldLock, want heldLock) []heldLock {
	slices.SortFunc(locks, func(x, y heldLock) int {
		switch {
		case x.Start < y.Start:
			return -1
		case x.Start > y.Start:
			return 1
		}
		return 0
	})
	var out []heldLock
	for _, h := range locks {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.Kind == want.Kind && h.Kind == want.Kind && sameOwner(last, &want) && sameOwner(&h, &want) &&
				last.Type == h.Type && last.End != wire.LockEOF && last.End+1 >= h.Start {
				last.End = max(last.End, h.End)
				continue
			}
		}
		out = append(out, h)
	}
	return out
}

// dropClient removes every lock of client.
func (a *advisory) dropClient(client uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ino, locks := range a.byIno {
		out := slices.DeleteFunc(locks, func(h heldLock) bool { return h.client == client })
		if len(out) == 0 {
			delete(a.byIno, ino)
		} else {
			a.byIno[ino] = out
		}
	}
}

// dropInode removes every lock on ino (the inode was freed).
func (a *advisory) dropInode(ino uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.byIno, ino)
}
