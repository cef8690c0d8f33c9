package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// maxCatchUpLag is how many log entries a node may trail the leader's
// applied index and still count as caught up (for joining -> up and for
// promotion to voter). Heartbeats report the applied index of a moment ago,
// so a small lag is normal while the leader writes.
const maxCatchUpLag = 16

// watchLeadership follows raft's leadership notifications and runs one
// leaderLoop per term in which this node leads.
func (n *Node) watchLeadership() {
	var stop func()
	end := func() {
		if stop != nil {
			stop()
			stop = nil
		}
	}
	defer end()
	for {
		select {
		case <-n.ctx.Done():
			return
		case isLeader := <-n.notifyCh:
			end()
			if !isLeader {
				n.log.Info("lost leadership")
				continue
			}
			n.log.Info("won leadership; issuing barrier before serving writes")
			n.metrics.leaderChanges.Inc()
			stop = n.startLeaderLoop()
		}
	}
}

// startLeaderLoop runs leaderLoop in the background; the returned function
// stops it and waits for it to end.
func (n *Node) startLeaderLoop() (stop func()) {
	ctx, cancel := context.WithCancel(n.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.leaderLoop(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// leaderLoop runs while this node leads: barrier, create the map if this is
// a new cluster, then supervise membership until leadership ends.
func (n *Node) leaderLoop(ctx context.Context) {
	defer func() {
		n.leaderMu.Lock()
		n.ready = false
		n.leaderMu.Unlock()
	}()
	// The barrier makes sure every entry of earlier terms is applied to our
	// FSM before we decide anything from the map.
	for {
		err := n.await(n.raft.Barrier(n.cfg.ApplyTimeout))
		if err == nil {
			break
		}
		n.log.Warn("barrier failed; retrying", "err", err)
		if !sleepCtx(ctx, n.cfg.HeartbeatInterval/4) {
			return
		}
	}
	now := n.cfg.Now()
	n.leaderMu.Lock()
	n.leaderSince = now
	n.beats = map[NodeID]*heartbeatRecord{}
	for _, info := range n.Map().Nodes {
		n.beats[info.ID] = &heartbeatRecord{last: now}
	}
	n.ready = true
	n.leaderMu.Unlock()
	n.log.Info("leader ready", "epoch", n.Map().Epoch, "term", n.raft.CurrentTerm())

	if !n.Map().Initialized() {
		m, err := n.apply(Command{Type: CmdInit, Init: &InitCommand{
			ClusterID:  "octofs-" + randomHex(8),
			Partitions: n.cfg.Partitions,

			FilePlacement: n.cfg.FilePlacement,
			First:         n.selfInfo().nodeInfo(),
		}})
		if err != nil {
			n.log.Error("cannot create the cluster map", "err", err)
		} else {
			n.log.Info("created cluster map", "cluster_id", m.ClusterID, "partitions", len(m.Partitions))
		}
	}

	t := time.NewTicker(max(n.cfg.HeartbeatInterval/2, 10*time.Millisecond))
	defer t.Stop()
	for {
		n.supervise()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// apply commits a command through raft and returns the new map, or the
// FSM's refusal.
func (n *Node) apply(c Command) (*Map, error) {
	b, err := EncodeCommand(c)
	if err != nil {
		return nil, err
	}
	f := n.raft.Apply(b, n.cfg.ApplyTimeout)
	if err := n.await(f); err != nil {
		// Each of these refusals comes before the entry is committed, so
		// the caller may retry (elsewhere).
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return nil, n.notLeader()
		case errors.Is(err, raft.ErrEnqueueTimeout):
			return nil, fmt.Errorf("%w (the leader could not take the change within %v)", ErrNoLeader, n.cfg.ApplyTimeout)
		case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, ErrClosed):
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("cluster: raft apply: %w", err)
	}
	switch r := f.Response().(type) {
	case *Map:
		return r, nil
	case error:
		return nil, r
	}
	return nil, fmt.Errorf("cluster: unexpected FSM response %T", f.Response())
}

// supervise is one round of the leader's duties: failure detection, the
// joining -> up step, keeping the raft configuration in line with the map,
// and promoting caught-up non-voters while there are fewer than MaxVoters.
func (n *Node) supervise() {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if !n.IsLeader() {
		return
	}
	now := n.cfg.Now()
	applied := n.raft.AppliedIndex()
	n.leaderMu.Lock()
	n.beats[n.id] = &heartbeatRecord{last: now, heard: true, applied: applied, info: n.selfInfo()}
	beats := make(map[NodeID]heartbeatRecord, len(n.beats))
	for id, b := range n.beats {
		beats[id] = *b
	}
	n.leaderMu.Unlock()

	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		n.log.Warn("read raft configuration", "err", err)
		return
	}
	inConfig := map[NodeID]raft.Server{}
	voters := 0
	for _, s := range cf.Configuration().Servers {
		inConfig[NodeID(s.ID)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	caughtUp := func(b heartbeatRecord) bool { return b.heard && b.applied+maxCatchUpLag >= applied }

	m := n.Map()
	for _, info := range m.Nodes {
		b, ok := beats[info.ID]
		if !ok {
			b = heartbeatRecord{last: n.leaderSince}
		}
		fresh := now.Sub(b.last) < n.cfg.DownAfter
		var err error
		switch info.State {
		case StateRemoved:
			if _, in := inConfig[info.ID]; in && info.ID != n.id {
				err = n.await(n.raft.RemoveServer(raft.ServerID(info.ID), 0, n.cfg.ApplyTimeout))
			}
			if err != nil {
				n.log.Warn("remove server from raft", "id", info.ID, "err", err)
			}
			continue
		case StateUp:
			if !fresh {
				n.log.Warn("node silent; marking down", "id", info.ID, "silent_for", now.Sub(b.last).Round(time.Millisecond))
				_, err = n.apply(Command{Type: CmdSetState, SetState: &SetStateCommand{ID: info.ID, State: StateDown, Reason: "no heartbeat"}})
				if err == nil {
					n.metrics.markedDown.Inc()
				}
			}
		case StateDown:
			if fresh && b.heard {
				n.log.Info("node heard again; marking up", "id", info.ID)
				_, err = n.apply(Command{Type: CmdSetState, SetState: &SetStateCommand{ID: info.ID, State: StateUp, Reason: "heartbeat"}})
			}
		case StateJoining:
			if _, in := inConfig[info.ID]; in && fresh && caughtUp(b) {
				n.log.Info("node caught up; marking up", "id", info.ID)
				_, err = n.apply(Command{Type: CmdSetState, SetState: &SetStateCommand{ID: info.ID, State: StateUp, Reason: "caught up"}})
			}
		}
		if err != nil {
			n.log.Warn("supervise: map change failed", "id", info.ID, "err", err)
			continue
		}
		if _, in := inConfig[info.ID]; !in {
			n.log.Info("adding node to raft as non-voter", "id", info.ID)
			if err := n.await(n.raft.AddNonvoter(raft.ServerID(info.ID), raft.ServerAddress(info.RaftAddr), 0, n.cfg.ApplyTimeout)); err != nil {
				n.log.Warn("add non-voter", "id", info.ID, "err", err)
			}
		}
		// A node that restarted may come back with a new RDMA address or
		// region registration (a new rkey): publish it.
		if b.heard && b.info.ID == info.ID && infoDiffers(info, b.info) {
			upd := b.info.nodeInfo()
			upd.RaftAddr = info.RaftAddr // raft knows the node by the address it joined with
			if _, err := n.apply(Command{Type: CmdUpdateNode, Node: &upd}); err != nil {
				n.log.Warn("update node", "id", info.ID, "err", err)
			}
		}
	}
	// Servers raft knows but the map does not (a join that failed half-way).
	for id := range inConfig {
		if _, ok := m.Node(id); !ok && id != n.id {
			n.log.Warn("raft server not in the map; removing it", "id", id)
			if err := n.await(n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout)); err != nil {
				n.log.Warn("remove server", "id", id, "err", err)
			}
		}
	}
	// Promotion: caught-up owning non-voters fill the seats up to
	// MaxVoters, counting only voters that are not draining; a draining
	// voter gives its seat up once enough others vote, so the cluster
	// never has fewer voters than before the drain.
	var candidates, draining []NodeID
	healthy := 0
	for id, s := range inConfig {
		info, ok := m.Node(id)
		switch {
		case s.Suffrage == raft.Voter && ok && info.State == StateDraining:
			draining = append(draining, id)
		case s.Suffrage == raft.Voter:
			healthy++
		case s.Suffrage == raft.Nonvoter && ok && info.State == StateUp && caughtUp(beats[id]):
			candidates = append(candidates, id)
		}
	}
	slices.Sort(candidates)
	slices.Sort(draining)
	for _, id := range candidates {
		if healthy >= n.cfg.MaxVoters {
			break
		}
		n.log.Info("promoting caught-up non-voter to voter", "id", id, "voters", voters+1)
		if err := n.await(n.raft.AddVoter(raft.ServerID(id), inConfig[id].Address, 0, n.cfg.ApplyTimeout)); err != nil {
			n.log.Warn("promote", "id", id, "err", err)
			return
		}
		voters++
		healthy++
	}
	for _, id := range draining {
		if healthy < n.cfg.MaxVoters {
			break
		}
		if id == n.id {
			// The new leader takes the seat away.
			n.log.Info("draining leader hands over leadership to give up its voter seat")
			if err := n.await(n.raft.LeadershipTransfer()); err != nil {
				n.log.Warn("leadership transfer", "err", err)
			}
			return
		}
		n.log.Info("draining voter gives up its seat", "id", id)
		if err := n.await(n.raft.DemoteVoter(raft.ServerID(id), 0, n.cfg.ApplyTimeout)); err != nil {
			n.log.Warn("demote draining voter", "id", id, "err", err)
			return
		}
	}
}

func infoDiffers(info NodeInfo, hb JoinRequest) bool {
	return info.AdminAddr != hb.AdminAddr || info.RDMAAddr != hb.RDMAAddr || info.Region != hb.Region
}

// recordHeartbeat is the leader's side of a heartbeat.
func (n *Node) recordHeartbeat(req HeartbeatRequest) (HeartbeatResponse, error) {
	if err := n.requireLeader(); err != nil {
		return HeartbeatResponse{}, err
	}
	m := n.Map()
	info, ok := m.Node(req.ID)
	if !ok {
		return HeartbeatResponse{}, fmt.Errorf("%w: %s", ErrUnknownNode, req.ID)
	}
	if info.State == StateRemoved {
		return HeartbeatResponse{}, fmt.Errorf("%w: %s", ErrNodeRemoved, req.ID)
	}
	n.metrics.heartbeats.Inc()
	n.leaderMu.Lock()
	n.beats[req.ID] = &heartbeatRecord{last: n.cfg.Now(), heard: true, applied: req.AppliedIndex, info: req.JoinRequest}
	n.leaderMu.Unlock()
	return HeartbeatResponse{Epoch: m.Epoch, State: info.State}, nil
}

// heartbeatLoop reports this node to the leader every HeartbeatInterval.
func (n *Node) heartbeatLoop() {
	t := time.NewTicker(n.cfg.HeartbeatInterval)
	defer t.Stop()
	// Heartbeats go through the node's connection pool, so they reuse a
	// connection (and TLS session) instead of dialing every interval. The
	// token does not change once the node has joined.
	var c *AdminClient
	var cAddr string
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		if n.removed.Load() {
			return
		}
		if !n.joined.Load() || n.raft.State() == raft.Leader {
			continue
		}
		_, leaderAddr := n.Leader()
		if leaderAddr == "" {
			// A non-voter that was removed before the map entry reached it
			// sees no leader again and would never learn: ask the members.
			if n.probeRemoved() {
				n.onRemoved()
				return
			}
			continue
		}
		if c == nil || cAddr != leaderAddr {
			c, cAddr = n.client([]string{leaderAddr}), leaderAddr
		}
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.HeartbeatInterval)
		req := HeartbeatRequest{JoinRequest: n.selfInfo(), AppliedIndex: n.raft.AppliedIndex(), Epoch: n.Map().Epoch}
		_, err := c.Heartbeat(ctx, req)
		cancel()
		switch {
		case errors.Is(err, ErrNodeRemoved):
			n.onRemoved()
			return
		case err != nil && n.ctx.Err() == nil:
			n.log.Debug("heartbeat failed", "leader", leaderAddr, "err", err)
		}
	}
}

// probeRemoved asks the other members for the map and reports whether it
// tombstones this node.
func (n *Node) probeRemoved() bool {
	var members []string
	for _, info := range n.Map().Nodes {
		if info.ID != n.id && info.State != StateRemoved {
			members = append(members, info.AdminAddr)
		}
	}
	if len(members) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.HeartbeatInterval)
	defer cancel()
	m, err := n.client(members).Map(ctx)
	if err != nil {
		return false
	}
	info, ok := m.Node(n.id)
	return ok && info.State == StateRemoved
}

// watchSelfRemoval notices when the map tombstones this node.
func (n *Node) watchSelfRemoval() {
	var epoch uint64
	for {
		m, err := n.Watch(n.ctx, epoch)
		if err != nil {
			return
		}
		epoch = m.Epoch
		if info, ok := m.Node(n.id); ok && info.State == StateRemoved {
			n.onRemoved()
			return
		}
	}
}

// onRemoved stops raft on a node that was removed, so it neither receives
// updates nor disturbs the cluster; its admin API keeps answering status.
func (n *Node) onRemoved() {
	if n.removed.Swap(true) {
		return
	}
	n.log.Warn("this node was removed from the cluster; stop it and wipe its data directory before reusing the machine")
	go func() {
		if n.raft.State() == raft.Leader {
			// Let the others carry on; the new leader finishes the removal.
			_ = n.raft.LeadershipTransfer().Error()
		}
		_ = n.raft.Shutdown().Error()
		n.raftStopped.Store(true)
	}()
}

// Join admits a node: it enters the map as joining and raft as a non-voter.
// The leader marks it up (and gives it partitions) once it has caught up,
// and promotes it to voter while there are fewer than MaxVoters. Joining
// again with the same id and raft address admits nothing new. The answer
// carries the node's raft certificate, issued for the request's CSR.
func (n *Node) Join(ctx context.Context, req JoinRequest) (*JoinResponse, error) {
	if !ValidNodeID(req.ID) || req.RaftAddr == "" || req.AdminAddr == "" {
		return nil, fmt.Errorf("%w: join needs a valid id, raft address and admin address", ErrBadRequest)
	}
	if err := n.requireLeader(); err != nil {
		return nil, err
	}
	n.opMu.Lock()
	defer n.opMu.Unlock()
	m := n.Map()
	info, known := m.Node(req.ID)
	switch {
	case known && info.State == StateRemoved:
		return nil, fmt.Errorf("%w: %s", ErrNodeRemoved, req.ID)
	case known && info.RaftAddr != req.RaftAddr:
		return nil, fmt.Errorf("%w: %s is at %s", ErrNodeExists, req.ID, info.RaftAddr)
	case !known:
		if err := m.checkAddresses(req.nodeInfo()); err != nil {
			return nil, err
		}
	}
	if req.CSR == "" {
		return nil, fmt.Errorf("%w: join needs a certificate request for raft's TLS; upgrade octofs on the joining node", ErrBadRequest)
	}
	p := n.pki.Load()
	cert, err := p.signCSR([]byte(req.CSR), req.ID, n.cfg.Now())
	if err != nil {
		return nil, err
	}
	resp := &JoinResponse{Map: m, Certificate: string(cert), CA: string(p.caCertPEM), CAKey: string(p.caKeyPEM)}
	if known {
		return resp, nil // already admitted; supervise finishes the raft side
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cluster: join of %s abandoned by the caller: %w", req.ID, err)
	}
	ni := req.nodeInfo()
	if resp.Map, err = n.apply(Command{Type: CmdAddNode, Node: &ni}); err != nil {
		return nil, err
	}
	n.log.Info("admitted node", "id", req.ID, "epoch", resp.Map.Epoch)
	if err := n.await(n.raft.AddNonvoter(raft.ServerID(req.ID), raft.ServerAddress(req.RaftAddr), 0, n.cfg.ApplyTimeout)); err != nil {
		// supervise retries: the map says the node belongs.
		n.log.Warn("add non-voter", "id", req.ID, "err", err)
	}
	n.leaderMu.Lock()
	n.beats[req.ID] = &heartbeatRecord{last: n.cfg.Now()}
	n.leaderMu.Unlock()
	return resp, nil
}

// checkHoldsData refuses to drain or remove a node that owns pinned
// partitions (the FSM refuses it too; this answers without a raft round).
func checkHoldsData(m *Map, id NodeID) error {
	if k := len(m.PinnedOf(id)); k > 0 {
		return &HoldsDataError{Node: id, Partitions: k}
	}
	return nil
}

// Remove tombstones a node, hands its partitions to the others and takes it
// out of raft. A node that owns pinned partitions is refused
// (*HoldsDataError); ForceRemove removes it anyway. Removing the leader
// first hands leadership to another voter; the call then answers with a
// leader hint for the caller to retry. Removing a removed node changes
// nothing and answers the map.
func (n *Node) Remove(ctx context.Context, id NodeID) (*Map, error) {
	return n.remove(ctx, id, false)
}

// ForceRemove removes a node even if it owns pinned partitions: their
// file-system data is lost, and they are unpinned and handed to others.
func (n *Node) ForceRemove(ctx context.Context, id NodeID) (*Map, error) {
	return n.remove(ctx, id, true)
}

func (n *Node) remove(ctx context.Context, id NodeID, force bool) (*Map, error) {
	if err := n.requireLeader(); err != nil {
		return nil, err
	}
	m := n.Map()
	info, ok := m.Node(id)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownNode, id)
	}
	if info.State == StateRemoved {
		return m, nil
	}
	if !force {
		if err := checkHoldsData(m, id); err != nil {
			return nil, err
		}
	}
	if id == n.id {
		n.log.Info("asked to remove myself; transferring leadership first")
		if err := n.await(n.raft.LeadershipTransfer()); err != nil {
			return nil, fmt.Errorf("cluster: cannot hand over leadership to remove the leader: %w", err)
		}
		return nil, n.waitForOtherLeader(ctx)
	}
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cluster: removal of %s abandoned by the caller: %w", id, err)
	}
	lost := n.Map().PinnedOf(id)
	m, err := n.apply(Command{Type: CmdRemove, Target: id, Force: force && len(lost) > 0})
	if err != nil {
		return nil, err
	}
	if len(lost) > 0 {
		n.log.Warn("removed a node that held file-system data; its data is lost", "id", id, "partitions", len(lost), "epoch", m.Epoch)
	} else {
		n.log.Info("removed node", "id", id, "epoch", m.Epoch)
	}
	if err := n.await(n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout)); err != nil {
		n.log.Warn("remove server from raft; supervise retries", "id", id, "err", err)
	}
	n.leaderMu.Lock()
	delete(n.beats, id)
	n.leaderMu.Unlock()
	return m, nil
}

// waitForOtherLeader waits (bounded) until another node leads and returns
// the not-leader error naming it.
func (n *Node) waitForOtherLeader(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	for {
		if id, addr := n.Leader(); id != "" && id != n.id && addr != "" {
			return &NotLeaderError{LeaderID: id, LeaderAdminAddr: addr}
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return n.notLeader()
		}
	}
}

// Drain moves a node to draining and hands all its partitions to the other
// nodes; it stays a raft member until removed. A node that owns pinned
// partitions is refused (*HoldsDataError). Draining a draining node
// changes nothing and answers the map, so a client may safely retry.
func (n *Node) Drain(ctx context.Context, id NodeID) (*Map, error) {
	if err := n.requireLeader(); err != nil {
		return nil, err
	}
	n.opMu.Lock()
	defer n.opMu.Unlock()
	m := n.Map()
	info, ok := m.Node(id)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownNode, id)
	}
	if info.State == StateDraining {
		return m, nil
	}
	if err := checkHoldsData(m, id); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cluster: drain of %s abandoned by the caller: %w", id, err)
	}
	m, err := n.apply(Command{Type: CmdDrain, Target: id})
	if err != nil {
		return nil, err
	}
	n.log.Info("draining node", "id", id, "epoch", m.Epoch)
	return m, nil
}

// pin is the leader's side of PinPartition: it pins partition p to node
// id if id owns it, and refuses with *NotOwnerError otherwise.
func (n *Node) pin(ctx context.Context, p uint32, id NodeID) (*Map, error) {
	if err := n.requireLeader(); err != nil {
		return nil, err
	}
	n.opMu.Lock()
	defer n.opMu.Unlock()
	m := n.Map()
	if !m.Initialized() {
		return nil, ErrNotInitialized
	}
	if p >= m.NumPartitions() {
		return nil, fmt.Errorf("%w: partition %d of %d", ErrBadRequest, p, m.NumPartitions())
	}
	if owner := m.Partitions[p]; owner != id {
		return nil, &NotOwnerError{Partition: p, Owner: owner, Requester: id}
	}
	if m.IsPinned(p) {
		return m, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cluster: pin of partition %d abandoned by the caller: %w", p, err)
	}
	m, err := n.apply(Command{Type: CmdPin, Pin: &PinCommand{Partition: p, Node: id}})
	if err != nil {
		return nil, err
	}
	n.log.Debug("pinned partition", "partition", p, "node", id, "epoch", m.Epoch)
	return m, nil
}

// PinPartition records in the map that partition p holds file-system data
// on this node, which must own it; from then on the partition never
// changes owner (partitions cannot move with their data yet), and this
// node cannot be drained or removed without losing that data. The
// metadata service calls it before its first write to a partition.
//
// It returns at once if the partition is already pinned to this node in
// the local map; otherwise it asks the leader (forwarding over the admin
// API if another node leads), retrying while there is no leader, and
// returns once the local map shows the pin. A partition owned by another
// node is refused with a *NotOwnerError naming the owner.
func (n *Node) PinPartition(ctx context.Context, p uint32) error {
	if m := n.Map(); m.Initialized() && p < m.NumPartitions() && m.Partitions[p] == n.id && m.IsPinned(p) {
		return nil
	}
	var m *Map
	var err error
	if n.IsLeader() {
		m, err = n.pin(ctx, p, n.id)
	}
	if !n.IsLeader() || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) {
		// Through this node's own admin API, which forwards to the leader
		// and follows its hints; AdminClient retries while none is known.
		m, err = n.client([]string{n.cfg.AdminAddr}).Pin(ctx, p, n.id)
	}
	if err != nil {
		return err
	}
	// Return once this node's map shows the pin, so the caller's next
	// look at the map agrees.
	for {
		cur := n.Map()
		if cur.Epoch >= m.Epoch && cur.IsPinned(p) {
			return nil
		}
		if _, err := n.Watch(ctx, cur.Epoch); err != nil {
			return fmt.Errorf("cluster: partition %d is pinned at epoch %d, but this node's map has not caught up: %w", p, m.Epoch, err)
		}
	}
}

// joinCluster asks members to admit this node, retrying while no leader
// is known or the members cannot be reached, and gives up on refusals.
func (n *Node) joinCluster(ctx context.Context, members []string) error {
	_, err := n.joinVia(ctx, members)
	return err
}

// joinVia is joinCluster returning the admitting map.
func (n *Node) joinVia(ctx context.Context, members []string) (*Map, error) {
	n.joinMu.Lock()
	defer n.joinMu.Unlock()
	if n.joined.Load() {
		return n.Map(), nil
	}
	if n.getToken() == "" {
		return nil, fmt.Errorf("%w: joining needs the cluster token", ErrUnauthorized)
	}
	backoff := 100 * time.Millisecond
	for {
		resp, err := n.client(members).Join(ctx, n.joinInfo())
		if err == nil {
			if err := n.adoptCredentials(resp); err != nil {
				return nil, err
			}
			if err := storeToken(n.cfg.DataDir, n.getToken()); err != nil {
				return nil, fmt.Errorf("cluster: store token: %w", err)
			}
			n.joined.Store(true)
			n.log.Info("joined the cluster", "via", members, "cluster_id", resp.Map.ClusterID, "epoch", resp.Map.Epoch)
			return resp.Map, nil
		}
		if errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrNodeRemoved) || errors.Is(err, ErrNodeExists) ||
			errors.Is(err, ErrBadRequest) || errors.Is(err, ErrAddressInUse) || errors.Is(err, ErrUnsupportedVersion) {
			n.log.Error("join refused", "err", err)
			return nil, err
		}
		n.log.Info("join not possible yet; retrying", "err", err, "in", backoff)
		if !sleepCtx(ctx, backoff) {
			return nil, fmt.Errorf("cluster: join via %v: %w (last error: %v)", members, ctx.Err(), err)
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
