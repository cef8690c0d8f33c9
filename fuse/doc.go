// Package fuse mounts an octofs cluster with go-fuse v2's node API. It is
// a thin adapter: every operation becomes one call of the client library
// (package client) with the calling process's credentials, and every error
// becomes an errno in one place (errno.go). No file system logic lives
// here: permissions are checked by the servers, consistency and caching
// rules are the client library's.
//
// # Permissions
//
// The mount uses default_permissions: the kernel checks every access with
// the attributes it caches (owner/group/other bits, search permission on
// each directory of a path, sticky directories, chown and utimes rules),
// and the cluster checks again with the caller's credentials. Without it,
// a name the kernel has cached is resolved without asking anyone, so a
// user without search permission on a directory would reach what another
// user looked up in it. Options.ServerPermissions drops the kernel's
// checks (and every cache) so that tests can exercise the cluster's own.
//
// The cluster clears setuid and setgid bits itself (HANDLE_KILLPRIV_V2):
// the kernel's fallback, a chmod sent as the writer, would fail a write by
// a user who does not own the file.
//
// # Interrupts
//
// The kernel interrupts a request whenever its caller gets any signal; the
// adapter ignores that (detach in errno.go) except for blocking lock waits,
// so open or mkdir never fail with EINTR. Every cluster call is bounded by
// the client's OpTimeout.
//
// # Credentials
//
// FUSE tells the file system the caller's uid, gid and pid, not its
// supplementary groups; the adapter reads them from /proc/<pid>/status
// (cached for a second per pid, uid and gid), so group permissions work for
// every local user of a mount that root made with allow_other. A mount by
// an unprivileged user serves that user only.
//
// # Inode numbers and handles
//
// The FUSE node id is the octofs inode number (go-fuse's ExternalNodeID),
// with the generation in the handle, so a node id the kernel holds names
// the same inode forever. Every open is a client.File; directory handles
// list by cookie, so telldir/seekdir work across calls and a directory that
// changes during a listing never repeats or skips an untouched entry.
//
// # Locks
//
// fcntl and flock locks are cluster-wide (the inode's owner keeps them).
// go-fuse's node API does not pass the lock owner of FLUSH, which the kernel
// sends at every close(2) so that the process's POSIX locks on the file are
// released; the adapter wraps the raw file system to do that itself.
//
// # Caches and timeouts
//
// The kernel caches entries and attributes for Options.EntryTimeout and
// AttrTimeout (default 1s) and negative lookups not at all, and file pages
// across opens only while the owner's answer to each open shows that the
// data did not change (node.opened): an open always sees what other
// mounts closed before it (close-to-open). The
// writeback cache is off, so every write reaches the client library at once
// and size and mtime are committed on close and fsync: with it, the kernel
// would keep dirty pages past close(2) and decide sizes and mtimes itself,
// and another mount's open after our close could miss our writes.
//
// # Deadlocks
//
// Nothing in the adapter holds a lock across a call into the client
// library, and the client library never calls back into the kernel, so a
// FUSE request can only wait on the cluster, and every cluster call has the
// client's timeout: a lost cluster gives ETIMEDOUT or EIO, never a hung
// mount.
//
// A process that serves a mount must not start a child whose working
// directory (exec.Cmd.Dir) is in that mount: the child changes directory
// between fork and exec, while Go's fork holds a P, so a garbage
// collection cannot stop the world and the FUSE server never answers.
//
// An inode addressed by number that the cluster no longer has (its last
// name went) is ESTALE to the kernel, which looks the path up again and
// retries once; an open of one is ENOENT if its name is gone too.
package fuse
