package client

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/octofs/octofs/cluster"
)

// TestLargestFileSize: a write, truncate or fallocate that would take a
// file past the namespace service's largest size (2^60) fails with EFBIG
// before it reaches the data engine, as on a local file system. (The
// service refuses to commit a larger size, so a write accepted here would
// be lost at close, which then failed with EFBIG.)
func TestLargestFileSize(t *testing.T) {
	ctx := context.Background()
	fc := newFakeCluster()
	var reached atomic.Int32
	fc.data.hook = func(_ context.Context, op string) error {
		if op == "write" || op == "allocate" {
			reached.Add(1)
			return errors.New("the data engine was asked")
		}
		return nil
	}
	c := fc.client(t)
	_, f, err := c.Create(ctx, RootCred, cluster.RootInode, "f", 0o644, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	const limit = 1 << 60
	for name, tc := range map[string]struct {
		call func() error
		want error
	}{
		"write ending past the limit": {func() error { _, err := f.WriteAt(ctx, []byte("xy"), limit-1); return err }, syscall.EFBIG},
		"write starting at it":        {func() error { _, err := f.WriteAt(ctx, []byte("x"), limit); return err }, syscall.EFBIG},
		"truncate past it":            {func() error { return f.Truncate(ctx, limit+1) }, syscall.EFBIG},
		"fallocate past it":           {func() error { return f.Allocate(ctx, FallocKeepSize, limit-1, 2) }, syscall.EFBIG},
		"truncate to it":              {func() error { return f.Truncate(ctx, limit) }, nil},
	} {
		t.Run(name, func(t *testing.T) {
			before := reached.Load()
			if err := tc.call(); err != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if reached.Load() != before {
				t.Fatal("the call reached the data engine")
			}
		})
	}
}
