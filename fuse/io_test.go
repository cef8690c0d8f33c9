package fuse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/octofs/octofs/client"
)

type fakeBuffer struct {
	b    []byte
	free func()
}

func (f *fakeBuffer) Bytes() []byte { return f.b }
func (f *fakeBuffer) Free() error   { f.free(); return nil }

// These tests check what a mount asks of the cluster per system call:
// large reads straight into registered memory, and removals and renames
// sent to the inode's owner.

func TestReadBuffersPool(t *testing.T) {
	var mu sync.Mutex
	allocated, freed := 0, 0
	alloc := func(n int) (buffer, error) {
		mu.Lock()
		defer mu.Unlock()
		if n == 3 {
			return nil, errors.New("no memory")
		}
		allocated++
		return &fakeBuffer{b: make([]byte, n), free: func() {
			mu.Lock()
			freed++
			mu.Unlock()
		}}, nil
	}
	p := newReadBuffers(alloc, 1<<20, 2)
	if b := p.get(1<<20 + 1); b != nil {
		t.Fatal("a buffer larger than the pool's size was handed out")
	}
	var out []buffer
	for range 4 {
		b := p.get(4096)
		if b == nil || len(b.Bytes()) != 1<<20 {
			t.Fatalf("get: %v", b)
		}
		out = append(out, b)
	}
	for _, b := range out {
		p.put(b)
	}
	// Two kept, two freed; the kept ones are handed out again.
	if allocated != 4 || freed != 2 {
		t.Fatalf("after 4 gets and puts with 2 kept: %d allocated, %d freed", allocated, freed)
	}
	a, b := p.get(10), p.get(10)
	if allocated != 4 {
		t.Fatalf("kept buffers were not reused: %d allocated", allocated)
	}
	p.close()
	if freed != 2 {
		t.Fatalf("close freed buffers that were out: %d freed", freed)
	}
	p.put(a)
	p.put(b)
	if freed != 4 {
		t.Fatalf("buffers returned after close were kept: %d freed of 4", freed)
	}
	if p.get(10) != nil {
		t.Fatal("a closed pool handed out a buffer")
	}
	small := newReadBuffers(alloc, 3, 2)
	if small.get(1) != nil {
		t.Fatal("a buffer that could not be allocated was handed out")
	}
}

// TestSequentialReadsAreLargeAndZeroCopy: the mount raises the kernel's
// read-ahead, so a sequential reader's READs are MaxWrite each (the
// kernel's default of 128 KiB would make eight times as many), and each
// lands in a registered buffer by RDMA with no copy in the mount.
func TestSequentialReadsAreLargeAndZeroCopy(t *testing.T) {
	f := clusterFixture(t)
	c := f.newClient(t)
	dir, _ := mountClient(t, c, Options{Logger: testLogger(t)})
	if ra, err := ReadAhead(dir); err != nil || ra != DefaultMaxReadAhead {
		t.Fatalf("read-ahead of the mount: %d, %v; want %d", ra, err, DefaultMaxReadAhead)
	}
	const size = 16 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>20)
	}
	p := filepath.Join(dir, "big")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	before := c.Stats().Data
	fh, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := io.CopyBuffer(&got, fh, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	after := c.Stats().Data
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatal("the file read back differs")
	}
	reads, copied := after.RDMAReads-before.RDMAReads, after.BytesCopied-before.BytesCopied
	t.Logf("%d MiB read with %d RDMA READs, %d bytes copied", size>>20, reads, copied)
	if copied != 0 {
		t.Errorf("reads through the mount copied %d bytes in the mount process, want 0 (registered buffers)", copied)
	}
	// 16 READs of 1 MiB, give or take the kernel splitting a few at the
	// read-ahead window's edges.
	if reads > 2*size/DefaultMaxWrite {
		t.Errorf("%d RDMA READs for %d MiB: the kernel's READs are small (read-ahead not raised?)", reads, size>>20)
	}
}

// TestRemoveAndRenameGoToTheInodesOwner: the kernel looks a name up
// before it removes or renames it, and the mount passes the inode on, so
// each unlink, rmdir and rename is one RPC to the inode's owner, never a
// redirect from the directory's owner.
func TestRemoveAndRenameGoToTheInodesOwner(t *testing.T) {
	c, d := clusterMountDir(t, "routing")
	const n = 12
	for i := range n {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprint("f", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(d, fmt.Sprint("d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	before := c.Stats().RPCs
	for i := range n {
		if err := os.Rename(filepath.Join(d, fmt.Sprint("f", i)), filepath.Join(d, fmt.Sprint("g", i))); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(d, fmt.Sprint("g", i))); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(d, fmt.Sprint("d", i))); err != nil {
			t.Fatal(err)
		}
	}
	after := c.Stats().RPCs
	for _, op := range []string{"rename", "unlink", "rmdir"} {
		if got := after[op] - before[op]; got != n {
			t.Errorf("%d %ss through the mount took %d %s RPCs, want %d", n, op, got, op, n)
		}
	}
	if ents, err := os.ReadDir(d); err != nil || len(ents) != 0 {
		t.Fatalf("directory after removing everything: %v, %v", ents, err)
	}
}

// TestReadsUpdateAtimeOnce: a read through the mount updates atime
// (relatime) and a stat right after it shows the new atime, though the
// kernel cached the attributes before the read; then a loop of
// open-read-close costs no atime RPC at all: one per modification (or
// day), never one per read, no getattr (the open's reply has the
// attributes) and no extent map request after the first (the file did
// not change). A listing is opendir (the open and the first
// page in one RPC) and the release; its atime update is one more RPC
// only when due.
func TestReadsUpdateAtimeOnce(t *testing.T) {
	c, d := clusterMountDir(t, "atime")
	p := filepath.Join(d, "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	stat := func(p string) (atime, mtime time.Time) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix())
	}
	a0, m0 := stat(p) // now in the kernel's attribute cache
	if a0.After(m0) {
		t.Fatalf("a new file's atime %v is after its mtime %v", a0, m0)
	}
	before := c.Stats().RPCs
	const loops = 50
	for i := range loops {
		b, err := os.ReadFile(p)
		if err != nil || string(b) != "abc" {
			t.Fatalf("read %d: %q, %v", i, b, err)
		}
		if i == 0 {
			if a, m := stat(p); !a.After(m) {
				t.Fatalf("a stat right after the first read shows atime %v, not after mtime %v", a, m)
			}
		}
	}
	after := c.Stats().RPCs
	if got := after["touch-atime"] - before["touch-atime"]; got != 1 {
		t.Errorf("%d open-read-close loops sent %d atime updates, want 1", loops, got)
	}
	if got := after["getattr"] - before["getattr"]; got > 2 {
		// The open's reply carries the attributes: the kernel's
		// fstat after it costs no request of its own.
		t.Errorf("%d open-read-close loops sent %d getattrs, want at most 2", loops, got)
	}
	if got := after["map"] - before["map"]; got > 2 {
		// The file did not change: each open keeps the extent maps
		// the first read fetched (close-to-open, client.dataVersions).
		t.Errorf("%d open-read-close loops of an unchanged file sent %d map requests, want at most 2", loops, got)
	}
	var total uint64
	for op, n := range after {
		total += n - before[op]
	}
	t.Logf("%d open-read-close loops: %d RPCs (%.2f per loop; %d touch-atime)", loops, total, float64(total)/loops,
		after["touch-atime"]-before["touch-atime"])

	da0, _ := stat(d)
	before = c.Stats().RPCs
	for range loops {
		if _, err := os.ReadDir(d); err != nil {
			t.Fatal(err)
		}
	}
	after = c.Stats().RPCs
	if da, dm := stat(d); !da.After(dm) || !da.After(da0) {
		t.Fatalf("directory atime %v after listings (before %v, mtime %v)", da, da0, dm)
	}
	total = 0
	for op, n := range after {
		total += n - before[op]
	}
	if got := after["touch-atime"] - before["touch-atime"]; got != 1 {
		t.Errorf("%d listings of a directory changed before the first sent %d atime updates, want 1", loops, got)
	}
	t.Logf("%d listings: %d RPCs (%.2f per listing: %d opendir, %d readdir, %d release, %d touch-atime)", loops, total,
		float64(total)/loops, after["opendir"]-before["opendir"], after["readdir"]-before["readdir"],
		after["release"]-before["release"], after["touch-atime"]-before["touch-atime"])
}

// TestUnprivilegedWritesAskOnlyForSetuid checks that writes of a user
// without CAP_FSETID, which the kernel marks FUSE_WRITE_KILL_SUIDGID
// whatever the file's mode, ask the cluster to clear setuid and setgid
// only when the file has them: one request per write made such writers
// five times slower (bonnie++'s one-byte writes as nobody: 5,700 a second
// against root's 30,000).
func TestUnprivilegedWritesAskOnlyForSetuid(t *testing.T) {
	c, d := clusterMountDir(t, "killpriv")
	p := filepath.Join(d, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, int(nobody.uid), int(nobody.gid)); err != nil {
		t.Fatal(err)
	}
	mode := func() uint32 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Mode &^ syscall.S_IFMT
	}
	const writes = 20
	before := c.Stats().RPCs["setattr"]
	if got := as(t, nobody, d, "writes", "f", "x", fmt.Sprint(writes)); got != "0" {
		t.Fatalf("%d writes as nobody: %s", writes, got)
	}
	if n := c.Stats().RPCs["setattr"] - before; n != 0 {
		t.Errorf("%d writes as nobody to a file of mode 0644 sent %d setattr requests, want 0", writes, n)
	}

	if err := syscall.Chmod(p, 0o6755); err != nil { // os.Chmod would drop the bits: they are not os.FileMode's
		t.Fatal(err)
	}
	before = c.Stats().RPCs["setattr"]
	if got := as(t, nobody, d, "writes", "f", "y", fmt.Sprint(writes)); got != "0" {
		t.Fatalf("%d writes as nobody: %s", writes, got)
	}
	if m := mode(); m != 0o755 {
		t.Errorf("mode after writes as nobody to a file of mode 06755: %#o, want 0755", m)
	}
	if n := c.Stats().RPCs["setattr"] - before; n != 1 {
		t.Errorf("%d writes as nobody to a file of mode 06755 sent %d setattr requests, want 1 (the first clears both bits)", writes, n)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != strings.Repeat("y", writes) {
		t.Errorf("the file holds %q (%v), want %d y", b, err, writes)
	}

	// A statx of the mode alone is answered from the kernel's attribute
	// cache, which a write invalidates for size and times only: the
	// mount must drop the mode it cleared (coreutils' stat -c %A showed
	// -rwsr-xr-x for a second after `echo data >> f` as its owner).
	g := filepath.Join(d, "g")
	if err := os.WriteFile(g, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(g, int(nobody.uid), int(nobody.gid)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(g, 0o4755); err != nil {
		t.Fatal(err)
	}
	var stx unix.Statx_t
	statxMode := func() uint32 {
		t.Helper()
		if err := unix.Statx(unix.AT_FDCWD, g, 0, unix.STATX_MODE, &stx); err != nil {
			t.Fatal(err)
		}
		return uint32(stx.Mode) &^ syscall.S_IFMT
	}
	if m := statxMode(); m != 0o4755 {
		t.Fatalf("statx(STATX_MODE) after chmod 04755: %#o", m)
	}
	if got := as(t, nobody, d, "writes", "g", "z", "1"); got != "0" {
		t.Fatalf("a write as nobody: %s", got)
	}
	if m := statxMode(); m != 0o755 {
		t.Errorf("statx(STATX_MODE) right after a write as nobody to a file of mode 04755: %#o, want 0755", m)
	}
}

// TestBlocksOfSparseFiles checks st_blocks through the mount against what
// the file holds: a sparse file counts its written blocks only, a
// fallocate past the end counts, a punched hole does not, and a dense
// file counts all. Tools trust it: tar --sparse and cp look for holes
// only in a file whose st_blocks is below its size; before, st_blocks
// followed the size and they copied every hole as zeros.
func TestBlocksOfSparseFiles(t *testing.T) {
	_, d := clusterMountDir(t, "blocks")
	p := filepath.Join(d, "sparse")
	fd, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	step := func(what string, fn func() error) {
		t.Helper()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("truncate", func() error { return fd.Truncate(100 << 20) })
	step("pwrite", func() error { _, err := fd.WriteAt(bytes.Repeat([]byte{7}, 4096), 50<<20); return err })
	step("fsync", fd.Sync)
	expect := func(path string, want int64) {
		t.Helper()
		var st syscall.Stat_t
		deadline := time.Now().Add(10 * time.Second)
		for {
			if err := syscall.Stat(path, &st); err != nil {
				t.Fatal(err)
			}
			if st.Blocks == want || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st.Blocks != want {
			t.Errorf("%s: st_blocks %d, want %d (size %d)", filepath.Base(path), st.Blocks, want, st.Size)
		}
	}
	expect(p, 8)
	step("fallocate past the end", func() error { return syscall.Fallocate(int(fd.Fd()), 1 /* KEEP_SIZE */, 200<<20, 1<<20) })
	step("fsync", fd.Sync)
	step("close", fd.Close)
	expect(p, 8+2048)
	fd, err = os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	step("punch", func() error { return syscall.Fallocate(int(fd.Fd()), 3 /* PUNCH_HOLE|KEEP_SIZE */, 50<<20, 4096) })
	step("close", fd.Close)
	expect(p, 2048)

	dense := filepath.Join(d, "dense")
	step("write a dense file", func() error { return os.WriteFile(dense, bytes.Repeat([]byte{1}, 3<<20), 0o644) })
	expect(dense, 3<<20/512)
	empty := filepath.Join(d, "empty")
	step("create an empty file", func() error { return os.WriteFile(empty, nil, 0o644) })
	expect(empty, 0)
}

// TestBlocksWhileWriting checks st_blocks at once, without waiting for
// the owners' count: a file being written, fsynced, or grown by fallocate
// counts its new blocks (as the owner's estimate does), not 0 until its
// first count. Before, fstat during the writes and stat up to the
// attribute timeout after the close said 0 blocks.
func TestBlocksWhileWriting(t *testing.T) {
	_, d := clusterMountDir(t, "blocksnow")
	blocks := func(what string, fd *os.File, min int64) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Fstat(int(fd.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks < min {
			t.Errorf("%s: st_blocks %d, want at least %d (size %d)", what, st.Blocks, min, st.Size)
		}
	}
	w, err := os.Create(filepath.Join(d, "written"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(bytes.Repeat([]byte{1}, 100000)); err != nil {
		t.Fatal(err)
	}
	blocks("after a write", w, 100000/512)
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	blocks("after fsync", w, 100000/512)

	f, err := os.Create(filepath.Join(d, "fallocated"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	blocks("after fallocate", f, 2048)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	blocks("after fallocate and fsync", f, 2048)
}

// clusterMountDir mounts a new client of a 3-node cluster with the default
// options and returns the client and a new directory name in the mount.
func clusterMountDir(t *testing.T, name string) (*client.Client, string) {
	t.Helper()
	c := clusterFixture(t).newClient(t)
	dir, _ := mountClient(t, c, Options{Logger: testLogger(t)})
	return c, subdir(t, dir, name)
}

// TestBlocksOfAFarWrite: a small write far past the end of a new file
// counts its own blocks while uncommitted, not the gap before it (the
// estimate of the growth said gigabytes).
func TestBlocksOfAFarWrite(t *testing.T) {
	_, d := clusterMountDir(t, "blocksfar")
	f, err := os.Create(filepath.Join(d, "far"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 4096), 1<<30); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks < 8 || st.Blocks > 64 {
		t.Errorf("st_blocks %d after a 4 KiB write at 1 GiB, want 8 (a few more at most)", st.Blocks)
	}
}

// TestFstatOfAFileRenamedOver: a descriptor open on a file that a rename
// replaced fstats with link count 0 at once, and still reads the old
// bytes. Before, the fstat got the open's answer (link count 1), which
// the client keeps for the GetAttr the kernel sends after an open: the
// client knew the names, not that the replaced inode lost one.
func TestFstatOfAFileRenamedOver(t *testing.T) {
	_, d := clusterMountDir(t, "renamedover")
	for i := range 5 {
		src, dst := filepath.Join(d, fmt.Sprint("src", i)), filepath.Join(d, fmt.Sprint("dst", i))
		if err := os.WriteFile(src, []byte("new"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := syscall.Open(dst, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Rename(src, dst); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 8)
		n, _ := syscall.Pread(fd, b, 0)
		syscall.Close(fd)
		if st.Nlink != 0 || string(b[:n]) != "old" {
			t.Errorf("round %d: fstat of the replaced file: link count %d, reads %q; want 0, \"old\"", i, st.Nlink, b[:n])
		}
	}
}

// TestListingCarriesAttributes: a listing through the mount brings the
// attributes of the entries whose inodes live with the directory
// (READDIRPLUS), so ls -l (a listing, then lstat of every entry) sends no
// lookup per entry: before, 200 entries took 200 lookups.
func TestListingCarriesAttributes(t *testing.T) {
	c, d := clusterMountDir(t, "plus")
	const n = 200
	for i := range n {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprint("f", i)), []byte("x"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	// Past the entry and attribute timeouts of the creations.
	time.Sleep(DefaultTimeout + 100*time.Millisecond)
	before := c.Stats().RPCs["lookup"]
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		st, err := os.Lstat(filepath.Join(d, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != 1 || st.Mode().Perm() != 0o640 {
			t.Errorf("%s: size %d mode %v, want 1, 0640", e.Name(), st.Size(), st.Mode())
		}
	}
	if len(ents) != n {
		t.Fatalf("listed %d entries, want %d", len(ents), n)
	}
	if got := c.Stats().RPCs["lookup"] - before; got > n/10 {
		t.Errorf("ls -l of %d entries sent %d lookups, want (about) none", n, got)
	}
}
