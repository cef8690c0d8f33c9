package pmem

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExtentsOfAnyLength: allocating or freeing an extent is one log
// entry whatever its length, so a record owning four extents of 12,000
// blocks is allocated and freed atomically in small transactions (with
// version 1's per-word bitmap entries neither fitted a log slot).
func TestExtentsOfAnyLength(t *testing.T) {
	ctx := context.Background()
	r := newMemRegion(t, 32<<20, FormatOptions{BlockSize: 512, LogSlotSize: 1024})
	tx, err := r.Begin(ctx)
	require.NoError(t, err)
	id, err := tx.AllocRecord(1)
	require.NoError(t, err)
	big, err := tx.AllocExtent(id, 16000)
	require.NoError(t, err, "an extent of 16,000 blocks")
	require.NoError(t, tx.Commit())

	tx, err = r.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.FreeExtent(id, big))
	require.LessOrEqual(t, tx.Len(), 4)
	require.NoError(t, tx.Commit())
	requireClean(t, r)

	tx, err = r.Begin(ctx)
	require.NoError(t, err)
	for range 4 {
		_, err := tx.AllocExtent(id, 12000)
		require.NoError(t, err)
	}
	require.LessOrEqual(t, tx.Len(), 20, "a handful of entries for 48,000 blocks")
	require.NoError(t, tx.Commit())
	require.Equal(t, uint64(48000), r.Stats().BlocksUsed)
	requireClean(t, r)

	tx, err = r.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.FreeRecord(id))
	require.LessOrEqual(t, tx.Len(), 14)
	require.NoError(t, tx.Commit())
	require.Zero(t, r.Stats().BlocksUsed)
	require.Zero(t, r.Stats().RecordsUsed)
	requireClean(t, r)
}

// TestSixtyFourKiBTransaction: the default geometry logs a 64 KiB update
// in one transaction, read back by the transaction before it commits.
func TestSixtyFourKiBTransaction(t *testing.T) {
	ctx := context.Background()
	r := newMemRegion(t, 64<<20, FormatOptions{})
	g := r.Geometry()
	require.Equal(t, uint32(DefaultLogSlotSize), g.LogSlotSize)
	require.Equal(t, uint32(DefaultLogSlots), g.LogSlots)
	tx, err := r.Begin(ctx)
	require.NoError(t, err)
	id, err := tx.AllocRecord(1)
	require.NoError(t, err)
	e, err := tx.AllocExtent(id, 32)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	data := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	tx, err = r.Begin(ctx)
	require.NoError(t, err)
	off := r.ExtentOffset(e) + 3 // unaligned on purpose
	require.NoError(t, tx.Write(off, data))
	require.NoError(t, tx.Write(off+100, []byte("over")))
	require.NoError(t, tx.Write8(r.ExtentOffset(e)+8*1000, 42))
	v, err := tx.Read8((off + 100) &^ 7)
	require.NoError(t, err)
	require.NotEqual(t, uint64(0), v, "the transaction reads its own writes")
	require.Greater(t, tx.Room(), 32<<10, "room to spare")
	before, _ := r.ExtentBytes(e)
	require.Equal(t, make([]byte, 10), before[3:13], "nothing visible before commit")
	require.NoError(t, tx.Commit())

	got, _ := r.ExtentBytes(e)
	want := bytes.Clone(data)
	copy(want[100:], "over")
	copy(want[8*1000-3:], []byte{42, 0, 0, 0, 0, 0, 0, 0})
	require.Equal(t, want, got[3:3+len(data)])
	requireClean(t, r)

	tx, err = r.Begin(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, tx.Write(off, make([]byte, 2*DefaultLogSlotSize)), ErrTxTooLarge)
	tx.Abort()
}

func TestDefaultGeometryScales(t *testing.T) {
	tests := map[string]struct {
		size                uint64
		slots, slotSize     uint32
		minRecs, maxRecords uint64
	}{
		"4 MiB":   {4 << 20, 4, 128 << 10, 16, 100},
		"8 MiB":   {8 << 20, 8, 128 << 10, 16, 200},
		"256 MiB": {256 << 20, 16, 128 << 10, 3000, 5000},
		"1 TiB":   {1 << 40, 16, 128 << 10, 15 << 20, 17 << 20},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g, err := formatGeometry(tc.size, FormatOptions{})
			require.NoError(t, err)
			require.Equal(t, tc.slots, g.LogSlots)
			require.Equal(t, tc.slotSize, g.LogSlotSize)
			require.GreaterOrEqual(t, g.NumRecords, tc.minRecs)
			require.LessOrEqual(t, g.NumRecords, tc.maxRecords)
			require.LessOrEqual(t, uint64(g.LogSlots)*uint64(g.LogSlotSize), tc.size/8)
		})
	}
}

// TestShrinkExtent: a record gives back the end of one of its extents and
// keeps the rest in the same slot; an aborted shrink changes nothing.
func TestShrinkExtent(t *testing.T) {
	ctx := context.Background()
	r := newMemRegion(t, 8<<20, FormatOptions{})
	tx, err := r.Begin(ctx)
	require.NoError(t, err)
	id, err := tx.AllocRecord(1)
	require.NoError(t, err)
	a, err := tx.AllocExtent(id, 100)
	require.NoError(t, err)
	b, err := tx.AllocExtent(id, 10)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	used := r.Stats().BlocksUsed

	tx, err = r.Begin(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, tx.ShrinkExtent(id, a, 0), ErrBadAddress)
	require.ErrorIs(t, tx.ShrinkExtent(id, a, 100), ErrBadAddress)
	require.ErrorIs(t, tx.ShrinkExtent(id, Extent{Start: a.Start, Count: 50}, 10), ErrBadAddress)
	require.NoError(t, tx.ShrinkExtent(id, a, 40))
	tx.Abort()
	require.Equal(t, used, r.Stats().BlocksUsed, "aborted")
	requireClean(t, r)

	tx, err = r.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.ShrinkExtent(id, a, 40))
	require.NoError(t, tx.Commit())
	require.Equal(t, used-60, r.Stats().BlocksUsed)
	requireClean(t, r)

	// The record owns the kept prefix and b: freeing both frees all.
	tx, err = r.Begin(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, tx.FreeExtent(id, a), ErrBadAddress, "the old extent is gone")
	require.NoError(t, tx.FreeExtent(id, Extent{Start: a.Start, Count: 40}))
	require.NoError(t, tx.FreeExtent(id, b))
	require.NoError(t, tx.Commit())
	require.Equal(t, used-110, r.Stats().BlocksUsed)
	requireClean(t, r)
}
