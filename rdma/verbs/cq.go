//go:build verbs && cgo

package verbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/octofs/octofs/rdma"
	"golang.org/x/sys/unix"
)

// pollBatch is how many completions one ibv_poll_cq call moves; Poll loops
// for larger slices.
const pollBatch = 32

// cq is a completion queue with its own completion channel, so that Wait
// can sleep in the Go poller on the channel's fd.
type cq struct {
	dev     *device
	cq      *C.struct_ibv_cq
	ch      *C.struct_ibv_comp_channel
	overrun atomic.Bool // set by the device's async event reader

	// mu guards the C scratch arrays, closed and refs.
	mu      sync.Mutex
	closed  bool
	refs    int // queue pairs using this CQ
	scratch *C.struct_ibv_wc
	out     []C.struct_octo_wc // C memory, pollBatch entries

	// Wait parks on file, a dup of the channel's non-blocking fd; waitSem
	// admits one waiter at a time, so that a context's wake-up (a read
	// deadline) only ever hits its own Wait.
	file    *os.File
	raw     syscall.RawConn
	waitSem chan struct{}
}

var _ rdma.CQ = (*cq)(nil)

func (d *device) CreateCQ(depth int) (rdma.CQ, error) {
	if depth <= 0 || depth > d.caps.MaxCQE {
		return nil, fmt.Errorf("%w: CQ depth %d (device allows 1..%d)", rdma.ErrInvalid, depth, d.caps.MaxCQE)
	}
	ch := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return nil, fmt.Errorf("verbs: create completion channel: %w", mapErrno(errnoErr(0)))
	}
	fail := func(err error) (rdma.CQ, error) {
		C.ibv_destroy_comp_channel(ch)
		return nil, err
	}
	if C.octo_set_nonblock(ch.fd) != 0 {
		return fail(fmt.Errorf("verbs: completion channel: %w", errnoErr(0)))
	}
	dup, err := unix.FcntlInt(uintptr(ch.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("verbs: dup completion channel: %w", err))
	}
	file := os.NewFile(uintptr(dup), "verbs-cq")
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return fail(fmt.Errorf("verbs: completion channel: %w", err))
	}
	c := C.ibv_create_cq(d.ctx, C.int(depth), nil, ch, 0)
	if c == nil {
		file.Close()
		return fail(fmt.Errorf("verbs: create CQ of %d: %w", depth, mapErrno(errnoErr(0))))
	}
	q := &cq{
		dev: d, cq: c, ch: ch, file: file, raw: raw, waitSem: make(chan struct{}, 1),
		scratch: (*C.struct_ibv_wc)(C.calloc(pollBatch, C.sizeof_struct_ibv_wc)),
		out:     unsafe.Slice((*C.struct_octo_wc)(C.calloc(pollBatch, C.sizeof_struct_octo_wc)), pollBatch),
	}
	if err := d.addCQ(q); err != nil {
		q.destroy()
		return nil, err
	}
	return q, nil
}

// Poll moves up to len(wc) completions into wc without allocating.
func (c *cq) Poll(wc []rdma.WorkCompletion) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, rdma.ErrClosed
	}
	if c.overrun.Load() {
		return 0, rdma.ErrCQOverrun
	}
	got := 0
	for got < len(wc) {
		want := min(len(wc)-got, pollBatch)
		n := int(C.octo_poll_cq(c.cq, C.int(want), c.scratch, &c.out[0]))
		if n < 0 {
			// A negative count is the driver's own code (mlx5: -2), not an errno.
			return got, fmt.Errorf("verbs: poll CQ: %w (ibv_poll_cq returned %d)", syscall.EIO, n)
		}
		for i := range n {
			o := &c.out[i]
			w := &wc[got+i]
			w.ID = uint64(o.wr_id)
			w.Status = wcStatus(uint32(o.status))
			w.QPN = uint32(o.qp_num)
			if w.Status == rdma.WCSuccess {
				w.Opcode = wcOpcode(uint32(o.opcode))
				w.ByteLen = uint32(o.byte_len)
				w.HasImm = o.wc_flags&C.IBV_WC_WITH_IMM != 0
				w.Imm = uint32(o.imm)
			} else {
				w.Opcode, w.ByteLen, w.Imm, w.HasImm = 0, 0, 0, false
				c.dev.qpFailed(w.QPN) // an RC error completion means Err
			}
		}
		got += n
		if n < want {
			break
		}
	}
	return got, nil
}

// longAgo is a read deadline in the past: setting it wakes a parked Wait.
var longAgo = time.Unix(1, 0)

// Wait polls; if the CQ is empty it arms the completion channel, polls
// again (a completion may have arrived before arming) and sleeps in the Go
// poller until the channel fires or ctx ends.
func (c *cq) Wait(ctx context.Context, wc []rdma.WorkCompletion) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	select {
	case c.waitSem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-c.waitSem }()
	for {
		if n, err := c.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if rc := C.octo_req_notify_cq(c.cq); rc != 0 {
			return 0, fmt.Errorf("verbs: arm CQ: %w", errnoErr(int(rc)))
		}
		if n, err := c.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		stop := context.AfterFunc(ctx, func() { c.file.SetReadDeadline(longAgo) })
		err := c.raw.Read(func(uintptr) bool { return C.octo_get_cq_event(c.ch) == 0 })
		if !stop() {
			// The context ended: its wake-up ran or is running.
			return 0, ctx.Err()
		}
		switch {
		case err == nil:
		case c.isClosed():
			// Close closed the file under us (RawConn reports that as
			// poll's "use of closed file", not os.ErrClosed).
			return 0, rdma.ErrClosed
		case errors.Is(err, os.ErrDeadlineExceeded):
			// A wake-up left over from an earlier Wait's context.
			c.file.SetReadDeadline(time.Time{})
		case errors.Is(err, os.ErrClosed):
			return 0, rdma.ErrClosed
		default:
			return 0, fmt.Errorf("verbs: wait for completion: %w", err)
		}
	}
}

// Close destroys the CQ; it fails with rdma.ErrBusy while queue pairs use
// it. A Wait in progress returns rdma.ErrClosed.
func (c *cq) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return rdma.ErrClosed
	}
	if c.refs > 0 {
		n := c.refs
		c.mu.Unlock()
		return fmt.Errorf("%w: %d queue pairs use the completion queue", rdma.ErrBusy, n)
	}
	c.closed = true
	c.mu.Unlock()
	c.file.Close()                 // wakes a parked Wait
	c.waitSem <- struct{}{}        // and waits for it to leave
	defer func() { <-c.waitSem }() // later Waits find the CQ closed
	c.dev.removeCQ(c)
	return c.destroy()
}

func (c *cq) destroy() error {
	c.file.Close()
	var err error
	if rc := C.ibv_destroy_cq(c.cq); rc != 0 {
		err = fmt.Errorf("verbs: destroy CQ: %w", mapErrno(syscall.Errno(rc)))
	}
	if rc := C.ibv_destroy_comp_channel(c.ch); rc != 0 && err == nil {
		err = fmt.Errorf("verbs: destroy completion channel: %w", mapErrno(syscall.Errno(rc)))
	}
	C.free(unsafe.Pointer(c.scratch))
	C.free(unsafe.Pointer(&c.out[0]))
	return err
}

func (c *cq) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// ref and unref count the queue pairs that use the CQ.
func (c *cq) ref() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return rdma.ErrClosed
	}
	c.refs++
	return nil
}

func (c *cq) unref() {
	c.mu.Lock()
	c.refs--
	c.mu.Unlock()
}
