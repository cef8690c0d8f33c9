package metadata

import (
	"context"
	"syscall"
	"time"

	"github.com/octofs/octofs/metadata/wire"
)

// Space. A partition applies a mutation to DRAM before its records reach
// the log (commit.go), so an append that finds the region full would
// leave DRAM ahead of the log: the partition would have to stop. So no
// append may run out of room. Operations that add lasting state to the
// namespace (create, mkdir, symlink, mknod, link, a new xattr, and the
// directory entry a peer adds for them) are refused with ENOSPC while
// the region has less than Config.SpaceReserve plus twice the largest
// partition's live state free (a rewrite writes the live state before it
// frees the old log), before they change anything. What they leave free
// is for every other record: removals, renames and attribute changes go
// on down to a quarter of the reserve plus one live state, and the steps
// of transactions under way are never refused, so that a full file
// system can always be emptied. File data leaves more than that to the
// logs (dataplane's LogReserve is twice the default reserve here).
//
// Logs hold history as well as state. While the region is short of
// space, partitions whose log is mostly history are rewritten even
// below Config.RewriteMinBytes, so that churn (files created and removed
// again) does not fill the region with dead records.

// minSpaceReserve is the least Config.SpaceReserve.
const minSpaceReserve = 128 << 10

// pressureRewriteMinBytes is the least log size rewritten under space
// pressure.
const pressureRewriteMinBytes = 64 << 10

// pressureRewriteRatio is the RewriteRatio under space pressure.
const pressureRewriteRatio = 2

// recordReserve is how many of the region's records growth leaves free
// (each log segment and data pool takes one): a sixty-fourth, at least 4.
func recordReserve(records uint64) uint64 { return max(4, records/64) }

// spaceUse says what an operation does to the namespace's size.
type spaceUse int

const (
	// spaceGrow: it adds lasting state (a file, an entry, an xattr).
	spaceGrow spaceUse = iota
	// spaceChange: any other client mutation (a removal, a rename, an
	// attribute change); its records still take log space until a
	// rewrite, so below a quarter of the reserve it is refused too.
	spaceChange
)

// partitionToGrow is the partition an operation that adds to the
// namespace works in, if the region has room for it (else ENOSPC).
func (s *Service) partitionToGrow(ctx context.Context, id uint32) (*partition, wire.Status) {
	p, st := s.partition(ctx, id)
	if st == wire.StatusOK {
		st = s.roomToGrow()
	}
	return p, st
}

// roomToGrow is roomFor(spaceGrow).
func (s *Service) roomToGrow() wire.Status { return s.roomFor(spaceGrow) }

// roomToChange is roomFor(spaceChange); when that finds no room, it
// rewrites the logs that are mostly history before it answers ENOSPC,
// so that removals on a full file system make progress. An inline
// attempt gives up instead (StatusNotReady): a rewrite takes long.
func (s *Service) roomToChange(ctx context.Context) wire.Status {
	if st := s.roomFor(spaceChange); st == wire.StatusOK {
		return st
	}
	if mustNotWait(ctx) {
		return wire.StatusNotReady
	}
	s.reclaimMu.Lock()
	s.reclaim()
	s.reclaimMu.Unlock()
	return s.roomFor(spaceChange)
}

// roomFor answers ENOSPC when an operation would eat into the part of
// the reserve that is not its own, and starts reclaiming log space when
// the region runs short. Protocol steps of operations under way never
// ask: they must finish.
func (s *Service) roomFor(use spaceUse) wire.Status {
	st := s.cfg.Store.Region().Stats()
	free := (st.Blocks - st.BlocksUsed) * uint64(st.BlockSize)
	records, keep := st.Records-st.RecordsUsed, recordReserve(st.Records)
	// A rewrite needs room for the partition's live state before it
	// frees the old log: growth leaves twice the largest, changes once.
	live := uint64(max(s.maxLive.Load(), 0))
	reserve := s.cfg.SpaceReserve + 2*live
	if free >= 4*reserve && records >= 4*keep {
		return wire.StatusOK
	}
	s.reclaimLogs()
	if use == spaceChange {
		reserve, keep = s.cfg.SpaceReserve/4+live, max(2, keep/2)
	}
	if free < reserve || records < keep {
		return status(syscall.ENOSPC)
	}
	return wire.StatusOK
}

// isChangeOp reports whether op is a client mutation that
// roomFor(spaceChange) guards (growth is checked where it happens).
func isChangeOp(op wire.Op) bool {
	switch op {
	case wire.OpUnlink, wire.OpRmdir, wire.OpRename, wire.OpSetAttr, wire.OpRemoveXattr:
		return true
	}
	return false
}

// reclaimLogs rewrites, in the background, the partition logs that are
// mostly history; at most once a second.
func (s *Service) reclaimLogs() {
	now := s.now().UnixNano()
	last := s.lastReclaim.Load()
	if now-last < int64(time.Second) || !s.lastReclaim.CompareAndSwap(last, now) {
		return
	}
	s.goBackground(func(context.Context) {
		if s.reclaimMu.TryLock() {
			s.reclaim()
			s.reclaimMu.Unlock()
		}
	})
}

// reclaim rewrites the partition logs that are mostly history, one after
// the other, and learns the largest live state anew. The caller holds
// s.reclaimMu.
func (s *Service) reclaim() {
	largest := int64(0)
	for _, p := range s.loaded() {
		p.mu.Lock()
		largest = max(largest, p.live)
		start := p.startRewrite(pressureRewriteMinBytes, pressureRewriteRatio)
		p.mu.Unlock()
		if !start {
			continue
		}
		if err := p.rewrite(); err != nil {
			s.log.Warn("partition log rewrite under space pressure failed", "partition", p.id, "err", err)
		}
	}
	s.maxLive.Store(largest)
}

// noteLive raises the largest live state known (roomFor) to a
// partition's; reclaimLogs lowers it again.
func (s *Service) noteLive(live int64) {
	for {
		old := s.maxLive.Load()
		if live <= old || s.maxLive.CompareAndSwap(old, live) {
			return
		}
	}
}
