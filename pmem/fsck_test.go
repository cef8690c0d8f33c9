package pmem

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fsckFormat has a record count that is not a multiple of 64, so the
// record bitmap has tail bits to damage.
var fsckFormat = FormatOptions{BlockSize: 512, RecordSize: 128, ExtentSlots: 4, LogSlots: 4, LogSlotSize: 1024, NumRecords: 60}

// fsckFixture is a populated region image: live records owning extents
// full of data, a freed record whose payload was left behind, and a root.
type fsckFixture struct {
	img    []byte
	g      Geometry
	live   []RecordID
	freed  RecordID // freed, payload non-zero
	unused RecordID // never used, payload zero
}

func newFsckFixture(t *testing.T) *fsckFixture {
	t.Helper()
	m := NewMemMedium(128 << 10)
	r, err := Format(m, fsckFormat, Options{})
	require.NoError(t, err)
	fx := &fsckFixture{g: r.Geometry(), unused: 50}
	layouts := [][]uint64{{3}, {2, 1}, {1, 1, 2}, {5}, {4, 2}}
	for i, counts := range layouts {
		tx, err := r.Begin(t.Context())
		require.NoError(t, err)
		id, err := tx.AllocRecord(uint16(i + 1))
		require.NoError(t, err)
		rec, _ := r.Record(id)
		require.NoError(t, tx.Write(rec.PayloadOff, []byte(fmt.Sprintf("record %d payload", id))))
		for _, c := range counts {
			e, err := tx.AllocExtent(id, c)
			require.NoError(t, err)
			require.NoError(t, tx.WriteFresh(r.ExtentOffset(e), bytes.Repeat([]byte{byte(id)*16 + byte(c)}, int(c)*512)))
		}
		require.NoError(t, tx.SetRoot(i, uint64(id)))
		require.NoError(t, tx.Commit())
		fx.live = append(fx.live, id)
	}
	// A record that lived and was freed: its payload stays behind.
	tx, err := r.Begin(t.Context())
	require.NoError(t, err)
	id, err := tx.AllocRecord(9)
	require.NoError(t, err)
	rec, _ := r.Record(id)
	require.NoError(t, tx.Write8(rec.PayloadOff, 0xfeed))
	require.NoError(t, tx.Commit())
	tx, err = r.Begin(t.Context())
	require.NoError(t, err)
	require.NoError(t, tx.FreeRecord(id))
	require.NoError(t, tx.Commit())
	fx.freed = id
	requireClean(t, r)
	fx.img = slices.Clone(m.Bytes())
	return fx
}

func (fx *fsckFixture) recOff(id RecordID) int {
	return int(fx.g.RecordOff + (uint64(id)-1)*uint64(fx.g.RecordSize))
}

func (fx *fsckFixture) slotOff(id RecordID, i int) int { return fx.recOff(id) + recordHdrSize + 16*i }

func put8(b []byte, off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
func get8(b []byte, off int) uint64    { return binary.LittleEndian.Uint64(b[off:]) }

// extentOf reads slot i of record id from an image.
func (fx *fsckFixture) extentOf(b []byte, id RecordID, i int) Extent {
	return Extent{Start: get8(b, fx.slotOff(id, i)), Count: get8(b, fx.slotOff(id, i)+8)}
}

func (fx *fsckFixture) setBlockBit(b []byte, blk uint64, on bool) {
	off := int(fx.g.BlkBitmapOff + blk/64*8)
	if on {
		put8(b, off, get8(b, off)|1<<(blk%64))
	} else {
		put8(b, off, get8(b, off)&^(1<<(blk%64)))
	}
}

func (fx *fsckFixture) setRecordBit(b []byte, id RecordID, on bool) {
	idx := uint64(id) - 1
	off := int(fx.g.RecBitmapOff + idx/64*8)
	if on {
		put8(b, off, get8(b, off)|1<<(idx%64))
	} else {
		put8(b, off, get8(b, off)&^(1<<(idx%64)))
	}
}

// committedSlot writes a committed log slot holding entries into slot 1;
// mangle may damage its bytes (slot-relative) afterwards.
func (fx *fsckFixture) committedSlot(b []byte, seq uint64, entries []logEntry, mangle func(slot []byte)) {
	off := int(fx.g.slotOff(1))
	slot := b[off : off+int(fx.g.LogSlotSize)]
	size := 0
	for _, e := range entries {
		size += e.size()
	}
	encodeLogSlot(slot[8:], seq, entries, size)
	put8(slot, 0, seq)
	if mangle != nil {
		mangle(slot)
	}
}

func encodeSuperblockInto(b []byte, copyIdx int, sb Superblock) {
	clear(b[copyIdx*superblockSlot : (copyIdx+1)*superblockSlot])
	copy(b[copyIdx*superblockSlot:], sb.Encode())
}

// fsckOutcome is what fsck must do about a kind of corruption.
type fsckOutcome string

const (
	outRepaired     fsckOutcome = "repaired"      // clean after one repair
	outQuarantined  fsckOutcome = "quarantined"   // kept under KindQuarantined; nothing freed
	outUnrepairable fsckOutcome = "unrepairable"  // reported, nothing changed
	outRefused      fsckOutcome = "refused"       // the region does not open; the error says why
	outAtOpen       fsckOutcome = "fixed at open" // opening repairs it; fsck reports it
)

type fsckCase struct {
	area    string
	damage  func(fx *fsckFixture, b []byte) (targets []RecordID)
	message string // part of the finding (or of the refusal)
	outcome fsckOutcome
	refusal error
}

func fsckCases() map[string]fsckCase {
	return map[string]fsckCase{
		// Superblocks.
		"superblock copy A torn": {area: "superblock", outcome: outAtOpen, message: "copy A",
			damage: func(fx *fsckFixture, b []byte) []RecordID { b[100] ^= 1; return nil }},
		"superblock copy B blank": {area: "superblock", outcome: outAtOpen, message: "copy B",
			damage: func(fx *fsckFixture, b []byte) []RecordID { clear(b[superblockSlot : 2*superblockSlot]); return nil }},
		"superblock copy A stale": {area: "superblock", outcome: outAtOpen, message: "copy A (stale)",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				sb, _ := DecodeSuperblock(b[superblockSlot:])
				sb.Seq++
				encodeSuperblockInto(b, 1, sb)
				return nil
			}},
		"superblock copy A with impossible geometry": {area: "superblock", outcome: outAtOpen, message: "copy A",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				sb, _ := DecodeSuperblock(b)
				sb.Geometry.RecordOff += 4096
				encodeSuperblockInto(b, 0, sb)
				return nil
			}},
		"superblock copies differ at the same seq": {area: "superblock", outcome: outRefused, refusal: ErrTornSuperblock, message: "nothing tells which is right",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				sb, _ := DecodeSuperblock(b)
				sb.NodeID = 77
				encodeSuperblockInto(b, 1, sb)
				return nil
			}},
		"both superblock copies torn": {area: "superblock", outcome: outRefused, refusal: ErrTornSuperblock, message: "restore this node",
			damage: func(fx *fsckFixture, b []byte) []RecordID { b[70]++; b[superblockSlot+70]++; return nil }},
		"superblock of another format version": {area: "superblock", outcome: outRefused, refusal: ErrVersion, message: "run an octofs release",
			damage: func(fx *fsckFixture, b []byte) []RecordID { b[8] = 1; b[superblockSlot+8] = 1; return nil }},
		// Redo log.
		"committed log slot, bad checksum": {area: "log", outcome: outRepaired, message: "checksum",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				fx.committedSlot(b, 90, []logEntry{{op: opSet, off: fx.g.RootsOff + 40, val: 5}}, func(s []byte) { s[logHdrSize+8] ^= 1 })
				return nil
			}},
		"committed log slot, commit word disagrees with seq": {area: "log", outcome: outRepaired, message: "does not match seq",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				fx.committedSlot(b, 90, []logEntry{{op: opSet, off: fx.g.RootsOff + 40, val: 5}}, func(s []byte) { put8(s, 0, 91) })
				return nil
			}},
		"committed log slot writing the superblock": {area: "log", outcome: outRepaired, message: "outside the mutable areas",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				fx.committedSlot(b, 90, []logEntry{{op: opSet, off: 8, val: 5}}, nil)
				return nil
			}},
		"committed log slot, length past the slot": {area: "log", outcome: outRepaired, message: "a slot holds",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				fx.committedSlot(b, 90, nil, func(s []byte) { put8(s, 32, 1<<20) })
				return nil
			}},
		"committed log slot, unknown op": {area: "log", outcome: outRepaired, message: "unknown op",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				fx.committedSlot(b, 90, []logEntry{{op: 9, off: fx.g.RootsOff, val: 5}}, nil)
				return nil
			}},
		"committed log slot, block range past the end": {area: "log", outcome: outRepaired, message: "outside the",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				fx.committedSlot(b, 90, []logEntry{{op: opBlkSet, off: fx.g.NumBlocks - 2, val: 5}}, nil)
				return nil
			}},
		// Record bitmap.
		"in-use record free in the record bitmap": {area: "records", outcome: outRepaired, message: "free in the record bitmap",
			damage: func(fx *fsckFixture, b []byte) []RecordID { fx.setRecordBit(b, fx.live[1], false); return nil }},
		"never-used record marked allocated": {area: "records", outcome: outRepaired, message: "leaked",
			damage: func(fx *fsckFixture, b []byte) []RecordID { fx.setRecordBit(b, fx.unused, true); return nil }},
		"freed record with a payload marked allocated": {area: "records", outcome: outQuarantined, message: "non-zero payload",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				fx.setRecordBit(b, fx.freed, true)
				return []RecordID{fx.freed}
			}},
		"bits past the end of the record bitmap": {area: "records", outcome: outRepaired, message: "past its last entry",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				off := int(fx.g.RecBitmapOff)
				put8(b, off, get8(b, off)|1<<62)
				return nil
			}},
		// Block bitmap.
		"leaked blocks": {area: "blocks", outcome: outRepaired, message: "owned by no record (leaked)",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				for blk := uint64(100); blk < 104; blk++ {
					fx.setBlockBit(b, blk, true)
				}
				return nil
			}},
		"owned blocks free in the bitmap": {area: "blocks", outcome: outRepaired, message: "could be handed out twice",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				e := fx.extentOf(b, fx.live[2], 2)
				fx.setBlockBit(b, e.Start+1, false)
				return nil
			}},
		"bits past the end of the block bitmap": {area: "blocks", outcome: outRepaired, message: "past its last entry",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				off := int(fx.g.BlkBitmapOff + fx.g.NumBlocks/64*8)
				put8(b, off, get8(b, off)|1<<63)
				return nil
			}},
		// Records and their extents.
		"garbage record header": {area: "records", outcome: outQuarantined, message: "no record magic",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				put8(b, fx.recOff(fx.live[3]), 0xdeadbeef)
				return fx.live[3:4]
			}},
		"record magic damaged, kind and extents intact": {area: "records", outcome: outQuarantined, message: "no record magic",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				off := fx.recOff(fx.live[1])
				put8(b, off, get8(b, off)^1<<50)
				return fx.live[1:2]
			}},
		"extent count larger than the slots": {area: "records", outcome: outQuarantined, message: "only 4 slots",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				put8(b, fx.recOff(fx.live[0]), encodeHeaderWord0(1, 9))
				return fx.live[:1]
			}},
		"extent past the data area": {area: "records", outcome: outQuarantined, message: "outside the",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				put8(b, fx.slotOff(fx.live[2], 1), fx.g.NumBlocks+5)
				return fx.live[2:3]
			}},
		"zero-length extent in use": {area: "records", outcome: outQuarantined, message: "outside the",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				put8(b, fx.slotOff(fx.live[4], 1)+8, 0)
				return fx.live[4:5]
			}},
		"extent count smaller than the slots in use": {area: "records", outcome: outQuarantined, message: "unused extent slot",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				put8(b, fx.recOff(fx.live[4]), encodeHeaderWord0(5, 1)) // the last count word survives
				return fx.live[4:5]
			}},
		"header cleared, extents and bitmap bit intact": {area: "records", outcome: outQuarantined, message: "free header but allocated",
			damage: func(fx *fsckFixture, b []byte) []RecordID { put8(b, fx.recOff(fx.live[3]), 0); return fx.live[3:4] }},
		"free record with stale extent slots": {area: "records", outcome: outRepaired, message: "stale extent",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				put8(b, fx.slotOff(fx.unused, 0), 150)
				put8(b, fx.slotOff(fx.unused, 0)+8, 3)
				return nil
			}},
		"two records claim the same blocks": {area: "blocks", outcome: outUnrepairable, message: "overlaps",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				e := fx.extentOf(b, fx.live[1], 0)
				put8(b, fx.slotOff(fx.live[3], 0), e.Start)
				return nil
			}},
		"leaked blocks while two records overlap": {area: "blocks", outcome: outUnrepairable, message: "kept allocated",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				e := fx.extentOf(b, fx.live[1], 0)
				put8(b, fx.slotOff(fx.live[3], 0), e.Start)
				for blk := uint64(100); blk < 104; blk++ {
					fx.setBlockBit(b, blk, true)
				}
				return nil
			}},
		"damaged header whose extent overlaps a live record": {area: "records", outcome: outQuarantined, message: "no record magic",
			damage: func(fx *fsckFixture, b []byte) []RecordID {
				e := fx.extentOf(b, fx.live[0], 0)
				put8(b, fx.slotOff(fx.live[3], 0), e.Start) // the live record keeps its blocks
				put8(b, fx.recOff(fx.live[3]), 0x1234)
				return fx.live[3:4]
			}},
	}
}

// recordSnapshot is what a live record holds, data included.
type recordSnapshot struct {
	rec     Record
	payload []byte
	data    [][]byte
}

func snapshotRecords(t *testing.T, r *Region, ids []RecordID) map[RecordID]recordSnapshot {
	out := map[RecordID]recordSnapshot{}
	for _, id := range ids {
		rec, err := r.Record(id)
		require.NoError(t, err)
		p, _ := r.Payload(id)
		s := recordSnapshot{rec: rec, payload: slices.Clone(p)}
		for _, e := range rec.Extents {
			d, err := r.ExtentBytes(e)
			require.NoError(t, err)
			s.data = append(s.data, slices.Clone(d))
		}
		out[id] = s
	}
	return out
}

// TestFsckCorruptionTable damages pmem's own structures in every way in
// fsckCases and requires, for each: check-only fsck detects it and changes
// nothing; one repair pass does what the case says (repairs it,
// quarantines, or reports it unrepairable) without freeing any block a
// record may own and without touching intact records; a second repair
// changes nothing; the repaired region takes a transaction.
func TestFsckCorruptionTable(t *testing.T) {
	base := newFsckFixture(t)
	cases := fsckCases()
	require.GreaterOrEqual(t, len(cases), 20)
	var table []string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range cases {
			if !yield(k) {
				return
			}
		}
	}) {
		tc := cases[name]
		t.Run(name, func(t *testing.T) {
			fx := *base
			fx.img = slices.Clone(base.img)
			targets := tc.damage(&fx, fx.img)
			damaged := slices.Clone(fx.img)
			intact := slices.DeleteFunc(slices.Clone(fx.live), func(id RecordID) bool { return slices.Contains(targets, id) })

			// Check only: detected, nothing written.
			ro, err := Attach(NewMemMediumFrom(fx.img), Options{ReadOnly: true, DiscardCorruptLog: true})
			if tc.outcome == outRefused {
				require.ErrorIs(t, err, tc.refusal)
				require.Contains(t, err.Error(), tc.message)
				table = append(table, fmt.Sprintf("| %s | %s | %s | refused at open: %v |", name, tc.area, tc.outcome, tc.refusal))
				return
			}
			require.NoError(t, err)
			rep := Check(ro)
			f := findFinding(rep, tc.area, tc.message)
			require.NotNil(t, f, "no %s finding about %q:\n%s", tc.area, tc.message, rep)
			require.False(t, rep.Clean())
			switch tc.outcome {
			case outUnrepairable:
				require.Empty(t, f.Fix, "%+v", f)
			default:
				require.NotEmpty(t, f.Fix, "%+v", f)
			}
			require.Equal(t, damaged, ro.Bytes(), "check-only fsck wrote the medium")

			// Repair.
			m := NewMemMediumFrom(fx.img)
			r, err := Attach(m, Options{DiscardCorruptLog: true})
			require.NoError(t, err)
			before := snapshotRecords(t, r, intact)
			fixed, err := Repair(context.Background(), r)
			require.NoError(t, err)
			after := Check(r)
			switch tc.outcome {
			case outRepaired, outAtOpen:
				require.True(t, after.Clean(), "repair left problems:\n%s", fixed)
			case outQuarantined:
				for _, id := range targets {
					rec, err := r.Record(id)
					require.NoError(t, err)
					require.Equal(t, KindQuarantined, rec.Kind, "record %d", id)
				}
				require.Zero(t, after.Repairable(), "%s", after)
			case outUnrepairable:
				require.NotNil(t, findFinding(after, tc.area, tc.message), "%s", after)
				require.Zero(t, after.Repairable(), "%s", after)
			}
			// Intact records keep everything, data included; blocks a
			// damaged record may own stay allocated.
			require.Equal(t, before, snapshotRecords(t, r, intact))
			for _, id := range intact {
				rec, _ := r.Record(id)
				for _, e := range rec.Extents {
					require.True(t, r.allSet(r.geo.BlkBitmapOff, e.Start, e.Count), "record %d %v freed", id, e)
				}
			}
			for _, id := range targets {
				for i := range int(fx.g.ExtentSlots) {
					if e := fx.extentOf(damaged, id, i); fx.g.plausible(e) && allSetIn(damaged, fx.g, e) {
						require.True(t, r.allSet(r.geo.BlkBitmapOff, e.Start, e.Count), "damaged record %d's %v was freed", id, e)
					}
				}
			}
			// One pass: a second fsck --repair writes nothing and fixes
			// nothing.
			once := slices.Clone(m.Bytes())
			m2 := NewMemMediumFrom(once)
			r2, err := Attach(m2, Options{DiscardCorruptLog: true})
			require.NoError(t, err)
			again, err := Repair(context.Background(), r2)
			require.NoError(t, err)
			for _, f := range again.Findings {
				require.False(t, f.Repaired, "second pass repaired %+v", f)
			}
			require.Equal(t, once, m2.Bytes(), "second repair changed the medium")
			// Usable afterwards.
			if tc.outcome != outUnrepairable {
				commitRecord(t, r, 1, 2)
				require.Zero(t, Check(r).Repairable())
			}
			table = append(table, fmt.Sprintf("| %s | %s | %s | %s |", name, tc.area, tc.outcome, f.Fix))
		})
	}
	t.Logf("fsck corruption table (%d kinds):\n| corruption | area | outcome | what --repair does |\n|---|---|---|---|\n%s", len(table), strings.Join(table, "\n"))
}

func allSetIn(img []byte, g Geometry, e Extent) bool {
	for b := e.Start; b < e.End(); b++ {
		if get8(img, int(g.BlkBitmapOff+b/64*8))&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

func findFinding(rep *Report, area, message string) *Finding {
	for i, f := range rep.Findings {
		if f.Area == area && strings.Contains(f.Message, message) {
			return &rep.Findings[i]
		}
	}
	return nil
}

func TestFsckRebuildsADisagreeingIndex(t *testing.T) {
	r := newMemRegion(t, 128<<10, smallFormat)
	commitRecord(t, r, 1, 2)
	r.allocMu.Lock()
	r.blks.Set(50, 3) // behind the bitmap's back
	r.allocMu.Unlock()
	rep := Check(r)
	require.NotNil(t, findFinding(rep, "blocks", "in-memory allocator index disagrees"), "%s", rep)
	fixed, err := Repair(context.Background(), r)
	require.NoError(t, err)
	require.True(t, Check(r).Clean(), "%s", fixed)
}

func TestReleaseQuarantined(t *testing.T) {
	fx := newFsckFixture(t)
	put8(fx.img, fx.recOff(fx.live[3]), 0xdeadbeef) // quarantined on repair
	for blk := uint64(100); blk < 104; blk++ {
		fx.setBlockBit(fx.img, blk, true) // leaked, kept while a record is quarantined
	}
	r, err := Attach(NewMemMediumFrom(fx.img), Options{})
	require.NoError(t, err)
	_, err = Repair(context.Background(), r)
	require.NoError(t, err)
	rep := Check(r)
	require.NotNil(t, findFinding(rep, "blocks", "kept allocated"), "%s", rep)
	n, err := ReleaseQuarantined(context.Background(), r)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = Repair(context.Background(), r)
	require.NoError(t, err)
	require.True(t, Check(r).Clean(), "%s", Check(r))
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
	enc := encodeLogSlot(make([]byte, r.geo.LogSlotSize), 1000, tx.entries, tx.size)
	r.storeBytes(r.geo.slotOff(3)+8, enc)
	r.store8(r.geo.slotOff(3), 1000)
	tx.Abort()
	r.store8(r.geo.BlkBitmapOff, r.load8(r.geo.BlkBitmapOff)|1<<20)
	require.NoError(t, r.persist(0, r.geo.RegionSize))
	require.NoError(t, r.Close())

	ctx := context.Background()
	rep, err := CheckFile(ctx, path, false, nil)
	require.NoError(t, err)
	require.True(t, rep.Medium.ReadOnly)
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
	enc := encodeLogSlot(make([]byte, r.geo.LogSlotSize), 7, tx.entries, tx.size)
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
