package dpclient

import (
	"context"
	"sync"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane/wire"
)

// Seek returns the first offset in [off, end) of ino's file that holds
// data (hole false) or lies in a hole (hole true), and whether there is
// one. Data is what reads would fetch: written extents, and the blocks of
// unwritten ones that hold this client's unpersisted writes; blocks that
// are unmapped, or unwritten without such writes (fallocate, allocation
// ahead), are holes, as ext4 and XFS answer for unwritten extents. The
// answer is at block granularity and comes from the extent maps as reads
// see them: cached under their leases, else asked of each chunk's owner,
// one chunk after another.
func (e *Engine) Seek(ctx context.Context, ino, off, end uint64, hole bool) (uint64, bool, error) {
	scanned := 0
	for chunk := off / wire.ChunkSize; chunk*wire.ChunkSize < end; chunk++ {
		if !hole && scanned == seekScan {
			// A run of chunks without data: ask the nodes where the
			// next data is rather than map each chunk up to it.
			next, found, err := e.nextData(ctx, ino, chunk, end)
			if err != nil || !found {
				return 0, false, err
			}
			chunk, scanned = next, 0
		}
		scanned++
		base := chunk * wire.ChunkSize
		lo := uint32(max(off, base) - base)
		hi := uint32(min(end, base+wire.ChunkSize) - base)
		data, err := e.chunkData(ctx, ino, chunk)
		if err != nil {
			return 0, false, err
		}
		if at, ok := seekSpans(data, lo, hi, hole); ok {
			return base + uint64(at), true, nil
		}
	}
	return 0, false, nil
}

// seekScan is how many chunks in a row SEEK_DATA maps before it asks the
// nodes for the next chunk holding blocks (nextData): a sparse file of a
// terabyte has 262,144 chunks, one map each took longer than an operation
// may.
const seekScan = 4

// nextData asks every node for the lowest chunk at or after from of ino
// that holds blocks there, and returns the lowest, if one starts before
// byte end (found).
func (e *Engine) nextData(ctx context.Context, ino, from, end uint64) (next uint64, found bool, err error) {
	m := e.cfg.Map.Current()
	var mu sync.Mutex
	next = wire.NoChunk
	err = broadcast(ctx, e.cfg.RPC, m, &wire.Request{Op: wire.OpNextData, Header: e.header(m), Ino: ino, Chunk: from}, func(_ cluster.NodeInfo, r wire.Reply) {
		mu.Lock()
		defer mu.Unlock()
		next = min(next, max(r.Next, from))
	}, &e.stats)
	if err != nil || next == wire.NoChunk || next >= (end+wire.ChunkSize-1)/wire.ChunkSize {
		return 0, false, err
	}
	return next, true, nil
}

// seekSpans returns the first offset in [lo, hi) inside data (hole false)
// or outside it (hole true).
func seekSpans(data spans, lo, hi uint32, hole bool) (uint32, bool) {
	at := lo
	for _, s := range data {
		if s.hi <= at {
			continue
		}
		if at >= hi {
			break
		}
		if !hole {
			at = max(at, s.lo)
			return at, at < hi
		}
		if s.lo > at {
			break
		}
		at = s.hi
	}
	if hole {
		return at, at < hi
	}
	return 0, false
}

// chunkData returns the byte ranges of ino's chunk that hold data, as
// whole blocks.
func (e *Engine) chunkData(ctx context.Context, ino, chunk uint64) (spans, error) {
	var data spans
	err := e.retry(ctx, func() error {
		m, node, dc, err := e.chunkConn(ctx, ino, chunk)
		if err != nil {
			return err
		}
		exts, own, err := e.extents(ctx, m, node, dc, ino, chunk, false, 0, 0, 0)
		if err != nil {
			return err
		}
		bs := dc.grant.BlockSize
		data = nil
		for _, x := range exts {
			if !x.Unwritten() {
				data = data.add(x.Off, x.End())
				continue
			}
			for _, w := range own[x.Stamp] {
				lo, hi := max(w.lo, x.Off), min(w.hi, x.End())
				if lo < hi {
					data = data.add(max(lo/bs*bs, x.Off), min((hi+bs-1)/bs*bs, x.End()))
				}
			}
		}
		return nil
	})
	return data, err
}
