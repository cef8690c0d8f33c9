// Package metadata is the namespace service: inodes, directories, symlinks,
// xattrs, permissions, opens and advisory locks, served by the node that
// owns each partition, with collect-dispatch transactions for operations
// that span partitions. Its wire messages and log records are in
// metadata/wire, its client half in metadata/mdclient, an in-process
// cluster for tests in metadata/metatest. docs/metadata.md describes the
// design for operators and client writers; this comment states what the
// code keeps true.
//
// # State
//
// Per partition (partition.go), everything is in DRAM and rebuilt at start
// by replaying the partition's plog log (service ServiceID): inodes (the
// full InodeRecord), each directory's entries (a hash map by name and a
// slice in cookie order, inode.go), xattrs, the partition's counters (next
// local inode number, reserved transaction sequences), the intents and
// decisions it coordinates, the rename locks it holds, the answers it gave
// to conditional entry operations (by transaction), and the answers of
// recent client requests (node-wide, dedup.go). Sessions, opens and
// advisory locks are memory only (session.go).
//
// # Invariants
//
//   - The DRAM state of a partition equals the replay of its log: apply is
//     the only code that changes it, at replay and in commit, and records
//     state results (whole inodes, entries with their cookies), so replay
//     decides nothing.
//   - Records reach the log in the order they were applied (commit queues
//     them under the partition's lock); a group is all or nothing.
//   - Nothing leaves the node that depends on a record before the record
//     is durable: replies wait for every partition the request touched;
//     messages to other partitions and calls to the data service wait for
//     the intent, lock or decision they follow (commit.go).
//   - Inode numbers are partition | local number; local numbers only
//     grow (the counter is in the snapshot), so a number is never reused;
//     a generation (random) tells incarnations of a handle apart anyway.
//   - Readdir cookies of a directory only grow; an entry keeps its cookie
//     until it is removed or replaced (rename gives the target name a new
//     one). A listing resumed from a cookie returns every entry that was
//     present throughout exactly once.
//   - Every change of an entry naming inode I is made or authorised by
//     I's owner: create, link, unlink and rmdir are coordinated by it, and
//     rename locks I there. So an intent of I's owner is unambiguous after
//     a crash.
//   - A directory marked dead (rmdir in progress or done) takes no new
//     entry; a pending inode (creation not confirmed) is invisible to
//     getattr until committed (callers wait).
//   - atime moves only explicitly (setattr) or by relatime's rule applied
//     by the owner with its own clock (OpTouchAtime, readdir), never
//     beyond the owner's now and never with ctime: a client that asks
//     for updates can only make them happen as Linux would.
//   - A rename lock is released only by the transaction's apply, by its
//     abort, or when its coordinator answers that the transaction was
//     aborted (never decided and not in progress) — never by a timeout.
//
// # Protocols
//
// Single-partition operations are one commit. Across partitions:
//
//   - create/mkdir/mknod/symlink at the new inode's owner B: commit the
//     inode pending with an intent; EntryAdd at the directory's owner A
//     (one commit there: entry, directory, the answer under the txn id);
//     commit the inode (with what it inherits from A) or free it, the
//     intent's end and the client's answer.
//   - link at the inode's owner: nlink+1 with the intent; EntryAdd;
//     end (or nlink-1).
//   - unlink/rmdir at the victim's owner: intent (rmdir marks the
//     directory dead after checking it is empty); EntryRemove at A
//     (conditional on the entry naming the victim, recorded by txn id);
//     drop the link (free, orphan, or free the data first) and end; on
//     refusal undo the mark.
//   - rename at the source inode's owner (ops_rename.go): TxLock
//     (persistent locks, collect) at every partition involved, the
//     replaced inode's lock, checks in Linux's order (loop check under the
//     cluster-wide rename lock of partition 0), the DecisionRecord, TxApply
//     at each participant (apply and unlock in one commit; a participant
//     without the txn's locks has applied it), TxDone with the answer.
//
// # Crash and recovery
//
// A restarted node replays, then (recovery.go) runs every intent to its
// end (re-dispatching the idempotent entry operation: the participant's
// recorded answer makes a repeat give the first answer), re-dispatches
// every decision, finishes freeing inodes, and registers the client
// requests those serve as in flight, so a client's retry waits for the
// original outcome. Undecided renames of a dead coordinator are aborted
// when participants ask it (TxStatus: not decided and not active in this
// incarnation means aborted; sequences are reserved durably before use,
// so a new incarnation never reuses an old transaction's id). Peers fence
// older incarnations of a sender once they saw a newer one. The crash
// tests (crash_test.go) kill a node at random fences and messages of a
// random workload and check every operation's outcome against a model.
package metadata
