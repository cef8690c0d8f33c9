// Package pmem owns a node's persistent-memory region: opening it (devdax,
// a file on a DAX file system, a plain file, or volatile memory), flushing
// and fencing stores, the versioned on-media layout, allocation, the redo
// log that makes multi-word updates atomic, recovery and fsck. It knows
// nothing about files; metadata and dataplane build on it, through
// pmem/plog for their logs and pools. It imports nothing else of octofs.
//
// # Opening and preparing
//
// Open maps a path and says what it got in Region.Info: the Mode (devdax,
// fsdax with MAP_SYNC, plain file, volatile), the persistence Domain, and
// the Instruction that makes stores durable (CLWB, else CLFLUSHOPT, else
// CLFLUSH, each followed by SFENCE, chosen from CPUID at start-up; msync
// for plain files and, where the CPU has no flush instruction, for DAX file
// systems — device DAX is then refused, since it has no msync).
// Options.Require refuses, with an error that says what to do, a path
// weaker than asked for. Create makes a new region file with all its blocks
// allocated, under a temporary name until it is formatted; FormatFile
// (octofs format) prepares an existing file or device and refuses one that
// holds a region unless forced. Format and Attach work on any Medium;
// NewMemMedium is volatile memory and Tracker the power-loss simulator.
// Region.Bytes is the one stable mapping, what the RDMA layer registers.
//
// # Layout (format version 2, see layout.go and log.go)
//
// Two checksummed superblock copies, 512 root words for upper layers, the
// redo-log slots, a record bitmap, a block bitmap, fixed-size records, data
// blocks. A record has a header (kind, extent count, generation), a few
// extent slots naming the block runs it owns, and a caller-owned payload.
//
// # Invariants (checked by Check / fsck)
//
//   - Both superblock copies decode and are equal; the geometry stored in
//     them equals the one recomputed from its sizes and fits the medium.
//   - After recovery no log slot is committed.
//   - Record bitmap bit i is set iff record i+1's header is in use; a free
//     record's extent slots are zero; an in-use header has the record magic,
//     a non-zero kind, at most ExtentSlots extents, each non-empty and inside
//     the data area, and zero unused slots.
//   - No two extents overlap; block bitmap bit b is set iff some in-use
//     record owns block b (no leaks, no block handed out twice); bitmap bits
//     past the last record or block are zero.
//   - With no transaction in flight, the volatile allocator indexes
//     (pmem/alloc summary trees) equal the bitmaps.
//
// Repair keeps one rule above these: it never frees a block or a record
// that any record may still own. A record with a damaged header is
// quarantined (KindQuarantined, keeping its payload and plausible
// extents) instead of freed; leaked blocks are freed only while no record
// is damaged, quarantined or overlapping. One repair pass converges.
//
// # Crash consistency
//
// A single 8-byte aligned word is failure-atomic (Region.Store8). Anything
// larger goes through a Tx: its updates — word sets, allocation bit
// operations, block-range entries (an extent of any length is one entry)
// and byte writes (a 128 KiB slot holds 64 KiB of them) — are logged to a
// private log slot, made durable, committed by one 8-byte store of the
// commit sequence number, applied in place, and the slot is cleared: four
// fences, see log.go. Recovery on open replays committed slots in sequence
// order (replay is idempotent) and ignores uncommitted ones; its own writes
// are durable before it returns. Bulk bytes (a new block's data, a new
// record's payload) are written in place with Tx.WriteFresh, allowed only
// into space the same Tx allocated, and are flushed before the log. Format
// invalidates the old superblocks with one atomic store each first and
// writes the new ones, magic last, at the end.
//
// The claim is tested by pmemtest on a Tracker that sits under the
// production flush code (the hardware interface of persist.go): every
// store, flush, fence and msync of random single- and multi-goroutine
// workloads is a crash point, each crash image is recovered (on a tracker,
// crashed again during recovery), fsck'd and compared with a model; `make
// mutate` removes every flush and fence of the production path in turn and
// requires the harness to catch each.
//
// # Concurrency
//
// Region methods are safe for concurrent use. Begin hands each transaction
// its own log slot (waiting for one when all LogSlots are busy), so
// transactions commit in parallel: nothing on the commit path is shared
// but an atomic sequence number and, on plain files, the msync system
// call, which is serialised so that a write-back error reaches every
// commit in flight (the region fails, and every commit that has not yet
// returned reports the error). The allocators are shared under a mutex
// held for one summary-tree search or update (microseconds). A Tx belongs
// to one goroutine. What pmem does not do is isolate: two transactions in
// flight must not write the same word (callers serialise per object, e.g.
// with an inode lock), a transaction that depends on another's result must
// begin after that one's Commit returned, and readers of words a
// transaction is applying can see some of its writes before others.
// Allocation bitmaps are the exception and are safe: transactions set and
// clear disjoint bits, which commutes. Close must not race with
// transactions. A process holds an exclusive flock on the region file
// while it has it open, so two writers never share a region.
//
// # Errors
//
// Sentinel errors (ErrNoSpace, ErrVersion, ErrWrongCluster, ...) are
// wrapped with the details and, for what an operator sees, the next step.
// ErrNoSpace is the file system's ENOSPC. A fault on the mapping (a
// poisoned page, a region file truncated underneath) is an ErrMedia error
// for the operation, not a crash: methods run with
// runtime/debug.SetPanicOnFault, and Guarded does the same for callers
// that touch Bytes, Payload or ExtentBytes directly.
package pmem
