package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/octofs/octofs/pmem"
)

// This file is `octoctl bench pmem`: what it costs to make a store
// durable, per 64 B (one cache line, a metadata word) and per 4 KiB (a
// block), with each flush instruction this CPU has and with msync on a
// plain file, beside a plain store that is never flushed.

type benchPmemOptions struct {
	sizes    string
	duration time.Duration
	window   int
	dir      string
	asJSON   bool
}

func newBenchPmemCmd() *cobra.Command {
	o := &benchPmemOptions{}
	cmd := &cobra.Command{
		Use:   "pmem",
		Short: "Persist cost per 64 B and 4 KiB: CLWB, CLFLUSHOPT, CLFLUSH, msync, beside a plain store",
		Long: `Measures the cost of making freshly stored bytes durable: store the bytes,
flush their cache lines with each instruction this CPU offers and fence,
or msync the page of a plain file (what regions on non-DAX files do).
The baseline is the same store with no flush; each row shows its ratio to
it. The instruction marked * is the one DAX regions use on this machine.

Without persistent memory, the flushes write back to DRAM: the figures
are the CPU-side cost, a lower bound for real pmem.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchPmem(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.sizes, "sizes", "64,4096", "comma-separated store sizes in bytes")
	f.DurationVar(&o.duration, "duration", 300*time.Millisecond, "measuring time per cell")
	f.IntVar(&o.window, "window", 8<<20, "bytes cycled through, so the flushed lines are not always the same")
	f.StringVar(&o.dir, "dir", os.TempDir(), "directory for the msync baseline's file (a plain file system)")
	f.BoolVar(&o.asJSON, "json", false, "print JSON")
	return cmd
}

// persistMethod makes buf[off:off+n] durable after it was stored.
type persistMethod struct {
	name     string
	persist  func(buf []byte, off, n int) error
	file     bool // runs on the msync file mapping
	baseline bool // the rows after it are compared with it
}

func runBenchPmem(w io.Writer, o *benchPmemOptions) error {
	sizes, err := parseSizes(o.sizes)
	if err != nil {
		return err
	}
	if o.window < 1<<16 {
		return fmt.Errorf("--window %d is too small (minimum 64KiB)", o.window)
	}
	anon, err := pmem.NewAnonMedium(o.window)
	if err != nil {
		return err
	}
	defer anon.Close()
	file, cleanup, err := msyncFile(o.dir, o.window)
	if err != nil {
		return err
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
	methods = append(methods,
		persistMethod{name: "store only, file mapping (baseline)", file: true, baseline: true, persist: storeOnly},
		persistMethod{name: "store + msync (plain file)", file: true, persist: func(_ []byte, off, n int) error {
			file.Flush(off, n)
			return file.Fence()
		}},
	)

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
				return fmt.Errorf("%s: %w", m.name, err)
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
	t.note("CPU flush instructions: %s; cache line %d B", strings.Join(avail, ", "), pmem.CacheLineSize())
	t.note("* = instruction in use for DAX regions on this machine: %s", best)
	t.note("file regions persist with msync (%s); file baseline rows use the same mapping without msync", file.Info().Domain)
	t.note("no persistent memory here: flushes write back to DRAM, so this is the CPU-side cost")
	return t.print(w, o.asJSON)
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad size %q in --sizes", f)
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
