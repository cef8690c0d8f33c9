package client_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/client/proctest"
	"github.com/octofs/octofs/cluster"
)

// Kill tests (issue 12): three `octofs serve` processes on loopback; while
// workers run cross-node creates, renames, links, unlinks, mkdirs and
// rmdirs through the client library, a random node is killed with SIGKILL
// at a random instant and restarted. After each restart a checker resolves
// every operation that was not acknowledged (it must have happened entirely
// or not at all), then walks the namespace and compares it with the
// acknowledged operations: every acknowledged entry present, nothing else
// there, link counts equal to the entries naming each file, directories'
// link counts and ".." consistent. `make killtest` runs more kill points.

var (
	killPoints = flag.Int("client.killpoints", 0, "kill points of TestKillNodes (0: 200, or 10 with -short)")
	killSeed   = flag.Uint64("client.killseed", 0, "seed of TestKillNodes (0: random; a failure prints its seed)")
	killBudget = flag.Duration("client.killbudget", 0, "time after which TestKillNodes stops taking kill points (0: 2m, at most half the test timeout left, or none when -client.killpoints is given)")
)

// killWorkers is how many goroutines issue operations at once.
const killWorkers = 4

func TestKillNodes(t *testing.T) {
	points, budget := *killPoints, *killBudget
	if points == 0 {
		points = 200
		if testing.Short() {
			points = 10
		}
		if budget == 0 {
			// CI's whole run has 20 minutes on two cores; a kill point
			// costs about 2 s (a node restart). The namespace service's
			// in-process crash tests take hundreds of kill points per run;
			// make killtest takes KILLPOINTS here.
			budget = 2 * time.Minute
		}
	}
	// Leave the other tests of the package room within go test's timeout.
	if dl, ok := t.Deadline(); ok && budget > 0 {
		budget = max(min(budget, time.Until(dl)/2), 30*time.Second)
	}
	seed := *killSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay with -client.killseed=%d), %d kill points", seed, seed, points)
	rng := rand.New(rand.NewPCG(seed, 0x6b696c6c))
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(points)*30*time.Second+5*time.Minute)
	defer cancel()

	bin, err := proctest.Build(ctx, filepath.Join(".."), t.TempDir(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "octofs-killtest-"); err == nil {
			dir = d
			defer os.RemoveAll(d)
		}
	}
	// Hashed placement, so that files' creates, links and unlinks are
	// cross-node transactions too, not only directories'.
	tc, err := proctest.Start(ctx, proctest.Options{Binary: bin, Dir: dir, RegionSize: 128 << 20, FilePlacement: cluster.PlaceHashed,
		Args: []string{"--log-level", "warn"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Stop()
	defer func() {
		if t.Failed() {
			t.Logf("seed %d; node logs:\n%s", seed, tc.Logs(40))
		}
	}()
	c, err := client.New(ctx, client.Config{Admin: tc.AdminAddrs(), Token: tc.Token, Name: "killtest", OpTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	k := newKillModel(t, c)
	k.setup(ctx)
	start := time.Now()
	var unacked, acked, done int
	for point := range points {
		if budget > 0 && time.Since(start) > budget {
			t.Logf("time budget of %v spent after %d kill points", budget, point)
			break
		}
		done++
		// Run the workload for a random while, kill a random node in the
		// middle of it, restart it, and let the workers finish.
		k.mu.Lock()
		k.point = point
		k.mu.Unlock()
		pause := k.run(ctx, rng.Uint64())
		time.Sleep(time.Duration(10+rng.IntN(300)) * time.Millisecond)
		victim := rng.IntN(len(tc.Nodes))
		tc.Kill(victim)
		if err := tc.Restart(ctx, victim); err != nil {
			t.Fatalf("kill point %d: restart %s: %v", point, tc.Nodes[victim].ID, err)
		}
		// A little more work with every node up, then stop.
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
		a, u := pause()
		acked += a
		unacked += u
		if err := k.check(ctx); err != nil {
			t.Fatalf("kill point %d (node %s): %v", point, tc.Nodes[victim].ID, err)
		}
	}
	t.Logf("%d kill points in %v: %d operations acknowledged, %d not (each resolved all-or-nothing), %d entries at the end; %d half-done states seen in passing, %d operations done late",
		done, time.Since(start).Round(time.Second), acked, unacked, len(k.entries), k.halfSeen, k.late)
}

// killKey names a directory entry.
type killKey struct {
	dir  uint64
	name string
}

// killModel is what the acknowledged operations say the namespace holds
// under the test's directories, and the operations not acknowledged.
type killModel struct {
	t    *testing.T
	c    *client.Client
	root uint64
	// tops are the directories the workers work in, on different
	// partitions; subdirectories made by mkdir hang under them.
	tops []uint64

	mu      sync.Mutex
	entries map[killKey]killEntry
	pending []killOp
	seq     int
	// halfSeen counts checks that met a half-done operation that later
	// completed or rolled back; late counts operations found not done by
	// a check and done by a later one.
	halfSeen int
	late     int
	// history records every operation and its outcome, for failures.
	history []string
	point   int
}

// record adds an operation's outcome to the history.
func (k *killModel) record(op killOp, w int, err error) {
	k.mu.Lock()
	k.history = append(k.history, fmt.Sprintf("point %d worker %d %s %q@%#x -> %q@%#x ino %#x: %v",
		k.point, w, op.kind, op.from.name, op.from.dir, op.to.name, op.to.dir, op.ino, err))
	k.mu.Unlock()
}

// historyOf returns the recorded operations that mention name or ino.
func (k *killModel) historyOf(name string, ino uint64) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	q1, q2 := fmt.Sprintf("%q", name), fmt.Sprintf("%#x", ino)
	for _, h := range k.history {
		if strings.Contains(h, q1) || (ino != 0 && strings.Contains(h, q2)) {
			out = append(out, "  "+h)
		}
	}
	return strings.Join(out, "\n")
}

type killEntry struct {
	ino uint64
	dir bool
}

// killOp is an operation that was not acknowledged.
type killOp struct {
	kind     string
	from, to killKey
	ino      uint64
	err      error
	// age counts the checks that found it not done.
	age int
}

// maxDoubt is how many checks an unacknowledged operation found not done
// stays in doubt: a transaction whose coordinator decided it may still be
// applied later, when its dispatch is retried.
const maxDoubt = 10

func newKillModel(t *testing.T, c *client.Client) *killModel {
	return &killModel{t: t, c: c, entries: map[killKey]killEntry{}}
}

var root = client.RootCred

// setup makes the test's root and three top directories whose inodes land
// on different partitions (so, as the map spreads them, different nodes).
func (k *killModel) setup(ctx context.Context) {
	a, err := k.c.Mkdir(ctx, root, cluster.RootInode, "killtest", 0o755)
	if err != nil {
		k.t.Fatal(err)
	}
	k.root = a.Ino
	m := k.c.Map()
	owners := map[cluster.NodeID]bool{}
	for i := 0; len(k.tops) < 3 && i < 1000; i++ {
		name := fmt.Sprintf("top%d", i)
		owner, err := m.OwnerOfName(k.root, name, true)
		if err != nil || owners[owner.ID] {
			continue
		}
		d, err := k.c.Mkdir(ctx, root, k.root, name, 0o755)
		if err != nil {
			k.t.Fatal(err)
		}
		owners[owner.ID] = true
		k.tops = append(k.tops, d.Ino)
		k.entries[killKey{k.root, name}] = killEntry{ino: d.Ino, dir: true}
	}
	if len(k.tops) < 3 {
		k.t.Fatalf("found top directories on %d nodes only", len(k.tops))
	}
}

// run starts the workers; the returned pause stops them and reports how
// many operations were acknowledged and how many not.
func (k *killModel) run(ctx context.Context, seed uint64) (pause func() (acked, unacked int)) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ack, unack int
	for w := range killWorkers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ok, err := k.step(ctx, w, rng)
				mu.Lock()
				if err != nil {
					unack++
				} else if ok {
					ack++
				}
				mu.Unlock()
				if err != nil {
					// The outcome is unknown until the checker resolves
					// it: this worker waits for the next round.
					return
				}
			}
		})
	}
	return func() (int, int) {
		close(stop)
		wg.Wait()
		return ack, unack
	}
}

// step runs one random operation of worker w. It reports whether an
// operation was acknowledged, or the error of one that was not (which it
// recorded as pending).
func (k *killModel) step(ctx context.Context, w int, rng *rand.Rand) (bool, error) {
	k.mu.Lock()
	k.seq++
	fresh := fmt.Sprintf("w%d-%d", w, k.seq)
	busy := map[killKey]bool{}
	busyIno := map[uint64]bool{}
	for _, op := range k.pending {
		busy[op.from], busy[op.to], busyIno[op.ino] = true, true, true
	}
	var files, dirs []killKey
	for key, e := range k.entries {
		if !strings.HasPrefix(key.name, fmt.Sprintf("w%d-", w)) || busy[key] || busyIno[e.ino] {
			continue
		}
		if e.dir {
			dirs = append(dirs, key)
		} else {
			files = append(files, key)
		}
	}
	// Sorted, so that a seed replays the same choices.
	sortKeys(files)
	sortKeys(dirs)
	places := slices.Clone(k.tops)
	for _, d := range dirs {
		places = append(places, k.entries[d].ino)
	}
	k.mu.Unlock()
	to := killKey{places[rng.IntN(len(places))], fresh}
	op := killOp{to: to}
	var err error
	// Half the operations give up early (20 ms to 1 s), as a program
	// that is interrupted does: while a node is down they end
	// unacknowledged, with the request sent or not, executed or not.
	if rng.IntN(2) == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(20+rng.IntN(980))*time.Millisecond)
		defer cancel()
	}
	switch r := rng.IntN(100); {
	case r < 35 || len(files) == 0:
		op.kind = "create"
		var a client.Attr
		if a, err = k.c.Mknod(ctx, root, to.dir, to.name, syscall.S_IFREG|0o644, 0); err == nil {
			k.set(to, killEntry{ino: a.Ino})
		}
	case r < 55:
		op.kind, op.from = "rename", files[rng.IntN(len(files))]
		op.ino = k.get(op.from).ino
		if err = k.c.Rename(ctx, root, op.from.dir, op.from.name, to.dir, to.name, 0); err == nil {
			k.del(op.from)
			k.set(to, killEntry{ino: op.ino})
		}
	case r < 70:
		op.kind, op.from = "link", files[rng.IntN(len(files))]
		op.ino = k.get(op.from).ino
		if _, err = k.c.Link(ctx, root, op.ino, to.dir, to.name); err == nil {
			k.set(to, killEntry{ino: op.ino})
		}
	case r < 88:
		op.kind, op.from = "unlink", files[rng.IntN(len(files))]
		op.ino = k.get(op.from).ino
		if err = k.c.Unlink(ctx, root, op.from.dir, op.from.name); err == nil {
			k.del(op.from)
		}
	case r < 95 || len(dirs) == 0:
		// Directories only under the tops: one level.
		op.kind, op.to = "mkdir", killKey{k.tops[rng.IntN(len(k.tops))], fresh}
		var a client.Attr
		if a, err = k.c.Mkdir(ctx, root, op.to.dir, op.to.name, 0o755); err == nil {
			k.set(op.to, killEntry{ino: a.Ino, dir: true})
		}
	default:
		op.kind, op.from = "rmdir", dirs[rng.IntN(len(dirs))]
		op.ino = k.get(op.from).ino
		err = k.c.Rmdir(ctx, root, op.from.dir, op.from.name)
		switch {
		case err == nil:
			k.del(op.from)
		case errors.Is(err, syscall.ENOTEMPTY):
			return false, nil // an answer: nothing changed
		}
	}
	if op.kind == "create" || op.kind == "mkdir" {
		op.ino = k.get(op.to).ino
	}
	k.record(op, w, err)
	if err != nil {
		op.err = err
		k.mu.Lock()
		k.pending = append(k.pending, op)
		k.mu.Unlock()
		return false, err
	}
	return true, nil
}

func sortKeys(keys []killKey) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].dir != keys[j].dir {
			return keys[i].dir < keys[j].dir
		}
		return keys[i].name < keys[j].name
	})
}

func (k *killModel) get(key killKey) killEntry {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.entries[key]
}

func (k *killModel) set(key killKey, e killEntry) {
	k.mu.Lock()
	k.entries[key] = e
	k.mu.Unlock()
}

func (k *killModel) del(key killKey) {
	k.mu.Lock()
	delete(k.entries, key)
	k.mu.Unlock()
}

// lookup returns the inode key names, or 0 if there is none.
func (k *killModel) lookup(ctx context.Context, key killKey) (uint64, error) {
	a, err := k.c.Lookup(ctx, root, key.dir, key.name)
	if errors.Is(err, syscall.ENOENT) {
		return 0, nil
	}
	return a.Ino, err
}

// resolve settles each pending operation in model from what the namespace
// holds: it must have happened entirely or not at all. It returns the
// operations found not done, which stay in doubt (a later check may find
// them done), and those found done after an earlier check had found them
// not done.
func (k *killModel) resolve(ctx context.Context, model map[killKey]killEntry, pending []killOp) (doubt, late []killOp, _ error) {
	set := func(key killKey, e killEntry) { model[key] = e }
	del := func(key killKey) { delete(model, key) }
	for _, op := range pending {
		done := true
		what := fmt.Sprintf("unacknowledged %s (%v) %q -> %q", op.kind, op.err, op.from.name, op.to.name)
		var inFrom, inTo uint64
		var err error
		if op.from.name != "" {
			if inFrom, err = k.lookup(ctx, op.from); err != nil {
				return nil, nil, fmt.Errorf("%s: lookup: %w", what, err)
			}
		}
		if op.to.name != "" {
			if inTo, err = k.lookup(ctx, op.to); err != nil {
				return nil, nil, fmt.Errorf("%s: lookup: %w", what, err)
			}
		}
		switch op.kind {
		case "create", "mkdir":
			done = inTo != 0
			if done {
				set(op.to, killEntry{ino: inTo, dir: op.kind == "mkdir"})
			}
		case "unlink", "rmdir":
			switch inFrom {
			case 0:
				del(op.from)
			case op.ino:
				done = false
			default:
				return nil, nil, fmt.Errorf("%s: the name now names inode %#x, not %#x", what, inFrom, op.ino)
			}
		case "rename":
			switch {
			case inFrom == op.ino && inTo == 0:
				done = false
			case inFrom == 0 && inTo == op.ino:
				del(op.from)
				set(op.to, killEntry{ino: op.ino})
			default:
				return nil, nil, fmt.Errorf("%s: %w: the old name names %#x, the new one %#x (inode %#x)", what, errHalfDone, inFrom, inTo, op.ino)
			}
		case "link":
			if inFrom != op.ino {
				return nil, nil, fmt.Errorf("%s: %w: the source name names %#x, not %#x", what, errHalfDone, inFrom, op.ino)
			}
			switch inTo {
			case 0:
				done = false
			case op.ino:
				set(op.to, killEntry{ino: op.ino})
			default:
				return nil, nil, fmt.Errorf("%s: the new name names %#x, not %#x", what, inTo, op.ino)
			}
		}
		switch {
		case !done && op.age < maxDoubt:
			op.age++
			doubt = append(doubt, op)
		case done && op.age > 0:
			late = append(late, op)
		}
	}
	return doubt, late, nil
}

// errHalfDone marks a state an all-or-nothing operation must not be left
// in.
var errHalfDone = errors.New("half done")

// check resolves the pending operations, then walks the test's tree and
// compares it with the model. An operation that was not acknowledged may
// still be finishing (a transaction whose participant was down completes
// when it is back, by the coordinator's retries or recovery): while the
// comparison fails and such operations exist, the check is repeated, for
// at most checkSettle.
func (k *killModel) check(ctx context.Context) error {
	k.mu.Lock()
	base := make(map[killKey]killEntry, len(k.entries))
	for key, e := range k.entries {
		base[key] = e
	}
	pending := k.pending
	k.mu.Unlock()
	deadline := time.Now().Add(checkSettle)
	for {
		model := make(map[killKey]killEntry, len(base))
		for key, e := range base {
			model[key] = e
		}
		doubt, late, err := k.resolve(ctx, model, pending)
		if err == nil {
			err = k.walk(ctx, model)
		}
		if err == nil {
			k.mu.Lock()
			k.entries, k.pending = model, doubt
			k.late += len(late)
			k.mu.Unlock()
			for _, op := range late {
				k.t.Logf("done late: unacknowledged %s %q -> %q (ino %#x), found not done by %d checks before", op.kind, op.from.name, op.to.name, op.ino, op.age)
			}
			return nil
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			return err
		}
		if errors.Is(err, errHalfDone) {
			// Seen in passing: reads do not wait for a transaction's
			// locks, so its participants' halves may show one before the
			// other. Only a half state that stays is a failure.
			k.halfSeen++
			k.t.Logf("in passing (will look again): %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkSettle bounds how long unacknowledged operations may take to
// finish after every node is back.
const checkSettle = 15 * time.Second

// walk compares the test's tree with model: entries, link counts, "..".
func (k *killModel) walk(ctx context.Context, model map[killKey]killEntry) error {
	got := map[killKey]killEntry{}
	names := map[uint64]int{} // entries naming each file
	nlink := map[uint64]uint32{}
	type dirInfo struct{ parent, ino uint64 }
	dirs := []dirInfo{{cluster.RootInode, k.root}}
	for i := 0; i < len(dirs); i++ {
		d := dirs[i]
		subdirs := 0
		for cookie, eof := uint64(0), false; !eof; {
			ents, e, err := k.c.ReadDirPage(ctx, root, d.ino, cookie, 512)
			if err != nil {
				return fmt.Errorf("readdir %#x: %w", d.ino, err)
			}
			eof = e
			for _, ent := range ents {
				cookie = ent.Cookie
				a, err := k.c.Lookup(ctx, root, d.ino, ent.Name)
				if err != nil {
					return fmt.Errorf("lookup %q listed in %#x: %w", ent.Name, d.ino, err)
				}
				if a.Ino != ent.Ino {
					return fmt.Errorf("%q in %#x: readdir says inode %#x, lookup %#x", ent.Name, d.ino, ent.Ino, a.Ino)
				}
				got[killKey{d.ino, ent.Name}] = killEntry{ino: a.Ino, dir: a.IsDir()}
				if a.IsDir() {
					subdirs++
					dirs = append(dirs, dirInfo{d.ino, a.Ino})
				} else {
					names[a.Ino]++
					nlink[a.Ino] = a.Nlink
				}
			}
			if len(ents) == 0 && !eof {
				return fmt.Errorf("readdir %#x: an empty page before the end", d.ino)
			}
		}
		a, err := k.c.GetAttr(ctx, root, d.ino)
		if err != nil {
			return fmt.Errorf("getattr of directory %#x: %w", d.ino, err)
		}
		if want := uint32(2 + subdirs); a.Nlink != want {
			return fmt.Errorf("directory %#x has nlink %d with %d subdirectories (want %d)", d.ino, a.Nlink, subdirs, want)
		}
		if d.ino != k.root {
			up, err := k.c.Lookup(ctx, root, d.ino, "..")
			if err != nil || up.Ino != d.parent {
				return fmt.Errorf("directory %#x: \"..\" is %#x (%v), its parent is %#x", d.ino, up.Ino, err, d.parent)
			}
		}
	}
	for ino, n := range names {
		if nlink[ino] != uint32(n) {
			return fmt.Errorf("inode %#x has nlink %d but %d names", ino, nlink[ino], n)
		}
	}
	var problems []string
	for key, e := range model {
		if g, ok := got[key]; !ok || g != e {
			// Tell a listing that missed the entry from an entry that is
			// gone.
			a, err := k.c.Lookup(ctx, root, key.dir, key.name)
			ia, ierr := k.c.GetAttr(ctx, root, e.ino)
			problems = append(problems, fmt.Sprintf("acknowledged entry %q in %#x (inode %#x, dir %v) is missing or differs in the walk (found %+v, %v); a lookup of it gives inode %#x, %v; the inode: nlink %d, %v; its history:\n%s",
				key.name, key.dir, e.ino, e.dir, g, ok, a.Ino, err, ia.Nlink, ierr, k.historyOf(key.name, e.ino)))
		}
	}
	for key, g := range got {
		if _, ok := model[key]; !ok {
			problems = append(problems, fmt.Sprintf("entry %q in %#x (inode %#x) was never acknowledged nor left by an unacknowledged operation", key.name, key.dir, g.ino))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... %d more", len(problems)-10))
		}
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}
