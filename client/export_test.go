package client

import (
	"context"

	"github.com/octofs/octofs/dataplane/dpclient"
)

// TestingWriteData writes p at off of ino through the data engine and
// persists it, below the namespace (for tests of the wiring).
func TestingWriteData(c *Client, ctx context.Context, ino uint64, p []byte, off uint64) error {
	if err := c.data.WriteAt(ctx, ino, p, off); err != nil {
		return err
	}
	return c.data.Persist(ctx, ino)
}

// TestingReadData reads p at off of ino through the data engine.
func TestingReadData(c *Client, ctx context.Context, ino uint64, p []byte, off uint64) error {
	return c.data.ReadAt(ctx, ino, p, off)
}

// TestingDataUsed is the bytes in file blocks over the cluster's nodes,
// as the chunk services count them (freed blocks leave it at once, before
// their quarantine ends).
func TestingDataUsed(c *Client, ctx context.Context) (uint64, error) {
	e, ok := c.data.(*dpclient.Engine)
	if !ok {
		return 0, nil
	}
	cp, err := e.StatFS(ctx)
	return cp.Used, err
}
