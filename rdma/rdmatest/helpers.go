package rdmatest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/octofs/octofs/rdma"
)

// DefaultWaitTimeout bounds every wait of the suite when
// Provider.WaitTimeout is zero. It is generous because CI machines are
// shared and the race detector slows the soft provider down; a correct
// provider finishes every wait in a small fraction of it.
const DefaultWaitTimeout = 10 * time.Second

// Transport holds a queue pair's retry attributes (see rdma.QPAttr). Zero
// fields pick the defaults below, so a test cannot ask for zero retries;
// the suite never needs to.
type Transport struct {
	// Timeout is the local ACK timeout exponent (default 16, ~268 ms).
	Timeout uint8
	// RetryCount is the transport retry count (default 3).
	RetryCount uint8
	// RNRRetry is the RNR retry count (default 7: forever).
	RNRRetry uint8
	// MinRNRTimer is the responder's RNR NAK timer (default 12, 0.64 ms).
	MinRNRTimer rdma.RNRTimer
}

func (tr Transport) withDefaults() Transport {
	if tr.Timeout == 0 {
		tr.Timeout = 16
	}
	if tr.RetryCount == 0 {
		tr.RetryCount = 3
	}
	if tr.RNRRetry == 0 {
		tr.RNRRetry = 7
	}
	if tr.MinRNRTimer == 0 {
		tr.MinRNRTimer = 12
	}
	return tr
}

// Budget is how long a requester with these attributes may take to give up
// on a silent peer: (RetryCount+1) ACK timeouts. It is what IB allows, not
// what a provider must take; tests wait a few times longer than this.
func (tr Transport) Budget() time.Duration {
	tr = tr.withDefaults()
	ack := time.Duration(4096<<tr.Timeout) * time.Nanosecond
	return time.Duration(tr.RetryCount+1) * ack
}

// Options configure NewPair and NewSide. Zero values pick defaults.
type Options struct {
	// BufSize is the size of each node's registered buffer (default 64 KiB).
	BufSize int
	// MRAccess is the access of each node's buffer (default rdma.AccessAll).
	MRAccess rdma.Access
	// QPAccess is the remote access each queue pair grants at Init
	// (default remote read, write and atomic).
	QPAccess rdma.Access
	// CQDepth sizes each completion queue (default 256).
	CQDepth int
	// QP sizes the queue pairs (defaults: 64 WRs and 4 SGEs per queue, up
	// to 64 bytes inline); NewSide fills in its completion queues.
	QP rdma.QPConfig
	// Transport sets the retry attributes of both queue pairs.
	Transport Transport
	// SameDevice puts both queue pairs of a pair on one device and one
	// protection domain (loopback), instead of one device each.
	SameDevice bool
}

func (o Options) withDefaults() Options {
	if o.BufSize == 0 {
		o.BufSize = 64 << 10
	}
	if o.MRAccess == 0 {
		o.MRAccess = rdma.AccessAll
	}
	if o.QPAccess == 0 {
		o.QPAccess = rdma.AccessRemoteRead | rdma.AccessRemoteWrite | rdma.AccessRemoteAtomic
	}
	if o.CQDepth == 0 {
		o.CQDepth = 256
	}
	if o.QP.MaxSendWR == 0 {
		o.QP.MaxSendWR = 64
	}
	if o.QP.MaxRecvWR == 0 {
		o.QP.MaxRecvWR = 64
	}
	if o.QP.MaxSendSGE == 0 {
		o.QP.MaxSendSGE = 4
	}
	if o.QP.MaxRecvSGE == 0 {
		o.QP.MaxRecvSGE = 4
	}
	if o.QP.MaxInline == 0 {
		o.QP.MaxInline = 64
	}
	o.Transport = o.Transport.withDefaults()
	return o
}

// Node is a device with a protection domain and one registered buffer.
type Node struct {
	Dev rdma.Device
	PD  rdma.PD
	MR  rdma.MR
	// Buf is MR.Bytes().
	Buf []byte
}

// NewNode allocates a protection domain on dev and registers a buffer of
// size bytes with access. Everything is released when the test ends.
func NewNode(t testing.TB, dev rdma.Device, size int, access rdma.Access) *Node {
	t.Helper()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatalf("%s: AllocPD: %v", dev.Name(), err)
	}
	t.Cleanup(func() { pd.Close() })
	mr := RegBuffer(t, pd, size, access)
	return &Node{Dev: dev, PD: pd, MR: mr, Buf: mr.Bytes()}
}

// RegBuffer registers size bytes from rdma.AllocBuffer with access in pd.
// When the test ends the region is deregistered and the memory freed.
func RegBuffer(t testing.TB, pd rdma.PD, size int, access rdma.Access) rdma.MR {
	t.Helper()
	buf, err := rdma.AllocBuffer(size)
	if err != nil {
		t.Fatalf("AllocBuffer(%d): %v", size, err)
	}
	mr, err := pd.RegMR(buf, access)
	if err != nil {
		rdma.FreeBuffer(buf)
		t.Fatalf("RegMR(%d bytes, %v): %v", size, access, err)
	}
	t.Cleanup(func() { deregAndFree(t, mr, buf) })
	return mr
}

// deregAndFree releases a buffer only once no provider can touch it: Dereg
// promises that no access through the region's keys is in progress when it
// returns. A region already gone with its device is safe too. Anything
// else leaks the memory rather than risk a provider writing to unmapped
// pages.
func deregAndFree(t testing.TB, mr rdma.MR, buf []byte) {
	err := mr.Dereg()
	if err != nil && !errors.Is(err, rdma.ErrClosed) && !errors.Is(err, rdma.ErrInvalid) {
		t.Logf("leaking a %d-byte buffer: Dereg: %v", len(buf), err)
		return
	}
	rdma.FreeBuffer(buf)
}

// Side is one end of a connection: a queue pair with its own completion
// queues, on a Node.
type Side struct {
	*Node
	QP     rdma.QP
	SendCQ rdma.CQ
	RecvCQ rdma.CQ
}

// NewSide creates a queue pair in n's protection domain with a send and a
// receive completion queue of o.CQDepth entries. The queue pair is in Reset.
func NewSide(t testing.TB, n *Node, o Options) *Side {
	t.Helper()
	o = o.withDefaults()
	caps := n.Dev.Caps()
	depth := o.CQDepth
	if caps.MaxCQE > 0 {
		depth = min(depth, caps.MaxCQE)
	}
	scq := NewCQ(t, n.Dev, depth)
	rcq := NewCQ(t, n.Dev, depth)
	cfg := o.QP
	cfg.SendCQ, cfg.RecvCQ = scq, rcq
	cfg.MaxInline = min(cfg.MaxInline, caps.MaxInline)
	cfg.MaxSendSGE = min(cfg.MaxSendSGE, max(caps.MaxSGE, 1))
	cfg.MaxRecvSGE = min(cfg.MaxRecvSGE, max(caps.MaxSGE, 1))
	qp, err := n.PD.CreateQP(cfg)
	if err != nil {
		t.Fatalf("%s: CreateQP(%+v): %v", n.Dev.Name(), cfg, err)
	}
	t.Cleanup(func() { qp.Close() })
	return &Side{Node: n, QP: qp, SendCQ: scq, RecvCQ: rcq}
}

// NewCQ creates a completion queue of depth entries, closed when the test
// ends.
func NewCQ(t testing.TB, dev rdma.Device, depth int) rdma.CQ {
	t.Helper()
	cq, err := dev.CreateCQ(depth)
	if err != nil {
		t.Fatalf("%s: CreateCQ(%d): %v", dev.Name(), depth, err)
	}
	t.Cleanup(func() { cq.Close() })
	return cq
}

// SGE returns the scatter/gather element for n bytes at offset off of the
// side's buffer.
func (n *Node) SGE(off, length int) rdma.SGE {
	return rdma.SGE{Addr: n.MR.Addr() + uint64(off), Length: uint32(length), LKey: n.MR.LKey()}
}

// Addr returns the address of offset off of the buffer, for RemoteAddr.
func (n *Node) Addr(off int) uint64 { return n.MR.Addr() + uint64(off) }

// Pair is two connected RC queue pairs, A and B, each in RTS.
type Pair struct {
	A, B *Side
}

// NewPair opens one device per side (one for both with o.SameDevice),
// gives each a node and a queue pair, and connects the two by exchanging
// their Endpoints directly.
func NewPair(t testing.TB, p Provider, o Options) *Pair {
	t.Helper()
	o = o.withDefaults()
	devA := p.Open(t)
	na := NewNode(t, devA, o.BufSize, o.MRAccess)
	nb := na
	if !o.SameDevice {
		nb = NewNode(t, p.Open(t), o.BufSize, o.MRAccess)
	}
	return ConnectNodes(t, na, nb, o)
}

// ConnectNodes creates a queue pair on each node and connects them.
func ConnectNodes(t testing.TB, na, nb *Node, o Options) *Pair {
	t.Helper()
	o = o.withDefaults()
	a, b := NewSide(t, na, o), NewSide(t, nb, o)
	Connect(t, a.QP, b.QP, o.QPAccess, o.Transport)
	return &Pair{A: a, B: b}
}

// Connect moves two queue pairs in Reset to RTS, each towards the other,
// granting access to the peer, the way the connection manager does but
// without it.
func Connect(t testing.TB, a, b rdma.QP, access rdma.Access, tr Transport) {
	t.Helper()
	for _, qp := range []rdma.QP{a, b} {
		if err := ToInit(qp, access); err != nil {
			t.Fatalf("QP %d to INIT: %v", qp.QPN(), err)
		}
	}
	if err := ToRTR(a, b.Endpoint(), tr); err != nil {
		t.Fatalf("QP %d to RTR: %v", a.QPN(), err)
	}
	if err := ToRTR(b, a.Endpoint(), tr); err != nil {
		t.Fatalf("QP %d to RTR: %v", b.QPN(), err)
	}
	for _, qp := range []rdma.QP{a, b} {
		if err := ToRTS(qp, tr); err != nil {
			t.Fatalf("QP %d to RTS: %v", qp.QPN(), err)
		}
	}
}

// ToInit moves qp from Reset to Init, granting access.
func ToInit(qp rdma.QP, access rdma.Access) error {
	return qp.Modify(rdma.QPAttr{State: rdma.QPSInit, Access: access}) // Port 0: the device's port
}

// maxRdAtomic is the number of outstanding READs and atomics the suite
// asks for; every provider supports at least this many.
const maxRdAtomic = 16

// ToRTR moves qp from Init to RTR towards remote.
func ToRTR(qp rdma.QP, remote rdma.Endpoint, tr Transport) error {
	tr = tr.withDefaults()
	return qp.Modify(rdma.QPAttr{
		State: rdma.QPSRTR, Remote: remote, PathMTU: remote.MTU,
		MinRNRTimer: tr.MinRNRTimer, MaxDestRdAtomic: maxRdAtomic,
	})
}

// ToRTS moves qp from RTR to RTS.
func ToRTS(qp rdma.QP, tr Transport) error {
	tr = tr.withDefaults()
	return qp.Modify(rdma.QPAttr{
		State: rdma.QPSRTS, Timeout: tr.Timeout, RetryCount: tr.RetryCount,
		RNRRetry: tr.RNRRetry, MaxRdAtomic: maxRdAtomic,
	})
}

// WaitN waits until cq has delivered n completions and returns them in
// the order polled. It fails the test if they do not arrive within
// DefaultWaitTimeout or the CQ reports an error, naming what did arrive.
func WaitN(t testing.TB, cq rdma.CQ, n int) []rdma.WorkCompletion {
	t.Helper()
	return WaitNTimeout(t, cq, n, DefaultWaitTimeout)
}

// WaitNTimeout is WaitN with its own bound.
func WaitNTimeout(t testing.TB, cq rdma.CQ, n int, timeout time.Duration) []rdma.WorkCompletion {
	t.Helper()
	wcs, err := Collect(cq, n, timeout)
	if err != nil {
		t.Fatalf("waiting for %d completions: %v; got %d: %s", n, err, len(wcs), FormatWCs(wcs))
	}
	return wcs
}

// Collect waits for n completions on cq for at most timeout. It returns
// what it got and, if fewer than n, why.
func Collect(cq rdma.CQ, n int, timeout time.Duration) ([]rdma.WorkCompletion, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	wcs := make([]rdma.WorkCompletion, n)
	got := 0
	for got < n {
		k, err := cq.Wait(ctx, wcs[got:])
		got += k
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("timed out after %v", timeout)
			}
			return wcs[:got], err
		}
	}
	return wcs, nil
}

// WaitOne waits for a single completion.
func WaitOne(t testing.TB, cq rdma.CQ) rdma.WorkCompletion {
	t.Helper()
	return WaitN(t, cq, 1)[0]
}

// ExpectNoCompletion fails the test if cq delivers a completion within
// window. It is how the suite checks that something stays silent, so the
// window is a judgement: long enough for a provider to have produced the
// completion had it been going to.
func ExpectNoCompletion(t testing.TB, cq rdma.CQ, window time.Duration, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	var wc [8]rdma.WorkCompletion
	n, err := cq.Wait(ctx, wc[:])
	if n > 0 {
		t.Fatalf("%s: got unexpected completions %s", why, FormatWCs(wc[:n]))
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: CQ.Wait: %v", why, err)
	}
}

// FormatWCs prints completions compactly for failure messages.
func FormatWCs(wcs []rdma.WorkCompletion) string {
	if len(wcs) == 0 {
		return "none"
	}
	s := ""
	for i, wc := range wcs {
		if i > 0 {
			s += ", "
		}
		s += FormatWC(wc)
	}
	return s
}

// FormatWC prints one completion.
func FormatWC(wc rdma.WorkCompletion) string {
	if wc.Status != rdma.WCSuccess {
		return fmt.Sprintf("{id %d: %v}", wc.ID, wc.Status)
	}
	s := fmt.Sprintf("{id %d: %v %v len %d", wc.ID, wc.Status, wc.Opcode, wc.ByteLen)
	if wc.HasImm {
		s += fmt.Sprintf(" imm %#x", wc.Imm)
	}
	return s + "}"
}

// CheckWC fails the test unless wc has the given id and status.
func CheckWC(t testing.TB, what string, wc rdma.WorkCompletion, id uint64, status rdma.WCStatus) {
	t.Helper()
	if wc.ID != id || wc.Status != status {
		t.Fatalf("%s: got completion %s, want id %d with status %q", what, FormatWC(wc), id, status)
	}
}

// CheckWCIn fails the test unless wc has the given id and one of statuses.
func CheckWCIn(t testing.TB, what string, wc rdma.WorkCompletion, id uint64, statuses ...rdma.WCStatus) {
	t.Helper()
	if wc.ID == id {
		for _, s := range statuses {
			if wc.Status == s {
				return
			}
		}
	}
	t.Fatalf("%s: got completion %s, want id %d with status in %v", what, FormatWC(wc), id, statuses)
}

// CheckOK fails the test unless wc succeeded with the given id and opcode.
func CheckOK(t testing.TB, what string, wc rdma.WorkCompletion, id uint64, op rdma.WCOpcode) {
	t.Helper()
	if wc.ID != id || wc.Status != rdma.WCSuccess || wc.Opcode != op {
		t.Fatalf("%s: got completion %s, want id %d: success %v", what, FormatWC(wc), id, op)
	}
}

// PostSend posts wrs and fails the test if the provider refuses any.
func PostSend(t testing.TB, qp rdma.QP, wrs ...rdma.SendWR) {
	t.Helper()
	if err := qp.PostSend(wrs); err != nil {
		t.Fatalf("PostSend on QP %d (%s): %v", qp.QPN(), qp.State(), err)
	}
}

// PostRecv posts wrs and fails the test if the provider refuses any.
func PostRecv(t testing.TB, qp rdma.QP, wrs ...rdma.RecvWR) {
	t.Helper()
	if err := qp.PostRecv(wrs); err != nil {
		t.Fatalf("PostRecv on QP %d (%s): %v", qp.QPN(), qp.State(), err)
	}
}

// ExpectPostError fails the test unless err is a *rdma.PostError for
// request index that wraps want.
func ExpectPostError(t testing.TB, what string, err error, index int, want error) {
	t.Helper()
	var pe *rdma.PostError
	if !errors.As(err, &pe) {
		t.Fatalf("%s: got error %v (%T), want *rdma.PostError{Index: %d} wrapping %v", what, err, err, index, want)
	}
	if pe.Index != index || !errors.Is(err, want) {
		t.Fatalf("%s: got PostError{Index: %d, Err: %v}, want Index %d wrapping %v", what, pe.Index, pe.Err, index, want)
	}
}

// ExpectState fails the test unless qp is in state want.
func ExpectState(t testing.TB, what string, qp rdma.QP, want rdma.QPState) {
	t.Helper()
	if got := qp.State(); got != want {
		t.Fatalf("%s: QP %d is in %v, want %v", what, qp.QPN(), got, want)
	}
}

// UnusedKey returns a key that none of mrs uses as lkey or rkey, for
// requests that must name no memory region.
func UnusedKey(mrs ...rdma.MR) uint32 {
	key := uint32(0x5ead_beef)
	for {
		used := false
		for _, mr := range mrs {
			if mr.LKey() == key || mr.RKey() == key {
				used = true
			}
		}
		if !used {
			return key
		}
		key += 0x0101_0101
	}
}

// Fill writes a recognisable pattern into b: byte i is seed+i.
func Fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i)
	}
}

// CheckBytes fails the test unless got equals want, naming the first
// difference.
func CheckBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d bytes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: first difference at byte %d of %d: got %#02x, want %#02x", what, i, len(got), got[i], want[i])
		}
	}
}
