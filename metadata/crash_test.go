package metadata_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/plog"
)

var (
	crashRuns = flag.Int("crash.runs", 0, "kill points per crash test (default 150, 25 with -short)")
	crashSeed = flag.Uint64("crash.seed", 0, "replay one crash run with this seed")
)

// mnode is a model inode.
type mnode struct {
	dir  bool
	id   int
	ino  uint64
	kids map[string]*mnode // directories
}

// model is the namespace the acknowledged operations describe. It
// predicts each operation's errno in the order the service checks.
type model struct {
	root   *mnode
	nextID int
	links  map[int]int // files: entries naming each
}

func newModel() *model {
	return &model{root: &mnode{dir: true, ino: rootIno, kids: map[string]*mnode{}}, links: map[int]int{}}
}

type mdir struct {
	path string
	n    *mnode
}

func (m *model) dirs() []mdir {
	out := []mdir{{"", m.root}}
	for i := 0; i < len(out); i++ {
		d := out[i]
		for _, name := range slices.Sorted(mapKeys(d.n.kids)) {
			if k := d.n.kids[name]; k.dir {
				out = append(out, mdir{d.path + "/" + name, k})
			}
		}
	}
	return out
}

func mapKeys(m map[string]*mnode) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// under reports whether d is a or below it.
func under(d, a *mnode) bool {
	if d == a {
		return true
	}
	for _, k := range a.kids {
		if k.dir && under(d, k) {
			return true
		}
	}
	return false
}

// crashOp is one operation of a crash run.
type crashOp struct {
	kind       string
	p, q       mdir // parents (q: rename's or link's destination)
	name, dst  string
	flags      uint32
	src        *mnode // link's file
	hint       bool   // pass the inode hint
	wantErrno  syscall.Errno
	apply      func(ino uint64)
	descriptor string
}

var crashNames = []string{"a", "b", "c", "d"}

// next draws an operation and predicts its outcome.
func (m *model) next(rng *rand.Rand) crashOp {
	dirs := m.dirs()
	pick := func() mdir { return dirs[rng.IntN(len(dirs))] }
	name := func() string { return crashNames[rng.IntN(len(crashNames))] }
	op := crashOp{p: pick(), name: name()}
	kid := op.p.n.kids[op.name]
	switch r := rng.IntN(100); {
	case r < 25 || r < 40 && strings.Count(op.p.path, "/") < 3:
		op.kind = "create"
		if r >= 25 {
			op.kind = "mkdir"
		}
		if kid != nil {
			op.wantErrno = syscall.EEXIST
			break
		}
		isDir := op.kind == "mkdir"
		op.apply = func(ino uint64) {
			m.nextID++
			n := &mnode{dir: isDir, id: m.nextID, ino: ino}
			if isDir {
				n.kids = map[string]*mnode{}
			} else {
				m.links[n.id] = 1
			}
			op.p.n.kids[op.name] = n
		}
	case r < 50:
		op.kind = "link"
		var files []*mnode
		for _, d := range dirs {
			for _, k := range slices.Sorted(mapKeys(d.n.kids)) {
				if !d.n.kids[k].dir {
					files = append(files, d.n.kids[k])
				}
			}
		}
		if len(files) == 0 {
			return m.next(rng)
		}
		op.src = files[rng.IntN(len(files))]
		if kid != nil {
			op.wantErrno = syscall.EEXIST
			break
		}
		op.apply = func(uint64) {
			op.p.n.kids[op.name] = op.src
			m.links[op.src.id]++
		}
	case r < 65:
		op.kind = "unlink"
		op.hint = rng.IntN(2) == 0
		switch {
		case kid == nil:
			op.wantErrno = syscall.ENOENT
		case kid.dir:
			op.wantErrno = syscall.EISDIR
		default:
			op.apply = func(uint64) {
				delete(op.p.n.kids, op.name)
				m.links[kid.id]--
			}
		}
	case r < 75:
		op.kind = "rmdir"
		op.hint = rng.IntN(2) == 0
		switch {
		case kid == nil:
			op.wantErrno = syscall.ENOENT
		case !kid.dir:
			op.wantErrno = syscall.ENOTDIR
		case len(kid.kids) > 0:
			op.wantErrno = syscall.ENOTEMPTY
		default:
			op.apply = func(uint64) { delete(op.p.n.kids, op.name) }
		}
	default:
		op.kind = "rename"
		op.hint = rng.IntN(2) == 0
		op.q, op.dst = pick(), name()
		switch rng.IntN(10) {
		case 0:
			op.flags = wire.RenameNoReplace
		case 1:
			op.flags = wire.RenameExchange
		}
		op.wantErrno, op.apply = m.predictRename(op)
	}
	op.descriptor = fmt.Sprintf("%s %s/%s", op.kind, op.p.path, op.name)
	if op.kind == "rename" {
		op.descriptor += fmt.Sprintf(" -> %s/%s flags %d", op.q.path, op.dst, op.flags)
	}
	if op.kind == "link" {
		op.descriptor += fmt.Sprintf(" (to file %d)", op.src.id)
	}
	return op
}

func (m *model) predictRename(op crashOp) (syscall.Errno, func(uint64)) {
	s := op.p.n.kids[op.name]
	t := op.q.n.kids[op.dst]
	exchange := op.flags&wire.RenameExchange != 0
	sameDir := op.p.n == op.q.n
	switch {
	case s == nil:
		return syscall.ENOENT, nil
	case exchange && t == nil:
		return syscall.ENOENT, nil
	case op.flags&wire.RenameNoReplace != 0 && t != nil:
		return syscall.EEXIST, nil
	case !sameDir && s.dir && under(op.q.n, s):
		return syscall.EINVAL, nil
	case !sameDir && exchange && t.dir && under(op.p.n, t):
		return syscall.EINVAL, nil
	case s == t:
		return 0, nil
	case !exchange && t != nil && s.dir && !t.dir:
		return syscall.ENOTDIR, nil
	case !exchange && t != nil && !s.dir && t.dir:
		return syscall.EISDIR, nil
	case !exchange && t != nil && t.dir && len(t.kids) > 0:
		return syscall.ENOTEMPTY, nil
	}
	return 0, func(uint64) {
		if exchange {
			op.p.n.kids[op.name], op.q.n.kids[op.dst] = t, s
			return
		}
		delete(op.p.n.kids, op.name)
		if t != nil && !t.dir {
			m.links[t.id]--
		}
		op.q.n.kids[op.dst] = s
	}
}

// run executes op through cl.
func (op crashOp) run(ctx context.Context, cl *mdclient.Client) (uint64, error) {
	hint := func(n *mnode) uint64 {
		if op.hint && n != nil {
			return n.ino
		}
		return 0
	}
	switch op.kind {
	case "create":
		a, err := cl.Create(ctx, root, op.p.n.ino, op.name, 0o644, 0, false, 0)
		return a.Ino, err
	case "mkdir":
		a, err := cl.Mkdir(ctx, root, op.p.n.ino, op.name, 0o755)
		return a.Ino, err
	case "link":
		_, err := cl.Link(ctx, root, op.src.ino, op.p.n.ino, op.name)
		return 0, err
	case "unlink":
		return 0, cl.Unlink(ctx, root, op.p.n.ino, op.name, hint(op.p.n.kids[op.name]))
	case "rmdir":
		return 0, cl.Rmdir(ctx, root, op.p.n.ino, op.name, hint(op.p.n.kids[op.name]))
	default:
		return 0, cl.Rename(ctx, root, wire.RenameRequest{SrcParent: op.p.n.ino, SrcName: op.name,
			DstParent: op.q.n.ino, DstName: op.dst, Flags: op.flags, SrcIno: hint(op.p.n.kids[op.name])})
	}
}

// expect lists the model's paths with their kinds, and the paths that
// must name one inode (hard links).
func (m *model) expect() (map[string]bool, [][]string) {
	paths := map[string]bool{}
	byID := map[int][]string{}
	var walk func(path string, n *mnode)
	walk = func(path string, n *mnode) {
		for name, k := range n.kids {
			p := path + "/" + name
			paths[p] = k.dir
			if !k.dir {
				byID[k.id] = append(byID[k.id], p)
			}
			if k.dir {
				walk(p, k)
			}
		}
	}
	walk("", m.root)
	var groups [][]string
	for _, g := range byID {
		if len(g) > 1 {
			sort.Strings(g)
			groups = append(groups, g)
		}
	}
	return paths, groups
}

// TestCrash kills a node at random points of a random workload of
// cross-node operations (creates, links, unlinks, rmdirs, renames and
// exchanges), restarts it from a power-loss image of its region, lets
// the client's retries finish, and checks that every operation had
// exactly the outcome the model predicts (so none was lost or executed
// twice), that link counts and ".." agree, and that nothing leaked.
// Kill points are either a random fence of the victim's pmem (mode
// "fence") or a random node-to-node message to or from it (mode "peer").
func TestCrash(t *testing.T) {
	runs := *crashRuns
	if runs == 0 {
		runs = 150
		if testing.Short() {
			runs = 25
		}
	}
	for _, mode := range []string{"fence", "peer"} {
		t.Run(mode, func(t *testing.T) {
			if *crashSeed != 0 {
				crashRun(t, mode, *crashSeed)
				return
			}
			killed := 0
			for i := range runs {
				seed := uint64(i)*7919 + 17
				if mode == "peer" {
					seed += 1 << 32
				}
				// A subtest per run: its cluster (three regions and a
				// power-loss tracker) is released when the run ends, not
				// when the whole test does.
				passed := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					if crashRun(t, mode, seed) {
						killed++
					}
				})
				if !passed {
					t.Logf("replay with -run 'TestCrash/%s' -crash.seed %d", mode, seed)
					return
				}
			}
			t.Logf("%d runs, %d killed a node mid-workload", runs, killed)
			require.Greater(t, killed, runs/2, "most runs must reach their kill point")
		})
	}
}

// crashRun runs one seed; it reports whether the victim was killed.
func crashRun(t *testing.T, mode string, seed uint64) bool {
	rng := rand.New(rand.NewPCG(seed, seed>>32))
	const nodes, ops = 3, 40
	victim := rng.IntN(nodes)
	var tracker *pmem.Tracker
	c := metatest.Start(t, metatest.Config{Nodes: nodes, Partitions: 8, RegionSize: 8 << 20,
		Plog: plog.Options{SegmentSize: 16 << 10},
		Medium: func(i, size int) pmem.Medium {
			if i == victim {
				tracker = pmem.NewTracker(make([]byte, size))
				return tracker
			}
			return pmem.NewMemMedium(size)
		},
		Service: func(i int, cfg *metadata.Config) {
			cfg.ResolveInterval = 20 * time.Millisecond
		},
	})
	cl := c.Client()
	m := newModel()
	killAt := 2 + rng.IntN(ops-4)
	var (
		once     sync.Once
		restart  = make(chan struct{})
		crashRng = rand.New(rand.NewPCG(seed^0xabcdef, 1))
		armed    = false
		mu       sync.Mutex
		count    int
		target   = 1 + rng.IntN(6)
	)
	crash := func() {
		once.Do(func() {
			// Cut the node off first: whatever it sent until now depends
			// only on what was durable then, which the image holds (its
			// other goroutines keep running until Kill).
			c.Isolate(victim)
			img := tracker.CrashImage(crashRng)
			go func() {
				defer close(restart)
				c.Kill(victim)
				c.Restart(victim, img)
			}()
		})
	}
	victimID := metatest.NodeName(victim)
	switch mode {
	case "fence":
		tracker.OnFence(func(int) {
			mu.Lock()
			defer mu.Unlock()
			if armed {
				if count++; count == target {
					crash()
				}
			}
		})
	case "peer":
		c.Transport.SetHook(func(from, to cluster.NodeID, op wire.Op) error {
			if from == "" || (from != victimID && to != victimID) {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if armed {
				if count++; count == target {
					crash()
					return metatest.ErrDown
				}
			}
			return nil
		})
	}
	log := []string{fmt.Sprintf("victim %s, armed at op %d, kill at event %d of mode %s", metatest.NodeName(victim), killAt, target, mode)}
	for i := range ops {
		if i == killAt {
			mu.Lock()
			armed = true
			mu.Unlock()
		}
		op := m.next(rng)
		mu.Lock()
		log = append(log, fmt.Sprintf("%s (events %d)", op.descriptor, count))
		mu.Unlock()
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		ino, err := op.run(ctx, cl)
		cancel()
		if err != nil {
			e, ok := err.(syscall.Errno)
			if !ok {
				t.Fatalf("seed %d op %d %s: %v\n%s", seed, i, op.descriptor, err, strings.Join(log, "\n"))
			}
			if e != op.wantErrno {
				t.Fatalf("seed %d op %d %s: errno %v, model says %v\n%s", seed, i, op.descriptor, e, op.wantErrno, strings.Join(log, "\n"))
			}
			continue
		}
		if op.wantErrno != 0 {
			t.Fatalf("seed %d op %d %s: succeeded, model says %v\n%s", seed, i, op.descriptor, op.wantErrno, strings.Join(log, "\n"))
		}
		if op.apply != nil {
			op.apply(ino)
		}
	}
	mu.Lock()
	killed := count >= target
	armed = false
	mu.Unlock()
	if killed {
		<-restart
	}
	// Let recovery and lock resolution finish, then compare.
	require.Eventually(t, func() bool {
		for _, n := range c.Nodes {
			if n.Svc.Busy() {
				return false
			}
		}
		return true
	}, 20*time.Second, 5*time.Millisecond, "seed %d: transactions never finished", seed)
	tr, err := metatest.Walk(bg, cl)
	require.NoError(t, err)
	paths, groups := m.expect()
	got := map[string]bool{}
	for p, e := range tr.ByPath {
		got[p] = e.Attr.IsDir()
	}
	require.Equal(t, paths, got, "seed %d: namespace differs from the model\n%s", seed, strings.Join(log, "\n"))
	for _, g := range groups {
		for _, p := range g[1:] {
			require.Equal(t, tr.ByPath[g[0]].Attr.Ino, tr.ByPath[p].Attr.Ino, "seed %d: %v are links of one file", seed, g)
		}
	}
	require.Empty(t, tr.Check(), "seed %d", seed)
	require.Empty(t, c.Leaks(tr), "seed %d", seed)
	c.Close()
	return killed
}
