package fuse

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/octofs/octofs/client"
)

// handle is an open regular file: a client.File, plus the lock owners the
// kernel used through it.
type handle struct {
	fsys *FS
	n    *node // the inode's node, whose kernelSaw the handle's answers feed
	f    *client.File

	mu          sync.Mutex
	posixOwners map[uint64]struct{} // POSIX lock owners that locked through this handle
	flockOwner  uint64              // the flock owner (the open file description), 0 if none
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileGetattrer = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
	_ fs.FileGetlker   = (*handle)(nil)
	_ fs.FileSetlker   = (*handle)(nil)
	_ fs.FileSetlkwer  = (*handle)(nil)
	_ fs.FileLseeker   = (*handle)(nil)
)

func newHandle(fsys *FS, n *node, f *client.File) *handle {
	return &handle{fsys: fsys, n: n, f: f}
}

func (h *handle) fail(op string, err error) syscall.Errno { return errno(h.fsys.log, op, err) }

// Read reads into a registered buffer of the pool when it can get one, so
// that the bytes come by RDMA straight into the memory go-fuse writes the
// reply from (see readBuffers), else into go-fuse's buffer through the
// data engine's bounce buffer.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ctx = detach(ctx)
	pool := h.fsys.reads
	b := pool.get(len(dest))
	if b == nil {
		n, err := h.f.ReadAt(ctx, dest, off)
		if err != nil {
			return nil, h.fail("read", err)
		}
		return fuse.ReadResultData(dest[:n]), 0
	}
	n, err := h.f.ReadAt(ctx, b.Bytes()[:len(dest)], off)
	if err != nil || n == 0 {
		// go-fuse calls Done only for a reply with data.
		pool.put(b)
		if err != nil {
			return nil, h.fail("read", err)
		}
		return fuse.ReadResultData(nil), 0
	}
	return &readReply{pool: pool, buf: b, n: n}, 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	ctx = detach(ctx)
	n, err := h.f.WriteAt(ctx, data, off)
	if err != nil {
		return uint32(n), h.fail("write", err)
	}
	return uint32(n), 0
}

func (h *handle) Flush(ctx context.Context) syscall.Errno {
	ctx = detach(ctx)
	return h.fail("flush", h.f.Flush(ctx))
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	ctx = detach(ctx)
	return h.fail("fsync", h.f.Sync(ctx))
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	ctx = detach(ctx)
	h.fsys.forgetLocker(h)
	h.mu.Lock()
	flock := h.flockOwner
	h.mu.Unlock()
	if flock != 0 {
		// A flock lock belongs to the open file description, and this is
		// its end.
		h.f.SetLk(ctx, client.Lock{Kind: client.LockFlock, Type: client.LockUnlock, Owner: flock}, false)
	}
	// The kernel ignores Release's result; Flush already reported errors.
	h.f.Close(ctx)
	return 0
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	ctx = detach(ctx)
	a, err := h.f.Attr(ctx)
	if err != nil {
		return h.fail("fgetattr", err)
	}
	h.n.kernelSaw(&a)
	fillAttr(&a, &out.Attr)
	out.SetTimeout(h.fsys.o.AttrTimeout)
	return 0
}

func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	ctx = detach(ctx)
	return h.fail("fallocate", h.f.Allocate(ctx, mode, off, size))
}

// fuseLockEnd is FUSE's "to the end of the file" (OFFSET_MAX).
const fuseLockEnd = 1<<63 - 1

func toLock(owner uint64, lk *fuse.FileLock, flags uint32) client.Lock {
	l := client.Lock{Kind: client.LockPOSIX, Type: int16(lk.Typ), Owner: owner, Start: lk.Start, End: lk.End, PID: lk.Pid}
	if l.End >= fuseLockEnd {
		l.End = client.LockEOF
	}
	if flags&fuse.FUSE_LK_FLOCK != 0 {
		l.Kind = client.LockFlock
	}
	return l
}

func (h *handle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	ctx = detach(ctx)
	got, err := h.f.GetLk(ctx, toLock(owner, lk, flags))
	if err != nil {
		return h.fail("getlk", err)
	}
	out.Typ = uint32(got.Type)
	out.Start, out.End, out.Pid = got.Start, got.End, got.PID
	if got.End == client.LockEOF {
		out.End = fuseLockEnd
	}
	if got.Type == client.LockUnlock {
		out.Start, out.End, out.Pid = lk.Start, lk.End, 0
	}
	return 0
}

func (h *handle) setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	l := toLock(owner, lk, flags)
	if l.Type != client.LockUnlock {
		if l.Kind == client.LockFlock {
			h.mu.Lock()
			h.flockOwner = owner
			h.mu.Unlock()
		} else {
			h.fsys.noteLocker(h, owner)
		}
	}
	return h.fail("setlk", h.f.SetLk(ctx, l, wait))
}

func (h *handle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	ctx = detach(ctx)
	return h.setlk(ctx, owner, lk, flags, false)
}

func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.setlk(ctx, owner, lk, flags, true)
}

// Lseek answers SEEK_DATA and SEEK_HOLE (the kernel does the others)
// from the chunks' extent maps (client.File.SeekData and SeekHole).
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	ctx = detach(ctx)
	var at uint64
	var err error
	switch whence {
	case unix.SEEK_DATA:
		at, err = h.f.SeekData(ctx, off)
	case unix.SEEK_HOLE:
		at, err = h.f.SeekHole(ctx, off)
	default:
		return 0, syscall.EINVAL
	}
	if err != nil {
		return 0, h.fail("lseek", err)
	}
	return at, 0
}
