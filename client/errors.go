package client

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/rdma/rpc"
)

// Sentinel errors of New and Close. Operations on files return
// syscall.Errno values instead (see errno).
var (
	// ErrConfig means the Config cannot work; the text says what to fix.
	ErrConfig = errors.New("client: bad configuration")
	// ErrClosed means the client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrUnavailable means no cluster member answered, or the cluster has
	// no map yet.
	ErrUnavailable = errors.New("client: cluster unavailable")
)

// errno is the one place where the client turns an error into what its
// callers see: a syscall.Errno. A server's errno (which the namespace
// client returns bare) passes through; no space at a chunk's owner is
// ENOSPC; the operation's deadline becomes ETIMEDOUT, a caller's
// cancellation EINTR, and any other failure (a broken connection, a
// malformed answer, a closed client) EIO, logged with its cause since the
// errno loses it. An errno wrapped inside a transport error (a refused TCP
// connection's ECONNREFUSED) is such a failure too, not an answer.
func errno(ctx context.Context, log *slog.Logger, op string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	switch {
	case errors.Is(err, dpclient.ErrNoSpace):
		return syscall.ENOSPC
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, mdclient.ErrTimeout), errors.Is(err, rpc.ErrTimeout):
		log.Warn("operation timed out", "op", op, "err", err)
		return syscall.ETIMEDOUT
	case errors.Is(err, context.Canceled):
		if ctx.Err() != nil {
			return syscall.EINTR
		}
	}
	log.Warn("operation failed", "op", op, "err", err)
	return syscall.EIO
}
