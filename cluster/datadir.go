package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFile is the file in a data directory that its process holds an
// exclusive flock on, with the process id written in it.
const lockFile = "lock"

// DataDirLock is an exclusive lock on a node's data directory. One process
// (one Node) uses a data directory at a time: a second one would block on
// the raft log's own lock forever, so it is refused at once instead, with
// the process that holds the directory named. The kernel drops the lock
// when its holder exits, even by SIGKILL.
type DataDirLock struct {
	dir string
	f   *os.File
}

// LockDataDir creates dir if needed and locks it, or fails with
// ErrDataDirInUse naming the process that holds it.
func LockDataDir(dir string) (*DataDirLock, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: no data directory", ErrBadRequest)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: data directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cluster: data directory lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := lockHolder(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is in use by %s; stop that process first, or give this node another --data-dir",
				ErrDataDirInUse, dir, holder)
		}
		return nil, fmt.Errorf("cluster: lock data directory %s: %w", dir, err)
	}
	// The process id is only for the message a second process prints.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &DataDirLock{dir: dir, f: f}, nil
}

// lockHolder describes the process whose id the lock file holds.
func lockHolder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return "another process"
	}
	desc := "process " + strconv.Itoa(pid)
	if pid == os.Getpid() {
		return desc + " (this process: another node in it uses the directory)"
	}
	if cmd, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); err == nil && len(cmd) > 0 {
		args := strings.Join(strings.Fields(string(bytes.ReplaceAll(bytes.TrimRight(cmd, "\x00"), []byte{0}, []byte{' '}))), " ")
		if len(args) > 200 {
			args = args[:200] + "..."
		}
		desc += " (" + args + ")"
	}
	return desc
}

// Dir returns the locked directory.
func (l *DataDirLock) Dir() string { return l.dir }

// Release unlocks the directory. It is safe to call more than once.
func (l *DataDirLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	_ = f.Truncate(0)
	return f.Close() // closing the only descriptor drops the flock
}
