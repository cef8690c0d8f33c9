package fuse

import (
	"context"
	"errors"
	"log/slog"
	"syscall"
)

// errno is the one place where an error of the client library becomes the
// errno a system call returns. The client already answers syscall.Errno
// for every file-system outcome; anything else is a bug or a transport
// failure the library did not classify, and becomes EIO (logged).
func errno(log *slog.Logger, op string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	}
	log.Warn("fuse: unclassified error, answering EIO", "op", op, "err", err)
	return syscall.EIO
}

// detach keeps a request's caller but drops its cancellation. The kernel
// interrupts a FUSE request whenever the calling thread gets a signal (a
// Go program's scheduler sends SIGURG every few milliseconds, a shell
// SIGCHLD), and answering such a request EINTR would fail open, mkdir or
// rename with an errno they never return on a local file system. Every
// cluster call is bounded by the client's OpTimeout anyway; only a
// blocking lock wait (Setlkw) stays interruptible, as fcntl(F_SETLKW)
// must.
func detach(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }
