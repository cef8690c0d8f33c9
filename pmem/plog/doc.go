// Package plog keeps durable append-only logs in a pmem region, one per
// LogID (a service number and a partition number). It knows nothing
// about files: the namespace and chunk services give the records their
// meaning, keep their state in DRAM, rebuild it with Replay at start-up
// and shrink a log with Rewrite when it has grown well past the state it
// describes. docs/plog.md describes it for users and operators.
//
// # What it owns
//
// pmem records of the kinds KindHead, KindSegment and KindPool, and the
// extents those records own. A log is a head record and a chain of
// segments, each a record owning one extent that holds framed records;
// a log's pools are records owning one extent of data blocks its user
// sub-allocates. Open finds the logs by scanning the region's records for
// these kinds: no root word, no directory to keep crash-safe.
//
// # On-media format (version 1, see format.go)
//
// Every payload starts with "PLOG" | version | type. Head: log id, epoch,
// first and last segment, size after the last rewrite, state (live or
// being deleted). Segment: log id, owner head, epoch, position in the
// chain, next segment, end (the published tail). Pool: log id, owner
// head. Records in a segment: length, CRC-32C seeded with the segment's
// identity, bytes, zero padding to 8.
//
// # Invariants (checked by Check)
//
//   - Every live head's chain runs from first to last; segment i of it
//     names the head as owner, the head's log id and epoch, and position i.
//   - A segment's end is within its extent and every record below it
//     decodes and verifies. Nothing past end is ever read.
//   - Each segment and pool names a head of its own log; no segment is in
//     two chains; at most one live head per LogID.
//   - Epochs only grow and are never reused, so a segment outside its
//     head's chain with an epoch other than the head's is a leftover of an
//     interrupted Rewrite; such segments, and the records of a head being
//     deleted, exist only between a crash and the next Open, which frees
//     them. Open never frees a segment a live chain reaches, and frees
//     nothing of a log whose chain is damaged.
//
// # Crash consistency
//
// Append writes the group's frames past the published end of the last
// segment, persists them (flush and fence), then publishes the new end
// with one failure-atomic 8-byte store (Region.Store8): two fences per
// commit. If the group does not fit, one transaction allocates a new
// segment, writes the frames into it (WriteFresh, flushed before the
// commit point) and links it. A crash before the publish leaves the old
// end and replay stops there: each group is all or nothing, and because
// the end only moves forward no group survives after one that is lost.
// Rewrite writes the new chain into segments of a new epoch that no head
// reaches, then one transaction points the head at it and frees the old
// segments (as many as fit one pmem log slot; the rest right after, or by
// the next Open): old log or new, never a mix. Delete marks the head with
// one store and then frees in bounded transactions; Open finishes it.
//
// # Concurrency
//
// Store and Log methods are safe for concurrent use. Appends to one log
// are group committed: an appender that finds a commit running queues its
// group; when the commit ends, the first queued appender becomes the
// leader and commits everything queued (up to a segment's worth) with one
// flush/fence/publish, then answers the others. Logs of different
// partitions append in parallel (pmem transactions use separate slots).
//
// Each log has a read-write lock: batch commits, Replay and pool changes
// take it shared, Rewrite and Delete exclusively. So appends wait while a
// rewrite runs, and the snapshot sees exactly the records appended before
// it. The snapshot must not wait for a goroutine blocked in Append on the
// same log, and Replay's callback must not call Rewrite or Delete. A
// service that applies records to its DRAM state after Append returns
// holds an RWMutex shared across "Append, then apply" and exclusively
// around Rewrite: then every appended record is applied before the
// snapshot runs, and no appender holds the lock while Rewrite waits.
//
// # Errors
//
// ErrNoSpace (wrapping pmem.ErrNoSpace as well: ENOSPC for users),
// ErrCorrupt (saying which log, segment and byte), ErrTooLarge,
// ErrDeleted, ErrBadID, ErrNotFound. Any other error from Append means
// the medium failed: the group may or may not have survived, and the
// region must be reopened.
package plog
