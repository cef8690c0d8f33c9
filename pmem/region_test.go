package pmem

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
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

// commitRecord allocates a record of kind owning one extent of blocks
// blocks, in one committed transaction.
func commitRecord(t *testing.T, r *Region, kind uint16, blocks uint64) RecordID {
	t.Helper()
	tx, err := r.Begin(t.Context())
	require.NoError(t, err)
	id, err := tx.AllocRecord(kind)
	require.NoError(t, err)
	_, err = tx.AllocExtent(id, blocks)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return id
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

func TestOpenRefusals(t *testing.T) {
	cluster := UUID{1, 2, 3}
	other := UUID{9}
	formatted := func(t *testing.T) []byte {
		m := NewMemMedium(128 << 10)
		fo := smallFormat
		fo.ClusterUUID, fo.NodeID = cluster, 7
		_, err := Format(m, fo, Options{})
		require.NoError(t, err)
		return m.Bytes()
	}
	tests := map[string]struct {
		mangle  func(b []byte) []byte
		opts    Options
		wantErr error
		advice  string // part of what the operator is told to do
	}{
		"blank region": {
			mangle:  func(b []byte) []byte { return make([]byte, len(b)) },
			wantErr: ErrNotFormatted, advice: "format the region first",
		},
		"foreign content": {
			mangle:  func(b []byte) []byte { copy(b, "XXXXXXXX"); copy(b[superblockSlot:], "XXXXXXXX"); return b },
			wantErr: ErrBadMagic, advice: "check the path",
		},
		"newer format version": {
			mangle: func(b []byte) []byte {
				for _, off := range []int{0, superblockSlot} {
					b[off+8] = FormatVersion + 1
				}
				return b
			},
			wantErr: ErrVersion, advice: fmt.Sprintf("run an octofs release that reads version %d", FormatVersion+1),
		},
		"both copies torn": {
			mangle:  func(b []byte) []byte { b[70]++; b[superblockSlot+70]++; return b },
			wantErr: ErrTornSuperblock, advice: "restore this node from a replica or reformat",
		},
		"another cluster": {
			mangle:  func(b []byte) []byte { return b },
			opts:    Options{ExpectCluster: other},
			wantErr: ErrWrongCluster, advice: "check the node's cluster setting",
		},
		"another node": {
			mangle:  func(b []byte) []byte { return b },
			opts:    Options{ExpectCluster: cluster, ExpectNode: 8},
			wantErr: ErrWrongCluster, advice: "check the node id",
		},
		"truncated": {
			mangle:  func(b []byte) []byte { return b[:96<<10] },
			wantErr: ErrGeometry, advice: "truncated",
		},
		"damaged committed log slot": {
			mangle: func(b []byte) []byte {
				g, _ := DecodeSuperblock(b)
				off := g.Geometry.LogOff
				binary.LittleEndian.PutUint64(b[off:], 5)    // commit
				binary.LittleEndian.PutUint64(b[off+16:], 5) // seq
				binary.LittleEndian.PutUint64(b[off+24:], 1) // wrong checksum
				return b
			},
			wantErr: ErrLogCorrupt, advice: "--repair",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			img := tc.mangle(formatted(t))
			_, err := Attach(NewMemMediumFrom(img), tc.opts)
			require.ErrorIs(t, err, tc.wantErr)
			require.Contains(t, err.Error(), tc.advice)
		})
	}
}

func TestOpenAccepts(t *testing.T) {
	tests := map[string]struct {
		mangle       func(b []byte)
		opts         Options
		wantFrom     string
		wantRepaired bool
	}{
		"intact":                       {mangle: func([]byte) {}, wantFrom: "A"},
		"copy A torn":                  {mangle: func(b []byte) { b[100] ^= 1 }, wantFrom: "B", wantRepaired: true},
		"copy B torn":                  {mangle: func(b []byte) { b[superblockSlot+100] ^= 1 }, wantFrom: "A", wantRepaired: true},
		"copy A blank":                 {mangle: func(b []byte) { clear(b[:superblockSlot]) }, wantFrom: "B", wantRepaired: true},
		"unjoined region, any cluster": {mangle: func([]byte) {}, opts: Options{ExpectCluster: UUID{5}, ExpectNode: 3}, wantFrom: "A"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := NewMemMedium(128 << 10)
			_, err := Format(m, smallFormat, Options{})
			require.NoError(t, err)
			tc.mangle(m.Bytes())
			r, err := Attach(m, tc.opts)
			require.NoError(t, err)
			require.Equal(t, tc.wantFrom, r.Recovery().SuperblockFrom)
			require.Equal(t, tc.wantRepaired, r.Recovery().SuperblockRepaired != "")
			requireClean(t, r)
			// The repair reached the medium: a second open finds both copies good.
			r2, err := Attach(m, Options{})
			require.NoError(t, err)
			require.Empty(t, r2.Recovery().SuperblockRepaired)
		})
	}
}

func TestSetIdentity(t *testing.T) {
	m := NewMemMedium(128 << 10)
	r, err := Format(m, smallFormat, Options{})
	require.NoError(t, err)
	c := UUID{0xaa}
	require.NoError(t, r.SetIdentity(c, 4))
	r2, err := Attach(m, Options{ExpectCluster: c, ExpectNode: 4})
	require.NoError(t, err)
	require.Equal(t, c, r2.Superblock().ClusterUUID)
	require.Equal(t, uint64(2), r2.Superblock().Seq)
	_, err = Attach(m, Options{ExpectCluster: UUID{0xbb}})
	require.ErrorIs(t, err, ErrWrongCluster)
}

func TestFullRegionIsCleanENOSPC(t *testing.T) {
	ctx := context.Background()
	r := newMemRegion(t, MinRegionSize, smallFormat)
	var records, blocks int
	for range 10 * int(r.Geometry().NumRecords) {
		tx, err := r.Begin(ctx)
		require.NoError(t, err)
		id, err := tx.AllocRecord(1)
		if errors.Is(err, ErrNoSpace) {
			tx.Abort()
			break
		}
		require.NoError(t, err)
		_, err = tx.AllocExtent(id, 3)
		if errors.Is(err, ErrNoSpace) {
			// Keep the record without data: the record itself still fits.
			tx.Abort()
			tx, err = r.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.AllocRecord(1)
			require.NoError(t, err)
		} else {
			require.NoError(t, err)
			blocks += 3
		}
		require.NoError(t, tx.Commit())
		records++
	}
	st := r.Stats()
	require.Equal(t, st.Records, st.RecordsUsed, "every record was handed out")
	require.Equal(t, uint64(records), st.RecordsUsed)
	require.Equal(t, uint64(blocks), st.BlocksUsed)
	require.Less(t, st.Blocks-st.BlocksUsed, uint64(3), "no run of 3 blocks left")
	requireClean(t, r)
}

func TestTxErrors(t *testing.T) {
	ctx := context.Background()
	r := newMemRegion(t, 128<<10, smallFormat)
	g := r.Geometry()
	tests := map[string]struct {
		do      func(tx *Tx) error
		wantErr error
	}{
		"write into the superblock":  {func(tx *Tx) error { return tx.Write8(0, 1) }, ErrBadAddress},
		"write into the log":         {func(tx *Tx) error { return tx.Write8(g.LogOff, 1) }, ErrBadAddress},
		"write into a bitmap":        {func(tx *Tx) error { return tx.Write8(g.RecBitmapOff, 1) }, ErrBadAddress},
		"write into a record header": {func(tx *Tx) error { return tx.Write8(g.RecordOff, 1) }, ErrBadAddress},
		"misaligned word":            {func(tx *Tx) error { return tx.Write8(g.DataOff+3, 1) }, ErrBadAddress},
		"past the end":               {func(tx *Tx) error { return tx.Write8(g.RegionSize, 1) }, ErrBadAddress},
		"unlogged write to old data": {func(tx *Tx) error { return tx.WriteFresh(g.DataOff, []byte{1}) }, ErrNotFresh},
		"free a free record":         {func(tx *Tx) error { return tx.FreeRecord(1) }, ErrBadAddress},
		"record id 0":                {func(tx *Tx) error { _, err := tx.AllocExtent(0, 1); return err }, ErrBadAddress},
		"extent for a free record":   {func(tx *Tx) error { _, err := tx.AllocExtent(3, 1); return err }, ErrBadAddress},
		"kind 0":                     {func(tx *Tx) error { _, err := tx.AllocRecord(0); return err }, ErrBadAddress},
		"larger than the data area": {func(tx *Tx) error {
			id, _ := tx.AllocRecord(1)
			_, err := tx.AllocExtent(id, g.NumBlocks+1)
			return err
		}, ErrNoSpace},
		"more extents than slots": {func(tx *Tx) error { return fillSlots(tx, int(g.ExtentSlots)+1) }, ErrRecordFull},
		"more updates than a slot holds": {func(tx *Tx) error {
			for i := range NumRoots {
				if err := tx.SetRoot(i, 1); err != nil {
					return err
				}
			}
			return nil
		}, ErrTxTooLarge},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tx, err := r.Begin(ctx)
			require.NoError(t, err)
			defer tx.Abort()
			require.ErrorIs(t, tc.do(tx), tc.wantErr)
		})
	}
	requireClean(t, r)
	require.Zero(t, r.Stats().RecordsUsed, "aborted transactions released their reservations")
}

func fillSlots(tx *Tx, n int) error {
	id, err := tx.AllocRecord(1)
	if err != nil {
		return err
	}
	for range n {
		if _, err := tx.AllocExtent(id, 1); err != nil {
			return err
		}
	}
	return nil
}

func TestConcurrentTransactions(t *testing.T) {
	ctx := context.Background()
	r := newMemRegion(t, 512<<10, FormatOptions{BlockSize: 512, RecordSize: 128, LogSlots: 3, LogSlotSize: 1024, NumRecords: 256})
	const workers, rounds = 6, 60
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				var mine []RecordID
				for i := range rounds {
					tx, err := r.Begin(ctx)
					if err != nil {
						return err
					}
					if i%3 == 2 && len(mine) > 0 {
						err = tx.FreeRecord(mine[0])
						mine = mine[1:]
					} else {
						var id RecordID
						id, err = tx.AllocRecord(uint16(w + 1))
						if err == nil {
							_, err = tx.AllocExtent(id, uint64(1+i%3))
						}
						if err == nil {
							rec, _ := r.Record(id)
							err = tx.Write8(rec.PayloadOff, uint64(w))
						}
						mine = append(mine, id)
					}
					if err != nil {
						tx.Abort()
						return err
					}
					if err := tx.Commit(); err != nil {
						return err
					}
				}
				for _, id := range mine {
					rec, err := r.Record(id)
					if err != nil {
						return err
					}
					if rec.Kind != uint16(w+1) || r.Load8(rec.PayloadOff) != uint64(w) {
						return fmt.Errorf("worker %d: record %d is %+v", w, id, rec)
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	requireClean(t, r)
	st := r.Stats()
	require.Equal(t, uint64(workers*rounds/3), st.RecordsUsed)
}

func TestStore8AndPersist(t *testing.T) {
	r := newMemRegion(t, 128<<10, smallFormat)
	require.NoError(t, r.Store8(r.RootOffset(3), 99))
	require.Equal(t, uint64(99), r.Root(3))
	require.ErrorIs(t, r.Store8(r.Geometry().RecBitmapOff, 1), ErrBadAddress)
	copy(r.Bytes()[r.Geometry().DataOff:], "direct")
	require.NoError(t, r.Persist(r.Geometry().DataOff, 6))
	require.ErrorIs(t, r.Persist(0, 8), ErrBadAddress)
}
