package soft

import (
	"fmt"
	"hash/maphash"
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

// mr is a registered memory region.
//
// Every access by the provider brackets itself with acquire and release,
// and an access never spans a wait for the network: it is one copy, or one
// non-blocking system call that moves what the socket holds or accepts
// (link_rx.go, link_tx.go). Dereg marks the region dead, which makes every
// later acquire fail, and waits only for the accesses in progress, so it
// returns promptly whatever a peer does, and once it returns the memory is
// never touched through the region again. The operations that find the
// region dead fail as remote (or local) access errors.
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

	// links counts, per link, the operations of a peer in progress on
	// the region that can wait for the network (a WRITE whose payload is
	// arriving, a READ response queued or being sent): Dereg fails them
	// at once (link.mrRevoked), rather than when their next byte moves.
	linksMu sync.Mutex
	links   map[*link]int
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

// Dereg deregisters the region: later accesses fail at once, and it waits
// only for an access in progress (a copy or a non-blocking system call).
func (m *mr) Dereg() error {
	if m.dead.Swap(true) {
		return fmt.Errorf("%w: memory region already deregistered", rdma.ErrInvalid)
	}
	m.pd.dev.removeMR(m)
	if m.users.Load() > 0 {
		<-m.drained
	}
	// Only now: a transmitter publishes what it sent before it releases
	// the region (link.writeOnce), so a response that is out already is
	// not revoked.
	m.linksMu.Lock()
	links := make([]*link, 0, len(m.links))
	for l := range m.links {
		links = append(links, l)
	}
	m.linksMu.Unlock()
	for _, l := range links {
		l.mrRevoked(m)
	}
	m.pd.release(1, 0)
	return nil
}

// watch records an operation of l in progress on the region; unwatch
// its end.
func (m *mr) watch(l *link) {
	m.linksMu.Lock()
	if m.links == nil {
		m.links = make(map[*link]int)
	}
	m.links[l]++
	m.linksMu.Unlock()
}

func (m *mr) unwatch(l *link) {
	m.linksMu.Lock()
	if m.links[l]--; m.links[l] <= 0 {
		delete(m.links, l)
	}
	m.linksMu.Unlock()
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

// keyGen gives memory regions their keys: a keyed permutation of a
// counter (a four-round Feistel network over the two 16-bit halves, its
// round function a hash seeded at random per device). No key repeats
// within 2^32 registrations of a device, so a stale key never names a
// later region, and keys cannot be guessed from one another or from
// their order.
type keyGen struct {
	seed  maphash.Seed
	count uint32
}

// next returns a fresh key, never 0.
func (g *keyGen) next() uint32 {
	for {
		g.count++
		if k := g.permute(g.count); k != 0 {
			return k
		}
	}
}

func (g *keyGen) permute(x uint32) uint32 {
	l, r := uint16(x>>16), uint16(x)
	for round := range uint64(4) {
		f := uint16(maphash.Comparable(g.seed, round<<16|uint64(r)))
		l, r = r, l^f
	}
	return uint32(l)<<16 | uint32(r)
}

// insertMR gives m a key and publishes it in the device's table, a map
// replaced on every change so that lookups take no lock.
func (d *Device) insertMR(m *mr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return rdma.ErrClosed
	}
	old := *d.mrs.Load()
	if len(old) >= maxMRs {
		return fmt.Errorf("%w: %d memory regions on the device", rdma.ErrQueueFull, len(old))
	}
	m.key = d.keys.next()
	table := make(map[uint32]*mr, len(old)+1)
	for k, v := range old {
		table[k] = v
	}
	table[m.key] = m
	d.mrs.Store(&table)
	return nil
}

// maxMRs bounds the memory regions of one device.
const maxMRs = 1 << 20

func (d *Device) removeMR(m *mr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := *d.mrs.Load()
	if old[m.key] != m {
		return
	}
	table := make(map[uint32]*mr, len(old))
	for k, v := range old {
		if k != m.key {
			table[k] = v
		}
	}
	d.mrs.Store(&table)
}

// lookupMR finds the live region with key, or nil.
func (d *Device) lookupMR(key uint32) *mr {
	return (*d.mrs.Load())[key]
}

// lookupMRByAddr finds a live region containing [addr, addr+n), for
// inline data, whose lkey is not checked.
func (d *Device) lookupMRByAddr(addr uint64, n uint32) *mr {
	for _, m := range *d.mrs.Load() {
		if _, ok := m.span(addr, n); ok {
			return m
		}
	}
	return nil
}

// localSpans resolves a scatter/gather list against local memory regions
// of pd. It returns the spans and their regions (one per span, not
// acquired) and a work completion status (WCSuccess when all is well).
// needWrite asks for local write access (receive and READ buffers).
func (d *Device) localSpans(p *pd, sgl []rdma.SGE, needWrite bool, spans [][]byte, owners []*mr) ([][]byte, []*mr, rdma.WCStatus) {
	for _, s := range sgl {
		if s.Length == 0 {
			continue
		}
		m := d.lookupMR(s.LKey)
		if m == nil || m.pd != p || (needWrite && m.access&rdma.AccessLocalWrite == 0) {
			return spans, owners, rdma.WCLocProtErr
		}
		b, ok := m.span(s.Addr, s.Length)
		if !ok {
			return spans, owners, rdma.WCLocProtErr
		}
		owners = append(owners, m)
		spans = append(spans, b)
	}
	return spans, owners, rdma.WCSuccess
}

// acquireAll acquires every region of owners; on failure it releases
// what it took and reports false.
func acquireAll(owners []*mr) bool {
	for i, m := range owners {
		if !m.acquire() {
			releaseAll(owners[:i])
			return false
		}
	}
	return true
}

func releaseAll(owners []*mr) {
	for _, m := range owners {
		m.release()
	}
}

// remoteSpan checks a remote access for the responder queue pair's PD and
// returns the region and its bytes (not acquired). ok is false when the
// key names no live region of the PD with access, or the range falls
// outside it.
func (d *Device) remoteSpan(p *pd, rkey uint32, addr uint64, n uint32, access rdma.Access) (*mr, []byte, bool) {
	if rkey == d.failKey.Load() && rkey != 0 {
		return nil, nil, false
	}
	m := d.lookupMR(rkey)
	if m == nil || m.pd != p || m.access&access == 0 || m.dead.Load() {
		return nil, nil, false
	}
	b, ok := m.span(addr, n)
	if !ok {
		return nil, nil, false
	}
	return m, b, true
}
