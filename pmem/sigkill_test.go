//go:build linux

package pmem_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
)

// The SIGKILL test re-executes the test binary as a child that runs a
// workload against a region file; the parent kills it by PID while it
// commits, then reopens the file and checks recovery, fsck and the
// workload's invariants.
const (
	childEnv     = "OCTOFS_PMEM_SIGKILL_CHILD"
	accounts     = 16
	startBalance = 1000
	workers      = 2
	rootCounter  = 10 // roots[rootCounter+g]: commits of worker g
	rootChurn    = 2  // roots[rootChurn+g]: worker g's current churn record
)

var killFormat = pmem.FormatOptions{BlockSize: 512, RecordSize: 128, LogSlots: 4, LogSlotSize: 2048, NumRecords: 64}

func TestSIGKILLRecovery(t *testing.T) {
	if path := os.Getenv(childEnv); path != "" {
		runKillChild(path)
		os.Exit(0)
	}
	path := filepath.Join(t.TempDir(), "region")
	r, err := pmem.Create(path, 512<<10, killFormat, pmem.Options{})
	require.NoError(t, err)
	tx, err := r.Begin(t.Context())
	require.NoError(t, err)
	for i := range accounts {
		id, err := tx.AllocRecord(1)
		require.NoError(t, err)
		require.Equal(t, pmem.RecordID(i+1), id)
		rec, _ := r.Record(id)
		require.NoError(t, tx.Write8(rec.PayloadOff, startBalance))
	}
	require.NoError(t, tx.Commit())
	require.NoError(t, r.Close())

	const rounds = 5
	for round := range rounds {
		reported := killChildMidWorkload(t, path, 60+round*40)
		r, err := pmem.Open(path, pmem.Options{})
		require.NoError(t, err, "recovery after SIGKILL (round %d)", round)
		rep := pmem.Check(r)
		require.True(t, rep.Clean(), "fsck after SIGKILL:\n%s", rep)
		verifyKillInvariants(t, r, reported)
		t.Logf("round %d: child killed after %v reported commits; recovery replayed %d transaction(s); fsck clean; %d/%d records, %d blocks in use",
			round, reported, rep.Recovery.Replayed, rep.Stats.RecordsUsed, rep.Stats.Records, rep.Stats.BlocksUsed)
		require.NoError(t, r.Close())
	}
	rep, err := pmem.CheckFile(context.Background(), path, false, nil)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "offline fsck:\n%s", rep)
}

// killChildMidWorkload starts the child, waits until it has reported at
// least minCommits commits, SIGKILLs it and returns the last commit count
// each worker reported.
func killChildMidWorkload(t *testing.T, path string, minCommits int) [workers]uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSIGKILLRecovery$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	var once sync.Once
	reap := func() {
		once.Do(func() {
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
	t.Cleanup(reap) // the child never outlives the test, even on failure

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var reported [workers]uint64
	total := 0
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	for total < minCommits {
		select {
		case l, ok := <-lines:
			if !ok {
				reap()
				t.Fatalf("child exited before it was killed: %s", stderr.String())
			}
			var g int
			var n uint64
			if _, err := fmt.Sscanf(l, "committed %d %d", &g, &n); err != nil || g < 0 || g >= workers {
				continue
			}
			reported[g] = n
			total++
		case <-deadline.C:
			reap()
			t.Fatalf("child reported only %d commits in 2 minutes: %s", total, stderr.String())
		}
	}
	require.NoError(t, syscall.Kill(cmd.Process.Pid, syscall.SIGKILL))
	err = cmd.Wait()
	once.Do(func() {})
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "child: %v", err)
	ws, _ := exit.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child ended with %v, not SIGKILL: %s", err, stderr.String())
	for range lines { // drain what the child wrote before dying
	}
	return reported
}

func verifyKillInvariants(t *testing.T, r *pmem.Region, reported [workers]uint64) {
	t.Helper()
	var sum uint64
	for i := range accounts {
		rec, err := r.Record(pmem.RecordID(i + 1))
		require.NoError(t, err)
		require.Equal(t, uint16(1), rec.Kind)
		sum += r.Load8(rec.PayloadOff)
	}
	require.Equal(t, uint64(accounts*startBalance), sum, "transfers are all-or-nothing")
	var blocks uint64
	for g := range workers {
		require.GreaterOrEqual(t, r.Root(rootCounter+g), reported[g], "worker %d: a reported commit was lost", g)
		id := pmem.RecordID(r.Root(rootChurn + g))
		if id == 0 {
			continue
		}
		rec, err := r.Record(id)
		require.NoError(t, err)
		require.Equal(t, uint16(2), rec.Kind)
		require.Len(t, rec.Extents, 1)
		b, err := r.ExtentBytes(rec.Extents[0])
		require.NoError(t, err)
		want := byte(r.Load8(rec.PayloadOff))
		for i, c := range b {
			require.Equal(t, want, c, "worker %d churn record %d byte %d", g, id, i)
		}
		blocks += rec.Extents[0].Count
	}
	st := r.Stats()
	require.LessOrEqual(t, st.RecordsUsed, uint64(accounts+workers), "no leaked records")
	require.Equal(t, blocks, st.BlocksUsed, "no leaked blocks")
}

// runKillChild is the child: workers move money between their own
// accounts, replace their churn record, and count their commits, until
// they are killed (or a generous bound runs out).
func runKillChild(path string) {
	r, err := pmem.Open(path, pmem.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	var out sync.Mutex
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := killChildWorker(r, g, &out); err != nil {
				fmt.Fprintln(os.Stderr, "child worker:", err)
				os.Exit(3)
			}
		}()
	}
	wg.Wait()
}

func killChildWorker(r *pmem.Region, g int, out *sync.Mutex) error {
	ctx := context.Background()
	mine := accounts / workers
	first := pmem.RecordID(g*mine + 1)
	n := r.Root(rootCounter + g)
	for i := range 200000 {
		tx, err := r.Begin(ctx)
		if err != nil {
			return err
		}
		a, b := first+pmem.RecordID(i%mine), first+pmem.RecordID((i*7+3)%mine)
		if a != b {
			ra, _ := r.Record(a)
			rb, _ := r.Record(b)
			amt := uint64(i % 13)
			va, _ := tx.Read8(ra.PayloadOff)
			if va >= amt {
				vb, _ := tx.Read8(rb.PayloadOff)
				tx.Write8(ra.PayloadOff, va-amt)
				tx.Write8(rb.PayloadOff, vb+amt)
			}
		}
		if old := pmem.RecordID(r.Root(rootChurn + g)); old != 0 {
			if err := tx.FreeRecord(old); err != nil {
				return err
			}
		}
		id, err := tx.AllocRecord(2)
		if err != nil {
			return err
		}
		e, err := tx.AllocExtent(id, uint64(1+i%3))
		if err != nil {
			return err
		}
		fill := byte(i) | 1
		data := make([]byte, e.Count*uint64(r.Geometry().BlockSize))
		for j := range data {
			data[j] = fill
		}
		if err := tx.WriteFresh(r.ExtentOffset(e), data); err != nil {
			return err
		}
		rec, _ := r.Record(id)
		tx.Write8(rec.PayloadOff, uint64(fill))
		tx.SetRoot(rootChurn+g, uint64(id))
		n++
		tx.SetRoot(rootCounter+g, n)
		if err := tx.Commit(); err != nil {
			return err
		}
		out.Lock()
		os.Stdout.WriteString("committed " + strconv.Itoa(g) + " " + strconv.FormatUint(n, 10) + "\n")
		out.Unlock()
	}
	return nil
}

const deleteChildEnv = "OCTOFS_PMEM_DELETE_CHILD"

// TestSIGKILLDeleteLargeFile: a child process on a real 1 GiB region file
// (4 KiB blocks) creates and deletes a 1 GiB file — a record owning 16
// extents of 16,384 blocks — over and over; the parent SIGKILLs it at a
// random moment after it announces a deletion, reopens the region and
// requires the file whole or gone, fsck clean, nothing leaked.
func TestSIGKILLDeleteLargeFile(t *testing.T) {
	if path := os.Getenv(deleteChildEnv); path != "" {
		runDeleteChild(path)
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("skipping: needs a 1 GiB region file")
	}
	seed := testSeed(t)
	path := filepath.Join(t.TempDir(), "region")
	r, err := pmem.Create(path, fileBlocks*4096+(32<<20), pmem.FormatOptions{RecordSize: 512, ExtentSlots: filePools, NumRecords: 64}, pmem.Options{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, r.Geometry().NumBlocks, uint64(fileBlocks))
	require.NoError(t, r.Close())
	rng := rand.New(rand.NewPCG(seed, 9))
	outcomes := map[string]int{}
	const rounds = 16
	for round := range rounds {
		delay := time.Duration(rng.Int64N(int64(3 * time.Millisecond)))
		killChildAfter(t, path, "deleting", 1+round%3, delay)
		r, err := pmem.Open(path, pmem.Options{})
		require.NoError(t, err, "recovery after SIGKILL (round %d)", round)
		state, err := fileState(r)
		require.NoError(t, err, "round %d", round)
		rep := pmem.Check(r)
		require.True(t, rep.Clean(), "fsck after SIGKILL:\n%s", rep)
		outcomes[state]++
		t.Logf("round %d: killed %v after a deletion began; recovery replayed %d transaction(s); the file is %s", round, delay, rep.Recovery.Replayed, state)
		require.NoError(t, r.Close())
	}
	t.Logf("%d kills during deletions of a 1 GiB file: %v, never partial", rounds, outcomes)
}

// killChildAfter starts the delete child, waits for its n-th line
// starting with word, waits delay more and SIGKILLs it.
func killChildAfter(t *testing.T, path, word string, n int, delay time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSIGKILLDeleteLargeFile$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), deleteChildEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	var once sync.Once
	reap := func() {
		once.Do(func() {
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
	t.Cleanup(reap) // the child never outlives the test, even on failure
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	for seen := 0; seen < n; {
		select {
		case l, ok := <-lines:
			if !ok {
				reap()
				t.Fatalf("child exited before it was killed: %s", stderr.String())
			}
			if strings.HasPrefix(l, word) {
				seen++
			}
		case <-deadline.C:
			reap()
			t.Fatalf("child said %q only %d times in 2 minutes: %s", word, n, stderr.String())
		}
	}
	kill := time.NewTimer(delay) // a random moment, not a condition
	<-kill.C
	require.NoError(t, syscall.Kill(cmd.Process.Pid, syscall.SIGKILL))
	err = cmd.Wait()
	once.Do(func() {})
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "child: %v", err)
	ws, _ := exit.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child ended with %v, not SIGKILL: %s", err, stderr.String())
	for range lines { // drain what the child wrote before dying
	}
}

// runDeleteChild creates and deletes the file until it is killed.
func runDeleteChild(path string) {
	ctx := context.Background()
	r, err := pmem.Open(path, pmem.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	for i := range 10000 {
		id := pmem.RecordID(r.Root(fileRootSlot))
		if id == 0 {
			if id, err = createFile(ctx, r, uint64(os.Getpid())<<16|uint64(i)); err != nil {
				fmt.Fprintln(os.Stderr, "child create:", err)
				os.Exit(3)
			}
		}
		os.Stdout.WriteString("deleting " + strconv.Itoa(i) + "\n")
		if err := deleteFile(ctx, r, id); err != nil {
			fmt.Fprintln(os.Stderr, "child delete:", err)
			os.Exit(3)
		}
		os.Stdout.WriteString("deleted " + strconv.Itoa(i) + "\n")
	}
}
