package soft

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/octofs/octofs/rdma"
)

// Reading a link. The state of the frame being read lives here, not on a
// goroutine's stack, so that reading can stop at any byte (a driver's
// context ends, the background goroutine is evicted) and go on from there
// on another goroutine. Every read is non-blocking; a reader that must
// wait for input parks in the poller with nothing held (link.park), and
// can be interrupted there.

// rxBufSize is the read buffer: small frames are read into it many at a
// time; large payloads go straight from the socket to their destination.
const rxBufSize = 64 << 10

// directMin is the smallest remainder of a payload read straight into its
// destination rather than through the buffer.
const directMin = 8 << 10

// smallPlace is the largest payload that, when it has arrived whole, is
// placed and completed under the queue pair's lock in one go, rather than
// chunk by chunk (beginPlace).
const smallPlace = 16 << 10

// buffered returns the whole payload of the current frame if it is in the
// buffer and small.
func (rx *rxState) buffered() ([]byte, bool) {
	n := int(rx.h.Length)
	if n > smallPlace || rx.w-rx.r < n {
		return nil, false
	}
	return rx.buf[rx.r : rx.r+n], true
}

// took consumes the current frame's payload from the buffer, placed by
// whoever called buffered, with its acknowledgement applied.
func (rx *rxState) took() {
	rx.r += int(rx.h.Length)
	rx.left = 0
	rx.action = actNone
	rx.ackDone = true
}

// scatter copies b into spans; the caller holds their regions.
func scatter(spans [][]byte, b []byte) {
	for _, s := range spans {
		if len(b) == 0 {
			return
		}
		b = b[copy(s, b):]
	}
}

// rxState is a link's reading state; only the read turn's holder touches
// it.
type rxState struct {
	buf  []byte
	r, w int // buf[r:w] is read and not yet applied

	inFrame bool // h is a frame whose payload is still being read
	h       frameHeader
	left    uint32 // payload bytes of h still to read

	// Where the payload goes: spans of memory regions (owners[i] holds
	// spans[i]), filled in order from spans[si] at offset spanOff, or
	// nowhere (discard).
	sink    sinkKind
	spans   [][]byte
	owners  []*mr
	si      int
	spanOff int
	recvIdx uint64 // sinkRecv: the receive being filled
	sqIdx   uint64 // sinkRead: the READ being filled
	got     uint32 // payload bytes placed so far

	// The responder's state (responder.go).
	ePSN    uint32 // the next request's PSN
	rnrWait bool   // an RNR NAK was sent: drop requests until ePSN returns

	action  frameAction // what the frame does once read (responder.go)
	ackDone bool        // the frame's acknowledgement was applied already

	// One read's request and result (readOnce).
	op         rxOp
	block      bool
	n, inSpans int
	rerr, ferr error
	bufs       [][]byte     // what one readv fills
	iov        []unix.Iovec // scratch for readv
	old        [8]byte      // an atomic response's value, for placing
}

type rxOp uint8

const (
	rxFill   rxOp = iota // into the buffer
	rxDirect             // into the current payload's destination
)

type sinkKind uint8

const (
	sinkDiscard sinkKind = iota
	sinkMR               // a WRITE into a region of this side
	sinkRecv             // a SEND into a posted receive's buffers
	sinkRead             // a READ response into the local buffers
)

func (rx *rxState) init(q *qp) {
	rx.buf = make([]byte, rxBufSize)
	rx.ePSN = q.remote.PSN & 0xffffff
	rx.iov = make([]unix.Iovec, 0, softCaps.MaxSGE+1)
	rx.bufs = make([][]byte, 0, softCaps.MaxSGE+1)
	rx.spans = make([][]byte, 0, softCaps.MaxSGE)
	rx.owners = make([]*mr, 0, softCaps.MaxSGE)
}

// errWouldBlock is a non-blocking read finding no input.
var errWouldBlock = errors.New("would block")

// pump applies the frames that arrive. With block it waits for input
// (parked, interruptible) until stop reports true, which it asks before
// each wait, and returns errTurnOver then; without, it returns
// errWouldBlock once the socket is empty. Any other error means the link
// failed.
func (l *link) pump(block bool, stop func() bool) error {
	for {
		for {
			progressed, err := l.step()
			if err != nil {
				return err
			}
			if !progressed {
				break
			}
		}
		// Everything that has arrived is applied: answer it.
		l.batchDone()
		if block && !l.park(stop) {
			return errTurnOver
		}
		err := l.readMore(block)
		if block {
			l.unpark()
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Interrupted: look at stop again.
		default:
			return err
		}
	}
}

// step applies what the buffer holds of the current frame, or starts the
// next one. It reports whether it made progress.
func (l *link) step() (bool, error) {
	rx := &l.rx
	if !rx.inFrame {
		if rx.w-rx.r < frameHeaderSize {
			return false, nil
		}
		if err := rx.h.decode(rx.buf[rx.r : rx.r+frameHeaderSize]); err != nil {
			return false, err
		}
		rx.r += frameHeaderSize
		rx.inFrame = true
		rx.left = rx.h.Length
		if !rx.h.Type.hasPayload() {
			rx.left = 0
		}
		rx.sink, rx.got, rx.ackDone = sinkDiscard, 0, false
		if err := l.beginFrame(); err != nil {
			return false, err
		}
		if rx.left == 0 {
			return true, l.endFrame()
		}
		return true, nil
	}
	if rx.r == rx.w {
		return false, nil
	}
	n := min(uint32(rx.w-rx.r), rx.left)
	if err := l.consume(rx.buf[rx.r : rx.r+int(n)]); err != nil {
		return false, err
	}
	rx.r += int(n)
	if rx.left == 0 {
		return true, l.endFrame()
	}
	return true, nil
}

// readMore reads what the socket holds: straight into the current
// frame's destination when a large part of its payload remains, into the
// buffer otherwise. With block it waits (in the poller) for input.
func (l *link) readMore(block bool) error {
	rx := &l.rx
	rx.op, rx.block, rx.n, rx.inSpans, rx.rerr, rx.ferr = rxFill, block, 0, 0, nil, nil
	if rx.inFrame && rx.r == rx.w && rx.left >= directMin && rx.sink != sinkDiscard {
		rx.op = rxDirect
		rx.r, rx.w = 0, 0
	} else if rx.r > 0 {
		rx.w = copy(rx.buf, rx.buf[rx.r:rx.w])
		rx.r = 0
	}
	err := l.raw.Read(l.readFn)
	switch {
	case rx.ferr != nil:
		return rx.ferr
	case err != nil:
		return err
	case rx.rerr == unix.EAGAIN:
		return errWouldBlock
	case rx.rerr != nil:
		return rx.rerr
	case rx.n == 0:
		return io.EOF
	}
	l.q.progress.Add(1) // bytes moved: the peer is alive (qp.checkTimeout)
	if rx.op == rxFill {
		rx.w += rx.n
		return nil
	}
	// A direct read: the payload's part went to its destination, the
	// rest (payload or not) to buf[0:].
	placed := min(rx.n, rx.inSpans)
	if placed > 0 {
		rx.advance(placed)
		rx.left -= uint32(placed)
		rx.got += uint32(placed)
	}
	rx.w = rx.n - placed
	if rx.left == 0 {
		return l.endFrame()
	}
	return nil
}

// readOnce is what the poller calls with the socket's descriptor (bound
// once, as readFn, so that a read allocates nothing): one non-blocking
// read as rx.op says. It reports whether the reader is done; with
// rx.block an empty socket is waited for, and readOnce runs again.
func (l *link) readOnce(fd uintptr) bool {
	rx := &l.rx
	if rx.op == rxFill {
		rx.n, rx.rerr = read(int(fd), rx.buf[rx.w:])
		return !(rx.rerr == unix.EAGAIN && rx.block)
	}
	ok, err := l.beginPlace()
	if err != nil {
		rx.ferr = err
		return true
	}
	if !ok { // the destination went away: read into the buffer, to discard
		rx.inSpans = 0
		rx.n, rx.rerr = read(int(fd), rx.buf)
		return !(rx.rerr == unix.EAGAIN && rx.block)
	}
	bufs := rx.bufs[:0]
	want := int(rx.left)
	rx.inSpans = 0
	for i := rx.si; i < len(rx.spans) && want > 0 && len(bufs) < cap(rx.bufs)-1; i++ {
		s := rx.spans[i]
		if i == rx.si {
			s = s[rx.spanOff:]
		}
		if len(s) > want {
			s = s[:want]
		}
		bufs = append(bufs, s)
		want -= len(s)
		rx.inSpans += len(s)
	}
	// A little of what follows, so that a small frame behind the payload
	// needs no read of its own.
	bufs = append(bufs, rx.buf[:4096])
	rx.n, rx.rerr = readv(int(fd), bufs, rx.iov)
	clear(bufs)
	rx.bufs = bufs
	l.endPlace()
	return !(rx.rerr == unix.EAGAIN && rx.block)
}

// advance moves the sink's front past n filled bytes.
func (rx *rxState) advance(n int) {
	for n > 0 && rx.si < len(rx.spans) {
		room := len(rx.spans[rx.si]) - rx.spanOff
		if n < room {
			rx.spanOff += n
			return
		}
		n -= room
		rx.si++
		rx.spanOff = 0
	}
}

// consume moves payload bytes b from the buffer to the current frame's
// destination.
func (l *link) consume(b []byte) error {
	rx := &l.rx
	rx.left -= uint32(len(b))
	if rx.sink == sinkDiscard {
		return nil
	}
	ok, err := l.beginPlace()
	if err != nil {
		return err
	}
	if !ok {
		return nil
	}
	rx.got += uint32(len(b))
	for len(b) > 0 && rx.si < len(rx.spans) {
		k := copy(rx.spans[rx.si][rx.spanOff:], b)
		b = b[k:]
		rx.advance(k)
	}
	l.endPlace()
	return nil
}

// beginPlace starts a copy into the current frame's destination: it
// acquires the regions (and, for application buffers, marks the queue
// pair as placing, see qp.placing). ok is false, and the frame is
// discarded from here on, if the destination is gone: the queue pair
// failed or parted, or a region was deregistered, which fails the
// operation as an access error (responder.go, requester.go).
func (l *link) beginPlace() (ok bool, err error) {
	rx := &l.rx
	switch rx.sink {
	case sinkDiscard:
		return false, nil
	case sinkMR:
		// Remote memory of this side: only the region's own life
		// matters, no completion reports it.
		if !acquireAll(rx.owners) {
			rx.sink = sinkDiscard
			l.writeRevoked()
			return false, nil
		}
		return true, nil
	}
	q := l.q
	q.mu.Lock()
	live := l.currentLocked() && (q.state == rdma.QPSRTR || q.state == rdma.QPSRTS)
	switch {
	case !live:
	case rx.sink == sinkRecv:
		live = q.rqHead == rx.recvIdx
	case rx.sink == sinkRead:
		live = q.sqHead == rx.sqIdx
	}
	if !live {
		q.mu.Unlock()
		rx.sink = sinkDiscard
		return false, nil
	}
	if !acquireAll(rx.owners) {
		q.mu.Unlock()
		sink := rx.sink
		rx.sink = sinkDiscard
		l.placeRevoked(sink)
		return false, nil
	}
	q.placing++
	q.mu.Unlock()
	return true, nil
}

// endPlace ends what beginPlace started.
func (l *link) endPlace() {
	rx := &l.rx
	switch rx.sink {
	case sinkDiscard:
	case sinkMR:
		releaseAll(rx.owners)
	default:
		releaseAll(rx.owners)
		q := l.q
		q.mu.Lock()
		q.endPlacingLocked()
		q.mu.Unlock()
	}
}

// endFrame finishes the current frame once its payload is read.
func (l *link) endFrame() error {
	rx := &l.rx
	rx.inFrame = false
	if rx.action != actWrite && rx.action != actWriteImm && (rx.h.Type == frameWrite || rx.h.Type == frameWriteImm) {
		// A WRITE that ended refused or revoked: forget its region.
		l.q.mu.Lock()
		l.endWriteLocked()
		l.q.mu.Unlock()
	}
	err := l.finishFrame()
	clear(rx.spans)
	clear(rx.owners)
	rx.spans, rx.owners, rx.si, rx.spanOff = rx.spans[:0], rx.owners[:0], 0, 0
	return err
}
