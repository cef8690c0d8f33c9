package dpclient

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/octofs/octofs/rdma"
)

// Buffer is registered memory the engine reads into and writes from with
// no copy: pass Bytes() (or any slice of it) to ReadAt and WriteAt. Other
// memory goes through a copy into one of the engine's bounce buffers.
type Buffer struct {
	e   *Engine
	mr  rdma.MR
	buf []byte
}

// Bytes is the buffer's memory.
func (b *Buffer) Bytes() []byte { return b.buf }

// Free deregisters and releases the buffer; no I/O may use it any more.
func (b *Buffer) Free() error {
	b.e.bufs.forget(b.mr)
	err := b.mr.Dereg()
	if ferr := rdma.FreeBuffer(b.buf); err == nil {
		err = ferr
	}
	return err
}

// AllocBuffer returns n bytes of registered memory for zero-copy I/O.
func (e *Engine) AllocBuffer(n int) (*Buffer, error) {
	mr, buf, err := e.register(n)
	if err != nil {
		return nil, err
	}
	e.bufs.remember(mr)
	return &Buffer{e: e, mr: mr, buf: buf}, nil
}

func (e *Engine) register(n int) (rdma.MR, []byte, error) {
	buf, err := rdma.AllocBuffer(n)
	if err != nil {
		return nil, nil, err
	}
	mr, err := e.pd.RegMR(buf, rdma.AccessLocalWrite)
	if err != nil {
		rdma.FreeBuffer(buf)
		return nil, nil, fmt.Errorf("dpclient: register %d bytes: %w", n, err)
	}
	return mr, buf, nil
}

// registry finds the memory region holding a slice, so that the caller's
// registered buffers are used in place.
type registry struct {
	mu  sync.RWMutex
	mrs []rdma.MR // by Addr
}

func (r *registry) remember(mr rdma.MR) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearchFunc(r.mrs, mr.Addr(), func(m rdma.MR, a uint64) int { return cmp.Compare(m.Addr(), a) })
	r.mrs = slices.Insert(r.mrs, i, mr)
}

func (r *registry) forget(mr rdma.MR) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mrs = slices.DeleteFunc(r.mrs, func(m rdma.MR) bool { return m == mr })
}

// lookup returns the region holding all of p, or nil.
func (r *registry) lookup(p []byte) rdma.MR {
	if len(p) == 0 {
		return nil
	}
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p))))
	r.mu.RLock()
	defer r.mu.RUnlock()
	i, found := slices.BinarySearchFunc(r.mrs, addr, func(m rdma.MR, a uint64) int { return cmp.Compare(m.Addr(), a) })
	if !found {
		i--
	}
	if i < 0 || i >= len(r.mrs) {
		return nil
	}
	m := r.mrs[i]
	if addr >= m.Addr() && addr+uint64(len(p)) <= m.Addr()+uint64(m.Len()) {
		return m
	}
	return nil
}

// bounce is a registered buffer of the engine's own, for callers' memory
// that is not registered.
type bounce struct {
	mr  rdma.MR
	buf []byte
}

// bouncePool keeps bounce buffers by power-of-two size class, from 4 KiB
// to one chunk, at most keep of each.
type bouncePool struct {
	e    *Engine
	keep int
	mu   sync.Mutex
	free map[int][]*bounce
}

const minBounce = 4096

func sizeClass(n int) int {
	if n <= minBounce {
		return minBounce
	}
	return 1 << bits.Len(uint(n-1))
}

func (p *bouncePool) get(n int) (*bounce, error) {
	c := sizeClass(n)
	p.mu.Lock()
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.mu.Unlock()
		return b, nil
	}
	p.mu.Unlock()
	mr, buf, err := p.e.register(c)
	if err != nil {
		return nil, err
	}
	return &bounce{mr: mr, buf: buf}, nil
}

func (p *bouncePool) put(b *bounce) {
	c := len(b.buf)
	p.mu.Lock()
	if len(p.free[c]) < p.keep {
		p.free[c] = append(p.free[c], b)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	b.mr.Dereg()
	rdma.FreeBuffer(b.buf)
}

func (p *bouncePool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.free {
		for _, b := range l {
			b.mr.Dereg()
			rdma.FreeBuffer(b.buf)
		}
	}
	p.free = nil
}
