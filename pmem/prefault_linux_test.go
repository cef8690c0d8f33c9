package pmem

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestRegionOnTmpfsIsPrefaulted checks that a region file on tmpfs is
// mapped with its pages already in the page tables (resident in the
// mapping's RSS before anything touched them), so that the data path
// takes no page fault per fresh page; a read-only mapping (fsck) is not.
func TestRegionOnTmpfsIsPrefaulted(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "octofs-prefault-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.RemoveAll(dir)
	const size = 8 << 20
	path := filepath.Join(dir, "region")
	m, err := OpenFileMedium(path, FileOptions{Create: true, Size: size})
	if err != nil {
		t.Fatal(err)
	}
	rss := mappedRSS(t, m.Bytes())
	m.Close()
	if rss < size {
		t.Errorf("a new region on tmpfs has %d of %d bytes in its mapping's RSS before any store, want all (prefaulted)", rss, size)
	}
	ro, err := OpenFileMedium(path, FileOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if rss := mappedRSS(t, ro.Bytes()); rss >= size {
		t.Errorf("a read-only mapping has %d bytes in its RSS before any load, want fewer than %d (not prefaulted)", rss, size)
	}
}

// mappedRSS returns the RSS of the mapping that starts at buf, from
// /proc/self/smaps.
func mappedRSS(t *testing.T, buf []byte) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&buf[0])))
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = strings.HasPrefix(line, start)
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			kb, err := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping at %s in /proc/self/smaps", start)
	return 0
}
