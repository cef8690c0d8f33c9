package pmem_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/pmemtest"
)

// crashStates is the total number of crash states TestCrashRecovery
// checks, split over its scenarios. CI runs the default; `make crashtest`
// raises it.
var crashStates = flag.Int("pmem.crashstates", 12000, "crash states checked by TestCrashRecovery (all scenarios together)")

// modelRecord is what the workload believes a record holds.
type modelRecord struct {
	kind    uint16
	payload []uint64
	extents []pmem.Extent
}

// model is the logical content of a region: what recovery must restore.
type model struct {
	records map[pmem.RecordID]modelRecord
	roots   [4]uint64
	cluster pmem.UUID
	node    uint64
}

func (m model) clone() model {
	c := m
	c.records = make(map[pmem.RecordID]modelRecord, len(m.records))
	for id, r := range m.records {
		r.payload = slices.Clone(r.payload)
		r.extents = slices.Clone(r.extents)
		c.records[id] = r
	}
	return c
}

// fillByte is the byte every block of extent e owned by id holds, so a
// recovered region proves the unlogged data writes reached the medium
// before the allocation that made them reachable.
func fillByte(id pmem.RecordID, e pmem.Extent) byte { return byte(uint64(id)*31+e.Start*7) | 1 }

// readModel reads the logical content of r and checks the data blocks.
func readModel(r *pmem.Region) (model, error) {
	m := model{records: make(map[pmem.RecordID]modelRecord)}
	var blocks uint64
	var dataErr error
	err := r.Records(func(rec pmem.Record) bool {
		mr := modelRecord{kind: rec.Kind, extents: rec.Extents}
		for off := rec.PayloadOff; off < rec.PayloadOff+rec.PayloadLen; off += 8 {
			mr.payload = append(mr.payload, r.Load8(off))
		}
		for _, e := range rec.Extents {
			blocks += e.Count
			b, err := r.ExtentBytes(e)
			if err != nil {
				dataErr = err
				return false
			}
			want := fillByte(rec.ID, e)
			for i, c := range b {
				if c != want {
					dataErr = fmt.Errorf("record %d %v: byte %d is %#x, want %#x", rec.ID, e, i, c, want)
					return false
				}
			}
		}
		m.records[rec.ID] = mr
		return true
	})
	if err == nil {
		err = dataErr
	}
	for i := range m.roots {
		m.roots[i] = r.Root(i)
	}
	sb := r.Superblock()
	m.cluster, m.node = sb.ClusterUUID, sb.NodeID
	if st := r.Stats(); err == nil && (st.BlocksUsed != blocks || st.RecordsUsed != uint64(len(m.records))) {
		err = fmt.Errorf("stats say %d records and %d blocks in use, records own %d and %d", st.RecordsUsed, st.BlocksUsed, len(m.records), blocks)
	}
	return m, err
}

// diff describes how got differs from want, "" when equal.
func (m model) diff(want model) string {
	if m.roots != want.roots {
		return fmt.Sprintf("roots %v, want %v", m.roots, want.roots)
	}
	if m.cluster != want.cluster || m.node != want.node {
		return fmt.Sprintf("identity %s/%d, want %s/%d", m.cluster, m.node, want.cluster, want.node)
	}
	ids := slices.Sorted(maps.Keys(m.records))
	wids := slices.Sorted(maps.Keys(want.records))
	if !slices.Equal(ids, wids) {
		return fmt.Sprintf("records %v, want %v", ids, wids)
	}
	for _, id := range ids {
		a, b := m.records[id], want.records[id]
		if a.kind != b.kind || !slices.Equal(a.payload, b.payload) || !slices.Equal(a.extents, b.extents) {
			return fmt.Sprintf("record %d is %+v, want %+v", id, a, b)
		}
	}
	return ""
}

// workload runs random transactions against a region and keeps the
// model of what each committed one leaves.
type workload struct {
	rng      *rand.Rand
	cur      model
	inflight *model // the model if the transaction being committed lands
	payload  int    // payload words per record
	ops      int
	// counters for the test log
	committed, aborted, noSpace int
}

func newWorkload(seed uint64, r *pmem.Region) *workload {
	return &workload{
		rng:     rand.New(rand.NewPCG(seed, 1)),
		cur:     model{records: map[pmem.RecordID]modelRecord{}},
		payload: int(r.Geometry().PayloadSize() / 8),
	}
}

func (w *workload) liveIDs() []pmem.RecordID { return slices.Sorted(maps.Keys(w.cur.records)) }

func (w *workload) pick() (pmem.RecordID, bool) {
	ids := w.liveIDs()
	if len(ids) == 0 {
		return 0, false
	}
	return ids[w.rng.IntN(len(ids))], true
}

// allocExtent allocates and fills an extent for id in tx and next.
func (w *workload) allocExtent(r *pmem.Region, tx *pmem.Tx, next *model, id pmem.RecordID) error {
	e, err := tx.AllocExtent(id, uint64(1+w.rng.IntN(3)))
	if err != nil {
		return err
	}
	b := make([]byte, e.Count*uint64(r.Geometry().BlockSize))
	for i := range b {
		b[i] = fillByte(id, e)
	}
	if err := tx.WriteFresh(r.ExtentOffset(e), b); err != nil {
		return err
	}
	mr := next.records[id]
	mr.extents = append(mr.extents, e)
	next.records[id] = mr
	return nil
}

// step runs one random operation.
func (w *workload) step(ctx context.Context, r *pmem.Region) error {
	w.ops++
	next := w.cur.clone()
	if w.rng.IntN(40) == 0 {
		var u pmem.UUID
		u[0], u[15] = byte(w.ops), byte(w.ops>>8)
		next.cluster, next.node = u, uint64(w.ops)
		w.inflight = &next
		err := r.SetIdentity(u, uint64(w.ops))
		w.inflight = nil
		if err != nil {
			return err
		}
		w.cur = next
		return nil
	}
	tx, err := r.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	err = w.build(r, tx, &next)
	switch {
	case errors.Is(err, pmem.ErrNoSpace), errors.Is(err, pmem.ErrRecordFull), errors.Is(err, pmem.ErrTxTooLarge):
		w.noSpace++
		tx.Abort()
		return nil
	case errors.Is(err, errAbort):
		w.aborted++
		tx.Abort()
		return nil
	case err != nil:
		return err
	}
	w.inflight = &next
	err = tx.Commit()
	w.inflight = nil
	if errors.Is(err, pmem.ErrTxTooLarge) {
		w.noSpace++
		return nil
	}
	if err != nil {
		return err
	}
	w.committed++
	w.cur = next
	return nil
}

var errAbort = errors.New("abort on purpose")

func (w *workload) build(r *pmem.Region, tx *pmem.Tx, next *model) error {
	switch op := w.rng.IntN(100); {
	case op < 25: // allocate a record, maybe with data, maybe rooted
		kind := uint16(1 + w.rng.IntN(3))
		id, err := tx.AllocRecord(kind)
		if err != nil {
			return err
		}
		mr := modelRecord{kind: kind, payload: make([]uint64, w.payload)}
		rec, _ := r.Record(id)
		for i := range 2 {
			v := w.rng.Uint64()
			if err := tx.Write8(rec.PayloadOff+8*uint64(i), v); err != nil {
				return err
			}
			mr.payload[i] = v
		}
		next.records[id] = mr
		for range w.rng.IntN(3) {
			if err := w.allocExtent(r, tx, next, id); err != nil {
				return err
			}
		}
		if w.rng.IntN(2) == 0 {
			i := w.rng.IntN(len(next.roots))
			next.roots[i] = uint64(id)
			return tx.SetRoot(i, uint64(id))
		}
	case op < 40: // free a record and unroot it
		id, ok := w.pick()
		if !ok {
			return errAbort
		}
		if err := tx.FreeRecord(id); err != nil {
			return err
		}
		delete(next.records, id)
		for i, v := range next.roots {
			if v == uint64(id) {
				next.roots[i] = 0
				if err := tx.SetRoot(i, 0); err != nil {
					return err
				}
			}
		}
	case op < 62: // move amounts between records: a multi-word update
		ids := w.liveIDs()
		if len(ids) < 2 {
			return errAbort
		}
		w.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		for _, id := range ids[:min(len(ids), 2+w.rng.IntN(3))] {
			rec, _ := r.Record(id)
			mr := next.records[id]
			for i := range mr.payload {
				if w.rng.IntN(2) == 0 {
					mr.payload[i] += uint64(w.ops)
					if err := tx.Write8(rec.PayloadOff+8*uint64(i), mr.payload[i]); err != nil {
						return err
					}
				}
			}
		}
	case op < 77: // grow a record
		id, ok := w.pick()
		if !ok {
			return errAbort
		}
		return w.allocExtent(r, tx, next, id)
	case op < 87: // shrink a record
		id, ok := w.pick()
		if !ok || len(next.records[id].extents) == 0 {
			return errAbort
		}
		mr := next.records[id]
		i := w.rng.IntN(len(mr.extents))
		if err := tx.FreeExtent(id, mr.extents[i]); err != nil {
			return err
		}
		last := len(mr.extents) - 1
		mr.extents[i] = mr.extents[last]
		mr.extents = mr.extents[:last]
		next.records[id] = mr
	case op < 92: // a byte-granular write across a record's payload
		id, ok := w.pick()
		if !ok {
			return errAbort
		}
		rec, _ := r.Record(id)
		buf := make([]byte, rec.PayloadLen)
		for i := range buf {
			buf[i] = byte(w.rng.Uint32())
		}
		at := w.rng.IntN(len(buf))
		if err := tx.Write(rec.PayloadOff+uint64(at), buf[at:]); err != nil {
			return err
		}
		mr := next.records[id]
		for i := range mr.payload {
			for j := range 8 {
				if p := 8*i + j; p >= at {
					mr.payload[i] = mr.payload[i]&^(0xff<<(8*j)) | uint64(buf[p])<<(8*j)
				}
			}
		}
		next.records[id] = mr
	case op < 96: // a transaction that gives up
		if _, err := tx.AllocRecord(9); err != nil {
			return err
		}
		if err := tx.SetRoot(0, 12345); err != nil {
			return err
		}
		return errAbort
	default: // more updates than a log slot holds: ErrTxTooLarge, no effect
		for i := range pmem.NumRoots {
			if err := tx.SetRoot(i, uint64(i+1)); err != nil {
				return err
			}
		}
		return errors.New("a log slot held every root update")
	}
	return nil
}

// check recovers one crash image and compares it with the models the
// crash allows: the last committed state, or the one being committed.
func (w *workload) check(c pmemtest.Crash) error {
	r, _, err := pmemtest.Recover(c.Image, pmem.Options{})
	if err != nil {
		return err
	}
	defer r.Close()
	got, err := readModel(r)
	if err != nil {
		return err
	}
	d := got.diff(w.cur)
	if d != "" && w.inflight != nil {
		if d2 := got.diff(*w.inflight); d2 == "" {
			d = ""
		} else {
			d = fmt.Sprintf("matches neither the committed state (%s) nor the one in flight (%s)", d, d2)
		}
	}
	if d != "" {
		return errors.New(d)
	}
	// Every so often, prove the recovered region is usable: run a
	// transaction on it and check it again.
	if c.State%64 == 0 {
		ctx := context.Background()
		tx, err := r.Begin(ctx)
		if err != nil {
			return err
		}
		id, err := tx.AllocRecord(1)
		if err == nil {
			_, err = tx.AllocExtent(id, 1)
		}
		if err != nil && !errors.Is(err, pmem.ErrNoSpace) {
			tx.Abort()
			return fmt.Errorf("transaction after recovery: %w", err)
		}
		if err := tx.Commit(); err != nil && !errors.Is(err, pmem.ErrNoSpace) {
			return fmt.Errorf("commit after recovery: %w", err)
		}
		if rep := pmem.Check(r); !rep.Clean() {
			return fmt.Errorf("fsck after a transaction on the recovered region:\n%s", rep)
		}
	}
	return nil
}

func TestCrashRecovery(t *testing.T) {
	scenarios := []struct {
		name  string
		size  int
		fo    pmem.FormatOptions
		share int // percent of the crash states
	}{
		{"mixed workload", 160 << 10, pmem.FormatOptions{BlockSize: 512, RecordSize: 128, ExtentSlots: 4, LogSlots: 4, LogSlotSize: 1024, NumRecords: 48}, 50},
		{"full region (ENOSPC)", 64 << 10, pmem.FormatOptions{BlockSize: 512, RecordSize: 128, ExtentSlots: 4, LogSlots: 2, LogSlotSize: 1024, NumRecords: 24}, 30},
		{"one log slot, big records", 128 << 10, pmem.FormatOptions{BlockSize: 1024, RecordSize: 256, ExtentSlots: 8, LogSlots: 1, LogSlotSize: 2048, NumRecords: 32}, 20},
	}
	total := 0
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			want := *crashStates * sc.share / 100
			var w *workload
			cfg := pmemtest.Config{
				Size:           sc.size,
				Format:         sc.fo,
				Seed:           uint64(1000 + i),
				StatesPerFence: 3,
				MaxStates:      want,
				Workload: func(ctx context.Context, r *pmem.Region) error {
					w = newWorkload(uint64(i), r)
					// Bounded: far more steps than the states need.
					for step := 0; step < 10*want && ctx.Err() == nil; step++ {
						if err := w.step(ctx, r); err != nil {
							return err
						}
					}
					return nil
				},
				Check: func(c pmemtest.Crash) error { return w.check(c) },
			}
			res, err := pmemtest.Run(context.Background(), cfg)
			require.NoError(t, err)
			require.NoError(t, res.Err(), "inconsistent recoveries")
			require.GreaterOrEqual(t, res.States, want)
			total += res.States
			t.Logf("%d crash states at %d fences, 0 inconsistent; %d ops: %d committed, %d aborted, %d out of space/too large",
				res.States, res.Fences, w.ops, w.committed, w.aborted, w.noSpace)
		})
	}
	t.Logf("crash states checked: %d, inconsistent recoveries: 0", total)
}
