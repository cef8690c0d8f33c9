package rpc

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/octofs/octofs/rdma"
)

// largeBuf is a registered buffer that holds one message too large for a
// receive buffer: a request the client stages for the server to READ, a
// request the server READs into, a reply the server stages for the client
// to READ, a reply the client READs into.
type largeBuf struct {
	mem   []byte
	mr    rdma.MR
	class int
}

// addr is the address of the buffer's first byte, for work requests.
func (b *largeBuf) addr() uint64 { return b.mr.Addr() }

// Size classes are powers of two from minLargeClass up, so that a buffer
// is at most twice the message and a freed one serves the next message of
// its class without registering memory again.
const (
	minLargeShift = 13 // 8 KiB
	maxLargeShift = 30 // 1 GiB, maxWireMessage
)

func largeClass(n int) int {
	if n <= 1<<minLargeShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minLargeShift
}

func classSize(c int) int { return 1 << (minLargeShift + c) }

// bufPool hands out registered buffers for large messages, within a
// budget of bytes handed out at once, and keeps some freed ones for reuse.
// Memory comes from rdma.AllocBuffer, so it suits every provider.
type bufPool struct {
	pd     rdma.PD
	access rdma.Access
	budget int64 // bytes handed out at once; 0: no limit
	keep   int64 // bytes of freed buffers kept for reuse

	mu     sync.Mutex
	inUse  int64
	kept   int64
	free   [maxLargeShift - minLargeShift + 1][]*largeBuf
	closed bool
}

func newBufPool(pd rdma.PD, access rdma.Access, budget, keep int64) *bufPool {
	return &bufPool{pd: pd, access: access, budget: budget, keep: keep}
}

// get returns a buffer of at least n bytes, or an error wrapping ErrBusy
// if handing it out would exceed the budget.
func (p *bufPool) get(n int) (*largeBuf, error) {
	if n <= 0 || n > maxWireMessage {
		return nil, fmt.Errorf("%w: large buffer of %d bytes", ErrTooLarge, n)
	}
	c := largeClass(n)
	size := int64(classSize(c))
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if p.budget > 0 && p.inUse+size > p.budget {
		p.mu.Unlock()
		return nil, fmt.Errorf("%w: large-message memory spent (%d bytes in use, %d more wanted, budget %d)", ErrBusy, p.inUse, size, p.budget)
	}
	p.inUse += size
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.kept -= size
		p.mu.Unlock()
		return b, nil
	}
	p.mu.Unlock()
	b, err := p.alloc(c)
	if err != nil {
		p.mu.Lock()
		p.inUse -= size
		p.mu.Unlock()
		return nil, err
	}
	return b, nil
}

func (p *bufPool) alloc(c int) (*largeBuf, error) {
	mem, err := rdma.AllocBuffer(classSize(c))
	if err != nil {
		return nil, err
	}
	mr, err := p.pd.RegMR(mem, p.access)
	if err != nil {
		rdma.FreeBuffer(mem)
		return nil, fmt.Errorf("rpc: register a %d-byte buffer: %w", len(mem), err)
	}
	return &largeBuf{mem: mem, mr: mr, class: c}, nil
}

// put returns b, which nobody (no work request either) uses any more.
func (p *bufPool) put(b *largeBuf) {
	if b == nil {
		return
	}
	size := int64(classSize(b.class))
	p.mu.Lock()
	p.inUse -= size
	if !p.closed && p.kept+size <= p.keep {
		p.free[b.class] = append(p.free[b.class], b)
		p.kept += size
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	release(b)
}

func release(b *largeBuf) {
	b.mr.Dereg()
	rdma.FreeBuffer(b.mem)
}

// used is how many bytes are handed out.
func (p *bufPool) used() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inUse
}

// close releases the kept buffers; buffers handed out are released when
// they are put back.
func (p *bufPool) close() {
	p.mu.Lock()
	p.closed = true
	var all []*largeBuf
	for c := range p.free {
		all = append(all, p.free[c]...)
		p.free[c] = nil
	}
	p.kept = 0
	p.mu.Unlock()
	for _, b := range all {
		release(b)
	}
}
