package client

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/metadata/wire"
)

// openTable holds the inodes this client has open. Everything the client
// knows about an open file beyond its handle is here, shared by every File
// of the inode, so that reads through one descriptor see writes through
// another (POSIX within one client), and so that the opens can be
// registered again with an owner that restarted.
type openTable struct {
	mu sync.Mutex
	m  map[uint64]*openInode
}

// openInode is the client's state of one open inode.
type openInode struct {
	ino uint64
	// refs counts Files; guarded by openTable.mu.
	refs int

	mu sync.Mutex
	// size is the size as this client knows it: the server's at the last
	// open, commit or truncate, grown by this client's writes since.
	size uint64
	// dirty is set by a write and cleared by the commit that follows it.
	dirty bool
	// pending counts the bytes written (or fallocated) since the last
	// commit, for st_blocks until the owner counts them.
	pending uint64
	// committed is the owner's answer to this client's last commit or
	// size change of the inode: an answer about the inode that crossed
	// it (asked before, answered after) is older and must not undo it
	// (newer).
	committed Attr
	// grew is set by a write past the size, for the whole life of the
	// open inode: its last close then has the blocks allocated ahead of
	// the writes freed (a file rewritten in place keeps them, and does
	// not allocate them again at every open).
	grew bool
	// allocated is set by a fallocate (even one that failed part way),
	// for the whole life of the open inode: its releases ask the owner
	// to free the blocks past the size with the file.
	allocated bool
	// wb is the write-behind of small sequential writes (SetWriteBehind).
	wb writeBehind
	// mtime is the time of the last write, for the commit.
	mtime time.Time
	// files are the open Files of the inode (guarded by openTable.mu),
	// each registered once with the owner.
	files map[*File]struct{}
	// cred of the last writer, for the commit.
	cred Cred
	// atime, mtime and ctime are the owner's, as this client last
	// learnt them (open, commit, getattr, setattr, an atime update):
	// what relatime's rule is applied to before a read asks the owner
	// to update atime. This client's own uncommitted writes do not
	// count until their commit, so that reads between writes send
	// nothing.
	atime, mtime0, ctime time.Time
	// mode is the owner's mode of the inode as this client last learnt
	// it, so that a write need not ask the owner to clear setuid and
	// setgid bits the file does not have (KillPrivs). Written under mu,
	// read without it.
	mode atomic.Uint32
	// touching is closed when the atime update a read is asking for
	// ends (nil when none is under way): concurrent reads wait for it
	// instead of asking too, so that none returns before the update.
	touching chan struct{}
}

// learn records the owner's times of the inode. oi.mu is held.
func (oi *openInode) learn(a Attr) {
	oi.atime, oi.mtime0, oi.ctime = a.Atime, a.Mtime, a.Ctime
	if a.Mode != 0 { // an answer that carried the mode (every one but a failed atime update)
		oi.mode.Store(a.Mode)
	}
}

// newer returns a, with the size and times of oi.committed if a is
// older than them (by the owner's ctime). oi.mu is held.
func (oi *openInode) newer(a Attr) Attr {
	if c := oi.committed; c.Ino != 0 && a.Ctime.Before(c.Ctime) {
		a.Size, a.Blocks, a.Mtime, a.Ctime = c.Size, c.Blocks, c.Mtime, c.Ctime
	}
	return a
}

// relatimeDue reports whether a read at now should ask the owner to
// update atime, by relatime's rule on the times this client knows.
// oi.mu is held.
func (oi *openInode) relatimeDue(now time.Time) bool {
	return wire.RelatimeDue(wire.TimespecOf(oi.atime), wire.TimespecOf(oi.mtime0),
		wire.TimespecOf(oi.ctime), wire.TimespecOf(now))
}

// acquire registers f, an open of the inode whose open returned a. It
// reports whether this is the inode's first open in this client.
func (t *openTable) acquire(a Attr, f *File) (*openInode, bool) {
	t.mu.Lock()
	oi, ok := t.m[a.Ino]
	if !ok {
		oi = &openInode{ino: a.Ino, cred: f.cred, files: make(map[*File]struct{})}
		t.m[a.Ino] = oi
	}
	oi.refs++
	oi.files[f] = struct{}{}
	f.oi = oi
	t.mu.Unlock()
	oi.mu.Lock()
	// Close-to-open: the size the owner reports at open covers every
	// other client's closed writes. This client's own uncommitted writes
	// may reach further.
	a = oi.newer(a)
	if oi.dirty {
		oi.size = max(oi.size, a.Size)
	} else {
		oi.size = a.Size
	}
	oi.learn(a)
	oi.mu.Unlock()
	return oi, !ok
}

// release drops f and reports whether it was its inode's last File.
func (t *openTable) release(f *File) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	oi := f.oi
	delete(oi.files, f)
	oi.refs--
	if oi.refs > 0 {
		return false
	}
	delete(t.m, oi.ino)
	return true
}

// inodes returns the open inodes' numbers.
func (t *openTable) inodes() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]uint64, 0, len(t.m))
	for ino := range t.m {
		out = append(out, ino)
	}
	return out
}

// files returns every open File.
func (t *openTable) files() []*File {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*File
	for _, oi := range t.m {
		for f := range oi.files {
			out = append(out, f)
		}
	}
	return out
}

func (t *openTable) get(ino uint64) *openInode {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[ino]
}

// overlay adds this client's unflushed writes to attributes from the
// server: a stat after a write shows the write before any close.
func (t *openTable) overlay(a Attr) Attr {
	oi := t.get(a.Ino)
	if oi == nil {
		return a
	}
	oi.mu.Lock()
	defer oi.mu.Unlock()
	a = oi.newer(a)
	oi.learn(a)
	if oi.dirty {
		if oi.size > a.Size {
			// The owner counts no blocks for writes not yet committed:
			// count what was written past its size as allocated, so
			// that st_blocks does not say a file just written (or
			// fallocated) holds nothing (tar --sparse archives such a
			// file as one hole), nor that a write far past the end
			// filled the gap.
			a.Blocks += min(blocksBelow(oi.pending), blocksBelow(oi.size)-blocksBelow(a.Size))
			a.Size = oi.size
		}
		if oi.mtime.After(a.Mtime) {
			a.Mtime, a.Ctime = oi.mtime, oi.mtime
		}
	}
	return a
}

// blocksBelow is st_blocks (512-byte units) of size bytes in whole 4 KiB
// blocks.
func blocksBelow(size uint64) uint64 { return (size + 4095) / 4096 * 8 }

// File is an open regular file: what FUSE keeps as a file handle and what
// the native API's FSFile wraps. Its methods are safe for concurrent use;
// reads and writes at different offsets proceed in parallel.
type File struct {
	c     *Client
	oi    *openInode
	cred  Cred
	flags int
	// lockOwner owns the flock locks taken through this File (an open
	// file description owns them in Linux).
	lockOwner uint64
	locked    atomic.Bool
	closed    atomic.Bool
	// opened is the owner's answer to the open.
	opened Attr

	// first is the first page of a directory's listing, answered with
	// its open (OpenDir) and not yet read; guarded by firstMu.
	firstMu sync.Mutex
	first   *dirPage
}

// dirPage is a page of a listing and whether the listing ends with it.
type dirPage struct {
	ents []DirEntry
	eof  bool
}

// Open opens inode ino with flags (O_RDONLY, O_WRONLY or O_RDWR, plus
// O_TRUNC, O_APPEND, O_DIRECT, O_NOATIME; O_CREAT and O_EXCL belong to
// Create). The owner checks cred's permission and registers the open, so
// that the file outlives an unlink until the last close.
func (c *Client) Open(ctx context.Context, cred Cred, ino uint64, flags int) (*File, error) {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return nil, c.fail(ctx, "open", err)
	}
	flags &^= syscall.O_CREAT | syscall.O_EXCL
	var a Attr
	gen := c.fresh.gen(ino)
	if oi := c.opens.get(ino); oi != nil && flags&syscall.O_TRUNC != 0 {
		// Truncating a file this client has open: as SetAttr does, its
		// unflushed writes go first (a write kept behind must not land
		// past the new end), and the size the opens know is the new one.
		oi.mu.Lock()
		if err = c.flushLocked(octx, oi); err == nil {
			if a, err = c.ns.Open(octx, cred, ino, flags); err == nil {
				oi.size, oi.committed = a.Size, a
			}
		}
		oi.mu.Unlock()
	} else {
		a, err = c.ns.Open(octx, cred, ino, flags)
	}
	if err != nil {
		return nil, c.fail(ctx, "open", err)
	}
	if flags&syscall.O_TRUNC != 0 {
		c.dropAttrs(ino)
		c.truncated(ino, true)
	} else {
		// The owner's attributes as of the open: the kernel asks
		// for them right after (fstat, or its own close-to-open
		// check), and they are as fresh as the open.
		c.fresh.put(ino, a, gen)
	}
	return c.newFile(cred, a, flags), nil
}

// OpenDir opens directory ino for listing with File.ReadDirPage (flags
// may hold O_NOATIME), in one request that also fetches the first page:
// the owner checks read permission and registers the open, so that the
// directory, if removed, stays answerable (link count 0) until Close.
func (c *Client) OpenDir(ctx context.Context, cred Cred, ino uint64, flags int) (*File, error) {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return nil, c.fail(ctx, "opendir", err)
	}
	flags = syscall.O_RDONLY | syscall.O_DIRECTORY | flags&syscall.O_NOATIME
	a, ents, eof, err := c.ns.OpenDir(octx, cred, ino, flags, defaultReadDirBatch)
	if err != nil {
		return nil, c.fail(ctx, "opendir", err)
	}
	f := c.newFile(cred, a, flags)
	f.first = &dirPage{ents: c.overlayEntries(ents), eof: eof}
	return f, nil
}

// newFile makes the File of an open the owner has registered.
func (c *Client) newFile(cred Cred, a Attr, flags int) *File {
	f := &File{c: c, cred: cred, flags: flags &^ syscall.O_TRUNC, lockOwner: c.nextOwner.Add(1) | 1<<63, opened: a}
	c.opens.acquire(a, f)
	if !c.mapsAsOf.unchanged(a) {
		// Extent maps cached before may miss blocks other clients
		// allocated since, or name blocks they freed: close-to-open
		// starts afresh, at every open (another may be open here).
		c.data.Forget(a.Ino)
	}
	return f
}

// dataVersions remembers, per file, its data version (DataVersionOf) at
// the last open, bounded to dataVersionsMax files.
//
// Close-to-open lets an open keep the extent maps cached before it when
// the file's data cannot have changed since: every change of a file's
// blocks by any client ends in a commit at the inode's owner that moves
// its mtime or ctime (write, truncate, fallocate, punch), and the open's
// reply comes from that owner. The version is recorded before the maps of
// this open are fetched, so maps are never newer than the version they
// are kept under is old. Keeping them is safe against reuse too: cached
// extents hold a lease, and an owner reuses no block a lease covers.
type dataVersions struct {
	mu sync.Mutex
	m  map[uint64]DataVersion
}

const dataVersionsMax = 1 << 14

// DataVersion tells a file's data apart across opens: every change of a
// file's data by any client ends in a commit at the inode's owner that
// moves its mtime or ctime, so two answers with the same version hold
// the same data. It leaves st_blocks out: the owner counts a file's
// blocks after the commit that changed them, so the count landing alone
// says nothing new about the data.
type DataVersion struct {
	gen, size    uint64
	mtime, ctime int64
}

// DataVersionOf is the data version of attributes a.
func DataVersionOf(a Attr) DataVersion {
	return DataVersion{a.Gen, a.Size, a.Mtime.UnixNano(), a.Ctime.UnixNano()}
}

// unchanged records a's data version and reports whether it is the one
// recorded before.
func (d *dataVersions) unchanged(a Attr) bool {
	v := DataVersionOf(a)
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.m[a.Ino]; ok && old == v {
		return true
	}
	if d.m == nil {
		d.m = make(map[uint64]DataVersion)
	}
	if len(d.m) >= dataVersionsMax {
		clear(d.m)
	}
	d.m[a.Ino] = v
	return false
}

// Ino is the file's inode number.
func (f *File) Ino() uint64 { return f.oi.ino }

// Opened returns the attributes the inode's owner answered the open with
// (close-to-open: they cover every other client's closed writes).
func (f *File) Opened() Attr { return f.opened }

// Flags are the open flags.
func (f *File) Flags() int { return f.flags }

func (f *File) readable() bool { return f.flags&syscall.O_ACCMODE != syscall.O_WRONLY }
func (f *File) writable() bool { return f.flags&syscall.O_ACCMODE != syscall.O_RDONLY }

// Size is the file's size as this client knows it.
func (f *File) Size() uint64 {
	f.oi.mu.Lock()
	defer f.oi.mu.Unlock()
	return f.oi.size
}

// ReadAt reads up to len(p) bytes at off. At the end of the file it returns
// fewer (n < len(p)) and no error, as FUSE expects; 0 means off is at or
// past the end.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if f.closed.Load() || !f.readable() {
		return 0, syscall.EBADF
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	octx, cancel, err := f.c.op(ctx)
	defer cancel()
	if err != nil {
		return 0, f.c.fail(ctx, "read", err)
	}
	f.oi.mu.Lock()
	size := f.oi.size
	f.c.sendBehindLocked(octx, f.oi)
	f.oi.mu.Unlock()
	if uint64(off) >= size || len(p) == 0 {
		return 0, nil
	}
	n := int(min(uint64(len(p)), size-uint64(off)))
	err = f.reading(octx, func() error { return f.c.data.ReadAt(octx, f.oi.ino, p[:n], uint64(off)) })
	if err != nil {
		return 0, f.c.fail(ctx, "read", err)
	}
	return n, nil
}

// reading runs read, the fetch of a read's bytes, beside the atime update
// the read is due for, if any: the update goes to the inode's owner while
// the bytes come from the chunks' owners, one round trip for both, not
// two in a row.
func (f *File) reading(octx context.Context, read func() error) error {
	var touched chan struct{}
	if f.AtimeDue() {
		touched = make(chan struct{})
		go func() {
			defer close(touched)
			f.touchAtime(octx)
		}()
	}
	err := read()
	if touched != nil {
		<-touched
	}
	return err
}

// IOVec is one piece of a vectored read or write: Buf at byte Off of the
// file.
type IOVec = dpclient.IOVec

// ReadV reads every vector at once: the RDMA READs of all their chunks
// are in flight together, where ReadAt calls would run one after another
// (a program gathering scattered records, an index and its pages). Each
// vector is cut at the end of the file; n[i] is how many bytes vector i
// got.
func (f *File) ReadV(ctx context.Context, iov []IOVec) (n []int, err error) {
	if f.closed.Load() || !f.readable() {
		return nil, syscall.EBADF
	}
	octx, cancel, err := f.c.op(ctx)
	defer cancel()
	if err != nil {
		return nil, f.c.fail(ctx, "read", err)
	}
	f.oi.mu.Lock()
	size := f.oi.size
	f.c.sendBehindLocked(octx, f.oi)
	f.oi.mu.Unlock()
	n = make([]int, len(iov))
	cut := make([]IOVec, 0, len(iov))
	for i, v := range iov {
		if v.Off >= size || len(v.Buf) == 0 {
			continue
		}
		n[i] = int(min(uint64(len(v.Buf)), size-v.Off))
		cut = append(cut, IOVec{Off: v.Off, Buf: v.Buf[:n[i]]})
	}
	if len(cut) == 0 {
		return n, nil
	}
	if err := f.reading(octx, func() error { return f.c.data.ReadV(octx, f.oi.ino, cut) }); err != nil {
		return nil, f.c.fail(ctx, "read", err)
	}
	return n, nil
}

// WriteV writes every vector at once, their chunks' RDMA WRITEs in flight
// together; vectors that overlap land in an unspecified order. On a file
// opened with O_APPEND the vectors are appended one after another (their
// offsets ignored), as writev(2) does.
func (f *File) WriteV(ctx context.Context, iov []IOVec) error {
	if f.closed.Load() || !f.writable() {
		return syscall.EBADF
	}
	if f.flags&syscall.O_APPEND != 0 {
		for _, v := range iov {
			if _, err := f.WriteAt(ctx, v.Buf, 0); err != nil {
				return err
			}
		}
		return nil
	}
	var end, total uint64
	some := make([]IOVec, 0, len(iov))
	for _, v := range iov {
		if v.Off+uint64(len(v.Buf)) > maxFileSize || v.Off+uint64(len(v.Buf)) < v.Off {
			return syscall.EFBIG
		}
		if len(v.Buf) > 0 {
			some = append(some, v)
			end, total = max(end, v.Off+uint64(len(v.Buf))), total+uint64(len(v.Buf))
		}
	}
	if len(some) == 0 {
		return nil
	}
	octx, cancel, err := f.c.op(ctx)
	defer cancel()
	if err != nil {
		return f.c.fail(ctx, "write", err)
	}
	// Writes kept behind go first, so that they never land over these.
	f.oi.mu.Lock()
	err = f.c.drainLocked(octx, f.oi)
	f.oi.mu.Unlock()
	if err == nil {
		err = f.c.data.WriteV(octx, f.oi.ino, some)
	}
	if err != nil {
		return f.c.fail(ctx, "write", err)
	}
	f.wrote(end, total)
	return nil
}

// Pending is a read or write started by ReadAtAsync or WriteAtAsync.
type Pending struct {
	done chan struct{}
	n    int
	err  error
}

// Wait returns the I/O's outcome (ReadAt's or WriteAt's) once it is over.
func (p *Pending) Wait() (int, error) {
	<-p.done
	return p.n, p.err
}

// Done is closed when the I/O is over.
func (p *Pending) Done() <-chan struct{} { return p.done }

// ReadAtAsync starts ReadAt and returns at once, so that a program can
// keep many reads in flight from one goroutine; p must not be touched
// until Wait returns.
func (f *File) ReadAtAsync(ctx context.Context, p []byte, off int64) *Pending {
	return async(func() (int, error) { return f.ReadAt(ctx, p, off) })
}

// WriteAtAsync starts WriteAt and returns at once; p must not be touched
// until Wait returns. Writes in flight together land in an unspecified
// order where they overlap.
func (f *File) WriteAtAsync(ctx context.Context, p []byte, off int64) *Pending {
	return async(func() (int, error) { return f.WriteAt(ctx, p, off) })
}

func async(io func() (int, error)) *Pending {
	pd := &Pending{done: make(chan struct{})}
	go func() {
		pd.n, pd.err = io()
		close(pd.done)
	}()
	return pd
}

// AtimeDue reports whether a read through f is to update atime
// (touchAtime: relatime's rule on the times this client knows; never for
// an O_NOATIME open or a noatime client), or wait for an update under
// way. A read that a cache answers without calling ReadAt updates
// nothing.
func (f *File) AtimeDue() bool {
	if f.noAtime() {
		return false
	}
	oi := f.oi
	oi.mu.Lock()
	defer oi.mu.Unlock()
	return oi.touching != nil || oi.relatimeDue(f.c.cfg.Now())
}

// touchAtime asks the owner to update atime after a read, when
// relatime's rule is due on the times this client knows: in steady state
// once per modification of the file or once a day, never per read. The
// owner applies the rule again with its own times. A failure is logged
// and not retried until the times change: atime is not worth failing a
// read for, nor an RPC per read. The request is made before the read
// returns, so that a stat after the read (the kernel asks for attributes
// again after a read) sees the new atime, as on a local file system.
func (f *File) touchAtime(ctx context.Context) {
	oi := f.oi
	now := f.c.cfg.Now()
	oi.mu.Lock()
	if !oi.relatimeDue(now) {
		oi.mu.Unlock()
		return
	}
	if wait := oi.touching; wait != nil {
		oi.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		return
	}
	done := make(chan struct{})
	oi.touching = done
	oi.mu.Unlock()
	// Bounded apart from the read: data nodes may answer while the
	// inode's owner does not, and atime is not worth stalling a read
	// for an operation timeout.
	tctx, cancel := context.WithTimeout(ctx, atimeTimeout)
	a, err := f.c.ns.TouchAtime(tctx, f.cred, oi.ino)
	cancel()
	f.c.dropAttrs(oi.ino)
	oi.mu.Lock()
	defer oi.mu.Unlock()
	oi.touching = nil
	defer close(done)
	if err != nil {
		f.c.log.Debug("atime update failed", "ino", oi.ino, "err", err)
		a = Attr{Atime: now, Mtime: oi.mtime0, Ctime: oi.ctime}
	}
	// Not due any more until the owner's times say otherwise, whatever
	// the owner decided (its clock may be behind this client's).
	a.Atime = laterOf(a.Atime, now)
	oi.learn(a)
}

// atimeTimeout bounds a read's atime update.
const atimeTimeout = 2 * time.Second

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// WriteAt writes p at off, or at the end of the file as the owner knows it
// if the file was opened with O_APPEND (then off is ignored, as pwrite on
// Linux does). It returns len(p) or an error. The write is visible to this
// client at once, to others after Flush, Sync or Close.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if f.closed.Load() || !f.writable() {
		return 0, syscall.EBADF
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if uint64(off)+uint64(len(p)) > maxFileSize {
		return 0, syscall.EFBIG
	}
	octx, cancel, err := f.c.op(ctx)
	defer cancel()
	if err != nil {
		return 0, f.c.fail(ctx, "write", err)
	}
	if f.flags&syscall.O_APPEND != 0 {
		return f.appendAt(ctx, octx, p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Earlier writes kept behind go first, so that they never land over
	// this one; a small write may join them.
	oi := f.oi
	oi.mu.Lock()
	buffered, err := f.c.writeBehindLocked(octx, oi, f.flags, p, uint64(off))
	oi.mu.Unlock()
	if err != nil {
		return 0, f.c.fail(ctx, "write", err)
	}
	if !buffered {
		if err := f.c.data.WriteAt(octx, oi.ino, p, uint64(off)); err != nil {
			return 0, f.c.fail(ctx, "write", err)
		}
	}
	f.wrote(uint64(off)+uint64(len(p)), uint64(len(p)))
	return len(p), nil
}

// maxFileSize is the largest size a file may reach: the namespace
// service's limit (2^60 bytes), so that a write or truncate beyond it fails
// with EFBIG at once, as on a local file system, instead of being accepted
// here and refused when its size is committed at close.
const maxFileSize = 1 << 60

// wrote records a completed write of n bytes ending at end.
func (f *File) wrote(end, n uint64) {
	f.oi.mu.Lock()
	if end > f.oi.size {
		f.oi.size, f.oi.grew = end, true
	}
	f.oi.dirty = true
	f.oi.pending += n
	f.oi.mtime = f.c.cfg.Now()
	f.oi.cred = f.cred
	f.oi.mu.Unlock()
	f.c.dropAttrs(f.oi.ino)
}

// appendAt writes p at the end of the file. The inode's owner places it
// (Append): after the committed size, after the appends of every client
// it placed before, and after this client's own writes; so appends of
// several clients never overwrite each other, as appends of several
// processes on one host do not. Appends of this client are serialised
// by the inode's lock.
func (f *File) appendAt(ctx, octx context.Context, p []byte) (int, error) {
	oi := f.oi
	oi.mu.Lock()
	defer oi.mu.Unlock()
	if err := f.c.drainLocked(octx, oi); err != nil {
		return 0, f.c.fail(ctx, "write", err)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if oi.size+uint64(len(p)) > maxFileSize {
		return 0, syscall.EFBIG
	}
	off, err := f.c.ns.Append(octx, f.cred, oi.ino, uint64(len(p)), oi.size)
	if err != nil {
		return 0, f.c.fail(ctx, "write", err)
	}
	if off+uint64(len(p)) > maxFileSize {
		return 0, syscall.EFBIG
	}
	if err := f.c.data.WriteAt(octx, oi.ino, p, off); err != nil {
		return 0, f.c.fail(ctx, "write", err)
	}
	oi.dirty = true
	oi.pending += uint64(len(p))
	oi.mtime = f.c.cfg.Now()
	oi.cred = f.cred
	oi.grew = true
	oi.size = max(oi.size, off+uint64(len(p)))
	f.c.dropAttrs(oi.ino)
	return len(p), nil
}

// Flush makes this client's writes to the file durable and visible to
// other clients: the data engine persists the written ranges at their
// owners, then the inode's owner commits size and mtime. FUSE calls it at
// every close(2) of a descriptor; Close calls it too.
func (f *File) Flush(ctx context.Context) error {
	if f.closed.Load() {
		return syscall.EBADF
	}
	octx, cancel, err := f.c.op(ctx)
	defer cancel()
	if err == nil {
		f.oi.mu.Lock()
		err = f.c.flushLocked(octx, f.oi)
		f.oi.mu.Unlock()
	}
	return f.c.fail(ctx, "flush", err)
}

// Sync is fsync (and, since the size is always committed with the data,
// fdatasync): when it returns, what this client wrote to the file survives
// a crash of any node.
func (f *File) Sync(ctx context.Context) error {
	return f.Flush(ctx)
}

// flushLocked persists and commits oi's writes; oi.mu is held. The cred
// of the last writer commits, so that a flush by another descriptor of the
// same inode does not need write permission of its own.
func (c *Client) flushLocked(ctx context.Context, oi *openInode) error {
	if err := c.drainLocked(ctx, oi); err != nil {
		return err
	}
	if !oi.dirty {
		return nil
	}
	if err := c.data.Persist(ctx, oi.ino); err != nil {
		return err
	}
	a, err := c.ns.Commit(ctx, oi.cred, oi.ino, oi.size, oi.mtime)
	if err != nil {
		return err
	}
	oi.dirty, oi.pending = false, 0
	oi.size, oi.committed = a.Size, a
	oi.learn(a)
	// What an open answered before this commit (freshDirs) is older
	// than the size and mtime it set, and an open under way may
	// answer older still: void both.
	c.fresh.drop(oi.ino)
	c.attrs.put(oi.ino, a)
	return nil
}

// Truncate sets the file's size (ftruncate).
func (f *File) Truncate(ctx context.Context, size uint64) error {
	if f.closed.Load() || !f.writable() {
		return syscall.EBADF
	}
	if size > maxFileSize {
		return syscall.EFBIG
	}
	_, err := f.c.SetAttr(ctx, f.cred, f.oi.ino, SetAttrIn{Valid: SetSize | SetHandle, Size: size})
	return err
}

// Allocate is fallocate: mode 0 allocates [off, off+length) and grows the
// size to cover it; FallocKeepSize allocates without growing;
// FallocPunchHole (with FallocKeepSize) frees the range so it reads as
// zeros; FallocZeroRange zeroes it.
func (f *File) Allocate(ctx context.Context, mode uint32, off, length uint64) error {
	if f.closed.Load() || !f.writable() {
		return syscall.EBADF
	}
	switch {
	case length == 0:
		return syscall.EINVAL
	case mode&^(FallocKeepSize|FallocPunchHole|FallocZeroRange) != 0:
		return syscall.EOPNOTSUPP
	case mode&FallocPunchHole != 0 && mode != FallocPunchHole|FallocKeepSize:
		return syscall.EOPNOTSUPP
	case off+length > maxFileSize || off+length < off:
		return syscall.EFBIG
	}
	octx, cancel, err := f.c.op(ctx)
	defer cancel()
	if err == nil {
		f.oi.mu.Lock()
		f.oi.allocated = f.oi.allocated || mode&FallocPunchHole == 0
		err = f.c.drainLocked(octx, f.oi)
		f.oi.mu.Unlock()
	}
	if err == nil {
		err = f.c.data.Allocate(octx, f.oi.ino, mode, off, length)
	}
	if err != nil {
		return f.c.fail(ctx, "fallocate", err)
	}
	if mode&FallocKeepSize == 0 {
		f.wrote(off+length, length)
	} else {
		f.wrote(0, length)
	}
	return nil
}

// SeekData returns the first offset at or after off that holds data
// (lseek's SEEK_DATA); SeekHole the first that does not (SEEK_HOLE), the
// end of the file being a hole. Both fail with ENXIO at or past the end,
// and SeekData also when only holes follow off. Holes come from the
// chunks' extent maps, at block granularity: unmapped blocks and blocks
// allocated but never written (fallocate); this client's writes count as
// data before they are flushed.
func (f *File) SeekData(ctx context.Context, off uint64) (uint64, error) {
	return f.seek(ctx, off, false)
}

// SeekHole: see SeekData.
func (f *File) SeekHole(ctx context.Context, off uint64) (uint64, error) {
	return f.seek(ctx, off, true)
}

func (f *File) seek(ctx context.Context, off uint64, hole bool) (uint64, error) {
	if f.closed.Load() {
		return 0, syscall.EBADF
	}
	octx, cancel, err := f.c.op(ctx)
	defer cancel()
	if err != nil {
		return 0, f.c.fail(ctx, "lseek", err)
	}
	f.oi.mu.Lock()
	size := f.oi.size // as reads know it
	f.c.sendBehindLocked(octx, f.oi)
	f.oi.mu.Unlock()
	if off >= size {
		return 0, syscall.ENXIO
	}
	at, found, err := f.c.data.Seek(octx, f.oi.ino, off, size, hole)
	switch {
	case err != nil:
		return 0, f.c.fail(ctx, "lseek", err)
	case found:
		return at, nil
	case hole:
		return size, nil
	}
	return 0, syscall.ENXIO
}

// ReadDirPage lists the directory this File opened (Open with
// O_DIRECTORY) after cookie, as Client.ReadDirPage does, with the
// File's credentials. The listing updates the directory's atime by
// relatime's rule, unless the File was opened with O_NOATIME.
func (f *File) ReadDirPage(ctx context.Context, cookie uint64, max int) ([]DirEntry, bool, error) {
	if f.closed.Load() {
		return nil, false, syscall.EBADF
	}
	if max <= 0 {
		max = defaultReadDirBatch
	}
	f.firstMu.Lock()
	first := f.first
	f.first = nil
	f.firstMu.Unlock()
	if first != nil && cookie == 0 && len(first.ents) <= max {
		// The page came with the open, which left atime alone: the
		// listing updates it now, when due (OpenDir's reply had the
		// times).
		if !f.noAtime() {
			octx, cancel, err := f.c.op(ctx)
			if err == nil {
				f.touchAtime(octx)
			}
			cancel()
		}
		return first.ents, first.eof, nil
	}
	return f.c.readDirPage(ctx, f.cred, f.oi.ino, cookie, max, f.noAtime())
}

// noAtime reports whether reads and listings through f leave atime
// alone: an O_NOATIME open, or a client that never updates it.
func (f *File) noAtime() bool { return f.flags&syscall.O_NOATIME != 0 || f.c.noAtime }

// Attr returns the file's attributes with this client's unflushed writes.
func (f *File) Attr(ctx context.Context) (Attr, error) {
	return f.c.GetAttr(ctx, f.cred, f.oi.ino)
}

// Close flushes the file, releases the locks taken through it with its own
// lock owner, and ends its registration with the inode's owner (each Open
// registers one, each Close releases one). The flush's error, if any, is returned; the File is closed
// either way.
func (f *File) Close(ctx context.Context) error {
	if f.closed.Swap(true) {
		return syscall.EBADF
	}
	octx, cancel, err := f.c.op(ctx)
	defer cancel()
	if err == nil {
		f.oi.mu.Lock()
		err = f.c.flushLocked(octx, f.oi)
		f.oi.mu.Unlock()
	}
	if f.locked.Load() && !f.c.closed.Load() {
		for _, kind := range []LockKind{LockFlock, LockPOSIX} {
			uerr := f.c.ns.SetLk(octx, f.oi.ino, Lock{Kind: kind, Type: LockUnlock, Owner: f.lockOwner, End: LockEOF})
			if err == nil {
				err = uerr
			}
		}
	}
	last := f.c.opens.release(f)
	if !f.c.closed.Load() {
		flags := f.flags
		f.oi.mu.Lock()
		grew := f.oi.grew
		if f.oi.allocated {
			flags |= releaseAllocated
		}
		f.oi.mu.Unlock()
		if last && f.c.data.TakeAhead(f.oi.ino) && grew {
			// Blocks allocated past what was written: the owner frees
			// them once no open is left (anywhere).
			flags |= releaseTrimAhead
		}
		if rerr := f.c.ns.Release(octx, f.oi.ino, flags); err == nil {
			err = rerr
		}
	}
	return f.c.fail(ctx, "close", err)
}

// writeBehind holds small sequential writes of one open inode until they
// fill the buffer, a write elsewhere, a read, a truncate, a fallocate, a
// flush (close), fsync or an append needs them in the owners' memory
// (docs/client.md, "Write-behind"). A write that fails there is reported
// by the next write, flush or fsync (err), as a local file system reports
// a failed writeback.
type writeBehind struct {
	off uint64 // file offset of buf[0]
	buf []byte
	err error
}

// SetWriteBehind makes writes smaller than half of n that continue the
// previous one collect in a buffer of n bytes per open inode before they
// go to the owners as one write; 0 (the default) turns it off. Writes
// stay visible to this client at once, and reach other clients at Flush,
// Sync or Close as before. The mount turns it on; call it before the
// client is used.
func (c *Client) SetWriteBehind(n int) { c.writeBehind = max(n, 0) }

// SetNoAtime makes reads and listings through c leave atime alone, as
// the noatime mount option does (a read-only mount needs it: updating
// atime is a change). Call it before the client is used.
func (c *Client) SetNoAtime(on bool) { c.noAtime = on }

// writeBehindLocked sends what oi keeps behind unless the write p at off
// joins it, and reports whether it did (then p is the buffer's). oi.mu
// is held.
func (c *Client) writeBehindLocked(ctx context.Context, oi *openInode, flags int, p []byte, off uint64) (bool, error) {
	wb := &oi.wb
	small := c.writeBehind > 0 && len(p) < c.writeBehind/2 && flags&syscall.O_DIRECT == 0
	if len(wb.buf) > 0 && (!small || off != wb.off+uint64(len(wb.buf)) || len(wb.buf)+len(p) > c.writeBehind) {
		if err := c.drainLocked(ctx, oi); err != nil {
			return false, err
		}
	}
	if err := wb.err; err != nil {
		wb.err = nil
		return false, err
	}
	if !small || c.behind.Add(int64(len(p))) > writeBehindBudget {
		if small {
			c.behind.Add(-int64(len(p)))
		}
		return false, nil
	}
	// The blocks are taken now, so that ENOSPC is this write's.
	if err := c.data.Reserve(ctx, oi.ino, p, off); err != nil {
		c.behind.Add(-int64(len(p)))
		return false, err
	}
	if len(wb.buf) == 0 {
		wb.off = off
	}
	wb.buf = append(wb.buf, p...)
	return true, nil
}

// writeBehindBudget bounds the bytes a client keeps behind over all its
// open inodes; past it, writes go out at once.
const writeBehindBudget = 64 << 20

// sendBehindLocked sends what oi keeps behind before a read or a seek,
// so that they see this client's writes. A failure is kept for the next
// write, fsync or close to report. oi.mu is held.
func (c *Client) sendBehindLocked(ctx context.Context, oi *openInode) {
	if len(oi.wb.buf) == 0 {
		return
	}
	if err := c.drainLocked(ctx, oi); err != nil {
		oi.wb.err = err
	}
}

// drainLocked sends what oi keeps behind to the owners, and returns a
// failure of an earlier drain not yet reported. oi.mu is held.
func (c *Client) drainLocked(ctx context.Context, oi *openInode) error {
	wb := &oi.wb
	if len(wb.buf) > 0 {
		err := c.data.WriteAt(ctx, oi.ino, wb.buf, wb.off)
		c.behind.Add(-int64(len(wb.buf)))
		// Only an inode with writes kept behind holds a buffer.
		wb.buf = nil
		if err != nil {
			return err
		}
	}
	err := wb.err
	wb.err = nil
	return err
}
