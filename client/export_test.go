package client

import "context"

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
