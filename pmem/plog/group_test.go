package plog

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
)

// gateMedium is volatile memory whose fences can be held: while armed,
// the next Fence reports itself on entered and waits for release.
type gateMedium struct {
	*pmem.MemMedium
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (m *gateMedium) Fence() error {
	if m.armed.CompareAndSwap(true, false) {
		m.entered <- struct{}{}
		<-m.release
	}
	return nil
}

// waitFor polls cond until it holds, failing after a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func (l *Log) queued() int {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	return len(l.queue)
}

func TestGroupCommitSharesOneCommit(t *testing.T) {
	m := &gateMedium{MemMedium: pmem.NewMemMedium(4 << 20), entered: make(chan struct{}), release: make(chan struct{})}
	r, err := pmem.Format(m, pmem.FormatOptions{}, pmem.Options{})
	require.NoError(t, err)
	defer r.Close()
	s, err := Open(r, Options{})
	require.NoError(t, err)
	l, err := s.Log(LogID{1, 1})
	require.NoError(t, err)
	require.NoError(t, l.Append([]byte("first"))) // the first segment, outside the test

	// The first appender stops in its fence; 15 more queue behind it.
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	m.armed.Store(true)
	wg.Go(func() { errs[0] = l.Append([]byte("g0")) })
	<-m.entered
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = l.Append(fmt.Appendf(nil, "g%d", i), fmt.Appendf(nil, "g%d'", i)) })
	}
	waitFor(t, "15 queued appends", func() bool { return l.queued() == n-1 })
	close(m.release)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "appender %d", i)
	}
	st := l.Stats()
	require.Equal(t, uint64(1+n), st.Appends)
	require.Equal(t, uint64(3), st.Commits, "the first append, the held one, and one for the 15 queued")

	var got []string
	require.NoError(t, l.Replay(func(rec []byte) error { got = append(got, string(rec)); return nil }))
	require.Len(t, got, 2+2*(n-1))
	require.Equal(t, []string{"first", "g0"}, got[:2])
}

func TestAppendsWaitForRewrite(t *testing.T) {
	r, err := pmem.Format(pmem.NewMemMedium(4<<20), pmem.FormatOptions{}, pmem.Options{})
	require.NoError(t, err)
	defer r.Close()
	s, err := Open(r, Options{})
	require.NoError(t, err)
	l, err := s.Log(LogID{1, 1})
	require.NoError(t, err)
	require.NoError(t, l.Append([]byte("old")))
	done := make(chan error, 1)
	require.NoError(t, l.Rewrite(func(emit func([]byte) error) error {
		go func() { done <- l.Append([]byte("during")) }()
		waitFor(t, "the append to queue", func() bool { return l.queued() == 1 })
		select {
		case err := <-done:
			t.Fatalf("an append finished during the rewrite: %v", err)
		default:
		}
		return emit([]byte("snapshot"))
	}))
	require.NoError(t, <-done)
	var got []string
	require.NoError(t, l.Replay(func(rec []byte) error { got = append(got, string(rec)); return nil }))
	require.Equal(t, []string{"snapshot", "during"}, got)
}

func TestReplayDuringAppends(t *testing.T) {
	r, err := pmem.Format(pmem.NewMemMedium(8<<20), pmem.FormatOptions{}, pmem.Options{})
	require.NoError(t, err)
	defer r.Close()
	s, err := Open(r, Options{SegmentSize: 4096})
	require.NoError(t, err)
	l, err := s.Log(LogID{1, 1})
	require.NoError(t, err)
	const writers, each = 4, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := l.Append(fmt.Appendf(nil, "%d:%05d", w, i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	// Each replay sees a prefix of every writer's sequence.
	for range 20 {
		next := make([]int, writers)
		require.NoError(t, l.Replay(func(rec []byte) error {
			var w, i int
			if _, err := fmt.Sscanf(string(rec), "%d:%d", &w, &i); err != nil {
				return err
			}
			if i != next[w] {
				return fmt.Errorf("writer %d: record %d after %d", w, i, next[w]-1)
			}
			next[w]++
			return nil
		}))
	}
	wg.Wait()
	n := 0
	require.NoError(t, l.Replay(func(rec []byte) error {
		n++
		if !bytes.Contains(rec, []byte(":")) {
			return fmt.Errorf("record %q", rec)
		}
		return nil
	}))
	require.Equal(t, writers*each, n)
}
