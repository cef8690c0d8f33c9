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
	for _, f := range rep.Findings {
		fix := ""
		if f.Fix != "" {
			fix = " [" + f.Fix + "]"
		}
		fmt.Fprintf(w, "  %-7s %s: %s%s\n", f.Severity, f.Area, f.Message, fix)
	}
	if p := rep.Problems(); p == 0 {
		fmt.Fprintln(w, "clean")
	} else {
		fmt.Fprintf(w, "%d problem(s)\n", p)
	}
}

const restore = "the log cannot be repaired automatically: restore its partition from a replica, or delete the log if its service can rebuild it"

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
			add(pmem.SevError, "plog head", restore, "head record %d: %v", hid, sh.err)
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
				add(pmem.SevError, "plog chain", restore, "segment record %d is in the chains of head records %d and %d", si.id, other, hid)
				continue
			}
			reached[si.id] = hid
		}
		if sh.chainErr != nil {
			add(pmem.SevError, "plog chain", restore, "%v", sh.chainErr)
		} else {
			err := replaySegments(r, h.ID, sh.chain, func([]byte) error { sum.Records++; return nil })
			if err != nil {
				add(pmem.SevError, "plog records", restore, "below the published tail: %v", err)
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
			add(pmem.SevError, "plog head", restore, "%v has %d live heads (records %v)", id, len(hids), hids)
		}
	}
	// owner describes why a segment or pool naming head hid for log id
	// is not properly owned: an error, a warning when the head is being
	// deleted, "" when hid is a live head of that log.
	owner := func(id LogID, hid pmem.RecordID) (pmem.Severity, string) {
		sh := sc.heads[hid]
		switch {
		case sh == nil:
			return pmem.SevError, fmt.Sprintf("names head record %d, which is not a plog log head", hid)
		case sh.err != nil:
			return pmem.SevError, fmt.Sprintf("names head record %d, which is damaged", hid)
		case sh.h.ID != id:
			return pmem.SevError, fmt.Sprintf("is of %v but names head record %d of %v", id, hid, sh.h.ID)
		case sh.h.State == stateDeleting:
			return pmem.SevWarning, fmt.Sprintf("belongs to %v, which is being deleted", id)
		}
		return "", ""
	}
	for _, sid := range sortedKeys(sc.segs) {
		ss := sc.segs[sid]
		if _, ok := reached[sid]; ok {
			continue // its chain's findings cover it
		}
		if ss.err != nil {
			add(pmem.SevError, "plog segment", restore, "segment record %d: %v", sid, ss.err)
			continue
		}
		sev, why := owner(ss.s.ID, ss.s.Owner)
		switch {
		case sev == pmem.SevError:
			add(sev, "plog segment", "", "segment record %d %s (a leak: no log reaches it)", sid, why)
		case sev == pmem.SevWarning:
			add(sev, "plog segment", "plog.Open finishes the delete", "segment record %d %s", sid, why)
		case sc.heads[ss.s.Owner].chainErr != nil:
			add(pmem.SevError, "plog segment", restore, "segment record %d of %v is not in its damaged chain", sid, ss.s.ID)
		case sc.garbage(sid, ss.s.Owner):
			add(pmem.SevWarning, "plog segment", "plog.Open frees it", "segment record %d of %v (epoch %d, the log's is %d) is not in its chain: left by an interrupted rewrite", sid, ss.s.ID, ss.s.Epoch, sc.heads[ss.s.Owner].h.Epoch)
		default:
			add(pmem.SevError, "plog segment", "", "segment record %d of %v has the log's current epoch %d but is not in its chain (a leak)", sid, ss.s.ID, ss.s.Epoch)
		}
	}
	for _, pid := range sortedKeys(sc.pools) {
		sp := sc.pools[pid]
		if sp.err != nil {
			add(pmem.SevError, "plog pool", restore, "pool record %d: %v", pid, sp.err)
			continue
		}
		sev, why := owner(sp.p.ID, sp.p.Owner)
		switch sev {
		case pmem.SevError:
			add(sev, "plog pool", "", "pool record %d %s (a leak)", pid, why)
		case pmem.SevWarning:
			add(sev, "plog pool", "plog.Open finishes the delete", "pool record %d %s", pid, why)
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
