// Package client is octofs's one client library: the FUSE mount, octoctl
// and programs reach a cluster only through it, so that a fix here fixes
// all three.
//
// A Client (New) follows the cluster map over the admin API, opens an RDMA
// device, and keeps one RPC connection and one data connection per node it
// talks to. Namespace operations go to the owner of the inode or directory
// concerned (metadata/mdclient, over rdma/rpc); file bytes move with
// one-sided RDMA through the data engine (dataplane), which keeps extent
// maps under leases.
//
// Two APIs sit on it:
//
//   - The low-level inode API, for the FUSE adapter: Lookup, GetAttr,
//     SetAttr, Create, Mknod, Mkdir, Symlink, Link, Unlink, Rmdir, Rename,
//     Readlink, ReadDir, StatFS, xattrs, Access, and Open returning a *File
//     (ReadAt, WriteAt, Flush, Sync, Truncate, Allocate, advisory locks,
//     Close). Every call takes the caller's Cred and a context, and fails
//     with a syscall.Errno. UnlinkKnown, RmdirKnown and RenameKnown take
//     the inode the caller believes the name names (the FUSE kernel has
//     looked it up) and go to its owner first, saving the directory
//     owner's redirect; a wrong belief changes only the cost.
//   - The native API, for programs (as DAOS's libdfs): FS, bound to a Cred,
//     with os-like path calls (OpenFile, Stat, ReadDir, MkdirAll,
//     RemoveAll, Rename, ...) returning *FSFile and fs.FileInfo, and IOFS
//     for code written against io/fs.
//
// Invariants:
//
//   - Every error a file operation returns is a syscall.Errno (the native
//     API wraps it in *fs.PathError). An errno the server answered passes
//     through; the operation's deadline (Config.OpTimeout) is ETIMEDOUT; a
//     cancelled caller EINTR; anything else (a broken connection, a closed
//     client, a malformed answer) EIO, logged with its cause. errno in
//     errors.go is the one place that decides; no call hangs past
//     OpTimeout, except a blocking lock wait, which ends with its context.
//   - Permissions are checked by the servers with the Cred each request
//     carries; the client never decides access from cached attributes
//     (when the optional caches are on, a hit skips the server: they are
//     for single-identity clients, see docs/client.md).
//   - Consistency is close-to-open across clients and POSIX within one:
//     every File of an inode in this client shares one openInode, so reads
//     see this client's writes and GetAttr includes them before any flush;
//     Flush (each close(2)), Sync and Close persist the written ranges at
//     the data owners, then commit size and mtime at the inode's owner, in
//     that order, so a committed size never covers bytes that are not
//     durable.
//   - Opening an inode that this client had no File of drops the data
//     engine's cached extents of it, so the open sees what other clients
//     closed.
//   - A read asks the inode's owner to update atime (OpTouchAtime) only
//     when relatime's rule is due on the owner's times this client last
//     learnt (at open, commit, getattr, setattr, or the last update):
//     once per commit of the file or per day, never per read, never for
//     an O_NOATIME File. The owner applies the rule again. A listing's
//     first page, which comes with OpenDir, is checked the same way when
//     it is read; later pages' readdir requests leave it to the owner.
//   - The library caches nothing across calls by default but the cluster
//     map and the data engine's extent leases (Config.Cache turns on entry
//     and attribute caches with a TTL); it never caches file bytes.
//
// Sessions: the client's id and incarnation identify it to every node; it
// renews a session lease with each node it uses, and a node that stops
// hearing from it releases its opens and locks. After a node restarts, the
// client registers its open files there again.
package client
