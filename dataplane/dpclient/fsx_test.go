package dpclient_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/dataplane/dptest"
	"github.com/octofs/octofs/dataplane/wire"
)

var (
	fsxSeed = flag.Uint64("fsx.seed", 0, "seed of TestFSX (0: random; a failure prints the seed to replay)")
	fsxOps  = flag.Int("fsx.ops", 100_000, "operations TestFSX runs")
)

// fakeClock is the nodes' and clients' clock in TestFSX: it advances a
// millisecond per operation, so leases expire and quarantines end as the
// run goes, independent of how fast the machine is.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// fsxFile is the reference model of one file: its size and its bytes
// (zero beyond the size), and which client touched it last.
type fsxFile struct {
	ino  uint64
	size uint64
	data []byte
	last int
}

const fsxMaxSize = 3*wire.ChunkSize + wire.ChunkSize/2

// TestFSX runs random reads, writes, truncates and fallocates of every
// mode from several clients against a reference model, on a 3-node
// cluster. A client that takes over a file from another does what the
// client library does at close and open: the previous one persists, the
// new one forgets its cached extents (close-to-open). Replay a failure
// with -fsx.seed; run longer with -fsx.ops.
func TestFSX(t *testing.T) {
	seed := *fsxSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	ops := *fsxOps
	if testing.Short() {
		ops = min(ops, 10_000)
	}
	t.Logf("fsx: seed %d, %d operations (replay: go test ./dataplane/dpclient -run TestFSX -fsx.seed=%d)", seed, ops, seed)
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	c := dptest.New(t, dptest.Options{Now: clock.Now, Lease: 100 * time.Millisecond, Quarantine: 300 * time.Millisecond})
	var clients []*dpclient.Engine
	for range 3 {
		clients = append(clients, c.NewEngine(func(cfg *dpclient.Config) { cfg.Now = clock.Now }))
	}
	rng := rand.New(rand.NewPCG(seed, 0xf5))
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	fill := rand.NewChaCha8(key)
	files := make([]*fsxFile, 4)
	for i := range files {
		files[i] = &fsxFile{ino: uint64(i+1)<<48 | uint64(100+i), data: make([]byte, fsxMaxSize)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	fail := func(op int, format string, args ...any) {
		t.Helper()
		t.Fatalf("fsx seed %d, op %d: %s", seed, op, fmt.Sprintf(format, args...))
	}
	counts := map[string]int{}
	buf := make([]byte, 1<<20)
	for op := range ops {
		clock.Advance(time.Millisecond)
		f := files[rng.IntN(len(files))]
		ci := rng.IntN(len(clients))
		e := clients[ci]
		if ci != f.last {
			// close by the last client, open by this one
			if err := clients[f.last].Persist(ctx, f.ino); err != nil {
				fail(op, "persist by client %d at hand-over: %v", f.last, err)
			}
			e.Forget(f.ino)
			f.last = ci
		}
		off, n := fsxRange(rng)
		switch k := rng.IntN(100); {
		case k < 40: // read
			counts["read"]++
			if f.size == 0 {
				continue
			}
			off %= f.size
			n = min(n, f.size-off)
			got := buf[:n]
			if err := e.ReadAt(ctx, f.ino, got, off); err != nil {
				fail(op, "read ino %d [%d,+%d): %v", f.ino, off, n, err)
			}
			if i := firstDiff(got, f.data[off:off+n]); i >= 0 {
				fail(op, "read ino %d [%d,+%d) by client %d: byte %d (file offset %d) is %#x, want %#x",
					f.ino, off, n, ci, i, off+uint64(i), got[i], f.data[off+uint64(i)])
			}
		case k < 75: // write
			counts["write"]++
			data := buf[:n]
			fill.Read(data)
			if err := e.WriteAt(ctx, f.ino, data, off); err != nil {
				fail(op, "write ino %d [%d,+%d): %v", f.ino, off, n, err)
			}
			copy(f.data[off:], data)
			f.size = max(f.size, off+n)
		case k < 85: // truncate
			counts["truncate"]++
			size := rng.Uint64N(fsxMaxSize)
			if rng.IntN(4) == 0 {
				size = 0
			}
			// The namespace has the inode's owner trim it everywhere,
			// then records the new size; the client forgets the extents
			// it cached.
			if err := c.Truncate(ctx, f.ino, f.size, size); err != nil {
				fail(op, "truncate ino %d to %d: %v", f.ino, size, err)
			}
			e.Forget(f.ino)
			if size < f.size {
				clear(f.data[size:f.size])
			}
			f.size = size
		case k < 97: // fallocate
			mode := []uint32{0, wire.FallocKeepSize, wire.FallocPunchHole | wire.FallocKeepSize,
				wire.FallocZeroRange, wire.FallocZeroRange | wire.FallocKeepSize}[rng.IntN(5)]
			counts[fmt.Sprintf("fallocate %#x", mode)]++
			if err := e.Allocate(ctx, f.ino, mode, off, n); err != nil {
				fail(op, "fallocate %#x ino %d [%d,+%d): %v", mode, f.ino, off, n, err)
			}
			if mode&(wire.FallocPunchHole|wire.FallocZeroRange) != 0 {
				clear(f.data[off : off+n])
			}
			if mode&wire.FallocKeepSize == 0 {
				f.size = max(f.size, off+n)
			}
		default: // persist; every so often a full check of the file
			counts["persist"]++
			if err := e.Persist(ctx, f.ino); err != nil {
				fail(op, "persist ino %d: %v", f.ino, err)
			}
			if counts["persist"]%10 != 0 {
				continue
			}
			counts["verify"]++
			got := make([]byte, f.size)
			if err := e.ReadAt(ctx, f.ino, got, 0); err != nil {
				fail(op, "read all of ino %d: %v", f.ino, err)
			}
			if i := firstDiff(got, f.data[:f.size]); i >= 0 {
				fail(op, "ino %d at %d is %#x, want %#x", f.ino, i, got[i], f.data[i])
			}
		}
	}
	var st dpclient.Stats
	for _, e := range clients {
		s := e.Stats()
		st.RDMAReads += s.RDMAReads
		st.RDMAWrites += s.RDMAWrites
		st.Retries += s.Retries
		for k, v := range s.RPCs {
			if st.RPCs == nil {
				st.RPCs = map[string]uint64{}
			}
			st.RPCs[k] += v
		}
	}
	t.Logf("fsx: %v; RDMA reads %d, writes %d, RPCs %v, retries %d", counts, st.RDMAReads, st.RDMAWrites, st.RPCs, st.Retries)
}

// fsxRange picks an I/O range: mostly small, sometimes up to 1 MiB, often
// near chunk and block boundaries.
func fsxRange(rng *rand.Rand) (off, n uint64) {
	switch rng.IntN(8) {
	case 0:
		n = 1 + rng.Uint64N(1<<20)
	default:
		n = 1 + rng.Uint64N(16<<10)
	}
	switch rng.IntN(3) {
	case 0: // near a chunk boundary
		b := (1 + rng.Uint64N(3)) * wire.ChunkSize
		off = b - min(b, rng.Uint64N(2*n+1))
	default:
		off = rng.Uint64N(fsxMaxSize)
	}
	if off+n > fsxMaxSize {
		n = fsxMaxSize - off
	}
	if n == 0 {
		off, n = 0, 1
	}
	return off, n
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
