package client

// Buffer is memory registered with the client's RDMA device: File.ReadAt
// and File.WriteAt (and FSFile's) move bytes between it and the nodes'
// pmem with no copy, where other memory goes through a registered bounce
// buffer and one copy. Any slice of Bytes() qualifies.
type Buffer struct {
	b    []byte
	free func() error
}

// Bytes is the buffer's memory.
func (b *Buffer) Bytes() []byte { return b.b }

// Free releases the buffer; no I/O may use it afterwards.
func (b *Buffer) Free() error {
	if b.free == nil {
		return nil
	}
	err := b.free()
	b.free, b.b = nil, nil
	return err
}

// AllocBuffer returns n bytes of registered memory for zero-copy I/O. A
// Memory client returns plain memory.
func (c *Client) AllocBuffer(n int) (*Buffer, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if c.remote == nil {
		return &Buffer{b: make([]byte, n)}, nil
	}
	rb, err := c.remote.data.AllocBuffer(n)
	if err != nil {
		return nil, err
	}
	return &Buffer{b: rb.Bytes(), free: rb.Free}, nil
}
