package fuse

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestBlockedLockWaitIsKillable: a process waiting for a lock (F_SETLKW,
// flock without LOCK_NB) that gets SIGKILL exits at once. The kernel
// waits for the file system's answer once a request has been read, so a
// lock wait that ignores FUSE_INTERRUPT leaves the process unkillable in
// state D for as long as the lock is held.
func TestBlockedLockWaitIsKillable(t *testing.T) {
	mountable(t)
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1) (util-linux)")
	}
	mnt, _ := memoryFixture(t).mount(t, Options{Logger: testLogger(t)})
	path := filepath.Join(mnt, "locked")
	holder, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// The child touches the mount only after exec (see helperFor).
	waiter := exec.Command("flock", "--exclusive", path, "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- waiter.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("flock(1) returned (%v) while the lock was held", err)
	case <-time.After(500 * time.Millisecond):
	}
	waiter.Process.Kill()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		// Release the waiter before failing, so that nothing stays
		// stuck in the mount.
		syscall.Flock(int(holder.Fd()), syscall.LOCK_UN)
		<-exited
		t.Fatal("a process killed while waiting for a lock was still alive 10s later")
	}
}
