//go:build verbs && cgo

package verbs

/*
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/octofs/octofs/rdma"
	"golang.org/x/sys/unix"
)

// ProviderName is the name package rdma/provider registers this provider
// under.
const ProviderName = "verbs"

// maxInlineProbe bounds the inline size Open probes for.
const maxInlineProbe = 1024

// device is an open ibv_context with the port and GID it uses.
type device struct {
	ctx  *C.struct_ibv_context
	name string
	log  *slog.Logger

	port            uint8
	ethernet        bool   // RoCE or rxe: peers are addressed by GID (GRH)
	activeMTU       uint32 // bytes
	lid             uint16
	gidIndex        int
	gid             [16]byte
	caps            rdma.Caps
	maxQPInitRdAtom int
	maxQPRdAtom     int

	// async reads the device's asynchronous events (CQ overrun, QP
	// errors) from a dup of its event fd through the Go poller.
	async     *os.File
	asyncDone chan struct{}
	asyncEv   *C.struct_ibv_async_event

	mu     sync.Mutex
	closed bool
	pds    map[*pd]struct{}
	cqs    map[*C.struct_ibv_cq]*cq
	qps    map[uint32]*qp // by QPN, for error completions and events
}

var _ rdma.Device = (*device)(nil)

// Open opens a device as cfg describes: by name, or the first device whose
// port is active.
func Open(cfg rdma.DeviceConfig) (rdma.Device, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	port := cfg.Port
	if port == 0 {
		port = 1
	}
	var n C.int
	list := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, fmt.Errorf("%w: verbs: list devices: %v (is the ib_uverbs module loaded?)", rdma.ErrNoDevice, errnoErr(0))
	}
	defer C.ibv_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	if len(devs) == 0 {
		return nil, fmt.Errorf("%w: verbs: no RDMA devices (for Soft-RoCE: modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0)", rdma.ErrNoDevice)
	}
	var names []string
	for _, d := range devs {
		name := C.GoString(C.ibv_get_device_name(d))
		names = append(names, name)
		if cfg.Device != "" && name != cfg.Device {
			continue
		}
		ctx := C.ibv_open_device(d)
		if ctx == nil {
			err := fmt.Errorf("verbs: open %s: %w", name, errnoErr(0))
			if cfg.Device != "" {
				return nil, err
			}
			log.Debug("skipping device", "device", name, "err", err)
			continue
		}
		dev, err := newDevice(ctx, name, port, cfg, log)
		if err != nil {
			C.ibv_close_device(ctx)
			if cfg.Device != "" {
				return nil, err
			}
			log.Debug("skipping device", "device", name, "err", err)
			continue
		}
		return dev, nil
	}
	if cfg.Device != "" {
		return nil, fmt.Errorf("%w: verbs: no device %q (have %v)", rdma.ErrNoDevice, cfg.Device, names)
	}
	return nil, fmt.Errorf("%w: verbs: no device with port %d active (have %v)", rdma.ErrNoDevice, port, names)
}

func newDevice(ctx *C.struct_ibv_context, name string, port uint8, cfg rdma.DeviceConfig, log *slog.Logger) (*device, error) {
	d := &device{
		ctx: ctx, name: name, log: log.With("device", name), port: port,
		pds: map[*pd]struct{}{}, cqs: map[*C.struct_ibv_cq]*cq{}, qps: map[uint32]*qp{},
	}
	var pa C.struct_ibv_port_attr
	if rc := C.octo_query_port(ctx, C.uint8_t(port), &pa); rc != 0 {
		return nil, fmt.Errorf("%w: verbs: %s port %d: %v", rdma.ErrNoDevice, name, port, syscall.Errno(rc))
	}
	if pa.state != C.IBV_PORT_ACTIVE {
		return nil, fmt.Errorf("%w: verbs: %s port %d is not active (state %d; for rxe: is its netdev up?)", rdma.ErrNoDevice, name, port, pa.state)
	}
	d.ethernet = pa.link_layer == C.IBV_LINK_LAYER_ETHERNET
	d.activeMTU = mtuBytes(int(pa.active_mtu))
	d.lid = uint16(pa.lid)

	if err := d.chooseGID(cfg.GIDIndex); err != nil {
		return nil, err
	}

	var da C.struct_ibv_device_attr
	if rc := C.ibv_query_device(ctx, &da); rc != 0 {
		return nil, fmt.Errorf("verbs: query %s: %w", name, syscall.Errno(rc))
	}
	d.maxQPRdAtom = int(da.max_qp_rd_atom)
	d.maxQPInitRdAtom = int(da.max_qp_init_rd_atom)
	d.caps = rdma.Caps{
		MaxQPWR:       int(da.max_qp_wr),
		MaxSGE:        int(da.max_sge),
		MaxCQE:        int(da.max_cqe),
		MaxMRSize:     uint64(da.max_mr_size),
		MaxMsgSize:    uint32(pa.max_msg_sz),
		MaxRdAtomic:   min(int(da.max_qp_rd_atom), int(da.max_qp_init_rd_atom)),
		Atomics:       da.atomic_cap != C.IBV_ATOMIC_NONE,
		AtomicsGlobal: da.atomic_cap == C.IBV_ATOMIC_GLOB,
	}
	inline, err := d.probeMaxInline()
	if err != nil {
		return nil, err
	}
	d.caps.MaxInline = inline

	if err := d.startAsync(); err != nil {
		return nil, err
	}
	d.log.Debug("opened", "port", port, "ethernet", d.ethernet, "mtu", d.activeMTU,
		"lid", d.lid, "gid_index", d.gidIndex, "gid", fmtGID(d.gid), "caps", d.caps)
	return d, nil
}

// chooseGID picks the GID the device's queue pairs use as source: the
// configured index, or for Ethernet ports a RoCE v2 GID (IPv4-mapped
// first, then global IPv6, then link-local IPv6); InfiniBand ports use
// index 0 and address peers by LID.
func (d *device) chooseGID(want int) error {
	var table [256]C.struct_octo_gid
	n := C.octo_gid_table(d.ctx, C.uint8_t(d.port), &table[0], C.int(len(table)))
	if n < 0 {
		return fmt.Errorf("verbs: %s: read GID table: %w", d.name, errnoErr(0))
	}
	entries := make([]gidEntry, 0, int(n))
	for _, e := range table[:n] {
		var g gidEntry
		for i := range g.gid {
			g.gid[i] = byte(e.gid[i])
		}
		g.index, g.typ = int(e.index), int(e._type)
		entries = append(entries, g)
	}
	idx, err := pickGID(entries, want, d.ethernet)
	if err != nil {
		return fmt.Errorf("%w: verbs: %s port %d: %v", rdma.ErrNoDevice, d.name, d.port, err)
	}
	d.gidIndex = idx
	for _, e := range entries {
		if e.index == idx {
			d.gid = e.gid
		}
	}
	return nil
}

// probeMaxInline finds the device's inline limit, which verbs does not
// report, by creating probe queue pairs.
func (d *device) probeMaxInline() (int, error) {
	pd := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return 0, fmt.Errorf("verbs: %s: alloc PD: %w", d.name, errnoErr(0))
	}
	defer C.ibv_dealloc_pd(pd)
	cq := C.ibv_create_cq(d.ctx, 2, nil, nil, 0)
	if cq == nil {
		return 0, fmt.Errorf("verbs: %s: create CQ: %w", d.name, errnoErr(0))
	}
	defer C.ibv_destroy_cq(cq)
	return int(C.octo_max_inline(pd, cq, maxInlineProbe)), nil
}

// startAsync makes the async event fd non-blocking and reads it from a
// goroutine parked in the Go poller.
func (d *device) startAsync() error {
	fd := int(d.ctx.async_fd)
	if C.octo_set_nonblock(C.int(fd)) != 0 {
		return fmt.Errorf("verbs: %s: async fd: %w", d.name, errnoErr(0))
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("verbs: %s: dup async fd: %w", d.name, err)
	}
	d.async = os.NewFile(uintptr(dup), d.name+"-async")
	d.asyncEv = (*C.struct_ibv_async_event)(C.calloc(1, C.sizeof_struct_ibv_async_event))
	d.asyncDone = make(chan struct{})
	rc, err := d.async.SyscallConn()
	if err != nil {
		d.async.Close()
		C.free(unsafe.Pointer(d.asyncEv))
		return fmt.Errorf("verbs: %s: async fd: %w", d.name, err)
	}
	go func() {
		defer close(d.asyncDone)
		for {
			err := rc.Read(func(uintptr) bool { return d.readAsyncEvents() })
			if err != nil {
				return // closed by Close
			}
		}
	}()
	return nil
}

// readAsyncEvents handles every queued async event and reports whether the
// fd needs no more waiting (false: wait for readability).
func (d *device) readAsyncEvents() bool {
	for {
		var typ C.uint32_t
		var elem unsafe.Pointer
		if C.octo_get_async_event(d.ctx, d.asyncEv, &typ, &elem) != 0 {
			return false // EAGAIN (or an error: wait and retry)
		}
		d.handleAsync(uint32(typ), elem)
	}
}

func (d *device) handleAsync(typ uint32, elem unsafe.Pointer) {
	switch typ {
	case C.IBV_EVENT_CQ_ERR:
		d.mu.Lock()
		c := d.cqs[(*C.struct_ibv_cq)(elem)]
		d.mu.Unlock()
		if c != nil {
			c.overrun.Store(true)
		}
		d.log.Warn("completion queue overrun")
	case C.IBV_EVENT_QP_FATAL, C.IBV_EVENT_QP_REQ_ERR, C.IBV_EVENT_QP_ACCESS_ERR:
		qpn := uint32(0)
		if elem != nil {
			qpn = uint32((*C.struct_ibv_qp)(elem).qp_num)
			d.qpFailed(qpn)
		}
		d.log.Debug("queue pair error event", "event", C.GoString(C.ibv_event_type_str(C.enum_ibv_event_type(typ))), "qpn", qpn)
	default:
		d.log.Debug("async event", "event", C.GoString(C.ibv_event_type_str(C.enum_ibv_event_type(typ))))
	}
}

func (d *device) Name() string     { return d.name }
func (d *device) Provider() string { return ProviderName }
func (d *device) Caps() rdma.Caps  { return d.caps }

func (d *device) AllocPD() (rdma.PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, rdma.ErrClosed
	}
	p := C.ibv_alloc_pd(d.ctx)
	if p == nil {
		return nil, fmt.Errorf("verbs: alloc PD: %w", mapErrno(errnoErr(0)))
	}
	pd := &pd{dev: d, pd: p, mrs: map[*mr]struct{}{}, qps: map[*qp]struct{}{}}
	d.pds[pd] = struct{}{}
	return pd, nil
}

// Close destroys everything created from the device, then closes it.
func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	pds := make([]*pd, 0, len(d.pds))
	for p := range d.pds {
		pds = append(pds, p)
	}
	cqs := make([]*cq, 0, len(d.cqs))
	for _, c := range d.cqs {
		cqs = append(cqs, c)
	}
	d.mu.Unlock()

	var errs []error
	for _, p := range pds {
		errs = append(errs, p.destroyAll())
	}
	for _, c := range cqs {
		if err := c.Close(); err != nil && !errors.Is(err, rdma.ErrClosed) {
			errs = append(errs, err)
		}
	}
	d.async.Close()
	<-d.asyncDone
	C.free(unsafe.Pointer(d.asyncEv))
	if rc := C.ibv_close_device(d.ctx); rc != 0 {
		errs = append(errs, fmt.Errorf("verbs: close %s: %w", d.name, syscall.Errno(rc)))
	}
	return errors.Join(errs...)
}

// register/unregister keep the lookups async events and completions need.
func (d *device) addCQ(c *cq) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return rdma.ErrClosed
	}
	d.cqs[c.cq] = c
	return nil
}

func (d *device) removeCQ(c *cq) {
	d.mu.Lock()
	delete(d.cqs, c.cq)
	d.mu.Unlock()
}

func (d *device) addQP(q *qp) {
	d.mu.Lock()
	d.qps[q.qpn] = q
	d.mu.Unlock()
}

func (d *device) removeQP(q *qp) {
	d.mu.Lock()
	if d.qps[q.qpn] == q {
		delete(d.qps, q.qpn)
	}
	d.mu.Unlock()
}

// qpFailed notes that queue pair qpn is in Err (an error completion or
// event said so).
func (d *device) qpFailed(qpn uint32) {
	d.mu.Lock()
	q := d.qps[qpn]
	d.mu.Unlock()
	if q != nil {
		q.failed.Store(true)
	}
}

func (d *device) removePD(p *pd) {
	d.mu.Lock()
	delete(d.pds, p)
	d.mu.Unlock()
}
