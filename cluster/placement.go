package cluster

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
)

// Placement. Every function here is a pure function of the map (or of P),
// so every client and node computes the same answer for the same epoch.
// The hash functions are part of the on-media format: changing them moves
// every new inode and chunk elsewhere than existing data expects.

// PartitionForName returns the partition of a new inode created as name in
// directory parent: a hash of (parent, name), which spreads a directory's
// children over the cluster the way Octopus hashes full paths, but stays
// valid across renames because the inode number then never changes.
func PartitionForName(parent uint64, name string, partitions uint32) uint32 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], parent)
	h.Write(b[:])
	h.Write([]byte(name))
	return uint32(mix64(h.Sum64()) % uint64(partitions))
}

// ChunkPartition returns the partition holding chunk index chunk of inode
// ino, so that a large file is striped over all partitions.
func ChunkPartition(ino, chunk uint64, partitions uint32) uint32 {
	return uint32(mix64(ino^mix64(chunk+0x9e3779b97f4a7c15)) % uint64(partitions))
}

// mix64 is the splitmix64 finalizer: it spreads every input bit over the
// output so that "mod P" of consecutive inputs is uniform.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// OwnerOfPartition returns the node owning partition p. The node may be
// down: callers check State.
func (m *Map) OwnerOfPartition(p uint32) (NodeInfo, error) {
	if !m.Initialized() {
		return NodeInfo{}, ErrNotInitialized
	}
	if p >= m.NumPartitions() {
		return NodeInfo{}, fmt.Errorf("%w: partition %d of %d", ErrBadRequest, p, m.NumPartitions())
	}
	n, ok := m.Node(m.Partitions[p])
	if !ok {
		return NodeInfo{}, fmt.Errorf("%w: partition %d owner %q", ErrUnknownNode, p, m.Partitions[p])
	}
	return n, nil
}

// OwnerOfInode returns the node owning inode ino, from the partition in its
// high bits.
func (m *Map) OwnerOfInode(ino uint64) (NodeInfo, error) {
	return m.OwnerOfPartition(PartitionOf(ino))
}

// FilePlacement is where a cluster puts a new inode that is not a
// directory (a regular file, symlink, device, fifo or socket). New
// directories always go to PartitionForName, so that subtrees spread over
// the cluster.
type FilePlacement string

const (
	// PlaceWithDirectory puts a new file in its directory's partition,
	// as Lustre puts a file on its directory's MDT and CephFS keeps
	// inodes with their dentries: create and unlink then change one
	// partition (one commit on one node) instead of two (a
	// collect-dispatch transaction across nodes). A directory's entries
	// live on its owner in either placement, so spreading its files
	// relieves that node of no request; it only adds a second one to
	// each. The default of a new cluster.
	PlaceWithDirectory FilePlacement = "directory"
	// PlaceHashed puts a new file at PartitionForName(parent, name), as
	// Octopus hashes paths: the inodes of one directory's files spread
	// over the cluster, at the price of a cross-node transaction for
	// most creates and unlinks. A map from before FilePlacement existed
	// has this placement.
	PlaceHashed FilePlacement = "hash"
)

// Valid reports whether p is one of the named placements.
func (p FilePlacement) Valid() bool { return p == PlaceWithDirectory || p == PlaceHashed }

// Placement returns the map's file placement.
func (m *Map) Placement() FilePlacement {
	if m.FilePlacement == "" {
		return PlaceHashed
	}
	return m.FilePlacement
}

// NewInodePartition returns the partition for a new inode named name in
// directory parent; dir says whether the new inode is a directory.
func (m *Map) NewInodePartition(parent uint64, name string, dir bool) uint32 {
	if !dir && m.Placement() == PlaceWithDirectory {
		if p := PartitionOf(parent); p < m.NumPartitions() {
			return p
		}
	}
	return PartitionForName(parent, name, m.NumPartitions())
}

// OwnerOfName returns the node that gets a new inode named name in parent
// (dir: a directory).
func (m *Map) OwnerOfName(parent uint64, name string, dir bool) (NodeInfo, error) {
	if !m.Initialized() {
		return NodeInfo{}, ErrNotInitialized
	}
	return m.OwnerOfPartition(m.NewInodePartition(parent, name, dir))
}

// ChunkPartition returns the partition of chunk index chunk of inode ino.
func (m *Map) ChunkPartition(ino, chunk uint64) uint32 {
	return ChunkPartition(ino, chunk, m.NumPartitions())
}

// ChunkOwner returns the node holding chunk index chunk of inode ino.
func (m *Map) ChunkOwner(ino, chunk uint64) (NodeInfo, error) {
	if !m.Initialized() {
		return NodeInfo{}, ErrNotInitialized
	}
	return m.OwnerOfPartition(m.ChunkPartition(ino, chunk))
}

// LoadBound returns the bound rebalance keeps: with P partitions over N
// eligible nodes every node owns floor(P/N) or ceil(P/N) partitions.
func LoadBound(partitions, nodes int) (lo, hi int) {
	lo = partitions / nodes
	hi = lo
	if partitions%nodes != 0 {
		hi++
	}
	return lo, hi
}

// rebalance reassigns table over the eligible nodes so that each owns
// floor(P/N) or ceil(P/N) partitions, moving the fewest partitions that
// allows: every partition whose owner is not eligible moves, and each
// eligible node gives up only its excess over its target, where the ceil
// targets go to the nodes that already own the most. It returns the new
// table and the number of partitions moved. It is deterministic: every
// replica of the FSM computes the same table.
func rebalance(table []NodeID, eligible []NodeID) ([]NodeID, int, error) {
	if len(eligible) == 0 {
		return nil, 0, ErrNoEligibleNodes
	}
	isEligible := make(map[NodeID]bool, len(eligible))
	load := make(map[NodeID]int, len(eligible))
	for _, id := range eligible {
		isEligible[id] = true
	}
	for _, id := range table {
		if isEligible[id] {
			load[id]++
		}
	}
	// Targets: the (P mod N) most loaded nodes get ceil, the rest floor.
	order := slices.Clone(eligible)
	slices.SortFunc(order, func(a, b NodeID) int {
		if c := cmp.Compare(load[b], load[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	lo, _ := LoadBound(len(table), len(eligible))
	extra := len(table) % len(eligible)
	target := make(map[NodeID]int, len(eligible))
	for i, id := range order {
		target[id] = lo
		if i < extra {
			target[id]++
		}
	}
	// Pool the partitions that must move: orphans, then each overloaded
	// node's highest-numbered excess.
	out := slices.Clone(table)
	var pool []int
	excess := make(map[NodeID]int, len(eligible))
	for id, l := range load {
		if l > target[id] {
			excess[id] = l - target[id]
		}
	}
	for p := len(out) - 1; p >= 0; p-- {
		id := out[p]
		if !isEligible[id] {
			pool = append(pool, p)
		} else if excess[id] > 0 {
			excess[id]--
			pool = append(pool, p)
		}
	}
	slices.Sort(pool)
	// Hand them to the under-target nodes, in id order.
	receivers := slices.Clone(eligible)
	slices.Sort(receivers)
	next := 0
	for _, id := range receivers {
		for d := target[id] - load[id]; d > 0; d-- {
			out[pool[next]] = id
			next++
		}
	}
	if next != len(pool) {
		panic(fmt.Sprintf("cluster: rebalance bookkeeping: assigned %d of %d", next, len(pool)))
	}
	return out, len(pool), nil
}

// rebalancePinned is rebalance over the unpinned partitions only: pinned
// partitions keep their owner (which must be eligible), and the unpinned
// ones are balanced to floor(U/N) or ceil(U/N) per eligible node, U being
// their number, with the fewest moves. pinned is sorted. It returns the
// new table and the number of partitions moved.
func rebalancePinned(table []NodeID, pinned []uint32, eligible []NodeID) ([]NodeID, int, error) {
	if len(pinned) == 0 {
		return rebalance(table, eligible)
	}
	if len(eligible) == 0 {
		return nil, 0, ErrNoEligibleNodes
	}
	free := make([]int, 0, len(table)-len(pinned))
	sub := make([]NodeID, 0, len(table)-len(pinned))
	for p, id := range table {
		if _, ok := slices.BinarySearch(pinned, uint32(p)); ok {
			if !slices.Contains(eligible, id) {
				// applyCommand refuses to drain or remove the owner of
				// pinned partitions first; this is a second line.
				return nil, 0, &HoldsDataError{Node: id, Partitions: 1}
			}
			continue
		}
		free = append(free, p)
		sub = append(sub, id)
	}
	next, moved, err := rebalance(sub, eligible)
	if err != nil {
		return nil, 0, err
	}
	out := slices.Clone(table)
	for i, p := range free {
		out[p] = next[i]
	}
	return out, moved, nil
}
