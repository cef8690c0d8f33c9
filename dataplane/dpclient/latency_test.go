package dpclient_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/dataplane/dptest"
	"github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/rdma"
)

// TestWarmReadLatency times 4 KiB random reads of a file whose extents are
// cached, through the engine (registered buffer, and plain memory with a
// copy), beside raw 4 KiB RDMA READs of the same blocks on a connection of
// its own (dpclient.Baseline), interleaved read by read in the same run.
// It logs the medians; it asserts only what does not depend on the
// machine: one RDMA READ and no RPC per read.
func TestWarmReadLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test; not in -short")
	}
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1})
	e := c.NewEngine()
	ctx := testCtx(t)
	const ino, size, n = 71, wire.ChunkSize, 2000
	require.NoError(t, e.WriteAt(ctx, ino, pattern(71, size), 0))
	require.NoError(t, e.Persist(ctx, ino))
	base, err := e.NewBaseline(ctx, ino, size)
	require.NoError(t, err)
	defer base.Close()
	reg, err := e.AllocBuffer(2 * 4096)
	require.NoError(t, err)
	defer reg.Free()
	rawBuf, engBuf := reg.Bytes()[:4096], reg.Bytes()[4096:]
	plain := make([]byte, 4096)
	require.NoError(t, e.ReadAt(ctx, ino, engBuf, 0)) // warm the extent cache

	rng := rand.New(rand.NewPCG(7, 7))
	raw, zero, copied := make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n)
	before := e.Stats()
	for i := range n {
		off := rng.Uint64N(size/4096) * 4096
		raw[i] = timed(func() { require.NoError(t, base.Do(ctx, rdma.OpRead, rawBuf, off)) })
		zero[i] = timed(func() { require.NoError(t, e.ReadAt(ctx, ino, engBuf, off)) })
		copied[i] = timed(func() { require.NoError(t, e.ReadAt(ctx, ino, plain, off)) })
	}
	after := e.Stats()
	require.Equal(t, uint64(2*n), after.RDMAReads-before.RDMAReads, "one RDMA READ per read")
	require.Equal(t, before.TotalRPCs(), after.TotalRPCs(), "no RPC per read")
	p50raw := median(raw)
	t.Logf("4 KiB random read p50 over %d reads: raw READ %v, engine (registered) %v = %.2fx, engine (copy) %v = %.2fx",
		n, p50raw, median(zero), float64(median(zero))/float64(p50raw), median(copied), float64(median(copied))/float64(p50raw))
}

func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestSequentialBandwidth moves 1 MiB at a time through the engine
// (registered buffer) and through a Baseline (raw READ and WRITE on a
// connection of its own) over the same amount of remote memory in the same
// state, interleaved chunk by chunk (the order alternating), so that a
// noisy, shared machine disturbs both alike, and logs the rates (from the
// median time of a chunk) and their ratios:
//
//   - new file: the engine writes a file that has no blocks (allocation
//     included); the baseline writes a fallocated file's blocks, which
//     are as fresh (never touched: on this machine a first touch costs a
//     page fault at the node, the same for both);
//   - overwrite and read: both again over the same blocks;
//   - hot: the baseline over one MiB again and again (what bench rdma
//     measures: remote memory that is always resident), for reference.
//
// It asserts nothing about the machine's speed.
func TestSequentialBandwidth(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test; not in -short")
	}
	const mib, total, rounds = 1 << 20, 128 << 20, 3
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1, RegionSize: (2*rounds*total + 64<<20)})
	e := c.NewEngine()
	ctx := testCtx(t)
	reg, err := e.AllocBuffer(2 * mib)
	require.NoError(t, err)
	defer reg.Free()
	rawBuf, engBuf := reg.Bytes()[:mib], reg.Bytes()[mib:]
	copy(rawBuf, pattern(81, mib))
	copy(engBuf, rawBuf)
	// pair times raw and engine one chunk (4 MiB, four operations) at a
	// time, alternating which goes first, and returns both rates from the
	// median time of a chunk: a machine shared with other work stalls
	// some operations by milliseconds, which would swamp a sum, and a
	// chunk holds the engine's allocation (once per chunk or less for a
	// sequential writer), which a median of single operations would
	// leave out.
	pair := func(raw, eng func(off uint64) error) (float64, float64) {
		var tr, te []time.Duration
		run := func(f func(off uint64) error, at uint64) time.Duration {
			return timed(func() {
				for off := at; off < at+wire.ChunkSize; off += mib {
					require.NoError(t, f(off))
				}
			})
		}
		for i, at := 0, uint64(0); at < total; i, at = i+1, at+wire.ChunkSize {
			if i%2 == 0 {
				tr = append(tr, run(raw, at))
				te = append(te, run(eng, at))
			} else {
				te = append(te, run(eng, at))
				tr = append(tr, run(raw, at))
			}
		}
		return wire.ChunkSize / mib / median(tr).Seconds(), wire.ChunkSize / mib / median(te).Seconds()
	}
	ratios := map[string][]float64{}
	for round := range uint64(rounds) {
		rawIno, ino := 200+2*round, 201+2*round
		require.NoError(t, e.Allocate(ctx, rawIno, wire.FallocKeepSize, 0, total))
		base, err := e.NewBaseline(ctx, rawIno, total)
		require.NoError(t, err)
		raw := func(op rdma.Opcode) func(off uint64) error {
			return func(off uint64) error { return base.Do(ctx, op, rawBuf, off) }
		}
		write := func(off uint64) error { return e.WriteAt(ctx, ino, engBuf, off) }
		rawFresh, fresh := pair(raw(rdma.OpWrite), write)
		require.NoError(t, e.Persist(ctx, ino))
		rawOver, over := pair(raw(rdma.OpWrite), write)
		rawRead, read := pair(raw(rdma.OpRead), func(off uint64) error { return e.ReadAt(ctx, ino, engBuf, off) })
		hotWrite, hotRead := pair(func(uint64) error { return base.Do(ctx, rdma.OpWrite, rawBuf, 0) },
			func(uint64) error { return base.Do(ctx, rdma.OpRead, rawBuf, 0) })
		base.Close()
		ratios["new file"] = append(ratios["new file"], fresh/rawFresh)
		ratios["overwrite"] = append(ratios["overwrite"], over/rawOver)
		ratios["read"] = append(ratios["read"], read/rawRead)
		t.Logf("round %d MiB/s: new file %.0f vs raw WRITE %.0f (%.2fx); overwrite %.0f vs %.0f (%.2fx); read %.0f vs raw READ %.0f (%.2fx); hot raw WRITE %.0f, READ %.0f",
			round, fresh, rawFresh, fresh/rawFresh, over, rawOver, over/rawOver, read, rawRead, read/rawRead, hotWrite, hotRead)
	}
	for _, k := range []string{"new file", "overwrite", "read"} {
		r := ratios[k]
		slices.Sort(r)
		t.Logf("%s: engine/raw over %d rounds: median %.2fx, range %.2f-%.2fx", k, len(r), r[len(r)/2], r[0], r[len(r)-1])
	}
	st := e.Stats()
	t.Logf("engine: %d RDMA writes, %d reads, RPCs %v", st.RDMAWrites, st.RDMAReads, st.RPCs)
}
