package dataplane

import (
	"context"
	"fmt"
	"slices"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane/wire"
)

// usage returns the bytes of the blocks that file ino's chunks hold on
// this node: every run of every chunk, written or unwritten (a
// fallocate's blocks count, as on a local file system; blocks allocated
// ahead of a writer count until its last close frees them, as XFS's
// speculative preallocation does).
func (s *Service) usage(ino uint64) uint64 {
	var blocks uint64
	for _, p := range s.partitions() {
		p.mu.Lock()
		for c := range p.byIno[ino] {
			if m := p.chunks[chunkKey{ino, c}]; m != nil {
				for _, r := range m.runs {
					blocks += uint64(r.count)
				}
			}
		}
		p.mu.Unlock()
	}
	return blocks * s.bs
}

// nextData returns the lowest chunk at or after from of file ino that
// holds blocks (written or not) in a partition of this node, or
// wire.NoChunk.
func (s *Service) nextData(ino, from uint64) uint64 {
	next := wire.NoChunk
	for _, p := range s.partitions() {
		p.mu.Lock()
		for c := range p.byIno[ino] {
			if c >= from && c < next {
				next = c
			}
		}
		p.mu.Unlock()
	}
	return next
}

// maxUsageChunks is how many chunks Usage looks at one by one to find the
// nodes that may hold a file's data; a larger file is asked of every node.
const maxUsageChunks = 1024

// Usage returns the bytes of the blocks that regular file ino holds in
// the cluster, for its st_blocks. The namespace calls it at the inode's
// owner after the file's data changed (a commit, a truncate). It asks the
// owners of the chunks below size (every node holding data if everywhere:
// the file may hold blocks past its size, or it is large), each for all
// of the file's chunks it holds, in parallel; this node answers for
// itself without a request. Any node that does not answer makes it fail:
// the caller then keeps its estimate.
func (s *Service) Usage(ctx context.Context, ino, size uint64, everywhere bool) (uint64, error) {
	m := s.cfg.Map.Current()
	if !m.Initialized() {
		return 0, fmt.Errorf("%w: no cluster map yet", ErrNotReady)
	}
	chunks := (size + wire.ChunkSize - 1) / wire.ChunkSize
	var nodes []cluster.NodeInfo
	if everywhere || chunks > maxUsageChunks {
		for _, n := range m.Nodes {
			if holdsData(n.State) {
				nodes = append(nodes, n)
			}
		}
	} else {
		for c := range chunks {
			n, err := m.ChunkOwner(ino, c)
			if err != nil {
				return 0, err
			}
			if !slices.ContainsFunc(nodes, func(x cluster.NodeInfo) bool { return x.ID == n.ID }) {
				nodes = append(nodes, n)
			}
		}
	}
	req := wire.Request{Op: wire.OpUsage, Header: wire.Header{Epoch: m.Epoch, ClientID: s.cfg.ClientID, Incarnation: s.cfg.Incarnation},
		Ino: ino}
	b := req.Encode()
	used := make([]uint64, len(nodes))
	err := onNodes(nodes, func(i int, n cluster.NodeInfo) error {
		if n.ID == s.cfg.Self {
			used[i] = s.usage(ino)
			return nil
		}
		return s.callPeer(ctx, n, wire.OpUsage, b, func(r wire.Reply) { used[i] = r.Capacity.Used })
	})
	if err != nil {
		return 0, err
	}
	var total uint64
	for _, u := range used {
		total += u
	}
	return total, nil
}
