// Package mdclient is the client half of the namespace service: for each
// namespace operation it picks the node that owns the partition the
// operation names (from the cluster map), encodes the request with
// metadata/wire, sends it through a Caller, decodes the answer, and
// handles the octofs statuses itself so that callers only ever see a
// result, a syscall.Errno, or a transport failure.
//
// # Routing
//
// A request goes to the owner of the partition of the inode it names
// (getattr, setattr, open, ...), of the directory (lookup, readdir), of
// the new inode (create, mkdir, symlink: cluster.PartitionForName(parent,
// name)) or of the source inode (unlink, rmdir, rename, link: the inode
// whose link count changes coordinates). When the caller does not know
// that inode, the request goes to the directory's owner, which either
// executes it or answers StatusRedirect with the inode; the request is
// sent again to that inode's owner.
//
// # Retries and at-most-once
//
// Every operation gets a sequence number from one counter per Client;
// mutating operations carry it in the header so that the server executes
// them at most once and answers a repeat with the first answer (also
// after the server restarted). A call that fails in transport (timeout,
// broken connection) is sent again with the same sequence until the
// operation's deadline (Config.OpTimeout). LowSeq tells servers which
// answers they may forget: every sequence below the lowest still in
// flight.
//
// StatusWrongOwner (the node no longer owns the partition) waits for a
// map at least as new as the node's epoch and retries at the new owner;
// StatusNotReady (partition still opening) retries after a short backoff.
//
// # Errors
//
// A server's errno is returned as a bare syscall.Errno (compare with ==
// or errors.Is). Otherwise the error wraps ErrTimeout (the operation's
// deadline passed; it may or may not have executed), ErrUnavailable (no
// map, or no owner answered), ErrProtocol (an answer did not decode) or
// the caller's context error.
//
// # Sessions and restarts
//
// Every reply carries the server process's incarnation. When it changes
// for a node, Config.OnRestart is called once, so the client library can
// re-register its opens there (OpenRequest.Reclaim); advisory locks held
// there are lost with the restart (documented in docs/metadata.md).
package mdclient
