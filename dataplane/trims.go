package dataplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/pmem/plog"
)

// This file is how a truncate or a free reaches every node's chunks even
// when some node is down (docs/dataplane.md, "Truncate and free with a
// node down"):
//
//   - The namespace calls Truncate or Free at the inode's owner N (the
//     node of the inode's partition), which trims locally and sends a trim
//     to every other node holding partitions. A node that does not answer
//     and is down in the map gets the trim deferred: N appends it to its
//     node log and answers success. A node that does not answer and is
//     not (yet) down fails the call; the namespace, which keeps its
//     intent durably, retries.
//   - A node X serves the chunks of an inode only once, in its current
//     up period (its map state up since StateEpoch), it has collected and
//     applied the trims deferred for it by that inode's owner N. N hands
//     them out (trim-collect) only while its map shows X not down, and
//     defers only while its map shows X down, both under one lock: a trim
//     deferred after X collected belongs to a later down period of X,
//     after which X collects again.

// Peers reaches other nodes' chunk services; package node passes its
// peer connection pool (the same shape as dpclient.Caller).
type Peers interface {
	Call(ctx context.Context, node cluster.NodeInfo, op uint16, req []byte) ([]byte, error)
}

// ErrNotReady means the node cannot serve the request yet: it is down in
// its own map, or it has not collected the trims deferred for it by the
// inode's owner (which did not answer). The client retries.
var ErrNotReady = errors.New("dataplane: not ready")

// deferrals are the trims this node deferred for nodes that were down,
// kept in its node log.
type deferrals struct {
	// mu orders deferring against collecting, and appends to the log
	// against their application.
	mu      sync.Mutex
	log     *plog.Log
	pending map[cluster.NodeID]map[uint64]uint64 // node -> inode -> size
	broken  error
}

// gate is what this node collected in its current up period.
type gate struct {
	mu sync.Mutex
	// period is the StateEpoch of the up period the rest is for; 0
	// until the service first sees itself up.
	period    uint64
	collected map[cluster.NodeID]bool
	// failed is when collecting from a node last failed, so that a
	// node that is away is not asked again by every request.
	failed map[cluster.NodeID]time.Time
	// collecting serialises collections from one node.
	collecting map[cluster.NodeID]*sync.Mutex
}

// enter makes the gate's sets those of the up period that began at
// period, empty if it is a new one; g.mu is held.
func (g *gate) enter(period uint64) {
	if g.collected == nil || g.period != period {
		g.period = period
		g.collected = make(map[cluster.NodeID]bool)
		g.failed = make(map[cluster.NodeID]time.Time)
	}
}

// retryCollectAfter is how long a failed collection from a node is not
// tried again (requests for its inodes are refused meanwhile).
const retryCollectAfter = 200 * time.Millisecond

// openNodeLog opens (or creates) the node log and replays it.
func (s *Service) openNodeLog() error {
	l, err := s.cfg.Store.Log(plog.LogID{Service: wire.ServiceChunks, Partition: wire.NodeLog})
	if err != nil {
		return fmt.Errorf("dataplane: node log: %w", err)
	}
	d := &s.deferred
	d.log = l
	d.pending = make(map[cluster.NodeID]map[uint64]uint64)
	return l.Replay(func(b []byte) error {
		rec, err := wire.DecodeRecord(b, s.bpc)
		if err != nil {
			return fmt.Errorf("%w: node log: %w", ErrCorrupt, err)
		}
		return d.apply(rec)
	})
}

// apply applies a node-log record to the DRAM state; d.mu is held.
func (d *deferrals) apply(rec wire.Record) error {
	node := cluster.NodeID(rec.Node)
	switch rec.Kind {
	case wire.RecordDefer:
		if d.pending[node] == nil {
			d.pending[node] = make(map[uint64]uint64)
		}
		d.pending[node][rec.Ino] = rec.Size
	case wire.RecordDeferDone:
		if size, ok := d.pending[node][rec.Ino]; ok && size == rec.Size {
			delete(d.pending[node], rec.Ino)
			if len(d.pending[node]) == 0 {
				delete(d.pending, node)
			}
		}
	default:
		return fmt.Errorf("%w: node log: record kind %d", ErrCorrupt, rec.Kind)
	}
	return nil
}

// appendDeferrals makes recs durable in the node log and applies them;
// d.mu is held.
func (s *Service) appendDeferrals(recs ...wire.Record) error {
	d := &s.deferred
	if d.broken != nil {
		return d.broken
	}
	bufs := make([][]byte, len(recs))
	for i := range recs {
		bufs[i] = recs[i].Encode()
	}
	if err := d.log.Append(bufs...); err != nil {
		return fmt.Errorf("dataplane: node log append: %w", err)
	}
	for _, rec := range recs {
		if err := d.apply(rec); err != nil {
			d.broken = err
			return err
		}
	}
	if st := d.log.Stats(); st.Bytes > checkpointMin && st.Bytes > 4*st.RewriteBytes {
		if err := s.checkpointDeferrals(); err != nil {
			s.log.Warn("node log checkpoint failed; the log keeps growing", "err", err)
		}
	}
	return nil
}

// checkpointDeferrals rewrites the node log as one record per pending
// trim; d.mu is held.
func (s *Service) checkpointDeferrals() error {
	d := &s.deferred
	return d.log.Rewrite(func(emit func([]byte) error) error {
		for _, node := range slices.Sorted(mapKeys(d.pending)) {
			for _, ino := range slices.Sorted(mapKeys(d.pending[node])) {
				rec := wire.Record{Kind: wire.RecordDefer, Ino: ino, Node: string(node), Size: d.pending[node][ino]}
				if err := emit(rec.Encode()); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Truncate frees the data of file ino beyond size on every node, and
// zeroes the rest of the block holding the smaller of size and oldSize,
// so that the file reads zeros past its size if it grows (over blocks a
// writer that died left past oldSize too). The namespace calls it at the
// inode's owner, on every truncate, before it records the new size; it
// is idempotent, so the namespace retries it after an error or a crash.
// A node that is down in the map does not make it fail: the trim is
// deferred (kept in this node's log) and the node applies it before it
// serves the inode's chunks again. A node that does not answer and is not
// down makes it fail (until the map marks it down).
func (s *Service) Truncate(ctx context.Context, ino, oldSize, size uint64) error {
	return s.trimEverywhere(ctx, ino, min(oldSize, size))
}

// Free frees all of file ino's data on every node, as Truncate to 0 does
// (size is the file's size, for symmetry with Truncate).
func (s *Service) Free(ctx context.Context, ino, size uint64) error {
	return s.trimEverywhere(ctx, ino, 0)
}

// holdsData reports whether a node in state st may hold chunks.
func holdsData(st cluster.NodeState) bool {
	return st == cluster.StateUp || st == cluster.StateDown || st == cluster.StateDraining
}

func (s *Service) trimEverywhere(ctx context.Context, ino, size uint64) error {
	m := s.cfg.Map.Current()
	if !m.Initialized() {
		return fmt.Errorf("%w: no cluster map yet", ErrNotReady)
	}
	req := wire.Request{Op: wire.OpTrim, Header: wire.Header{Epoch: m.Epoch, ClientID: s.cfg.ClientID, Incarnation: s.cfg.Incarnation},
		Ino: ino, Size: size, Node: string(s.cfg.Self)}
	b := req.Encode()
	var nodes []cluster.NodeInfo
	for _, n := range m.Nodes {
		if holdsData(n.State) {
			nodes = append(nodes, n)
		}
	}
	return onNodes(nodes, func(_ int, n cluster.NodeInfo) error {
		if n.ID == s.cfg.Self {
			return s.Trim(ino, size)
		}
		err := s.callPeer(ctx, n, wire.OpTrim, b, nil)
		if err == nil || ctx.Err() != nil {
			return err
		}
		// A node that is down gets the trim deferred; any other
		// failure is the caller's to retry.
		if derr := s.deferTrim(n.ID, ino, size); derr != nil {
			return fmt.Errorf("%w (and %w)", err, derr)
		}
		return nil
	})
}

// onNodes runs fn for every node at once (i is the node's index in nodes)
// and joins their errors.
func onNodes(nodes []cluster.NodeInfo, fn func(i int, n cluster.NodeInfo) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = fn(i, n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// callPeer sends one request to node and decodes the reply; each (if
// set) gets an OK reply.
func (s *Service) callPeer(ctx context.Context, n cluster.NodeInfo, op wire.Op, req []byte, each func(wire.Reply)) error {
	if s.cfg.Peers == nil {
		return fmt.Errorf("dataplane: no peer connections (ServiceConfig.Peers) to reach node %s", n.ID)
	}
	out, err := s.cfg.Peers.Call(ctx, n, uint16(op), req)
	if err != nil {
		return fmt.Errorf("dataplane: %v at node %s: %w", op, n.ID, err)
	}
	rep, err := wire.DecodeReply(out)
	if err != nil {
		return fmt.Errorf("dataplane: %v reply from node %s: %w", op, n.ID, err)
	}
	if rep.Status != wire.StatusOK {
		return fmt.Errorf("dataplane: %v at node %s: %v: %s", op, n.ID, rep.Status, rep.Message)
	}
	if each != nil {
		each(rep)
	}
	return nil
}

// deferTrim records that node must trim ino to size before it serves the
// inode's chunks again. It refuses unless node is down in the current
// map: a node that is up collects its deferred trims only once per up
// period, so it must be reached directly.
func (s *Service) deferTrim(node cluster.NodeID, ino, size uint64) error {
	d := &s.deferred
	d.mu.Lock()
	defer d.mu.Unlock()
	m := s.cfg.Map.Current()
	if n, ok := m.Node(node); !ok || n.State != cluster.StateDown {
		return fmt.Errorf("%w: node %s is %q at epoch %d, not down: the trim must reach it (retry)", ErrNotReady, node, n.State, m.Epoch)
	}
	if old, ok := d.pending[node][ino]; ok && old <= size {
		return nil
	}
	s.log.Info("trim deferred for a node that is down", "node", node, "ino", ino, "size", size)
	return s.appendDeferrals(wire.Record{Kind: wire.RecordDefer, Ino: ino, Node: string(node), Size: size})
}

// serveCollect hands node req.Node the trims deferred for it, while this
// node's map shows it not down.
func (s *Service) serveCollect(ctx context.Context, req *wire.Request) (wire.Reply, error) {
	s.awaitEpoch(ctx, req.Epoch)
	d := &s.deferred
	d.mu.Lock()
	defer d.mu.Unlock()
	m := s.cfg.Map.Current()
	if n, ok := m.Node(cluster.NodeID(req.Node)); !ok || !holdsData(n.State) || n.State == cluster.StateDown {
		return wire.Reply{}, fmt.Errorf("%w: node %s is %q in this node's map at epoch %d", ErrNotReady, req.Node, n.State, m.Epoch)
	}
	pending := d.pending[cluster.NodeID(req.Node)]
	var rep wire.Reply
	for _, ino := range slices.Sorted(mapKeys(pending)) {
		if len(rep.Trims) == wire.MaxTrims {
			rep.More = true
			break
		}
		rep.Trims = append(rep.Trims, wire.Trim{Ino: ino, Size: pending[ino]})
	}
	return rep, nil
}

// serveDone forgets the deferred trims node req.Node applied.
func (s *Service) serveDone(req *wire.Request) error {
	d := &s.deferred
	d.mu.Lock()
	defer d.mu.Unlock()
	var recs []wire.Record
	for _, t := range req.Trims {
		if size, ok := d.pending[cluster.NodeID(req.Node)][t.Ino]; ok && size == t.Size {
			recs = append(recs, wire.Record{Kind: wire.RecordDeferDone, Ino: t.Ino, Node: req.Node, Size: t.Size})
		}
	}
	if len(recs) == 0 {
		return nil
	}
	return s.appendDeferrals(recs...)
}

// awaitEpoch waits a little for a map of at least epoch.
func (s *Service) awaitEpoch(ctx context.Context, epoch uint64) {
	m := s.cfg.Map.Current()
	if m.Epoch >= epoch {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for m.Epoch < epoch && wctx.Err() == nil {
		m, _ = s.cfg.Map.Watch(wctx, m.Epoch)
	}
}

// ready reports whether this node may serve file ino's chunks: it is up
// in its map, and in this up period it has collected the trims deferred
// for it by ino's owner (collecting them now if it has not).
func (s *Service) ready(ctx context.Context, ino uint64) error {
	if s.mut.SkipGate {
		return nil
	}
	m := s.cfg.Map.Current()
	self, ok := m.Node(s.cfg.Self)
	if !ok || (self.State != cluster.StateUp && self.State != cluster.StateDraining) {
		return fmt.Errorf("%w: this node is %q in its map at epoch %d; it serves data again once it is up", ErrNotReady, self.State, m.Epoch)
	}
	owner, err := m.OwnerOfInode(ino)
	if err != nil {
		return fmt.Errorf("%w: inode %d: %w", wire.ErrMalformed, ino, err)
	}
	if owner.ID == s.cfg.Self {
		// Nothing can have been truncated while this node was down:
		// the inode's owner was down too.
		return nil
	}
	g := &s.gate
	g.mu.Lock()
	g.enter(self.StateEpoch)
	if g.collected[owner.ID] {
		g.mu.Unlock()
		return nil
	}
	g.mu.Unlock()
	return s.collectFrom(ctx, m, owner, self.StateEpoch)
}

// collectFrom collects and applies the trims node owner deferred for this
// node, then marks owner collected for the up period that began at
// period.
func (s *Service) collectFrom(ctx context.Context, m *cluster.Map, owner cluster.NodeInfo, period uint64) error {
	g := &s.gate
	g.mu.Lock()
	if g.collecting == nil {
		g.collecting = make(map[cluster.NodeID]*sync.Mutex)
	}
	cm := g.collecting[owner.ID]
	if cm == nil {
		cm = &sync.Mutex{}
		g.collecting[owner.ID] = cm
	}
	g.mu.Unlock()
	cm.Lock()
	defer cm.Unlock()
	g.mu.Lock()
	g.enter(period)
	done, failedAt := g.collected[owner.ID], g.failed[owner.ID]
	g.mu.Unlock()
	switch {
	case done:
		return nil
	case owner.State == cluster.StateDown:
		return fmt.Errorf("%w: node %s, the owner of the inode, is down: this node cannot learn whether the inode was truncated while it was down itself", ErrNotReady, owner.ID)
	case s.cfg.Now().Sub(failedAt) < retryCollectAfter:
		return fmt.Errorf("%w: collecting deferred trims from node %s failed a moment ago", ErrNotReady, owner.ID)
	}
	err := s.collect(ctx, m, owner)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.collected == nil || g.period != period {
		// A new up period began meanwhile: collect again in it.
		return fmt.Errorf("%w: this node's state changed while it collected deferred trims", ErrNotReady)
	}
	if err != nil {
		g.failed[owner.ID] = s.cfg.Now()
		s.log.Warn("collecting deferred trims failed; the inodes of that node are not served until it works", "node", owner.ID, "err", err)
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	g.collected[owner.ID] = true
	return nil
}

// collect fetches, applies and acknowledges every trim owner deferred for
// this node.
func (s *Service) collect(ctx context.Context, m *cluster.Map, owner cluster.NodeInfo) error {
	hdr := wire.Header{Epoch: m.Epoch, ClientID: s.cfg.ClientID, Incarnation: s.cfg.Incarnation}
	for {
		var rep wire.Reply
		req := wire.Request{Op: wire.OpTrimCollect, Header: hdr, Node: string(s.cfg.Self)}
		if err := s.callPeer(ctx, owner, wire.OpTrimCollect, req.Encode(), func(r wire.Reply) { rep = r }); err != nil {
			return err
		}
		if len(rep.Trims) == 0 {
			return nil
		}
		slices.SortFunc(rep.Trims, func(a, b wire.Trim) int { return cmp.Compare(a.Ino, b.Ino) })
		for _, t := range rep.Trims {
			if err := s.Trim(t.Ino, t.Size); err != nil {
				return err
			}
		}
		s.log.Info("applied trims deferred while this node was down", "from", owner.ID, "trims", len(rep.Trims))
		done := wire.Request{Op: wire.OpTrimDone, Header: hdr, Node: string(s.cfg.Self), Trims: rep.Trims}
		if err := s.callPeer(ctx, owner, wire.OpTrimDone, done.Encode(), nil); err != nil {
			return err
		}
		if !rep.More {
			return nil
		}
	}
}

// collectAll collects from every node that is up and not yet collected in
// this up period, so that the blocks of files freed while this node was
// down are reclaimed even if nobody reads those files again. Sweep calls
// it.
func (s *Service) collectAll(ctx context.Context) {
	m := s.cfg.Map.Current()
	self, ok := m.Node(s.cfg.Self)
	if !ok || self.State != cluster.StateUp || s.cfg.Peers == nil {
		return
	}
	for _, n := range m.Nodes {
		if n.ID == s.cfg.Self || n.State != cluster.StateUp {
			continue
		}
		g := &s.gate
		g.mu.Lock()
		g.enter(self.StateEpoch)
		done := g.collected[n.ID]
		g.mu.Unlock()
		if !done {
			s.collectFrom(ctx, m, n, self.StateEpoch)
		}
	}
}
