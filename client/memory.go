package client

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/acl"
	"github.com/octofs/octofs/metadata/wire"
)

// Memory is an in-memory octofs cluster in this process: one namespace and
// one data store that any number of clients share, as they would share a
// cluster. It is for tests of the layers above the client (the FUSE
// adapter, octoctl, programs using the native API) that need the client's
// behaviour without nodes: the client's own logic (open files, flush
// order, locks, errors, path resolution) is the production code, only the
// namespace service and the data engine under it are replaced.
//
// Its namespace keeps the POSIX rules the client relies on (entries,
// nlink, rename over files and empty directories, RENAME_NOREPLACE,
// owner/group/other permissions, xattrs, advisory locks with byte ranges,
// open files surviving unlink) but not every corner the real namespace
// service implements (no sticky or setgid directories, no
// RENAME_EXCHANGE, no directory loop check, POSIX ACLs only to the
// point of an access ACL setting the permission bits). Test those
// against a real cluster (node/nodetest).
type Memory struct {
	ns   *memNS
	data *memData
	log  eventLog
	cmap *cluster.Map
}

// memPartitions is the partition count of Memory's map. Its inode
// numbers carry their partition as a cluster's do.
const memPartitions = 16

// memMap is Memory's cluster map: one node, "memory", owning every
// partition, never changing.
type memMap struct{ m *cluster.Map }

func (s memMap) Current() *cluster.Map { return s.m }

func (s memMap) Watch(ctx context.Context, since uint64) (*cluster.Map, error) {
	if s.m.Epoch > since {
		return s.m, nil
	}
	<-ctx.Done()
	return s.m, ctx.Err()
}

// NewMemory returns an empty in-memory cluster (a root directory, mode
// 0777) whose times come from now (time.Now if nil).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	m := &Memory{cmap: &cluster.Map{ClusterID: "memory", Epoch: 1,
		Nodes:      []cluster.NodeInfo{{ID: "memory", State: cluster.StateUp}},
		Partitions: make([]cluster.NodeID, memPartitions)}}
	for i := range m.cmap.Partitions {
		m.cmap.Partitions[i] = "memory"
	}
	m.ns = newMemNS(now, &m.log)
	m.data = newMemData(&m.log)
	m.ns.data = m.data
	return m
}

// Client returns a new client of the in-memory cluster. cfg's cluster
// address, token and RDMA settings are ignored; its timeouts, caches and
// clock apply.
func (m *Memory) Client(cfg Config) *Client {
	if cfg.Admin == nil {
		cfg.Admin = []string{"memory"}
	}
	if cfg.Token == "" {
		cfg.Token = "memory"
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		panic(err) // unreachable: the two required fields are set above
	}
	c := newClient(cfg)
	c.ns, c.data, c.maps = memSession{m.ns, c.id}, m.data, memMap{m.cmap}
	c.shutdown = func() error {
		opens := make(map[uint64]int)
		c.opens.mu.Lock()
		for ino, oi := range c.opens.m {
			opens[ino] = oi.refs
		}
		c.opens.mu.Unlock()
		m.ns.endSession(c.id, opens)
		return nil
	}
	return c
}

// memNS is Memory's namespace: every inode in one map under one lock. It
// keeps POSIX's rules where the client and the layers above depend on
// them, checks owner/group/other permissions so that credentials must
// travel, and counts its calls for tests.
type memNS struct {
	mu    sync.Mutex
	now   func() time.Time
	nodes map[uint64]*memNode
	next  uint64
	calls map[string]int
	// changed is closed and replaced at every call, for tests that wait
	// for calls to arrive.
	changed chan struct{}
	log     *eventLog // shared with memData: the order of persist and commit
	data    *memData  // truncation drops its bytes
	locks   []memLock
	// hook, if set, runs before every call; an error it returns is the
	// call's answer.
	hook func(ctx context.Context, op string) error
}

type memNode struct {
	attr    Attr
	entries map[string]uint64
	cookies map[string]uint64
	next    uint64
	target  string
	xattrs  map[string][]byte
	opens   int
	// placed: the end of the appends Append placed, 0 after a truncate.
	placed uint64
	// linkable: an O_TMPFILE file without a name yet, which Link may
	// name.
	linkable bool
}

type memLock struct {
	client uint64
	ino    uint64
	lk     Lock
}

var _ namespace = memSession{}

func newMemNS(now func() time.Time, log *eventLog) *memNS {
	f := &memNS{now: now, nodes: make(map[uint64]*memNode), next: 2, calls: make(map[string]int), log: log, changed: make(chan struct{})}
	t := now()
	f.nodes[cluster.RootInode] = &memNode{
		attr:    Attr{Ino: cluster.RootInode, Gen: 1, Mode: syscall.S_IFDIR | 0o777, Nlink: 2, Atime: t, Mtime: t, Ctime: t},
		entries: map[string]uint64{}, cookies: map[string]uint64{}, next: 3,
	}
	return f
}

func (f *memNS) enter(ctx context.Context, op string) error {
	f.mu.Lock()
	f.calls[op]++
	close(f.changed)
	f.changed = make(chan struct{})
	hook := f.hook
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, op); err != nil {
			return err
		}
	}
	f.mu.Lock()
	return nil
}

func (f *memNS) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func inGroup(cred Cred, gid uint32) bool {
	return cred.GID == gid || slices.Contains(cred.Groups, gid)
}

// may checks rwx bits (4, 2, 1) the way Linux does, root included.
func may(cred Cred, a Attr, want uint32) bool {
	if cred.UID == 0 {
		return want&1 == 0 || a.Mode&0o111 != 0 || a.IsDir()
	}
	perm := a.Mode & 7
	switch {
	case cred.UID == a.UID:
		perm = a.Mode >> 6 & 7
	case inGroup(cred, a.GID):
		perm = a.Mode >> 3 & 7
	}
	return perm&want == want
}

func (f *memNS) node(ino uint64) (*memNode, error) {
	n, ok := f.nodes[ino]
	if !ok {
		return nil, syscall.ESTALE
	}
	return n, nil
}

func (f *memNS) dir(cred Cred, ino uint64, want uint32) (*memNode, error) {
	n, err := f.node(ino)
	if err != nil {
		return nil, err
	}
	if !n.attr.IsDir() {
		return nil, syscall.ENOTDIR
	}
	if !may(cred, n.attr, want) {
		return nil, syscall.EACCES
	}
	return n, nil
}

func (f *memNS) Lookup(ctx context.Context, cred Cred, parent uint64, name string) (Attr, error) {
	if err := f.enter(ctx, "lookup"); err != nil {
		return Attr{}, err
	}
	defer f.mu.Unlock()
	d, err := f.dir(cred, parent, 1)
	if err != nil {
		return Attr{}, err
	}
	ino, ok := d.entries[name]
	if !ok {
		return Attr{}, syscall.ENOENT
	}
	return f.nodes[ino].attr, nil
}

func (f *memNS) GetAttr(ctx context.Context, cred Cred, ino uint64) (Attr, error) {
	if err := f.enter(ctx, "getattr"); err != nil {
		return Attr{}, err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return Attr{}, err
	}
	return n.attr, nil
}

func (f *memNS) SetAttr(ctx context.Context, cred Cred, ino uint64, in SetAttrIn) (Attr, error) {
	if err := f.enter(ctx, "setattr"); err != nil {
		return Attr{}, err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return Attr{}, err
	}
	owner := cred.UID == 0 || cred.UID == n.attr.UID
	if in.Valid&(SetMode|SetUID|SetGID|SetAtime|SetMtime) != 0 && !owner {
		return Attr{}, syscall.EPERM
	}
	if in.Valid&SetMode != 0 {
		n.attr.Mode = n.attr.Mode&modeType | in.Mode&modePerm
	}
	if in.Valid&SetUID != 0 {
		if cred.UID != 0 && in.UID != n.attr.UID {
			return Attr{}, syscall.EPERM
		}
		n.attr.UID = in.UID
	}
	if in.Valid&SetGID != 0 {
		n.attr.GID = in.GID
	}
	if in.Valid&SetAtime != 0 {
		n.attr.Atime = in.Atime
	}
	if in.Valid&SetMtime != 0 {
		n.attr.Mtime = in.Mtime
	}
	if in.Valid&(SetAtimeNow|SetMtimeNow) != 0 && !owner && !may(cred, n.attr, 2) {
		return Attr{}, syscall.EACCES
	}
	if in.Valid&SetAtimeNow != 0 {
		n.attr.Atime = f.now()
	}
	if in.Valid&SetMtimeNow != 0 {
		n.attr.Mtime = f.now()
	}
	if in.Valid&SetSize != 0 {
		switch {
		case n.attr.IsDir():
			return Attr{}, syscall.EISDIR
		case !n.attr.IsRegular():
			return Attr{}, syscall.EINVAL
		case in.Valid&SetHandle == 0 && !may(cred, n.attr, 2):
			return Attr{}, syscall.EACCES
		}
		f.truncate(n, in.Size)
	}
	n.attr.Ctime = f.now()
	return n.attr, nil
}

// truncate sets a file's size, dropping its data beyond it, as the
// namespace service does before it publishes the size.
func (f *memNS) truncate(n *memNode, size uint64) {
	f.data.trim(n.attr.Ino, size)
	n.attr.Size, n.placed = size, 0
	n.attr.Mtime = f.now()
	f.log.add("truncate")
}

func (f *memNS) add(cred Cred, parent uint64, name string, mode uint32, rdev uint64, target string) (*memNode, error) {
	d, err := f.dir(cred, parent, 3)
	if err != nil {
		return nil, err
	}
	if _, ok := d.entries[name]; ok {
		return nil, syscall.EEXIST
	}
	t := f.now()
	ino := cluster.InodeNumber(cluster.PartitionForName(parent, name, memPartitions), f.next)
	f.next++
	n := &memNode{attr: Attr{Ino: ino, Gen: 1, Mode: mode, Nlink: 1, UID: cred.UID, GID: cred.GID, Rdev: rdev,
		Atime: t, Mtime: t, Ctime: t, Btime: t}, target: target}
	if mode&modeType == syscall.S_IFDIR {
		n.attr.Nlink = 2
		n.entries, n.cookies, n.next = map[string]uint64{"..": parent}, map[string]uint64{}, 3
		d.attr.Nlink++
	}
	if target != "" {
		n.attr.Size = uint64(len(target))
	}
	f.nodes[ino] = n
	f.link(d, name, ino)
	return n, nil
}

func (f *memNS) link(d *memNode, name string, ino uint64) {
	d.entries[name] = ino
	d.cookies[name] = d.next
	d.next++
	d.attr.Mtime = f.now()
}

func (f *memNS) Create(ctx context.Context, cred Cred, parent uint64, name string, mode uint32, flags int) (Attr, *Attr, error) {
	if err := f.enter(ctx, "create"); err != nil {
		return Attr{}, nil, err
	}
	defer f.mu.Unlock()
	n, err := f.add(cred, parent, name, mode&^(cred.Umask&0o777), 0, "")
	if err != nil {
		return Attr{}, nil, err
	}
	n.opens++
	return n.attr, f.dirAttr(parent), nil
}

// dirAttr is a copy of directory ino's attributes. f.mu is held.
func (f *memNS) dirAttr(ino uint64) *Attr {
	a := f.nodes[ino].attr
	return &a
}

func (f *memNS) Tmpfile(ctx context.Context, cred Cred, parent uint64, mode uint32, flags int) (Attr, error) {
	if err := f.enter(ctx, "tmpfile"); err != nil {
		return Attr{}, err
	}
	defer f.mu.Unlock()
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return Attr{}, syscall.EINVAL
	}
	if _, err := f.dir(cred, parent, 3); err != nil {
		return Attr{}, err
	}
	t := f.now()
	ino := cluster.InodeNumber(cluster.PartitionOf(parent), f.next)
	f.next++
	n := &memNode{attr: Attr{Ino: ino, Gen: 1, Mode: syscall.S_IFREG | mode&modePerm&^(cred.Umask&0o777), UID: cred.UID, GID: cred.GID,
		Atime: t, Mtime: t, Ctime: t, Btime: t}, opens: 1, linkable: flags&syscall.O_EXCL == 0}
	f.nodes[ino] = n
	return n.attr, nil
}

func (f *memNS) Make(ctx context.Context, cred Cred, parent uint64, name string, mode uint32, rdev uint64, target string) (Attr, *Attr, error) {
	if err := f.enter(ctx, "make"); err != nil {
		return Attr{}, nil, err
	}
	defer f.mu.Unlock()
	if mode&modeType != syscall.S_IFLNK {
		mode &^= cred.Umask & 0o777
	}
	n, err := f.add(cred, parent, name, mode, rdev, target)
	if err != nil {
		return Attr{}, nil, err
	}
	return n.attr, f.dirAttr(parent), nil
}

func (f *memNS) Link(ctx context.Context, cred Cred, ino, newParent uint64, newName string) (Attr, error) {
	if err := f.enter(ctx, "link"); err != nil {
		return Attr{}, err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return Attr{}, err
	}
	d, err := f.dir(cred, newParent, 3)
	if err != nil {
		return Attr{}, err
	}
	if _, ok := d.entries[newName]; ok {
		return Attr{}, syscall.EEXIST
	}
	if n.attr.Nlink == 0 && !n.linkable {
		return Attr{}, syscall.ENOENT
	}
	f.link(d, newName, ino)
	n.attr.Nlink++
	n.linkable = false
	return n.attr, nil
}

func (f *memNS) drop(d *memNode, name string) {
	ino := d.entries[name]
	delete(d.entries, name)
	delete(d.cookies, name)
	n := f.nodes[ino]
	if n.attr.IsDir() {
		d.attr.Nlink--
		n.attr.Nlink = 0
	} else {
		n.attr.Nlink--
	}
	if n.attr.Nlink == 0 && n.opens == 0 {
		delete(f.nodes, ino)
	}
}

func (f *memNS) Unlink(ctx context.Context, cred Cred, parent uint64, name string) error {
	if err := f.enter(ctx, "unlink"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	d, err := f.dir(cred, parent, 3)
	if err != nil {
		return err
	}
	ino, ok := d.entries[name]
	if !ok {
		return syscall.ENOENT
	}
	if f.nodes[ino].attr.IsDir() {
		return syscall.EISDIR
	}
	f.drop(d, name)
	return nil
}

func (f *memNS) Rmdir(ctx context.Context, cred Cred, parent uint64, name string) error {
	if err := f.enter(ctx, "rmdir"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	d, err := f.dir(cred, parent, 3)
	if err != nil {
		return err
	}
	ino, ok := d.entries[name]
	if !ok {
		return syscall.ENOENT
	}
	n := f.nodes[ino]
	if !n.attr.IsDir() {
		return syscall.ENOTDIR
	}
	if len(n.entries) > 1 {
		return syscall.ENOTEMPTY
	}
	f.drop(d, name)
	return nil
}

func (f *memNS) Rename(ctx context.Context, cred Cred, parent uint64, name string, newParent uint64, newName string, flags uint32) error {
	if err := f.enter(ctx, "rename"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	od, err := f.dir(cred, parent, 3)
	if err != nil {
		return err
	}
	nd, err := f.dir(cred, newParent, 3)
	if err != nil {
		return err
	}
	ino, ok := od.entries[name]
	if !ok {
		return syscall.ENOENT
	}
	if old, ok := nd.entries[newName]; ok {
		if flags&RenameNoReplace != 0 {
			return syscall.EEXIST
		}
		if old == ino {
			return nil
		}
		on := f.nodes[old]
		if on.attr.IsDir() != f.nodes[ino].attr.IsDir() {
			if on.attr.IsDir() {
				return syscall.EISDIR
			}
			return syscall.ENOTDIR
		}
		if on.attr.IsDir() && len(on.entries) > 1 {
			return syscall.ENOTEMPTY
		}
		f.drop(nd, newName)
	}
	delete(od.entries, name)
	delete(od.cookies, name)
	f.link(nd, newName, ino)
	if n := f.nodes[ino]; n.attr.IsDir() {
		n.entries[".."] = newParent
		od.attr.Nlink--
		nd.attr.Nlink++
	}
	return nil
}

func (f *memNS) Readlink(ctx context.Context, cred Cred, ino uint64) (string, error) {
	if err := f.enter(ctx, "readlink"); err != nil {
		return "", err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return "", err
	}
	if !n.attr.IsSymlink() {
		return "", syscall.EINVAL
	}
	return n.target, nil
}

func (f *memNS) ReadDir(ctx context.Context, cred Cred, ino, cookie uint64, max int, noAtime bool) ([]DirEntry, bool, error) {
	if err := f.enter(ctx, "readdir"); err != nil {
		return nil, false, err
	}
	defer f.mu.Unlock()
	d, err := f.dir(cred, ino, 4)
	if err != nil {
		return nil, false, err
	}
	if !noAtime {
		f.relatime(d)
	}
	out, eof := f.list(d, cookie, max)
	return out, eof, nil
}

// list returns directory d's entries after cookie, at most max of them,
// and whether they end the listing. f.mu is held.
func (f *memNS) list(d *memNode, cookie uint64, max int) ([]DirEntry, bool) {
	var out []DirEntry
	for name, c := range d.cookies {
		if c > cookie {
			e := d.entries[name]
			out = append(out, DirEntry{Name: name, Ino: e, Type: f.nodes[e].attr.Mode & modeType, Cookie: c})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cookie < out[j].Cookie })
	if len(out) > max {
		return out[:max], false
	}
	return out, true
}

func (f *memNS) OpenDir(ctx context.Context, cred Cred, ino uint64, flags int, max int) (Attr, []DirEntry, bool, error) {
	if err := f.enter(ctx, "opendir"); err != nil {
		return Attr{}, nil, false, err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	switch {
	case err != nil:
		return Attr{}, nil, false, err
	case !n.attr.IsDir():
		return Attr{}, nil, false, syscall.ENOTDIR
	case !may(cred, n.attr, 4):
		return Attr{}, nil, false, syscall.EACCES
	case flags&syscall.O_NOATIME != 0 && cred.UID != 0 && cred.UID != n.attr.UID:
		return Attr{}, nil, false, syscall.EPERM
	}
	ents, eof := f.list(n, 0, max)
	n.opens++
	return n.attr, ents, eof, nil
}

// relatime sets n's atime to now when relatime's rule is due, as the
// real service does for listings and OpTouchAtime.
func (f *memNS) relatime(n *memNode) {
	now := f.now()
	a := &n.attr
	if wire.RelatimeDue(wire.TimespecOf(a.Atime), wire.TimespecOf(a.Mtime), wire.TimespecOf(a.Ctime), wire.TimespecOf(now)) {
		a.Atime = now
	}
}

func (f *memNS) TouchAtime(ctx context.Context, cred Cred, ino uint64) (Attr, error) {
	if err := f.enter(ctx, "touch-atime"); err != nil {
		return Attr{}, err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return Attr{}, err
	}
	if n.opens == 0 && !may(cred, n.attr, 4) {
		return Attr{}, syscall.EACCES
	}
	f.relatime(n)
	return n.attr, nil
}

func (f *memNS) GetXattr(ctx context.Context, cred Cred, ino uint64, name string) ([]byte, error) {
	if err := f.enter(ctx, "getxattr"); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return nil, err
	}
	v, ok := n.xattrs[name]
	if !ok {
		return nil, syscall.ENODATA
	}
	return slices.Clone(v), nil
}

func (f *memNS) ListXattr(ctx context.Context, cred Cred, ino uint64) ([]string, error) {
	if err := f.enter(ctx, "listxattr"); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range n.xattrs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

func (f *memNS) SetXattr(ctx context.Context, cred Cred, ino uint64, name string, value []byte, flags int) error {
	if err := f.enter(ctx, "setxattr"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return err
	}
	if name == acl.XattrAccess {
		// Only the part of the ACL rules that keeps modes right for
		// programs that copy permissions as ACLs (cp -a): the ACL sets
		// the permission bits, and one they can say is not kept.
		// Named entries are kept but not enforced.
		a, err := acl.Decode(value)
		if err != nil {
			return syscall.EINVAL
		}
		if a != nil {
			perm, equiv := a.EquivMode()
			n.attr.Mode = n.attr.Mode&^0o777 | perm
			n.attr.Ctime = f.now()
			if equiv {
				delete(n.xattrs, name)
				return nil
			}
		}
	}
	_, exists := n.xattrs[name]
	switch {
	case flags&XattrCreate != 0 && exists:
		return syscall.EEXIST
	case flags&XattrReplace != 0 && !exists:
		return syscall.ENODATA
	}
	if n.xattrs == nil {
		n.xattrs = map[string][]byte{}
	}
	n.xattrs[name] = slices.Clone(value)
	return nil
}

func (f *memNS) RemoveXattr(ctx context.Context, cred Cred, ino uint64, name string) error {
	if err := f.enter(ctx, "removexattr"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return err
	}
	if _, ok := n.xattrs[name]; !ok {
		return syscall.ENODATA
	}
	delete(n.xattrs, name)
	return nil
}

func (f *memNS) Access(ctx context.Context, cred Cred, ino uint64, mask uint32) error {
	if err := f.enter(ctx, "access"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return err
	}
	if !may(cred, n.attr, mask&7) {
		return syscall.EACCES
	}
	return nil
}

func (f *memNS) StatFS(ctx context.Context) (StatFS, error) {
	if err := f.enter(ctx, "statfs"); err != nil {
		return StatFS{}, err
	}
	defer f.mu.Unlock()
	return StatFS{Bsize: 4096, Blocks: 1000, Bfree: 900, Bavail: 900, Files: 1 << 20, Ffree: 1<<20 - uint64(len(f.nodes)), NameLen: MaxNameLen}, nil
}

func (f *memNS) Open(ctx context.Context, cred Cred, ino uint64, flags int) (Attr, error) {
	if err := f.enter(ctx, "open"); err != nil {
		return Attr{}, err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return Attr{}, err
	}
	var want uint32
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		want = 4
	case syscall.O_WRONLY:
		want = 2
	default:
		want = 6
	}
	if flags&syscall.O_TRUNC != 0 {
		want |= 2
	}
	if !may(cred, n.attr, want) {
		return Attr{}, syscall.EACCES
	}
	if flags&syscall.O_TRUNC != 0 && n.attr.IsRegular() {
		f.truncate(n, 0)
	}
	n.opens++
	return n.attr, nil
}

// reclaim is an open that skips the permission check; an owner that
// never restarts never asks for it.
func (f *memNS) reclaim(ctx context.Context, cred Cred, ino uint64, flags int) (Attr, error) {
	if err := f.enter(ctx, "reclaim"); err != nil {
		return Attr{}, err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return Attr{}, err
	}
	n.opens++
	return n.attr, nil
}

func (f *memNS) Release(ctx context.Context, ino uint64, flags int) error {
	if err := f.enter(ctx, "release"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return err
	}
	n.opens--
	if n.opens == 0 && n.attr.Nlink == 0 {
		delete(f.nodes, ino)
	}
	return nil
}

func (f *memNS) Commit(ctx context.Context, cred Cred, ino uint64, size uint64, mtime time.Time) (Attr, error) {
	if err := f.enter(ctx, "commit"); err != nil {
		return Attr{}, err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return Attr{}, err
	}
	f.log.add("commit")
	n.attr.Size = max(n.attr.Size, size)
	n.attr.Mtime, n.attr.Ctime = mtime, mtime
	return n.attr, nil
}

func (f *memNS) Append(ctx context.Context, cred Cred, ino uint64, size, known uint64) (uint64, error) {
	if err := f.enter(ctx, "append"); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	n, err := f.node(ino)
	if err != nil {
		return 0, err
	}
	off := max(n.attr.Size, n.placed, known)
	n.placed = off + size
	return off, nil
}

// conflicts reports whether held (of client hc) and want (of client wc)
// cannot both be held: same kind, different holders, overlapping, one of
// them a write lock.
func conflicts(hc uint64, held Lock, wc uint64, want Lock) bool {
	return held.Kind == want.Kind && (hc != wc || held.Owner != want.Owner) &&
		(held.Type == LockWrite || want.Type == LockWrite) &&
		held.Start <= want.End && want.Start <= held.End
}

func (f *memNS) getLk(ctx context.Context, client, ino uint64, lk Lock) (Lock, error) {
	if err := f.enter(ctx, "getlk"); err != nil {
		return Lock{}, err
	}
	defer f.mu.Unlock()
	for _, l := range f.locks {
		if l.ino == ino && conflicts(l.client, l.lk, client, lk) {
			return l.lk, nil
		}
	}
	lk.Type = LockUnlock
	return lk, nil
}

// setLk applies lk as Linux does: a conflict with another holder is
// EAGAIN; otherwise the holder's own locks of the kind lose the range
// (split where they stick out) and, unless lk unlocks, lk takes it.
func (f *memNS) setLk(ctx context.Context, client, ino uint64, lk Lock) error {
	if err := f.enter(ctx, "setlk"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	if lk.Type != LockUnlock {
		for _, l := range f.locks {
			if l.ino == ino && conflicts(l.client, l.lk, client, lk) {
				return syscall.EAGAIN
			}
		}
	}
	out := f.locks[:0:0]
	for _, l := range f.locks {
		mine := l.ino == ino && l.client == client && l.lk.Kind == lk.Kind && l.lk.Owner == lk.Owner
		if !mine || l.lk.End < lk.Start || l.lk.Start > lk.End {
			out = append(out, l)
			continue
		}
		if l.lk.Start < lk.Start {
			left := l
			left.lk.End = lk.Start - 1
			out = append(out, left)
		}
		if l.lk.End > lk.End {
			right := l
			right.lk.Start = lk.End + 1
			out = append(out, right)
		}
	}
	if lk.Type != LockUnlock {
		out = append(out, memLock{client: client, ino: ino, lk: lk})
	}
	f.locks = out
	return nil
}

// endSession drops what a client held: its locks and its opens, as a
// node does when a client's session ends.
func (f *memNS) endSession(client uint64, opens map[uint64]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.locks = slices.DeleteFunc(f.locks, func(l memLock) bool { return l.client == client })
	for ino, k := range opens {
		if n, ok := f.nodes[ino]; ok {
			n.opens -= k
			if n.opens <= 0 && n.attr.Nlink == 0 {
				delete(f.nodes, ino)
			}
		}
	}
}

// memSession is one client's view of a memNS: locks are held by (client,
// owner), as the real service holds them by (session, owner), so two
// clients' equal owner numbers never meet.
type memSession struct {
	*memNS
	client uint64
}

func (s memSession) GetLk(ctx context.Context, ino uint64, lk Lock) (Lock, error) {
	return s.getLk(ctx, s.client, ino, lk)
}

func (s memSession) SetLk(ctx context.Context, ino uint64, lk Lock) error {
	return s.setLk(ctx, s.client, ino, lk)
}

// memData is Memory's data engine: each inode's bytes, with what has been
// persisted kept apart from what has only been written.
type memData struct {
	mu        sync.Mutex
	written   map[uint64][]byte
	persisted map[uint64][]byte
	forgets   map[uint64]int
	log       *eventLog
	hook      func(ctx context.Context, op string) error
}

var _ dataIO = (*memData)(nil)

func newMemData(log *eventLog) *memData {
	return &memData{written: map[uint64][]byte{}, persisted: map[uint64][]byte{}, forgets: map[uint64]int{}, log: log}
}

func (d *memData) enter(ctx context.Context, op string) error {
	if d.hook != nil {
		if err := d.hook(ctx, op); err != nil {
			return err
		}
	}
	d.mu.Lock()
	return nil
}

func (d *memData) ReadAt(ctx context.Context, ino uint64, p []byte, off uint64) error {
	if err := d.enter(ctx, "read"); err != nil {
		return err
	}
	defer d.mu.Unlock()
	clear(p)
	b := d.written[ino]
	if off < uint64(len(b)) {
		copy(p, b[off:])
	}
	return nil
}

func (d *memData) WriteAt(ctx context.Context, ino uint64, p []byte, off uint64) error {
	if err := d.enter(ctx, "write"); err != nil {
		return err
	}
	defer d.mu.Unlock()
	b := d.written[ino]
	if end := off + uint64(len(p)); end > uint64(len(b)) {
		b = append(b, make([]byte, end-uint64(len(b)))...)
	}
	copy(b[off:], p)
	d.written[ino] = b
	return nil
}

func (d *memData) ReadV(ctx context.Context, ino uint64, iov []IOVec) error {
	for _, v := range iov {
		if err := d.ReadAt(ctx, ino, v.Buf, v.Off); err != nil {
			return err
		}
	}
	return nil
}

func (d *memData) WriteV(ctx context.Context, ino uint64, iov []IOVec) error {
	for _, v := range iov {
		if err := d.WriteAt(ctx, ino, v.Buf, v.Off); err != nil {
			return err
		}
	}
	return nil
}

func (d *memData) Reserve(ctx context.Context, ino uint64, p []byte, off uint64) error {
	if err := d.enter(ctx, "reserve"); err != nil {
		return err
	}
	d.mu.Unlock()
	return nil
}

func (d *memData) Persist(ctx context.Context, ino uint64) error {
	if err := d.enter(ctx, "persist"); err != nil {
		return err
	}
	defer d.mu.Unlock()
	d.persisted[ino] = slices.Clone(d.written[ino])
	d.log.add("persist")
	return nil
}

func (d *memData) Allocate(ctx context.Context, ino uint64, mode uint32, off, length uint64) error {
	if err := d.enter(ctx, "allocate"); err != nil {
		return err
	}
	defer d.mu.Unlock()
	b := d.written[ino]
	if end := off + length; end > uint64(len(b)) && mode&FallocPunchHole == 0 {
		b = append(b, make([]byte, end-uint64(len(b)))...)
	}
	if mode&(FallocPunchHole|FallocZeroRange) != 0 {
		end := min(off+length, uint64(len(b)))
		if off < end {
			clear(b[off:end])
		}
	}
	d.written[ino] = b
	return nil
}

// trim drops the bytes at and beyond size (written and persisted: the
// real service frees the blocks durably).
func (d *memData) trim(ino, size uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range []map[uint64][]byte{d.written, d.persisted} {
		if b := m[ino]; uint64(len(b)) > size {
			m[ino] = b[:size]
		}
	}
}

// Seek answers as a file system without holes: the bytes written are
// data, and the only hole is past them.
func (d *memData) Seek(ctx context.Context, ino, off, end uint64, hole bool) (uint64, bool, error) {
	if err := d.enter(ctx, "seek"); err != nil {
		return 0, false, err
	}
	defer d.mu.Unlock()
	n := uint64(len(d.written[ino]))
	if hole {
		at := max(off, n)
		return at, at < end, nil
	}
	return off, off < min(n, end), nil
}

func (d *memData) TakeAhead(uint64) bool { return false }

func (d *memData) Forget(ino uint64) {
	d.mu.Lock()
	d.forgets[ino]++
	d.mu.Unlock()
}

func (d *memData) bytes(ino uint64) (written, persisted []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.written[ino]), slices.Clone(d.persisted[ino])
}

// eventLog records the order of persists, commits and truncates.
type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

// take returns the events so far, comma-separated, and forgets them.
func (l *eventLog) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.Join(l.ev, ",")
	l.ev = nil
	return s
}
