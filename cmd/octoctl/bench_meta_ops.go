package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/rdma/rpc"
)

// The workloads of `octoctl bench meta`. Every operation runs through the
// client library's low-level API as root, in a directory of the run's own,
// with depth goroutines each issuing one operation at a time. Names of
// "single-partition" tests are chosen so that the new inode lands on the
// directory's own partition (Map.NewInodePartition), the case the issue's
// create target is about; the cross-partition create spreads over the
// cluster where the map's file placement hashes files (with the default
// placement every file lands in its directory's partition).

// benchOpResult is one test at one depth.
type benchOpResult struct {
	name  string
	depth int
	ops   int
	el    time.Duration
	rpcs  uint64
	lat   []time.Duration // depth 1 only
	// null is the null-RPC rate at the same depth, measured in turns
	// with the operation.
	null float64
}

func (r benchOpResult) rate() float64 {
	if r.el <= 0 {
		return 0
	}
	return float64(r.ops) / r.el.Seconds()
}

func (r benchOpResult) rpcsPerOp() float64 {
	if r.ops == 0 {
		return 0
	}
	return float64(r.rpcs) / float64(r.ops)
}

// errBenchDone ends a worker whose test has run out of work (unlink of
// every file created).
var errBenchDone = errors.New("no more work")

// benchSlices is how many turns an operation and its null-RPC baseline
// take, each running for a slice of the test's time: both figures come
// from the same spans of time, so a change in the machine's load moves
// them alike.
const benchSlices = 5

// runBenchPair measures op at depth in turns with null RPCs at the same
// depth (if null is set), and returns op's result and the null-RPC rate.
func runBenchPair(ctx context.Context, c *client.Client, name string, depth int, d time.Duration,
	op, null func(ctx context.Context, worker, i int) error) (benchOpResult, float64, error) {
	total := benchOpResult{name: name, depth: depth}
	var nullOps int
	var nullTime time.Duration
	base := 0
	for range benchSlices {
		r, err := runBenchOps(ctx, c, name, depth, d/benchSlices, func(ctx context.Context, w, i int) error {
			return op(ctx, w, base+i)
		})
		if err != nil && !(errors.Is(err, errNoOps) && total.ops > 0) {
			return total, 0, err
		}
		total.ops += r.ops
		total.el += r.el
		total.rpcs += r.rpcs
		total.lat = append(total.lat, r.lat...)
		base += r.ops + 1
		if null != nil {
			nr, err := runBenchOps(ctx, c, "null", depth, d/benchSlices, null)
			if err != nil {
				return total, 0, err
			}
			nullOps += nr.ops
			nullTime += nr.el
		}
		if r.ops == 0 {
			break // out of work (unlink, rename): the time so far counts
		}
	}
	var nullRate float64
	if nullTime > 0 {
		nullRate = float64(nullOps) / nullTime.Seconds()
	}
	return total, nullRate, nil
}

// errNoOps is runBenchOps's error when no operation completed.
var errNoOps = errors.New("no operation completed")

// runBenchOps runs op from depth workers until d has passed, each calling
// op(ctx, worker, i) with its own count i, and returns the result.
func runBenchOps(ctx context.Context, c *client.Client, name string, depth int, d time.Duration,
	op func(ctx context.Context, worker, i int) error) (benchOpResult, error) {
	r := benchOpResult{name: name, depth: depth}
	before := c.Stats().TotalRPCs()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		total atomic.Int64
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range depth {
		wg.Go(func() {
			var lat []time.Duration
			for i := 0; time.Now().Before(deadline); i++ {
				t0 := time.Now()
				err := op(ctx, w, i)
				if errors.Is(err, errBenchDone) {
					break
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s (worker %d, op %d): %w", name, w, i, err)
					}
					mu.Unlock()
					return
				}
				if depth == 1 {
					lat = append(lat, time.Since(t0))
				}
				total.Add(1)
			}
			mu.Lock()
			r.lat = append(r.lat, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	r.el = time.Since(start)
	r.ops = int(total.Load())
	r.rpcs = c.Stats().TotalRPCs() - before
	if first != nil {
		return r, first
	}
	if r.ops == 0 {
		return r, fmt.Errorf("%s at depth %d: %w", name, depth, errNoOps)
	}
	return r, nil
}

// benchNames hands out names in dir: with single, only names whose new
// inode (a directory if dirs) goes to dir's own partition.
type benchNames struct {
	m      *cluster.Map
	dir    uint64
	prefix string
	single bool
	dirs   bool
	next   atomic.Uint64
}

func (n *benchNames) get() string {
	for {
		name := n.prefix + strconv.FormatUint(n.next.Add(1), 36)
		if !n.single || n.m.NewInodePartition(n.dir, name, n.dirs) == cluster.PartitionOf(n.dir) {
			return name
		}
	}
}

// benchFiles collects what a create test made, for the tests after it.
type benchFiles struct {
	mu    sync.Mutex
	names []string
	inos  []uint64
}

func (f *benchFiles) add(name string, ino uint64) {
	f.mu.Lock()
	f.names = append(f.names, name)
	f.inos = append(f.inos, ino)
	f.mu.Unlock()
}

// nullProbe times null RPCs to one node, for runLatProbes.
type nullProbe struct {
	c    *client.Client
	node cluster.NodeID
}

func (p *nullProbe) roundTrips(ctx context.Context, until time.Time, samples []time.Duration) ([]time.Duration, error) {
	for {
		t0 := time.Now()
		if err := p.c.Ping(ctx, p.node); err != nil {
			return nil, fmt.Errorf("null RPC to %s: %w", p.node, err)
		}
		samples = append(samples, time.Since(t0))
		if !time.Now().Before(until) {
			return samples, nil
		}
	}
}

func (p *nullProbe) close(context.Context) error { return nil }

// nullRPCSize is the size of a null request on the wire: the RPC header
// and the namespace request's envelope, as the client sends it.
func nullRPCSize() int {
	h := wire.Header{Epoch: 1, ClientID: 1, Incarnation: 1, Seq: 1, LowSeq: 1}
	return rpc.HeaderSize + len(wire.EncodeRequest(wire.OpNull, &h, &wire.Empty{}))
}

// benchMeta runs the plan on c and returns the tables.
func benchMeta(ctx context.Context, c *client.Client, tcpAddr string, plan *benchMetaPlan, where string) ([]*benchTable, error) {
	root := client.RootCred
	m := c.Map()
	var nodes []cluster.NodeID
	for _, n := range m.Nodes {
		if n.State == cluster.StateUp && n.RDMAAddr != "" {
			nodes = append(nodes, n.ID)
		}
	}
	if len(nodes) == 0 {
		return nil, errors.New("the cluster has no node up with an RDMA address")
	}
	base := fmt.Sprintf("octoctl-bench-meta-%x", rand.Uint32())
	top, err := c.Mkdir(ctx, root, cluster.RootInode, base, 0o755)
	if err != nil {
		return nil, fmt.Errorf("make the benchmark's directory /%s: %w", base, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		c.FS(root).WithContext(cctx).RemoveAll("/" + base)
	}()
	// Warm every connection up: the first call to a node dials it.
	for _, n := range nodes {
		if plan.tests["null"] {
			if err := c.Ping(ctx, n); err != nil {
				return nil, fmt.Errorf("null RPC to %s: %w", n, err)
			}
		}
	}
	if _, err := c.GetAttr(ctx, root, top.Ino); err != nil {
		return nil, err
	}

	var tables []*benchTable
	var null func(ctx context.Context, w, i int) error
	pingOne := false
	nullRates := map[int]float64{}
	if plan.tests["null"] {
		t, err := benchNullLatency(ctx, c, nodes, tcpAddr, plan)
		if err != nil {
			return nil, err
		}
		tables = append(tables, t)
		null = func(ctx context.Context, w, i int) error { return c.Ping(ctx, nodes[(w+i)%len(nodes)]) }
		pingOne = true
		for _, d := range plan.depths {
			r, err := runBenchOps(ctx, c, "null", d, plan.duration, null)
			if err != nil {
				return nil, err
			}
			nullRates[d] = r.rate()
		}
	}

	var results []benchOpResult
	for _, d := range plan.depths {
		rs, err := benchMetaDepth(ctx, c, top.Ino, d, plan, pingOne)
		if err != nil {
			return nil, err
		}
		results = append(results, rs...)
	}

	t := &benchTable{
		Title:   "bench meta: namespace operations through the client library, beside a null RPC at the same depth",
		Columns: []string{"operation", "in flight", "ops/s", "null RPC ops/s", "vs null", "RPCs/op", "p50 µs", "target"},
	}
	targets := map[string]float64{"stat": 0.7, "create (1 partition)": 0.5}
	for _, r := range results {
		p50 := "-"
		if len(r.lat) > 0 {
			p50 = fmt.Sprintf("%.1f", summarize(r.lat).p50)
		}
		target := "-"
		if v, ok := targets[r.name]; ok {
			target = fmt.Sprintf(">= %.1fx", v)
		}
		nullCell := "-"
		if r.null > 0 {
			nullCell = figure(r.null)
		}
		t.add(r.name, strconv.Itoa(r.depth), figure(r.rate()), nullCell, ratio(r.rate(), r.null),
			fmt.Sprintf("%.2f", r.rpcsPerOp()), p50, target)
	}
	t.note("measured against %s, %v per test and depth; every figure is from this run on this machine", where, plan.duration)
	t.note("each operation and its null-RPC rate take %d turns over the same time; the null RPCs go to the node owning the test's directory", benchSlices)
	t.note("create is mknod of a regular file (one request; open(O_CREAT) adds the open's registration)")
	if p := c.Map().Placement(); p == cluster.PlaceWithDirectory {
		t.note("file placement %q: every file is created in its directory's partition, so \"any partition\" creates are one-partition too", p)
	} else {
		t.note("file placement %q: a file's inode goes to a partition chosen by its name", p)
	}
	t.note("readdir lists a %d-entry directory in one request; rename and unlink work on the files create made", plan.dirSize)
	tables = append(tables, t)

	if len(plan.depths) > 1 {
		lo, hi := plan.depths[0], plan.depths[len(plan.depths)-1]
		s := &benchTable{
			Title:   fmt.Sprintf("bench meta: %d in flight against %d", hi, lo),
			Columns: []string{"operation", fmt.Sprintf("ops/s at %d", lo), fmt.Sprintf("ops/s at %d", hi), "ratio", "target"},
		}
		if plan.tests["null"] {
			s.add("null RPC", figure(nullRates[lo]), figure(nullRates[hi]), ratio(nullRates[hi], nullRates[lo]), "-")
		}
		for _, r := range results {
			if r.depth != lo {
				continue
			}
			for _, r2 := range results {
				if r2.depth == hi && r2.name == r.name {
					s.add(r.name, figure(r.rate()), figure(r2.rate()), ratio(r2.rate(), r.rate()), ">= 3.0x")
				}
			}
		}
		tables = append(tables, s)
	}
	return tables, nil
}

// benchNullLatency times null RPCs one at a time, taking turns with a TCP
// ping-pong of the same size.
func benchNullLatency(ctx context.Context, c *client.Client, nodes []cluster.NodeID, tcpAddr string, plan *benchMetaPlan) (*benchTable, error) {
	size := nullRPCSize()
	tcp, err := newTCPLatProbe(ctx, tcpAddr, size)
	if err != nil {
		return nil, err
	}
	probes := []latProbe{&nullProbe{c: c, node: nodes[0]}, tcp}
	defer closeProbes(ctx, probes)
	samples, err := runLatProbes(ctx, probes, min(plan.duration/5, 200*time.Millisecond), plan.duration)
	if err != nil {
		return nil, err
	}
	null, base := summarize(samples[0]), summarize(samples[1])
	t := &benchTable{
		Title:   "bench meta: null RPC round trip, one at a time, beside TCP request/response of the same size (µs)",
		Columns: []string{"test", "size", "p50", "p99", "samples", "vs TCP p50", "target"},
	}
	t.add("null RPC to "+string(nodes[0]), humanBytes(size), fmt.Sprintf("%.1f", null.p50), fmt.Sprintf("%.1f", null.p99),
		strconv.Itoa(null.n), ratio(null.p50, base.p50), "<= 1.3x")
	t.add("TCP ping-pong", humanBytes(size), fmt.Sprintf("%.1f", base.p50), fmt.Sprintf("%.1f", base.p99),
		strconv.Itoa(base.n), "1.00x", "-")
	t.note("the two take turns for %v in all (as bench rdma's latency tests do); TCP runs between this process and a child process", plan.duration)
	return t, nil
}

// benchMetaDepth runs every operation test at one depth, in a directory
// of its own under top.
func benchMetaDepth(ctx context.Context, c *client.Client, top uint64, depth int, plan *benchMetaPlan, ping bool) ([]benchOpResult, error) {
	root := client.RootCred
	m := c.Map()
	dir, err := c.Mkdir(ctx, root, top, "depth-"+strconv.Itoa(depth), 0o755)
	if err != nil {
		return nil, err
	}
	// The baseline: null RPCs to the node that owns the directory, where
	// the single-partition operations go.
	var null func(ctx context.Context, w, i int) error
	if ping {
		owner, err := m.OwnerOfInode(dir.Ino)
		if err != nil {
			return nil, err
		}
		null = func(ctx context.Context, _, _ int) error { return c.Ping(ctx, owner.ID) }
	}
	var out []benchOpResult
	measure := func(name string, op func(ctx context.Context, w, i int) error) error {
		r, nr, err := runBenchPair(ctx, c, name, depth, plan.duration, op, null)
		if err == nil {
			r.null = nr
			out = append(out, r)
		}
		return err
	}
	single := &benchNames{m: m, dir: dir.Ino, prefix: "s", single: true}
	var files benchFiles
	needFiles := plan.tests["create"] || plan.tests["stat"] || plan.tests["rename"] || plan.tests["unlink"]
	if needFiles {
		name := "create (1 partition)"
		if !plan.tests["create"] {
			name = "create (setup)"
		}
		create := func(ctx context.Context, _, _ int) error {
			n := single.get()
			a, err := c.Mknod(ctx, root, dir.Ino, n, syscall.S_IFREG|0o644, 0)
			if err == nil {
				files.add(n, a.Ino)
			}
			return err
		}
		var err error
		if plan.tests["create"] {
			err = measure(name, create)
		} else {
			_, err = runBenchOps(ctx, c, name, depth, plan.duration, create)
		}
		if err != nil {
			return nil, err
		}
	}
	if plan.tests["create"] {
		cross := &benchNames{m: m, dir: dir.Ino, prefix: "x"}
		if err := measure("create (any partition)", func(ctx context.Context, _, _ int) error {
			_, err := c.Mknod(ctx, root, dir.Ino, cross.get(), syscall.S_IFREG|0o644, 0)
			return err
		}); err != nil {
			return nil, err
		}
	}
	if plan.tests["stat"] {
		if err := measure("stat", func(ctx context.Context, w, i int) error {
			_, err := c.GetAttr(ctx, root, files.inos[(w*7919+i)%len(files.inos)])
			return err
		}); err != nil {
			return nil, err
		}
	}
	// The workers rename, then unlink, the files create made, each file
	// once: next hands them out.
	var next atomic.Int64
	share := func() (int, bool) {
		k := int(next.Add(1)) - 1
		return k, k < len(files.names)
	}
	renamed := slices.Clone(files.names)
	if plan.tests["rename"] {
		if err := measure("rename", func(ctx context.Context, w, i int) error {
			k, ok := share()
			if !ok {
				return errBenchDone
			}
			to := files.names[k] + ".r"
			if err := c.Rename(ctx, root, dir.Ino, files.names[k], dir.Ino, to, 0); err != nil {
				return err
			}
			renamed[k] = to
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if plan.tests["unlink"] {
		next.Store(0)
		if err := measure("unlink", func(ctx context.Context, w, i int) error {
			k, ok := share()
			if !ok {
				return errBenchDone
			}
			return c.Unlink(ctx, root, dir.Ino, renamed[k])
		}); err != nil {
			return nil, err
		}
	}
	if plan.tests["mkdir"] {
		dirs := &benchNames{m: m, dir: dir.Ino, prefix: "d", single: true, dirs: true}
		if err := measure("mkdir (1 partition)", func(ctx context.Context, _, _ int) error {
			_, err := c.Mkdir(ctx, root, dir.Ino, dirs.get(), 0o755)
			return err
		}); err != nil {
			return nil, err
		}
	}
	if plan.tests["readdir"] {
		list, err := c.Mkdir(ctx, root, dir.Ino, "list", 0o755)
		if err != nil {
			return nil, err
		}
		names := &benchNames{m: m, dir: list.Ino, prefix: "e"}
		for range plan.dirSize {
			if _, err := c.Mknod(ctx, root, list.Ino, names.get(), syscall.S_IFREG|0o644, 0); err != nil {
				return nil, err
			}
		}
		if err := measure("readdir", func(ctx context.Context, _, _ int) error {
			ents, _, err := c.ReadDirPage(ctx, root, list.Ino, 0, plan.dirSize+1)
			if err == nil && len(ents) != plan.dirSize {
				err = fmt.Errorf("listed %d entries of %d", len(ents), plan.dirSize)
			}
			return err
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}
