package rpc

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/octofs/octofs/rdma"
)

// serverConn is the server's side of one connection.
//
// Memory: one registered buffer holds the receive buffers (2 × slots, each
// InlineSize bytes), then one reply buffer per slot (InlineSize bytes).
// Large messages use buffers of the server's pool.
type serverConn struct {
	s     *Server
	w     *worker
	id    uint32
	peer  Peer
	nRecv int

	mem    []byte
	mr     rdma.MR
	recvWR []rdma.RecvWR // one per receive buffer; never modified after setup

	// postMu is held shared by every post and exclusively to destroy the
	// queue pair, so that nothing is posted to a destroyed one.
	postMu   sync.RWMutex
	qp       rdma.QP
	qpClosed bool
	conn     *rdma.Conn // set once Accept succeeded, before watch starts

	mu       sync.Mutex
	dead     bool
	slots    []srvSlot
	handlers sync.WaitGroup // added to only under mu while !dead

	failOnce sync.Once
	failed   chan struct{}
	failErr  error

	ctx    context.Context // handlers' context: ends at teardown
	cancel context.CancelFunc
	qpGone chan struct{} // closed once the queue pair is destroyed

	sends atomic.Uint32

	// pending are the replies the worker made during its current batch,
	// posted together when the batch ends (postPending).
	pending []rdma.SendWR
}

type srvSlot struct {
	busy bool
	// held is a large reply the client has yet to READ and release;
	// heldImm the immediate of its call.
	held    *largeBuf
	heldImm uint32
	// readDone receives the status of the READ of a large request.
	readDone chan rdma.WCStatus
}

func newServerConn(s *Server, w *worker, id uint32, peer Peer) (*serverConn, error) {
	c := &serverConn{s: s, w: w, id: id, peer: peer, nRecv: s.recvsPerConn(),
		slots: make([]srvSlot, s.cfg.Slots), failed: make(chan struct{}), qpGone: make(chan struct{})}
	inline := s.cfg.InlineSize
	var err error
	if c.mem, err = rdma.AllocBuffer((c.nRecv + s.cfg.Slots) * inline); err != nil {
		return nil, err
	}
	if c.mr, err = s.cfg.PD.RegMR(c.mem, rdma.AccessLocalWrite); err != nil {
		rdma.FreeBuffer(c.mem)
		return nil, fmt.Errorf("register connection buffers: %w", err)
	}
	c.recvWR = make([]rdma.RecvWR, c.nRecv)
	for i := range c.recvWR {
		c.recvWR[i] = rdma.RecvWR{ID: makeWRID(id, wrRecv, i),
			SGL: []rdma.SGE{{Addr: c.mr.Addr() + uint64(i*inline), Length: uint32(inline), LKey: c.mr.LKey()}}}
	}
	for i := range c.slots {
		c.slots[i].readDone = make(chan rdma.WCStatus, 1)
	}
	// Not derived from the server's context: teardown ends it only once
	// the queue pair is gone, so that a handler cut short by Close never
	// sends a reply that looks like its result.
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

func (c *serverConn) recvBuf(i int) []byte {
	in := c.s.cfg.InlineSize
	return c.mem[i*in : (i+1)*in]
}

func (c *serverConn) replyBuf(slot int) []byte {
	in := c.s.cfg.InlineSize
	off := (c.nRecv + slot) * in
	return c.mem[off : off+in]
}

// setup runs in Init, before the client can send: post every receive.
func (c *serverConn) setup(qp rdma.QP) error {
	c.postMu.Lock()
	c.qp = qp
	c.postMu.Unlock()
	return c.postRecv(c.recvWR)
}

func (c *serverConn) postRecv(wrs []rdma.RecvWR) error {
	c.postMu.RLock()
	defer c.postMu.RUnlock()
	if c.qpClosed || c.qp == nil {
		return ErrBroken
	}
	return c.qp.PostRecv(wrs)
}

// postSend posts wrs, waiting while the send queue is full (the worker's
// background reads free it).
func (c *serverConn) postSend(wrs []rdma.SendWR) error {
	return postSendRetry(c.postSendOnce, wrs, nil)
}

func (c *serverConn) postSendOnce(wrs []rdma.SendWR) error {
	c.postMu.RLock()
	defer c.postMu.RUnlock()
	if c.qpClosed || c.qp == nil {
		return ErrBroken
	}
	return c.qp.PostSend(wrs)
}

// sendFlags signals one send in signalEvery.
func (c *serverConn) sendFlags() rdma.SendFlags {
	if c.sends.Add(1)%signalEvery == 0 {
		return rdma.SendSignaled
	}
	return 0
}

// repost gives receive buffer i back to the queue pair.
func (c *serverConn) repost(i int) {
	if err := c.postRecv(c.recvWR[i : i+1]); err != nil {
		c.fail(fmt.Errorf("%w: repost a receive: %v", ErrBroken, err))
	}
}

// fail marks the connection broken; its watcher tears it down.
func (c *serverConn) fail(err error) {
	c.failOnce.Do(func() {
		c.mu.Lock()
		c.dead = true
		c.mu.Unlock()
		c.failErr = err
		close(c.failed)
	})
}

// protocolError closes the connection of a peer that broke the protocol.
func (c *serverConn) protocolError(err error) {
	c.s.protocolErrors.Add(1)
	c.s.log.Warn("rpc: closing a connection whose peer broke the protocol", "peer", c.peer, "err", err)
	c.fail(err)
}

// watch waits for the connection to end, then tears it down.
func (c *serverConn) watch() {
	select {
	case <-c.conn.Done():
		c.fail(fmt.Errorf("%w: the peer closed the connection", ErrBroken))
	case <-c.failed:
	case <-c.s.ctx.Done():
		c.fail(ErrShuttingDown)
	}
	c.teardown()
}

// teardown destroys the queue pair, waits for the connection's handlers
// and releases its memory. It runs once, on its own goroutine.
func (c *serverConn) teardown() {
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	c.postMu.Lock()
	c.qpClosed = true
	if c.conn != nil {
		c.conn.Close()
	}
	c.postMu.Unlock()
	// No work request touches memory once the queue pair is destroyed.
	close(c.qpGone)
	c.cancel()
	c.handlers.Wait()
	// The worker may be handling a completion of this connection: once
	// remove returns, it never will again.
	c.w.remove(c)
	for i := range c.slots {
		c.s.bufs.put(c.slots[i].held)
		c.slots[i].held = nil
	}
	c.freeMemory()
	s := c.s
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if !errors.Is(c.failErr, ErrShuttingDown) {
		s.log.Debug("rpc: connection closed", "peer", c.peer, "why", c.failErr)
	}
	s.connWG.Done()
}

func (c *serverConn) freeMemory() {
	c.mr.Dereg()
	rdma.FreeBuffer(c.mem)
}

// complete handles one completion of the connection, on its worker.
func (c *serverConn) complete(wc *rdma.WorkCompletion, k uint8, idx int) {
	switch k {
	case wrRecv:
		c.received(wc, idx)
	case wrRead:
		if idx >= len(c.slots) {
			return
		}
		select {
		case c.slots[idx].readDone <- wc.Status:
		default:
		}
		if wc.Status != rdma.WCSuccess {
			c.fail(fmt.Errorf("%w: %v", ErrBroken, wc.Err()))
		}
	default:
		if wc.Status != rdma.WCSuccess {
			c.fail(fmt.Errorf("%w: %v", ErrBroken, wc.Err()))
		}
	}
}

// received handles a message in receive buffer idx.
func (c *serverConn) received(wc *rdma.WorkCompletion, idx int) {
	if wc.Status != rdma.WCSuccess {
		// A flush: the queue pair is in error.
		c.fail(fmt.Errorf("%w: %v", ErrBroken, wc.Err()))
		return
	}
	if idx >= c.nRecv {
		return
	}
	if !wc.HasImm {
		c.protocolError(fmt.Errorf("%w: a message without an immediate value", ErrProtocol))
		return
	}
	slot, _ := splitImm(wc.Imm)
	if int(slot) >= len(c.slots) {
		c.protocolError(fmt.Errorf("%w: slot %d, the connection has %d", ErrProtocol, slot, len(c.slots)))
		return
	}
	buf := c.recvBuf(idx)
	if int(wc.ByteLen) > len(buf) {
		c.protocolError(fmt.Errorf("%w: completion of %d bytes in a %d-byte buffer", ErrProtocol, wc.ByteLen, len(buf)))
		return
	}
	h, payload, err := parseMessage(buf[:wc.ByteLen])
	if err != nil {
		c.protocolError(err)
		return
	}
	switch h.Kind {
	case kindRelease:
		c.released(slot, wc.Imm, idx)
	case kindRequest:
		c.request(slot, wc.Imm, &h, payload, idx)
	default:
		c.protocolError(fmt.Errorf("%w: a client sent a message of kind %d", ErrProtocol, h.Kind))
	}
}

// released frees the large reply of the call the release names.
func (c *serverConn) released(slot uint16, imm uint32, idx int) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	sl := &c.slots[slot]
	held := sl.held
	if held == nil || sl.heldImm != imm {
		c.mu.Unlock()
		c.protocolError(fmt.Errorf("%w: release of slot %d, which holds no reply for immediate %#x", ErrProtocol, slot, imm))
		return
	}
	sl.held = nil
	c.mu.Unlock()
	c.s.bufs.put(held)
	c.repost(idx)
}

// request starts serving a call: a refusal is answered here, on the
// worker, and so is an inline handler's call unless its attempt gives up;
// any other call goes to a goroutine of its own.
func (c *serverConn) request(slot uint16, imm uint32, h *header, payload []byte, idx int) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	sl := &c.slots[slot]
	if sl.busy || sl.held != nil {
		c.mu.Unlock()
		c.protocolError(fmt.Errorf("%w: a request on slot %d, which is still in use", ErrProtocol, slot))
		return
	}
	sl.busy = true
	c.handlers.Add(1)
	c.mu.Unlock()

	s := c.s
	var refuse Status
	var why string
	reg := s.handler(h.Op)
	fn := reg.fn
	switch {
	case s.closing.Load():
		refuse, why = StatusShuttingDown, "the server is closing; try another node or later"
	case fn == nil:
		refuse, why = StatusUnknownOp, fmt.Sprintf("no handler for op %d on this server", h.Op)
	case h.Length > uint32(s.cfg.MaxMessage):
		refuse, why = StatusTooLarge, fmt.Sprintf("request of %d bytes, the server takes at most %d", h.Length, s.cfg.MaxMessage)
	case reg.try != nil && !h.large() && c.serveInline(slot, imm, h, payload, idx, reg.try):
		return
	default:
		select {
		case s.sem <- struct{}{}:
			go c.serve(slot, imm, *h, payload, idx, fn)
			return
		default:
			refuse, why = StatusBusy, fmt.Sprintf("%d handlers running, the server's limit", s.cfg.MaxHandlers)
		}
	}
	if refuse == StatusBusy {
		s.busy.Add(1)
	}
	c.repost(idx)
	c.reply(slot, imm, h, refuse, errorMessage(errors.New(why)), true)
	c.handlers.Done()
}

// serve runs a call's handler and sends its reply.
func (c *serverConn) serve(slot uint16, imm uint32, h header, payload []byte, idx int, fn Handler) {
	s := c.s
	defer c.handlers.Done()
	defer func() { <-s.sem }()
	var lb *largeBuf
	if h.large() {
		var err error
		lb, err = s.bufs.get(int(h.Length))
		c.repost(idx) // the receive buffer held only the header
		if err != nil {
			s.busy.Add(1)
			c.reply(slot, imm, &h, StatusBusy, errorMessage(err), false)
			return
		}
		if !c.readRequest(slot, &h, lb) {
			return
		}
		payload = lb.mem[:h.Length]
	}
	call := &Call{Op: h.Op, RequestID: h.RequestID, Payload: payload, Peer: c.peer}
	resp, err := c.run(fn, call)
	if lb != nil {
		s.bufs.put(lb)
	} else {
		c.repost(idx)
	}
	c.replyResult(slot, imm, &h, resp, err, false)
}

// replyResult replies with a handler's result.
func (c *serverConn) replyResult(slot uint16, imm uint32, h *header, resp []byte, err error, onWorker bool) {
	switch {
	case err == nil:
		c.reply(slot, imm, h, StatusOK, resp, onWorker)
	case errors.Is(err, ErrBusy):
		c.s.busy.Add(1)
		c.reply(slot, imm, h, StatusBusy, errorMessage(err), onWorker)
	default:
		c.reply(slot, imm, h, StatusHandlerError, errorMessage(err), onWorker)
	}
}

// serveInline runs an inline attempt on the worker and posts its reply
// from there (HandleInline). It reports false, having done nothing, if
// the attempt gave up (ErrNotInline).
func (c *serverConn) serveInline(slot uint16, imm uint32, h *header, payload []byte, idx int, fn Handler) bool {
	resp, err := c.run(fn, &Call{Op: h.Op, RequestID: h.RequestID, Payload: payload, Peer: c.peer})
	if errors.Is(err, ErrNotInline) {
		return false
	}
	c.repost(idx)
	c.replyResult(slot, imm, h, resp, err, true)
	c.handlers.Done()
	return true
}

// readRequest READs a large request's payload from the client into lb. It
// reports false if the connection broke meanwhile; lb is then released
// here, once no READ can write into it.
func (c *serverConn) readRequest(slot uint16, h *header, lb *largeBuf) bool {
	sl := &c.slots[slot]
	select {
	case <-sl.readDone: // a stale status of a READ that ended with its connection
	default:
	}
	wr := []rdma.SendWR{{ID: makeWRID(c.id, wrRead, int(slot)), Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
		SGL:        []rdma.SGE{{Addr: lb.addr(), Length: h.Length, LKey: lb.mr.LKey()}},
		RemoteAddr: h.Addr, RKey: h.RKey}}
	if err := c.postSend(wr); err != nil {
		c.fail(fmt.Errorf("%w: post a READ: %v", ErrBroken, err))
		c.s.bufs.put(lb)
		return false
	}
	select {
	case st := <-sl.readDone:
		if st == rdma.WCSuccess {
			return true
		}
	case <-c.qpGone:
	}
	// The READ failed or its queue pair is gone: in both cases nothing
	// writes into lb any more once the queue pair is destroyed.
	<-c.qpGone
	c.s.bufs.put(lb)
	return false
}

// run calls fn, turning a panic into a handler error so that one bad
// handler does not take the node down.
func (c *serverConn) run(fn Handler, call *Call) (resp []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.s.log.Error("rpc: handler panicked", "op", call.Op, "peer", c.peer, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, fmt.Errorf("handler for op %d panicked: %v", call.Op, r)
		}
	}()
	return fn(c.ctx, call)
}

// reply sends a call's reply: inline if it fits the caller's receive
// buffer, else staged in a large buffer for the caller to READ. On the
// worker (onWorker) the reply is posted when the worker's batch ends,
// with the batch's other replies to the connection (postPending).
func (c *serverConn) reply(slot uint16, imm uint32, req *header, status Status, resp []byte, onWorker bool) {
	s := c.s
	s.calls.Add(1)
	if len(resp) > s.cfg.MaxMessage {
		status, resp = StatusTooLarge, []byte(fmt.Sprintf("reply of %d bytes, the server sends at most %d", len(resp), s.cfg.MaxMessage))
	}
	h := header{Kind: kindReply, Status: status, Op: req.Op, RequestID: req.RequestID, Length: uint32(len(resp))}
	buf := c.replyBuf(int(slot))
	limit := min(int(req.Limit), len(buf))
	var lb *largeBuf
	if HeaderSize+len(resp) > limit {
		var err error
		if lb, err = s.bufs.get(len(resp)); err != nil {
			s.busy.Add(1)
			msg := errorMessage(fmt.Errorf("the handler ran, but its reply of %d bytes could not be held: %w", len(resp), err))
			h.Status, h.Length, resp = StatusBusy, uint32(len(msg)), msg
		} else {
			copy(lb.mem, resp)
			h.Flags, h.Addr, h.RKey = flagLarge, lb.addr(), lb.mr.RKey()
		}
	}
	h.put(buf)
	n := HeaderSize
	if lb == nil {
		n += copy(buf[HeaderSize:], resp)
	}
	// The slot is free, and the large reply held, before the reply is
	// posted: the client may reuse the slot or release the reply as soon
	// as the reply arrives.
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		s.bufs.put(lb)
		return
	}
	sl := &c.slots[slot]
	sl.busy = false
	if lb != nil {
		sl.held, sl.heldImm = lb, imm
	}
	c.mu.Unlock()
	wr := []rdma.SendWR{{ID: makeWRID(c.id, wrSend, int(slot)), Opcode: rdma.OpSendWithImm, Flags: c.sendFlags(), Imm: imm,
		SGL: []rdma.SGE{{Addr: c.mr.Addr() + uint64((c.nRecv+int(slot))*s.cfg.InlineSize), Length: uint32(n), LKey: c.mr.LKey()}}}}
	if onWorker {
		// Posted with the batch's other replies (one write for all of
		// them on the soft provider).
		c.pending = append(c.pending, wr...)
		if len(c.pending) == len(wr) {
			c.w.dirty = append(c.w.dirty, c)
		}
		return
	}
	if err := c.postSend(wr); err != nil {
		c.fail(fmt.Errorf("%w: post a reply: %v", ErrBroken, err))
	}
}

// postPending posts the replies the worker made during its batch. A full
// send queue hands the rest to a goroutine, so that a peer slow to
// acknowledge never holds up the worker's other connections.
func (c *serverConn) postPending() {
	wrs := c.pending
	c.pending = c.pending[:0]
	err := c.postSendOnce(wrs)
	if errors.Is(err, rdma.ErrQueueFull) {
		rest := append([]rdma.SendWR(nil), unposted(wrs, err)...)
		c.mu.Lock()
		dead := c.dead
		if !dead {
			// Teardown waits for this goroutine too.
			c.handlers.Add(1)
		}
		c.mu.Unlock()
		if dead {
			return
		}
		go func() {
			defer c.handlers.Done()
			if err := c.postSend(rest); err != nil {
				c.fail(fmt.Errorf("%w: post a reply: %v", ErrBroken, err))
			}
		}()
		return
	}
	if err != nil {
		c.fail(fmt.Errorf("%w: post a reply: %v", ErrBroken, err))
	}
}
