package fuse

import (
	"os"
	"sort"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"github.com/octofs/octofs/client"
)

// mountable skips the test unless this process can mount FUSE file
// systems (root and /dev/fuse).
func mountable(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
}

// mountMemory mounts an in-memory cluster (client.Memory) and returns the
// mount point; the mount is unmounted when the test ends.
func mountMemory(t *testing.T, o Options) (string, *client.Client) {
	t.Helper()
	mountable(t)
	mem := client.NewMemory(time.Now)
	c := mem.Client(client.Config{})
	dir := t.TempDir()
	srv, err := Mount(dir, c, o)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		c.Close()
	})
	return dir, c
}

// posixtestSkips are the go-fuse posixtest cases a mount is not expected to
// pass, with the reason.
var posixtestSkips = map[string]string{
	// The case takes a write lock through one descriptor and expects a
	// read lock through a second descriptor of the same process to fail.
	// POSIX record locks belong to the process, so Linux file systems
	// (ext4, tmpfs) grant it; the case encodes go-fuse's loopback, which
	// implements fcntl locks with open-file-description locks.
	"FcntlFlockLocksFile": "expects open-file-description lock semantics; POSIX (and ext4) grant a process's own lock",
}

func TestPosixMemory(t *testing.T) {
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if why, ok := posixtestSkips[name]; ok {
				t.Skip(why)
			}
			dir, _ := mountMemory(t, Options{})
			posixtest.All[name](t, dir)
		})
	}
}
