package pmem

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
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
	fmt.Fprintf(w, "  in use:   %d/%d records, %d/%d blocks\n", rep.Stats.RecordsUsed, rep.Stats.Records, rep.Stats.BlocksUsed, rep.Stats.Blocks)
	for _, f := range rep.Findings {
		state := ""
		switch {
		case f.Repaired:
			state = " [repaired]"
		case f.Severity != SevInfo && f.Fix != "":
			state = " [--repair: " + f.Fix + "]"
		case f.Severity == SevError:
			state = " [cannot be repaired automatically]"
		}
		fmt.Fprintf(w, "  %-7s %s: %s%s\n", f.Severity, f.Area, f.Message, state)
	}
	switch p := rep.Problems(); {
	case p == 0:
		fmt.Fprintln(w, "clean")
	case rep.Repairable() == p:
		fmt.Fprintf(w, "%d problem(s), all repairable: run again with --repair\n", p)
	default:
		fmt.Fprintf(w, "%d problem(s), %d repairable with --repair; the rest need a restore from a replica\n", p, rep.Repairable())
	}
}

// fix is one repair: log entries applied in one transaction.
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
// the region did.
func (r *Region) check(withRecovery bool) *checker {
	c := &checker{r: r, rep: &Report{Medium: r.info, Superblock: r.Superblock(), Recovery: r.recovery, Stats: r.Stats()}}
	if withRecovery {
		c.reportRecovery()
	}
	c.checkSuperblocks()
	c.checkLog()
	owned := c.checkRecords()
	c.checkBlocks(owned)
	c.checkIndexes()
	return c
}

// reportRecovery reports what opening the region repaired or replayed.
// Recovery's writes reach the medium unless it is mapped copy-on-write.
func (c *checker) reportRecovery() {
	r := c.r
	rec := r.recovery
	fixed := !r.info.CopyOnWrite && !r.opts.ReadOnly
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
	a, errA := DecodeSuperblock(r.buf[0:superblockSlot])
	b, errB := DecodeSuperblock(r.buf[superblockSlot : 2*superblockSlot])
	cur := r.Superblock()
	for i, e := range []error{errA, errB} {
		name := [2]string{"A", "B"}[i]
		if e != nil {
			c.add(SevError, "superblock", "", "copy %s does not decode: %v", name, e)
		}
	}
	if errA == nil && errB == nil && (a != cur || b != cur) {
		c.add(SevError, "superblock", "", "copies A (seq %d) and B (seq %d) differ from the superblock in use (seq %d)", a.Seq, b.Seq, cur.Seq)
	}
}

func (c *checker) checkLog() {
	r := c.r
	g := r.geo
	for i := range int(g.LogSlots) {
		if v := r.load8(g.slotOff(i)); v != 0 {
			c.add(SevError, "log", "", "slot %d is still committed (seq %d) after recovery", i, v)
		}
	}
}

// checkRecords checks the record bitmap against the headers and returns
// the extents owned by valid allocated records.
func (c *checker) checkRecords() map[RecordID][]Extent {
	r := c.r
	g := r.geo
	owned := make(map[RecordID][]Extent)
	bitWord := func(idx uint64) uint64 { return g.RecBitmapOff + idx/64*8 }
	for idx := range g.NumRecords {
		id := RecordID(idx + 1)
		off := r.recordOff(id)
		bit := r.load8(bitWord(idx))&(1<<(idx%64)) != 0
		h, err := r.readHeader(id, r.load8)
		mask := uint64(1) << (idx % 64)
		switch {
		case err != nil && r.load8(off) == 0:
			// A free record with leftovers in its extent slots.
			var ents []logEntry
			for s := range uint64(g.ExtentSlots) * 2 {
				ents = append(ents, logEntry{op: opSet, off: off + recordHdrSize + 8*s})
			}
			if bit {
				ents = append(ents, logEntry{op: opAndNot, off: bitWord(idx), val: mask})
			}
			c.addFix(SevError, "records", "zero the stale slots and mark the record free", ents, "%v", err)
		case err != nil:
			var ents []logEntry
			for s := range uint64(g.ExtentSlots)*2 + 1 {
				if s == 1 {
					continue // keep the generation
				}
				ents = append(ents, logEntry{op: opSet, off: off + 8*s})
			}
			ents = append(ents, logEntry{op: opAndNot, off: bitWord(idx), val: mask})
			c.addFix(SevError, "records", "free the record (its content is lost; blocks it claimed are released)", ents, "%v", err)
		case h.inUse() && !bit:
			c.addFix(SevError, "records", "mark it allocated (record headers are trusted over the bitmap)",
				[]logEntry{{op: opOr, off: bitWord(idx), val: mask}},
				"record %d (kind %d) is in use but free in the record bitmap", id, h.Kind)
			owned[id] = h.Extents
		case !h.inUse() && bit:
			c.addFix(SevError, "records", "mark it free in the bitmap",
				[]logEntry{{op: opAndNot, off: bitWord(idx), val: mask}},
				"record %d is free but allocated in the record bitmap (leaked)", id)
		case h.inUse():
			owned[id] = h.Extents
		}
	}
	c.checkTail("records", g.RecBitmapOff, g.NumRecords)
	return owned
}

// checkTail checks that bitmap bits past the last entry are zero.
func (c *checker) checkTail(area string, off, n uint64) {
	rem := n % 64
	if rem == 0 {
		return
	}
	w := off + n/64*8
	if extra := c.r.load8(w) &^ (1<<rem - 1); extra != 0 {
		c.addFix(SevError, area, "clear them", []logEntry{{op: opAndNot, off: w, val: extra}},
			"bitmap has bits set past its last entry (word %#x: %#x)", w, extra)
	}
}

func (c *checker) checkBlocks(owned map[RecordID][]Extent) {
	r := c.r
	g := r.geo
	type ownedExtent struct {
		Extent
		owner RecordID
	}
	var all []ownedExtent
	for id, es := range owned {
		for _, e := range es {
			all = append(all, ownedExtent{e, id})
		}
	}
	slices.SortFunc(all, func(a, b ownedExtent) int {
		if x := cmp.Compare(a.Start, b.Start); x != 0 {
			return x
		}
		return cmp.Compare(uint64(a.owner), uint64(b.owner))
	})
	want := newBitset(g.NumBlocks)
	var prev *ownedExtent
	for i := range all {
		e := &all[i]
		if prev != nil && e.Start < prev.End() {
			c.add(SevError, "blocks", "", "%v of record %d overlaps %v of record %d: one of them is wrong and fsck cannot tell which; restore this node's data from a replica", e.Extent, e.owner, prev.Extent, prev.owner)
		}
		if prev == nil || e.End() > prev.End() {
			prev = e
		}
		want.setRange(e.Start, e.Count)
	}
	var leaked, missing []string
	var free, alloc []logEntry
	for w := range uint64(len(want.w)) {
		have := r.load8(g.BlkBitmapOff + 8*w)
		if w == uint64(len(want.w))-1 && g.NumBlocks%64 != 0 {
			have &= 1<<(g.NumBlocks%64) - 1 // tail bits are checked below
		}
		if have == want.w[w] {
			continue
		}
		if x := have &^ want.w[w]; x != 0 {
			leaked = append(leaked, bitList(w, x)...)
			free = append(free, logEntry{op: opAndNot, off: g.BlkBitmapOff + 8*w, val: x})
		}
		if x := want.w[w] &^ have; x != 0 {
			missing = append(missing, bitList(w, x)...)
			alloc = append(alloc, logEntry{op: opOr, off: g.BlkBitmapOff + 8*w, val: x})
		}
	}
	if len(leaked) > 0 {
		c.addFix(SevError, "blocks", "mark them free", free, "%d block(s) allocated in the bitmap but owned by no record (leaked): %s", len(leaked), abbreviate(leaked))
	}
	if len(missing) > 0 {
		c.addFix(SevError, "blocks", "mark them allocated", alloc, "%d block(s) owned by records but free in the bitmap (could be handed out twice): %s", len(missing), abbreviate(missing))
	}
	c.checkTail("blocks", g.BlkBitmapOff, g.NumBlocks)
}

func bitList(w, x uint64) []string {
	var out []string
	for b := range uint64(64) {
		if x&(1<<b) != 0 {
			out = append(out, fmt.Sprint(w*64+b))
		}
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
		b    *bitset
		off  uint64
	}{{"records", &r.recUsed, g.RecBitmapOff}, {"blocks", &r.blkUsed, g.BlkBitmapOff}} {
		name := pair.name
		for w := range pair.b.w {
			have := r.load8(pair.off + 8*uint64(w))
			if w == len(pair.b.w)-1 && pair.b.n%64 != 0 {
				have &= 1<<(pair.b.n%64) - 1
			}
			if have != pair.b.w[w] {
				// Repair rebuilds the indexes from the repaired bitmaps.
				c.addFix(SevError, name, "rebuild the in-memory index", nil, "in-memory allocator index disagrees with the bitmap at word %d (%#x vs %#x): the medium changed behind the allocator, a transaction is in flight, or this is a bug", w, pair.b.w[w], have)
				break
			}
		}
	}
}

// Repair checks the region and fixes what can be fixed, each fix in its
// own transaction so that a crash during repair leaves a region that is
// no worse. It returns the report with repaired findings marked, followed
// by anything a second check still finds.
func Repair(ctx context.Context, r *Region) (*Report, error) {
	c := r.check(true)
	for _, f := range c.fixes {
		if err := r.applyFix(ctx, f.entries); err != nil {
			return c.rep, fmt.Errorf("pmem: repair: %w", err)
		}
		c.rep.Findings[f.finding].Repaired = true
	}
	r.rebuildIndexes()
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
		n := min(len(entries), tx.Cap())
		for _, e := range entries[:n] {
			if err := tx.log(e); err != nil {
				tx.Abort()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		entries = entries[n:]
	}
	return nil
}

// CheckFile is the offline fsck of a region file or device. Without
// repair it maps the region copy-on-write, so recovery and checking
// change nothing on the medium. With repair it opens the region for
// writing, drops damaged log slots, and fixes what it can.
func CheckFile(ctx context.Context, path string, repair bool, logger *slog.Logger) (*Report, error) {
	m, err := OpenFileMedium(path, FileOptions{Private: !repair})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	r, err := Attach(m, Options{Logger: logger, ReadOnly: !repair, DiscardCorruptLog: true})
	if err != nil {
		return nil, err
	}
	if !repair {
		return Check(r), nil
	}
	return Repair(ctx, r)
}
