package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/rdma"
)

// The measurements of `octoctl bench data`.

const (
	benchDataChunk = wire.ChunkSize
	benchDataMiB   = 1 << 20
)

// benchDataRound is one round's rates in MiB/s.
type benchDataRound struct {
	newFile, rawFresh float64
	over, rawOver     float64
	read, rawRead     float64
	hotWrite, hotRead float64
	sync              time.Duration
}

func benchData(ctx context.Context, c *client.Client, raw *rawData, p *benchDataPlan, where string) ([]*benchTable, error) {
	fsys := c.FS(client.RootCred).WithContext(ctx)
	dir := fmt.Sprintf("octoctl-bench-data-%x", dataplane.RandomID())
	if err := fsys.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	defer fsys.RemoveAll(dir)
	cbuf, err := c.AllocBuffer(benchDataMiB)
	if err != nil {
		return nil, err
	}
	defer cbuf.Free()
	rbuf, err := raw.e.AllocBuffer(benchDataMiB)
	if err != nil {
		return nil, err
	}
	defer rbuf.Free()
	for i := range cbuf.Bytes() {
		cbuf.Bytes()[i] = byte(i * 7)
	}
	copy(rbuf.Bytes(), cbuf.Bytes())

	pinned, err := benchDataPinAll(ctx, c, fsys, dir+"/warm-up")
	if err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}

	var rounds []benchDataRound
	var last *client.FSFile
	var lastBase *dpclient.Baseline
	defer func() {
		if last != nil {
			last.Close()
		}
		if lastBase != nil {
			lastBase.Close()
		}
	}()
	for round := range p.rounds {
		r, f, base, err := benchDataOneRound(ctx, fsys, raw, p, fmt.Sprintf("%s/%d", dir, round), cbuf.Bytes(), rbuf.Bytes())
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", round, err)
		}
		rounds = append(rounds, r)
		if last != nil {
			last.Close()
			lastBase.Close()
		}
		last, lastBase = f, base
	}
	bw := benchDataBandwidthTable(rounds, p, where)
	bw.note("before the rounds, one block of a warm-up file in each of the %d partitions (%v): a partition's first data takes a raft commit (its pin), once in the cluster's life, which the rounds would otherwise pay", c.Map().NumPartitions(), pinned.Round(time.Millisecond))
	lat, err := benchDataLatency(ctx, c, last, lastBase, p, cbuf.Bytes()[:4096], rbuf.Bytes()[:4096])
	if err != nil {
		return nil, err
	}
	return []*benchTable{bw, lat}, nil
}

// benchDataPinAll allocates one block in a chunk of name on every
// partition, so that each partition's first use (a raft commit that pins
// it to its node) happens before the measurements, and removes the file.
func benchDataPinAll(ctx context.Context, c *client.Client, fsys *client.FS, name string) (time.Duration, error) {
	start := time.Now()
	f, err := fsys.Create(name)
	if err != nil {
		return 0, err
	}
	m := c.Map()
	seen := make(map[uint32]bool)
	for chunk := uint64(0); len(seen) < int(m.NumPartitions()) && chunk < 64*uint64(m.NumPartitions()); chunk++ {
		part := m.ChunkPartition(f.Handle().Ino(), chunk)
		if seen[part] {
			continue
		}
		seen[part] = true
		if err := f.Handle().Allocate(ctx, client.FallocKeepSize, chunk*benchDataChunk, 4096); err != nil {
			f.Close()
			return 0, err
		}
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return time.Since(start), fsys.Remove(name)
}

// benchDataOneRound writes a new file beside a fallocated one written raw,
// syncs it, overwrites and reads it beside raw operations on its blocks,
// and returns the rates with the file (open) and its baseline.
func benchDataOneRound(ctx context.Context, fsys *client.FS, raw *rawData, p *benchDataPlan, name string, cb, rb []byte) (benchDataRound, *client.FSFile, *dpclient.Baseline, error) {
	var r benchDataRound
	rawFile, err := fsys.Create(name + ".raw")
	if err != nil {
		return r, nil, nil, err
	}
	defer rawFile.Close()
	if err := rawFile.Handle().Allocate(ctx, client.FallocKeepSize, 0, p.size); err != nil {
		return r, nil, nil, fmt.Errorf("fallocate the baseline's file: %w", err)
	}
	fresh, err := raw.e.NewBaseline(ctx, rawFile.Handle().Ino(), p.size)
	if err != nil {
		return r, nil, nil, err
	}
	defer fresh.Close()
	f, err := fsys.Create(name)
	if err != nil {
		return r, nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	rawOp := func(b *dpclient.Baseline, op rdma.Opcode) func(off uint64) error {
		return func(off uint64) error { return b.Do(ctx, op, rb, off) }
	}
	write := func(off uint64) error {
		_, err := f.WriteAt(cb, int64(off))
		return err
	}
	read := func(off uint64) error {
		_, err := f.ReadAt(cb, int64(off))
		return err
	}
	if r.rawFresh, r.newFile, err = benchDataPair(p.size, rawOp(fresh, rdma.OpWrite), write); err != nil {
		return r, nil, nil, err
	}
	start := time.Now()
	if err := f.Sync(); err != nil {
		return r, nil, nil, err
	}
	r.sync = time.Since(start)
	same, err := raw.e.NewBaseline(ctx, f.Handle().Ino(), p.size)
	if err != nil {
		return r, nil, nil, err
	}
	defer func() {
		if !ok {
			same.Close()
		}
	}()
	if r.rawOver, r.over, err = benchDataPair(p.size, rawOp(same, rdma.OpWrite), write); err != nil {
		return r, nil, nil, err
	}
	if r.rawRead, r.read, err = benchDataPair(p.size, rawOp(same, rdma.OpRead), read); err != nil {
		return r, nil, nil, err
	}
	hot := func(op rdma.Opcode) func(uint64) error {
		return func(uint64) error { return same.Do(ctx, op, rb, 0) }
	}
	if r.hotWrite, r.hotRead, err = benchDataPair(p.size, hot(rdma.OpWrite), hot(rdma.OpRead)); err != nil {
		return r, nil, nil, err
	}
	if err := f.Sync(); err != nil {
		return r, nil, nil, err
	}
	ok = true
	return r, f, same, nil
}

// benchDataPair runs a and b over [0, size) one MiB at a time, one chunk
// (4 MiB) of a, then one of b, the order alternating, and returns their
// rates in MiB/s from the median time of a chunk: the interleaving exposes
// both alike to whatever else the machine does, the median keeps another
// program's stall out, and a chunk holds the allocation a sequential
// writer makes about once per chunk.
func benchDataPair(size uint64, a, b func(off uint64) error) (float64, float64, error) {
	var ta, tb []time.Duration
	run := func(f func(off uint64) error, at uint64) (time.Duration, error) {
		start := time.Now()
		for off := at; off < at+benchDataChunk; off += benchDataMiB {
			if err := f(off); err != nil {
				return 0, err
			}
		}
		return time.Since(start), nil
	}
	for i, at := 0, uint64(0); at < size; i, at = i+1, at+benchDataChunk {
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		d1, err := run(first, at)
		if err != nil {
			return 0, 0, err
		}
		d2, err := run(second, at)
		if err != nil {
			return 0, 0, err
		}
		if i%2 == 1 {
			d1, d2 = d2, d1
		}
		ta, tb = append(ta, d1), append(tb, d2)
	}
	rate := func(d []time.Duration) float64 {
		return float64(benchDataChunk) / benchDataMiB / benchDataMedian(d).Seconds()
	}
	return rate(ta), rate(tb), nil
}

func benchDataMedian(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// benchDataBandwidthTable summarises the rounds: medians, and the range
// of the per-round ratios.
func benchDataBandwidthTable(rounds []benchDataRound, p *benchDataPlan, where string) *benchTable {
	t := &benchTable{
		Title: fmt.Sprintf("bench data: 1 MiB sequential through the client library, %s of %s per round, median of %d rounds",
			humanBytes(int(p.size)), "files", len(rounds)),
		Columns: []string{"test", "octofs MiB/s", "baseline", "baseline MiB/s", "ratio", "ratio range", "target"},
	}
	med := func(f func(benchDataRound) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	row := func(name string, eng, rawf func(benchDataRound) float64, baseline, target string) {
		ratios := make([]float64, len(rounds))
		for i, r := range rounds {
			ratios[i] = eng(r) / rawf(r)
		}
		slices.Sort(ratios)
		t.add(name, figure(med(eng)), baseline, figure(med(rawf)), fmt.Sprintf("%.2fx", ratios[len(ratios)/2]),
			fmt.Sprintf("%.2f-%.2fx", ratios[0], ratios[len(ratios)-1]), target)
	}
	row("write, new file", func(r benchDataRound) float64 { return r.newFile }, func(r benchDataRound) float64 { return r.rawFresh },
		"raw WRITE, fresh blocks", ">=0.90x")
	row("write, overwrite", func(r benchDataRound) float64 { return r.over }, func(r benchDataRound) float64 { return r.rawOver },
		"raw WRITE, same blocks", ">=0.90x")
	row("read", func(r benchDataRound) float64 { return r.read }, func(r benchDataRound) float64 { return r.rawRead },
		"raw READ, same blocks", ">=0.90x")
	row("write, new file", func(r benchDataRound) float64 { return r.newFile }, func(r benchDataRound) float64 { return r.hotWrite },
		"raw WRITE, one resident MiB", "-")
	row("write, overwrite", func(r benchDataRound) float64 { return r.over }, func(r benchDataRound) float64 { return r.hotWrite },
		"raw WRITE, one resident MiB", "-")
	row("read", func(r benchDataRound) float64 { return r.read }, func(r benchDataRound) float64 { return r.hotRead },
		"raw READ, one resident MiB", "-")
	syncs := make([]time.Duration, len(rounds))
	for i, r := range rounds {
		syncs[i] = r.sync
	}
	t.note("where: %s", where)
	t.note("each 1 MiB operation is one call (FSFile.WriteAt / ReadAt of a registered client.Buffer: no copy) with nothing else in flight; the baseline is one 1 MiB RDMA WRITE or READ (one per extent it spans) on a data connection of its own from this process, as bench rdma's at depth 1")
	t.note("rates come from the median time of a 4 MiB chunk (four operations), octofs and baseline interleaved chunk by chunk")
	t.note("fresh blocks: the new file's and the fallocated baseline file's blocks are untouched memory at the nodes, where a first write costs a page fault; the resident-MiB rows compare with memory that is always resident, as bench rdma measures")
	t.note("fsync of a new %s file (flush and fence at the owners, conversion of its unwritten extents, size commit): median %v", humanBytes(int(p.size)), benchDataMedian(syncs).Round(time.Microsecond))
	return t
}

// benchDataLatency times 4 KiB reads at random offsets of f, whose extents
// the client has cached, beside raw 4 KiB READs of the same blocks,
// interleaved read by read, and counts what the client did per read.
func benchDataLatency(ctx context.Context, c *client.Client, f *client.FSFile, base *dpclient.Baseline, p *benchDataPlan, cb, rb []byte) (*benchTable, error) {
	blocks := p.size / 4096
	warm := func() error {
		for off := uint64(0); off < p.size; off += benchDataChunk {
			if _, err := f.ReadAt(cb, int64(off)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := warm(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(13, 13))
	eng, raw := make([]time.Duration, p.reads), make([]time.Duration, p.reads)
	before := c.Stats()
	for i := range p.reads {
		off := rng.Uint64N(blocks) * 4096
		start := time.Now()
		if err := base.Do(ctx, rdma.OpRead, rb, off); err != nil {
			return nil, err
		}
		raw[i] = time.Since(start)
		start = time.Now()
		if _, err := f.ReadAt(cb, int64(off)); err != nil {
			return nil, err
		}
		eng[i] = time.Since(start)
	}
	after := c.Stats()
	pct := func(d []time.Duration, q float64) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[int(q*float64(len(s)-1))]
	}
	n := float64(p.reads)
	reads := float64(after.Data.RDMAReads-before.Data.RDMAReads) / n
	dataRPCs := float64(after.Data.TotalRPCs()-before.Data.TotalRPCs()) / n
	allRPCs := after.TotalRPCs() - before.TotalRPCs()
	t := &benchTable{
		Title:   fmt.Sprintf("bench data: 4 KiB random reads, extents cached, %d reads", p.reads),
		Columns: []string{"test", "p50 µs", "p99 µs", "ratio p50", "RDMA READs/read", "data RPCs/read", "target"},
	}
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond)) }
	t.add("raw 4 KiB READ", us(pct(raw, 0.5)), us(pct(raw, 0.99)), "1.00x", "1", "0", "")
	t.add("client ReadAt 4 KiB", us(pct(eng, 0.5)), us(pct(eng, 0.99)), ratio(float64(pct(eng, 0.5)), float64(pct(raw, 0.5))),
		fmt.Sprintf("%.2f", reads), fmt.Sprintf("%.2f", dataRPCs), "p50 <=1.20x, 1 READ, 0 RPC")
	t.note("reads of a registered client.Buffer (no copy), interleaved read by read with the raw READs of the same blocks")
	t.note("RPCs of the whole client meanwhile, session keep-alives included: %d", allRPCs)
	return t, nil
}
