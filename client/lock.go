package client

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// Advisory locks are held by the inode's owner, in its memory, for this
// client's session and the lock's owner: they are cluster-wide, vanish
// when this client's session ends (Close, or a lease that runs out), and
// are lost if the owning node restarts (as NFSv3 locks without lockd
// recovery). A blocking request polls the owner with backoff, so a waiter
// takes the lock at most lockPollMax after it is released.

// Backoff of a blocking lock request.
const (
	lockPollMin = time.Millisecond
	lockPollMax = 100 * time.Millisecond
)

// GetLk returns the first lock held by another owner that conflicts with
// lk, or lk with Type LockUnlock if none does (F_GETLK). lk.Owner 0 means
// this File's own owner.
func (f *File) GetLk(ctx context.Context, lk Lock) (Lock, error) {
	if f.closed.Load() {
		return Lock{}, syscall.EBADF
	}
	if err := checkLock(&lk); err != nil {
		return Lock{}, err
	}
	if lk.Owner == 0 {
		lk.Owner = f.lockOwner
	}
	octx, cancel, err := f.c.op(ctx)
	defer cancel()
	if err != nil {
		return Lock{}, f.c.fail(ctx, "getlk", err)
	}
	got, err := f.c.ns.GetLk(octx, f.oi.ino, lk)
	return got, f.c.fail(ctx, "getlk", err)
}

// SetLk takes, changes or releases (LockUnlock) an advisory lock
// (F_SETLK, flock). A conflicting lock is EAGAIN; with wait (F_SETLKW,
// flock without LOCK_NB) the call instead retries until the lock is free
// or ctx ends (EINTR). lk.Owner 0 means this File's own owner, released
// when the File closes.
func (f *File) SetLk(ctx context.Context, lk Lock, wait bool) error {
	if f.closed.Load() {
		return syscall.EBADF
	}
	if err := checkLock(&lk); err != nil {
		return err
	}
	switch {
	case lk.Type == LockRead && !f.readable(), lk.Type == LockWrite && !f.writable():
		if lk.Kind == LockPOSIX {
			return syscall.EBADF
		}
	}
	if lk.Owner == 0 {
		lk.Owner = f.lockOwner
		if lk.Type != LockUnlock {
			f.locked.Store(true)
		}
	}
	delay := lockPollMin
	for {
		err := f.setLkOnce(ctx, lk)
		if !wait || !errors.Is(err, syscall.EAGAIN) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return syscall.EINTR
		case <-t.C:
		}
		delay = min(2*delay, lockPollMax)
	}
}

func (f *File) setLkOnce(ctx context.Context, lk Lock) error {
	octx, cancel, err := f.c.op(ctx)
	defer cancel()
	if err != nil {
		return f.c.fail(ctx, "setlk", err)
	}
	return f.c.fail(ctx, "setlk", f.c.ns.SetLk(octx, f.oi.ino, lk))
}

// checkLock validates a lock request; a flock lock always covers the
// whole file.
func checkLock(lk *Lock) error {
	switch lk.Type {
	case LockRead, LockWrite, LockUnlock:
	default:
		return syscall.EINVAL
	}
	switch lk.Kind {
	case LockFlock:
		lk.Start, lk.End = 0, LockEOF
	case LockPOSIX:
		if lk.End < lk.Start {
			return syscall.EINVAL
		}
	default:
		return syscall.EINVAL
	}
	return nil
}
