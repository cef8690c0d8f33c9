package main

import (
	"context"
	"testing"
	"time"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/cluster"
)

// TestBenchMetaWorkloads runs every operation workload of bench meta on an
// in-memory cluster: what each test does and counts, not how fast.
func TestBenchMetaWorkloads(t *testing.T) {
	c := client.NewMemory(nil).Client(client.Config{})
	defer c.Close()
	ctx := context.Background()
	top, err := c.Mkdir(ctx, client.RootCred, cluster.RootInode, "b", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	plan := &benchMetaPlan{duration: 50 * time.Millisecond, depths: []int{1, 4}, dirSize: 10,
		tests: map[string]bool{"create": true, "stat": true, "unlink": true, "mkdir": true, "readdir": true, "rename": true}}
	for _, d := range plan.depths {
		rs, err := benchMetaDepth(ctx, c, top.Ino, d, plan, false)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]benchOpResult{}
		for _, r := range rs {
			got[r.name] = r
			if r.ops == 0 || r.rate() <= 0 {
				t.Fatalf("%s at depth %d: %d ops", r.name, d, r.ops)
			}
			if d == 1 && len(r.lat) != r.ops {
				t.Fatalf("%s at depth 1: %d latencies for %d ops", r.name, len(r.lat), r.ops)
			}
		}
		for _, name := range []string{"create (1 partition)", "create (any partition)", "stat", "rename", "unlink", "mkdir (1 partition)", "readdir"} {
			if _, ok := got[name]; !ok {
				t.Fatalf("depth %d: no result for %s (have %v)", d, name, rs)
			}
		}
		// Every file create made was renamed or unlinked by the tests
		// after it, within their time.
		if got["unlink"].ops > got["create (1 partition)"].ops {
			t.Fatalf("unlinked %d files of %d created", got["unlink"].ops, got["create (1 partition)"].ops)
		}
	}
}

func TestBenchMetaNamesSinglePartition(t *testing.T) {
	m := &cluster.Map{Epoch: 1, Partitions: make([]cluster.NodeID, 64)}
	dir := cluster.InodeNumber(17, 5)
	n := &benchNames{m: m, dir: dir, prefix: "s", single: true}
	for range 50 {
		if p := m.NewInodePartition(dir, n.get(), false); p != 17 {
			t.Fatalf("single-partition name went to partition %d, want 17", p)
		}
	}
	// Directories spread whatever the file placement: a single-partition
	// mkdir needs a name that hashes to the directory's partition.
	m.FilePlacement = cluster.PlaceWithDirectory
	d := &benchNames{m: m, dir: dir, prefix: "d", single: true, dirs: true}
	for range 20 {
		name := d.get()
		if p := cluster.PartitionForName(dir, name, 64); p != 17 {
			t.Fatalf("single-partition directory name %q hashes to partition %d, want 17", name, p)
		}
	}
}

func TestBenchMetaPlan(t *testing.T) {
	o := &benchMetaOptions{duration: time.Second, depths: "1,16", tests: "null,stat", dirSize: 100}
	p, err := o.plan()
	if err != nil || len(p.depths) != 2 || !p.tests["stat"] || p.tests["create"] {
		t.Fatalf("plan = %+v, %v", p, err)
	}
	for name, o := range map[string]*benchMetaOptions{
		"bad depth": {duration: time.Second, depths: "0", tests: "null", dirSize: 1},
		"bad test":  {duration: time.Second, depths: "1", tests: "nope", dirSize: 1},
		"short":     {duration: time.Millisecond, depths: "1", tests: "null", dirSize: 1},
	} {
		if _, err := o.plan(); err == nil {
			t.Fatalf("%s: plan accepted", name)
		}
	}
}
