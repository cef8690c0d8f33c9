//go:build verbs && cgo

package verbs_test

import (
	"errors"
	"os"
	"testing"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/rdmatest"
	"golang.org/x/sys/unix"
)

// TestDevDaxRegion registers a devdax mapping (persistent memory without a
// file system, as octofs nodes export it) and moves data into and out of
// it with RDMA WRITE and READ. OCTOFS_VERBS_DAX names the device
// (/dev/dax0.0); make vm-test provides one from an emulated NVDIMM. fsdax
// mappings cannot be registered at all (the kernel refuses long-term pins
// of file system DAX pages), which is why octofs exports devdax.
func TestDevDaxRegion(t *testing.T) {
	path := os.Getenv("OCTOFS_VERBS_DAX")
	if path == "" {
		t.Skip("OCTOFS_VERBS_DAX does not name a devdax device (make vm-test sets it)")
	}
	dev, pd, mem := openMapped(t, path)
	mr, err := pd.RegMR(mem, rdma.AccessAll)
	if err != nil {
		t.Fatalf("register %s: %v", path, err)
	}
	t.Cleanup(func() { mr.Dereg() })
	pmem := &rdmatest.Node{Dev: dev, PD: pd, MR: mr, Buf: mem}
	client := rdmatest.NewNode(t, dev, 64<<10, rdma.AccessAll)
	pr := rdmatest.ConnectNodes(t, client, pmem, rdmatest.Options{})

	const off, n = 1 << 20, 4096
	rdmatest.Fill(client.Buf[:n], 42)
	rdmatest.PostSend(t, pr.A.QP, rdma.SendWR{ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{client.SGE(0, n)}, RemoteAddr: pmem.Addr(off), RKey: mr.RKey()})
	rdmatest.CheckOK(t, "WRITE to devdax", rdmatest.WaitOne(t, pr.A.SendCQ), 1, rdma.WCWrite)
	rdmatest.CheckBytes(t, "devdax after WRITE", mem[off:off+n], client.Buf[:n])

	rdmatest.PostSend(t, pr.A.QP, rdma.SendWR{ID: 2, Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{client.SGE(n, n)}, RemoteAddr: pmem.Addr(off), RKey: mr.RKey()})
	rdmatest.CheckOK(t, "READ from devdax", rdmatest.WaitOne(t, pr.A.SendCQ), 2, rdma.WCRead)
	rdmatest.CheckBytes(t, "READ from devdax", client.Buf[n:2*n], mem[off:off+n])
}

// TestFsDaxRefused checks the limit that makes octofs export devdax: a
// mapping of a file on a DAX file system (fsdax) cannot be registered,
// because Linux refuses long-term pins of its pages. OCTOFS_VERBS_FSDAX
// names such a file; make vm-test makes one on an emulated NVDIMM.
func TestFsDaxRefused(t *testing.T) {
	path := os.Getenv("OCTOFS_VERBS_FSDAX")
	if path == "" {
		t.Skip("OCTOFS_VERBS_FSDAX does not name a file on a DAX file system (make vm-test sets it)")
	}
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_BASIC_STATS, &st); err != nil {
		t.Fatal(err)
	}
	if st.Attributes&unix.STATX_ATTR_DAX == 0 {
		t.Fatalf("%s is not accessed through DAX (statx has no STATX_ATTR_DAX): the test proves nothing", path)
	}
	_, pd, mem := openMapped(t, path)
	mr, err := pd.RegMR(mem, rdma.AccessAll)
	if err == nil {
		mr.Dereg()
		t.Fatalf("registering an fsdax mapping succeeded; this kernel pins fsdax pages, so docs/rdma-verbs.md is out of date")
	}
	if !errors.Is(err, rdma.ErrInvalid) {
		t.Fatalf("RegMR(fsdax) = %v, want an error wrapping rdma.ErrInvalid", err)
	}
	t.Logf("RegMR(fsdax mapping) refused as expected: %v", err)
}

// openMapped opens the device under test with a PD, and maps the first
// 2 MiB (a multiple of every devdax alignment) of path shared, ready to
// register; cleanups undo all three.
func openMapped(t *testing.T, path string) (rdma.Device, rdma.PD, []byte) {
	t.Helper()
	dev := openOrSkip(t)
	t.Cleanup(func() { dev.Close() })
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 2<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap %s: %v", path, err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Close() })
	return dev, pd, mem
}
