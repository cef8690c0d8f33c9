package cluster

import (
	"fmt"
	"slices"
)

// NodeID names a node. It is also the node's raft server id.
type NodeID string

// NodeState is a node's place in its life cycle.
type NodeState string

// Node states. See doc.go for the transitions.
const (
	// StateJoining: in the raft configuration, catching up; owns no partitions.
	StateJoining NodeState = "joining"
	// StateUp: serving; owns its share of the partitions.
	StateUp NodeState = "up"
	// StateDown: silent past the failure timeout. It keeps its partitions:
	// without replication their data lives only on that node.
	StateDown NodeState = "down"
	// StateDraining: its partitions were handed to the other nodes; it stays
	// in raft until removed.
	StateDraining NodeState = "draining"
	// StateRemoved: a tombstone; the id cannot be reused.
	StateRemoved NodeState = "removed"
)

// Valid reports whether s is one of the known states.
func (s NodeState) Valid() bool {
	switch s {
	case StateJoining, StateUp, StateDown, StateDraining, StateRemoved:
		return true
	}
	return false
}

// ownsPartitions reports whether nodes in state s are eligible to own
// partitions. Down nodes keep theirs (the data is only there).
func (s NodeState) ownsPartitions() bool { return s == StateUp || s == StateDown }

// RegionDescriptor describes the persistent-memory region a node exports as
// an RDMA memory region. The cluster package treats it as opaque data that
// the storage layers fill in.
type RegionDescriptor struct {
	UUID   string `json:"uuid,omitempty"`
	Base   uint64 `json:"base,omitempty"`
	Length uint64 `json:"length,omitempty"`
	// RKey is the remote key. It is a capability: the admin API shows it only
	// to callers that present the cluster token.
	RKey uint32 `json:"rkey,omitempty"`
}

// NodeInfo is one node's entry in the cluster map.
type NodeInfo struct {
	ID        NodeID           `json:"id"`
	AdminAddr string           `json:"admin_addr"`
	RaftAddr  string           `json:"raft_addr"`
	RDMAAddr  string           `json:"rdma_addr,omitempty"`
	Region    RegionDescriptor `json:"region"`
	State     NodeState        `json:"state"`
	// StateEpoch is the epoch at which State last changed.
	StateEpoch uint64 `json:"state_epoch"`
}

// Map is the cluster map: the raft FSM state. A *Map handed out by this
// package is immutable; every change produces a new Map with a higher epoch.
type Map struct {
	ClusterID string `json:"cluster_id"`
	// Epoch increases by one with every change. 0 means not initialized.
	Epoch uint64 `json:"epoch"`
	// Nodes, sorted by ID, including removed ones (tombstones).
	Nodes []NodeInfo `json:"nodes"`
	// Partitions[p] is the node that owns partition p.
	Partitions []NodeID `json:"partitions"`
	// Pinned lists, in increasing order, the partitions that hold
	// file-system data on their owner. A pinned partition never changes
	// owner: partitions cannot yet move with their data, so moving its
	// ownership would strand the data (see PinPartition).
	Pinned []uint32 `json:"pinned,omitempty"`
	// FilePlacement is where new files go (see NewInodePartition); set
	// when the map is created and never changed, since clients and nodes
	// must agree on it. Empty in maps made before it existed: PlaceHashed.
	FilePlacement FilePlacement `json:"file_placement,omitempty"`
	// Redacted is true when region keys were removed for an unauthenticated
	// reader. A redacted map must not be used for data access.
	Redacted bool `json:"redacted,omitempty"`
	// Stale is set on an answer from a node that has not caught up with
	// the cluster (no leader in reach): the map may be older than the
	// cluster's. StaleReason says why. Neither is part of raft's state.
	Stale       bool   `json:"stale,omitempty"`
	StaleReason string `json:"stale_reason,omitempty"`
}

// Initialized reports whether the map was created (by the first leader).
func (m *Map) Initialized() bool { return m != nil && m.Epoch > 0 }

// NumPartitions returns P, the cluster's partition count.
func (m *Map) NumPartitions() uint32 { return uint32(len(m.Partitions)) }

// Node returns the entry for id.
func (m *Map) Node(id NodeID) (NodeInfo, bool) {
	i, ok := m.nodeIndex(id)
	if !ok {
		return NodeInfo{}, false
	}
	return m.Nodes[i], true
}

func (m *Map) nodeIndex(id NodeID) (int, bool) {
	return slices.BinarySearchFunc(m.Nodes, id, func(n NodeInfo, id NodeID) int {
		switch {
		case n.ID < id:
			return -1
		case n.ID > id:
			return 1
		}
		return 0
	})
}

// PartitionCounts returns how many partitions each node owns.
func (m *Map) PartitionCounts() map[NodeID]int {
	c := make(map[NodeID]int, len(m.Nodes))
	for _, id := range m.Partitions {
		c[id]++
	}
	return c
}

// IsPinned reports whether partition p holds file-system data on its owner.
func (m *Map) IsPinned(p uint32) bool {
	_, ok := slices.BinarySearch(m.Pinned, p)
	return ok
}

// PinnedCounts returns how many pinned partitions each node owns.
func (m *Map) PinnedCounts() map[NodeID]int {
	c := make(map[NodeID]int)
	for _, p := range m.Pinned {
		if int(p) < len(m.Partitions) {
			c[m.Partitions[p]]++
		}
	}
	return c
}

// PinnedOf returns the pinned partitions node id owns, in increasing order.
func (m *Map) PinnedOf(id NodeID) []uint32 {
	var out []uint32
	for _, p := range m.Pinned {
		if int(p) < len(m.Partitions) && m.Partitions[p] == id {
			out = append(out, p)
		}
	}
	return out
}

// Clone returns a deep copy.
func (m *Map) Clone() *Map {
	c := *m
	c.Nodes = slices.Clone(m.Nodes)
	c.Partitions = slices.Clone(m.Partitions)
	c.Pinned = slices.Clone(m.Pinned)
	return &c
}

// Redact returns a copy without region keys, for readers without the token.
func (m *Map) Redact() *Map {
	c := m.Clone()
	for i := range c.Nodes {
		c.Nodes[i].Region.RKey = 0
	}
	c.Redacted = true
	return c
}

// Validate checks the map's invariants: nodes sorted and unique with valid
// states, every partition owned by a node that may own partitions, and the
// pinned list sorted, unique and within the table.
func (m *Map) Validate() error {
	if m.Epoch == 0 {
		if len(m.Nodes) != 0 || len(m.Partitions) != 0 || len(m.Pinned) != 0 {
			return fmt.Errorf("%w: uninitialized map with content", ErrMalformed)
		}
		return nil
	}
	if len(m.Partitions) == 0 || len(m.Partitions) > MaxPartitions {
		return fmt.Errorf("%w: %d partitions", ErrMalformed, len(m.Partitions))
	}
	for i, n := range m.Nodes {
		if n.ID == "" {
			return fmt.Errorf("%w: node with empty id", ErrMalformed)
		}
		if i > 0 && m.Nodes[i-1].ID >= n.ID {
			return fmt.Errorf("%w: nodes not sorted or duplicated at %q", ErrMalformed, n.ID)
		}
		if !n.State.Valid() {
			return fmt.Errorf("%w: node %q has state %q", ErrMalformed, n.ID, n.State)
		}
	}
	for p, id := range m.Partitions {
		n, ok := m.Node(id)
		if !ok {
			return fmt.Errorf("%w: partition %d owned by unknown node %q", ErrMalformed, p, id)
		}
		if !n.State.ownsPartitions() {
			return fmt.Errorf("%w: partition %d owned by node %q in state %s", ErrMalformed, p, id, n.State)
		}
	}
	for i, p := range m.Pinned {
		if int(p) >= len(m.Partitions) {
			return fmt.Errorf("%w: pinned partition %d of %d", ErrMalformed, p, len(m.Partitions))
		}
		if i > 0 && m.Pinned[i-1] >= p {
			return fmt.Errorf("%w: pinned partitions not sorted or duplicated at %d", ErrMalformed, p)
		}
	}
	if m.FilePlacement != "" && !m.FilePlacement.Valid() {
		return fmt.Errorf("%w: file placement %q", ErrMalformed, m.FilePlacement)
	}
	return nil
}
