package rpc

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/octofs/octofs/rdma"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Device creates the connection's completion queue. Required.
	Device rdma.Device
	// PrivateData is sent with the connection request: the node's hello
	// (cluster token, the connection's purpose), which the acceptor
	// checks before it hands the connection to its Server.
	PrivateData []byte
	// Slots is how many calls may be in flight at once (default 64, at
	// most MaxSlots); the server may grant fewer.
	Slots int
	// InlineSize is the size of a receive buffer, header included
	// (default 4096): larger replies are READ from the server's memory.
	InlineSize int
	// MaxMessage bounds request and reply payloads (default 1 MiB).
	MaxMessage int
	// LargeBudget bounds the registered memory held at once for large
	// messages (default 16 × MaxMessage, at most 64 MiB, at least one).
	LargeBudget int64
	// Conn sets the queue pair's transport attributes (Timeout,
	// RetryCount, RNRRetry, MinRNRTimer); its other fields are ignored.
	Conn rdma.ConnParams
	// Now is the clock of the idle time Pool reads (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

func (cfg *ClientConfig) withDefaults() (ClientConfig, error) {
	c := *cfg
	if c.Device == nil {
		return c, fmt.Errorf("%w: a client needs a Device", ErrConfig)
	}
	c.Slots = orDefault(c.Slots, DefaultSlots)
	c.InlineSize = orDefault(c.InlineSize, DefaultInlineSize)
	c.MaxMessage = orDefault(c.MaxMessage, DefaultMaxMessage)
	if err := checkSizes(c.Slots, c.InlineSize, c.MaxMessage); err != nil {
		return c, err
	}
	if c.LargeBudget == 0 {
		c.LargeBudget = min(16*int64(c.MaxMessage), 64<<20)
	}
	c.LargeBudget = max(c.LargeBudget, int64(classSize(largeClass(c.MaxMessage))))
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Client is one RPC connection to a server. Call is safe for concurrent
// use: calls share the connection's queue pair, up to its slots at once.
type Client struct {
	cfg  ClientConfig
	addr string
	srv  serverParams

	conn   *rdma.Conn
	cq     rdma.CQ
	recv   []byte // receive buffers, cfg.Slots × InlineSize
	recvMR rdma.MR
	recvWR []rdma.RecvWR
	send   []byte // request buffers, one per slot, then the release header
	sendMR rdma.MR
	sendSz int
	bufs   *bufPool

	postMu   sync.RWMutex // posts shared; destroying the queue pair exclusive
	qpClosed bool
	sends    atomic.Uint32

	slots []cliSlot
	free  chan uint16

	// The poller: the one caller that waits in CQ.Wait and hands the
	// other callers their replies. pollerFree holds a token when the
	// poller has left, for a waiting caller to take its place.
	pollMu     sync.Mutex
	pollerFree chan struct{}
	wcs        []rdma.WorkCompletion

	mu       sync.Mutex
	cond     *sync.Cond // signaled when active drops to zero after a break
	broken   bool
	err      error
	active   int
	failOnce sync.Once
	done     chan struct{} // closed when the connection breaks or Close is called
	closed   chan struct{} // closed when every resource is released

	inflight atomic.Int32
	lastUsed atomic.Int64 // cfg.Now() in Unix nanoseconds
}

type slotState uint8

const (
	slotFree      slotState = iota
	slotWaiting             // the request is sent; no reply yet
	slotReading             // a large reply is being READ
	slotAbandoned           // the caller gave up; the late reply is to be dropped
	slotDone                // result and err are set; the caller collects them
)

type cliSlot struct {
	gen   uint16
	state slotState
	op    uint16
	id    uint64
	// staged holds a large request until its reply (the server may READ
	// it until then); reading receives a large reply.
	staged  *largeBuf
	reading *largeBuf
	rhdr    header // the header of the reply being READ
	result  []byte
	err     error
	done    chan struct{} // a token when state becomes slotDone
}

// Dial connects to the server at addr (the node's rdma.Listener) and
// returns a client ready for calls. pd must be a protection domain of
// cfg.Device.
func Dial(ctx context.Context, pd rdma.PD, addr string, cfg ClientConfig) (_ *Client, err error) {
	conf, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: conf, addr: addr, pollerFree: make(chan struct{}, 1),
		done: make(chan struct{}), closed: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	c.bufs = newBufPool(pd, rdma.AccessLocalWrite|rdma.AccessRemoteRead, conf.LargeBudget, conf.LargeBudget/4)
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	sendWR := sendQueueDepth(conf.Slots)
	if c.cq, err = conf.Device.CreateCQ(conf.Slots + sendWR); err != nil {
		return nil, fmt.Errorf("rpc: dial %s: %w", addr, err)
	}
	if c.recv, err = rdma.AllocBuffer(conf.Slots * conf.InlineSize); err != nil {
		return nil, fmt.Errorf("rpc: dial %s: %w", addr, err)
	}
	if c.recvMR, err = pd.RegMR(c.recv, rdma.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("rpc: dial %s: register receive buffers: %w", addr, err)
	}
	c.recvWR = make([]rdma.RecvWR, conf.Slots)
	for i := range c.recvWR {
		c.recvWR[i] = rdma.RecvWR{ID: makeWRID(0, wrRecv, i), SGL: []rdma.SGE{{
			Addr: c.recvMR.Addr() + uint64(i*conf.InlineSize), Length: uint32(conf.InlineSize), LKey: c.recvMR.LKey()}}}
	}
	p := conf.Conn
	c.conn, err = rdma.Dial(ctx, pd, addr, rdma.ConnParams{
		QP: rdma.QPConfig{SendCQ: c.cq, RecvCQ: c.cq, MaxSendWR: sendWR, MaxRecvWR: conf.Slots, MaxSendSGE: 1, MaxRecvSGE: 1},
		// The server READs large requests from the client's buffers.
		Access:  rdma.AccessRemoteRead,
		Timeout: p.Timeout, RetryCount: p.RetryCount, RNRRetry: p.RNRRetry, MinRNRTimer: p.MinRNRTimer,
		PrivateData: conf.PrivateData,
		Setup:       func(qp rdma.QP) error { return qp.PostRecv(c.recvWR) },
	})
	if err != nil {
		return nil, fmt.Errorf("rpc: dial %s: %w", addr, err)
	}
	if c.srv, err = decodeServerParams(c.conn.PrivateData); err != nil {
		return nil, fmt.Errorf("rpc: dial %s: %w", addr, err)
	}
	n := min(conf.Slots, c.srv.Slots)
	c.sendSz = min(conf.InlineSize, c.srv.InlineSize)
	if c.send, err = rdma.AllocBuffer(n*c.sendSz + HeaderSize); err != nil {
		return nil, fmt.Errorf("rpc: dial %s: %w", addr, err)
	}
	if c.sendMR, err = pd.RegMR(c.send, rdma.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("rpc: dial %s: register request buffers: %w", addr, err)
	}
	release := header{Kind: kindRelease}
	release.put(c.send[n*c.sendSz:])
	c.slots = make([]cliSlot, n)
	c.free = make(chan uint16, n)
	for i := range c.slots {
		c.slots[i].done = make(chan struct{}, 1)
		c.free <- uint16(i)
	}
	c.wcs = make([]rdma.WorkCompletion, 64)
	c.lastUsed.Store(conf.Now().UnixNano())
	go c.watch()
	return c, nil
}

// Addr is the address the client dialed.
func (c *Client) Addr() string { return c.addr }

// Done is closed when the connection breaks or Close is called; calls
// then fail at once. Err says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is nil while the connection works, then why it stopped (wrapping
// ErrBroken or ErrClosed).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Slots is how many calls may be in flight at once on this connection.
func (c *Client) Slots() int { return len(c.slots) }

// MaxMessage is the largest payload a call may carry.
func (c *Client) MaxMessage() int { return min(c.cfg.MaxMessage, c.srv.MaxMessage) }

// Close fails the calls in flight with ErrClosed, closes the connection
// and releases its resources. It returns once they are released.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	<-c.closed
	return nil
}

// Call sends a request for op with the caller's request id and payload,
// and returns the reply's payload. It fails with ErrTimeout when ctx ends
// first (the call may or may not have executed), ErrBroken or ErrClosed
// when the connection stops, ErrTooLarge for a payload over MaxMessage,
// and a *StatusError when the server answers with a status other than
// StatusOK.
func (c *Client) Call(ctx context.Context, op uint16, requestID uint64, payload []byte) ([]byte, error) {
	if len(payload) > c.MaxMessage() {
		return nil, fmt.Errorf("%w: request of %d bytes, at most %d", ErrTooLarge, len(payload), c.MaxMessage())
	}
	if ctx.Err() != nil {
		return nil, timeoutError(ctx) // not sent
	}
	if !c.enter() {
		return nil, &notSentError{c.Err()}
	}
	defer c.leave()
	if c.inflight.Add(1) == 1 {
		c.checkIdle()
	}
	defer func() {
		c.lastUsed.Store(c.cfg.Now().UnixNano())
		c.inflight.Add(-1)
	}()

	s, err := c.acquire(ctx)
	if err != nil {
		return nil, err
	}
	sl := &c.slots[s]
	h := header{Kind: kindRequest, Op: op, RequestID: requestID, Length: uint32(len(payload)), Limit: uint32(c.cfg.InlineSize)}
	buf := c.sendBuf(int(s))
	n := HeaderSize
	var staged *largeBuf
	if HeaderSize+len(payload) <= len(buf) {
		n += copy(buf[HeaderSize:], payload)
	} else {
		if staged, err = c.bufs.get(len(payload)); err != nil {
			c.free <- s
			return nil, err
		}
		copy(staged.mem, payload)
		h.Flags, h.Addr, h.RKey = flagLarge, staged.addr(), staged.mr.RKey()
	}
	h.put(buf)
	c.mu.Lock()
	if c.broken {
		c.mu.Unlock()
		c.bufs.put(staged)
		return nil, &notSentError{c.Err()}
	}
	// A new generation per call: a reply is matched by slot and
	// generation, so no reply of an earlier call fits this one.
	sl.gen++
	imm := makeImm(s, sl.gen)
	sl.state, sl.op, sl.id, sl.staged = slotWaiting, op, requestID, staged
	c.mu.Unlock()
	wr := []rdma.SendWR{{ID: makeWRID(0, wrSend, int(s)), Opcode: rdma.OpSendWithImm, Flags: c.sendFlags(), Imm: imm,
		SGL: []rdma.SGE{{Addr: c.sendMR.Addr() + uint64(int(s)*c.sendSz), Length: uint32(n), LKey: c.sendMR.LKey()}}}}
	if err := c.postSend(wr, false); err != nil {
		c.fail(fmt.Errorf("%w: post a request: %v", ErrBroken, err))
		<-sl.done
		c.collect(s)
		return nil, &notSentError{c.Err()}
	}
	return c.await(ctx, s)
}

func timeoutError(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrTimeout, context.Cause(ctx))
}

func (c *Client) sendBuf(slot int) []byte {
	return c.send[slot*c.sendSz : (slot+1)*c.sendSz]
}

func (c *Client) recvBuf(i int) []byte {
	in := c.cfg.InlineSize
	return c.recv[i*in : (i+1)*in]
}

func (c *Client) sendFlags() rdma.SendFlags {
	if c.sends.Add(1)%signalEvery == 0 {
		return rdma.SendSignaled
	}
	return 0
}

// postSend posts wrs, waiting while the send queue is full; poller says
// whether the caller is the poller (and may poll while it waits).
func (c *Client) postSend(wrs []rdma.SendWR, poller bool) error {
	reclaim := c.reclaim
	if poller {
		reclaim = c.reclaimAsPoller
	}
	return postSendRetry(c.postSendOnce, wrs, reclaim)
}

// reclaim polls the completion queue once if nobody else polls it, so
// that the completions that free send queue entries are seen.
func (c *Client) reclaim() {
	if !c.pollMu.TryLock() {
		return
	}
	c.reclaimAsPoller()
	c.pollMu.Unlock()
	// A caller that found the poller's lock held meanwhile waits for a
	// token.
	c.wakePoller()
}

// reclaimAsPoller polls once, into a buffer of its own: the poller may be
// in the middle of dispatching c.wcs.
func (c *Client) reclaimAsPoller() {
	var wcs [8]rdma.WorkCompletion
	n, err := c.cq.Poll(wcs[:])
	if err != nil {
		c.fail(fmt.Errorf("%w: completion queue: %v", ErrBroken, err))
		return
	}
	for i := range wcs[:n] {
		c.dispatch(&wcs[i])
	}
}

func (c *Client) postSendOnce(wrs []rdma.SendWR) error {
	c.postMu.RLock()
	defer c.postMu.RUnlock()
	if c.qpClosed {
		return ErrBroken
	}
	return c.conn.QP.PostSend(wrs)
}

func (c *Client) postRecv(wrs []rdma.RecvWR) error {
	c.postMu.RLock()
	defer c.postMu.RUnlock()
	if c.qpClosed {
		return ErrBroken
	}
	return c.conn.QP.PostRecv(wrs)
}

// enter counts a call in; it reports false once the connection is broken.
func (c *Client) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken {
		return false
	}
	c.active++
	return true
}

func (c *Client) leave() {
	c.mu.Lock()
	c.active--
	if c.active == 0 && c.broken {
		c.cond.Broadcast()
	}
	c.mu.Unlock()
}

// idleCheckAfter: a call that finds the connection idle for this long
// first polls the completion queue once, without blocking.
const idleCheckAfter = time.Millisecond

// checkIdle polls the completion queue once if the connection has been
// idle: nobody polled it meanwhile, and a queue pair that failed while
// idle (its flushed receives are waiting there) is then noticed before a
// request is sent, so that the call fails as not sent and Pool can retry
// it on a fresh connection.
func (c *Client) checkIdle() {
	if c.cfg.Now().UnixNano()-c.lastUsed.Load() < int64(idleCheckAfter) || !c.pollMu.TryLock() {
		return
	}
	defer c.pollMu.Unlock()
	n, err := c.cq.Poll(c.wcs)
	if err != nil {
		c.fail(fmt.Errorf("%w: completion queue: %v", ErrBroken, err))
		return
	}
	for i := range c.wcs[:n] {
		c.dispatch(&c.wcs[i])
	}
}

// acquire takes a free slot. While all are taken it waits, and polls if
// nobody else does: only polling frees the slots of abandoned calls.
func (c *Client) acquire(ctx context.Context) (uint16, error) {
	select {
	case s := <-c.free:
		return s, nil
	default:
	}
	owe := false
	defer func() {
		if owe {
			c.wakePoller()
		}
	}()
	for {
		select {
		case s := <-c.free:
			return s, nil
		case <-c.done:
			return 0, &notSentError{c.Err()}
		default:
		}
		owe = false
		if c.pollMu.TryLock() {
			err := c.poll(ctx, nil)
			c.pollMu.Unlock()
			c.wakePoller()
			if err != nil {
				return 0, timeoutError(ctx)
			}
			continue
		}
		select {
		case s := <-c.free:
			return s, nil
		case <-c.pollerFree:
			owe = true
		case <-ctx.Done():
			return 0, timeoutError(ctx)
		case <-c.done:
			return 0, &notSentError{c.Err()}
		}
	}
}

// await waits for slot s's reply. One waiting caller at a time is the
// poller: it waits on the completion queue itself (so that a provider
// that reads the network on the waiting goroutine serves it without a
// hand-off) and hands the others their replies; the others wait for
// their slot or for the poller to leave, one of them then taking its
// place.
func (c *Client) await(ctx context.Context, s uint16) ([]byte, error) {
	sl := &c.slots[s]
	// owe is set while this caller holds the poller token without having
	// tried to become the poller: it must pass the token on if it leaves.
	owe := false
	defer func() {
		if owe {
			c.wakePoller()
		}
	}()
	for {
		select {
		case <-sl.done:
			return c.collect(s)
		default:
		}
		owe = false
		if c.pollMu.TryLock() {
			err := c.poll(ctx, sl)
			c.pollMu.Unlock()
			c.wakePoller()
			if err != nil {
				return c.abandon(ctx, s)
			}
			continue
		}
		select {
		case <-sl.done:
			return c.collect(s)
		case <-c.pollerFree:
			owe = true
		case <-ctx.Done():
			return c.abandon(ctx, s)
		}
	}
}

// wakePoller lets a waiting caller take the poller's place.
func (c *Client) wakePoller() {
	select {
	case c.pollerFree <- struct{}{}:
	default:
	}
}

// poll waits on the completion queue and dispatches completions until
// sl's call is done (sl nil: until a slot is free or the connection
// stops) or ctx ends.
func (c *Client) poll(ctx context.Context, sl *cliSlot) error {
	for !c.pollDone(sl) {
		n, err := c.cq.Wait(ctx, c.wcs)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.fail(fmt.Errorf("%w: completion queue: %v", ErrBroken, err))
			continue // fail finished sl's call and closed done
		}
		for i := range c.wcs[:n] {
			c.dispatch(&c.wcs[i])
		}
	}
	return nil
}

func (c *Client) pollDone(sl *cliSlot) bool {
	if sl != nil {
		return len(sl.done) > 0
	}
	select {
	case <-c.done:
		return true
	default:
		return len(c.free) > 0
	}
}

// abandon gives up on slot s's call after ctx ended: a reply that arrives
// later is dropped, and the slot is reused only then, so that it can never
// be taken for the reply of a later call.
func (c *Client) abandon(ctx context.Context, s uint16) ([]byte, error) {
	sl := &c.slots[s]
	c.mu.Lock()
	if sl.state == slotDone {
		c.mu.Unlock()
		<-sl.done
		return c.collect(s)
	}
	sl.state = slotAbandoned
	c.mu.Unlock()
	return nil, timeoutError(ctx)
}

// collect returns slot s's result and frees the slot. The slot's done
// token has been taken.
func (c *Client) collect(s uint16) ([]byte, error) {
	sl := &c.slots[s]
	c.mu.Lock()
	res, err := sl.result, sl.err
	sl.result, sl.err, sl.state = nil, nil, slotFree
	c.mu.Unlock()
	c.free <- s
	return res, err
}

// finishLocked completes slot sl's call with a result; signal then wakes
// its caller.
func finishLocked(sl *cliSlot, res []byte, err error) {
	sl.result, sl.err, sl.state = res, err, slotDone
}

func signal(sl *cliSlot) { sl.done <- struct{}{} }

// dispatch handles one completion, on the poller.
func (c *Client) dispatch(wc *rdma.WorkCompletion) {
	_, k, idx := splitWRID(wc.ID)
	switch k {
	case wrRecv:
		c.received(wc, idx)
	case wrRead:
		c.readDone(wc, idx)
	default:
		if wc.Status != rdma.WCSuccess {
			c.fail(fmt.Errorf("%w: %v", ErrBroken, wc.Err()))
		}
	}
}

// received handles a reply in receive buffer idx.
func (c *Client) received(wc *rdma.WorkCompletion, idx int) {
	if wc.Status != rdma.WCSuccess {
		c.fail(fmt.Errorf("%w: %v", ErrBroken, wc.Err()))
		return
	}
	if idx >= len(c.recvWR) {
		return
	}
	if !wc.HasImm {
		c.protocolError(fmt.Errorf("%w: a reply without an immediate value", ErrProtocol))
		return
	}
	slot, gen := splitImm(wc.Imm)
	if int(slot) >= len(c.slots) {
		c.protocolError(fmt.Errorf("%w: a reply for slot %d, the connection has %d", ErrProtocol, slot, len(c.slots)))
		return
	}
	buf := c.recvBuf(idx)
	if int(wc.ByteLen) > len(buf) {
		c.protocolError(fmt.Errorf("%w: completion of %d bytes in a %d-byte buffer", ErrProtocol, wc.ByteLen, len(buf)))
		return
	}
	h, payload, err := parseMessage(buf[:wc.ByteLen])
	if err == nil && h.Kind != kindReply {
		err = fmt.Errorf("%w: the server sent a message of kind %d", ErrProtocol, h.Kind)
	}
	if err != nil {
		c.protocolError(err)
		return
	}

	sl := &c.slots[slot]
	var staged, lb *largeBuf
	var readErr error
	freeSlot, releaseIt, read, finished := false, false, false, false
	c.mu.Lock()
	if sl.gen != gen || (sl.state != slotWaiting && sl.state != slotAbandoned) || sl.reading != nil || sl.op != h.Op || sl.id != h.RequestID {
		st := sl.state
		c.mu.Unlock()
		c.protocolError(fmt.Errorf("%w: a reply (op %d, request %d, immediate %#x) that matches no call in flight (slot state %d)",
			ErrProtocol, h.Op, h.RequestID, wc.Imm, st))
		return
	}
	staged, sl.staged = sl.staged, nil
	switch {
	case sl.state == slotAbandoned:
		releaseIt = h.large()
		sl.state, freeSlot = slotFree, true
	case !h.large():
		res, err := replyResult(&h, payload)
		finishLocked(sl, res, err)
		finished = true
	case int(h.Length) > c.cfg.MaxMessage:
		releaseIt, finished = true, true
		finishLocked(sl, nil, fmt.Errorf("%w: the server ran op %d and replied %d bytes, ClientConfig.MaxMessage is %d", ErrTooLarge, h.Op, h.Length, c.cfg.MaxMessage))
	default:
		if lb, readErr = c.bufs.get(int(h.Length)); readErr != nil {
			releaseIt, finished = true, true
			finishLocked(sl, nil, fmt.Errorf("the server ran op %d but its %d-byte reply could not be fetched: %w", h.Op, h.Length, readErr))
		} else {
			read = true
			sl.reading, sl.rhdr, sl.state = lb, h, slotReading
		}
	}
	c.mu.Unlock()
	c.bufs.put(staged)
	// The receive goes back before the caller learns its result: a
	// caller could otherwise free the slot and have a new call's reply
	// arrive while the client has fewer receives posted than slots.
	repostErr := c.postRecv(c.recvWR[idx : idx+1])
	if finished {
		signal(sl)
	}
	if repostErr != nil {
		c.fail(fmt.Errorf("%w: repost a receive: %v", ErrBroken, repostErr))
		return
	}
	switch {
	case read:
		// The release waits for the READ (FENCE), so the server reuses
		// its buffer only once the reply is here.
		wrs := []rdma.SendWR{
			{ID: makeWRID(0, wrRead, int(slot)), Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
				SGL:        []rdma.SGE{{Addr: lb.addr(), Length: h.Length, LKey: lb.mr.LKey()}},
				RemoteAddr: h.Addr, RKey: h.RKey},
			c.releaseWR(wc.Imm, int(slot), rdma.SendFence),
		}
		if err := c.postSend(wrs, true); err != nil {
			c.fail(fmt.Errorf("%w: post a READ: %v", ErrBroken, err))
		}
	case releaseIt:
		if err := c.postSend([]rdma.SendWR{c.releaseWR(wc.Imm, int(slot), 0)}, true); err != nil {
			c.fail(fmt.Errorf("%w: post a release: %v", ErrBroken, err))
		}
	}
	if freeSlot {
		c.free <- slot
	}
}

func (c *Client) releaseWR(imm uint32, slot int, flags rdma.SendFlags) rdma.SendWR {
	return rdma.SendWR{ID: makeWRID(0, wrSend, slot), Opcode: rdma.OpSendWithImm, Flags: flags | c.sendFlags(), Imm: imm,
		SGL: []rdma.SGE{{Addr: c.sendMR.Addr() + uint64(len(c.slots)*c.sendSz), Length: HeaderSize, LKey: c.sendMR.LKey()}}}
}

// readDone handles the completion of a large reply's READ into slot idx.
func (c *Client) readDone(wc *rdma.WorkCompletion, idx int) {
	if wc.Status != rdma.WCSuccess {
		// The buffer is released at teardown, once the queue pair is
		// destroyed and nothing writes into it.
		c.fail(fmt.Errorf("%w: READ of a large reply: %v", ErrBroken, wc.Err()))
		return
	}
	if idx >= len(c.slots) {
		return
	}
	sl := &c.slots[idx]
	freeSlot := false
	c.mu.Lock()
	lb := sl.reading
	if lb == nil {
		c.mu.Unlock()
		return
	}
	sl.reading = nil
	switch sl.state {
	case slotReading:
		res, err := replyResult(&sl.rhdr, lb.mem[:sl.rhdr.Length])
		finishLocked(sl, res, err)
		signal(sl)
	case slotAbandoned:
		sl.state, freeSlot = slotFree, true
	}
	c.mu.Unlock()
	c.bufs.put(lb)
	if freeSlot {
		c.free <- uint16(idx)
	}
}

// replyResult turns a reply into Call's results; payload is copied.
func replyResult(h *header, payload []byte) ([]byte, error) {
	if h.Status == StatusOK {
		return bytes.Clone(payload), nil
	}
	return nil, &StatusError{Status: h.Status, Op: h.Op, Msg: string(payload)}
}

func (c *Client) protocolError(err error) {
	c.cfg.Logger.Warn("rpc: closing a connection whose server broke the protocol", "addr", c.addr, "err", err)
	c.fail(fmt.Errorf("%w: %w", ErrBroken, err))
}

// fail stops the connection: every call in flight fails with err at once,
// and the queue pair moves to the error state, whose flushed receives
// wake a poller waiting on the completion queue.
func (c *Client) fail(err error) {
	c.failOnce.Do(func() {
		c.mu.Lock()
		c.broken, c.err = true, err
		for i := range c.slots {
			sl := &c.slots[i]
			if sl.state == slotWaiting || sl.state == slotReading {
				finishLocked(sl, nil, err)
				signal(sl)
			}
		}
		c.mu.Unlock()
		close(c.done)
		c.postMu.RLock()
		if !c.qpClosed && c.conn != nil {
			c.conn.QP.Modify(rdma.QPAttr{State: rdma.QPSErr})
		}
		c.postMu.RUnlock()
	})
}

// watch waits for the connection to stop, then releases everything once
// no caller uses it.
func (c *Client) watch() {
	select {
	case <-c.conn.Done():
		c.fail(fmt.Errorf("%w: the server closed the connection or went away", ErrBroken))
	case <-c.done:
	}
	c.mu.Lock()
	for c.active > 0 {
		c.cond.Wait()
	}
	c.mu.Unlock()
	c.release()
	close(c.closed)
}

// release frees every resource; nothing uses them any more.
func (c *Client) release() {
	c.postMu.Lock()
	c.qpClosed = true
	if c.conn != nil {
		c.conn.Close()
	}
	c.postMu.Unlock()
	if c.cq != nil {
		c.cq.Close()
	}
	for i := range c.slots {
		c.bufs.put(c.slots[i].staged)
		c.bufs.put(c.slots[i].reading)
		c.slots[i].staged, c.slots[i].reading = nil, nil
	}
	c.bufs.close()
	if c.sendMR != nil {
		c.sendMR.Dereg()
	}
	rdma.FreeBuffer(c.send)
	if c.recvMR != nil {
		c.recvMR.Dereg()
	}
	rdma.FreeBuffer(c.recv)
}

// idle reports whether no call is in flight, and since when.
func (c *Client) idle() (time.Time, bool) {
	if c.inflight.Load() > 0 {
		return time.Time{}, false
	}
	return time.Unix(0, c.lastUsed.Load()), true
}
