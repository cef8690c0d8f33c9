package plog

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/pmemtest"
)

// crashStates is how many crash states the crash tests check (all
// scenarios together). CI runs the default; `make crashtest` raises it.
var crashStates = flag.Int("plog.crashstates", 2400, "crash states checked by the plog crash tests (all scenarios together)")

// crashSeed, when set, replaces the scenarios' seeds to reproduce a run.
var crashSeed = flag.Uint64("plog.seed", 0, "seed for the plog crash tests (0: each scenario's own)")

// groupRec is one appended group as the model knows it.
type groupRec struct {
	recs  [][]byte
	acked bool // Append returned nil
}

type logState int

const (
	lsCreating logState = iota // Store.Log in flight: absent or empty
	lsLive
	lsDeleting // Delete in flight: absent or its content
)

// logModel is what a crash may leave of one log.
type logModel struct {
	state logState
	base  [][]byte    // the content the last Rewrite left
	order []*groupRec // groups placed since, in log order
	// rewriting is the new content while a Rewrite is in flight.
	rewriting    [][]byte
	rewritingSet bool
	pools        map[pmem.Extent]bool
	allocating   uint64       // blocks of a pool being allocated, 0 if none
	freeing      *pmem.Extent // pool being freed
}

// matches says why recs cannot be what a crash left of the log, nil if
// it can: the base, then placed groups whole and in order up to some
// point at or after the last acknowledged one; or, during a Rewrite, the
// new content.
func (lm *logModel) matches(recs [][]byte) error {
	if lm.rewritingSet && equalRecs(recs, lm.rewriting) {
		return nil
	}
	if len(recs) < len(lm.base) || !equalRecs(recs[:len(lm.base)], lm.base) {
		return fmt.Errorf("does not start with the %d records of the last rewrite (got %d records: %s)", len(lm.base), len(recs), preview(recs))
	}
	rest := recs[len(lm.base):]
	k := 0
	for len(rest) > 0 {
		if k == len(lm.order) {
			return fmt.Errorf("record %q follows the last of %d placed groups", trunc(rest[0]), len(lm.order))
		}
		g := lm.order[k].recs
		if len(rest) < len(g) || !equalRecs(rest[:len(g)], g) {
			return fmt.Errorf("group %d (%q, %d records) is torn or out of order: found %s", k, trunc(g[0]), len(g), preview(rest))
		}
		rest = rest[len(g):]
		k++
	}
	for j := k; j < len(lm.order); j++ {
		if lm.order[j].acked {
			return fmt.Errorf("acknowledged group %d (%q) is missing: %d of %d placed groups survived", j, trunc(lm.order[j].recs[0]), k, len(lm.order))
		}
	}
	return nil
}

func equalRecs(a, b [][]byte) bool { return slices.EqualFunc(a, b, bytes.Equal) }

func trunc(b []byte) string {
	if len(b) > 24 {
		return string(b[:24]) + "..."
	}
	return string(b)
}

func preview(recs [][]byte) string {
	var parts []string
	for _, r := range recs[:min(len(recs), 4)] {
		parts = append(parts, fmt.Sprintf("%q", trunc(r)))
	}
	if len(recs) > 4 {
		parts = append(parts, "...")
	}
	return fmt.Sprint(parts)
}

// world is the model of a store under a crash test, shared by the
// workload's goroutines (which update it) and the crash checks (which
// read it). Nobody holds mu while calling into plog.
type world struct {
	o       Options
	mu      sync.Mutex
	logs    map[LogID]*logModel
	handles map[LogID]*Log
	groups  map[string]*groupRec // by the group's first record
	// acks receives a token per acknowledged group (when someone listens),
	// so the concurrent test's manager can pace itself by appends.
	acks   chan struct{}
	big    bool // larger records, to fill the region
	checks int
	// counters for the test log
	acked, rewrites, deletes, pools, noSpace int
}

func newWorld(o Options) *world {
	return &world{o: o, logs: map[LogID]*logModel{}, handles: map[LogID]*Log{}, groups: map[string]*groupRec{}}
}

// install makes s report its log order to the model.
func (w *world) install(s *Store) {
	s.hooks = hooks{
		placed: func(id LogID, gs [][][]byte) {
			w.mu.Lock()
			defer w.mu.Unlock()
			lm := w.logs[id]
			for _, g := range gs {
				gr := &groupRec{recs: g}
				lm.order = append(lm.order, gr)
				w.groups[string(g[0])] = gr
			}
		},
		abandoned: func(id LogID, gs [][][]byte) {
			w.mu.Lock()
			defer w.mu.Unlock()
			lm := w.logs[id]
			lm.order = lm.order[:len(lm.order)-len(gs)]
			for _, g := range gs {
				delete(w.groups, string(g[0]))
			}
		},
		rewritten: func(id LogID) {
			w.mu.Lock()
			defer w.mu.Unlock()
			lm := w.logs[id]
			lm.base, lm.order = lm.rewriting, nil
			lm.rewriting, lm.rewritingSet = nil, false
		},
	}
}

func (w *world) handle(id LogID) *Log {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.handles[id]
}

// create opens a new log id.
func (w *world) create(s *Store, id LogID) error {
	w.mu.Lock()
	w.logs[id] = &logModel{state: lsCreating, pools: map[pmem.Extent]bool{}}
	w.mu.Unlock()
	l, err := s.Log(id)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.logs[id].state = lsLive
	w.handles[id] = l
	w.mu.Unlock()
	return nil
}

// tolerable are the errors a workload step may meet on a correct store.
func tolerable(err error) bool {
	return errors.Is(err, ErrNoSpace) || errors.Is(err, ErrDeleted)
}

// appendGroup appends one group of 1-4 records to id; tag makes it unique.
func (w *world) appendGroup(rng *rand.Rand, id LogID, tag string) error {
	l := w.handle(id)
	if l == nil {
		return nil
	}
	n := 1 + rng.IntN(4)
	g := make([][]byte, n)
	for i := range g {
		size := rng.IntN(120)
		if w.big {
			size *= 4
		}
		if rng.IntN(40) == 0 {
			size = 1500 // larger than a segment
		}
		g[i] = fmt.Appendf(nil, "%v %s %d/%d|", id, tag, i, n)
		g[i] = append(g[i], bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, size)...)
	}
	err := l.Append(g...)
	if err == nil {
		w.mu.Lock()
		w.groups[string(g[0])].acked = true
		w.acked++
		w.mu.Unlock()
		if w.acks != nil {
			select {
			case w.acks <- struct{}{}:
			default:
			}
		}
		return nil
	}
	if tolerable(err) {
		w.mu.Lock()
		w.noSpace++
		w.mu.Unlock()
		return nil
	}
	return err
}

// rewrite replaces id's content by its last few records and a marker.
func (w *world) rewrite(rng *rand.Rand, id LogID, tag string) error {
	l := w.handle(id)
	if l == nil {
		return nil
	}
	err := l.Rewrite(func(emit func([]byte) error) error {
		w.mu.Lock()
		lm := w.logs[id]
		cur := slices.Clone(lm.base)
		for _, g := range lm.order {
			cur = append(cur, g.recs...)
		}
		keep := cur[len(cur)-min(len(cur), rng.IntN(8)):]
		next := append(slices.Clone(keep), fmt.Appendf(nil, "%v rewrite %s", id, tag))
		lm.rewriting, lm.rewritingSet = next, true
		w.mu.Unlock()
		for _, rec := range next {
			if err := emit(rec); err != nil {
				return err
			}
		}
		return nil
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if lm := w.logs[id]; lm != nil {
		lm.rewriting, lm.rewritingSet = nil, false
	}
	switch {
	case err == nil:
		w.rewrites++
	case tolerable(err):
		w.noSpace++
	default:
		return err
	}
	return nil
}

func (w *world) allocPool(rng *rand.Rand, id LogID) error {
	l := w.handle(id)
	if l == nil {
		return nil
	}
	blocks := uint64(1 + rng.IntN(8))
	if w.big {
		blocks *= 3
	}
	w.mu.Lock()
	w.logs[id].allocating = blocks
	w.mu.Unlock()
	e, err := l.AllocPool(blocks)
	w.mu.Lock()
	defer w.mu.Unlock()
	lm := w.logs[id]
	lm.allocating = 0
	switch {
	case err == nil:
		lm.pools[e] = true
		w.pools++
	case !tolerable(err):
		return err
	}
	return nil
}

func (w *world) freePool(rng *rand.Rand, id LogID) error {
	l := w.handle(id)
	if l == nil {
		return nil
	}
	ps := l.Pools()
	if len(ps) == 0 {
		return nil
	}
	e := ps[rng.IntN(len(ps))]
	w.mu.Lock()
	w.logs[id].freeing = &e
	w.mu.Unlock()
	err := l.FreePool(e)
	w.mu.Lock()
	defer w.mu.Unlock()
	lm := w.logs[id]
	lm.freeing = nil
	if err == nil {
		delete(lm.pools, e)
	} else if !tolerable(err) {
		return err
	}
	return nil
}

// deleteAndCreate deletes id and opens it again, empty.
func (w *world) deleteAndCreate(s *Store, id LogID) error {
	l := w.handle(id)
	if l == nil {
		return nil
	}
	w.mu.Lock()
	w.logs[id].state = lsDeleting
	w.handles[id] = nil
	w.mu.Unlock()
	if err := l.Delete(); err != nil {
		return err
	}
	w.mu.Lock()
	delete(w.logs, id)
	w.deletes++
	w.mu.Unlock()
	if err := w.create(s, id); err != nil && !tolerable(err) {
		return err
	}
	return nil
}

// verify compares a recovered store with the model.
func (w *world) verify(s *Store) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	found := map[LogID]bool{}
	for _, id := range s.IDs() {
		found[id] = true
		if w.logs[id] == nil {
			return fmt.Errorf("%v exists after recovery but was deleted or never created", id)
		}
	}
	for id, lm := range w.logs {
		if !found[id] {
			if lm.state == lsLive {
				return fmt.Errorf("%v is missing after recovery", id)
			}
			continue
		}
		l, err := s.Log(id)
		if err != nil {
			return err
		}
		var recs [][]byte
		if err := l.Replay(func(rec []byte) error {
			recs = append(recs, bytes.Clone(rec))
			return nil
		}); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		if err := lm.matches(recs); err != nil {
			return fmt.Errorf("%v: %w", id, err)
		}
		extra := 0
		for _, e := range l.Pools() {
			switch {
			case lm.pools[e]:
			case lm.allocating == e.Count && extra == 0:
				extra++
			default:
				return fmt.Errorf("%v: pool %v was never allocated or was freed", id, e)
			}
		}
		for e := range lm.pools {
			if !slices.Contains(l.Pools(), e) && (lm.freeing == nil || *lm.freeing != e) {
				return fmt.Errorf("%v: pool %v is missing", id, e)
			}
		}
	}
	return nil
}

// check recovers one crash image and verifies it. With nested, the
// recovery itself (pmem's replay and plog's Open) runs on a tracker and
// every fence it issues is checked as a crash state too.
func (w *world) check(img []byte, seed uint64, nested bool) error {
	if nested {
		tr := pmem.NewTracker(img)
		rng := rand.New(rand.NewPCG(seed, 3))
		var nestedErr error
		tr.OnFence(func(int) {
			if nestedErr == nil {
				if err := w.check(tr.CrashImage(rng), 0, false); err != nil {
					nestedErr = fmt.Errorf("crash during recovery: %w", err)
				}
			}
		})
		r, err := pmem.Attach(tr, pmem.Options{})
		if err != nil {
			return fmt.Errorf("recovery: %w", err)
		}
		defer r.Close()
		if _, err := Open(r, w.o); err != nil {
			return fmt.Errorf("plog.Open after recovery: %w", err)
		}
		tr.OnFence(nil)
		if nestedErr != nil {
			return nestedErr
		}
	}
	r, _, err := pmemtest.Recover(img, pmem.Options{})
	if err != nil {
		return err
	}
	defer r.Close()
	s, err := Open(r, w.o)
	if err != nil {
		return fmt.Errorf("plog.Open after recovery: %w", err)
	}
	if rep := Check(r); !rep.Clean() {
		return fmt.Errorf("plog fsck after recovery: %s", problems(rep))
	}
	if rep := pmem.Check(r); !rep.Clean() {
		return fmt.Errorf("pmem fsck after plog.Open:\n%s", rep)
	}
	if err := w.verify(s); err != nil {
		return err
	}
	if seed%16 == 0 {
		// The recovered store is usable: append to every log and read back.
		for _, id := range s.IDs() {
			l, err := s.Log(id)
			if err != nil {
				return err
			}
			if err := l.Append([]byte("after recovery")); err != nil && !errors.Is(err, ErrNoSpace) {
				return fmt.Errorf("%v: append after recovery: %w", id, err)
			}
			if err := l.Replay(func([]byte) error { return nil }); err != nil {
				return fmt.Errorf("%v: replay after an append after recovery: %w", id, err)
			}
		}
		if rep := Check(r); !rep.Clean() {
			return fmt.Errorf("plog fsck after appending to the recovered store: %s", problems(rep))
		}
	}
	return nil
}

// crashScenario is one configuration of the crash tests.
type crashScenario struct {
	name  string
	size  int
	fo    pmem.FormatOptions
	o     Options
	share int // percent of the crash states
	// fill makes rewrites rare, so the region fills up (ENOSPC).
	fill bool
}

var crashScenarios = []crashScenario{
	{"small segments", 1 << 20, pmem.FormatOptions{BlockSize: 512, LogSlots: 8, LogSlotSize: 4096}, Options{SegmentSize: 1024}, 50, false},
	{"small log slots", 512 << 10, pmem.FormatOptions{BlockSize: 512, LogSlots: 4, LogSlotSize: 1024}, Options{SegmentSize: 512}, 30, false},
	{"full region (ENOSPC)", 64 << 10, pmem.FormatOptions{BlockSize: 512, LogSlots: 2, LogSlotSize: 2048, NumRecords: 24}, Options{SegmentSize: 1024}, 20, true},
}

var crashLogs = []LogID{{Service: 1, Partition: 3}, {Service: 2, Partition: 3}}

// sequentialStep runs one random operation of the single-goroutine
// workload.
func (w *world) sequentialStep(rng *rand.Rand, s *Store, step int, fill bool) error {
	id := crashLogs[rng.IntN(len(crashLogs))]
	tag := fmt.Sprintf("s%d", step)
	op := rng.IntN(100)
	if fill && op >= 84 && op < 91 && rng.IntN(8) != 0 {
		op = 0 // append instead of most rewrites
	}
	switch {
	case op < 84:
		return w.appendGroup(rng, id, tag)
	case op < 91:
		return w.rewrite(rng, id, tag)
	case op < 95:
		return w.allocPool(rng, id)
	case op < 98:
		return w.freePool(rng, id)
	default:
		return w.deleteAndCreate(s, id)
	}
}

// runSequential runs the single-goroutine workload under pmemtest.Run.
func runSequential(t *testing.T, sc crashScenario, seed uint64, states int, mut mutation) (pmemtest.Result, *world) {
	w := newWorld(sc.o)
	w.big = sc.fill
	res, err := pmemtest.Run(context.Background(), pmemtest.Config{
		Size:           sc.size,
		Format:         sc.fo,
		Seed:           seed,
		StatesPerFence: 2,
		MaxStates:      states,
		MaxFailures:    1,
		Workload: func(ctx context.Context, r *pmem.Region) error {
			s, err := Open(r, sc.o)
			if err != nil {
				return err
			}
			s.mut = mut
			w.install(s)
			for _, id := range crashLogs {
				if err := w.create(s, id); err != nil {
					return err
				}
			}
			rng := rand.New(rand.NewPCG(seed, 1))
			for step := 0; step < 20*states && ctx.Err() == nil; step++ {
				if err := w.sequentialStep(rng, s, step, sc.fill); err != nil {
					return err
				}
			}
			return nil
		},
		Check: func(c pmemtest.Crash) error {
			w.checks++
			return w.check(c.Image, c.Seed, w.checks%32 == 0)
		},
	})
	require.NoError(t, err)
	return res, w
}

// serialFences is a tracker whose fences run one at a time, so crash
// states drawn at one goroutine's fence are not disturbed by another's,
// and the checks can count without locks. pmemtest.Run assumes one
// goroutine fences at a time, hence this runner for concurrent workloads.
// Stores of other goroutines go on during a check; CrashImage takes them
// as they stand. That is race-free because a line the tracker may read
// (one with stores not yet durable) is only ever stored to with atomic
// word stores: plog logs record payload words (Tx.Write) and writes
// segment bytes in place only into lines that are durable and so
// untracked (past the tail, or in a fresh extent).
//
// Fences of different goroutines are modelled as one global fence (see
// pmem.Tracker), which can make a line durable earlier than its own
// goroutine's fence would; the single-goroutine runs (TestCrashSequential
// and the mutation tests) do not have that blind spot.
type serialFences struct {
	*pmem.Tracker
	mu sync.Mutex
}

func (m *serialFences) Fence() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.Tracker.Fence()
}

// runConcurrent runs appenders on every log and a manager that
// rewrites, allocates and frees pools and deletes logs, all at once, and
// checks crash states at every fence.
func runConcurrent(t *testing.T, sc crashScenario, seed uint64, states int, mut mutation, appenders int) (pmemtest.Result, *world) {
	w := newWorld(sc.o)
	w.big = sc.fill
	tr := pmem.NewTracker(make([]byte, sc.size))
	med := &serialFences{Tracker: tr}
	r, err := pmem.Format(med, sc.fo, pmem.Options{})
	require.NoError(t, err)
	defer r.Close()
	s, err := Open(r, sc.o)
	require.NoError(t, err)
	s.mut = mut
	w.install(s)
	for _, id := range crashLogs {
		require.NoError(t, w.create(s, id))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var res pmemtest.Result
	base := tr.Fences()
	seeds := rand.New(rand.NewPCG(seed, 2))
	tr.OnFence(func(fence int) {
		if ctx.Err() != nil {
			return
		}
		for range 2 {
			sd := seeds.Uint64()
			img := tr.CrashImage(rand.New(rand.NewPCG(sd, sd^0x9e3779b97f4a7c15)))
			st := res.States
			res.States++
			w.checks++
			if err := w.check(img, sd, w.checks%32 == 0); err != nil {
				res.Failures = append(res.Failures, pmemtest.Failure{Fence: fence - base, State: st, Seed: sd, Err: err})
				cancel()
				return
			}
			if res.States >= states {
				cancel()
				return
			}
		}
	})
	var wg, appending sync.WaitGroup
	errs := make(chan error, 64)
	bound := 40 * states // steps per goroutine, far more than the states need
	w.acks = make(chan struct{}, 64)
	appendersDone := make(chan struct{})
	for li, id := range crashLogs {
		for a := range appenders {
			appending.Add(1)
			wg.Go(func() {
				defer appending.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(100*li+a)))
				for i := 0; i < bound && ctx.Err() == nil; i++ {
					if err := w.appendGroup(rng, id, fmt.Sprintf("a%d.%d", a, i)); err != nil {
						errs <- err
						cancel()
						return
					}
				}
			})
		}
	}
	go func() {
		appending.Wait()
		close(appendersDone)
	}()
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 99))
		for i := 0; i < bound && ctx.Err() == nil; i++ {
			// One management operation per few acknowledged appends, so
			// appends, not transactions, make most of the crash states.
			for range 4 {
				select {
				case <-w.acks:
				case <-appendersDone:
				case <-ctx.Done():
				}
			}
			id := crashLogs[rng.IntN(len(crashLogs))]
			var err error
			op := rng.IntN(100)
			if sc.fill && op < 50 && rng.IntN(4) != 0 {
				op = 60 // a pool instead of most rewrites
			}
			switch {
			case op < 50:
				err = w.rewrite(rng, id, fmt.Sprintf("m%d", i))
			case op < 70:
				err = w.allocPool(rng, id)
			case op < 90:
				err = w.freePool(rng, id)
			default:
				err = w.deleteAndCreate(s, id)
			}
			if err != nil {
				errs <- err
				cancel()
				return
			}
		}
	})
	wg.Wait()
	tr.OnFence(nil)
	res.Fences = tr.Fences() - base
	close(errs)
	for err := range errs {
		require.NoError(t, err, "workload")
	}
	return res, w
}

func TestCrashSequential(t *testing.T) {
	total := 0
	for i, sc := range crashScenarios {
		t.Run(sc.name, func(t *testing.T) {
			want := *crashStates / 2 * sc.share / 100
			seed := cmpOr(*crashSeed, uint64(100+i))
			res, w := runSequential(t, sc, seed, want, mutNone)
			require.NoError(t, res.Err(), "inconsistent recovery (seed %d)", seed)
			require.GreaterOrEqual(t, res.States, want)
			total += res.States
			t.Logf("seed %d: %d crash states at %d fences, all consistent; %d groups acknowledged, %d rewrites, %d pools, %d deletes, %d out of space",
				seed, res.States, res.Fences, w.acked, w.rewrites, w.pools, w.deletes, w.noSpace)
		})
	}
	t.Logf("crash states checked: %d", total)
}

func TestCrashConcurrent(t *testing.T) {
	total := 0
	for i, sc := range crashScenarios {
		t.Run(sc.name, func(t *testing.T) {
			want := *crashStates / 2 * sc.share / 100
			seed := cmpOr(*crashSeed, uint64(200+i))
			res, w := runConcurrent(t, sc, seed, want, mutNone, 3)
			require.NoError(t, res.Err(), "inconsistent recovery (seed %d)", seed)
			require.GreaterOrEqual(t, res.States, want)
			total += res.States
			t.Logf("seed %d: %d crash states at %d fences, all consistent; %d groups acknowledged, %d rewrites, %d pools, %d deletes, %d out of space",
				seed, res.States, res.Fences, w.acked, w.rewrites, w.pools, w.deletes, w.noSpace)
		})
	}
	t.Logf("crash states checked: %d", total)
}

// problems lists a report's errors and warnings on one line.
func problems(rep *Report) string {
	var msgs []string
	for _, f := range rep.Findings {
		if f.Severity != pmem.SevInfo {
			msgs = append(msgs, fmt.Sprintf("%s: %s", f.Area, f.Message))
		}
	}
	return strings.Join(msgs, "; ")
}

func cmpOr(a, b uint64) uint64 {
	if a != 0 {
		return a
	}
	return b
}

// TestMutationsAreCaught removes each durability step of the append and
// rewrite paths in turn and requires the crash tests to notice: a crash
// test that passes without the step proves nothing about it.
func TestMutationsAreCaught(t *testing.T) {
	tests := map[string]struct {
		mut        mutation
		concurrent bool
	}{
		"no flush+fence of the records before publishing the tail":    {mut: mutSkipRecordPersist},
		"tail published by a store that is never flushed":             {mut: mutUnflushedTail},
		"tail published before the records are persisted":             {mut: mutPublishFirst},
		"tail published after each record of a group":                 {mut: mutPublishPerRecord},
		"rewrite's swap as separate word stores":                      {mut: mutRewriteTornSwap},
		"rewrite's segments written without WriteFresh (no flush)":    {mut: mutRewriteUnflushed},
		"concurrent: no flush+fence of the records before the tail":   {mut: mutSkipRecordPersist, concurrent: true},
		"concurrent: tail published by a store that is never flushed": {mut: mutUnflushedTail, concurrent: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			const states = 600
			sc := crashScenarios[0]
			var res pmemtest.Result
			if tc.concurrent {
				res, _ = runConcurrent(t, sc, 300, states, tc.mut, 3)
			} else {
				res, _ = runSequential(t, sc, 300, states, tc.mut)
			}
			require.NotEmpty(t, res.Failures, "the crash test passed %d states without this durability step", res.States)
			f := res.Failures[0]
			msg := strings.SplitN(f.Err.Error(), "\n", 3)
			t.Logf("caught at crash state %d (fence %d, seed %#x): %s", f.State, f.Fence, f.Seed, strings.Join(msg[:min(2, len(msg))], " "))
		})
	}
}
