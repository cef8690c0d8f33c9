package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/alloc"
)

// This file is `octoctl bench pmem`: what it costs to make a store
// durable, per 64 B (one cache line, a metadata word) and per 4 KiB (a
// block), with each flush instruction this CPU has and with msync on a
// plain file, beside a plain store that is never flushed; what the block
// allocator costs, beside the bit-by-bit scan it replaced; and how
// transaction commits scale with concurrent committers.

type benchPmemOptions struct {
	sizes    string
	duration time.Duration
	window   int
	dir      string
	blocks   string
	workers  string
	only     string
	asJSON   bool
}

func newBenchPmemCmd() *cobra.Command {
	o := &benchPmemOptions{}
	cmd := &cobra.Command{
		Use:   "pmem",
		Short: "Persist cost (CLWB, CLFLUSHOPT, CLFLUSH, msync), allocator cost (summary tree vs scan), commit scaling",
		Long: `Three tables, each with its baseline measured in the same run:

persist: the cost of making freshly stored bytes durable: store the bytes,
flush their cache lines with each instruction this CPU offers and fence, or
msync the page of a plain file (what regions on non-DAX files do). The
baseline is the same store with no flush. The instruction marked * is the
one DAX regions use on this machine. Without persistent memory the flushes
write back to DRAM: the figures are the CPU-side cost, a lower bound for
real pmem. The msync row needs --dir on a disk file system; on tmpfs there
is nothing to write back and the row is left out, saying so.

alloc: finding and taking a run of 8 blocks in an index of 2^20 and 2^28
blocks (4 GiB and 1 TiB of 4 KiB blocks), empty (sequential allocation)
and 50% fragmented (every other block used, one free run somewhere), with
the summary tree regions use and with the bit-by-bit scan of format
version 1 as the baseline.

commit: transactions per second with 1, 2, 4 and 8 goroutines committing
on different records at once, on DRAM flushed with the CPU's instruction
and on a plain file (msync), beside one goroutine.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchPmem(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.sizes, "sizes", "64,4096", "persist: comma-separated store sizes in bytes")
	f.DurationVar(&o.duration, "duration", 300*time.Millisecond, "measuring time per cell")
	f.IntVar(&o.window, "window", 8<<20, "persist: bytes cycled through, so the flushed lines are not always the same")
	f.StringVar(&o.dir, "dir", os.TempDir(), "directory for the msync rows' files (a disk file system)")
	f.StringVar(&o.blocks, "blocks", "1048576,268435456", "alloc: comma-separated index sizes in blocks")
	f.StringVar(&o.workers, "workers", "1,2,4,8", "commit: comma-separated numbers of committing goroutines")
	f.StringVar(&o.only, "only", "", "run only these tables (comma-separated: persist, alloc, commit)")
	f.BoolVar(&o.asJSON, "json", false, "print JSON")
	return cmd
}

func runBenchPmem(ctx context.Context, w io.Writer, o *benchPmemOptions) error {
	tables := []struct {
		name string
		run  func(context.Context, *benchPmemOptions) (*benchTable, error)
	}{{"persist", benchPersist}, {"alloc", benchAlloc}, {"commit", benchCommit}}
	for _, t := range tables {
		if o.only != "" && !strings.Contains(","+o.only+",", ","+t.name+",") {
			continue
		}
		tab, err := t.run(ctx, o)
		if err != nil {
			return fmt.Errorf("bench pmem %s: %w", t.name, err)
		}
		if err := tab.print(w, o.asJSON); err != nil {
			return err
		}
	}
	return nil
}

// persistMethod makes buf[off:off+n] durable after it was stored.
type persistMethod struct {
	name     string
	persist  func(buf []byte, off, n int) error
	file     bool // runs on the msync file mapping
	baseline bool // the rows after it are compared with it
}

func benchPersist(_ context.Context, o *benchPmemOptions) (*benchTable, error) {
	sizes, err := parseSizes(o.sizes)
	if err != nil {
		return nil, err
	}
	if o.window < 1<<16 {
		return nil, fmt.Errorf("--window %d is too small (minimum 64KiB)", o.window)
	}
	anon, err := pmem.NewAnonMedium(o.window)
	if err != nil {
		return nil, err
	}
	defer anon.Close()
	file, cleanup, err := msyncFile(o.dir, o.window)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	best := pmem.BestInstruction()
	storeOnly := func([]byte, int, int) error { return nil }
	methods := []persistMethod{{name: "store only (baseline)", baseline: true, persist: storeOnly}}
	for _, i := range pmem.CPUInstructions() {
		name := "store + " + i.String()
		if i == best {
			name += " *"
		}
		methods = append(methods, persistMethod{name: name, persist: func(b []byte, off, n int) error {
			return pmem.FlushLines(i, b[off:off+n])
		}})
	}
	fileInfo := file.Info()
	msyncs := fileInfo.Instruction == pmem.InstrMsync
	if msyncs {
		methods = append(methods,
			persistMethod{name: "store only, file mapping (baseline)", file: true, baseline: true, persist: storeOnly},
			persistMethod{name: "store + msync (file on " + fileInfo.FileSystem + ")", file: true, persist: func(_ []byte, off, n int) error {
				if err := file.Flush(off, n); err != nil {
					return err
				}
				return file.Fence()
			}},
		)
	}

	t := &benchTable{
		Title:   "octoctl bench pmem: persist cost of freshly stored bytes",
		Columns: []string{"method", "size", "ns/op", "MB/s", "vs baseline"},
	}
	for _, size := range sizes {
		var base float64
		for _, m := range methods {
			buf := anon.Bytes()
			if m.file {
				buf = file.Bytes()
			}
			ns, err := measurePersist(buf, size, o.duration, m.persist)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			if m.baseline {
				base = ns
			}
			mbs := float64(size) / ns * 1e3
			prec := 0
			if mbs < 10 {
				prec = 2
			}
			t.add(m.name, humanBytes(size), fmt.Sprintf("%.1f", ns), fmt.Sprintf("%.*f", prec, mbs), ratio(ns, base))
		}
	}
	avail := make([]string, 0, 3)
	for _, i := range pmem.CPUInstructions() {
		avail = append(avail, i.String())
	}
	if len(avail) == 0 {
		t.note("no cache-flush instruction is wired up for %s: regions on DAX file systems persist with msync, device DAX is refused", runtime.GOARCH)
	} else {
		t.note("CPU flush instructions: %s; cache line %d B", strings.Join(avail, ", "), pmem.CacheLineSize())
		t.note("* = instruction in use for DAX regions on this machine: %s", best)
	}
	if msyncs {
		t.note("file regions persist with msync (%s); the file baseline uses the same mapping without msync", fileInfo.Domain)
	} else {
		t.note("no msync row: --dir %s is on %s, where a region is volatile and msync has nothing to write back; give --dir on a disk file system to measure it", o.dir, fileInfo.FileSystem)
	}
	t.note("no persistent memory here: flushes write back to DRAM, so this is the CPU-side cost")
	return t, nil
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad number %q in %q", f, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// msyncFile maps a plain file of size bytes as a region does.
func msyncFile(dir string, size int) (*pmem.FileMedium, func(), error) {
	path := filepath.Join(dir, fmt.Sprintf("octoctl-bench-pmem-%d", os.Getpid()))
	m, err := pmem.OpenFileMedium(path, pmem.FileOptions{Create: true, Size: int64(size)})
	if err != nil {
		return nil, nil, err
	}
	return m, func() { m.Close(); os.Remove(path) }, nil
}

// measurePersist stores size bytes at successive offsets of buf and
// persists each with persist, for about d; it returns ns per operation.
func measurePersist(buf []byte, size int, d time.Duration, persist func([]byte, int, int) error) (float64, error) {
	if size > len(buf) {
		return 0, fmt.Errorf("size %d exceeds the %d-byte window", size, len(buf))
	}
	slots := len(buf) / size
	pattern := make([]byte, size)
	op := func(i int) error {
		off := (i % slots) * size
		pattern[0] = byte(i)
		copy(buf[off:off+size], pattern)
		return persist(buf, off, size)
	}
	// Warm up: fault pages in and settle the clocks, for at most d/4.
	warm := time.Now()
	for i := 0; i < min(slots, 4096) && time.Since(warm) < d/4; i++ {
		if err := op(i); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	n := 0
	for {
		for range 64 {
			if err := op(n); err != nil {
				return 0, err
			}
			n++
		}
		if el := time.Since(start); el >= d {
			return float64(el.Nanoseconds()) / float64(n), nil
		}
	}
}

// allocIndex is what both allocator indexes offer.
type allocIndex interface {
	Load(words []uint64)
	Alloc(count, hint uint64) (uint64, bool)
	Clear(start, count uint64)
}

const allocRun = 8 // blocks per allocation

func benchAlloc(_ context.Context, o *benchPmemOptions) (*benchTable, error) {
	sizes, err := parseSizes(o.blocks)
	if err != nil {
		return nil, err
	}
	t := &benchTable{
		Title:   "octoctl bench pmem: block allocation (8-block run) by index and fragmentation",
		Columns: []string{"index", "blocks", "pattern", "allocs", "ns/alloc", "vs scan"},
	}
	for _, size := range sizes {
		n := uint64(size)
		if n < 4096 {
			return nil, fmt.Errorf("--blocks %d: at least 4096", n)
		}
		for _, pattern := range []string{"sequential", "50% fragmented"} {
			words := allocPattern(n, pattern)
			var base float64
			for _, ix := range []struct {
				name string
				idx  allocIndex
			}{{"scan (format v1)", alloc.NewScan(n)}, {"summary tree", alloc.NewTree(n)}} {
				ix.idx.Load(words)
				ops, ns, err := measureAlloc(ix.idx, n, words, pattern, o.duration)
				if err != nil {
					return nil, fmt.Errorf("%s, %d blocks, %s: %w", ix.name, n, pattern, err)
				}
				if base == 0 {
					base = ns
				}
				t.add(ix.name, strconv.FormatUint(n, 10), pattern, strconv.Itoa(ops), fmt.Sprintf("%.0f", ns), fmt.Sprintf("%.3gx", ns/base))
			}
		}
	}
	t.note("2^20 blocks = 4 GiB and 2^28 = 1 TiB of 4 KiB blocks. sequential: an empty index, each allocation after the last (reset when full, untimed)")
	t.note("50%% fragmented: every other block used and one free run of 64 at a random place; each allocation starts at a random hint and is freed again")
	t.note("scan is the allocator of format version 1 (bit by bit from the hint); regions now use the summary tree (pmem/alloc)")
	return t, nil
}

// allocPattern builds the bitmap an index starts from.
func allocPattern(n uint64, pattern string) []uint64 {
	words := make([]uint64, (n+63)/64)
	if pattern == "sequential" {
		return words
	}
	for i := range words {
		words[i] = 0x5555555555555555
	}
	rng := rand.New(rand.NewPCG(n, 1))
	at := rng.Uint64N(n - 64)
	for b := at; b < at+64; b++ {
		words[b/64] &^= 1 << (b % 64)
	}
	return words
}

// measureAlloc runs allocations for about d (at least three) and returns
// how many it timed and ns per allocation.
func measureAlloc(idx allocIndex, n uint64, words []uint64, pattern string, d time.Duration) (int, float64, error) {
	rng := rand.New(rand.NewPCG(7, n))
	var total time.Duration
	ops, hint := 0, uint64(0)
	for batch := 1; total < d || ops < 3; batch = min(2*batch, 4096) {
		full := false
		start := time.Now()
		for range batch {
			if pattern == "sequential" {
				s, ok := idx.Alloc(allocRun, hint)
				if !ok {
					full = true
					break
				}
				hint = s + allocRun
			} else {
				s, ok := idx.Alloc(allocRun, rng.Uint64N(n))
				if !ok {
					return 0, 0, fmt.Errorf("no free run found")
				}
				idx.Clear(s, allocRun)
			}
			ops++
		}
		total += time.Since(start)
		if full {
			idx.Load(words)
			hint = 0
		}
	}
	return ops, float64(total.Nanoseconds()) / float64(ops), nil
}

func benchCommit(ctx context.Context, o *benchPmemOptions) (*benchTable, error) {
	counts, err := parseSizes(o.workers)
	if err != nil {
		return nil, err
	}
	t := &benchTable{
		Title:   "octoctl bench pmem: transaction commits by concurrent committers",
		Columns: []string{"medium", "goroutines", "commits", "commits/s", "µs/commit", "vs 1 goroutine"},
	}
	type medium struct {
		name string
		m    pmem.Medium
	}
	var media []medium
	const size = 64 << 20
	if best := pmem.BestInstruction(); best.IsCacheFlush() {
		m, err := pmem.NewDRAMMedium(size, best)
		if err != nil {
			return nil, err
		}
		defer m.Close()
		media = append(media, medium{"DRAM, " + best.String(), m})
	}
	file, cleanup, err := msyncFile(o.dir, size)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if file.Info().Instruction == pmem.InstrMsync {
		media = append(media, medium{"file on " + file.Info().FileSystem + ", msync", file})
	} else {
		t.note("no msync rows: --dir %s is on %s", o.dir, file.Info().FileSystem)
	}
	maxW := 0
	for _, c := range counts {
		maxW = max(maxW, c)
	}
	for _, md := range media {
		r, err := pmem.Format(md.m, pmem.FormatOptions{LogSlots: uint32(max(16, maxW))}, pmem.Options{})
		if err != nil {
			return nil, err
		}
		ids := make([]pmem.RecordID, maxW)
		for w := range ids {
			tx, err := r.Begin(ctx)
			if err != nil {
				return nil, err
			}
			if ids[w], err = tx.AllocRecord(1); err != nil {
				tx.Abort()
				return nil, err
			}
			if err := tx.Commit(); err != nil {
				return nil, err
			}
		}
		var base float64
		for _, workers := range counts {
			commits, perSec, err := measureCommits(ctx, r, ids[:workers], o.duration)
			if err != nil {
				return nil, err
			}
			if base == 0 {
				base = perSec
			}
			t.add(md.name, strconv.Itoa(workers), strconv.Itoa(commits), fmt.Sprintf("%.0f", perSec),
				fmt.Sprintf("%.1f", float64(workers)*1e6/perSec), ratio(perSec, base))
		}
	}
	t.note("each transaction logs a 128-byte write into the goroutine's own record and one root word; commit is 4 fences plus a flush per touched line")
	t.note("GOMAXPROCS=%d: with more goroutines than CPUs, DRAM commits (CPU-bound) cannot scale further; msync calls are serialised on purpose (see docs/pmem.md)", runtime.GOMAXPROCS(0))
	return t, nil
}

// measureCommits has each goroutine commit transactions on its own
// record for about d; it returns the commits and the commits per second.
func measureCommits(ctx context.Context, r *pmem.Region, ids []pmem.RecordID, d time.Duration) (int, float64, error) {
	var wg sync.WaitGroup
	counts := make([]int, len(ids))
	errs := make([]error, len(ids))
	start := time.Now()
	deadline := start.Add(d)
	for w, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := r.Record(id)
			if err != nil {
				errs[w] = err
				return
			}
			p := make([]byte, 128)
			for i := 0; time.Now().Before(deadline); i++ {
				tx, err := r.Begin(ctx)
				if err != nil {
					errs[w] = err
					return
				}
				p[0] = byte(i)
				err = tx.Write(rec.PayloadOff, p)
				if err == nil {
					err = tx.SetRoot(w, uint64(i))
				}
				if err == nil {
					err = tx.Commit()
				} else {
					tx.Abort()
				}
				if err != nil {
					errs[w] = err
					return
				}
				counts[w]++
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	total := 0
	for w := range ids {
		if errs[w] != nil {
			return 0, 0, errs[w]
		}
		total += counts[w]
	}
	return total, float64(total) / el.Seconds(), nil
}
