package metadata

import (
	"context"
	"errors"
	"time"

	"github.com/octofs/octofs/metadata/wire"
)

// request is a decoded request as the op handlers see it.
type request struct {
	op   wire.Op
	h    wire.Header
	key  clientKey
	cred *wire.Cred
}

// record returns the RequestRecord that makes res the answer to r's
// repeats; handlers append it with the operation's last records. nil for
// requests without a sequence.
func (r *request) record(res result) wire.Record {
	if r.h.Seq == 0 {
		return nil
	}
	return &wire.RequestRecord{ClientID: r.key.id, Incarnation: r.key.inc, Seq: r.h.Seq, Status: res.status, Reply: res.bytes()}
}

// result is a handler's answer.
type result struct {
	status wire.Status
	body   wire.Body
	raw    []byte // an encoded body (answers replayed by at-most-once)
	ino    uint64 // StatusRedirect's inode
}

func (r result) bytes() []byte {
	if r.raw != nil || r.body == nil || r.status != wire.StatusOK {
		return r.raw
	}
	b := wire.EncodeReply(wire.ReplyHeader{}, r.body)
	return b[replyHeaderLen:]
}

var replyHeaderLen = len(wire.EncodeReply(wire.ReplyHeader{}, nil))

func ok(body wire.Body) result   { return result{body: body} }
func fail(st wire.Status) result { return result{status: st} }

// final reports whether a status is an answer to keep for repeats (an
// errno or success), rather than a "go elsewhere / try later".
func final(st wire.Status) bool { return st == wire.StatusOK || st.IsErrno() }

// Handle serves one request (the rpc.Handler body, and what in-process
// transports call): it decodes payload, executes the op and returns the
// encoded reply. It never fails: problems are reply statuses.
func (s *Service) Handle(ctx context.Context, op uint16, reqID uint64, payload []byte) []byte {
	wop, h, body, err := wire.DecodeRequest(payload)
	var res result
	switch {
	case err != nil:
		s.log.Debug("malformed request", "op", op, "err", err)
		res = fail(wire.StatusBadRequest)
	case uint16(wop) != op:
		res = fail(wire.StatusBadRequest)
	default:
		res = s.serve(ctx, wop, &h, body)
	}
	out := wire.EncodeReply(wire.ReplyHeader{Status: res.status, Epoch: s.epoch(), Incarnation: s.inc, Ino: res.ino}, res.body)
	if res.status == wire.StatusOK && res.body == nil && res.raw != nil {
		out = append(out, res.raw...)
	}
	return out
}

func (s *Service) serve(ctx context.Context, op wire.Op, h *wire.Header, body wire.Body) result {
	key := clientKey{h.ClientID, h.Incarnation}
	okInc, replaced := s.sessions.fence(h.ClientID, h.Incarnation)
	if !okInc {
		return fail(wire.StatusStaleIncarnation)
	}
	if replaced != nil {
		s.goBackground(func(ctx context.Context) { s.endSession(ctx, replaced) })
	}
	now := s.now()
	s.sessions.renew(key, now, s.cfg.SessionLease)
	if h.Epoch > s.epoch() {
		// The sender saw a newer map: catch up before judging ownership.
		if mustNotWait(ctx) {
			return fail(wire.StatusNotReady)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = s.cfg.Map.Watch(wctx, h.Epoch-1)
		cancel()
	}
	r := &request{op: op, h: *h, key: key, cred: &h.Cred}
	if !op.Mutating() || h.Seq == 0 {
		return s.dispatchDurable(ctx, r, body)
	}
	for {
		e, first := s.dedup.begin(key, h.Seq, h.LowSeq, now)
		if !first && !e.isDone() && mustNotWait(ctx) {
			// A repeat of a request still running: wait for it
			// on a goroutine.
			return fail(wire.StatusNotReady)
		}
		if !first {
			stored, err := e.await(ctx)
			if err != nil {
				return fail(wire.StatusNotReady)
			}
			if stored {
				res := result{status: e.status}
				if e.status == wire.StatusOK {
					res.raw = e.reply
					if res.raw == nil {
						res.raw = []byte{}
					}
				}
				return res
			}
			continue
		}
		res := s.dispatchDurable(ctx, r, body)
		keep := final(res.status)
		if a := inlineOf(ctx); a != nil && a.gaveUp {
			keep = false // it changed nothing: the rerun answers
		}
		s.dedup.finish(key, h.Seq, e, res.status, res.bytes(), keep)
		return res
	}
}

// dispatchDurable runs the op and waits until what it applied (and what
// it read) is durable, so that its answer never depends on records a
// crash could lose. The wait outlives the caller's context: the records
// are applied and will be durable (or the partition failed).
func (s *Service) dispatchDurable(ctx context.Context, r *request, body wire.Body) result {
	ctx, tk := withTouched(ctx)
	res := s.dispatch(ctx, r, body)
	if a := inlineOf(ctx); a != nil && (a.gaveUp || !r.op.Mutating() && !tk.durable()) {
		// A read-only inline attempt gives up rather than wait
		// for what it read to be durable; one that changed the
		// namespace appends its records below (inline.go).
		a.gaveUp = true
		return fail(wire.StatusNotReady)
	}
	if err := tk.await(s.ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			return fail(wire.StatusNotReady)
		}
		return fail(wire.StatusInternal)
	}
	if res.status == wire.StatusInternal && s.ctx.Err() != nil {
		// The service is closing: a commit refused with ErrClosed
		// before it changed anything, or a wait ended. To the client
		// this is a node going away (retry it, or its successor), not
		// a fault of the request; what was logged is recovered as
		// after a crash.
		return fail(wire.StatusNotReady)
	}
	return res
}

func (s *Service) dispatch(ctx context.Context, r *request, body wire.Body) result {
	if isChangeOp(r.op) {
		if st := s.roomToChange(ctx); st != wire.StatusOK {
			return fail(st)
		}
	}
	switch q := body.(type) {
	case *wire.Empty:
		switch r.op {
		case wire.OpNull:
			return ok(&wire.Empty{})
		case wire.OpStatFS:
			return s.statfs()
		case wire.OpKeepAlive:
			s.sessions.touch(r.key, s.now(), s.cfg.SessionLease)
			return ok(&wire.KeepAliveReply{LeaseMillis: uint32(s.cfg.SessionLease / time.Millisecond)})
		}
	case *wire.LookupRequest:
		return s.lookup(ctx, r, q)
	case *wire.GetAttrRequest:
		if r.op == wire.OpTouchAtime {
			return s.touchAtime(ctx, r, q)
		}
		return s.getattr(ctx, q)
	case *wire.SetAttrRequest:
		return s.setattr(ctx, r, q)
	case *wire.MakeRequest:
		return s.make(ctx, r, q)
	case *wire.LinkRequest:
		return s.link(ctx, r, q)
	case *wire.UnlinkRequest:
		return s.remove(ctx, r, q)
	case *wire.RenameRequest:
		return s.rename(ctx, r, q)
	case *wire.InoRequest:
		if r.op == wire.OpGetParent {
			return s.getParent(ctx, q)
		}
		return s.readlink(ctx, q)
	case *wire.ReadDirRequest:
		return s.readdir(ctx, r, q)
	case *wire.GetXattrRequest:
		return s.getxattr(ctx, r, q)
	case *wire.SetXattrRequest:
		return s.setxattr(ctx, r, q)
	case *wire.ListXattrRequest:
		return s.listxattr(ctx, r, q)
	case *wire.RemoveXattrRequest:
		return s.removexattr(ctx, r, q)
	case *wire.AccessRequest:
		return s.access(ctx, r, q)
	case *wire.OpenRequest:
		return s.open(ctx, r, q)
	case *wire.OpenDirRequest:
		return s.openDir(ctx, r, q)
	case *wire.ReleaseRequest:
		return s.release(ctx, r, q)
	case *wire.WriteCommitRequest:
		return s.writeCommit(ctx, r, q)
	case *wire.AppendRequest:
		return s.appendPlace(ctx, r, q)
	case *wire.LockRequest:
		return s.advisoryLock(ctx, r, q)
	case *wire.EntryAddRequest:
		return s.entryAdd(ctx, r, q)
	case *wire.EntryRemoveRequest:
		return s.entryRemove(ctx, r, q)
	case *wire.TxLockRequest:
		return s.txLock(ctx, r, q)
	case *wire.TxApplyRequest:
		return s.txApply(ctx, q)
	case *wire.TxRequest:
		if r.op == wire.OpTxStatus {
			return s.txStatus(ctx, q)
		}
		return s.txAbort(ctx, q)
	}
	return fail(wire.StatusBadRequest)
}

// waitFailed is the answer when a wait ended with the caller's context
// or the service: the client retries.
func waitFailed() result { return fail(wire.StatusNotReady) }

// peer sends a node-to-node request for partition part and decodes the
// answer into reply. Requests for a partition this node owns are served
// in-process. It retries transport failures, wrong owners and "not
// ready" until ctx ends (then it returns ctx's error): the protocols that
// call it have logged their intent and must learn the outcome.
func (s *Service) peer(ctx context.Context, op wire.Op, part uint32, cred wire.Cred, body, reply wire.Body) (wire.ReplyHeader, error) {
	backoff := time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return wire.ReplyHeader{}, err
		}
		rh, err := s.peerOnce(ctx, op, part, cred, body, reply)
		if err == nil {
			switch rh.Status {
			case wire.StatusWrongOwner, wire.StatusNotReady:
				err = errors.New(rh.Status.String())
			default:
				return rh, nil
			}
		}
		s.log.Debug("peer request failed; retrying", "op", op, "partition", part, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return wire.ReplyHeader{}, ctx.Err()
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

func (s *Service) peerOnce(ctx context.Context, op wire.Op, part uint32, cred wire.Cred, body, reply wire.Body) (wire.ReplyHeader, error) {
	m := s.cfg.Map.Current()
	h := wire.Header{Epoch: m.Epoch, ClientID: s.self, Incarnation: s.inc, Cred: cred}
	payload := wire.EncodeRequest(op, &h, body)
	var resp []byte
	if s.owns(part) {
		resp = s.Handle(ctx, uint16(op), 0, payload)
	} else {
		node, err := m.OwnerOfPartition(part)
		if err != nil {
			return wire.ReplyHeader{}, err
		}
		if resp, err = s.cfg.Peers.Call(ctx, node, uint16(op), s.reqIDs.Add(1), payload); err != nil {
			return wire.ReplyHeader{}, err
		}
	}
	return wire.DecodeReply(resp, reply)
}
