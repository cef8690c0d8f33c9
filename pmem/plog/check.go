package plog

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/octofs/octofs/pmem"
)

// Report is what Check found: a summary of every log and the findings,
// in the style of pmem's fsck (pmem.Finding, same severities).
type Report struct {
	Logs     []LogSummary   `json:"logs"`
	Findings []pmem.Finding `json:"findings"`
}

// LogSummary describes one log found in the region.
type LogSummary struct {
	ID         LogID         `json:"id"`
	Head       pmem.RecordID `json:"head"`
	Epoch      uint64        `json:"epoch"`
	Deleting   bool          `json:"deleting,omitempty"`
	Segments   int           `json:"segments"`
	Bytes      uint64        `json:"bytes"`
	Records    uint64        `json:"records"`
	Pools      int           `json:"pools"`
	PoolBlocks uint64        `json:"pool_blocks"`
}

// Problems counts the errors and warnings.
func (rep *Report) Problems() int {
	n := 0
	for _, f := range rep.Findings {
		if f.Severity != pmem.SevInfo {
			n++
		}
	}
	return n
}

// Clean reports whether Check found no error or warning.
func (rep *Report) Clean() bool { return rep.Problems() == 0 }

func (rep *Report) String() string {
	var b bytes.Buffer
	rep.WriteText(&b)
	return b.String()
}

// WriteText prints the report for an operator.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "plog (format version %d): %d log(s)\n", FormatVersion, len(rep.Logs))
	for _, l := range rep.Logs {
		state := ""
		if l.Deleting {
			state = ", being deleted"
		}
		fmt.Fprintf(w, "  %v: head record %d, epoch %d, %d segment(s), %d bytes in %d record(s), %d pool(s) of %d blocks%s\n",
			l.ID, l.Head, l.Epoch, l.Segments, l.Bytes, l.Records, l.Pools, l.PoolBlocks, state)
	}
	unfixable := 0
	for _, f := range rep.Findings {
		state := ""
		switch {
		case f.Fix != "":
			state = " [" + f.Fix + "]"
		case f.Severity == pmem.SevError:
			state = " [cannot be repaired automatically]"
			unfixable++
		}
		fmt.Fprintf(w, "  %-7s %s: %s%s\n", f.Severity, f.Area, f.Message, state)
	}
	switch p := rep.Problems(); {
	case p == 0:
		fmt.Fprintln(w, "clean")
	case unfixable == 0:
		fmt.Fprintf(w, "%d problem(s), all left by an interrupted operation: opening the store (starting the node) clears them\n", p)
	default:
		fmt.Fprintf(w, "%d problem(s): a damaged log cannot be used until its partition is restored from a replica (see docs/plog.md)\n", p)
	}
}

// Check verifies plog's structures in r: every record of plog's kinds
// decodes; each live head's chain is whole, of its log and epoch, in
// order, and every record below each segment's published end verifies;
// every segment and pool belongs to a head of the same log; no segment
// is in two chains; at most one live head per log. It changes nothing.
// Call it with no appends in flight (an offline region, or after Open
// and before use). Run pmem.Check as well for the region's own layout.
func Check(r *pmem.Region) *Report {
	rep := &Report{}
	add := func(sev pmem.Severity, area, fix, format string, args ...any) {
		rep.Findings = append(rep.Findings, pmem.Finding{Severity: sev, Area: area, Message: fmt.Sprintf(format, args...), Fix: fix})
	}
	if err := checkGeometry(r.Geometry()); err != nil {
		add(pmem.SevError, "plog", "", "%v", err)
		return rep
	}
	sc, err := scanRegion(r)
	if err != nil {
		add(pmem.SevError, "plog", "", "%v: run pmem's fsck first", err)
		return rep
	}
	reached := map[pmem.RecordID]pmem.RecordID{} // segment -> live head whose chain reaches it
	live := map[LogID][]pmem.RecordID{}
	for _, hid := range sc.order {
		sh := sc.heads[hid]
		if sh.err != nil {
			add(pmem.SevError, "plog head", "", "head record %d: %v", hid, sh.err)
			continue
		}
		h := sh.h
		sum := LogSummary{ID: h.ID, Head: hid, Epoch: h.Epoch, Deleting: h.State == stateDeleting, Segments: len(sh.chain)}
		segs, pools := sc.owned(hid)
		if sum.Deleting {
			add(pmem.SevWarning, "plog head", "plog.Open finishes the delete", "%v (head record %d) is being deleted: %d segment(s) and %d pool(s) left to free", h.ID, hid, len(segs), len(pools))
			rep.Logs = append(rep.Logs, sum)
			continue
		}
		live[h.ID] = append(live[h.ID], hid)
		walked := slices.Clone(sh.chain)
		if sh.brokenAt != 0 {
			walked = append(walked, segInfo{id: sh.brokenAt})
		}
		for _, si := range walked {
			if other, ok := reached[si.id]; ok {
				if other == hid {
					add(pmem.SevError, "plog chain", "", "the chain of %v (head record %d) reaches segment record %d twice (a loop)", h.ID, hid, si.id)
				} else {
					add(pmem.SevError, "plog chain", "", "segment record %d is in the chains of head records %d and %d", si.id, other, hid)
				}
				continue
			}
			reached[si.id] = hid
		}
		if sh.chainErr != nil {
			add(pmem.SevError, "plog chain", "", "%v", sh.chainErr)
		} else {
			err := replaySegments(r, h.ID, sh.chain, func([]byte) error { sum.Records++; return nil })
			if err != nil {
				add(pmem.SevError, "plog records", "", "below the published tail: %v", err)
			}
		}
		for _, si := range sh.chain {
			sum.Bytes += si.end
		}
		for _, pid := range pools {
			if sc.pools[pid].p.ID == h.ID {
				sum.Pools++
				sum.PoolBlocks += sc.pools[pid].rec.Extents[0].Count
			}
		}
		rep.Logs = append(rep.Logs, sum)
	}
	for id, hids := range live {
		if len(hids) > 1 {
			add(pmem.SevError, "plog head", "", "%v has %d live heads (records %v)", id, len(hids), hids)
		}
	}
	// orphan says why a segment or pool naming head hid for log id has
	// no live owner, "" if hid is a live head of that log. A head being
	// deleted still owns its records: its own finding covers them.
	orphan := func(id LogID, hid pmem.RecordID) (why, fix string) {
		sh := sc.heads[hid]
		switch {
		case sh == nil:
			return fmt.Sprintf("names head record %d, which is not a plog log head (a leak)", hid), ""
		case sh.err != nil:
			return fmt.Sprintf("belongs to the damaged head record %d", hid), ""
		case sh.h.ID != id:
			return fmt.Sprintf("is of %v but names head record %d of %v (a leak)", id, hid, sh.h.ID), ""
		}
		return "", ""
	}
	deleting := func(hid pmem.RecordID) bool {
		sh := sc.heads[hid]
		return sh != nil && sh.err == nil && sh.h.State == stateDeleting
	}
	for _, sid := range sortedKeys(sc.segs) {
		ss := sc.segs[sid]
		if _, ok := reached[sid]; ok {
			continue // its chain's findings cover it
		}
		if ss.err != nil {
			add(pmem.SevError, "plog segment", "", "segment record %d: %v", sid, ss.err)
			continue
		}
		if why, fix := orphan(ss.s.ID, ss.s.Owner); why != "" {
			add(pmem.SevError, "plog segment", fix, "segment record %d %s", sid, why)
			continue
		}
		switch {
		case deleting(ss.s.Owner):
		case sc.heads[ss.s.Owner].chainErr != nil:
			add(pmem.SevError, "plog segment", "", "segment record %d of %v is not in its damaged chain", sid, ss.s.ID)
		case sc.garbage(sid, ss.s.Owner):
			add(pmem.SevWarning, "plog segment", "plog.Open frees it", "segment record %d of %v (epoch %d, the log's is %d) is not in its chain: left by an interrupted rewrite", sid, ss.s.ID, ss.s.Epoch, sc.heads[ss.s.Owner].h.Epoch)
		default:
			add(pmem.SevError, "plog segment", "", "segment record %d of %v has the log's current epoch %d but is not in its chain (a leak)", sid, ss.s.ID, ss.s.Epoch)
		}
	}
	for _, pid := range sortedKeys(sc.pools) {
		sp := sc.pools[pid]
		if sp.err != nil {
			add(pmem.SevError, "plog pool", "", "pool record %d: %v", pid, sp.err)
			continue
		}
		if why, fix := orphan(sp.p.ID, sp.p.Owner); why != "" {
			add(pmem.SevError, "plog pool", fix, "pool record %d %s", pid, why)
		}
	}
	slices.SortFunc(rep.Logs, func(a, b LogSummary) int { return cmp.Compare(a.ID.word(), b.ID.word()) })
	return rep
}

func sortedKeys[V any](m map[pmem.RecordID]V) []pmem.RecordID {
	ks := make([]pmem.RecordID, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
