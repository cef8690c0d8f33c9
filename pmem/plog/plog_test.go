package plog_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/plog"
)

// newRegion formats a volatile region of size bytes.
func newRegion(t testing.TB, size int, fo pmem.FormatOptions) (*pmem.Region, *pmem.MemMedium) {
	t.Helper()
	m := pmem.NewMemMedium(size)
	r, err := pmem.Format(m, fo, pmem.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r, m
}

// reopen attaches the medium again, as a restart would.
func reopen(t testing.TB, m pmem.Medium, o plog.Options) (*pmem.Region, *plog.Store) {
	t.Helper()
	r, err := pmem.Attach(m, pmem.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	s, err := plog.Open(r, o)
	require.NoError(t, err)
	return r, s
}

func replayAll(t testing.TB, l *plog.Log) [][]byte {
	t.Helper()
	var out [][]byte
	require.NoError(t, l.Replay(func(rec []byte) error {
		out = append(out, bytes.Clone(rec))
		return nil
	}))
	return out
}

func rec(format string, args ...any) []byte { return fmt.Appendf(nil, format, args...) }

// requireClean runs both fscks.
func requireClean(t testing.TB, r *pmem.Region) {
	t.Helper()
	rep := pmem.Check(r)
	require.True(t, rep.Clean(), "pmem fsck:\n%s", rep)
	prep := plog.Check(r)
	require.True(t, prep.Clean(), "plog fsck:\n%s", prep)
}

var id1 = plog.LogID{Service: 1, Partition: 7}

func TestAppendReplayReopen(t *testing.T) {
	tests := map[string]struct {
		segSize uint64
		groups  [][][]byte
	}{
		"one record": {groups: [][][]byte{{rec("a")}}},
		"groups and an empty record": {groups: [][][]byte{
			{rec("a"), rec("bb")}, {{}}, {rec("ccc"), rec("dddd"), rec("eeeee")},
		}},
		"many segments": {segSize: 4096, groups: func() (g [][][]byte) {
			for i := range 300 {
				g = append(g, [][]byte{bytes.Repeat([]byte{byte(i)}, 50+i%70)})
			}
			return g
		}()},
		"records larger than a segment": {segSize: 4096, groups: [][][]byte{
			{rec("small")}, {bytes.Repeat([]byte{1}, 10000)}, {rec("after"), bytes.Repeat([]byte{2}, 5000)}, {rec("tail")},
		}},
		"a 1 MiB record": {groups: [][][]byte{{rec("x")}, {bytes.Repeat([]byte{7}, 1<<20)}, {rec("y")}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := plog.Options{SegmentSize: tc.segSize}
			r, m := newRegion(t, 16<<20, pmem.FormatOptions{})
			s, err := plog.Open(r, o)
			require.NoError(t, err)
			l, err := s.Log(id1)
			require.NoError(t, err)
			var want [][]byte
			var bytesWant uint64
			for _, g := range tc.groups {
				require.NoError(t, l.Append(g...))
				want = append(want, g...)
				for _, x := range g {
					bytesWant += uint64(8 + (len(x)+7)&^7)
				}
			}
			require.Equal(t, want, replayAll(t, l))
			require.Equal(t, bytesWant, l.Stats().Bytes)
			requireClean(t, r)

			r2, s2 := reopen(t, m, o)
			require.Equal(t, []plog.LogID{id1}, s2.IDs())
			l2, err := s2.Log(id1)
			require.NoError(t, err)
			require.Equal(t, want, replayAll(t, l2))
			require.Equal(t, bytesWant, l2.Stats().Bytes)
			require.NoError(t, l2.Append(rec("after reopen")))
			require.Equal(t, append(want, rec("after reopen")), replayAll(t, l2))
			requireClean(t, r2)
		})
	}
}

func TestLogIdentity(t *testing.T) {
	r, _ := newRegion(t, 4<<20, pmem.FormatOptions{})
	s, err := plog.Open(r, plog.Options{})
	require.NoError(t, err)
	_, err = s.Log(plog.LogID{Service: 0, Partition: 1})
	require.ErrorIs(t, err, plog.ErrBadID)
	ids := []plog.LogID{{Service: 2, Partition: 1}, {Service: 1, Partition: 9}, {Service: 1, Partition: 2}}
	logs := map[plog.LogID]*plog.Log{}
	for _, id := range ids {
		l, err := s.Log(id)
		require.NoError(t, err)
		require.Equal(t, id, l.ID())
		logs[id] = l
		require.NoError(t, l.Append(rec("%v", id)))
	}
	for _, id := range ids {
		l, err := s.Log(id)
		require.NoError(t, err)
		require.Same(t, logs[id], l)
		require.Equal(t, [][]byte{rec("%v", id)}, replayAll(t, l))
	}
	require.Equal(t, []plog.LogID{{1, 2}, {1, 9}, {2, 1}}, s.IDs())
}

func TestRewrite(t *testing.T) {
	o := plog.Options{SegmentSize: 4096}
	r, m := newRegion(t, 8<<20, pmem.FormatOptions{})
	s, err := plog.Open(r, o)
	require.NoError(t, err)
	l, err := s.Log(id1)
	require.NoError(t, err)
	base := r.Stats()
	for i := range 200 {
		require.NoError(t, l.Append(rec("old %d %s", i, bytes.Repeat([]byte{'x'}, 100))))
	}
	before := l.Stats()
	require.Greater(t, before.Segments, 4)

	// A failing snapshot leaves the log as it was and frees what it built.
	boom := errors.New("boom")
	err = l.Rewrite(func(emit func([]byte) error) error {
		for i := range 100 {
			if err := emit(rec("new %d %s", i, bytes.Repeat([]byte{'y'}, 100))); err != nil {
				return err
			}
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, before, l.Stats())
	require.Len(t, replayAll(t, l), 200)
	requireClean(t, r)

	var want [][]byte
	require.NoError(t, l.Rewrite(func(emit func([]byte) error) error {
		for i := range 30 {
			x := rec("live %d", i)
			want = append(want, x)
			if err := emit(x); err != nil {
				return err
			}
		}
		big := bytes.Repeat([]byte{'z'}, 9000) // larger than a segment
		want = append(want, big)
		return emit(big)
	}))
	require.Equal(t, want, replayAll(t, l))
	st := l.Stats()
	require.Equal(t, st.Bytes, st.RewriteBytes)
	require.Less(t, st.Bytes, before.Bytes)
	require.NoError(t, l.Append(rec("after")))
	want = append(want, rec("after"))
	require.Equal(t, want, replayAll(t, l))
	requireClean(t, r)

	_, s2 := reopen(t, m, o)
	l2, err := s2.Log(id1)
	require.NoError(t, err)
	require.Equal(t, want, replayAll(t, l2))
	require.Equal(t, st.RewriteBytes, l2.Stats().RewriteBytes)

	// An empty snapshot empties the log; the segments go back to the region.
	require.NoError(t, l2.Rewrite(func(func([]byte) error) error { return nil }))
	require.Empty(t, replayAll(t, l2))
	require.Equal(t, base.BlocksUsed, s2.Region().Stats().BlocksUsed)
}

func TestRewriteFreesManySegments(t *testing.T) {
	// More old segments than one transaction can free: the rest go in
	// follow-up transactions.
	o := plog.Options{SegmentSize: 512}
	r, _ := newRegion(t, 16<<20, pmem.FormatOptions{BlockSize: 512})
	s, err := plog.Open(r, o)
	require.NoError(t, err)
	l, err := s.Log(id1)
	require.NoError(t, err)
	base := r.Stats()
	for i := range 400 {
		require.NoError(t, l.Append(bytes.Repeat([]byte{byte(i)}, 400)))
	}
	require.Equal(t, 400, l.Stats().Segments)
	require.NoError(t, l.Rewrite(func(emit func([]byte) error) error { return emit(rec("one")) }))
	require.Equal(t, [][]byte{rec("one")}, replayAll(t, l))
	require.Equal(t, base.BlocksUsed+1, r.Stats().BlocksUsed)
	requireClean(t, r)
}

func TestPoolsAndDelete(t *testing.T) {
	o := plog.Options{PoolBlocks: 16}
	r, m := newRegion(t, 8<<20, pmem.FormatOptions{})
	s, err := plog.Open(r, o)
	require.NoError(t, err)
	base := r.Stats()
	l, err := s.Log(id1)
	require.NoError(t, err)
	p1, err := l.AllocPool(0)
	require.NoError(t, err)
	require.Equal(t, uint64(16), p1.Count)
	p2, err := l.AllocPool(100)
	require.NoError(t, err)
	require.Equal(t, []pmem.Extent{p1, p2}, l.Pools())
	require.NoError(t, l.Append(rec("a")))
	st := l.Stats()
	require.Equal(t, 2, st.Pools)
	require.Equal(t, uint64(116), st.PoolBlocks)
	requireClean(t, r)

	r2, s2 := reopen(t, m, o)
	l2, err := s2.Log(id1)
	require.NoError(t, err)
	require.Equal(t, []pmem.Extent{p1, p2}, l2.Pools())
	require.NoError(t, l2.FreePool(p1))
	require.ErrorIs(t, l2.FreePool(p1), plog.ErrNotFound)
	require.Equal(t, []pmem.Extent{p2}, l2.Pools())
	requireClean(t, r2)

	require.NoError(t, l2.Delete())
	require.ErrorIs(t, l2.Append(rec("x")), plog.ErrDeleted)
	require.ErrorIs(t, l2.Replay(func([]byte) error { return nil }), plog.ErrDeleted)
	_, err = l2.AllocPool(1)
	require.ErrorIs(t, err, plog.ErrDeleted)
	require.Empty(t, s2.IDs())
	require.Equal(t, base.BlocksUsed, r2.Stats().BlocksUsed)
	require.Equal(t, base.RecordsUsed, r2.Stats().RecordsUsed)
	requireClean(t, r2)

	// The id can be used again, for a new empty log.
	l3, err := s2.Log(id1)
	require.NoError(t, err)
	require.NotSame(t, l2, l3)
	require.Empty(t, replayAll(t, l3))
}

func TestNoSpace(t *testing.T) {
	o := plog.Options{SegmentSize: 64 << 10}
	r, _ := newRegion(t, 1<<20, pmem.FormatOptions{})
	s, err := plog.Open(r, o)
	require.NoError(t, err)
	l, err := s.Log(id1)
	require.NoError(t, err)
	var n int
	for n = 0; n < 1000; n++ {
		if err = l.Append(bytes.Repeat([]byte{1}, 30000)); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, plog.ErrNoSpace)
	require.ErrorIs(t, err, pmem.ErrNoSpace)
	require.Len(t, replayAll(t, l), n)
	_, err = l.AllocPool(1 << 20)
	require.ErrorIs(t, err, plog.ErrNoSpace)
	requireClean(t, r)
	// Rewriting to less frees room for more appends.
	require.NoError(t, l.Rewrite(func(func([]byte) error) error { return nil }))
	require.NoError(t, l.Append(bytes.Repeat([]byte{1}, 30000)))
}

func TestTooLarge(t *testing.T) {
	r, _ := newRegion(t, 4<<20, pmem.FormatOptions{})
	s, err := plog.Open(r, plog.Options{})
	require.NoError(t, err)
	l, err := s.Log(id1)
	require.NoError(t, err)
	require.ErrorIs(t, l.Append(make([]byte, plog.MaxRecordSize+1)), plog.ErrTooLarge)
	half := make([]byte, plog.MaxGroupSize/2)
	require.ErrorIs(t, l.Append(half, half), plog.ErrTooLarge)
	require.NoError(t, l.Append())
	require.Empty(t, replayAll(t, l))
}

func TestConcurrentAppends(t *testing.T) {
	const writers, each = 16, 200
	o := plog.Options{SegmentSize: 16 << 10}
	r, m := newRegion(t, 32<<20, pmem.FormatOptions{})
	s, err := plog.Open(r, o)
	require.NoError(t, err)
	ids := []plog.LogID{{1, 1}, {1, 2}, {2, 1}}
	var wg sync.WaitGroup
	for _, id := range ids {
		l, err := s.Log(id)
		require.NoError(t, err)
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					if err := l.Append(rec("%d:%d:a", w, i), rec("%d:%d:b", w, i)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	_, s2 := reopen(t, m, o)
	for _, id := range ids {
		l, err := s2.Log(id)
		require.NoError(t, err)
		got := replayAll(t, l)
		require.Len(t, got, 2*writers*each)
		next := make([]int, writers)
		for i := 0; i < len(got); i += 2 {
			var w, n int
			_, err := fmt.Sscanf(string(got[i]), "%d:%d:a", &w, &n)
			require.NoError(t, err)
			require.Equal(t, next[w], n, "writer %d out of order", w)
			require.Equal(t, rec("%d:%d:b", w, n), got[i+1], "group split")
			next[w]++
		}
		st, _ := s.Log(id)
		stats := st.Stats()
		require.Equal(t, uint64(writers*each), stats.Appends)
		require.LessOrEqual(t, stats.Commits, stats.Appends)
		t.Logf("%v: %d appends in %d commits", id, stats.Appends, stats.Commits)
	}
}

func TestDamage(t *testing.T) {
	r, m := newRegion(t, 4<<20, pmem.FormatOptions{})
	s, err := plog.Open(r, plog.Options{})
	require.NoError(t, err)
	l, err := s.Log(id1)
	require.NoError(t, err)
	other := plog.LogID{Service: 2, Partition: 7}
	lo, err := s.Log(other)
	require.NoError(t, err)
	for i := range 10 {
		require.NoError(t, l.Append(rec("record %d", i)))
		require.NoError(t, lo.Append(rec("other %d", i)))
	}
	// Find the first record's bytes of log id1 and flip one.
	var seg pmem.Record
	require.NoError(t, r.Records(func(x pmem.Record) bool {
		if x.Kind == plog.KindSegment {
			seg = x
			return false
		}
		return true
	}))
	b, err := r.ExtentBytes(seg.Extents[0])
	require.NoError(t, err)
	i := bytes.Index(b, []byte("record 3"))
	require.GreaterOrEqual(t, i, 0)
	b[i] ^= 0xff

	var got int
	err = l.Replay(func([]byte) error { got++; return nil })
	require.ErrorIs(t, err, plog.ErrCorrupt)
	require.Contains(t, err.Error(), "segment 0")
	require.Equal(t, 3, got)
	rep := plog.Check(r)
	require.False(t, rep.Clean())
	require.Contains(t, rep.String(), "checksum")

	// Damage the head of the other log: it alone is unusable after a restart.
	b2, err := r.Payload(func() pmem.RecordID {
		var id pmem.RecordID
		_ = r.Records(func(x pmem.Record) bool {
			if x.Kind == plog.KindHead {
				id = x.ID
			}
			return true
		})
		return id
	}())
	require.NoError(t, err)
	b2[16] = 0 // epoch 0
	for i := 17; i < 24; i++ {
		b2[i] = 0
	}
	_, s2 := reopen(t, m, plog.Options{})
	require.Equal(t, []plog.LogID{id1, other}, s2.IDs())
	_, err = s2.Log(other)
	require.ErrorIs(t, err, plog.ErrCorrupt)
	l2, err := s2.Log(id1)
	require.NoError(t, err)
	require.ErrorIs(t, l2.Replay(func([]byte) error { return nil }), plog.ErrCorrupt)
}

func TestFileRegionSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	r, err := pmem.Create(path, 8<<20, pmem.FormatOptions{}, pmem.Options{})
	require.NoError(t, err)
	s, err := plog.Open(r, plog.Options{SegmentSize: 8192})
	require.NoError(t, err)
	l, err := s.Log(id1)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 25 {
				if err := l.Append(rec("%d:%d", w, i), bytes.Repeat([]byte{byte(w)}, 300)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, r.Close())

	reopenFile := func() (*pmem.Region, *plog.Log) {
		r, err := pmem.Open(path, pmem.Options{})
		require.NoError(t, err)
		s, err := plog.Open(r, plog.Options{SegmentSize: 8192})
		require.NoError(t, err)
		l, err := s.Log(id1)
		require.NoError(t, err)
		return r, l
	}
	r2, l2 := reopenFile()
	got := replayAll(t, l2)
	require.Len(t, got, 4*25*2)
	requireClean(t, r2)
	require.NoError(t, l2.Rewrite(func(emit func([]byte) error) error { return emit(rec("snapshot")) }))
	require.NoError(t, l2.Append(rec("last")))
	require.NoError(t, r2.Close())

	r3, l3 := reopenFile()
	defer r3.Close()
	require.Equal(t, [][]byte{rec("snapshot"), rec("last")}, replayAll(t, l3))
	requireClean(t, r3)
}

// TestSegmentsGrow: a new log takes a small segment, and each segment a
// growing log links is twice the last, up to SegmentSize, so that hundreds
// of nearly empty partition logs do not fill a region.
func TestSegmentsGrow(t *testing.T) {
	r, _ := newRegion(t, 64<<20, pmem.FormatOptions{})
	s, err := plog.Open(r, plog.Options{SegmentSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Log(plog.LogID{Service: 1, Partition: 7})
	if err != nil {
		t.Fatal(err)
	}
	blocksUsed := func() uint64 { return r.Stats().BlocksUsed }
	before := blocksUsed()
	if err := l.Append(rec("first")); err != nil {
		t.Fatal(err)
	}
	if got := blocksUsed() - before; got > 4 {
		t.Fatalf("a log of one record took %d blocks, want a 16 KiB segment (4 blocks)", got)
	}
	big := make([]byte, 3000)
	for range 400 { // about 1.2 MB: segments of 16, 32, 64, 128, 256, 256, ... KiB
		if err := l.Append(big); err != nil {
			t.Fatal(err)
		}
	}
	if got := blocksUsed() - before; got > 2*(1300<<10)/4096 {
		t.Fatalf("1.2 MB of records took %d blocks", got)
	}
	if got := len(replayAll(t, l)); got != 401 {
		t.Fatalf("replayed %d records, want 401", got)
	}
}

// TestSegmentFitsFragmentedRegion: when the region has no run of the
// chain's next segment size, the append takes a smaller segment that
// holds its batch instead of failing with ErrNoSpace.
func TestSegmentFitsFragmentedRegion(t *testing.T) {
	r, _ := newRegion(t, 1<<20, pmem.FormatOptions{})
	s, err := plog.Open(r, plog.Options{SegmentSize: 256 << 10})
	require.NoError(t, err)
	filler, err := s.Log(plog.LogID{Service: 1, Partition: 2})
	require.NoError(t, err)
	var pools []pmem.Extent
	for range 10000 {
		p, err := filler.AllocPool(8)
		if err != nil {
			require.ErrorIs(t, err, plog.ErrNoSpace)
			break
		}
		pools = append(pools, p)
	}
	for i := 0; i < len(pools); i += 2 {
		require.NoError(t, filler.FreePool(pools[i]))
	}
	// The records may run out before the blocks: one pool takes the
	// longest run left after them.
	if n := r.Stats().LongestFreeRun; n > 8 {
		_, err := filler.AllocPool(n)
		require.NoError(t, err)
	}
	require.Less(t, r.Stats().LongestFreeRun, uint64(16), "the region's free space is in runs of 8 blocks")
	l, err := s.Log(id1)
	require.NoError(t, err)
	// Segments of 16 KiB (4 blocks), then 32 KiB (8), then the chain
	// wants 64 KiB (16 blocks), which no run holds.
	for i := range 40 {
		require.NoError(t, l.Append(make([]byte, 2000)), "append %d", i)
	}
	require.Len(t, replayAll(t, l), 40)
	requireClean(t, r)
}

// TestShrinkPool: a pool gives the blocks past a prefix back to the
// region in one transaction, and keeps the prefix across a restart (the
// chunk service gives other partitions' free pool tails to a full
// region's allocations).
func TestShrinkPool(t *testing.T) {
	o := plog.Options{PoolBlocks: 16}
	r, m := newRegion(t, 8<<20, pmem.FormatOptions{})
	s, err := plog.Open(r, o)
	require.NoError(t, err)
	l, err := s.Log(id1)
	require.NoError(t, err)
	p, err := l.AllocPool(100)
	require.NoError(t, err)
	used := r.Stats().BlocksUsed
	for _, bad := range []uint64{0, 100, 101} {
		_, err := l.ShrinkPool(p, bad)
		require.ErrorIs(t, err, pmem.ErrBadAddress, "keeping %d of 100 blocks", bad)
		require.Equal(t, []pmem.Extent{p}, l.Pools(), "a refused shrink keeps the pool")
	}
	kept, err := l.ShrinkPool(p, 30)
	require.NoError(t, err)
	require.Equal(t, pmem.Extent{Start: p.Start, Count: 30}, kept)
	require.Equal(t, []pmem.Extent{kept}, l.Pools())
	require.Equal(t, used-70, r.Stats().BlocksUsed)
	_, err = l.ShrinkPool(p, 10)
	require.ErrorIs(t, err, plog.ErrNotFound, "the old extent is no pool any more")
	requireClean(t, r)

	r2, s2 := reopen(t, m, o)
	l2, err := s2.Log(id1)
	require.NoError(t, err)
	require.Equal(t, []pmem.Extent{kept}, l2.Pools())
	require.Equal(t, used-70, r2.Stats().BlocksUsed)
	require.NoError(t, l2.FreePool(kept))
	requireClean(t, r2)
}
