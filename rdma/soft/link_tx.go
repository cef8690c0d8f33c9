package soft

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/octofs/octofs/rdma"
)

// Transmitting on a link. One batch of frames at a time goes out in one
// writev: first the responses this side owes (NAKs, RNR NAKs, READ data,
// atomic results, in PSN order), then its own requests, the owed
// acknowledgement riding on the last frame. Whoever has something to
// send (a poster, a reader that applied requests, a timer) writes what
// the socket takes at once, without blocking; the link's writer goroutine
// writes the rest, and anything with a payload over inlineTxLimit, so
// that no application goroutine ever waits for the peer.
//
// A memory region is held for one system call at a time (mr.go). When the
// socket takes only part of a batch, the rest stays referenced, not held;
// before its next write each region is acquired again, and if it was
// deregistered meanwhile:
//
//   - a request's payload (this side's memory) is lost mid-frame: the link
//     closes and the queue pair fails with a local protection error, as
//     verbs leaves deregistering memory under a posted request undefined;
//   - READ data is replaced by zeros to the end of the frame, and the
//     response ends with a NAK (remote access error) instead of its last
//     frame, so the requester's READ fails rather than completes with
//     garbage. That is why a READ response longer than readTailMax is two
//     frames: the last one (at most readTailMax bytes) is copied aside if
//     the socket stalls in its middle, so that once it starts, it
//     completes with the right data.

// inlineTxLimit is the largest payload a non-blocking transmitter (a
// poster, a reader, a timer) writes; larger ones are the writer's.
const inlineTxLimit = 16 << 10

// Bounds of one batch of frames written with a single writev.
const (
	maxBatchFrames = 64
	maxBatchBytes  = 256 << 10
	maxIov         = 1024 // IOV_MAX
)

type respKind uint8

const (
	respNak respKind = iota + 1
	respRNR
	respRead
	respAtomic
)

// respItem is a response owed to the peer.
type respItem struct {
	kind     respKind
	psn      uint32
	code     uint8  // NAK code, RNR timer
	val      uint64 // atomic: the original value
	mr       *mr    // READ: the region read, and its data
	data     []byte
	bodyDone bool      // READ: the frame before the last is out
	revoked  bool      // READ: the region was deregistered mid-response
	watched  bool      // READ: mr.watch was called for it
	seq      uint64    // counts the link's responses (link.respSent)
	due      time.Time // with Faults.SetDelay: not sent before
}

func (l *link) pushRespLocked(it respItem) {
	it.seq = l.respSeq
	l.respSeq++
	if d := l.dev.responseDelay(); d > 0 {
		it.due = time.Now().Add(d)
	}
	if l.respHead == len(l.resp) {
		l.resp, l.respHead = l.resp[:0], 0
	} else if l.respHead >= maxRespQueued {
		n := copy(l.resp, l.resp[l.respHead:])
		clear(l.resp[n:])
		l.resp, l.respHead = l.resp[:n], 0
	}
	l.resp = append(l.resp, it)
}

func (l *link) respQueuedLocked() int { return len(l.resp) - l.respHead }

type segKind uint8

const (
	segOwned   segKind = iota // bytes of the link's own
	segPayload                // a request's payload, in this side's memory
	segBody                   // READ data but the last frame's
	segTail                   // the last frame of a READ's data
	segZeros                  // READ data whose region went away: as many zeros
)

// txSeg describes one iovec of a batch.
type txSeg struct {
	mr   *mr
	kind segKind
	resp int // segBody: the response's index from respHead at gather time
}

// txState is the batch being written; the link's txMu guards it.
type txState struct {
	hdrs   []byte // the batch's headers
	inline []byte // copies of inline payloads
	bufs   [][]byte
	segs   []txSeg
	wbufs  [][]byte // what one writev takes
	iov    []unix.Iovec
	small  [4096]byte // a batch of small frames, copied into one write
	held   []*mr
	spans  [][]byte // scratch for resolving a request's SGEs
	owners []*mr

	pending bool // bufs[first:] are still to be written
	first   int

	// One write's request and result (writeOnce).
	block bool
	wrote int
	werr  error

	// Accounting, applied once the whole batch is out.
	respDone int // responses completely in the batch
	bodyOf   int // the response whose first frame is in it, or -1
	hasResp  bool
	// respEnds[i] is the end, in bufs, of the i-th response completely
	// in the batch, and respSeqs[i] its seq: writeOnce publishes each
	// as soon as it is out (link.respSent).
	respEnds []int
	respSeqs []uint64
	respOut  int  // respEnds[:respOut] are published
	full     bool // the gather stopped at a batch limit: gather again

	staging []byte // copies of READ tails the socket stalled in
}

// zeros replaces READ data whose region was deregistered.
var zeros [64 << 10]byte

// transmit sends what the link has to send. With block (the writer
// goroutine) it waits for the socket to take everything; without, it
// writes what the socket takes at once, frames with payloads up to
// inlineTxLimit, and leaves the rest to the writer. It never blocks on
// txMu without block: a transmitter that finds it taken makes the holder
// look again.
func (l *link) transmit(block bool) {
	if block {
		l.txMu.Lock()
	} else {
		l.txAgain.Store(true)
		if !l.txMu.TryLock() {
			return
		}
	}
	for {
		l.txAgain.Store(false)
		more, err := l.transmitLocked(block)
		l.txMu.Unlock()
		if err != nil {
			l.txFailed(err)
			return
		}
		if more && !block {
			kick(l.wrWake)
		}
		if !l.txAgain.Load() || !l.txMu.TryLock() {
			return
		}
	}
}

// errAbort means a request's payload region went away mid-frame.
var errAbort = errors.New("request memory deregistered while it was sent")

// txFailed handles a failed write.
func (l *link) txFailed(err error) {
	if errors.Is(err, errAbort) {
		l.broken.Store(true)
		q := l.q
		q.mu.Lock()
		if l.currentLocked() {
			q.failLocked(rdma.WCLocProtErr)
		}
		q.mu.Unlock()
		l.close()
		return
	}
	l.ioFailed(err)
}

// transmitLocked writes batches until nothing is left (more false) or,
// without block, until the socket is full or a frame is the writer's
// (more true). The caller holds txMu.
//
// A frame left to the writer by the last gather is reported once the
// batch gathered before it is out: nothing else would wake the writer
// for it. (A READ response over inlineTxLimit queued behind a small
// response left the requester waiting for data nobody sent, until its
// transport timer failed it.)
func (l *link) transmitLocked(block bool) (more bool, err error) {
	tx := &l.tx
	writer := false // the last gather left a frame to the writer goroutine
	for {
		if l.broken.Load() {
			return false, nil
		}
		if tx.pending {
			done, err := l.writePending(block)
			if err != nil {
				return false, err
			}
			if !done {
				return true, nil
			}
			l.batchWritten()
			if !tx.full && !l.txAgain.Load() {
				return writer, nil
			}
			continue
		}
		q := l.q
		q.mu.Lock()
		var frames int
		frames, writer = l.gatherLocked(block)
		q.mu.Unlock()
		if frames == 0 {
			return writer, nil
		}
		tx.pending, tx.first = true, 0
	}
}

// gatherLocked assembles the next batch into l.tx and returns its frame
// count, and whether something was left for the writer goroutine. The
// caller holds txMu and q.mu.
func (l *link) gatherLocked(block bool) (frames int, writer bool) {
	tx, q := &l.tx, l.q
	if tx.hdrs == nil {
		tx.hdrs = make([]byte, 0, maxBatchFrames*frameHeaderSize)
		tx.inline = make([]byte, 0, maxBatchFrames*q.caps.MaxInline)
		tx.iov = make([]unix.Iovec, 0, maxIov)
		tx.wbufs = make([][]byte, 0, maxIov)
	}
	tx.hdrs, tx.inline = tx.hdrs[:0], tx.inline[:0]
	clear(tx.bufs)
	clear(tx.segs)
	tx.bufs, tx.segs = tx.bufs[:0], tx.segs[:0]
	tx.respDone, tx.bodyOf, tx.hasResp = 0, -1, false
	tx.respEnds, tx.respSeqs, tx.respOut = tx.respEnds[:0], tx.respSeqs[:0], 0
	tx.full = false
	now := time.Time{}
	if l.dev.responseDelay() > 0 {
		now = time.Now()
	}
	if l.broken.Load() || (!l.currentLocked() && !l.draining) {
		return 0, false
	}
	limit := uint32(inlineTxLimit)
	if block {
		limit = maxMsgSize
	}
	bytes := 0
	// The responses, unless an injected delay leaves them to the writer.
	respOK := block || l.dev.responseDelay() == 0
	if !respOK && (l.respQueuedLocked() > 0 || l.ackOwed) {
		writer = true
	}
	i := l.respHead
responses:
	for ; respOK && i < len(l.resp) && frames < maxBatchFrames && len(tx.bufs)+2 <= maxIov; i++ {
		it := &l.resp[i]
		if !it.due.IsZero() && now.Before(it.due) {
			writer = true // Faults.SetDelay: not yet
			break
		}
		h := frameHeader{PSN: it.psn}
		switch it.kind {
		case respNak:
			h.Type, h.Code = frameNak, it.code
		case respRNR:
			h.Type, h.Code = frameRNRNak, it.code
		case respAtomic:
			h.Type, h.CompareAdd = frameAtomicResp, it.val
		case respRead:
			if it.mr != nil && (it.revoked || it.mr.dead.Load()) {
				// Deregistered before (or while) its data went out.
				l.revokeReadLocked(it)
				h.Type, h.Code = frameNak, uint8(nakRemoteAccess)
				break
			}
			n := uint32(len(it.data))
			tail := min(n, readTailMax)
			body := n - tail
			h.Type = frameReadResp
			if body > 0 && !it.bodyDone {
				if body > limit {
					writer = true
					break responses
				}
				if frames > 0 && bytes+int(body) > maxBatchBytes {
					tx.full = true
					break responses
				}
				h.Length = body
				l.addFrame(&h, it.data[:body], it.mr, segBody, i-l.respHead)
				frames++
				bytes += int(body)
				tx.bodyOf = i - l.respHead
				tx.hasResp = true
				tx.full = true
				break responses // its last frame waits until this one is out
			}
			if tail > limit {
				writer = true
				break responses
			}
			if frames > 0 && bytes+int(tail) > maxBatchBytes {
				tx.full = true
				break responses
			}
			h.Length, h.RemoteAddr = tail, uint64(body)
			kind := segTail
			if it.mr == nil {
				kind = segOwned
			}
			l.addFrame(&h, it.data[body:], it.mr, kind, 0)
			frames++
			bytes += int(tail)
			tx.respDone++
			tx.hasResp = true
			tx.respEnds, tx.respSeqs = append(tx.respEnds, len(tx.bufs)), append(tx.respSeqs, it.seq)
			continue
		}
		l.addFrame(&h, nil, nil, segOwned, 0)
		frames++
		tx.respDone++
		tx.hasResp = true
		tx.respEnds, tx.respSeqs = append(tx.respEnds, len(tx.bufs)), append(tx.respSeqs, it.seq)
	}
	if frames == maxBatchFrames || len(tx.bufs)+2 > maxIov {
		tx.full = true
	}
	drained := l.respHead+tx.respDone == len(l.resp) && tx.bodyOf < 0
	if !l.draining && l.currentLocked() && q.state == rdma.QPSRTS {
		n, w := l.gatherRequestsLocked(limit, frames, bytes)
		frames += n
		writer = writer || w
	}
	// The acknowledgement rides on the batch's last frame, once no
	// response remains before it; alone only if it may not wait.
	if l.ackOwed && drained && respOK && (l.ackDue.IsZero() || !now.Before(l.ackDue)) {
		switch {
		case frames > 0:
			setAck(tx.hdrs[len(tx.hdrs)-frameHeaderSize:], l.ackPSN)
		case !l.ackDelay || l.draining:
			h := frameHeader{Type: frameAck, Flags: flagAck, AckPSN: l.ackPSN}
			l.addFrame(&h, nil, nil, segOwned, 0)
			frames++
			l.dev.ackFrames.Add(1)
		default:
			return frames, writer
		}
		l.ackOwed, l.ackDelay, l.ackUnsent, l.ackDue = false, false, 0, time.Time{}
		tx.hasResp = true
	}
	return frames, writer
}

// gatherRequestsLocked adds this side's queued requests to the batch.
func (l *link) gatherRequestsLocked(limit uint32, frames, bytes int) (n int, writer bool) {
	tx, q := &l.tx, l.q
	for q.sqNext < q.sqTail && !q.rnrPaused && !q.txStopped {
		if frames+n == maxBatchFrames {
			tx.full = true
			break
		}
		w := &q.sq[q.sqNext%uint64(len(q.sq))]
		rdAtomic := w.op == rdma.OpRead || w.op.IsAtomic()
		if rdAtomic && q.rdAtomicInFlight >= maxRdAtomic {
			break
		}
		if w.flags&rdma.SendFence != 0 && q.rdAtomicInFlight > 0 {
			break
		}
		var payload uint32
		if hasOutgoingPayload(w.op) {
			payload = w.length
		}
		if payload > limit {
			writer = true
			break
		}
		if frames+n > 0 && bytes+int(payload) > maxBatchBytes {
			tx.full = true
			break
		}
		if len(tx.bufs)+1+len(w.sgl) > maxIov {
			tx.full = true
			break
		}
		h := requestHeader(w)
		if payload == 0 {
			l.addFrame(&h, nil, nil, segOwned, 0)
		} else if w.isInline {
			// Copied: once the lock is released a flush may free the
			// slot for a new request.
			off := len(tx.inline)
			tx.inline = append(tx.inline, w.inline...)
			l.addFrame(&h, tx.inline[off:], nil, segOwned, 0)
		} else {
			// The SGEs are checked now, as a NIC checks them when it
			// executes the request.
			var st rdma.WCStatus
			tx.spans, tx.owners, st = q.dev.localSpans(q.pd, w.sgl, false, tx.spans[:0], tx.owners[:0])
			if st != rdma.WCSuccess {
				w.localErr = st
				q.txStopped = true
				q.failLocalLocked()
				break
			}
			l.addFrameSpans(&h, tx.spans, tx.owners)
			clear(tx.spans)
			clear(tx.owners)
		}
		n++
		bytes += int(payload)
		q.sqNext++
		if rdAtomic {
			q.rdAtomicInFlight++
		}
		if l.ackOwed || l.recvSinceTx {
			// The application answers its peer's messages: their
			// ACKs can wait for its answers.
			l.pingpong = true
			l.recvSinceTx = false
		}
	}
	return n, writer
}

// addFrame appends a header and its payload (if any) to the batch.
func (l *link) addFrame(h *frameHeader, payload []byte, m *mr, kind segKind, resp int) {
	tx := &l.tx
	off := len(tx.hdrs)
	tx.hdrs = tx.hdrs[:off+frameHeaderSize]
	h.encode(tx.hdrs[off:])
	tx.bufs = append(tx.bufs, tx.hdrs[off:off+frameHeaderSize])
	tx.segs = append(tx.segs, txSeg{kind: segOwned})
	if len(payload) > 0 {
		tx.bufs = append(tx.bufs, payload)
		tx.segs = append(tx.segs, txSeg{mr: m, kind: kind, resp: resp})
	}
}

// addFrameSpans appends a request header and its gathered payload.
func (l *link) addFrameSpans(h *frameHeader, spans [][]byte, owners []*mr) {
	l.addFrame(h, nil, nil, segOwned, 0)
	tx := &l.tx
	for i, s := range spans {
		tx.bufs = append(tx.bufs, s)
		tx.segs = append(tx.segs, txSeg{mr: owners[i], kind: segPayload})
	}
}

// revokeReadLocked turns a READ whose region went away into a NAK, and
// fails the queue pair, which NAKs are (an IB class C error).
func (l *link) revokeReadLocked(it *respItem) {
	if it.watched {
		it.mr.unwatch(l)
		it.watched = false
	}
	it.kind, it.code, it.mr, it.data = respNak, uint8(nakRemoteAccess), nil, nil
	if l.currentLocked() {
		l.q.failLocked(rdma.WCWRFlushErr)
	}
}

// writePending writes the rest of the batch. It reports whether all of
// it is out.
func (l *link) writePending(block bool) (bool, error) {
	tx := &l.tx
	tx.block, tx.wrote, tx.werr = block, 0, nil
	err := l.raw.Write(l.writeFn)
	if tx.wrote > 0 {
		l.q.progress.Add(1)
	}
	if tx.werr != nil {
		return false, tx.werr
	}
	if err != nil {
		return false, err
	}
	return !tx.pending, nil
}

// writeOnce is what the poller calls with the socket's descriptor (bound
// once, as writeFn, so that a write allocates nothing): non-blocking
// writevs of the batch's rest, its regions held for each call, until the
// batch is out or the socket is full. It reports whether the writer is
// done; with tx.block a full socket is waited for, and writeOnce runs
// again. It waits only after EAGAIN, as the poller is edge-triggered: a
// write that took all it was offered (the iovec limit, or READ data
// replaced by zeros a piece at a time) leaves the socket writable, and
// no new edge would ever wake a writer that waited then.
func (l *link) writeOnce(fd uintptr) bool {
	tx := &l.tx
	for {
		if !l.acquireBatch() {
			tx.werr = errAbort
			return true
		}
		wb := tx.wbufs[:0]
		for i := tx.first; i < len(tx.bufs) && len(wb) < maxIov; i++ {
			b := tx.bufs[i]
			if len(b) == 0 {
				continue
			}
			if tx.segs[i].kind == segZeros {
				// Only its length counts: the region is gone.
				z := zeros[:min(len(b), len(zeros))]
				wb = append(wb, z)
				if len(z) < len(b) {
					break
				}
				continue
			}
			wb = append(wb, b)
		}
		n, err := writev(int(fd), wb, tx.iov, tx.small[:])
		clear(wb)
		tx.wbufs = wb
		if n > 0 {
			tx.wrote += n
			l.advanceBatch(n)
			// Responses completely out are no longer Dereg's business.
			for ; tx.respOut < len(tx.respEnds) && (tx.respEnds[tx.respOut] <= tx.first || !tx.pending); tx.respOut++ {
				l.respSent.Store(tx.respSeqs[tx.respOut] + 1)
			}
		}
		full := err == unix.EAGAIN
		if tx.pending && (full || err != nil) {
			// Part of the batch waits for the socket: READ tails are
			// copied aside before their regions are let go.
			l.stageTails()
		}
		l.releaseBatch()
		switch {
		case err != nil && err != unix.EAGAIN:
			tx.werr = err
			return true
		case !tx.pending:
			return true
		case full:
			return !tx.block
		}
		// The socket took something and did not say it is full: go on,
		// until it does (EAGAIN) or the batch is out.
	}
}

// acquireBatch acquires the regions of the unwritten part of the batch.
// A READ's region that is gone has its data replaced by zeros; a
// request's payload region that is gone aborts (false).
func (l *link) acquireBatch() bool {
	tx := &l.tx
	tx.held = tx.held[:0]
	for i := tx.first; i < len(tx.segs); i++ {
		s := &tx.segs[i]
		if s.mr == nil {
			continue
		}
		if s.mr.acquire() {
			tx.held = append(tx.held, s.mr)
			continue
		}
		switch s.kind {
		case segPayload:
			releaseAll(tx.held)
			tx.held = tx.held[:0]
			return false
		default: // segBody: a segTail is never left holding a region
			l.zeroSeg(i)
		}
	}
	return true
}

func (l *link) releaseBatch() {
	releaseAll(l.tx.held)
	clear(l.tx.held)
	l.tx.held = l.tx.held[:0]
}

// zeroSeg replaces READ data whose region was deregistered by zeros (the
// frame's length is on the wire already) and marks the response revoked:
// it ends with a NAK instead of its last frame (gatherLocked).
func (l *link) zeroSeg(i int) {
	s := &l.tx.segs[i]
	s.mr, s.kind = nil, segZeros
	q := l.q
	q.mu.Lock()
	if idx := l.respHead + s.resp; idx < len(l.resp) {
		l.resp[idx].revoked = true
		if l.currentLocked() {
			q.failLocked(rdma.WCWRFlushErr)
		}
	}
	q.mu.Unlock()
}

// advanceBatch moves the batch past n written bytes.
func (l *link) advanceBatch(n int) {
	tx := &l.tx
	for n > 0 && tx.first < len(tx.bufs) {
		b := tx.bufs[tx.first]
		if n < len(b) {
			tx.bufs[tx.first] = b[n:]
			return
		}
		n -= len(b)
		tx.first++
	}
	for tx.first < len(tx.bufs) && len(tx.bufs[tx.first]) == 0 {
		tx.first++
	}
	if tx.first == len(tx.bufs) {
		tx.pending = false
	}
}

// stageTails copies the unwritten parts of READ tails aside, while their
// regions are still held.
func (l *link) stageTails() {
	tx := &l.tx
	need := 0
	for i := tx.first; i < len(tx.segs); i++ {
		if tx.segs[i].kind == segTail {
			need += len(tx.bufs[i])
		}
	}
	if need == 0 {
		return
	}
	if cap(tx.staging) < need {
		tx.staging = make([]byte, 0, max(need, readTailMax))
	}
	tx.staging = tx.staging[:0]
	for i := tx.first; i < len(tx.segs); i++ {
		s := &tx.segs[i]
		if s.kind != segTail {
			continue
		}
		off := len(tx.staging)
		tx.staging = append(tx.staging, tx.bufs[i]...)
		tx.bufs[i] = tx.staging[off:]
		s.mr, s.kind = nil, segOwned
	}
}

// batchWritten applies a batch that is all out: its responses are sent.
func (l *link) batchWritten() {
	tx, q := &l.tx, l.q
	if tx.respDone == 0 && tx.bodyOf < 0 {
		clear(tx.bufs)
		clear(tx.segs)
		tx.bufs, tx.segs = tx.bufs[:0], tx.segs[:0]
		return
	}
	q.mu.Lock()
	if idx := l.respHead + tx.bodyOf; tx.bodyOf >= 0 && idx < len(l.resp) {
		l.resp[idx].bodyDone = true
	}
	for k := 0; k < tx.respDone && l.respHead < len(l.resp); k++ {
		if it := &l.resp[l.respHead]; it.watched {
			it.mr.unwatch(l)
		}
		l.resp[l.respHead] = respItem{}
		l.respHead++
	}
	q.mu.Unlock()
	clear(tx.bufs)
	clear(tx.segs)
	tx.bufs, tx.segs = tx.bufs[:0], tx.segs[:0]
}

// writer is the link's writer goroutine: it writes what the non-blocking
// transmitters left, waiting for the socket as long as it takes, and
// flushes a parting link.
func (l *link) writer() {
	defer l.dev.wg.Done()
	for {
		select {
		case <-l.wrWake:
		case <-l.closed:
			return
		}
		l.transmit(true)
		// Faults.SetDelay: responses not yet due wait here.
		for wait := l.nextDue(); wait > 0; wait = l.nextDue() {
			select {
			case <-time.After(wait):
			case <-l.closed:
				return
			}
			l.transmit(true)
		}
		q := l.q
		q.mu.Lock()
		draining := l.draining
		q.mu.Unlock()
		if draining {
			l.finishDrain()
			return
		}
	}
}

// nextDue returns how long until the next response held back by
// Faults.SetDelay is due, or 0 if none is.
func (l *link) nextDue() time.Duration {
	q := l.q
	q.mu.Lock()
	defer q.mu.Unlock()
	var due time.Time
	if l.respHead < len(l.resp) {
		due = l.resp[l.respHead].due
	}
	if l.ackOwed && !l.ackDue.IsZero() && (due.IsZero() || l.ackDue.Before(due)) {
		due = l.ackDue
	}
	if due.IsZero() {
		return 0
	}
	return max(time.Until(due), time.Microsecond)
}

// finishDrain ends a parting link once what it owed is out: it closes
// the sending side, and the background goroutine reads until the peer
// closes (link.drainInput).
func (l *link) finishDrain() {
	l.transmit(true)
	if cw, ok := l.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		l.close()
	}
}

// batchDone runs when a reader has applied everything that arrived: it
// transmits the responses and acknowledgements owed, and the requests
// that responses clock out (queued behind requests in flight, they go in
// one batch once it is as large as what is in flight, as Nagle's
// algorithm would). An acknowledgement that may wait is left to a frame
// going out soon, or to the janitor.
func (l *link) batchDone() {
	q := l.q
	q.mu.Lock()
	send := false
	if l.currentLocked() || l.draining {
		send = l.respQueuedLocked() > 0
		if l.ackOwed {
			if l.ackDelay {
				l.watchLocked() // the janitor sends it if nothing else does
			} else {
				send = true
			}
		}
		if queued, inFlight := q.sqTail-q.sqNext, q.sqNext-q.sqHead; queued > 0 && queued >= inFlight && !q.rnrPaused {
			send = true
		}
	}
	q.mu.Unlock()
	if send {
		l.transmit(false)
	}
}

// postedLocked decides, for PostSend, whether the poster transmits its
// requests now: yes, unless requests are in flight on a link that is
// being read, whose reader clocks out queued requests (batchDone).
func (l *link) postedLocked() bool {
	q := l.q
	inFlight := q.sqNext - q.sqHead
	if inFlight == 0 || l.mode == rxIdle {
		return true
	}
	return q.sqTail-q.sqNext >= inFlight
}
