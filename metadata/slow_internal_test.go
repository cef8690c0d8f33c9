package metadata

import (
	"testing"
	"time"
)

// TestSlowAppends: a partition's changes leave the RPC workers when its
// appends have been slow on average, and also as soon as the append
// under way has run too long (a disk that stopped answering msync), so
// that workers do not pile up behind it; fast appends keep them inline.
func TestSlowAppends(t *testing.T) {
	var p partition
	if p.slowAppends() {
		t.Fatal("a partition that never appended counts as slow")
	}
	for range 20 {
		p.noteAppend(5 * time.Microsecond)
	}
	if p.slowAppends() {
		t.Fatal("appends of 5µs count as slow")
	}
	p.cm.appendStart.Store(time.Now().UnixNano())
	if p.slowAppends() {
		t.Fatal("an append that has just begun counts as slow")
	}
	p.cm.appendStart.Store(time.Now().Add(-10 * slowAppend).UnixNano())
	if !p.slowAppends() {
		t.Fatal("an append under way for 10 times the limit does not count as slow")
	}
	p.cm.appendStart.Store(0)
	for range 20 {
		p.noteAppend(2 * time.Millisecond)
	}
	if !p.slowAppends() {
		t.Fatal("appends of 2ms (msync to a disk) do not count as slow")
	}
}
