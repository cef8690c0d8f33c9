package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// CommandVersion is the version of the FSM command format and of the
// semantics of applying it (including the rebalance rule). A replica that
// receives a newer version refuses the command without changing its map,
// so mixed-version clusters must upgrade every node before a leader starts
// writing a new version.
const CommandVersion = 1

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
}

// InitCommand creates the cluster map.
type InitCommand struct {
	ClusterID  string   `json:"cluster_id"`
	Partitions int      `json:"partitions"`
	First      NodeInfo `json:"first"`
}

// SetStateCommand changes a node's state.
type SetStateCommand struct {
	ID     NodeID    `json:"id"`
	State  NodeState `json:"state"`
	Reason string    `json:"reason,omitempty"`
}

// EncodeCommand encodes c for the raft log, stamping the current version.
func EncodeCommand(c Command) ([]byte, error) {
	c.Version = CommandVersion
	if err := c.check(); err != nil {
		return nil, err
	}
	return json.Marshal(c)
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
	if *head.Version != CommandVersion {
		return Command{}, fmt.Errorf("%w: command version %d, this build reads %d", ErrUnsupportedVersion, *head.Version, CommandVersion)
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
	return c, nil
}

// check verifies that exactly the payload for Type is present and sane.
func (c Command) check() error {
	has := []bool{c.Init != nil, c.Node != nil, c.SetState != nil, c.Target != ""}
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
	default:
		return fmt.Errorf("%w: %q", ErrUnknownCommand, c.Type)
	}
	for i, h := range has {
		if h != (i == want) {
			return fmt.Errorf("%w: %s command with wrong payload", ErrMalformed, c.Type)
		}
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
		n.Nodes[i].State, n.Nodes[i].StateEpoch = to, n.Epoch
		if err := n.rebalance(); err != nil {
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownCommand, c.Type)
}

// rebalance reassigns the partition table over the eligible nodes.
func (m *Map) rebalance() error {
	var eligible []NodeID
	for _, n := range m.Nodes {
		if n.State.ownsPartitions() {
			eligible = append(eligible, n.ID)
		}
	}
	t, _, err := rebalance(m.Partitions, eligible)
	if err != nil {
		return err
	}
	m.Partitions = t
	return nil
}
