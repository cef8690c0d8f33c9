package pmem

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// TrackLine is the cache-line size the power-loss model uses.
const TrackLine = 64

// maxVersions bounds the remembered intermediate values of one word; the
// newest are kept.
const maxVersions = 8

// Tracker is a Medium that simulates power loss. It keeps two images: the
// working bytes the program sees, and the durable bytes that are certain
// to survive. It records every store per cache line (through
// StoreObserver) and every flush; a Fence makes the lines flushed before
// it durable. CrashImage then builds what the medium could hold if power
// failed at that moment: every durable line, plus, for each line with
// stores that were not yet flushed and fenced, either its durable
// content, its newest content, or a word-by-word mix of any values the
// words held since they were last durable. Aligned 8-byte words are never
// torn.
//
// Stores made directly through Bytes() are not observed; a Flush of
// their range still snapshots them, so they are modelled once flushed.
// The model treats a Fence as global (all flushes before it retire), which
// is exact for a single goroutine; crash tests drive one goroutine.
type Tracker struct {
	mu      sync.Mutex
	work    []byte
	durable []byte
	lines   map[int]*trackedLine
	fences  int
	onFence func(fence int)
}

type trackedLine struct {
	pending  *[TrackLine]byte // content at the last Flush, nil if none since the last Fence
	versions [TrackLine / 8][]uint64
	// flushed[w] is len(versions[w]) at the last Flush: at the Fence those
	// values are superseded by pending.
	flushed [TrackLine / 8]int
}

var (
	_ Medium        = (*Tracker)(nil)
	_ StoreObserver = (*Tracker)(nil)
)

// NewTracker returns a tracking medium whose working and durable images
// both start as a copy of image (len(image) must be a multiple of 64).
func NewTracker(image []byte) *Tracker {
	t := &Tracker{
		work:    alignedBytes(len(image)),
		durable: make([]byte, len(image)),
		lines:   make(map[int]*trackedLine),
	}
	t.work = t.work[:len(image)]
	copy(t.work, image)
	copy(t.durable, image)
	return t
}

// OnFence sets fn to be called at the start of every Fence, before the
// flushes it orders retire: the moment to take crash images. fn runs on
// the goroutine calling Fence, without the tracker's lock held; it must
// not call into the Region that issued the fence.
func (t *Tracker) OnFence(fn func(fence int)) {
	t.mu.Lock()
	t.onFence = fn
	t.mu.Unlock()
}

// Fences counts the fences so far.
func (t *Tracker) Fences() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.fences
}

// Bytes implements Medium.
func (t *Tracker) Bytes() []byte { return t.work }

// Info implements Medium.
func (t *Tracker) Info() MediumInfo {
	return MediumInfo{Mode: ModeVolatile, Domain: DomainMemoryController, Instruction: InstrNone, Path: "(tracker)"}
}

// Close implements Medium.
func (t *Tracker) Close() error { return nil }

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
// word in [off, off+n).
func (t *Tracker) Stored(off, n int) {
	if n <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for w := off &^ 7; w < off+n && w+8 <= len(t.work); w += 8 {
		tl := t.line(w / TrackLine)
		i := (w % TrackLine) / 8
		v := t.loadWork(w)
		vs := tl.versions[i]
		if len(vs) > 0 && vs[len(vs)-1] == v {
			continue
		}
		if len(vs) == maxVersions {
			vs = slices.Delete(vs, 0, 1)
			tl.flushed[i] = max(0, tl.flushed[i]-1)
		}
		tl.versions[i] = append(vs, v)
	}
}

// Flush implements Medium: it snapshots the lines covering the range.
func (t *Tracker) Flush(off, n int) {
	if n <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for l := off / TrackLine; l*TrackLine < off+n && (l+1)*TrackLine <= len(t.work); l++ {
		base := l * TrackLine
		cur := t.snapshot(base)
		tl := t.lines[l]
		if tl == nil {
			if *cur == *(*[TrackLine]byte)(t.durable[base:]) {
				continue // nothing new to make durable
			}
			tl = t.line(l)
		}
		tl.pending = cur
		for i := range tl.versions {
			tl.flushed[i] = len(tl.versions[i])
		}
	}
}

func (t *Tracker) snapshot(base int) *[TrackLine]byte {
	var b [TrackLine]byte
	for i := 0; i < TrackLine; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], t.loadWork(base+i))
	}
	return &b
}

// Fence implements Medium: it calls the OnFence hook, then makes every
// line flushed so far durable.
func (t *Tracker) Fence() error {
	t.mu.Lock()
	t.fences++
	n, fn := t.fences, t.onFence
	t.mu.Unlock()
	if fn != nil {
		fn(n)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for l, tl := range t.lines {
		if tl.pending == nil {
			continue
		}
		copy(t.durable[l*TrackLine:], tl.pending[:])
		tl.pending = nil
		clean := true
		for i := range tl.versions {
			tl.versions[i] = tl.versions[i][tl.flushed[i]:]
			tl.flushed[i] = 0
			if len(tl.versions[i]) > 0 {
				clean = false
			}
		}
		if clean {
			delete(t.lines, l)
		}
	}
	return nil
}

// CrashImage returns what the medium could hold if power failed now,
// drawing the fate of each not-yet-durable line from rng.
func (t *Tracker) CrashImage(rng *rand.Rand) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
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
		switch rng.IntN(3) {
		case 0: // the line was never written back
		case 1: // written back with its newest content
			for i := 0; i < TrackLine; i += 8 {
				binary.LittleEndian.PutUint64(img[base+i:], t.loadWork(base+i))
			}
		case 2: // written back at different moments, word by word
			for w := range TrackLine / 8 {
				cands := tl.versions[w]
				choice := rng.IntN(len(cands) + 2)
				switch {
				case choice < len(cands):
					binary.LittleEndian.PutUint64(img[base+8*w:], cands[choice])
				case choice == len(cands) && tl.pending != nil:
					copy(img[base+8*w:base+8*w+8], tl.pending[8*w:])
				}
				// otherwise: the durable value stays
			}
		}
	}
	return img
}
