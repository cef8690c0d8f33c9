// Package pmem owns a node's persistent-memory region: opening it (devdax,
// a file on a DAX file system, a plain file, or volatile memory), flushing
// and fencing stores, the versioned on-media layout, allocation, the redo
// log that makes multi-word updates atomic, recovery and fsck. It knows
// nothing about files; metadata and dataplane build on it. It imports
// nothing else of octofs.
//
// # Opening
//
// Open and Create map a path and say what they got in Region.Info: the
// Mode (devdax, fsdax with MAP_SYNC, plain file, volatile), the persistence
// Domain, and the Instruction that makes stores durable (CLWB, else
// CLFLUSHOPT, else CLFLUSH, each followed by SFENCE, chosen from CPUID at
// start-up; msync for plain files and where the CPU has none). Options.Require
// refuses, with an error that says what to do, a path weaker than asked
// for: RequirePmem never silently accepts a plain file. Format and Attach
// work on any Medium; NewMemMedium is volatile memory and Tracker the
// power-loss simulator. Region.Bytes is the one stable mapping, what the
// RDMA layer registers as a memory region.
//
// # Layout (format version 1, see layout.go)
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
//   - With no transaction in flight, the volatile allocator indexes equal the
//     bitmaps.
//
// # Crash consistency
//
// A single 8-byte aligned word is failure-atomic (Region.Store8). Anything
// larger goes through a Tx: its word updates are logged to a private log
// slot, made durable, committed by one 8-byte store of the commit sequence
// number, applied in place, and the slot is cleared — four fences, see
// log.go. Recovery on open replays committed slots in sequence order
// (replay is idempotent) and ignores uncommitted ones. Bulk bytes (a new
// block's data, a new record's payload) are written in place with
// Tx.WriteFresh, allowed only into space the same Tx allocated, and are
// flushed before the log, so they are durable before anything can reach
// them. The claim is tested by pmemtest: every fence of random workloads
// is a crash point, each crash image is recovered, fsck'd and compared with
// a model of the committed state.
//
// # Concurrency
//
// Region methods are safe for concurrent use. Begin hands each transaction
// its own log slot (waiting for one when all LogSlots are busy), and the
// allocators are shared under a lock, so many goroutines may allocate,
// free and commit at once. A Tx belongs to one goroutine. What pmem does
// not do is isolate: two transactions in flight must not write the same
// word (callers serialise per object, e.g. with an inode lock), a
// transaction that depends on another's result must begin after that one's
// Commit returned, and readers of words a transaction is applying can see
// some of its writes before others. Allocation bitmaps are the exception
// and are safe: they are updated with atomic bit operations that commute.
// Close must not race with transactions. A process holds an exclusive
// flock on the region file while it has it open, so two writers never
// share a region.
//
// # Errors
//
// Sentinel errors (ErrNoSpace, ErrVersion, ErrWrongCluster, ...) are
// wrapped with the details and, for what an operator sees, the next step.
// ErrNoSpace is the file system's ENOSPC.
package pmem
