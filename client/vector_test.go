package client_test

import (
	"bytes"
	"context"
	"syscall"
	"testing"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/node/nodetest"
)

// TestClusterVectoredAndAsyncIO writes scattered pieces of a file in one
// WriteV (across chunks, so across nodes), reads them back with ReadV (a
// piece past the end comes back short), and keeps several ReadAtAsync
// and WriteAtAsync in flight from one goroutine; a second client that
// opens the file after the close sees every byte, and one vectored read
// costs no more RPCs than its pieces' chunks need (none, with the extents
// cached).
func TestClusterVectoredAndAsyncIO(t *testing.T) {
	tc, c := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	root := client.Cred{}
	a, f, err := c.Create(ctx, root, cluster.RootInode, "vec", 0o644, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	const M = 1 << 20
	piece := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 5000+i) }
	offs := []uint64{0, 3*M + 100, 9 * M, 13*M - 7}
	var iov []client.IOVec
	for i, off := range offs {
		iov = append(iov, client.IOVec{Off: off, Buf: piece(i)})
	}
	if err := f.WriteV(ctx, iov); err != nil {
		t.Fatal(err)
	}
	size := offs[3] + uint64(len(piece(3)))
	if got := f.Size(); got != size {
		t.Errorf("size after WriteV: %d, want %d", got, size)
	}

	// Async: four writes in flight, then four reads.
	var pend []*client.Pending
	for i := range 4 {
		pend = append(pend, f.WriteAtAsync(ctx, bytes.Repeat([]byte{byte('w' + i)}, 4096), int64(20*M+i*4096)))
	}
	for i, p := range pend {
		if n, err := p.Wait(); err != nil || n != 4096 {
			t.Fatalf("async write %d: %d, %v", i, n, err)
		}
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}

	c2 := connectClient(t, tc, "second")
	g, err := c2.Open(ctx, root, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	bufs := make([]client.IOVec, len(offs)+1)
	for i, off := range offs {
		bufs[i] = client.IOVec{Off: off, Buf: make([]byte, len(piece(i)))}
	}
	bufs[len(offs)] = client.IOVec{Off: 20*M + 4*4096 - 10, Buf: make([]byte, 100)} // past the end
	n, err := g.ReadV(ctx, bufs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range offs {
		if n[i] != len(piece(i)) || !bytes.Equal(bufs[i].Buf, piece(i)) {
			t.Errorf("vector %d at %d: %d bytes, equal %v", i, offs[i], n[i], bytes.Equal(bufs[i].Buf, piece(i)))
		}
	}
	if n[len(offs)] != 10 {
		t.Errorf("the vector crossing the end read %d bytes, want 10", n[len(offs)])
	}
	before := c2.Stats().TotalRPCs()
	if _, err := g.ReadV(ctx, bufs); err != nil {
		t.Fatal(err)
	}
	if extra := c2.Stats().TotalRPCs() - before; extra != 0 {
		t.Errorf("a second ReadV of the same pieces sent %d RPCs, want 0 (extents cached)", extra)
	}
	var reads []*client.Pending
	got := make([][]byte, 4)
	for i := range 4 {
		got[i] = make([]byte, 4096)
		reads = append(reads, g.ReadAtAsync(ctx, got[i], int64(20*M+i*4096)))
	}
	for i, p := range reads {
		if n, err := p.Wait(); err != nil || n != 4096 || !bytes.Equal(got[i], bytes.Repeat([]byte{byte('w' + i)}, 4096)) {
			t.Errorf("async read %d: %d, %v", i, n, err)
		}
	}
}
