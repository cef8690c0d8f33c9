package pmem

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// populated returns a region with a few records owning extents.
func populated(t *testing.T) (*Region, []RecordID) {
	t.Helper()
	r := newMemRegion(t, 128<<10, smallFormat)
	var ids []RecordID
	for i := range 4 {
		ids = append(ids, commitRecord(t, r, uint16(1+i), uint64(1+i)))
	}
	requireClean(t, r)
	return r, ids
}

func TestFsckFindsAndRepairs(t *testing.T) {
	tests := map[string]struct {
		damage     func(r *Region, ids []RecordID)
		area       string
		message    string // part of the finding
		repairable bool
	}{
		"leaked blocks": {
			damage: func(r *Region, _ []RecordID) {
				g := r.geo
				r.store8(g.BlkBitmapOff+8, 0xf0) // blocks 68-71: nobody owns them
			},
			area: "blocks", message: "owned by no record (leaked)", repairable: true,
		},
		"owned blocks marked free": {
			damage: func(r *Region, ids []RecordID) {
				rec, _ := r.Record(ids[2])
				e := rec.Extents[0]
				w := r.geo.BlkBitmapOff + e.Start/64*8
				r.store8(w, r.load8(w)&^(1<<(e.Start%64)))
			},
			area: "blocks", message: "could be handed out twice", repairable: true,
		},
		"leaked and owned-but-free blocks at once": {
			damage: func(r *Region, ids []RecordID) {
				rec, _ := r.Record(ids[2])
				e := rec.Extents[0]
				w := r.geo.BlkBitmapOff + e.Start/64*8
				r.store8(w, r.load8(w)&^(1<<(e.Start%64)))
				r.store8(r.geo.BlkBitmapOff+8, 0xf0)
			},
			area: "blocks", message: "owned by no record (leaked)", repairable: true,
		},
		"record missing from the bitmap": {
			damage: func(r *Region, ids []RecordID) {
				idx := uint64(ids[1]) - 1
				w := r.geo.RecBitmapOff + idx/64*8
				r.store8(w, r.load8(w)&^(1<<(idx%64)))
			},
			area: "records", message: "in use but free in the record bitmap", repairable: true,
		},
		"free record marked allocated": {
			damage: func(r *Region, _ []RecordID) {
				r.store8(r.geo.RecBitmapOff, r.load8(r.geo.RecBitmapOff)|1<<40)
			},
			area: "records", message: "leaked", repairable: true,
		},
		"garbage record header": {
			damage: func(r *Region, ids []RecordID) {
				r.store8(r.recordOff(ids[3]), 0xdeadbeef)
			},
			area: "records", message: "no record magic", repairable: true,
		},
		"extent past the data area": {
			damage: func(r *Region, ids []RecordID) {
				r.store8(r.recordOff(ids[0])+recordHdrSize, r.geo.NumBlocks+5)
			},
			area: "records", message: "outside the", repairable: true,
		},
		"stale extent in a free record": {
			damage: func(r *Region, _ []RecordID) {
				r.store8(r.recordOff(30)+recordHdrSize+8, 3)
			},
			area: "records", message: "stale extent", repairable: true,
		},
		"bits past the end of the block bitmap": {
			damage: func(r *Region, _ []RecordID) {
				g := r.geo
				w := g.BlkBitmapOff + g.NumBlocks/64*8
				r.store8(w, r.load8(w)|1<<63)
			},
			area: "blocks", message: "past its last entry", repairable: true,
		},
		"two records claim the same blocks": {
			damage: func(r *Region, ids []RecordID) {
				a, _ := r.Record(ids[1])
				off := r.recordOff(ids[2]) + recordHdrSize
				r.store8(off, a.Extents[0].Start)
			},
			area: "blocks", message: "overlaps", repairable: false,
		},
		"superblock copies disagree": {
			damage: func(r *Region, _ []RecordID) {
				sb := r.Superblock()
				sb.NodeID = 77
				r.storeBytes(superblockSlot, sb.Encode())
			},
			area: "superblock", message: "differ", repairable: false,
		},
		"committed log slot left behind": {
			damage: func(r *Region, _ []RecordID) {
				r.store8(r.geo.slotOff(1), 9)
			},
			area: "log", message: "still committed", repairable: false,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, ids := populated(t)
			tc.damage(r, ids)
			rep := Check(r)
			require.False(t, rep.Clean(), "fsck missed it:\n%s", rep)
			found := false
			for _, f := range rep.Findings {
				if f.Area == tc.area && strings.Contains(f.Message, tc.message) {
					found = true
					require.Equal(t, tc.repairable, f.Fix != "", "finding %+v", f)
				}
			}
			require.True(t, found, "no %s finding about %q:\n%s", tc.area, tc.message, rep)
			fixed, err := Repair(context.Background(), r)
			require.NoError(t, err)
			if tc.repairable {
				require.True(t, fixed.Clean(), "repair left problems:\n%s", fixed)
				requireClean(t, r)
				// The repaired region is usable.
				commitRecord(t, r, 1, 2)
				requireClean(t, r)
			} else {
				require.False(t, fixed.Clean())
			}
		})
	}
}

func TestCheckFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	r, err := Create(path, 256<<10, smallFormat, Options{})
	require.NoError(t, err)
	commitRecord(t, r, 1, 2)
	// A committed-but-unapplied transaction (a crash between F2 and F3)
	// and a leaked block.
	tx, err := r.Begin(t.Context())
	require.NoError(t, err)
	require.NoError(t, tx.SetRoot(5, 55))
	enc := encodeLogSlot(make([]byte, r.geo.LogSlotSize), 1000, tx.entries)
	r.storeBytes(r.geo.slotOff(3)+8, enc)
	r.store8(r.geo.slotOff(3), 1000)
	tx.Abort()
	r.store8(r.geo.BlkBitmapOff, r.load8(r.geo.BlkBitmapOff)|1<<20)
	require.NoError(t, r.Persist(r.RootOffset(0), 8))
	require.NoError(t, r.Close())

	ctx := context.Background()
	rep, err := CheckFile(ctx, path, false, nil)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Recovery.Replayed)
	require.Equal(t, 1, rep.Problems(), "%s", rep)
	require.Equal(t, 1, rep.Repairable())
	require.Contains(t, rep.String(), "run again with --repair")

	// The check did not touch the file: the slot is still committed.
	rep, err = CheckFile(ctx, path, false, nil)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Recovery.Replayed)

	rep, err = CheckFile(ctx, path, true, nil)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "%s", rep)
	rep, err = CheckFile(ctx, path, false, nil)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "%s", rep)
	require.Zero(t, rep.Recovery.Replayed)

	r, err = Open(path, Options{})
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, uint64(55), r.Root(5), "the committed transaction was replayed")
}

func TestRepairDiscardsDamagedLogSlot(t *testing.T) {
	m := NewMemMedium(128 << 10)
	r, err := Format(m, smallFormat, Options{})
	require.NoError(t, err)
	tx, err := r.Begin(context.Background())
	require.NoError(t, err)
	require.NoError(t, tx.SetRoot(1, 11))
	enc := encodeLogSlot(make([]byte, r.geo.LogSlotSize), 7, tx.entries)
	tx.Abort()
	enc[len(enc)-1] ^= 0xff // a damaged entry
	r.storeBytes(r.geo.slotOff(0)+8, enc)
	r.store8(r.geo.slotOff(0), 7)

	_, err = Attach(m, Options{})
	require.ErrorIs(t, err, ErrLogCorrupt)
	r, err = Attach(m, Options{DiscardCorruptLog: true})
	require.NoError(t, err)
	rep, err := Repair(context.Background(), r)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "%s", rep)
	require.Len(t, rep.Recovery.Discarded, 1)
	require.Zero(t, r.Root(1), "the damaged transaction's update is lost, not half-applied")
	_, err = Attach(m, Options{})
	require.NoError(t, err, "after repair the region opens normally")
}
