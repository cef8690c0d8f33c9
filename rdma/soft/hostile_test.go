package soft

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/rdma"
)

// Tests with a peer that speaks the wire protocol over raw TCP and does
// what a well-behaved provider never would: stalls mid-frame, stops
// reading, cuts a message off, sends a NAK-worthy WRITE of a gigabyte,
// or claims to be somebody else. Each was a defect of the provider
// before issue 9 (docs/rdma-soft.md, "Hostile peers").

// rawPeer is the far end of a victim queue pair: a TCP listener that
// plays the peer's device, and the peer's endpoint.
type rawPeer struct {
	ln net.Listener
	ep rdma.Endpoint
}

// victim is a soft queue pair in RTS towards a rawPeer.
type victim struct {
	dev      *Device
	pd       rdma.PD
	scq, rcq rdma.CQ
	mr       rdma.MR
	qp       *qp
	peer     rawPeer
}

// newVictim opens a device with a region of mrSize bytes (registered
// with every right) and a queue pair of maxSend send requests in RTS,
// connected to a raw peer.
func newVictim(t *testing.T, mrSize, maxSend int) *victim {
	t.Helper()
	v := &victim{}
	var err error
	v.dev, err = Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { v.dev.Close() })
	v.pd, err = v.dev.AllocPD()
	require.NoError(t, err)
	v.scq, err = v.dev.CreateCQ(4096)
	require.NoError(t, err)
	v.rcq, err = v.dev.CreateCQ(4096)
	require.NoError(t, err)
	buf, err := rdma.AllocBuffer(mrSize)
	require.NoError(t, err)
	v.mr, err = v.pd.RegMR(buf, rdma.AccessAll)
	require.NoError(t, err)
	// The memory is freed only once Dereg has returned; a test that
	// deregisters it itself leaves that to this cleanup's ErrInvalid.
	t.Cleanup(func() {
		if err := v.mr.Dereg(); err == nil || errors.Is(err, rdma.ErrInvalid) {
			rdma.FreeBuffer(buf)
		}
	})
	v.peer.ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { v.peer.ln.Close() })
	v.peer.ep = rdma.Endpoint{QPN: 0x4242, PSN: 1000, Addr: v.peer.ln.Addr().String()}
	rand.Read(v.peer.ep.Secret[:])
	qi, err := v.pd.CreateQP(rdma.QPConfig{SendCQ: v.scq, RecvCQ: v.rcq, MaxSendWR: maxSend, MaxRecvWR: 64})
	require.NoError(t, err)
	t.Cleanup(func() { qi.Close() })
	v.qp = qi.(*qp)
	require.NoError(t, v.qp.Modify(rdma.QPAttr{State: rdma.QPSInit, Access: rdma.AccessRemoteRead | rdma.AccessRemoteWrite | rdma.AccessRemoteAtomic}))
	require.NoError(t, v.qp.Modify(rdma.QPAttr{State: rdma.QPSRTR, Remote: v.peer.ep, MinRNRTimer: 1}))
	require.NoError(t, v.qp.Modify(rdma.QPAttr{State: rdma.QPSRTS, Timeout: 17, RetryCount: 7, RNRRetry: 7}))
	return v
}

// link makes the one connection between the victim and the raw peer, as
// the peer's provider would: it dials or accepts as the endpoints say
// (qp.dialsPeer), presenting and checking the secrets.
func (v *victim) link(t *testing.T) net.Conn {
	t.Helper()
	ep := v.qp.Endpoint()
	var c net.Conn
	if v.qp.dialsPeer() {
		var err error
		c, err = v.peer.ln.Accept()
		require.NoError(t, err)
		h, err := readHello(c)
		require.NoError(t, err)
		require.Equal(t, v.peer.ep.QPN, h.DstQPN)
		require.True(t, secretsEqual(&h.DstSecret, &v.peer.ep.Secret), "the victim presented the wrong secret")
		a := helloAnswer{Status: helloOK, Proof: ep.Secret}
		_, err = c.Write(a.marshal())
		require.NoError(t, err)
	} else {
		var err error
		c, err = net.Dial("tcp", ep.Addr)
		require.NoError(t, err)
		h := hello{SrcQPN: v.peer.ep.QPN, DstQPN: ep.QPN, DstSecret: ep.Secret, SrcAddr: v.peer.ep.Addr}
		_, err = c.Write(h.marshal())
		require.NoError(t, err)
		a, err := readHelloAnswer(c)
		require.NoError(t, err)
		require.Equal(t, helloOK, a.Status)
		require.True(t, secretsEqual(&a.Proof, &v.peer.ep.Secret))
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func writeFrame(t *testing.T, c net.Conn, h frameHeader, payload []byte) {
	t.Helper()
	var b [frameHeaderSize]byte
	h.encode(b[:])
	_, err := c.Write(append(b[:], payload...))
	require.NoError(t, err)
}

func readFrame(c net.Conn) (frameHeader, error) {
	var b [frameHeaderSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return frameHeader{}, err
	}
	var h frameHeader
	return h, h.decode(b[:])
}

// waitState waits until qp is in want.
func waitState(t *testing.T, q rdma.QP, want rdma.QPState, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for q.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("queue pair in %v %v later, want %v", q.State(), within, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// deregWithin deregisters mr and fails unless Dereg returns within d.
func deregWithin(t *testing.T, mr rdma.MR, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- mr.Dereg() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(d):
		t.Fatalf("MR.Dereg still blocked after %v: a peer holds the region across socket I/O", d)
	}
}

// TestDeregWhilePeerStallsWrite: a peer announces a 1 MiB WRITE and sends
// 100 bytes of it. Dereg of the target returns at once, and the WRITE
// ends in a remote access error: NAKed, the queue pair in ERR.
func TestDeregWhilePeerStallsWrite(t *testing.T) {
	v := newVictim(t, 4<<20, 64)
	c := v.link(t)
	writeFrame(t, c, frameHeader{Type: frameWrite, PSN: v.peer.ep.PSN, Length: 1 << 20, RKey: v.mr.RKey(), RemoteAddr: v.mr.Addr()}, make([]byte, 100))
	// Wait until the victim is inside the WRITE.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		v.qp.mu.Lock()
		in := v.qp.link != nil && v.qp.link.rxMR != nil
		v.qp.mu.Unlock()
		if in {
			break
		}
		require.True(t, time.Now().Before(deadline), "the victim never started the WRITE")
	}
	deregWithin(t, v.mr, time.Second)
	waitState(t, v.qp, rdma.QPSErr, time.Second)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	h, err := readFrame(c)
	require.NoError(t, err, "no NAK for the revoked WRITE")
	require.Equal(t, frameNak, h.Type)
	require.Equal(t, uint8(nakRemoteAccess), h.Code)
	require.Equal(t, v.peer.ep.PSN, h.PSN)
}

// TestDeregWhilePeerLeavesReadUnread: a peer asks for 64 MiB and never
// reads the response. Dereg of the region returns at once, and the
// queue pair goes to ERR.
func TestDeregWhilePeerLeavesReadUnread(t *testing.T) {
	v := newVictim(t, 64<<20, 64)
	c := v.link(t)
	writeFrame(t, c, frameHeader{Type: frameRead, PSN: v.peer.ep.PSN, Length: 64 << 20, RKey: v.mr.RKey(), RemoteAddr: v.mr.Addr()}, nil)
	// The response has started; the peer reads no more of it, and the
	// socket fills.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	h, err := readFrame(c)
	require.NoError(t, err)
	require.Equal(t, frameReadResp, h.Type)
	deregWithin(t, v.mr, time.Second)
	waitState(t, v.qp, rdma.QPSErr, time.Second)
}

// TestWaitHonoursContextMidResponse: the peer sends half of a 1 MiB READ
// response and stalls. A Wait with a 300 ms context returns on time,
// and the READ completes, with the right data, once the rest arrives.
func TestWaitHonoursContextMidResponse(t *testing.T) {
	v := newVictim(t, 2<<20, 64)
	c := v.link(t)
	read := func(id uint64, n uint32) []rdma.SendWR {
		return []rdma.SendWR{{ID: id, Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{{Addr: v.mr.Addr(), Length: n, LKey: v.mr.LKey()}}, RemoteAddr: 4096, RKey: 7}}
	}
	// One round trip first, so that the waiter drives the link itself.
	require.NoError(t, v.qp.PostSend(read(1, 8)))
	h, err := readFrame(c)
	require.NoError(t, err)
	writeFrame(t, c, frameHeader{Type: frameReadResp, PSN: h.PSN, Length: 8}, make([]byte, 8))
	var wc [1]rdma.WorkCompletion
	ctx0, cancel0 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel0()
	_, err = v.scq.Wait(ctx0, wc[:])
	require.NoError(t, err)
	require.Equal(t, rdma.WCSuccess, wc[0].Status)

	require.NoError(t, v.qp.PostSend(read(2, 1<<20)))
	h, err = readFrame(c)
	require.NoError(t, err)
	data := make([]byte, 1<<20)
	rand.Read(data)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := v.scq.Wait(ctx, wc[:]); done <- err }()
	time.Sleep(20 * time.Millisecond) // the waiter is parked on the socket: the scenario
	writeFrame(t, c, frameHeader{Type: frameReadResp, PSN: h.PSN, Length: 1<<20 - readTailMax}, data[:512<<10])
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), time.Second, "Wait returned %v after its 300ms context", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("CQ.Wait with a 300ms context still blocked after 5s, in the middle of a response")
	}
	// The rest arrives; whoever reads it, the READ completes.
	_, err = c.Write(data[512<<10 : 1<<20-readTailMax])
	require.NoError(t, err)
	writeFrame(t, c, frameHeader{Type: frameReadResp, PSN: h.PSN, Length: readTailMax, RemoteAddr: 1<<20 - readTailMax}, data[1<<20-readTailMax:])
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	_, err = v.scq.Wait(ctx2, wc[:])
	require.NoError(t, err)
	require.Equal(t, rdma.WCSuccess, wc[0].Status)
	require.True(t, bytes.Equal(data, v.mr.Bytes()[:1<<20]), "READ data")
}

// TestSendCutOffCompletesEveryReceive: a SEND cut off mid-payload by the
// peer's death must not consume a receive silently: both posted receives
// complete (flushed), and the queue pair is in ERR.
func TestSendCutOffCompletesEveryReceive(t *testing.T) {
	v := newVictim(t, 1<<20, 64)
	for i := range 2 {
		require.NoError(t, v.qp.PostRecv([]rdma.RecvWR{{ID: uint64(i + 1), SGL: []rdma.SGE{{Addr: v.mr.Addr() + uint64(4096*i), Length: 4096, LKey: v.mr.LKey()}}}}))
	}
	c := v.link(t)
	writeFrame(t, c, frameHeader{Type: frameSend, PSN: v.peer.ep.PSN, Length: 100}, make([]byte, 50))
	time.Sleep(20 * time.Millisecond) // the victim is inside the SEND: the scenario
	c.Close()
	wcs := make([]rdma.WorkCompletion, 4)
	got := 0
	for deadline := time.Now().Add(5 * time.Second); got < 2; time.Sleep(time.Millisecond) {
		n, err := v.rcq.Poll(wcs[got:])
		require.NoError(t, err)
		got += n
		require.True(t, time.Now().Before(deadline), "%d completions for two posted receives", got)
	}
	for i, wc := range wcs[:2] {
		require.Equal(t, uint64(i+1), wc.ID)
		require.Equal(t, rdma.WCWRFlushErr, wc.Status)
	}
	require.Equal(t, rdma.QPSErr, v.qp.State())
}

// TestPostSendNeverWaitsForPeer: the peer stops reading; posting a
// thousand 16 KiB WRITEs at once, and polling, return at once.
func TestPostSendNeverWaitsForPeer(t *testing.T) {
	v := newVictim(t, 16<<20, 2048)
	c := v.link(t)
	write := func(id uint64) rdma.SendWR {
		return rdma.SendWR{ID: id, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{{Addr: v.mr.Addr(), Length: 16 << 10, LKey: v.mr.LKey()}}, RKey: 1}
	}
	require.NoError(t, v.qp.PostSend([]rdma.SendWR{write(0)}))
	h, err := readFrame(c)
	require.NoError(t, err)
	_, err = io.CopyN(io.Discard, c, 16<<10)
	require.NoError(t, err)
	writeFrame(t, c, frameHeader{Type: frameAck, Flags: flagAck, AckPSN: h.PSN}, nil)
	var wc [16]rdma.WorkCompletion
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = v.scq.Wait(ctx, wc[:])
	require.NoError(t, err)
	// From here on the peer reads nothing.
	wrs := make([]rdma.SendWR, 1000)
	for i := range wrs {
		wrs[i] = write(uint64(i + 1))
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- v.qp.PostSend(wrs) }()
	select {
	case err := <-done:
		require.NoError(t, err)
		require.Less(t, time.Since(start), 500*time.Millisecond, "PostSend")
	case <-time.After(3 * time.Second):
		t.Fatal("PostSend of 1000 16KiB WRITEs to a peer that stopped reading still blocked after 3s")
	}
	for range 100 {
		t0 := time.Now()
		_, err := v.scq.Poll(wc[:])
		require.NoError(t, err)
		require.Less(t, time.Since(t0), 100*time.Millisecond, "Poll")
	}
	t0 := time.Now()
	require.NoError(t, v.qp.PostSend([]rdma.SendWR{write(5000)}))
	require.Less(t, time.Since(t0), 100*time.Millisecond, "PostSend behind a full socket")
}

// TestNakBeforePayload: a WRITE of 1 GiB to a key that names nothing is
// NAKed at once, before (and whether or not) its payload arrives.
func TestNakBeforePayload(t *testing.T) {
	v := newVictim(t, 1<<20, 64)
	c := v.link(t)
	writeFrame(t, c, frameHeader{Type: frameWrite, PSN: v.peer.ep.PSN, Length: 1 << 30, RKey: v.mr.RKey() ^ 0x5a5a5a5a, RemoteAddr: 8}, make([]byte, 4096))
	c.SetReadDeadline(time.Now().Add(time.Second))
	h, err := readFrame(c)
	require.NoError(t, err, "no NAK within 1s of the header")
	require.Equal(t, frameNak, h.Type)
	require.Equal(t, uint8(nakRemoteAccess), h.Code)
	require.Equal(t, rdma.QPSErr, v.qp.State())
}

// TestSpoofedHelloRefused: a connection that claims to be a queue pair's
// peer (its QPN and address, which a spoofer can guess) but does not know
// the secret the connection manager exchanged is refused, and the queue
// pair, and its real peer, carry on as if nothing happened.
func TestSpoofedHelloRefused(t *testing.T) {
	p := newPair(t)
	qa, qb := p.qpA.(*qp), p.qpB.(*qp)
	epA, epB := qa.Endpoint(), qb.Endpoint()
	for _, tc := range []struct {
		name   string
		target *Device
		h      hello
	}{
		{"ToB", p.devB, hello{SrcQPN: epA.QPN, DstQPN: epB.QPN, SrcAddr: epA.Addr}},
		{"ToA", p.devA, hello{SrcQPN: epB.QPN, DstQPN: epA.QPN, SrcAddr: epB.Addr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rand.Read(tc.h.DstSecret[:])
			c, err := net.Dial("tcp", tc.target.addr)
			require.NoError(t, err)
			defer c.Close()
			_, err = c.Write(tc.h.marshal())
			require.NoError(t, err)
			a, err := readHelloAnswer(c)
			if err == nil {
				require.NotEqual(t, helloOK, a.Status, "a hello without the secret was accepted")
			}
			// Whatever it sends next goes nowhere.
			var b [frameHeaderSize]byte
			(&frameHeader{Type: frameWrite, PSN: 12345}).encode(b[:])
			c.Write(b[:])
		})
	}
	require.Equal(t, rdma.QPSRTS, p.qpA.State())
	require.Equal(t, rdma.QPSRTS, p.qpB.State())
	copy(p.mrA.Bytes(), "still connected")
	require.NoError(t, p.qpA.PostSend([]rdma.SendWR{{ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: p.mrA.Addr(), Length: 15, LKey: p.mrA.LKey()}}, RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}}))
	require.Equal(t, rdma.WCSuccess, waitOne(t, p.cqA).Status)
	require.Equal(t, "still connected", string(p.mrB.Bytes()[:15]))
}

// TestQPNsUnpredictable: queue pair numbers are not a sequence a peer
// could extrapolate from its own.
func TestQPNsUnpredictable(t *testing.T) {
	dev, err := Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(16)
	require.NoError(t, err)
	var prev uint32
	seq := 0
	for i := range 64 {
		q, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, RecvCQ: cq})
		require.NoError(t, err)
		defer q.Close()
		if d := q.QPN() - prev; i > 0 && d < 16 {
			seq++
		}
		prev = q.QPN()
	}
	require.Less(t, seq, 4, "%d of 63 queue pair numbers were within 16 of the one before", seq)
}

// TestStaleRKeyNeverNamesNewRegion: the key of a deregistered region is
// not given to any later one (here: 100,000 registrations), and keys do
// not follow one another.
func TestStaleRKeyNeverNamesNewRegion(t *testing.T) {
	dev, err := Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	buf := make([]byte, 4096)
	seen := map[uint32]bool{}
	close := 0
	var prev uint32
	for i := range 100_000 {
		mr, err := pd.RegMR(buf, rdma.AccessAll)
		require.NoError(t, err)
		k := mr.RKey()
		require.False(t, seen[k], "registration %d got the key %#x of a deregistered region", i+1, k)
		seen[k] = true
		if d := k - prev; d < 1<<8 || -d < 1<<8 {
			close++
		}
		prev = k
		require.NoError(t, mr.Dereg())
	}
	require.Less(t, close, 10, "%d keys within 256 of the one before", close)
}
