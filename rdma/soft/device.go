package soft

import (
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/octofs/octofs/rdma"
)

// Device is a soft RDMA device: a user-space NIC listening on a TCP
// address. It implements rdma.Device and rdma.Faults.
type Device struct {
	name string
	addr string // what peers dial: the listener's address
	log  *slog.Logger
	ln   net.Listener

	mu     sync.Mutex
	closed bool
	qps    map[uint32]*qp
	conns  map[net.Conn]struct{} // every TCP connection, for Close and DropConnections
	// mrs is the table of memory regions by key, replaced on every change
	// (mr.go), so that the hot path looks a key up without a lock.
	mrs  atomic.Pointer[map[uint32]*mr]
	keys keyGen

	delay   atomic.Int64  // response delay in nanoseconds (Faults)
	failKey atomic.Uint32 // rkey to reject (Faults)

	rnrNAKs, resent, timeouts, connsLost, ackFrames atomic.Uint64 // see Stats

	// The janitor's list of links (janitor.go). janMu is taken after
	// qp.mu.
	janMu      sync.Mutex
	janList    map[*link]struct{}
	janRunning bool
	janClosed  bool
	janTick    time.Duration // the janitor's current period

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

var (
	_ rdma.Device = (*Device)(nil)
	_ rdma.Faults = (*Device)(nil)
)

// Capabilities of every soft device.
var softCaps = rdma.Caps{
	MaxQPWR:       1 << 14,
	MaxSGE:        32,
	MaxInline:     1024,
	MaxCQE:        1 << 20,
	MaxMRSize:     1 << 40,
	MaxMsgSize:    maxMsgSize,
	MaxRdAtomic:   maxRdAtomic,
	Atomics:       true,
	AtomicsGlobal: true,
}

// maxRdAtomic is how many READs and atomics a queue pair has outstanding
// at most, as requester (and so as responder: see responder.go).
const maxRdAtomic = 16

// Open opens a soft device whose NIC listens on cfg.Addr (default
// 127.0.0.1:0). The address must be one that peers can reach: an
// unspecified host such as 0.0.0.0 is refused, because the address is what
// this device advertises in its queue pairs' endpoints.
func Open(cfg rdma.DeviceConfig) (*Device, error) {
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: soft device address %q: %v", rdma.ErrInvalid, addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return nil, fmt.Errorf("%w: soft device address %q: give the address peers reach this node at, not a wildcard", rdma.ErrInvalid, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rdma/soft: listen on %s: %w", addr, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Device{
		addr:    ln.Addr().String(),
		ln:      ln,
		qps:     make(map[uint32]*qp),
		conns:   make(map[net.Conn]struct{}),
		keys:    keyGen{seed: maphash.MakeSeed()},
		janList: make(map[*link]struct{}),
		done:    make(chan struct{}),
	}
	d.name = "soft:" + d.addr
	d.log = log.With("device", d.name)
	empty := make(map[uint32]*mr)
	d.mrs.Store(&empty)
	d.wg.Add(1)
	go d.acceptLoop()
	return d, nil
}

// Name is "soft:" followed by the NIC's address.
func (d *Device) Name() string { return d.name }

// Provider is "soft".
func (d *Device) Provider() string { return "soft" }

// Addr is the address the device's NIC listens on.
func (d *Device) Addr() string { return d.addr }

// Caps reports the soft provider's limits.
func (d *Device) Caps() rdma.Caps { return softCaps }

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (rdma.PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, rdma.ErrClosed
	}
	return &pd{dev: d}, nil
}

// CreateCQ creates a completion queue of depth entries.
func (d *Device) CreateCQ(depth int) (rdma.CQ, error) {
	if depth <= 0 || depth > softCaps.MaxCQE {
		return nil, fmt.Errorf("%w: CQ depth %d (1 to %d)", rdma.ErrInvalid, depth, softCaps.MaxCQE)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, rdma.ErrClosed
	}
	return newCQ(depth), nil
}

// Close destroys every queue pair, closes every connection and stops the
// NIC. Peers see their connections drop.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	qps := slices.Collect(maps.Values(d.qps))
	d.mu.Unlock()
	d.janMu.Lock()
	d.janClosed = true
	close(d.done)
	d.janMu.Unlock()
	d.ln.Close()
	for _, q := range qps {
		q.Close()
	}
	d.DropConnections()
	d.wg.Wait()
	return nil
}

// DropConnections severs every TCP connection of the device, as a link
// failure would. Queue pairs that had a connection move to the error
// state: their oldest outstanding request completes with WCRetryExcErr
// and the rest, receives included, are flushed. Their peers see the same.
func (d *Device) DropConnections() {
	d.mu.Lock()
	conns := slices.Collect(maps.Keys(d.conns))
	d.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Stats counts the device's transport events since it was opened.
type Stats struct {
	// RNRNAKs is how many requests this device refused, as a
	// responder, for want of a posted receive.
	RNRNAKs uint64
	// Resent is how many requests this device sent again after an RNR
	// NAK (the NAKed one and those that followed it).
	Resent uint64
	// Timeouts is how many queue pairs failed because their peer did
	// not answer within the transport timeout.
	Timeouts uint64
	// ConnectionsLost is how many links broke while their queue pair
	// was in use.
	ConnectionsLost uint64
	// ACKFrames is how many acknowledgements this device sent in frames
	// of their own, rather than riding on a frame going the same way.
	ACKFrames uint64
}

// Stats returns the device's counters.
func (d *Device) Stats() Stats {
	return Stats{RNRNAKs: d.rnrNAKs.Load(), Resent: d.resent.Load(), Timeouts: d.timeouts.Load(), ConnectionsLost: d.connsLost.Load(), ACKFrames: d.ackFrames.Load()}
}

// SetDelay delays the responses this device sends (READ data, atomic
// results, acknowledgements, NAKs) by about delay: at least delay for a
// response to a request that arrives while none is pending.
func (d *Device) SetDelay(delay time.Duration) { d.delay.Store(int64(delay)) }

// FailKey makes the device reject rkey as a responder, as if it named no
// memory region; FailKey(0) clears it.
func (d *Device) FailKey(rkey uint32) { d.failKey.Store(rkey) }

// newQPN returns a random unused queue pair number (24 bits, not 0 or 1),
// so that a peer cannot guess the numbers of other queue pairs from its
// own. The caller holds d.mu.
func (d *Device) newQPNLocked() uint32 {
	for {
		n := rand.Uint32() & 0xffffff
		if _, used := d.qps[n]; !used && n > 1 {
			return n
		}
	}
}

func (d *Device) acceptLoop() {
	defer d.wg.Done()
	for {
		nc, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.serveIncoming(nc)
		}()
	}
}

// helloTimeout bounds how long a new connection may take to say hello,
// and how long a hello waits for its queue pair to be ready (see accept).
const helloTimeout = 10 * time.Second

// serveIncoming reads a dialer's hello and hands the connection to the
// addressed queue pair, or refuses it.
func (d *Device) serveIncoming(nc net.Conn) {
	if !d.track(nc) {
		return
	}
	nc.SetDeadline(time.Now().Add(helloTimeout))
	h, err := readHello(nc)
	if err != nil {
		d.log.Debug("dropping connection with bad hello", "remote", nc.RemoteAddr(), "err", err)
		d.untrack(nc)
		return
	}
	d.mu.Lock()
	q := d.qps[h.DstQPN]
	d.mu.Unlock()
	if q == nil {
		refuse(nc, helloNoQP)
		d.untrack(nc)
		return
	}
	q.accept(nc, h)
}

// refuse answers a hello with a refusal and closes the connection.
func refuse(nc net.Conn, s helloStatus) {
	a := helloAnswer{Status: s}
	nc.Write(a.marshal())
	nc.Close()
}

// track registers nc with the device, or closes it if the device is
// closed.
func (d *Device) track(nc net.Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		nc.Close()
		return false
	}
	d.conns[nc] = struct{}{}
	return true
}

// untrack closes nc and forgets it.
func (d *Device) untrack(nc net.Conn) {
	nc.Close()
	d.mu.Lock()
	delete(d.conns, nc)
	d.mu.Unlock()
}

// responseDelay reports the injected response delay, if any.
func (d *Device) responseDelay() time.Duration { return time.Duration(d.delay.Load()) }
