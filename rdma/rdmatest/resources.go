package rdmatest

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/octofs/octofs/rdma"
)

// testCaps: a device describes itself, with limits at least as large as
// the suite and the layers above rely on.
func testCaps(t *testing.T, p Provider) {
	dev := p.Open(t)
	if dev.Name() == "" {
		t.Error("Device.Name is empty")
	}
	if p.Name != "" && dev.Provider() != p.Name {
		t.Errorf("Device.Provider() = %q, want %q", dev.Provider(), p.Name)
	}
	c := dev.Caps()
	for _, lim := range []struct {
		name string
		got  uint64
		min  uint64
	}{
		{"MaxQPWR", uint64(c.MaxQPWR), 64},
		{"MaxSGE", uint64(c.MaxSGE), 1},
		{"MaxCQE", uint64(c.MaxCQE), 256},
		{"MaxMRSize", c.MaxMRSize, 1 << 20},
		{"MaxMsgSize", uint64(c.MaxMsgSize), 1 << 20},
		{"MaxRdAtomic", uint64(c.MaxRdAtomic), maxRdAtomic},
	} {
		if lim.got < lim.min {
			t.Errorf("Caps.%s = %d, want at least %d", lim.name, lim.got, lim.min)
		}
	}
	if c.AtomicsGlobal && !c.Atomics {
		t.Errorf("Caps.AtomicsGlobal without Caps.Atomics: %+v", c)
	}
}

// testRegistrationRules: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE
// (ibv_reg_mr fails with EINVAL otherwise); every other combination
// registers, and the region describes the caller's own memory.
func testRegistrationRules(t *testing.T, p Provider) {
	dev := p.Open(t)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	t.Cleanup(func() { pd.Close() })
	const size = 8192
	for _, tc := range []struct {
		access rdma.Access
		ok     bool
	}{
		{0, true},
		{rdma.AccessLocalWrite, true},
		{rdma.AccessRemoteRead, true},
		{rdma.AccessLocalWrite | rdma.AccessRemoteWrite, true},
		{rdma.AccessLocalWrite | rdma.AccessRemoteAtomic, true},
		{rdma.AccessAll, true},
		{rdma.AccessRemoteWrite, false},
		{rdma.AccessRemoteAtomic, false},
		{rdma.AccessRemoteRead | rdma.AccessRemoteWrite, false},
		{rdma.AccessRemoteRead | rdma.AccessRemoteAtomic, false},
		{rdma.AccessRemoteWrite | rdma.AccessRemoteAtomic | rdma.AccessRemoteRead, false},
	} {
		t.Run(tc.access.String(), func(t *testing.T) {
			buf, err := rdma.AllocBuffer(size)
			if err != nil {
				t.Fatal(err)
			}
			mr, err := pd.RegMR(buf, tc.access)
			if !tc.ok {
				if err == nil {
					deregAndFree(t, mr, buf)
					t.Fatalf("RegMR(%v) succeeded, want an error wrapping rdma.ErrInvalid", tc.access)
				}
				rdma.FreeBuffer(buf)
				if !errors.Is(err, rdma.ErrInvalid) {
					t.Fatalf("RegMR(%v) = %v, want an error wrapping rdma.ErrInvalid", tc.access, err)
				}
				return
			}
			if err != nil {
				rdma.FreeBuffer(buf)
				t.Fatalf("RegMR(%v): %v", tc.access, err)
			}
			defer deregAndFree(t, mr, buf)
			addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
			if mr.Addr() != addr || mr.Len() != size || mr.Access() != tc.access {
				t.Errorf("MR is {Addr %#x, Len %d, Access %v}, want {Addr %#x (the buffer's address), Len %d, Access %v}",
					mr.Addr(), mr.Len(), mr.Access(), addr, size, tc.access)
			}
			if b := mr.Bytes(); len(b) != size || &b[0] != &buf[0] {
				t.Errorf("MR.Bytes() is not the registered buffer (len %d, want %d)", len(b), size)
			}
		})
	}
}

// testPDCloseBusy: a protection domain with live memory regions or queue
// pairs cannot be deallocated (EBUSY), and can once they are gone.
func testPDCloseBusy(t *testing.T, p Provider) {
	dev := p.Open(t)
	t.Run("LiveMR", func(t *testing.T) {
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pd.Close() })
		buf, err := rdma.AllocBuffer(4096)
		if err != nil {
			t.Fatal(err)
		}
		mr, err := pd.RegMR(buf, rdma.AccessLocalWrite)
		if err != nil {
			rdma.FreeBuffer(buf)
			t.Fatal(err)
		}
		if err := pd.Close(); !errors.Is(err, rdma.ErrBusy) {
			deregAndFree(t, mr, buf)
			t.Fatalf("PD.Close with a live MR = %v, want rdma.ErrBusy", err)
		}
		if err := mr.Dereg(); err != nil {
			t.Fatalf("Dereg: %v", err)
		}
		rdma.FreeBuffer(buf)
		if err := pd.Close(); err != nil {
			t.Fatalf("PD.Close after Dereg = %v, want nil", err)
		}
	})
	t.Run("LiveQP", func(t *testing.T) {
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pd.Close() })
		cq := NewCQ(t, dev, 16)
		qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qp.Close() })
		if err := pd.Close(); !errors.Is(err, rdma.ErrBusy) {
			t.Fatalf("PD.Close with a live QP = %v, want rdma.ErrBusy", err)
		}
		if err := qp.Close(); err != nil {
			t.Fatalf("QP.Close: %v", err)
		}
		if err := pd.Close(); err != nil {
			t.Fatalf("PD.Close after QP.Close = %v, want nil", err)
		}
	})
}

// testCQWaitContext: CQ.Wait returns when its context ends, whether it
// ended before or during the wait, and wakes when a completion arrives.
func testCQWaitContext(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	a := pr.A
	var wc [4]rdma.WorkCompletion

	t.Run("Deadline", func(t *testing.T) {
		const d = 50 * time.Millisecond
		// start is taken before the deadline is set: the deadline counts
		// from WithTimeout, so a start taken after it could see Wait
		// return a little under d on a slow machine (rxe under QEMU did).
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		n, err := a.SendCQ.Wait(ctx, wc[:])
		el := time.Since(start)
		if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait on an empty CQ = (%d, %v), want (0, context.DeadlineExceeded)", n, err)
		}
		if el < d || el > d+2*time.Second {
			t.Fatalf("Wait with a %v deadline returned after %v", d, el)
		}
	})
	t.Run("Cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		n, err := a.SendCQ.Wait(ctx, wc[:])
		if n != 0 || !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait with a cancelled context = (%d, %v), want (0, context.Canceled)", n, err)
		}
		if el := time.Since(start); el > time.Second {
			t.Fatalf("Wait with a cancelled context took %v", el)
		}
	})
	t.Run("CancelWhileWaiting", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := a.SendCQ.Wait(ctx, wc[:1])
			done <- err
		}()
		// The cancel is the scenario: Wait must already be blocked.
		time.Sleep(20 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait cancelled while blocked = %v, want context.Canceled", err)
			}
		case <-time.After(DefaultWaitTimeout):
			t.Fatalf("Wait still blocked %v after its context was cancelled", DefaultWaitTimeout)
		}
	})
	t.Run("Wakes", func(t *testing.T) {
		got := make(chan rdma.WorkCompletion, 1)
		errc := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), DefaultWaitTimeout)
			defer cancel()
			var w [1]rdma.WorkCompletion
			n, err := a.SendCQ.Wait(ctx, w[:])
			if err != nil || n != 1 {
				errc <- err
				return
			}
			got <- w[0]
		}()
		time.Sleep(20 * time.Millisecond) // let Wait block first: the scenario, not a wait
		PostSend(t, a.QP, rdma.SendWR{ID: 7, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{a.SGE(0, 64)}, RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey()})
		select {
		case wc := <-got:
			CheckOK(t, "WRITE completion through a blocked Wait", wc, 7, rdma.WCWrite)
		case err := <-errc:
			t.Fatalf("blocked Wait returned %v, want the WRITE's completion", err)
		}
	})
}

// testConnectionManager: rdma.Listen and rdma.Dial connect two queue pairs
// of this provider, carry private data both ways, run the listener's Setup
// before the peer can send, and leave both sides in RTS.
func testConnectionManager(t *testing.T, p Provider) {
	o := Options{}.withDefaults()
	na := NewNode(t, p.Open(t), o.BufSize, o.MRAccess)
	nb := NewNode(t, p.Open(t), o.BufSize, o.MRAccess)
	cfgFor := func(n *Node) rdma.QPConfig {
		c := o.QP
		c.SendCQ, c.RecvCQ = NewCQ(t, n.Dev, o.CQDepth), NewCQ(t, n.Dev, o.CQDepth)
		return c
	}
	cfgA, cfgB := cfgFor(na), cfgFor(nb)
	ln, err := rdma.Listen(nb.PD, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), DefaultWaitTimeout)
	defer cancel()

	type result struct {
		conn *rdma.Conn
		err  error
	}
	accepted := make(chan result, 1)
	go func() {
		conn, err := ln.Accept(ctx, rdma.ConnParams{
			QP:          cfgB,
			PrivateData: []byte("from listener"),
			Setup: func(qp rdma.QP) error {
				return qp.PostRecv([]rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{nb.SGE(0, 256)}}})
			},
		})
		accepted <- result{conn, err}
	}()
	ca, err := rdma.Dial(ctx, na.PD, ln.Addr().String(), rdma.ConnParams{QP: cfgA, PrivateData: []byte("from dialer")})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { ca.Close() })
	r := <-accepted
	if r.err != nil {
		t.Fatalf("Accept: %v", r.err)
	}
	cb := r.conn
	t.Cleanup(func() { cb.Close() })

	if string(ca.PrivateData) != "from listener" || string(cb.PrivateData) != "from dialer" {
		t.Errorf("private data: dialer got %q, listener got %q", ca.PrivateData, cb.PrivateData)
	}
	ExpectState(t, "dialer", ca.QP, rdma.QPSRTS)
	ExpectState(t, "listener", cb.QP, rdma.QPSRTS)
	if ca.Remote.QPN != cb.QP.QPN() || cb.Remote.QPN != ca.QP.QPN() {
		t.Errorf("Conn.Remote QPNs: dialer sees %d (want %d), listener sees %d (want %d)",
			ca.Remote.QPN, cb.QP.QPN(), cb.Remote.QPN, ca.QP.QPN())
	}

	// Setup posted the receive before the dialer could send: no RNR wait.
	Fill(na.Buf[:100], 3)
	PostSend(t, ca.QP, rdma.SendWR{ID: 2, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{na.SGE(0, 100)}})
	CheckOK(t, "dialer SEND", WaitOne(t, cfgA.SendCQ), 2, rdma.WCSend)
	rwc := WaitOne(t, cfgB.RecvCQ)
	CheckOK(t, "listener receive", rwc, 1, rdma.WCRecv)
	if rwc.ByteLen != 100 {
		t.Errorf("listener receive ByteLen %d, want 100", rwc.ByteLen)
	}
	CheckBytes(t, "received data", nb.Buf[:100], na.Buf[:100])

	// The default access lets the listener write to the dialer's memory.
	Fill(nb.Buf[1000:1100], 9)
	PostSend(t, cb.QP, rdma.SendWR{ID: 3, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{nb.SGE(1000, 100)}, RemoteAddr: na.Addr(1000), RKey: na.MR.RKey()})
	CheckOK(t, "listener WRITE", WaitOne(t, cfgB.SendCQ), 3, rdma.WCWrite)
	CheckBytes(t, "written data", na.Buf[1000:1100], nb.Buf[1000:1100])

	// Closing one side is seen by the other, as rdma_cm's DISCONNECTED.
	select {
	case <-cb.Done():
		t.Fatal("listener's Conn is done before anyone closed")
	default:
	}
	if err := ca.Close(); err != nil {
		t.Errorf("dialer Close: %v", err)
	}
	select {
	case <-cb.Done():
	case <-time.After(DefaultWaitTimeout):
		t.Errorf("listener's Conn not done %v after the dialer closed", DefaultWaitTimeout)
	}
}

// testQPCaps: QP.Caps reports at least what QPConfig asked for (devices
// may grant more), and the queue pair takes that many requests.
func testQPCaps(t *testing.T, p Provider) {
	dev := p.Open(t)
	n := NewNode(t, dev, 64<<10, rdma.AccessAll)
	c := dev.Caps()
	cfg := rdma.QPConfig{MaxSendWR: 17, MaxRecvWR: 33, MaxSendSGE: min(3, c.MaxSGE), MaxRecvSGE: min(2, c.MaxSGE), MaxInline: min(40, c.MaxInline)}
	s := NewSide(t, n, Options{QP: cfg})
	got := s.QP.Caps()
	for _, f := range []struct {
		name      string
		got, want int
	}{
		{"MaxSendWR", got.MaxSendWR, cfg.MaxSendWR},
		{"MaxRecvWR", got.MaxRecvWR, cfg.MaxRecvWR},
		{"MaxSendSGE", got.MaxSendSGE, cfg.MaxSendSGE},
		{"MaxRecvSGE", got.MaxRecvSGE, cfg.MaxRecvSGE},
		{"MaxInline", got.MaxInline, cfg.MaxInline},
	} {
		if f.got < f.want {
			t.Errorf("QP.Caps().%s = %d, below the %d asked for", f.name, f.got, f.want)
		}
	}
	t.Logf("asked for %+v, granted %+v", cfg, got)
	// The receive queue takes what Caps says.
	if err := ToInit(s.QP, rdma.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	for i := range got.MaxRecvWR {
		PostRecv(t, s.QP, rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{n.SGE(0, 8)}})
	}
}
