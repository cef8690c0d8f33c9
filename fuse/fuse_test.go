package fuse

import (
	"os"
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// posixtestSkips are the go-fuse posixtest cases a mount is not expected to
// pass, with the reason. (posixtest itself would skip RenameOpenDir if
// fstat of a directory renamed over failed; it passes since the mount
// registers directory opens with the cluster.)
var posixtestSkips = map[string]string{
	// The case takes a write lock through one descriptor and expects a
	// read lock through a second descriptor of the same process to fail.
	// POSIX record locks belong to the process, so Linux file systems
	// (ext4, tmpfs) grant it; the case encodes go-fuse's loopback, which
	// implements fcntl locks with open-file-description locks.
	"FcntlFlockLocksFile": "expects open-file-description lock semantics; POSIX (and ext4) grant a process's own lock",
	// The case renames files and symlinks over one name as fast as it
	// can while opening that name. A local file system pins the inode the
	// kernel looked up; the cluster frees an inode when its last name
	// goes, so an open that lost the race twice (the kernel retries once
	// on ESTALE) fails with ESTALE, as on NFS.
	"OpenSymlinkRace": "opens racing renames that free the inode get ESTALE after the kernel's one retry, as on NFS",
}

// TestPosix runs go-fuse's posixtest on a mount of every back end, each
// case in a fresh directory of one mount.
func TestPosix(t *testing.T) {
	forEachFixture(t, func(t *testing.T, f *fixture) {
		mnt, _ := f.mount(t, Options{})
		runPosixtest(t, mnt)
	})
}

func runPosixtest(t *testing.T, mnt string) {
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
			dir := subdir(t, mnt, name)
			posixtest.All[name](t, dir)
		})
	}
}

// TestMountedPosix runs posixtest on an octofs mount made elsewhere (make
// vm-test mounts a cluster of VMs and runs this test binary there):
// OCTOFS_FUSE_MOUNT names the mount point.
func TestMountedPosix(t *testing.T) {
	mnt := os.Getenv("OCTOFS_FUSE_MOUNT")
	if mnt == "" {
		t.Skip("OCTOFS_FUSE_MOUNT is not set: no external mount to test")
	}
	dir, err := os.MkdirTemp(mnt, "posixtest-")
	if err != nil {
		t.Fatal(err)
	}
	runPosixtest(t, dir)
}
