package pmem

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// smallFormat is a compact geometry for unit tests.
var smallFormat = FormatOptions{BlockSize: 512, RecordSize: 128, ExtentSlots: 4, LogSlots: 4, LogSlotSize: 1024, NumRecords: 64}

func newMemRegion(t *testing.T, size int, fo FormatOptions) *Region {
	t.Helper()
	r, err := Format(NewMemMedium(size), fo, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

func requireClean(t *testing.T, r *Region) {
	t.Helper()
	rep := Check(r)
	require.True(t, rep.Clean(), "fsck:\n%s", rep)
}

func TestTransactionRoundTrip(t *testing.T) {
	ctx := context.Background()
	r := newMemRegion(t, 128<<10, smallFormat)
	tx, err := r.Begin(ctx)
	require.NoError(t, err)
	id, err := tx.AllocRecord(7)
	require.NoError(t, err)
	rec, err := r.Record(id)
	require.NoError(t, err)
	require.Zero(t, rec.Kind, "allocation is not visible before commit")
	ext, err := tx.AllocExtent(id, 3)
	require.NoError(t, err)
	require.NoError(t, tx.WriteFresh(r.ExtentOffset(ext), []byte("hello")))
	require.NoError(t, tx.Write8(rec.PayloadOff, 42))
	require.NoError(t, tx.SetRoot(0, uint64(id)))
	require.NoError(t, tx.Commit())

	rec, err = r.Record(id)
	require.NoError(t, err)
	require.Equal(t, uint16(7), rec.Kind)
	require.Equal(t, []Extent{ext}, rec.Extents)
	require.Equal(t, uint64(42), r.Load8(rec.PayloadOff))
	require.Equal(t, uint64(id), r.Root(0))
	b, err := r.ExtentBytes(ext)
	require.NoError(t, err)
	require.Equal(t, "hello", string(b[:5]))
	requireClean(t, r)

	st := r.Stats()
	require.Equal(t, uint64(1), st.RecordsUsed)
	require.Equal(t, uint64(3), st.BlocksUsed)

	tx, err = r.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.FreeRecord(id))
	require.NoError(t, tx.Commit())
	st = r.Stats()
	require.Zero(t, st.RecordsUsed)
	require.Zero(t, st.BlocksUsed)
	requireClean(t, r)
	require.True(t, errors.Is(tx.Commit(), ErrTxDone))
}
