package pmem_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/pmemtest"
)

// crashStates is the total number of crash states TestCrashRecovery
// checks, split over its scenarios. CI runs the default, the number at
// which `make mutate` shows every removed flush and fence caught (it
// costs about two minutes under the race detector); `make crashtest`
// raises it. crashSeed reproduces a run: every run prints its seed.
var (
	crashStates = flag.Int("pmem.crashstates", 6000, "crash states checked by TestCrashRecovery (all scenarios together)")
	crashSeed   = flag.Uint64("pmem.seed", 0, "seed of the crash tests (0: draw one; every run prints the seed it used)")
)

// testSeed is the run's seed: -pmem.seed, or a fresh one, printed so a
// failure can be replayed with -pmem.seed=N.
func testSeed(t *testing.T) uint64 {
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -args -pmem.seed=%d)", seed, seed)
	return seed
}

// Kinds: worker w's records have kinds 10w+1..10w+3, and its publish
// record kind 10w+4; roots 8w..8w+2 are its model roots, 8w+3 its
// published version.
const (
	kindsPerWorker = 10
	publishKind    = 4
	rootsPerWorker = 8
	publishRoot    = 3
	bigBlocks      = 3 // blocks of the publish record written with logged writes
)

// modelRecord is what the workload believes a record holds.
type modelRecord struct {
	kind    uint16
	payload []uint64
	extents []pmem.Extent
}

// model is the logical content of one worker's part of a region: what
// recovery must restore.
type model struct {
	records map[pmem.RecordID]modelRecord
	roots   [3]uint64
	big     []byte // the publish record's logged blocks
	// published is the version stored with Store8 after its block was
	// made durable with Persist.
	published uint64
	cluster   pmem.UUID
	node      uint64
}

func (m model) clone() model {
	c := m
	c.records = make(map[pmem.RecordID]modelRecord, len(m.records))
	for id, r := range m.records {
		r.payload = slices.Clone(r.payload)
		r.extents = slices.Clone(r.extents)
		c.records[id] = r
	}
	c.big = slices.Clone(m.big)
	return c
}

// fillByte is the byte every block of extent e owned by id holds, so a
// recovered region proves the unlogged data writes reached the medium
// before the allocation that made them reachable.
func fillByte(id pmem.RecordID, e pmem.Extent) byte { return byte(uint64(id)*31+e.Start*7) | 1 }

func ownerOf(kind uint16) int { return int(kind) / kindsPerWorker }

// readModels reads the logical content of r for workers workers and
// checks the data blocks and the published versions.
func readModels(r *pmem.Region, workers int, withIdentity bool) ([]model, error) {
	ms := make([]model, workers)
	for w := range ms {
		ms[w].records = make(map[pmem.RecordID]modelRecord)
		for i := range ms[w].roots {
			ms[w].roots[i] = r.Root(rootsPerWorker*w + i)
		}
		ms[w].published = r.Root(rootsPerWorker*w + publishRoot)
	}
	var blocks, records uint64
	var dataErr error
	err := r.Records(func(rec pmem.Record) bool {
		w := ownerOf(rec.Kind)
		if w >= workers {
			dataErr = fmt.Errorf("record %d has kind %d of no worker", rec.ID, rec.Kind)
			return false
		}
		records++
		mr := modelRecord{kind: rec.Kind, extents: rec.Extents}
		for off := rec.PayloadOff; off < rec.PayloadOff+rec.PayloadLen; off += 8 {
			mr.payload = append(mr.payload, r.Load8(off))
		}
		for _, e := range rec.Extents {
			blocks += e.Count
		}
		ms[w].records[rec.ID] = mr
		if int(rec.Kind)%kindsPerWorker == publishKind {
			dataErr = cmp.Or(dataErr, checkPublished(r, rec, w, &ms[w]))
			return dataErr == nil
		}
		for _, e := range rec.Extents {
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
		return true
	})
	if err == nil {
		err = dataErr
	}
	if withIdentity {
		sb := r.Superblock()
		ms[0].cluster, ms[0].node = sb.ClusterUUID, sb.NodeID
	}
	if st := r.Stats(); err == nil && (st.BlocksUsed != blocks || st.RecordsUsed != records) {
		err = fmt.Errorf("stats say %d records and %d blocks in use, records own %d and %d", st.RecordsUsed, st.BlocksUsed, records, blocks)
	}
	return ms, err
}

// checkPublished checks worker w's publish record: every word of its
// first block is at least the version its root says was published (the
// block was made durable with Persist before the root was stored with
// Store8), and reads its logged blocks into the model.
func checkPublished(r *pmem.Region, rec pmem.Record, w int, m *model) error {
	if len(rec.Extents) != 1 || rec.Extents[0].Count != 1+bigBlocks {
		return fmt.Errorf("publish record %d has extents %v", rec.ID, rec.Extents)
	}
	b, err := r.ExtentBytes(rec.Extents[0])
	if err != nil {
		return err
	}
	bs := int(r.Geometry().BlockSize)
	published := r.Root(rootsPerWorker*w + publishRoot)
	for i := 0; i < bs; i += 8 {
		if v := binary.LittleEndian.Uint64(b[i:]); v < published {
			return fmt.Errorf("worker %d published version %d but word %d of its block holds %d: the block was not durable before the pointer", w, published, i/8, v)
		}
	}
	m.big = slices.Clone(b[bs:])
	return nil
}

// diff describes how got differs from want, "" when equal.
func (m model) diff(want model) string {
	if m.roots != want.roots {
		return fmt.Sprintf("roots %v, want %v", m.roots, want.roots)
	}
	if m.published != want.published {
		return fmt.Sprintf("published version %d, want %d (a Store8 that returned was not durable, or one that did not happen is)", m.published, want.published)
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
	if !bytes.Equal(m.big, want.big) {
		return "the publish record's logged blocks differ"
	}
	return ""
}

// worker runs random transactions against a region and keeps the model
// of what each committed one leaves.
type worker struct {
	id       int
	r        *pmem.Region
	rng      *rand.Rand
	payload  int // payload words per record
	identity bool
	alone    bool // the only worker on its region

	mu       sync.Mutex // guards cur and inflight against a check on another goroutine
	cur      model
	inflight *model // the model if the operation being made durable lands

	publishID pmem.RecordID
	version   uint64
	ops       int
	// counters for the test log
	committed, aborted, noSpace int
}

func newWorker(id int, seed uint64, r *pmem.Region, identity bool) *worker {
	return &worker{
		id: id, r: r, identity: identity,
		rng:     rand.New(rand.NewPCG(seed, uint64(id))),
		cur:     model{records: map[pmem.RecordID]modelRecord{}},
		payload: int(r.Geometry().PayloadSize() / 8),
	}
}

func (w *worker) kind(k int) uint16 { return uint16(kindsPerWorker*w.id + k) }
func (w *worker) root(i int) int    { return rootsPerWorker*w.id + i }

// land runs durable with next as the state in flight and makes it
// current if durable succeeds.
func (w *worker) land(next model, durable func() error) error {
	w.mu.Lock()
	w.inflight = &next
	w.mu.Unlock()
	err := durable()
	w.mu.Lock()
	if err == nil {
		w.cur = next
	}
	w.inflight = nil
	w.mu.Unlock()
	return err
}

// setup creates the worker's publish record.
func (w *worker) setup(ctx context.Context) error {
	next := w.cur.clone()
	tx, err := w.r.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	id, err := tx.AllocRecord(w.kind(publishKind))
	if err != nil {
		return err
	}
	e, err := tx.AllocExtent(id, 1+bigBlocks)
	if err != nil {
		return err
	}
	bs := int(w.r.Geometry().BlockSize)
	if err := tx.WriteFresh(w.r.ExtentOffset(e), make([]byte, (1+bigBlocks)*bs)); err != nil {
		return err
	}
	w.publishID = id
	next.records[id] = modelRecord{kind: w.kind(publishKind), payload: make([]uint64, w.payload), extents: []pmem.Extent{e}}
	next.big = make([]byte, bigBlocks*bs)
	return w.land(next, tx.Commit)
}

func (w *worker) liveIDs() []pmem.RecordID {
	return slices.DeleteFunc(slices.Sorted(maps.Keys(w.cur.records)), func(id pmem.RecordID) bool { return id == w.publishID })
}

func (w *worker) pick() (pmem.RecordID, bool) {
	ids := w.liveIDs()
	if len(ids) == 0 {
		return 0, false
	}
	return ids[w.rng.IntN(len(ids))], true
}

// allocExtent allocates and fills an extent for id in tx and next.
func (w *worker) allocExtent(tx *pmem.Tx, next *model, id pmem.RecordID) error {
	n := uint64(1 + w.rng.IntN(3))
	if w.rng.IntN(8) == 0 {
		n = uint64(20 + w.rng.IntN(80)) // several bitmap words: one range entry
	}
	e, err := tx.AllocExtent(id, n)
	if err != nil {
		return err
	}
	b := bytes.Repeat([]byte{fillByte(id, e)}, int(e.Count*uint64(w.r.Geometry().BlockSize)))
	if err := tx.WriteFresh(w.r.ExtentOffset(e), b); err != nil {
		return err
	}
	mr := next.records[id]
	mr.extents = append(mr.extents, e)
	next.records[id] = mr
	return nil
}

var errAbort = errors.New("abort on purpose")

// step runs one random operation; a worker alone on its region also
// checks the live region now and then (no transaction is in flight), which
// catches the volatile allocator drifting from the bitmaps.
func (w *worker) step(ctx context.Context) error {
	if err := w.stepOnce(ctx); err != nil {
		return err
	}
	if w.alone && w.rng.IntN(8) == 0 {
		if rep := pmem.Check(w.r); !rep.Clean() {
			return fmt.Errorf("fsck of the live region after op %d:\n%s", w.ops, rep)
		}
	}
	return nil
}

func (w *worker) stepOnce(ctx context.Context) error {
	w.ops++
	next := w.cur.clone()
	r := w.r
	switch op := w.rng.IntN(40); {
	case op == 0 && w.identity:
		var u pmem.UUID
		u[0], u[15] = byte(w.ops), byte(w.ops>>8)
		next.cluster, next.node = u, uint64(w.ops)
		return w.land(next, func() error { return r.SetIdentity(u, uint64(w.ops)) })
	case op == 1 && w.publishID != 0:
		// Publish: direct stores, Persist, then a one-word pointer.
		w.version++
		rec, _ := r.Record(w.publishID)
		off := r.ExtentOffset(rec.Extents[0])
		bs := uint64(r.Geometry().BlockSize)
		for i := uint64(0); i < bs; i += 8 {
			binary.LittleEndian.PutUint64(r.Bytes()[off+i:], w.version)
		}
		if err := r.Persist(off, bs); err != nil {
			return err
		}
		next.published = w.version
		return w.land(next, func() error { return r.Store8(r.RootOffset(w.root(publishRoot)), w.version) })
	}
	tx, err := r.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	err = w.build(tx, &next)
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
	err = w.land(next, tx.Commit)
	if errors.Is(err, pmem.ErrTxTooLarge) {
		w.noSpace++
		return nil
	}
	if err != nil {
		return err
	}
	w.committed++
	return nil
}

func (w *worker) build(tx *pmem.Tx, next *model) error {
	r := w.r
	switch op := w.rng.IntN(100); {
	case op < 25: // allocate a record, maybe with data, maybe rooted
		kind := w.kind(1 + w.rng.IntN(3))
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
			if err := w.allocExtent(tx, next, id); err != nil {
				return err
			}
		}
		if w.rng.IntN(2) == 0 {
			i := w.rng.IntN(len(next.roots))
			next.roots[i] = uint64(id)
			return tx.SetRoot(w.root(i), uint64(id))
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
				if err := tx.SetRoot(w.root(i), 0); err != nil {
					return err
				}
			}
		}
	case op < 58: // move amounts between records: a multi-word update
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
	case op < 70: // grow a record
		id, ok := w.pick()
		if !ok {
			return errAbort
		}
		return w.allocExtent(tx, next, id)
	case op < 78: // shrink a record
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
	case op < 84: // a byte-granular write across a record's payload
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
	case op < 92: // a logged write of up to a kilobyte or more into old blocks
		if w.publishID == 0 || len(next.big) == 0 {
			return errAbort
		}
		rec, _ := r.Record(w.publishID)
		bs := int(r.Geometry().BlockSize)
		at := w.rng.IntN(len(next.big))
		n := 1 + w.rng.IntN(min(len(next.big)-at, tx.Room()-64))
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(w.rng.Uint32())
		}
		if err := tx.Write(r.ExtentOffset(rec.Extents[0])+uint64(bs+at), p); err != nil {
			return err
		}
		copy(next.big[at:], p)
	case op < 96: // a transaction that gives up, after allocating and freeing
		if _, err := tx.AllocRecord(w.kind(3)); err != nil {
			return err
		}
		if err := tx.SetRoot(w.root(0), 12345); err != nil {
			return err
		}
		if id, ok := w.pick(); ok && w.rng.IntN(2) == 0 {
			if err := tx.FreeRecord(id); err != nil {
				return err
			}
		}
		return errAbort
	default: // more than a log slot holds: ErrTxTooLarge, no effect
		for range 2 * tx.Cap() {
			if err := tx.SetRoot(w.root(1), w.rng.Uint64()); err != nil {
				return err
			}
			if err := tx.Write(r.RootOffset(w.root(2)), []byte{1, 2, 3}); err != nil {
				return err
			}
		}
		return errors.New("a log slot held every update")
	}
	return nil
}

// states returns the models a crash may leave for this worker: the
// last durable one and, if an operation is landing, the one it lands.
func (w *worker) states() (cur model, inflight *model) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur = w.cur
	if w.inflight != nil {
		x := *w.inflight
		inflight = &x
	}
	return cur, inflight
}

// crashCheck checks recovered images against a group of workers.
type crashCheck struct {
	workers  []*worker
	identity bool
	instr    pmem.Instruction
}

// compare recovers nothing: it checks an open region against the models.
func (cc *crashCheck) compare(r *pmem.Region) error {
	got, err := readModels(r, len(cc.workers), cc.identity)
	if err != nil {
		return err
	}
	for i, w := range cc.workers {
		cur, inflight := w.states()
		d := got[i].diff(cur)
		if d != "" && inflight != nil {
			if d2 := got[i].diff(*inflight); d2 == "" {
				d = ""
			} else {
				d = fmt.Sprintf("matches neither the committed state (%s) nor the one in flight (%s)", d, d2)
			}
		}
		if d != "" {
			return fmt.Errorf("worker %d: %s", i, d)
		}
	}
	return nil
}

// check recovers one crash image and compares it with the models the
// crash allows. Every fourth state also crashes recovery itself.
func (cc *crashCheck) check(c pmemtest.Crash) error {
	cfg := pmemtest.RecoverConfig{Instruction: cc.instr}
	if c.State%4 == 0 {
		cfg.CrashStates, cfg.Seed = 1, c.Seed
		cfg.CheckCrash = func(img []byte) error {
			r, _, err := pmemtest.Recover(img, pmem.Options{})
			if err != nil {
				return err
			}
			defer r.Close()
			return cc.compare(r)
		}
	}
	r, _, err := pmemtest.RecoverWith(c.Image, cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := cc.compare(r); err != nil {
		return err
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

type crashScenario struct {
	name    string
	size    int
	fo      pmem.FormatOptions
	instr   pmem.Instruction
	workers int
	share   int // percent of the crash states
}

func crashScenarios() []crashScenario {
	mixed := pmem.FormatOptions{BlockSize: 512, RecordSize: 128, ExtentSlots: 4, LogSlots: 4, LogSlotSize: 4096, NumRecords: 48}
	return []crashScenario{
		{"mixed workload", 192 << 10, mixed, pmem.InstrCLWB, 1, 35},
		{"mixed workload, msync", 192 << 10, mixed, pmem.InstrMsync, 1, 15},
		{"full region (ENOSPC)", 64 << 10, pmem.FormatOptions{BlockSize: 512, RecordSize: 128, ExtentSlots: 4, LogSlots: 2, LogSlotSize: 1024, NumRecords: 24}, pmem.InstrCLFLUSHOPT, 1, 15},
		{"one log slot, big records", 128 << 10, pmem.FormatOptions{BlockSize: 1024, RecordSize: 256, ExtentSlots: 8, LogSlots: 1, LogSlotSize: 2048, NumRecords: 32}, pmem.InstrCLWB, 1, 10},
		// Concurrent workers cost a stack walk per flush and fence (the
		// per-goroutine fence model), hence their smaller shares.
		{"three concurrent workers", 256 << 10, pmem.FormatOptions{BlockSize: 512, RecordSize: 128, ExtentSlots: 4, LogSlots: 4, LogSlotSize: 4096, NumRecords: 96}, pmem.InstrCLWB, 3, 17},
		{"two concurrent workers, msync", 192 << 10, mixed, pmem.InstrMsync, 2, 8},
	}
}

// runCrashScenario runs one scenario for want states.
func runCrashScenario(t *testing.T, sc crashScenario, seed uint64, want int) pmemtest.Result {
	t.Helper()
	cc := &crashCheck{identity: true, instr: sc.instr}
	cfg := pmemtest.Config{
		Size:           sc.size,
		Format:         sc.fo,
		Instruction:    sc.instr,
		Concurrent:     sc.workers > 1,
		Seed:           seed,
		StatesPerFence: 3,
		MaxStates:      want,
		Workload: func(ctx context.Context, r *pmem.Region) error {
			for i := range sc.workers {
				w := newWorker(i, seed, r, i == 0)
				w.alone = sc.workers == 1
				cc.workers = append(cc.workers, w)
			}
			for _, w := range cc.workers {
				if err := w.setup(ctx); err != nil {
					return err
				}
			}
			errs := make(chan error, sc.workers)
			for _, w := range cc.workers {
				go func() {
					// Bounded: far more steps than the states need.
					for step := 0; step < 10*want && ctx.Err() == nil; step++ {
						if err := w.step(ctx); err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
				}()
			}
			var first error
			for range sc.workers {
				first = cmp.Or(first, <-errs)
			}
			return first
		},
		Check: cc.check,
	}
	res, err := pmemtest.Run(context.Background(), cfg)
	require.NoError(t, err)
	require.NoError(t, res.Err(), "inconsistent recoveries (seed %d)", seed)
	require.GreaterOrEqual(t, res.States, want)
	var ops, committed, aborted, noSpace int
	for _, w := range cc.workers {
		ops, committed, aborted, noSpace = ops+w.ops, committed+w.committed, aborted+w.aborted, noSpace+w.noSpace
	}
	t.Logf("%d crash states at %d crash points, 0 inconsistent; %d workers, %d ops: %d committed, %d aborted, %d out of space/too large",
		res.States, res.Fences, sc.workers, ops, committed, aborted, noSpace)
	return res
}

func TestCrashRecovery(t *testing.T) {
	seed := testSeed(t)
	start := time.Now()
	total := 0
	for i, sc := range crashScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			want := max(1, *crashStates*sc.share/100)
			total += runCrashScenario(t, sc, seed+uint64(i), want).States
		})
	}
	t.Logf("crash states checked: %d, inconsistent recoveries: 0, in %v (seed %d)", total, time.Since(start).Round(time.Second), seed)
}

// TestFormatCrash formats over an old, populated region on the tracker
// and crashes at every point of Format. Each crash image must open as
// the old region unchanged, or as the new region empty and clean, or not
// open at all: never a region that opens with a mix of the two.
func TestFormatCrash(t *testing.T) {
	seed := testSeed(t)
	for _, instr := range []pmem.Instruction{pmem.InstrCLWB, pmem.InstrMsync} {
		t.Run(instr.String(), func(t *testing.T) {
			fo := pmem.FormatOptions{BlockSize: 512, RecordSize: 128, LogSlots: 2, LogSlotSize: 1024, NumRecords: 40, RegionUUID: pmem.UUID{1}}
			old := pmem.NewMemMedium(96 << 10)
			r, err := pmem.Format(old, fo, pmem.Options{})
			require.NoError(t, err)
			w := newWorker(0, seed, r, false)
			require.NoError(t, w.setup(t.Context()))
			for range 60 {
				require.NoError(t, w.step(t.Context()))
			}
			oldModel := w.cur
			tr := pmem.NewTracker(old.Bytes())
			rng := rand.New(rand.NewPCG(seed, 3))
			outcomes := map[string]int{}
			var failures []error
			tr.OnCrashPoint(func(p pmem.CrashPoint) {
				for range 6 {
					img := p.Image(rng)
					got, err := pmem.Attach(pmem.NewMemMediumFrom(img), pmem.Options{})
					if err != nil {
						outcomes["no region"]++
						if !errors.Is(err, pmem.ErrNotFormatted) && !errors.Is(err, pmem.ErrBadMagic) && !errors.Is(err, pmem.ErrTornSuperblock) {
							failures = append(failures, fmt.Errorf("%s %d: %w", p.Kind, p.N, err))
						}
						continue
					}
					if rep := pmem.Check(got); !rep.Clean() {
						failures = append(failures, fmt.Errorf("%s %d: opens but is not clean:\n%s", p.Kind, p.N, rep))
						continue
					}
					switch got.Superblock().RegionUUID {
					case fo.RegionUUID:
						ms, err := readModels(got, 1, false)
						if err == nil {
							if d := ms[0].diff(oldModel); d != "" {
								err = errors.New(d)
							}
						}
						if err != nil {
							failures = append(failures, fmt.Errorf("%s %d: the old region opens changed: %w", p.Kind, p.N, err))
						}
						outcomes["old region"]++
					default:
						if st := got.Stats(); st.RecordsUsed != 0 || st.BlocksUsed != 0 {
							failures = append(failures, fmt.Errorf("%s %d: the new region opens with %d records and %d blocks in use", p.Kind, p.N, st.RecordsUsed, st.BlocksUsed))
						}
						outcomes["new region"]++
					}
				}
			})
			nfo := fo
			nfo.RegionUUID = pmem.UUID{2}
			nfo.NumRecords = 50
			_, err = pmem.Format(tr.Medium(instr), nfo, pmem.Options{})
			require.NoError(t, err)
			tr.OnCrashPoint(nil)
			// Once Format has returned, the new region is durable.
			for range 20 {
				got, err := pmem.Attach(pmem.NewMemMediumFrom(tr.CrashImage(rng)), pmem.Options{})
				require.NoError(t, err, "a crash right after Format returned")
				require.Equal(t, nfo.RegionUUID, got.Superblock().RegionUUID)
				require.True(t, pmem.Check(got).Clean())
			}
			require.Empty(t, failures, "seed %d", seed)
			require.Positive(t, outcomes["old region"])
			require.Positive(t, outcomes["new region"])
			t.Logf("%d crash points while formatting over an old region: %v", tr.Points(), outcomes)
		})
	}
}
