package pmem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"
)

// TrackLine is the cache-line size the power-loss model uses.
const TrackLine = 64

// maxVersions bounds the remembered intermediate values of one word; the
// newest are kept.
const maxVersions = 8

// Tracker simulates power loss. It is the hardware under the production
// flush code: a region on Tracker.Medium runs the same Flush and Fence
// logic as on a real device (which lines, which pages, when to fence), and
// the tracker sees each cache-line flush, SFENCE and msync that logic
// issues. It keeps two images: the working bytes the program sees, and the
// durable bytes that are certain to survive.
//
// The model: a store is remembered per 8-byte word (through
// StoreObserver); a flushed line's content is pending until the flushing
// goroutine's next fence, which makes it durable (a fence orders only its
// own thread's flushes, as SFENCE does, when TrackGoroutines is on);
// msync makes its pages durable at
// once. Every store, flush, fence and msync is a crash point, at which CrashImage builds
// what the medium could hold if power failed: every durable line, plus,
// for each line with stores or flushes not yet durable, its durable
// content, its newest content, or a word-by-word mix of any values the
// words held since they were last durable. Aligned 8-byte words are never
// torn.
//
// Only observed stores exist for the model: the region reports each of its
// stores, and Region.Persist reports the range it makes durable, which is
// how stores made directly through Bytes() reach it. The tracker never
// reads memory another goroutine may be writing, so concurrent goroutines
// are modelled exactly; a crash point stops them all (their next store,
// flush or fence waits), so the hook sees a consistent cut.
type Tracker struct {
	mu      sync.Mutex
	work    []byte
	durable []byte
	lines   map[int]*trackedLine
	byG     map[uint64]map[int]struct{} // lines each goroutine flushed since its last fence
	seq     uint64
	points  int
	fences  int // fence and msync points
	onPoint func(CrashPoint)
	onFence func(fence int)
	inHook  bool
	hookG   atomic.Uint64 // the goroutine running the hook (it holds mu)

	// msyncFault, when set, decides the outcome of each msync: an error
	// means nothing in that range was written back.
	msyncFault func(off, n int) error
	// wbErr is a write-back error waiting for the next msync to report it
	// (the kernel's errseq: whoever checks first gets it).
	wbErr error

	asMedium *trackedMedium
	// perGoroutine models each goroutine's fences separately; otherwise a
	// fence retires every flush before it (exact for one goroutine).
	perGoroutine atomic.Bool
}

type version struct{ v, seq uint64 }

type snapshot struct {
	b   [TrackLine]byte
	seq uint64
}

type trackedLine struct {
	versions [TrackLine / 8][]version
	pending  map[uint64]*snapshot // goroutine -> its newest unfenced flush of the line
	durSeq   uint64               // the seq of the content durable holds
	// lost: a background write-back of this line failed, so the kernel
	// considers the page clean and msync will not write it again until
	// it is stored to anew.
	lost bool
}

var (
	_ hardware      = (*Tracker)(nil)
	_ Medium        = (*Tracker)(nil)
	_ StoreObserver = (*Tracker)(nil)
)

// NewTracker returns a tracker whose working and durable images both
// start as a copy of image (len(image) must be a multiple of 64).
func NewTracker(image []byte) *Tracker {
	t := &Tracker{
		work:    alignedBytes(len(image)),
		durable: make([]byte, len(image)),
		lines:   make(map[int]*trackedLine),
		byG:     make(map[uint64]map[int]struct{}),
	}
	t.work = t.work[:len(image)]
	copy(t.work, image)
	copy(t.durable, image)
	return t
}

// CrashPoint is a moment at which power may fail: after a store, or
// before a cache-line flush, a fence or an msync takes effect.
type CrashPoint struct {
	// N counts the tracker's crash points from 1.
	N int
	// Kind is "store", "flush", "fence" or "msync".
	Kind string
	t    *Tracker
}

// Image returns what the medium could hold if power failed at this
// point, drawing the fate of each line that is not durable from rng. It
// may only be called from the OnCrashPoint hook.
func (p CrashPoint) Image(rng *rand.Rand) []byte { return p.t.crashImageLocked(rng) }

// OnCrashPoint sets fn to be called at every crash point, before the
// fence or msync takes effect. fn runs on the goroutine that reached the
// point while every other goroutine using the tracker waits; it must not
// use the region whose medium this is.
func (t *Tracker) OnCrashPoint(fn func(CrashPoint)) {
	t.mu.Lock()
	t.onPoint = fn
	t.mu.Unlock()
}

// OnFence sets fn to be called at every fence and msync, before it takes
// effect, with the number of fences and msyncs so far: the moment to take
// crash images with CrashImage (from fn, on the same goroutine). It is
// OnCrashPoint restricted to fences, kept for callers written before
// crash points existed.
func (t *Tracker) OnFence(fn func(fence int)) {
	t.mu.Lock()
	t.onFence = fn
	t.mu.Unlock()
}

// Points counts the crash points so far.
func (t *Tracker) Points() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.points
}

// Fences counts the fences and msyncs so far.
func (t *Tracker) Fences() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.fences
}

// The Tracker itself is a Medium: one that persists like a device with
// CLWB, through the production flush code (Medium(InstrCLWB) without the
// choice of instruction).

// Flush implements Medium.
func (t *Tracker) Flush(off, n int) error { return t.self().Flush(off, n) }

// Fence implements Medium.
func (t *Tracker) Fence() error { return t.self().Fence() }

// Info implements Medium.
func (t *Tracker) Info() MediumInfo { return t.self().Info() }

// Close implements Medium.
func (t *Tracker) Close() error { return nil }

func (t *Tracker) self() *trackedMedium {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.asMedium == nil {
		t.asMedium = t.Medium(InstrCLWB).(*trackedMedium)
	}
	return t.asMedium
}

// Bytes is the working image (what a region on the tracker sees).
func (t *Tracker) Bytes() []byte { return t.work }

// InjectMsyncFault makes every later msync ask fn first: an error fails
// that msync and writes nothing back. nil removes the fault.
func (t *Tracker) InjectMsyncFault(fn func(off, n int) error) {
	t.mu.Lock()
	t.msyncFault = fn
	t.mu.Unlock()
}

// FailWriteback simulates the kernel failing a background write-back of
// [off, off+n): the pages' content since their last durable point is
// lost, they count as clean (an msync does not write them again until
// they are stored to), and the next msync of any range reports err.
func (t *Tracker) FailWriteback(off, n int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for l := off / TrackLine; l*TrackLine < off+n; l++ {
		t.line(l).lost = true
	}
	t.wbErr = err
}

// Medium returns a medium on the tracker's working image that persists
// with instruction i through the production flush code: a cache-flush
// instruction (the lines it flushes, SFENCE) or InstrMsync (page ranges).
func (t *Tracker) Medium(i Instruction) Medium {
	info := MediumInfo{Mode: ModeDevDAX, Domain: DomainMemoryController, Instruction: i, Path: "(tracker)"}
	if i == InstrMsync {
		info.Mode, info.Domain = ModeFile, DomainStorage
	}
	return &trackedMedium{mapping: mapping{buf: t.work, info: info, hw: t}, t: t}
}

type trackedMedium struct {
	mapping
	t *Tracker
}

var (
	_ Medium        = (*trackedMedium)(nil)
	_ StoreObserver = (*trackedMedium)(nil)
)

func (m *trackedMedium) Stored(off, n int) { m.t.Stored(off, n) }

func (m *trackedMedium) Close() error { return nil }

func (t *Tracker) loadWork(off int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.work[off])))
}

func (t *Tracker) line(l int) *trackedLine {
	tl := t.lines[l]
	if tl == nil {
		tl = &trackedLine{}
		t.lines[l] = tl
	}
	return tl
}

// Stored implements StoreObserver: it remembers the new value of every
// word in [off, off+n). The storing goroutine calls it after its store.
func (t *Tracker) Stored(off, n int) {
	if n <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for w := off &^ 7; w < off+n && w+8 <= len(t.work); w += 8 {
		tl := t.line(w / TrackLine)
		tl.lost = false
		i := (w % TrackLine) / 8
		v := t.loadWork(w)
		vs := tl.versions[i]
		if len(vs) > 0 && vs[len(vs)-1].v == v {
			continue
		}
		if len(vs) == maxVersions {
			vs = slices.Delete(vs, 0, 1)
		}
		t.seq++
		tl.versions[i] = append(vs, version{v, t.seq})
	}
	t.crashPoint("store")
}

// TrackGoroutines makes the model treat each goroutine as its own CPU
// thread: a fence retires only the flushes its goroutine issued, as SFENCE
// orders only its own CPU's flushes. Turn it on when several goroutines
// flush at once; it costs a stack walk per flush and fence. Off, a fence
// retires every flush issued before it, which is exact for one goroutine.
func (t *Tracker) TrackGoroutines(on bool) { t.perGoroutine.Store(on) }

// thread is who issued a flush or fence in the model.
func (t *Tracker) thread() uint64 {
	if t.perGoroutine.Load() {
		return goid()
	}
	return 0
}

// goid is the calling goroutine's id, which stands for "the CPU thread"
// in the fence model. Tests only: it parses runtime.Stack.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}

func (t *Tracker) offsetOf(p unsafe.Pointer) int {
	off := int(uintptr(p) - uintptr(unsafe.Pointer(&t.work[0])))
	if off < 0 || off > len(t.work) {
		panic(fmt.Sprintf("pmem: tracker: flush of address %p outside its %d bytes", p, len(t.work)))
	}
	return off
}

// current is line l's content as the program sees it: the durable bytes
// overlaid with the newest stored value of each word. It never reads the
// working image, which other goroutines may be writing.
func (t *Tracker) current(l int, tl *trackedLine) *snapshot {
	snap := &snapshot{}
	copy(snap.b[:], t.durable[l*TrackLine:])
	for w, vs := range tl.versions {
		if len(vs) > 0 {
			binary.LittleEndian.PutUint64(snap.b[8*w:], vs[len(vs)-1].v)
		}
	}
	t.seq++
	snap.seq = t.seq
	return snap
}

// flushLines implements hardware: each line's current content becomes the
// goroutine's pending write-back of it.
func (t *Tracker) flushLines(_ Instruction, base unsafe.Pointer, lines, stride uintptr) {
	g := t.thread()
	off := t.offsetOf(base)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.crashPoint("flush")
	end := min(off+int(lines*stride), len(t.work))
	for l := off / TrackLine; l*TrackLine < end; l++ {
		tl := t.lines[l]
		if tl == nil {
			continue // nothing stored since the line was durable
		}
		if tl.pending == nil {
			tl.pending = make(map[uint64]*snapshot)
		}
		tl.pending[g] = t.current(l, tl)
		set := t.byG[g]
		if set == nil {
			set = make(map[int]struct{})
			t.byG[g] = set
		}
		set[l] = struct{}{}
	}
}

// crashPoint calls the hooks; t.mu is held.
func (t *Tracker) crashPoint(kind string) {
	t.points++
	fence := kind == "fence" || kind == "msync"
	if fence {
		t.fences++
	}
	if t.inHook || (t.onPoint == nil && (t.onFence == nil || !fence)) {
		return
	}
	t.inHook = true
	t.hookG.Store(goid())
	if t.onPoint != nil {
		t.onPoint(CrashPoint{N: t.points, Kind: kind, t: t})
	}
	if t.onFence != nil && fence {
		t.onFence(t.fences)
	}
	t.inHook = false
	t.hookG.Store(0)
}

// sfence implements hardware: a crash point, then the goroutine's pending
// flushes become durable.
func (t *Tracker) sfence() {
	g := t.thread()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.crashPoint("fence")
	for l := range t.byG[g] {
		tl := t.lines[l]
		if tl == nil {
			continue
		}
		if snap := tl.pending[g]; snap != nil {
			delete(tl.pending, g)
			t.makeDurable(l, tl, snap)
		}
	}
	delete(t.byG, g)
}

// makeDurable records that line l holds snap's content on the medium.
func (t *Tracker) makeDurable(l int, tl *trackedLine, snap *snapshot) {
	if snap.seq > tl.durSeq {
		copy(t.durable[l*TrackLine:], snap.b[:])
		tl.durSeq = snap.seq
		for i := range tl.versions {
			vs := tl.versions[i]
			k := 0
			for k < len(vs) && vs[k].seq <= snap.seq {
				k++
			}
			tl.versions[i] = vs[k:]
		}
		for g, p := range tl.pending {
			if p.seq <= tl.durSeq {
				delete(tl.pending, g) // superseded by newer durable content
			}
		}
	}
	if len(tl.pending) > 0 || tl.lost {
		return
	}
	for i := range tl.versions {
		if len(tl.versions[i]) > 0 {
			return
		}
	}
	delete(t.lines, l)
}

// msync implements hardware: a crash point, then the pages in b are
// written back (they are durable when it returns) unless a fault is
// injected.
func (t *Tracker) msync(b []byte) error {
	off := t.offsetOf(unsafe.Pointer(unsafe.SliceData(b)))
	t.mu.Lock()
	defer t.mu.Unlock()
	t.crashPoint("msync")
	if t.msyncFault != nil {
		if err := t.msyncFault(off, len(b)); err != nil {
			return err
		}
	}
	err := t.wbErr
	t.wbErr = nil
	// msync writes back whole pages.
	first := off &^ (pageSize - 1)
	end := int(alignUp(uint64(off+len(b)), uint64(pageSize)))
	for l := first / TrackLine; l*TrackLine < end && (l+1)*TrackLine <= len(t.work); l++ {
		tl := t.lines[l]
		if tl == nil || tl.lost {
			continue
		}
		t.makeDurable(l, tl, t.current(l, tl))
	}
	return err
}

// CrashImage returns what the medium could hold if power failed now,
// drawing the fate of each not-yet-durable line from rng. Inside an
// OnCrashPoint hook use CrashPoint.Image instead.
func (t *Tracker) CrashImage(rng *rand.Rand) []byte {
	if t.inHookHere() {
		return t.crashImageLocked(rng) // the hook's goroutine holds mu
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.crashImageLocked(rng)
}

// inHookHere reports whether the calling goroutine is running a hook.
// Only that goroutine can see inHook and hookG set, since it set them
// while holding mu and still holds it.
func (t *Tracker) inHookHere() bool {
	if !t.mu.TryLock() {
		g := t.hookG.Load()
		return g != 0 && g == goid()
	}
	t.mu.Unlock()
	return false
}

func (t *Tracker) crashImageLocked(rng *rand.Rand) []byte {
	img := make([]byte, len(t.durable))
	copy(img, t.durable)
	// Map order is random; sort so that a seed reproduces an image.
	ls := make([]int, 0, len(t.lines))
	for l := range t.lines {
		ls = append(ls, l)
	}
	slices.Sort(ls)
	for _, l := range ls {
		tl := t.lines[l]
		base := l * TrackLine
		gs := make([]uint64, 0, len(tl.pending))
		for g := range tl.pending {
			gs = append(gs, g)
		}
		slices.Sort(gs)
		switch rng.IntN(3) {
		case 0: // the line was never written back
		case 1: // written back with its newest content
			for w := range TrackLine / 8 {
				best, val := uint64(0), uint64(0)
				if vs := tl.versions[w]; len(vs) > 0 {
					best, val = vs[len(vs)-1].seq, vs[len(vs)-1].v
				}
				for _, g := range gs {
					if p := tl.pending[g]; p.seq > best {
						best, val = p.seq, binary.LittleEndian.Uint64(p.b[8*w:])
					}
				}
				if best > tl.durSeq {
					binary.LittleEndian.PutUint64(img[base+8*w:], val)
				}
			}
		case 2: // written back at different moments, word by word
			for w := range TrackLine / 8 {
				var cands []uint64
				for _, v := range tl.versions[w] {
					cands = append(cands, v.v)
				}
				for _, g := range gs {
					cands = append(cands, binary.LittleEndian.Uint64(tl.pending[g].b[8*w:]))
				}
				if choice := rng.IntN(len(cands) + 1); choice < len(cands) {
					binary.LittleEndian.PutUint64(img[base+8*w:], cands[choice])
				}
				// otherwise: the durable value stays
			}
		}
	}
	return img
}

// ErrTrackerEIO is the error injected msyncs report by default.
var ErrTrackerEIO = errors.New("input/output error (injected)")
