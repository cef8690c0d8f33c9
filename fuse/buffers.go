package fuse

import (
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/octofs/octofs/client"
)

// buffer is registered memory: a *client.Buffer, or a test's fake.
type buffer interface {
	Bytes() []byte
	Free() error
}

var _ buffer = (*client.Buffer)(nil)

// clientBuffers allocates the read buffers of a mount of c.
func clientBuffers(c *client.Client) func(int) (buffer, error) {
	return func(n int) (buffer, error) { return c.AllocBuffer(n) }
}

// readBuffers keeps registered buffers (client.AllocBuffer) of MaxWrite
// bytes for READ replies: the data engine reads a file's bytes into one
// with RDMA and go-fuse writes the reply to the kernel straight from it,
// so a read costs no copy in this process. Into go-fuse's own reply
// buffer the engine would read through a bounce buffer and copy.
//
// A buffer is out from the READ that takes it until go-fuse has written
// the reply (readReply.Done). The kernel keeps at most MaxBackground
// asynchronous READs and one synchronous READ per reading thread in
// flight; the pool keeps up to keep buffers between bursts and frees the
// rest, so registered memory stays bounded by what is in flight.
type readBuffers struct {
	alloc func(n int) (buffer, error)
	size  int
	keep  int

	mu     sync.Mutex
	free   []buffer
	closed bool
}

func newReadBuffers(alloc func(int) (buffer, error), size, keep int) *readBuffers {
	return &readBuffers{alloc: alloc, size: size, keep: keep}
}

// get returns a buffer of at least n bytes, or nil when none can be had
// (n is larger than the pool's size, the pool is closed, or registering
// memory failed): the caller reads into its own memory then.
func (p *readBuffers) get(n int) buffer {
	if n > p.size {
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	if k := len(p.free); k > 0 {
		b := p.free[k-1]
		p.free = p.free[:k-1]
		p.mu.Unlock()
		return b
	}
	p.mu.Unlock()
	b, err := p.alloc(p.size)
	if err != nil {
		return nil
	}
	return b
}

// put returns b to the pool, or frees it if the pool is full or closed.
func (p *readBuffers) put(b buffer) {
	p.mu.Lock()
	if !p.closed && len(p.free) < p.keep {
		p.free = append(p.free, b)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	b.Free()
}

// close frees the kept buffers; buffers still out are freed when they
// come back.
func (p *readBuffers) close() {
	p.mu.Lock()
	free := p.free
	p.free, p.closed = nil, true
	p.mu.Unlock()
	for _, b := range free {
		b.Free()
	}
}

// readReply is a READ's answer held in a pooled buffer; go-fuse calls
// Done once it has written the reply to the kernel (or failed to).
type readReply struct {
	pool *readBuffers
	buf  buffer
	n    int
}

var _ fuse.ReadResult = (*readReply)(nil)

func (r *readReply) Bytes([]byte) ([]byte, fuse.Status) { return r.buf.Bytes()[:r.n], fuse.OK }

// Slices makes go-fuse write the reply with one writev from the buffer,
// without first trying to splice it (which only pays for data in a file
// descriptor, and fails outright for replies larger than a pipe).
func (r *readReply) Slices() ([][]byte, fuse.Status) { return [][]byte{r.buf.Bytes()[:r.n]}, fuse.OK }

func (r *readReply) Size() int { return r.n }

func (r *readReply) Done() {
	if r.buf != nil {
		r.pool.put(r.buf)
		r.buf = nil
	}
}
