package pmem

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// errseqMedium reports a write-back error the way the kernel does for
// msync: to whichever caller flushes next, not necessarily the one whose
// pages failed. Its first flush can be held until released.
type errseqMedium struct {
	*MemMedium
	mu      sync.Mutex
	pending error
	held    atomic.Bool
	holding chan struct{} // closed when the first flush is held
	release chan struct{}
}

func (m *errseqMedium) Flush(off, n int) error {
	if m.held.CompareAndSwap(false, true) {
		close(m.holding)
		<-m.release
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	err := m.pending
	m.pending = nil
	return err
}

// TestCommitErrorsReachEveryCommit: a write-back error reported to one
// commit may belong to another one in flight (the kernel's errseq); every
// commit that was in flight when the region failed must fail too, not
// report its range durable.
func TestCommitErrorsReachEveryCommit(t *testing.T) {
	m := &errseqMedium{MemMedium: NewMemMedium(128 << 10), holding: make(chan struct{}), release: make(chan struct{})}
	r, err := Format(m.MemMedium, smallFormat, Options{})
	require.NoError(t, err)
	r, err = Attach(m, Options{})
	require.NoError(t, err)
	m.held.Store(false)

	ctx := context.Background()
	errA := make(chan error, 1)
	go func() {
		tx, err := r.Begin(ctx)
		if err != nil {
			errA <- err
			return
		}
		tx.SetRoot(1, 1)
		errA <- tx.Commit() // its first flush is held
	}()
	select {
	case <-m.holding:
	case <-time.After(10 * time.Second):
		t.Fatal("commit A never flushed")
	}
	// A's pages failed in write-back; B's commit is the one told.
	m.mu.Lock()
	m.pending = errors.New("EIO")
	m.mu.Unlock()
	tx, err := r.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.SetRoot(2, 2))
	require.Error(t, tx.Commit(), "commit B saw the error")
	close(m.release)
	select {
	case err := <-errA:
		require.Error(t, err, "commit A must not report durable what may not be")
		require.Contains(t, err.Error(), "EIO")
	case <-time.After(time.Minute):
		t.Fatal("commit A never returned")
	}
	_, err = r.Begin(ctx)
	require.ErrorContains(t, err, "EIO", "the failed region refuses new work")
	require.ErrorContains(t, r.Store8(r.RootOffset(3), 1), "EIO")
}

// TestMsyncErrorFailsCommit runs the production msync path on the
// tracker with an injected EIO.
func TestMsyncErrorFailsCommit(t *testing.T) {
	tr := NewTracker(make([]byte, 128<<10))
	r, err := Format(tr.Medium(InstrMsync), smallFormat, Options{})
	require.NoError(t, err)
	tr.InjectMsyncFault(func(off, n int) error { return ErrTrackerEIO })
	tx, err := r.Begin(t.Context())
	require.NoError(t, err)
	require.NoError(t, tx.SetRoot(1, 1))
	err = tx.Commit()
	require.ErrorIs(t, err, ErrPersist)
	require.ErrorIs(t, err, ErrTrackerEIO)
	require.Contains(t, err.Error(), "run octoctl fsck")
	require.ErrorIs(t, r.Persist(r.RootOffset(0), 8), ErrPersist)
}

// barrierMedium holds every Fence until want fences are waiting at once,
// proving that many commits are inside the medium at the same time.
type barrierMedium struct {
	*MemMedium
	want    int
	mu      sync.Mutex
	waiting int
	max     int
	open    chan struct{}
	once    sync.Once
}

func (m *barrierMedium) Fence() error {
	m.mu.Lock()
	m.waiting++
	m.max = max(m.max, m.waiting)
	if m.waiting >= m.want {
		m.once.Do(func() { close(m.open) })
	}
	m.mu.Unlock()
	select {
	case <-m.open:
	case <-time.After(30 * time.Second):
	}
	m.mu.Lock()
	m.waiting--
	m.mu.Unlock()
	return nil
}

// TestCommitsRunInParallel: transactions on different objects are inside
// the medium's fence at the same time; nothing on the commit path
// serialises them (a lock around commits would make this time out).
func TestCommitsRunInParallel(t *testing.T) {
	const workers = 6
	mm := NewMemMedium(512 << 10)
	_, err := Format(mm, FormatOptions{BlockSize: 512, RecordSize: 128, LogSlots: 8, LogSlotSize: 1024, NumRecords: 64}, Options{})
	require.NoError(t, err)
	m := &barrierMedium{MemMedium: mm, want: workers, open: make(chan struct{})}
	r, err := Attach(m, Options{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := r.Begin(context.Background())
			if err != nil {
				errs <- err
				return
			}
			id, err := tx.AllocRecord(uint16(w + 1))
			if err == nil {
				_, err = tx.AllocExtent(id, 3)
			}
			if err == nil {
				err = tx.SetRoot(w, uint64(id))
			}
			if err == nil {
				err = tx.Commit()
			} else {
				tx.Abort()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Less(t, time.Since(start), 25*time.Second, "the fences never met: commits were serialised")
	require.Equal(t, workers, m.max, "all %d commits were in a fence at once", workers)
	requireClean(t, r)
}
