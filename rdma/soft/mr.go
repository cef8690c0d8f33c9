package soft

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/octofs/octofs/rdma"
)

// pd is a protection domain. It counts its memory regions and queue pairs
// so that Close can refuse while they live, as ibv_dealloc_pd does.
type pd struct {
	dev *Device

	mu     sync.Mutex
	closed bool
	mrs    int
	qps    int
}

var _ rdma.PD = (*pd)(nil)

func (p *pd) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if p.mrs > 0 || p.qps > 0 {
		return fmt.Errorf("%w: protection domain has %d memory regions and %d queue pairs", rdma.ErrBusy, p.mrs, p.qps)
	}
	p.closed = true
	return nil
}

// hold counts a new object of the PD, failing if the PD is closed.
func (p *pd) hold(mrs, qps int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("%w: protection domain", rdma.ErrClosed)
	}
	p.mrs += mrs
	p.qps += qps
	return nil
}

func (p *pd) release(mrs, qps int) {
	p.mu.Lock()
	p.mrs -= mrs
	p.qps -= qps
	p.mu.Unlock()
}

// mr is a registered memory region. Accesses by the provider bracket
// themselves with acquire and release; Dereg marks the region dead and
// waits for accesses in progress, so that once it returns the memory is
// never touched again through the region.
type mr struct {
	pd     *pd
	buf    []byte
	addr   uint64
	key    uint32
	access rdma.Access

	users   atomic.Int32
	dead    atomic.Bool
	drained chan struct{}
	once    sync.Once
}

var _ rdma.MR = (*mr)(nil)

func (m *mr) Addr() uint64        { return m.addr }
func (m *mr) Len() int            { return len(m.buf) }
func (m *mr) LKey() uint32        { return m.key }
func (m *mr) RKey() uint32        { return m.key }
func (m *mr) Access() rdma.Access { return m.access }
func (m *mr) Bytes() []byte       { return m.buf }

// RegMR registers buf. The soft provider accepts any memory, but callers
// that also run on the verbs provider should use rdma.AllocBuffer.
func (p *pd) RegMR(buf []byte, access rdma.Access) (rdma.MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty memory region", rdma.ErrInvalid)
	}
	if uint64(len(buf)) > softCaps.MaxMRSize {
		return nil, fmt.Errorf("%w: memory region of %d bytes", rdma.ErrInvalid, len(buf))
	}
	if access&^rdma.AccessAll != 0 {
		return nil, fmt.Errorf("%w: unknown access bits %#x", rdma.ErrInvalid, uint32(access))
	}
	if access&(rdma.AccessRemoteWrite|rdma.AccessRemoteAtomic) != 0 && access&rdma.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("%w: remote write and atomic access need local write (%v)", rdma.ErrInvalid, access)
	}
	if err := p.hold(1, 0); err != nil {
		return nil, err
	}
	m := &mr{
		pd:      p,
		buf:     buf,
		addr:    uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))),
		access:  access,
		drained: make(chan struct{}),
	}
	if err := p.dev.insertMR(m); err != nil {
		p.release(1, 0)
		return nil, err
	}
	return m, nil
}

// Dereg deregisters the region, waiting for accesses in progress.
func (m *mr) Dereg() error {
	if m.dead.Swap(true) {
		return fmt.Errorf("%w: memory region already deregistered", rdma.ErrInvalid)
	}
	m.pd.dev.removeMR(m)
	if m.users.Load() > 0 {
		<-m.drained
	}
	m.pd.release(1, 0)
	return nil
}

// acquire starts an access; it fails once Dereg has begun.
func (m *mr) acquire() bool {
	m.users.Add(1)
	if m.dead.Load() {
		m.release()
		return false
	}
	return true
}

func (m *mr) release() {
	if m.users.Add(-1) == 0 && m.dead.Load() {
		m.once.Do(func() { close(m.drained) })
	}
}

// span returns the bytes of [addr, addr+n) if they lie inside the region.
func (m *mr) span(addr uint64, n uint32) ([]byte, bool) {
	if addr < m.addr {
		return nil, false
	}
	off := addr - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n) : off+uint64(n)], true
}

// insertMR gives m a key and publishes it in the device's table.
func (d *Device) insertMR(m *mr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return rdma.ErrClosed
	}
	old := *d.mrs.Load()
	table := make([]*mr, len(old), len(old)+1)
	copy(table, old)
	var idx uint32
	if n := len(d.mrFree); n > 0 {
		idx = d.mrFree[n-1]
		d.mrFree = d.mrFree[:n-1]
	} else {
		if len(table) >= 1<<24 {
			return fmt.Errorf("%w: too many memory regions", rdma.ErrQueueFull)
		}
		idx = uint32(len(table))
		table = append(table, nil)
	}
	// The low byte changes with every registration, so a stale key of a
	// deregistered region does not name its successor in the same slot.
	d.mrTag++
	m.key = idx<<8 | uint32(d.mrTag)
	table[idx] = m
	d.mrs.Store(&table)
	return nil
}

func (d *Device) removeMR(m *mr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := *d.mrs.Load()
	idx := m.key >> 8
	if int(idx) >= len(old) || old[idx] != m {
		return
	}
	table := make([]*mr, len(old))
	copy(table, old)
	table[idx] = nil
	d.mrs.Store(&table)
	d.mrFree = append(d.mrFree, idx)
}

// lookupMR finds the live region with key, or nil.
func (d *Device) lookupMR(key uint32) *mr {
	table := *d.mrs.Load()
	idx := key >> 8
	if int(idx) >= len(table) {
		return nil
	}
	m := table[idx]
	if m == nil || m.key != key {
		return nil
	}
	return m
}

// lookupMRByAddr finds a live region containing [addr, addr+n), for
// inline data, whose lkey is not checked.
func (d *Device) lookupMRByAddr(addr uint64, n uint32) *mr {
	for _, m := range *d.mrs.Load() {
		if m != nil {
			if _, ok := m.span(addr, n); ok {
				return m
			}
		}
	}
	return nil
}

// localSpans resolves a scatter/gather list against local memory regions
// of pd, acquiring each region. It returns the spans, the regions to
// release, and a work completion status (WCSuccess when all is well).
// needWrite asks for local write access (receive and READ buffers).
func (d *Device) localSpans(p *pd, sgl []rdma.SGE, needWrite bool, spans [][]byte, held []*mr) ([][]byte, []*mr, rdma.WCStatus) {
	for _, s := range sgl {
		if s.Length == 0 {
			continue
		}
		m := d.lookupMR(s.LKey)
		if m == nil || m.pd != p || (needWrite && m.access&rdma.AccessLocalWrite == 0) {
			return spans, held, rdma.WCLocProtErr
		}
		b, ok := m.span(s.Addr, s.Length)
		if !ok {
			return spans, held, rdma.WCLocProtErr
		}
		if !m.acquire() {
			return spans, held, rdma.WCLocProtErr
		}
		held = append(held, m)
		spans = append(spans, b)
	}
	return spans, held, rdma.WCSuccess
}

// releaseAll releases regions acquired by localSpans and empties held.
func releaseAll(held []*mr) []*mr {
	for _, m := range held {
		m.release()
	}
	return held[:0]
}

// remoteSpan checks a remote access for the responder queue pair's PD and
// returns the region's bytes, acquired. ok is false when the key names no
// live region of the PD with access, or the range falls outside it.
func (d *Device) remoteSpan(p *pd, rkey uint32, addr uint64, n uint32, access rdma.Access) (*mr, []byte, bool) {
	if rkey == d.failKey.Load() && rkey != 0 {
		return nil, nil, false
	}
	m := d.lookupMR(rkey)
	if m == nil || m.pd != p || m.access&access == 0 {
		return nil, nil, false
	}
	b, ok := m.span(addr, n)
	if !ok || !m.acquire() {
		return nil, nil, false
	}
	return m, b, true
}
