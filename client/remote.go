package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
	"github.com/octofs/octofs/rdma/rpc"
)

// This file is the production backend of a Client: the cluster map
// followed over the admin API, one RDMA device, one rdma/rpc Pool (one
// RPC connection per node, hello with purpose "rpc"), the namespace client
// (metadata/mdclient) and the data engine (dataplane/dpclient) sharing that
// pool, and the session keep-alive.

// remote holds what connect opened, for Close.
type remote struct {
	c    *Client
	maps *cluster.RemoteMap
	dev  rdma.Device
	pd   rdma.PD
	pool *rpc.Pool
	md   *mdclient.Client
	data *dpclient.Engine

	// calls counts RPCs sent through the pool, by op, for Stats.
	calls rpcCounts
	// dpSeq numbers the data engine's RPCs (the namespace client numbers
	// its own, for at-most-once).
	dpSeq atomic.Uint64

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// connect follows the cluster map, opens the RDMA device and builds the
// namespace and data backends on them.
func (c *Client) connect(ctx context.Context) (err error) {
	r := &remote{c: c}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	admin := cluster.NewAdminClient(c.cfg.Admin, c.cfg.Token, c.cfg.AdminTLS)
	if r.maps, err = cluster.WatchRemote(ctx, admin, c.cfg.WatchWait, c.log); err != nil {
		return fmt.Errorf("%w: no admin API of %v answered: %v (check the addresses and that the nodes run)", ErrUnavailable, c.cfg.Admin, err)
	}
	if m := r.maps.Current(); !m.Initialized() {
		return fmt.Errorf("%w: the cluster has no map yet (wait for its first node to finish starting)", ErrUnavailable)
	} else if m.Redacted {
		return fmt.Errorf("%w: the admin API did not accept the token (use <data-dir>/token of a node of this cluster)", ErrConfig)
	}
	dcfg := c.cfg.Device
	if dcfg.Logger == nil {
		dcfg.Logger = c.log
	}
	if (c.cfg.Provider == "" || c.cfg.Provider == "soft") && dcfg.Addr == "" {
		dcfg.Addr = softAddrFor(c.cfg.Admin[0])
	}
	if r.dev, err = provider.Open(c.cfg.Provider, dcfg); err != nil {
		return fmt.Errorf("client: open the RDMA device: %w", err)
	}
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	hello, err := dataplane.EncodeHello(dataplane.Hello{Purpose: dataplane.PurposeRPC, Token: c.cfg.Token,
		ClientID: c.id, Incarnation: c.incarnation, Client: c.cfg.Name})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if r.pool, err = rpc.NewPool(rpc.PoolConfig{PD: r.pd, Client: rpc.ClientConfig{Device: r.dev, PrivateData: hello, Logger: c.log}}); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if r.md, err = mdclient.New(mdclient.Config{Maps: r.maps, Caller: mdCaller{r}, ClientID: c.id, Incarnation: c.incarnation,
		OpTimeout: c.cfg.OpTimeout, AttemptTimeout: min(5*time.Second, c.cfg.OpTimeout/2),
		OnRestart: r.restarted, Logger: c.log}); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if r.data, err = dpclient.New(dpclient.Config{Device: r.dev, Map: r.maps, RPC: dpCaller{r},
		Token: func() string { return c.cfg.Token }, ClientID: c.id, Incarnation: c.incarnation, Name: c.cfg.Name,
		Now: c.cfg.Now, Logger: c.log}); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	c.maps, c.ns, c.data, c.remote = r.maps, mdNamespace{r.md, r.data}, r.data, r
	var kctx context.Context
	kctx, r.stop = context.WithCancel(context.Background())
	r.wg.Go(func() { r.keepAlive(kctx) })
	c.shutdown = r.close
	return nil
}

// softAddrFor picks the soft NIC's address: the local address that routes
// to the admin host (nodes must reach it), any port.
func softAddrFor(admin string) string {
	hostport := strings.TrimPrefix(strings.TrimPrefix(admin, "https://"), "http://")
	if i := strings.IndexByte(hostport, '/'); i >= 0 {
		hostport = hostport[:i]
	}
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		return ""
	}
	conn, err := net.Dial("udp", hostport) // sends nothing: asks the kernel for a route
	if err != nil {
		return ""
	}
	defer conn.Close()
	return net.JoinHostPort(conn.LocalAddr().(*net.UDPAddr).IP.String(), "0")
}

// close releases everything connect opened, newest first. It ends the
// client's sessions only by going away: the nodes release its opens and
// locks when its lease runs out.
func (r *remote) close() error {
	if r.stop != nil {
		r.stop()
		r.wg.Wait()
	}
	var errs []error
	if r.data != nil {
		errs = append(errs, r.data.Close())
	}
	if r.pool != nil {
		errs = append(errs, r.pool.Close())
	}
	if r.pd != nil {
		errs = append(errs, r.pd.Close())
	}
	if r.dev != nil {
		errs = append(errs, r.dev.Close())
	}
	if r.maps != nil {
		r.maps.Close()
	}
	return errors.Join(errs...)
}

// call sends one RPC to node through the pool.
func (r *remote) call(ctx context.Context, node cluster.NodeInfo, op uint16, reqID uint64, payload []byte) ([]byte, error) {
	if node.RDMAAddr == "" {
		return nil, fmt.Errorf("%w: node %s has no RDMA address (started without --pmem?)", ErrUnavailable, node.ID)
	}
	r.calls.add(op)
	return r.pool.Call(ctx, node.RDMAAddr, op, reqID, payload)
}

// mdCaller is the namespace client's transport.
type mdCaller struct{ r *remote }

func (m mdCaller) Call(ctx context.Context, to cluster.NodeInfo, op uint16, reqID uint64, payload []byte) ([]byte, error) {
	return m.r.call(ctx, to, op, reqID, payload)
}

// dpCaller is the data engine's transport.
type dpCaller struct{ r *remote }

func (d dpCaller) Call(ctx context.Context, node cluster.NodeInfo, op uint16, req []byte) ([]byte, error) {
	return d.r.call(ctx, node, op, d.r.dpSeq.Add(1), req)
}

var (
	_ mdclient.Caller = mdCaller{}
	_ dpclient.Caller = dpCaller{}
	_ dataIO          = (*dpclient.Engine)(nil)
)

// keepAlive renews the client's session at every node that owns an inode
// it has open, every Config.KeepAlive or a third of the lease the nodes
// grant, whichever is shorter.
func (r *remote) keepAlive(ctx context.Context) {
	interval := r.c.cfg.KeepAlive
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		next := r.c.cfg.KeepAlive
		for _, node := range r.c.sessionNodes() {
			wg.Go(func() {
				kctx, cancel := context.WithTimeout(ctx, interval)
				defer cancel()
				lease, err := r.md.KeepAlive(kctx, node)
				if err != nil {
					r.c.log.Debug("session keep-alive failed", "node", node, "err", err)
					return
				}
				mu.Lock()
				if l := time.Duration(lease) * time.Millisecond / 3; l > 0 && l < next {
					next = l
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		interval = next
		t.Reset(interval)
	}
}

// restarted is the namespace client's news that node restarted (a new
// incarnation answered): the opens this client registered there are
// registered again (reclaimed), so that open files unlinked meanwhile
// survive. Locks held there are lost with the restart.
func (r *remote) restarted(node cluster.NodeID, incarnation uint64) {
	r.c.log.Info("node restarted; registering open files there again", "node", node, "incarnation", incarnation)
	r.wg.Go(func() { r.c.reclaim(node) })
}

// rpcCounts counts RPCs by op.
type rpcCounts struct {
	mu sync.Mutex
	m  map[uint16]uint64
}

func (r *rpcCounts) add(op uint16) {
	r.mu.Lock()
	if r.m == nil {
		r.m = make(map[uint16]uint64)
	}
	r.m[op]++
	r.mu.Unlock()
}

func (r *rpcCounts) snapshot() map[uint16]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[uint16]uint64, len(r.m))
	for k, v := range r.m {
		out[k] = v
	}
	return out
}

// sessionNodes are the nodes that own an inode this client has open.
func (c *Client) sessionNodes() []cluster.NodeID {
	m := c.maps.Current()
	seen := map[cluster.NodeID]bool{}
	var out []cluster.NodeID
	for _, ino := range c.opens.inodes() {
		n, err := m.OwnerOfInode(ino)
		if err != nil || seen[n.ID] {
			continue
		}
		seen[n.ID] = true
		out = append(out, n.ID)
	}
	return out
}

// reclaim registers every open File of an inode owned by node again.
func (c *Client) reclaim(node cluster.NodeID) {
	m := c.maps.Current()
	for _, f := range c.opens.files() {
		owner, err := m.OwnerOfInode(f.oi.ino)
		if err != nil || owner.ID != node || f.closed.Load() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.OpTimeout)
		_, err = c.ns.reclaim(ctx, f.cred, f.oi.ino, f.flags)
		cancel()
		if err != nil {
			c.log.Warn("could not register an open file with its restarted owner; if it was unlinked it may be gone",
				"node", node, "ino", f.oi.ino, "err", err)
		}
	}
}

// mdNamespace adapts the namespace client (metadata/mdclient) and the data
// engine's capacity to the client's namespace interface.
type mdNamespace struct {
	md   *mdclient.Client
	data capacity
}

// capacity is what StatFS needs of the data engine.
type capacity interface {
	Space(ctx context.Context) (dpclient.Space, error)
}

var (
	_ namespace   = mdNamespace{}
	_ knownRouter = mdNamespace{}
)

func (n mdNamespace) Lookup(ctx context.Context, cred Cred, parent uint64, name string) (Attr, error) {
	a, err := n.md.Lookup(ctx, wireCred(cred), parent, name)
	return fromWire(a), err
}

func (n mdNamespace) GetAttr(ctx context.Context, cred Cred, ino uint64) (Attr, error) {
	a, err := n.md.GetAttr(ctx, wireCred(cred), ino, 0)
	return fromWire(a), err
}

func (n mdNamespace) SetAttr(ctx context.Context, cred Cred, ino uint64, in SetAttrIn) (Attr, error) {
	a, err := n.md.SetAttr(ctx, wireCred(cred), wire.SetAttrRequest{Ino: ino, Valid: uint32(in.Valid), Mode: in.Mode,
		UID: in.UID, GID: in.GID, Size: in.Size, Atime: timespec(in.Atime), Mtime: timespec(in.Mtime), Ctime: timespec(in.Ctime)})
	return fromWire(a), err
}

func (n mdNamespace) Create(ctx context.Context, cred Cred, parent uint64, name string, mode uint32, flags int) (Attr, *Attr, error) {
	return n.make(ctx, wire.OpCreate, cred, wire.MakeRequest{Parent: parent, Name: name, Mode: mode, Open: true, OpenFlags: uint32(flags), Umask: cred.Umask})
}

// make sends a creation and converts its answer: the new inode, and the
// directory as the entry left it when the reply carries it.
func (n mdNamespace) make(ctx context.Context, op wire.Op, cred Cred, req wire.MakeRequest) (Attr, *Attr, error) {
	a, dir, err := n.md.Make(ctx, op, wireCred(cred), req)
	if err != nil {
		return Attr{}, nil, err
	}
	if dir == nil {
		return fromWire(a), nil, nil
	}
	d := fromWire(*dir)
	return fromWire(a), &d, nil
}

func (n mdNamespace) Tmpfile(ctx context.Context, cred Cred, parent uint64, mode uint32, flags int) (Attr, error) {
	a, err := n.md.TmpfileMasked(ctx, wireCred(cred), parent, mode, cred.Umask, uint32(flags))
	return fromWire(a), err
}

func (n mdNamespace) Make(ctx context.Context, cred Cred, parent uint64, name string, mode uint32, rdev uint64, target string) (Attr, *Attr, error) {
	switch mode & modeType {
	case syscall.S_IFDIR:
		return n.make(ctx, wire.OpMkdir, cred, wire.MakeRequest{Parent: parent, Name: name, Mode: wire.ModeDir | mode&modePerm, Umask: cred.Umask})
	case syscall.S_IFLNK:
		return n.make(ctx, wire.OpSymlink, cred, wire.MakeRequest{Parent: parent, Name: name, Mode: wire.ModeSymlink | 0o777, Target: target})
	}
	return n.make(ctx, wire.OpCreate, cred, wire.MakeRequest{Parent: parent, Name: name, Mode: mode, Rdev: rdev, Umask: cred.Umask})
}

func (n mdNamespace) Link(ctx context.Context, cred Cred, ino, newParent uint64, newName string) (Attr, error) {
	a, err := n.md.Link(ctx, wireCred(cred), ino, newParent, newName)
	return fromWire(a), err
}

func (n mdNamespace) Unlink(ctx context.Context, cred Cred, parent uint64, name string) error {
	return n.md.Unlink(ctx, wireCred(cred), parent, name, 0)
}

func (n mdNamespace) Rmdir(ctx context.Context, cred Cred, parent uint64, name string) error {
	return n.md.Rmdir(ctx, wireCred(cred), parent, name, 0)
}

func (n mdNamespace) RemoveKnown(ctx context.Context, cred Cred, parent uint64, name string, ino uint64, dir bool) (*Attr, error) {
	op := wire.OpUnlink
	if dir {
		op = wire.OpRmdir
	}
	d, err := n.md.Remove(ctx, op, wireCred(cred), parent, name, ino)
	if err != nil || d == nil {
		return nil, err
	}
	a := fromWire(*d)
	return &a, nil
}

func (n mdNamespace) RenameKnown(ctx context.Context, cred Cred, parent uint64, name string, ino, newParent uint64, newName string, flags uint32) error {
	return n.md.Rename(ctx, wireCred(cred), wire.RenameRequest{SrcParent: parent, SrcName: name, SrcIno: ino, DstParent: newParent, DstName: newName, Flags: flags})
}

func (n mdNamespace) Rename(ctx context.Context, cred Cred, parent uint64, name string, newParent uint64, newName string, flags uint32) error {
	return n.md.Rename(ctx, wireCred(cred), wire.RenameRequest{SrcParent: parent, SrcName: name, DstParent: newParent, DstName: newName, Flags: flags})
}

func (n mdNamespace) Readlink(ctx context.Context, cred Cred, ino uint64) (string, error) {
	return n.md.Readlink(ctx, wireCred(cred), ino)
}

func (n mdNamespace) ReadDir(ctx context.Context, cred Cred, ino, cookie uint64, max int, noAtime bool) ([]DirEntry, bool, error) {
	var flags uint32
	if noAtime {
		flags = wire.ReadDirNoAtime
	}
	ents, eof, err := n.md.ReadDirFlags(ctx, wireCred(cred), ino, cookie, 0, uint32(max), flags)
	if err != nil {
		return nil, false, err
	}
	return dirEntries(ents), eof, nil
}

func dirEntries(ents []wire.DirEntry) []DirEntry {
	out := make([]DirEntry, len(ents))
	// One allocation for the page's attributes, not one per entry.
	attrs := make([]Attr, len(ents))
	for i := range ents {
		e := &ents[i]
		out[i] = DirEntry{Name: e.Name, Ino: e.Ino, Type: e.Type, Cookie: e.Cookie}
		if e.HasAttr {
			attrs[i] = fromWire(e.Attr)
			out[i].Attr = &attrs[i]
		}
	}
	return out
}

func (n mdNamespace) TouchAtime(ctx context.Context, cred Cred, ino uint64) (Attr, error) {
	a, err := n.md.TouchAtime(ctx, wireCred(cred), ino, 0)
	return fromWire(a), err
}

func (n mdNamespace) GetXattr(ctx context.Context, cred Cred, ino uint64, name string) ([]byte, error) {
	return n.md.GetXattr(ctx, wireCred(cred), ino, name, 0)
}

func (n mdNamespace) ListXattr(ctx context.Context, cred Cred, ino uint64) ([]string, error) {
	return n.md.ListXattr(ctx, wireCred(cred), ino, 0)
}

func (n mdNamespace) SetXattr(ctx context.Context, cred Cred, ino uint64, name string, value []byte, flags int) error {
	return n.md.SetXattr(ctx, wireCred(cred), ino, name, value, uint32(flags))
}

func (n mdNamespace) RemoveXattr(ctx context.Context, cred Cred, ino uint64, name string) error {
	return n.md.RemoveXattr(ctx, wireCred(cred), ino, name)
}

func (n mdNamespace) Access(ctx context.Context, cred Cred, ino uint64, mask uint32) error {
	return n.md.Access(ctx, wireCred(cred), ino, mask)
}

// StatFS reports the data capacity the chunk services report (bytes in
// blocks of statfsBlock) and the inode counts the namespace services
// report, each summed over the nodes.
func (n mdNamespace) StatFS(ctx context.Context) (StatFS, error) {
	var (
		ns    wire.StatFSReply
		space dpclient.Space
		wg    sync.WaitGroup
		e1    error
		e2    error
	)
	wg.Go(func() { ns, e1 = n.md.StatFS(ctx) })
	wg.Go(func() { space, e2 = n.data.Space(ctx) })
	wg.Wait()
	if err := errors.Join(e1, e2); err != nil {
		return StatFS{}, err
	}
	// Free is every node's; available is what a writer can fill before
	// the fullest node (by its share of the partitions) answers ENOSPC,
	// as df should tell.
	return StatFS{Bsize: statfsBlock, Blocks: space.Total / statfsBlock, Bfree: space.Free / statfsBlock, Bavail: space.Writable / statfsBlock,
		Files: ns.Files, Ffree: ns.Ffree, NameLen: MaxNameLen}, nil
}

// statfsBlock is the block size StatFS counts in.
const statfsBlock = 4096

func (n mdNamespace) Open(ctx context.Context, cred Cred, ino uint64, flags int) (Attr, error) {
	a, err := n.md.Open(ctx, wireCred(cred), ino, 0, uint32(flags), false)
	return fromWire(a), err
}

func (n mdNamespace) OpenDir(ctx context.Context, cred Cred, ino uint64, flags int, max int) (Attr, []DirEntry, bool, error) {
	a, ents, eof, err := n.md.OpenDir(ctx, wireCred(cred), ino, 0, uint32(flags&syscall.O_NOATIME), 0, uint32(max))
	if err != nil {
		return Attr{}, nil, false, err
	}
	return fromWire(a), dirEntries(ents), eof, nil
}

func (n mdNamespace) reclaim(ctx context.Context, cred Cred, ino uint64, flags int) (Attr, error) {
	a, err := n.md.Open(ctx, wireCred(cred), ino, 0, uint32(flags&^syscall.O_TRUNC), true)
	return fromWire(a), err
}

func (n mdNamespace) Release(ctx context.Context, ino uint64, flags int) error {
	return n.md.Release(ctx, ino, uint32(flags))
}

// releaseTrimAhead in Release's flags asks the owner to free the blocks
// allocated past the end of the file once no open is left.
const releaseTrimAhead = int(wire.ReleaseTrimAhead)

// releaseAllocated in Release's flags says this client had blocks
// allocated that the file's size may not cover.
const releaseAllocated = int(wire.ReleaseAllocated)

func (n mdNamespace) Commit(ctx context.Context, cred Cred, ino uint64, size uint64, mtime time.Time) (Attr, error) {
	a, err := n.md.WriteCommit(ctx, wireCred(cred), ino, size, timespec(mtime))
	return fromWire(a), err
}

func (n mdNamespace) Append(ctx context.Context, cred Cred, ino uint64, size, known uint64) (uint64, error) {
	return n.md.Append(ctx, wireCred(cred), ino, size, known)
}

func (n mdNamespace) GetLk(ctx context.Context, ino uint64, lk Lock) (Lock, error) {
	got, err := n.md.GetLk(ctx, ino, wireLock(lk))
	if err != nil {
		return Lock{}, err
	}
	return fromWireLock(got), nil
}

func (n mdNamespace) SetLk(ctx context.Context, ino uint64, lk Lock) error {
	return n.md.SetLk(ctx, ino, wireLock(lk))
}

func wireCred(c Cred) wire.Cred { return wire.Cred{UID: c.UID, GID: c.GID, Groups: c.Groups} }

func timespec(t time.Time) wire.Timespec {
	if t.IsZero() {
		return wire.Timespec{}
	}
	return wire.TimespecOf(t)
}

// fromBirthTime is the birth time of a's inode: the zero time when the
// owner does not know it (wire zero). Access, modification and change
// times are always known: zero there is the epoch itself.
func fromBirthTime(t wire.Timespec) time.Time {
	if t == (wire.Timespec{}) {
		return time.Time{}
	}
	return t.Time()
}

func fromWire(a wire.Attr) Attr {
	return Attr{Ino: a.Ino, Gen: a.Gen, Mode: a.Mode, Nlink: a.Nlink, UID: a.UID, GID: a.GID, Rdev: a.Rdev,
		Size: a.Size, Blocks: a.Blocks, Blksize: a.Blksize,
		Atime: a.Atime.Time(), Mtime: a.Mtime.Time(), Ctime: a.Ctime.Time(), Btime: fromBirthTime(a.Btime)}
}

// Lock types on the wire are 0, 1, 2; fcntl's are F_RDLCK, F_WRLCK,
// F_UNLCK (the same numbers on Linux, converted anyway).
func wireLock(l Lock) wire.Lock {
	w := wire.Lock{Kind: wire.LockPOSIX, Owner: l.Owner, Start: l.Start, End: l.End, PID: l.PID}
	if l.Kind == LockFlock {
		w.Kind = wire.LockFlock
	}
	switch l.Type {
	case LockRead:
		w.Type = wire.LockRead
	case LockWrite:
		w.Type = wire.LockWrite
	default:
		w.Type = wire.LockUnlock
	}
	return w
}

func fromWireLock(w wire.Lock) Lock {
	l := Lock{Kind: LockPOSIX, Owner: w.Owner, Start: w.Start, End: w.End, PID: w.PID}
	if w.Kind == wire.LockFlock {
		l.Kind = LockFlock
	}
	switch w.Type {
	case wire.LockRead:
		l.Type = LockRead
	case wire.LockWrite:
		l.Type = LockWrite
	default:
		l.Type = LockUnlock
	}
	return l
}
