package client

import (
	"testing"
	"time"
)

// TestAnswerCrossingACommit: an attribute answer asked before this
// client's commit and answered after it (a getattr racing the close of
// another open, which commits the writes) is older than the commit's own
// answer: the size and times are the commit's, not the stale ones (the
// FUSE mount answered a stat with size 0 after a write). An answer newer
// than the commit (another client's change since) stands.
func TestAnswerCrossingACommit(t *testing.T) {
	var tab openTable
	tab.m = map[uint64]*openInode{}
	t0 := time.Unix(1000, 0)
	f := &File{}
	oi, _ := tab.acquire(Attr{Ino: 7, Ctime: t0, Mtime: t0}, f)
	oi.mu.Lock()
	oi.committed = Attr{Ino: 7, Size: 84390, Blocks: 168, Mtime: t0.Add(2 * time.Second), Ctime: t0.Add(2 * time.Second)}
	oi.size = 84390
	oi.mu.Unlock()

	stale := tab.overlay(Attr{Ino: 7, Size: 0, Mtime: t0.Add(time.Second), Ctime: t0.Add(time.Second)})
	if stale.Size != 84390 || !stale.Mtime.Equal(t0.Add(2*time.Second)) {
		t.Errorf("an answer older than the commit: size %d mtime %v, want the commit's 84390 and %v", stale.Size, stale.Mtime, t0.Add(2*time.Second))
	}
	later := tab.overlay(Attr{Ino: 7, Size: 10, Mtime: t0.Add(3 * time.Second), Ctime: t0.Add(3 * time.Second)})
	if later.Size != 10 {
		t.Errorf("an answer newer than the commit: size %d, want its own 10", later.Size)
	}
	// A later open's answer that crossed the commit does not shrink
	// what the opens know either.
	g := &File{}
	tab.acquire(Attr{Ino: 7, Size: 0, Ctime: t0.Add(time.Second)}, g)
	oi.mu.Lock()
	size := oi.size
	oi.mu.Unlock()
	if size != 84390 {
		t.Errorf("after an open whose answer crossed the commit the opens know size %d, want 84390", size)
	}
}
