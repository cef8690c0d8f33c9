package dataplane

import "github.com/octofs/octofs/cluster"

// SetMutations removes durability or safety steps from s, for the tests
// that prove the other tests would notice.
func SetMutations(s *Service, m Mutations) {
	s.mut = m
}

// BreakPartition makes s treat partition pid as damaged by err, as replay
// does with a log it cannot read.
func BreakPartition(s *Service, pid uint32, err error) {
	for _, p := range s.partitions() {
		if p.id == pid {
			p.mu.Lock()
			p.broken = err
			p.mu.Unlock()
		}
	}
}

// PendingTrims returns the trims s keeps for node, by inode.
func PendingTrims(s *Service, node string) map[uint64]uint64 {
	s.deferred.mu.Lock()
	defer s.deferred.mu.Unlock()
	out := make(map[uint64]uint64)
	for ino, size := range s.deferred.pending[cluster.NodeID(node)] {
		out[ino] = size
	}
	return out
}
