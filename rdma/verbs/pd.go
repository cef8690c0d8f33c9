//go:build verbs && cgo

package verbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"github.com/octofs/octofs/rdma"
)

// pd is a protection domain with the regions and queue pairs created in
// it, so that it can refuse to close while they live and the device can
// destroy them all when it closes.
type pd struct {
	dev *device
	pd  *C.struct_ibv_pd

	mu     sync.Mutex
	closed bool
	mrs    map[*mr]struct{}
	qps    map[*qp]struct{}
}

var _ rdma.PD = (*pd)(nil)

// RegMR registers buf. buf must be memory from mmap or C (rdma.AllocBuffer
// or a devdax mapping), not the Go heap: the pages stay pinned by the
// kernel while the region lives, and the Go runtime must not free them.
func (p *pd) RegMR(buf []byte, access rdma.Access) (rdma.MR, error) {
	// verbs' rule, checked here so every device reports it the same way.
	if access&(rdma.AccessRemoteWrite|rdma.AccessRemoteAtomic) != 0 && access&rdma.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("%w: %v without local-write", rdma.ErrInvalid, access)
	}
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty memory region", rdma.ErrInvalid)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, rdma.ErrClosed
	}
	// The address goes to C as an integer: the memory is not Go's (see
	// above), so no Go pointer crosses.
	addr := uintptr(unsafe.Pointer(&buf[0]))
	m := C.octo_reg_mr(p.pd, C.uintptr_t(addr), C.size_t(len(buf)), accessFlags(access))
	if m == nil {
		return nil, fmt.Errorf("verbs: register %d bytes at %#x: %w", len(buf), addr, regErr(errnoErr(0)))
	}
	r := &mr{pd: p, mr: m, buf: buf, access: access}
	p.mrs[r] = struct{}{}
	return r, nil
}

func (p *pd) CreateQP(cfg rdma.QPConfig) (rdma.QP, error) {
	return p.createQP(cfg)
}

// Close deallocates the PD; it fails with rdma.ErrBusy while regions or
// queue pairs of it remain.
func (p *pd) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	if n := len(p.mrs) + len(p.qps); n > 0 {
		p.mu.Unlock()
		return fmt.Errorf("%w: protection domain has %d memory regions and %d queue pairs", rdma.ErrBusy, len(p.mrs), len(p.qps))
	}
	if rc := C.ibv_dealloc_pd(p.pd); rc != 0 {
		p.mu.Unlock()
		return fmt.Errorf("verbs: dealloc PD: %w", mapErrno(syscall.Errno(rc)))
	}
	p.closed = true
	p.mu.Unlock()
	p.dev.removePD(p)
	return nil
}

// destroyAll destroys the PD's queue pairs and regions, then the PD: the
// device is closing.
func (p *pd) destroyAll() error {
	p.mu.Lock()
	qps := make([]*qp, 0, len(p.qps))
	for q := range p.qps {
		qps = append(qps, q)
	}
	mrs := make([]*mr, 0, len(p.mrs))
	for m := range p.mrs {
		mrs = append(mrs, m)
	}
	p.mu.Unlock()
	var errs []error
	for _, q := range qps {
		if err := q.Close(); err != nil && !errors.Is(err, rdma.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for _, m := range mrs {
		if err := m.Dereg(); err != nil && !errors.Is(err, rdma.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if err := p.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// regErr explains why the kernel refused to pin memory.
func regErr(e syscall.Errno) error {
	switch e {
	case syscall.EOPNOTSUPP:
		return fmt.Errorf("%w (%v: the kernel refuses long-term pins of this memory; fsdax mappings cannot be registered, export devdax)", rdma.ErrInvalid, e)
	case syscall.ENOMEM, syscall.EPERM:
		return fmt.Errorf("%w (%v: pinning exceeds RLIMIT_MEMLOCK; raise it (ulimit -l, LimitMEMLOCK=) or grant CAP_IPC_LOCK)", rdma.ErrInvalid, e)
	case syscall.EFAULT:
		return fmt.Errorf("%w (%v: the range is not mapped)", rdma.ErrInvalid, e)
	}
	return mapErrno(e)
}

// mr is a registered memory region.
type mr struct {
	pd     *pd
	mr     *C.struct_ibv_mr
	buf    []byte
	access rdma.Access

	mu     sync.Mutex
	closed bool
}

var _ rdma.MR = (*mr)(nil)

func (m *mr) Addr() uint64        { return uint64(uintptr(unsafe.Pointer(&m.buf[0]))) }
func (m *mr) Len() int            { return len(m.buf) }
func (m *mr) LKey() uint32        { return uint32(m.mr.lkey) }
func (m *mr) RKey() uint32        { return uint32(m.mr.rkey) }
func (m *mr) Access() rdma.Access { return m.access }
func (m *mr) Bytes() []byte       { return m.buf }

// Dereg deregisters the region; ibv_dereg_mr returns once the device no
// longer accesses it.
func (m *mr) Dereg() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return rdma.ErrClosed
	}
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		return fmt.Errorf("verbs: deregister: %w", mapErrno(syscall.Errno(rc)))
	}
	m.closed = true
	m.pd.mu.Lock()
	delete(m.pd.mrs, m)
	m.pd.mu.Unlock()
	return nil
}
