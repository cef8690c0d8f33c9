package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// CommandVersion is the newest version of the FSM command format and of
// the semantics of applying it (including the rebalance rule) that this
// build reads and writes. A replica that receives a newer version refuses
// the command without changing its map, so mixed-version clusters must
// upgrade every node before a leader starts writing a new version.
//
// Version 2 added pin and remove's force flag, and made rebalancing leave
// pinned partitions in place. A command is stamped with the oldest version
// that expresses it (see minVersion), so a cluster that never pins keeps
// writing version 1, which builds before version 2 still read.
const CommandVersion = 2

// oldestCommandVersion is the oldest version this build still reads.
const oldestCommandVersion = 1

// CommandType names an FSM command.
type CommandType string

// The FSM commands.
const (
	// CmdInit creates the map: the cluster id, P and the first node.
	CmdInit CommandType = "init"
	// CmdAddNode adds a node in state joining.
	CmdAddNode CommandType = "add_node"
	// CmdSetState moves a node between up and down, or joining to up.
	CmdSetState CommandType = "set_state"
	// CmdDrain moves a node to draining and hands its partitions away.
	CmdDrain CommandType = "drain"
	// CmdRemove tombstones a node and hands its partitions away.
	CmdRemove CommandType = "remove"
	// CmdUpdateNode replaces a node's addresses and region descriptor.
	CmdUpdateNode CommandType = "update_node"
	// CmdPin pins a partition to its owner (version 2).
	CmdPin CommandType = "pin"
)

// Command is one entry of the raft log. Exactly the payload field matching
// Type is set.
type Command struct {
	Version int         `json:"v"`
	Type    CommandType `json:"type"`

	Init     *InitCommand     `json:"init,omitempty"`
	Node     *NodeInfo        `json:"node,omitempty"`      // add_node, update_node
	SetState *SetStateCommand `json:"set_state,omitempty"` // set_state
	Target   NodeID           `json:"target,omitempty"`    // drain, remove
	Pin      *PinCommand      `json:"pin,omitempty"`       // pin
	// Force, with remove only, removes a node that owns pinned partitions:
	// their data is lost and they are unpinned and handed to other nodes.
	Force bool `json:"force,omitempty"`
}

// PinCommand pins Partition to Node, which must own it.
type PinCommand struct {
	Partition uint32 `json:"partition"`
	Node      NodeID `json:"node"`
}

// InitCommand creates the cluster map.
type InitCommand struct {
	ClusterID  string   `json:"cluster_id"`
	Partitions int      `json:"partitions"`
	First      NodeInfo `json:"first"`
	// FilePlacement of the new map (empty: PlaceHashed, as before it
	// existed).
	FilePlacement FilePlacement `json:"file_placement,omitempty"`
}

// SetStateCommand changes a node's state.
type SetStateCommand struct {
	ID     NodeID    `json:"id"`
	State  NodeState `json:"state"`
	Reason string    `json:"reason,omitempty"`
}

// EncodeCommand encodes c for the raft log, stamping the oldest version
// that expresses it.
func EncodeCommand(c Command) ([]byte, error) {
	c.Version = c.minVersion()
	if err := c.check(); err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// minVersion is the oldest command version that has c's type and fields.
func (c Command) minVersion() int {
	if c.Type == CmdPin || c.Force {
		return 2
	}
	return 1
}

// DecodeCommand decodes a raft log entry. It rejects unknown versions
// (ErrUnsupportedVersion), unknown types (ErrUnknownCommand) and anything
// else that is not exactly one well-formed command (ErrMalformed).
func DecodeCommand(b []byte) (Command, error) {
	// Peek at the version first so a newer format with fields this build
	// does not know is reported as a version problem, not as garbage.
	var head struct {
		Version *int `json:"v"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return Command{}, fmt.Errorf("%w: command: %v", ErrMalformed, err)
	}
	if head.Version == nil {
		return Command{}, fmt.Errorf("%w: command without version", ErrMalformed)
	}
	if *head.Version < oldestCommandVersion || *head.Version > CommandVersion {
		return Command{}, fmt.Errorf("%w: command version %d, this build reads %d to %d", ErrUnsupportedVersion, *head.Version, oldestCommandVersion, CommandVersion)
	}
	var c Command
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return Command{}, fmt.Errorf("%w: command: %v", ErrMalformed, err)
	}
	if d.More() {
		return Command{}, fmt.Errorf("%w: trailing data after command", ErrMalformed)
	}
	if err := c.check(); err != nil {
		return Command{}, err
	}
	if c.Version < c.minVersion() {
		return Command{}, fmt.Errorf("%w: %s command of version %d needs version %d", ErrMalformed, c.Type, c.Version, c.minVersion())
	}
	return c, nil
}

// check verifies that exactly the payload for Type is present and sane.
func (c Command) check() error {
	has := []bool{c.Init != nil, c.Node != nil, c.SetState != nil, c.Target != "", c.Pin != nil}
	want := -1
	switch c.Type {
	case CmdInit:
		want = 0
	case CmdAddNode, CmdUpdateNode:
		want = 1
	case CmdSetState:
		want = 2
	case CmdDrain, CmdRemove:
		want = 3
	case CmdPin:
		want = 4
	default:
		return fmt.Errorf("%w: %q", ErrUnknownCommand, c.Type)
	}
	for i, h := range has {
		if h != (i == want) {
			return fmt.Errorf("%w: %s command with wrong payload", ErrMalformed, c.Type)
		}
	}
	if c.Force && c.Type != CmdRemove {
		return fmt.Errorf("%w: force is for remove only", ErrMalformed)
	}
	switch c.Type {
	case CmdInit:
		if c.Init.ClusterID == "" || c.Init.Partitions <= 0 || c.Init.Partitions > MaxPartitions {
			return fmt.Errorf("%w: init needs a cluster id and 1..%d partitions", ErrMalformed, MaxPartitions)
		}
		if c.Init.First.ID == "" {
			return fmt.Errorf("%w: init without first node", ErrMalformed)
		}
	case CmdAddNode, CmdUpdateNode:
		if c.Node.ID == "" {
			return fmt.Errorf("%w: %s without node id", ErrMalformed, c.Type)
		}
	case CmdSetState:
		if c.SetState.ID == "" || !slices.Contains([]NodeState{StateUp, StateDown}, c.SetState.State) {
			return fmt.Errorf("%w: set_state to %q (only up or down)", ErrMalformed, c.SetState.State)
		}
	case CmdPin:
		if c.Pin.Node == "" || c.Pin.Partition >= MaxPartitions {
			return fmt.Errorf("%w: pin needs a node and a partition below %d", ErrMalformed, MaxPartitions)
		}
	}
	return nil
}

// applyCommand returns the map that results from applying c to m, or an
// error and no change. It never modifies m.
func applyCommand(m *Map, c Command) (*Map, error) {
	if c.Type == CmdInit {
		if m.Initialized() {
			return nil, ErrAlreadyInitialized
		}
		first := c.Init.First
		first.State = StateUp
		first.StateEpoch = 1
		n := &Map{
			ClusterID:  c.Init.ClusterID,
			Epoch:      1,
			Nodes:      []NodeInfo{first},
			Partitions: make([]NodeID, c.Init.Partitions),

			FilePlacement: c.Init.FilePlacement,
		}
		for i := range n.Partitions {
			n.Partitions[i] = first.ID
		}
		return n, nil
	}
	if !m.Initialized() {
		return nil, ErrNotInitialized
	}
	n := m.Clone()
	n.Epoch++
	switch c.Type {
	case CmdAddNode:
		if i, ok := n.nodeIndex(c.Node.ID); ok {
			if n.Nodes[i].State == StateRemoved {
				return nil, fmt.Errorf("%w: %s", ErrNodeRemoved, c.Node.ID)
			}
			return nil, fmt.Errorf("%w: %s", ErrNodeExists, c.Node.ID)
		}
		if err := n.checkAddresses(*c.Node); err != nil {
			return nil, err
		}
		info := *c.Node
		info.State = StateJoining
		info.StateEpoch = n.Epoch
		i, _ := n.nodeIndex(info.ID)
		n.Nodes = slices.Insert(n.Nodes, i, info)
		return n, nil

	case CmdUpdateNode:
		i, ok := n.nodeIndex(c.Node.ID)
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrUnknownNode, c.Node.ID)
		}
		old := n.Nodes[i]
		if old.State == StateRemoved {
			return nil, fmt.Errorf("%w: %s", ErrNodeRemoved, old.ID)
		}
		if err := n.checkAddresses(*c.Node); err != nil {
			return nil, err
		}
		upd := *c.Node
		upd.State, upd.StateEpoch = old.State, old.StateEpoch
		n.Nodes[i] = upd
		return n, nil

	case CmdSetState:
		s := c.SetState
		i, ok := n.nodeIndex(s.ID)
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrUnknownNode, s.ID)
		}
		from := n.Nodes[i].State
		valid := (from == StateUp && s.State == StateDown) ||
			(from == StateDown && s.State == StateUp) ||
			(from == StateJoining && s.State == StateUp)
		if !valid {
			return nil, fmt.Errorf("%w: %s from %s to %s", ErrBadTransition, s.ID, from, s.State)
		}
		n.Nodes[i].State, n.Nodes[i].StateEpoch = s.State, n.Epoch
		if from == StateJoining {
			// The node becomes eligible: give it its share.
			if err := n.rebalance(); err != nil {
				return nil, err
			}
		}
		return n, nil

	case CmdDrain, CmdRemove:
		i, ok := n.nodeIndex(c.Target)
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrUnknownNode, c.Target)
		}
		from := n.Nodes[i].State
		to := StateDraining
		if c.Type == CmdRemove {
			to = StateRemoved
		}
		if from == StateRemoved || from == to {
			return nil, fmt.Errorf("%w: %s is already %s", ErrBadTransition, c.Target, from)
		}
		if pinned := n.PinnedOf(c.Target); len(pinned) > 0 {
			if !c.Force {
				return nil, &HoldsDataError{Node: c.Target, Partitions: len(pinned)}
			}
			// The data of these partitions is lost with the node: they
			// become ordinary partitions for rebalance to hand out.
			n.Pinned = slices.DeleteFunc(n.Pinned, func(p uint32) bool { return n.Partitions[p] == c.Target })
		}
		n.Nodes[i].State, n.Nodes[i].StateEpoch = to, n.Epoch
		if err := n.rebalance(); err != nil {
			return nil, err
		}
		return n, nil

	case CmdPin:
		p, want := c.Pin.Partition, c.Pin.Node
		if p >= m.NumPartitions() {
			return nil, fmt.Errorf("%w: partition %d of %d", ErrBadRequest, p, m.NumPartitions())
		}
		if owner := m.Partitions[p]; owner != want {
			return nil, &NotOwnerError{Partition: p, Owner: owner, Requester: want}
		}
		if m.IsPinned(p) {
			return m, nil // already pinned to its owner: no change, same epoch
		}
		i, _ := slices.BinarySearch(n.Pinned, p)
		n.Pinned = slices.Insert(n.Pinned, i, p)
		return n, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownCommand, c.Type)
}

// checkAddresses refuses a node entry whose admin or raft address another
// member (not removed) uses: raft would reach one node under two ids, and
// heartbeats and forwarded requests the wrong node. (An RDMA address used
// twice is a misconfiguration the data path detects: `octoctl probe`
// checks that each node's region is the one the map names.)
func (m *Map) checkAddresses(info NodeInfo) error {
	for _, other := range m.Nodes {
		if other.ID == info.ID || other.State == StateRemoved {
			continue
		}
		for _, a := range []struct{ what, mine, theirs string }{
			{"admin", info.AdminAddr, other.AdminAddr},
			{"raft", info.RaftAddr, other.RaftAddr},
		} {
			if a.mine != "" && a.mine == a.theirs {
				return fmt.Errorf("%w: %s address %s is node %s's; give node %s its own address (or remove %s first if it moved)",
					ErrAddressInUse, a.what, a.mine, other.ID, info.ID, other.ID)
			}
		}
	}
	return nil
}

// rebalance reassigns the unpinned partitions over the eligible nodes;
// pinned partitions stay where they are.
func (m *Map) rebalance() error {
	var eligible []NodeID
	for _, n := range m.Nodes {
		if n.State.ownsPartitions() {
			eligible = append(eligible, n.ID)
		}
	}
	t, _, err := rebalancePinned(m.Partitions, m.Pinned, eligible)
	if err != nil {
		return err
	}
	m.Partitions = t
	return nil
}
