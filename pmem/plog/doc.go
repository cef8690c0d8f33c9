// Package plog keeps durable append-only logs in a pmem region, one per
// LogID (a service number and a partition number). It knows nothing
// about files: the namespace and chunk services give the records their
// meaning, keep their state in DRAM, rebuild it with Replay at start-up
// and shrink a log with Rewrite when it has grown well past the state it
// describes. See docs/plog.md for the full description.
//
// # What it owns
//
// pmem records of the kinds KindHead, KindSegment and KindPool, and the
// extents those records own. A log is a head record and a chain of
// segments, each a record owning one extent that holds framed records;
// a log's pools are records owning one extent of data blocks its user
// sub-allocates.
//
// # On-media format (version 1, see format.go)
//
// Head payload: id, epoch, first and last segment, size after the last
// rewrite, state. Segment payload: id, owner head, epoch, position in
// the chain, next segment, end (published bytes). Pool payload: id,
// owner head. Records in a segment: length, CRC-32C seeded with the
// segment's identity, bytes, zero padding to 8.
//
// # Invariants (checked by Check)
//
//   - Every live head's chain runs from first to last; segment i of it
//     names the head as owner, the head's id and epoch, and position i.
//   - A segment's end is within its extent and every record below it
//     decodes and verifies. Nothing past end is ever read.
//   - Each segment and pool belongs to exactly one head; no segment is
//     reachable from two logs; at most one live head per LogID.
//   - Segments of a head that its chain does not reach exist only between
//     a crash in Rewrite or Delete and the next Open, which frees them.
//
// # Crash consistency
//
// Append writes the group's frames past the published end of the last
// segment, persists them (flush and fence), and publishes the new end
// with one failure-atomic 8-byte store (Region.Store8): two fences per
// commit. If the group does not fit, a transaction allocates a new
// segment, writes the frames into it (WriteFresh, flushed before the
// commit point) and links it. A crash before the publish leaves the old
// end and replay stops there: each group is all or nothing, and because
// the tail only moves forward no group survives after one that is lost.
// Rewrite writes the new chain into segments no head reaches yet (a new
// epoch), then one transaction points the head at it and frees the old
// segments: old log or new, never a mix. Delete marks the head deleting
// with one store and then frees; Open finishes it.
//
// # Concurrency
//
// Store and Log methods are safe for concurrent use. Appends to one log
// are group committed: an appender that finds a commit running queues
// its group; when the commit ends, the first queued appender commits
// everything queued so far (up to a segment's worth) with one
// flush/fence/publish and wakes the others. Logs of different partitions
// append in parallel (pmem transactions use separate log slots).
//
// Each log has a read-write lock: batch commits, Replay and pool changes
// take it shared, Rewrite and Delete exclusively. So appends wait while a
// rewrite runs, and the snapshot sees exactly the records appended
// before it. The snapshot must not wait for a goroutine that is blocked
// in Append on the same log. A service that applies records to its DRAM
// state after Append returns can hold an RWMutex shared across "Append,
// then apply" and take it exclusively around Rewrite: then every
// appended record is applied before the snapshot runs, and no appender
// holds the lock while Rewrite waits for it.
//
// # Errors
//
// ErrNoSpace (wrapping pmem.ErrNoSpace, ENOSPC for users), ErrCorrupt
// (saying which log, segment and byte), ErrTooLarge, ErrDeleted.
package plog
