package client

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestWriteBehind: small sequential writes go to the data owners as one
// write; this client's reads, truncates, fallocates and appends see them
// first; other clients see them after the close; a write that fails on
// its way out is reported by the next write or flush.
func TestWriteBehind(t *testing.T) {
	fc := newFakeCluster()
	c, other := fc.client(t), fc.client(t)
	c.SetWriteBehind(64 << 10)
	ctx := context.Background()
	var writes atomic.Int64
	fc.data.hook = func(ctx context.Context, op string) error {
		if op == "write" {
			writes.Add(1)
		}
		return nil
	}
	a, f := create(t, c, alice, "f", syscall.O_RDWR)
	var want []byte
	for i := range 100 {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, 300)
		if n, err := f.WriteAt(ctx, p, int64(len(want))); err != nil || n != len(p) {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
		want = append(want, p...)
	}
	if n := writes.Load(); n != 0 {
		t.Fatalf("%d small writes made %d data writes before anything needed them", 100, n)
	}
	if got, _ := c.GetAttr(ctx, alice, a.Ino); got.Size != uint64(len(want)) {
		t.Fatalf("size in the writing client: %d, want %d", got.Size, len(want))
	}
	got := make([]byte, len(want)+10)
	if n, err := f.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got[:n], want) {
		t.Fatalf("read back in the writing client: %d bytes, %v", n, err)
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("the read had %d data writes go first, want 1", n)
	}
	// A write elsewhere sends what is kept first, so it lands after.
	f.WriteAt(ctx, []byte("xyz"), int64(len(want)))
	if _, err := f.WriteAt(ctx, []byte("ABC"), 1); err != nil {
		t.Fatal(err)
	}
	want = append(want, "xyz"...)
	copy(want[1:], "ABC")
	// A truncate sends them first: nothing lands past the new end.
	f.WriteAt(ctx, []byte("tail"), int64(len(want)))
	if err := f.Truncate(ctx, uint64(len(want))); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := other.Open(ctx, alice, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got[:n], want) {
		t.Fatalf("another client after the close: %d bytes (want %d), %v, equal %v", n, len(want), err, bytes.Equal(got[:n], want))
	}
	r.Close(ctx)

	// A failure on the way out is the next write's or flush's.
	_, g := create(t, c, alice, "g", syscall.O_WRONLY)
	if _, err := g.WriteAt(ctx, []byte("lost"), 0); err != nil {
		t.Fatal(err)
	}
	fc.data.hook = func(ctx context.Context, op string) error {
		if op == "write" {
			return errors.New("dataplane: owner unreachable")
		}
		return nil
	}
	if err := g.Flush(ctx); err != syscall.EIO {
		t.Fatalf("flush of a write that cannot reach its owner: %v, want EIO", err)
	}
	fc.data.hook = nil
	g.Close(ctx)

	// Large writes and O_DIRECT writes are not kept.
	_, h := create(t, c, alice, "h", syscall.O_WRONLY|syscall.O_DIRECT)
	writes.Store(0)
	fc.data.hook = func(ctx context.Context, op string) error {
		if op == "write" {
			writes.Add(1)
		}
		return nil
	}
	h.WriteAt(ctx, []byte("direct"), 0)
	if writes.Load() != 1 {
		t.Fatalf("an O_DIRECT write was kept behind")
	}
	h.Close(ctx)
}
