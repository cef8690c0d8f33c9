package dpclient

import (
	"sync/atomic"
	"unsafe"

	"github.com/octofs/octofs/dataplane/wire"
)

// Stats counts the engine's work since it started: file-level calls, the
// RDMA work requests and RPCs they took, and the bytes moved. Per-operation
// costs are differences of two snapshots divided by the calls between.
type Stats struct {
	// File-level calls.
	Reads     uint64 `json:"reads"`
	Writes    uint64 `json:"writes"`
	Persists  uint64 `json:"persists"`
	Allocates uint64 `json:"allocates"`
	// RDMA work requests that completed.
	RDMAReads  uint64 `json:"rdma_reads"`
	RDMAWrites uint64 `json:"rdma_writes"`
	// RPCs sent, by op.
	RPCs map[string]uint64 `json:"rpcs"`
	// Bytes.
	BytesRead    uint64 `json:"bytes_read"`
	BytesWritten uint64 `json:"bytes_written"`
	// BytesCopied counts bytes copied through bounce buffers (memory the
	// caller had not registered).
	BytesCopied uint64 `json:"bytes_copied"`
	// Retries of a chunk's I/O and data connections re-established.
	Retries    uint64 `json:"retries"`
	Reconnects uint64 `json:"reconnects"`
	// Prefetches counts chunks allocated in the background for
	// sequential writers (their RPCs count as allocate).
	Prefetches uint64 `json:"prefetches"`
}

// TotalRPCs is the sum of RPCs over all ops.
func (s Stats) TotalRPCs() uint64 {
	var n uint64
	for _, v := range s.RPCs {
		n += v
	}
	return n
}

type counters struct {
	reads, writes, persists, allocates atomic.Uint64
	rdmaReads, rdmaWrites              atomic.Uint64
	bytesRead, bytesWritten, copied    atomic.Uint64
	retries, reconnects, prefetches    atomic.Uint64
	rpcs                               [16]atomic.Uint64 // by op - OpMap
}

func (c *counters) rpc(op wire.Op) {
	if i := int(op) - int(wire.OpMap); i >= 0 && i < len(c.rpcs) {
		c.rpcs[i].Add(1)
	}
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	c := &e.stats
	s := Stats{
		Reads: c.reads.Load(), Writes: c.writes.Load(), Persists: c.persists.Load(), Allocates: c.allocates.Load(),
		RDMAReads: c.rdmaReads.Load(), RDMAWrites: c.rdmaWrites.Load(),
		BytesRead: c.bytesRead.Load(), BytesWritten: c.bytesWritten.Load(), BytesCopied: c.copied.Load(),
		Retries: c.retries.Load(), Reconnects: c.reconnects.Load(), Prefetches: c.prefetches.Load(),
		RPCs: make(map[string]uint64, len(wire.Ops)),
	}
	for _, op := range wire.Ops {
		s.RPCs[op.String()] = c.rpcs[int(op)-int(wire.OpMap)].Load()
	}
	return s
}

func addrOf(p []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p)))) }
