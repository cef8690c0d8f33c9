package fuse

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/cluster"
)

// Options shape a mount. Zero fields take the defaults below.
type Options struct {
	// EntryTimeout and AttrTimeout are how long the kernel may trust a
	// name lookup and an inode's attributes (default 1s). Longer is
	// faster for metadata-heavy work and slower to see other mounts'
	// changes; 0 is "always ask" (use NoCache).
	EntryTimeout time.Duration
	AttrTimeout  time.Duration
	// NegativeTimeout is how long a failed lookup may be remembered
	// (default 0: a file another mount creates is seen at once).
	NegativeTimeout time.Duration
	// NoCache asks the cluster for every lookup and getattr.
	NoCache bool
	// ServerPermissions leaves every permission check to the cluster
	// (no default_permissions). It implies NoCache: a name the kernel
	// has cached is resolved without asking anyone, so a cached entry
	// would skip the cluster's search-permission check. It is slow, and
	// it is for testing the cluster's checks; see "Permissions" in the
	// package doc.
	ServerPermissions bool
	// NoACL turns POSIX ACLs off: the kernel neither enforces nor
	// caches them and setfacl fails with EOPNOTSUPP. By default the
	// kernel enforces them (FUSE_POSIX_ACL, which needs
	// default_permissions: ServerPermissions mounts pass the ACL xattrs
	// through and leave the checks to the cluster, which applies ACLs
	// either way).
	NoACL bool
	// MaxWrite is the largest write (and read) the kernel sends (default
	// and most 1 MiB). MaxReadAhead is the kernel's read-ahead (default
	// 4 MiB: four MaxWrite READs in flight for a sequential reader); the
	// kernel takes more than its 128 KiB default only from sysfs, which
	// Mount writes when it runs as root (see SetReadAhead).
	MaxWrite     int
	MaxReadAhead int
	// WriteBehind is how many bytes of small sequential writes to a file
	// are collected before they go to the cluster as one write (default
	// 1 MiB; negative: none). They reach other mounts at close or fsync
	// either way; see "Write-behind" in docs/client.md.
	WriteBehind int
	// MaxBackground is how many asynchronous requests (read-ahead,
	// direct I/O) the kernel keeps in flight (default 64).
	MaxBackground int
	// AllowOther lets every local user use the mount (default: when
	// mounting as root). Permissions are checked by the cluster with each
	// caller's credentials either way.
	AllowOther *bool
	// FSName is the source shown in /proc/mounts (default "octofs").
	FSName string
	// ReadOnly mounts read-only: the kernel refuses every change with
	// EROFS before it reaches the mount, and reads leave atime alone
	// (it implies NoAtime).
	ReadOnly bool
	// NoAtime makes reads and listings leave atime alone (the noatime
	// mount option; the default is relatime).
	NoAtime bool
	// NoExec refuses to execute files of the mount (the noexec mount
	// option).
	NoExec bool
	// Debug logs every FUSE request.
	Debug bool
	// Logger receives the adapter's warnings (default: discard).
	Logger *slog.Logger
	// CredTTL is how long a caller's supplementary groups are cached
	// (default 1s).
	CredTTL time.Duration
}

// Defaults.
const (
	DefaultTimeout       = time.Second
	DefaultMaxWrite      = 1 << 20
	DefaultMaxReadAhead  = 4 << 20
	DefaultMaxBackground = 64
)

// readBuffersKept is how many registered read buffers (MaxWrite each) a
// mount keeps between bursts of reads.
const readBuffersKept = 16

// extraCapabilities are the FUSE capabilities the adapter asks for beyond
// go-fuse's defaults (each only if the kernel offers it):
//
//   - ATOMIC_O_TRUNC: open(O_TRUNC) is one OPEN with the flag, which the
//     cluster carries out with the open, instead of an OPEN and a SETATTR.
//   - HANDLE_KILLPRIV_V2: the cluster clears setuid and setgid on write,
//     truncate and chown (FATTR_KILL_SUIDGID, the commit of a write).
//     Without it the kernel sends a chmod as the writer to clear them,
//     which the cluster refuses to a writer who does not own the file,
//     failing the write with EPERM.
const extraCapabilities = fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV_V2

func (o Options) withDefaults() Options {
	if o.ServerPermissions {
		o.NoCache = true
	}
	if o.ReadOnly {
		o.NoAtime = true
	}
	if o.EntryTimeout == 0 && !o.NoCache {
		o.EntryTimeout = DefaultTimeout
	}
	if o.AttrTimeout == 0 && !o.NoCache {
		o.AttrTimeout = DefaultTimeout
	}
	if o.NoCache {
		o.EntryTimeout, o.AttrTimeout, o.NegativeTimeout = 0, 0, 0
	}
	if o.MaxWrite <= 0 || o.MaxWrite > DefaultMaxWrite {
		o.MaxWrite = DefaultMaxWrite
	}
	if o.MaxReadAhead <= 0 {
		o.MaxReadAhead = DefaultMaxReadAhead
	}
	if o.WriteBehind == 0 {
		o.WriteBehind = DefaultMaxWrite
	}
	if o.MaxBackground <= 0 {
		o.MaxBackground = DefaultMaxBackground
	}
	if o.AllowOther == nil {
		root := os.Geteuid() == 0
		o.AllowOther = &root
	}
	if o.FSName == "" {
		o.FSName = "octofs"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CredTTL == 0 {
		o.CredTTL = time.Second
	}
	return o
}

// FS is a mounted octofs: the client library and the adapter's state.
type FS struct {
	c     *client.Client
	o     Options
	log   *slog.Logger
	creds *credCache
	acls  *aclCache
	reads *readBuffers

	// handles tracks the open files of each inode that took POSIX locks,
	// so that FLUSH can release a lock owner's locks (see rawFS).
	lockMu  sync.Mutex
	lockers map[uint64]map[*handle]struct{}

	// statfs is the last answer to statfs, kept for the attribute
	// timeout; statfsMu also makes concurrent callers share one request.
	statfsMu sync.Mutex
	statfs   client.StatFS
	statfsAt time.Time
}

// aclTTL is how long the mount keeps the cluster's answers about ACLs:
// the attribute timeout, none with NoCache or ServerPermissions (whose
// kernel does not check ACLs).
func aclTTL(o Options) time.Duration {
	if o.NoCache || o.ServerPermissions {
		return 0
	}
	return o.AttrTimeout
}

// Server is a live mount.
type Server struct {
	*fuse.Server
	FS  *FS
	dir string
}

// Mount mounts the cluster c reaches at dir and serves it until Unmount
// (or until the mount is unmounted from outside, e.g. fusermount3 -u).
// The caller keeps c open for the mount's life and closes it afterwards.
func Mount(dir string, c *client.Client, o Options) (*Server, error) {
	o = o.withDefaults()
	// The kernel asks for a directory's attributes after every creation
	// in it; the creation's reply has them, as fresh as the kernel's
	// attribute cache would keep them (none with NoCache).
	c.KeepDirsAfterCreate(o.AttrTimeout)
	c.SetWriteBehind(o.WriteBehind)
	c.SetNoAtime(o.NoAtime)
	fsys := &FS{c: c, o: o, log: o.Logger, creds: newCredCache("/proc", o.CredTTL, time.Now),
		acls:    newACLCache(aclTTL(o), time.Now),
		reads:   newReadBuffers(clientBuffers(c), o.MaxWrite, readBuffersKept),
		lockers: make(map[uint64]map[*handle]struct{})}
	root := &node{fsys: fsys}
	entry, attr, neg := o.EntryTimeout, o.AttrTimeout, o.NegativeTimeout
	fo := &fs.Options{
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NegativeTimeout: &neg,
		NullPermissions: true,
		ExternalNodeID:  true,
		RootStableAttr:  &fs.StableAttr{Ino: cluster.RootInode, Gen: 0},
		MountOptions: fuse.MountOptions{
			AllowOther:   *o.AllowOther,
			FsName:       o.FSName,
			Name:         "octofs",
			MaxWrite:     o.MaxWrite,
			MaxReadAhead: o.MaxReadAhead,
			EnableLocks:  true,
			DirectMount:  os.Geteuid() == 0,
			Debug:        o.Debug,
			// Request traces with microseconds, to read latencies off.
			Logger:            log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds),
			MaxBackground:     o.MaxBackground,
			ExtraCapabilities: extraCapabilities,
		},
	}
	if !o.NoACL && !o.ServerPermissions {
		// The kernel enforces and caches ACLs, and leaves the umask
		// to the file system (DONT_MASK): a directory's default ACL
		// replaces it (rawFS.Create passes it on).
		fo.MountOptions.EnableAcl = true
		fo.MountOptions.ExtraCapabilities |= fuse.CAP_DONT_MASK
	}
	if !o.ServerPermissions {
		fo.MountOptions.Options = append(fo.MountOptions.Options, "default_permissions")
	}
	if o.NoExec {
		fo.MountOptions.Options = append(fo.MountOptions.Options, "noexec")
	}
	// fusermount3 takes "ro" and "noatime" as options; a direct mount(2)
	// takes flags only (go-fuse passes other options as the data). The
	// kernel leaves atime to FUSE file systems, so MS_NOATIME only shows
	// in /proc/mounts what the client does (Client.SetNoAtime).
	flags := uintptr(syscall.MS_NOSUID | syscall.MS_NODEV)
	for _, f := range []struct {
		on   bool
		opt  string
		flag uintptr
	}{{o.ReadOnly, "ro", syscall.MS_RDONLY}, {o.NoAtime, "noatime", syscall.MS_NOATIME}} {
		switch {
		case !f.on:
		case fo.MountOptions.DirectMount:
			flags |= f.flag
			fo.MountOptions.DirectMountFlags = flags
		default:
			fo.MountOptions.Options = append(fo.MountOptions.Options, f.opt)
		}
	}
	raw := &rawFS{RawFileSystem: fs.NewNodeFS(root, fo), fsys: fsys, askedACL: fo.MountOptions.EnableAcl}
	srv, err := fuse.NewServer(raw, dir, &fo.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("fuse: mount %s: %w", dir, err)
	}
	raw.srv = srv
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		srv.Unmount()
		return nil, fmt.Errorf("fuse: mount %s: %w", dir, err)
	}
	if err := SetReadAhead(dir, o.MaxReadAhead); err != nil {
		o.Logger.Warn("sequential reads will use the kernel's default read-ahead of 128 KiB", "err", err)
	}
	return &Server{Server: srv, FS: fsys, dir: dir}, nil
}

// Dir is the mount point.
func (s *Server) Dir() string { return s.dir }

// rawFS wraps the node file system to release POSIX locks on FLUSH: the
// kernel sends FLUSH with the closing process's lock owner at every
// close(2), and POSIX says closing any descriptor of a file releases the
// process's locks on it. go-fuse's node API drops the owner, so it is
// handled here, where the node id is the inode number (ExternalNodeID).
type rawFS struct {
	fuse.RawFileSystem
	fsys *FS
	srv  *fuse.Server // set before it serves
	// askedACL: the mount asked for POSIX_ACL and DONT_MASK.
	askedACL bool
}

// umaskFlag marks a mode that carries the caller's umask in bits 16 to
// 24 (withUmask): with DONT_MASK the kernel leaves the umask to the
// file system, and go-fuse's node API passes a creation's mode alone.
const umaskFlag = 1 << 31

func withUmask(mode, umask uint32) uint32 {
	return mode&0xffff | (umask&0o777)<<16 | umaskFlag
}

// splitUmask undoes withUmask: the mode and the umask to apply (0 when
// the kernel applied it).
func splitUmask(mode uint32) (m, umask uint32) {
	if mode&umaskFlag == 0 {
		return mode, 0
	}
	return mode & 0xffff, mode >> 16 & 0o777
}

// foldUmask passes a creation's umask on to the node (withUmask) when
// the kernel leaves it to the mount: the mount asked for DONT_MASK and
// POSIX_ACL, and the kernel offered both (go-fuse then grants them).
func (r *rawFS) foldUmask(mode *uint32, umask uint32) {
	const both = fuse.CAP_DONT_MASK | fuse.CAP_POSIX_ACL
	if r.askedACL && r.srv != nil && r.srv.KernelSettings().Flags64()&both == both {
		*mode = withUmask(*mode, umask)
	}
}

// GetXAttr answers security.capability with "none" without asking the
// cluster: the kernel asks for it before every write by a process
// without CAP_FSETID, and file capabilities are not kept (go-fuse's
// IgnoreSecurityLabels does the same, but also hides POSIX ACLs).
func (r *rawFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	if attr == "security.capability" {
		return 0, fuse.ENOATTR
	}
	return r.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}

func (r *rawFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	r.foldUmask(&in.Mode, in.Umask)
	return r.RawFileSystem.Create(cancel, in, name, out)
}

func (r *rawFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	r.foldUmask(&in.Mode, in.Umask)
	return r.RawFileSystem.Tmpfile(cancel, in, out)
}

func (r *rawFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	r.foldUmask(&in.Mode, in.Umask)
	return r.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (r *rawFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	r.foldUmask(&in.Mode, in.Umask)
	return r.RawFileSystem.Mknod(cancel, in, name, out)
}

// OnUnmount frees the read buffers once the last request is answered.
func (r *rawFS) OnUnmount() {
	r.RawFileSystem.OnUnmount()
	r.fsys.reads.close()
}

func (r *rawFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	st := r.RawFileSystem.Flush(cancel, in)
	if in.LockOwner != 0 {
		ctx := &fuse.Context{Caller: in.Caller} // not interruptible: see detach
		if e := r.fsys.releasePOSIX(ctx, in.NodeId, in.LockOwner); e != 0 && st == fuse.OK {
			st = fuse.Status(e)
		}
	}
	return st
}

// Write and Writev (which go-fuse tries first) clear setuid and setgid
// before a write that the kernel marks FUSE_WRITE_KILL_SUIDGID (every
// write of a caller without CAP_FSETID, whatever the mode: HANDLE_KILLPRIV_V2
// leaves the bits to the file system). The write's commit at close clears
// them too, but Linux clears them at the write, and the kernel asks for
// the attributes right after it. client.KillPrivs asks the cluster only
// when the file may have them; when it did, the kernel's cached
// attributes are dropped, since the write's answer makes it forget the
// size and times only, and a statx of the mode alone would show the
// bits for an attribute timeout.
func (r *rawFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if st := r.killPrivs(in); st != fuse.OK {
		return 0, st
	}
	return r.RawFileSystem.Write(cancel, in, data)
}

func (r *rawFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if st := r.killPrivs(in); st != fuse.OK {
		return 0, st
	}
	return r.RawFileSystem.Writev(cancel, in, data)
}

func (r *rawFS) killPrivs(in *fuse.WriteIn) fuse.Status {
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID == 0 {
		return fuse.OK
	}
	ctx := &fuse.Context{Caller: in.Caller} // not interruptible: see detach
	asked, err := r.fsys.c.KillPrivs(ctx, r.fsys.creds.cred(ctx), in.NodeId)
	if asked && err == nil {
		// A negative offset drops the attributes only.
		r.srv.InodeNotify(in.NodeId, -1, 0)
	}
	return fuse.Status(errno(r.fsys.log, "write-killpriv", err))
}

// noteLocker records that h took POSIX locks for owner.
func (fsys *FS) noteLocker(h *handle, owner uint64) {
	h.mu.Lock()
	if h.posixOwners == nil {
		h.posixOwners = make(map[uint64]struct{})
	}
	h.posixOwners[owner] = struct{}{}
	h.mu.Unlock()
	fsys.lockMu.Lock()
	defer fsys.lockMu.Unlock()
	hs := fsys.lockers[h.f.Ino()]
	if hs == nil {
		hs = make(map[*handle]struct{})
		fsys.lockers[h.f.Ino()] = hs
	}
	hs[h] = struct{}{}
}

// forgetLocker drops h from the lock bookkeeping (it is being released).
func (fsys *FS) forgetLocker(h *handle) {
	fsys.lockMu.Lock()
	defer fsys.lockMu.Unlock()
	if hs := fsys.lockers[h.f.Ino()]; hs != nil {
		delete(hs, h)
		if len(hs) == 0 {
			delete(fsys.lockers, h.f.Ino())
		}
	}
}

// releasePOSIX releases every POSIX lock owner holds on inode ino, if any
// open file of the inode took one.
func (fsys *FS) releasePOSIX(ctx context.Context, ino, owner uint64) syscall.Errno {
	fsys.lockMu.Lock()
	var via *handle
	for h := range fsys.lockers[ino] {
		h.mu.Lock()
		_, ok := h.posixOwners[owner]
		delete(h.posixOwners, owner)
		h.mu.Unlock()
		if ok && via == nil {
			via = h
		}
	}
	fsys.lockMu.Unlock()
	if via == nil {
		return 0
	}
	err := via.f.SetLk(ctx, client.Lock{Kind: client.LockPOSIX, Type: client.LockUnlock, Owner: owner, Start: 0, End: client.LockEOF}, false)
	if err == syscall.EBADF {
		return 0 // the file was closed meanwhile: its locks went with it
	}
	return errno(fsys.log, "flush-unlock", err)
}
