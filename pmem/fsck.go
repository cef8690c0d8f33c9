package pmem

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"runtime/debug"
	"slices"
	"strings"
)

// Severity ranks a fsck finding.
type Severity string

const (
	// SevInfo is worth knowing and needs no action (e.g. a replay).
	SevInfo Severity = "info"
	// SevWarning was or will be fixed by opening the region.
	SevWarning Severity = "warning"
	// SevError breaks an invariant of the layout.
	SevError Severity = "error"
)

// Finding is one thing fsck noticed, in words for an operator.
type Finding struct {
	Severity Severity `json:"severity"`
	Area     string   `json:"area"` // superblock, log, records, blocks
	Message  string   `json:"message"`
	// Fix says what --repair does about it; empty when it cannot.
	Fix      string `json:"fix,omitempty"`
	Repaired bool   `json:"repaired,omitempty"`
}

// Report is the result of a check.
type Report struct {
	Medium     MediumInfo   `json:"medium"`
	Superblock Superblock   `json:"superblock"`
	Recovery   RecoveryInfo `json:"recovery"`
	Stats      Stats        `json:"stats"`
	Findings   []Finding    `json:"findings"`
}

// Problems counts the errors and warnings not (yet) repaired.
func (rep *Report) Problems() int {
	n := 0
	for _, f := range rep.Findings {
		if f.Severity != SevInfo && !f.Repaired {
			n++
		}
	}
	return n
}

// Clean reports whether the region has no unrepaired errors or warnings.
func (rep *Report) Clean() bool { return rep.Problems() == 0 }

// Repairable counts unrepaired problems that --repair can fix.
func (rep *Report) Repairable() int {
	n := 0
	for _, f := range rep.Findings {
		if f.Severity != SevInfo && !f.Repaired && f.Fix != "" {
			n++
		}
	}
	return n
}

// String summarises the findings in one paragraph per finding.
func (rep *Report) String() string {
	var b bytes.Buffer
	rep.WriteText(&b)
	return b.String()
}

// WriteText prints the report for an operator.
func (rep *Report) WriteText(w io.Writer) {
	sb, g := rep.Superblock, rep.Superblock.Geometry
	fmt.Fprintf(w, "region %s (format version %d)\n", sb.RegionUUID, sb.Version)
	fmt.Fprintf(w, "  backing:  %s\n", rep.Medium)
	cluster := "none yet"
	if !sb.ClusterUUID.IsZero() {
		cluster = sb.ClusterUUID.String()
	}
	fmt.Fprintf(w, "  identity: cluster %s, node %d\n", cluster, sb.NodeID)
	fmt.Fprintf(w, "  layout:   %d bytes, %d records of %d B (%d extent slots), %d blocks of %d B, %d log slots of %d B\n",
		g.RegionSize, g.NumRecords, g.RecordSize, g.ExtentSlots, g.NumBlocks, g.BlockSize, g.LogSlots, g.LogSlotSize)
	fmt.Fprintf(w, "  in use:   %d/%d records, %d/%d blocks (longest free run %d blocks)\n", rep.Stats.RecordsUsed, rep.Stats.Records, rep.Stats.BlocksUsed, rep.Stats.Blocks, rep.Stats.LongestFreeRun)
	for _, f := range rep.Findings {
		state := ""
		switch {
		case f.Repaired:
			state = " [repaired]"
		case f.Severity != SevInfo && f.Fix != "":
			state = " [--repair: " + f.Fix + "]"
		case f.Severity != SevInfo:
			state = " [not repaired automatically]"
		}
		fmt.Fprintf(w, "  %-7s %s: %s%s\n", f.Severity, f.Area, f.Message, state)
	}
	switch p := rep.Problems(); {
	case p == 0:
		fmt.Fprintln(w, "clean")
	case rep.Repairable() == p:
		fmt.Fprintf(w, "%d problem(s), all repairable: run again with --repair\n", p)
	default:
		fmt.Fprintf(w, "%d problem(s), %d repairable with --repair; each of the others says what to do\n", p, rep.Repairable())
	}
}

// fix is one repair: log entries applied in transactions of their own.
type fix struct {
	finding int
	entries []logEntry
}

type checker struct {
	r     *Region
	rep   *Report
	fixes []fix
}

func (c *checker) add(sev Severity, area, fixText string, format string, args ...any) int {
	c.rep.Findings = append(c.rep.Findings, Finding{Severity: sev, Area: area, Message: fmt.Sprintf(format, args...), Fix: fixText})
	return len(c.rep.Findings) - 1
}

func (c *checker) addFix(sev Severity, area, fixText string, entries []logEntry, format string, args ...any) {
	i := c.add(sev, area, fixText, format, args...)
	c.fixes = append(c.fixes, fix{finding: i, entries: entries})
}

// Check verifies every invariant of the open region's layout: both
// superblock copies, the redo log, the record bitmap against the record
// headers, every extent against the data area and the others, and the
// block bitmap against the extents owned by allocated records. It
// changes nothing. Call it with no transaction in flight.
func Check(r *Region) *Report {
	return r.check(true).rep
}

// check checks every invariant; withRecovery first reports what opening
// the region did. A media error while reading is a finding.
func (r *Region) check(withRecovery bool) *checker {
	c := &checker{r: r, rep: &Report{Medium: r.info, Superblock: r.Superblock(), Recovery: r.recovery, Stats: r.Stats()}}
	if withRecovery {
		c.reportRecovery()
	}
	err := Guarded(func() error {
		c.checkSuperblocks()
		c.checkLog()
		c.checkRecordsAndBlocks()
		c.checkIndexes()
		return nil
	})
	if err != nil {
		c.fixes = nil
		c.add(SevError, "medium", "", "reading the region failed: %v", err)
	}
	return c
}

// reportRecovery reports what opening the region repaired or replayed.
// Recovery's writes reach the medium unless the region is read-only.
func (c *checker) reportRecovery() {
	r := c.r
	rec := r.recovery
	fixed := r.ro == nil
	if rec.SuperblockRepaired != "" {
		i := c.add(SevWarning, "superblock", "rewrite it from the good copy", "superblock %s when the region was opened", rec.SuperblockRepaired)
		c.rep.Findings[i].Repaired = fixed
	}
	if n := rec.Replayed; n > 0 {
		c.add(SevInfo, "log", "", "%d committed transaction(s) were replayed from the redo log (normal after a crash)", n)
	}
	for _, d := range rec.Discarded {
		// Slots are discarded only under Options.DiscardCorruptLog.
		i := c.add(SevError, "log", "discard the slot (the transaction's update is lost)", "damaged committed transaction: %s", d)
		c.rep.Findings[i].Repaired = fixed
	}
}

func (c *checker) checkSuperblocks() {
	r := c.r
	a, errA := DecodeSuperblock(r.readBytes(0, superblockSlot))
	b, errB := DecodeSuperblock(r.readBytes(superblockSlot, superblockSlot))
	cur := r.Superblock()
	for i, e := range []error{errA, errB} {
		name := [2]string{"A", "B"}[i]
		if e != nil {
			c.add(SevError, "superblock", "", "copy %s does not decode: %v", name, e)
		}
	}
	if errA == nil && errB == nil && (a != cur || b != cur) {
		c.add(SevError, "superblock", "", "copies A (seq %d) and B (seq %d) differ from the superblock in use (seq %d) with nothing to tell which is right: check the node's identity (octoctl fsck --json shows both), then reformat or restore the node", a.Seq, b.Seq, cur.Seq)
	}
}

func (c *checker) checkLog() {
	r := c.r
	g := r.geo
	for i := range int(g.LogSlots) {
		if v := r.load8(g.slotOff(i)); v != 0 {
			c.add(SevError, "log", "", "slot %d is still committed (seq %d) after recovery: a transaction was in flight while checking; stop the node and check again", i, v)
		}
	}
}

// bitvec is a plain bitmap fsck builds of what should be allocated.
type bitvec []uint64

func newBitvec(n uint64) bitvec    { return make(bitvec, (n+63)/64) }
func (b bitvec) get(i uint64) bool { return b[i/64]&(1<<(i%64)) != 0 }

func (b bitvec) setRange(start, n uint64) {
	for i := start; i < start+n; {
		w, lo := i/64, i%64
		hi := min(uint64(64), start+n-w*64)
		b[w] |= ^uint64(0) >> (64 - (hi - lo)) << lo
		i = w*64 + hi
	}
}

// allSet reports whether every bit of [start, start+n) is set in the
// bitmap at off of the region.
func (r *Region) allSet(off, start, n uint64) bool {
	for i := start; i < start+n; {
		w, lo := i/64, i%64
		hi := min(uint64(64), start+n-w*64)
		mask := ^uint64(0) >> (64 - (hi - lo)) << lo
		if r.load8(off+8*w)&mask != mask {
			return false
		}
		i = w*64 + hi
	}
	return true
}

// ownedExtent is an extent and the record that claims it.
type ownedExtent struct {
	Extent
	owner RecordID
}

// plausible reports whether e could be a real extent of this region.
func (g Geometry) plausible(e Extent) bool {
	return e.Count > 0 && e.Start < g.NumBlocks && e.Count <= g.NumBlocks-e.Start
}

// recordState is what fsck makes of one record.
type recordState struct {
	id      RecordID
	bit     bool
	h       recordHeader
	err     error
	raw     []byte   // header and extent slots
	slots   []Extent // every slot, as stored
	payload bool     // the payload holds a non-zero byte
}

// checkRecordsAndBlocks checks the record bitmap against the headers and
// the block bitmap against what the records own. Its repairs follow one
// rule: never free what a record may own. A record whose header is
// damaged is quarantined (kept, with every extent it plausibly owns and
// its payload, under KindQuarantined) rather than freed; blocks nobody
// owns are freed only while every record is intact and no two overlap,
// since otherwise they may be a damaged record's real blocks.
func (c *checker) checkRecordsAndBlocks() {
	r := c.r
	g := r.geo
	bitWord := func(idx uint64) uint64 { return g.RecBitmapOff + idx/64*8 }
	var valid, suspect []recordState
	for idx := range g.NumRecords {
		id := RecordID(idx + 1)
		st := recordState{id: id, bit: r.load8(bitWord(idx))&(1<<(idx%64)) != 0}
		st.raw = r.readRaw(id, r.load8)
		st.h, st.err = decodeRecordHeader(st.raw, g.ExtentSlots, g.NumBlocks)
		w0 := binary.LittleEndian.Uint64(st.raw)
		switch {
		case st.err == nil && st.h.inUse():
			valid = append(valid, st)
		case st.err == nil && !st.bit:
			// Free and consistent.
		default:
			for i := range int(g.ExtentSlots) {
				st.slots = append(st.slots, Extent{
					Start: binary.LittleEndian.Uint64(st.raw[recordHdrSize+16*i:]),
					Count: binary.LittleEndian.Uint64(st.raw[recordHdrSize+16*i+8:]),
				})
			}
			if w0 == 0 {
				off := r.recordOff(id) + g.PayloadOffset()
				for o := off; o < off+g.PayloadSize() && !st.payload; o += 8 {
					st.payload = r.load8(o) != 0
				}
			}
			suspect = append(suspect, st)
		}
	}

	// Valid records: bitmap bit, quarantine notice, overlaps.
	var owned []ownedExtent
	quarantined := 0
	for _, st := range valid {
		idx := uint64(st.id) - 1
		if !st.bit {
			c.addFix(SevError, "records", "mark it allocated (record headers are trusted over the bitmap)",
				[]logEntry{{op: opOr, off: bitWord(idx), val: 1 << (idx % 64)}},
				"record %d (kind %d) is in use but free in the record bitmap", st.id, st.h.Kind)
		}
		if st.h.Kind == KindQuarantined {
			quarantined++
			c.add(SevWarning, "records", "", "record %d is quarantined (an earlier repair found its header damaged) and keeps %d extent(s): let the layer above inspect it, or free it with octoctl fsck --repair --release-quarantined", st.id, len(st.h.Extents))
		}
		for _, e := range st.h.Extents {
			owned = append(owned, ownedExtent{e, st.id})
		}
	}
	slices.SortFunc(owned, func(a, b ownedExtent) int {
		if a.Start != b.Start {
			return cmp.Compare(a.Start, b.Start)
		}
		return cmp.Compare(uint64(a.owner), uint64(b.owner))
	})
	overlaps := 0
	var prev *ownedExtent
	for i := range owned {
		e := &owned[i]
		if prev != nil && e.Start < prev.End() {
			overlaps++
			c.add(SevError, "blocks", "", "%v of record %d overlaps %v of record %d: one of them is wrong and fsck cannot tell which, so neither is changed and no block is freed; restore this node's data from a replica, or free the wrong record in the layer above", e.Extent, e.owner, prev.Extent, prev.owner)
		}
		if prev == nil || e.End() > prev.End() {
			prev = e
		}
	}
	want := newBitvec(g.NumBlocks)
	for _, e := range owned {
		want.setRange(e.Start, e.Count)
	}

	// Suspect records: quarantine what may be live, tidy what is not.
	claimed := func(e Extent) bool {
		for i := e.Start; i < e.End(); i++ {
			if want.get(i) {
				return true
			}
		}
		return false
	}
	damaged := 0
	for _, st := range suspect {
		idx := uint64(st.id) - 1
		w0 := binary.LittleEndian.Uint64(st.raw)
		var keep []Extent
		anySlot, allocated := false, false
		for _, e := range st.slots {
			if e != (Extent{}) {
				anySlot = true
			}
			if !g.plausible(e) || claimed(e) {
				continue
			}
			if r.allSet(g.BlkBitmapOff, e.Start, e.Count) {
				allocated = true
			}
			keep = append(keep, e)
		}
		var why string
		switch {
		case w0 != 0:
			damaged++
			why = fmt.Sprintf("damaged header: %v", st.err)
		case anySlot && (st.bit || allocated):
			damaged++
			why = fmt.Sprintf("free header but allocated in the bitmap or owning allocated blocks: %v", st.err)
		case !anySlot && st.bit && st.payload:
			damaged++
			why = "free header, allocated in the record bitmap, with a non-zero payload"
		case anySlot:
			// Free, its slots name nothing allocated: leftovers.
			ents := make([]logEntry, 0, 2*g.ExtentSlots)
			off := r.recordOff(st.id)
			for s := range uint64(g.ExtentSlots) * 2 {
				ents = append(ents, logEntry{op: opSet, off: off + recordHdrSize + 8*s})
			}
			c.addFix(SevError, "records", "zero the stale slots (they name no allocated block)", ents, "record %d: %v", st.id, st.err)
			continue
		default:
			c.addFix(SevError, "records", "mark it free in the bitmap (it owns nothing)",
				[]logEntry{{op: opAndNot, off: bitWord(idx), val: 1 << (idx % 64)}},
				"record %d is free but allocated in the record bitmap (leaked)", st.id)
			continue
		}
		if len(keep) > int(g.ExtentSlots) {
			keep = keep[:g.ExtentSlots]
		}
		off := r.recordOff(st.id)
		ents := []logEntry{{op: opSet, off: off, val: encodeHeaderWord0(KindQuarantined, len(keep))}}
		for s := range int(g.ExtentSlots) {
			var e Extent
			if s < len(keep) {
				e = keep[s]
			}
			so := off + recordHdrSize + uint64(s)*extentEntrySize
			ents = append(ents, logEntry{op: opSet, off: so, val: e.Start}, logEntry{op: opSet, off: so + 8, val: e.Count})
		}
		ents = append(ents, logEntry{op: opOr, off: bitWord(idx), val: 1 << (idx % 64)})
		c.addFix(SevError, "records", fmt.Sprintf("quarantine it (kind %#x), keeping its payload and the %d extent(s) it may own; nothing is freed", KindQuarantined, len(keep)),
			ents, "record %d: %s", st.id, why)
		for _, e := range keep {
			want.setRange(e.Start, e.Count)
		}
	}
	c.checkTail("records", g.RecBitmapOff, g.NumRecords)

	// Block bitmap against ownership.
	var leaked, missing []string
	var free, alloc []logEntry
	for w := range uint64(len(want)) {
		have := r.load8(g.BlkBitmapOff + 8*w)
		if w == uint64(len(want))-1 && g.NumBlocks%64 != 0 {
			have &= 1<<(g.NumBlocks%64) - 1 // tail bits are checked below
		}
		if have == want[w] {
			continue
		}
		if x := have &^ want[w]; x != 0 {
			leaked = append(leaked, bitList(w, x)...)
			free = append(free, logEntry{op: opAndNot, off: g.BlkBitmapOff + 8*w, val: x})
		}
		if x := want[w] &^ have; x != 0 {
			missing = append(missing, bitList(w, x)...)
			alloc = append(alloc, logEntry{op: opOr, off: g.BlkBitmapOff + 8*w, val: x})
		}
	}
	if len(missing) > 0 {
		c.addFix(SevError, "blocks", "mark them allocated", alloc, "%d block(s) owned by records but free in the bitmap (could be handed out twice): %s", len(missing), abbreviate(missing))
	}
	if len(leaked) > 0 {
		switch held := quarantined + damaged + overlaps; {
		case held == 0:
			c.addFix(SevError, "blocks", "mark them free", free, "%d block(s) allocated in the bitmap but owned by no record (leaked): %s", len(leaked), abbreviate(leaked))
		default:
			c.add(SevError, "blocks", "", "%d block(s) allocated in the bitmap but owned by no record: %s; they are kept allocated while a record is damaged, quarantined or overlapping another (%d here), since they may be its real blocks: resolve those findings first, then repair again", len(leaked), abbreviate(leaked), held)
		}
	}
	c.checkTail("blocks", g.BlkBitmapOff, g.NumBlocks)
}

// checkTail checks that bitmap bits past the last entry are zero.
func (c *checker) checkTail(area string, off, n uint64) {
	rem := n % 64
	if rem == 0 {
		return
	}
	w := off + n/64*8
	if extra := c.r.load8(w) &^ (1<<rem - 1); extra != 0 {
		c.addFix(SevError, area, "clear them (there is nothing there to own)", []logEntry{{op: opAndNot, off: w, val: extra}},
			"bitmap has bits set past its last entry (word %#x: %#x)", w, extra)
	}
}

func bitList(w, x uint64) []string {
	var out []string
	for x != 0 {
		b := uint64(bits.TrailingZeros64(x))
		x &= x - 1
		out = append(out, fmt.Sprint(w*64+b))
	}
	return out
}

func abbreviate(s []string) string {
	if len(s) > 8 {
		return strings.Join(s[:8], ", ") + fmt.Sprintf(" and %d more", len(s)-8)
	}
	return strings.Join(s, ", ")
}

// checkIndexes compares the volatile allocator indexes with the media:
// with no transaction in flight they must agree.
func (c *checker) checkIndexes() {
	r := c.r
	g := r.geo
	r.allocMu.Lock()
	defer r.allocMu.Unlock()
	for _, pair := range []struct {
		name string
		n    uint64
		word func(int) uint64
		off  uint64
	}{{"records", g.NumRecords, r.recs.Word, g.RecBitmapOff}, {"blocks", g.NumBlocks, r.blks.Word, g.BlkBitmapOff}} {
		words := int((pair.n + 63) / 64)
		for w := range words {
			have := r.load8(pair.off + 8*uint64(w))
			if rem := pair.n % 64; w == words-1 && rem != 0 {
				have &= 1<<rem - 1
			}
			if have != pair.word(w) {
				// Repair rebuilds the indexes from the repaired bitmaps.
				c.addFix(SevError, pair.name, "rebuild the in-memory index", nil, "in-memory allocator index disagrees with the bitmap at word %d (%#x vs %#x): the medium changed behind the allocator, a transaction is in flight, or this is a bug", w, pair.word(w), have)
				break
			}
		}
	}
}

// Repair checks the region and fixes what can be fixed, each fix in
// transactions of its own so that a crash during repair leaves a region
// no worse, which a second repair finishes. It never frees a block or a
// record that any record may still own (see checkRecordsAndBlocks), and
// it converges in one pass: a second Repair finds nothing to fix. It
// returns the report with repaired findings marked, followed by anything
// a second check still finds.
func Repair(ctx context.Context, r *Region) (rep *Report, err error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	c := r.check(true)
	for _, f := range c.fixes {
		if err := r.applyFix(ctx, f.entries); err != nil {
			return c.rep, fmt.Errorf("pmem: repair: %w", err)
		}
		c.rep.Findings[f.finding].Repaired = true
	}
	if err := Guarded(func() error { r.rebuildIndexes(); return nil }); err != nil {
		return c.rep, fmt.Errorf("pmem: repair: %w", err)
	}
	// What opening did is already reported; check the invariants again.
	for _, f := range r.check(false).rep.Findings {
		f.Message = "after repair: " + f.Message
		c.rep.Findings = append(c.rep.Findings, f)
	}
	c.rep.Stats = r.Stats()
	return c.rep, nil
}

func (r *Region) applyFix(ctx context.Context, entries []logEntry) error {
	for len(entries) > 0 {
		tx, err := r.Begin(ctx)
		if err != nil {
			return err
		}
		n := 0
		for _, e := range entries {
			if tx.size+e.size() > r.geo.LogBytesPerSlot() {
				break
			}
			if err := tx.log(e); err != nil {
				tx.Abort()
				return err
			}
			n++
		}
		if n == 0 {
			tx.Abort()
			return fmt.Errorf("%w: one fix entry does not fit a log slot", ErrTxTooLarge)
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		entries = entries[n:]
	}
	return nil
}

// ReleaseQuarantined frees every quarantined record and the blocks it
// kept: the operator's decision that their content is lost. It returns
// how many it freed.
func ReleaseQuarantined(ctx context.Context, r *Region) (n int, err error) {
	var ids []RecordID
	if err := r.Records(func(rec Record) bool {
		if rec.Kind == KindQuarantined {
			ids = append(ids, rec.ID)
		}
		return true
	}); err != nil {
		return 0, err
	}
	for _, id := range ids {
		tx, err := r.Begin(ctx)
		if err != nil {
			return n, err
		}
		if err := tx.FreeRecord(id); err != nil {
			tx.Abort()
			return n, err
		}
		if err := tx.Commit(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// CheckFile is the offline fsck of a region file or device. Without
// repair it maps the region read-only (shared, which device DAX accepts),
// so recovery and checking happen in memory and change nothing on the
// medium. With repair it opens the region for writing, drops damaged log
// slots, and fixes what it can; releaseQuarantined then also frees
// quarantined records (their content is lost).
func CheckFile(ctx context.Context, path string, repair bool, logger *slog.Logger) (*Report, error) {
	return CheckFileWith(ctx, path, CheckOptions{Repair: repair, Logger: logger})
}

// CheckOptions configure CheckFileWith.
type CheckOptions struct {
	Repair bool
	// ReleaseQuarantined frees quarantined records before repairing
	// (needs Repair).
	ReleaseQuarantined bool
	Logger             *slog.Logger
}

// CheckFileWith is CheckFile with every option.
func CheckFileWith(ctx context.Context, path string, o CheckOptions) (rep *Report, err error) {
	m, err := OpenFileMedium(path, FileOptions{ReadOnly: !o.Repair})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	r, err := Attach(m, Options{Logger: o.Logger, ReadOnly: !o.Repair, DiscardCorruptLog: true})
	if err != nil {
		return nil, err
	}
	defer r.guardRead(&err, debug.SetPanicOnFault(true))
	if !o.Repair {
		return Check(r), nil
	}
	released := 0
	if o.ReleaseQuarantined {
		if released, err = ReleaseQuarantined(ctx, r); err != nil {
			return nil, err
		}
	}
	rep, err = Repair(ctx, r)
	if released > 0 && rep != nil {
		rep.Findings = append([]Finding{{Severity: SevInfo, Area: "records", Message: fmt.Sprintf("released %d quarantined record(s) and their blocks, as asked", released)}}, rep.Findings...)
	}
	return rep, err
}
