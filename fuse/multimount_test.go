package fuse

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Two mounts of one cluster, as two hosts would have: what one closes the
// other sees at its next open (close-to-open), names appear and go, and
// fcntl and flock locks hold across them because the cluster keeps them.

func TestTwoMounts(t *testing.T) {
	forEachFixture(t, func(t *testing.T, f *fixture) {
		a, _ := f.mount(t, Options{})
		b, _ := f.mount(t, Options{})
		t.Run("close-to-open", func(t *testing.T) {
			da, db := subdir(t, a, "cto"), filepath.Join(b, "cto")
			pa, pb := filepath.Join(da, "f"), filepath.Join(db, "f")
			write := func(data string) {
				t.Helper()
				if err := os.WriteFile(pa, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			read := func() string {
				t.Helper()
				got, err := os.ReadFile(pb)
				if err != nil {
					t.Fatal(err)
				}
				return string(got)
			}
			write("first")
			if got := read(); got != "first" {
				t.Fatalf("b read %q after a closed %q", got, "first")
			}
			// b has the attributes and pages cached now; a grows and
			// rewrites the file, then shrinks it.
			for _, data := range []string{"second, longer", "third!, longer", "4"} {
				write(data)
				if got := read(); got != data {
					t.Errorf("b read %q after a closed %q", got, data)
				}
			}
			// A file b holds open sees a's closed writes at b's next open.
			fb, err := os.Open(pb)
			if err != nil {
				t.Fatal(err)
			}
			defer fb.Close()
			write("fifth")
			if got := read(); got != "fifth" {
				t.Errorf("b read %q after a closed %q", got, "fifth")
			}
		})
		t.Run("names", func(t *testing.T) {
			da, db := subdir(t, a, "names"), filepath.Join(b, "names")
			if _, err := os.Stat(filepath.Join(db, "x")); !os.IsNotExist(err) {
				t.Fatalf("b stat of a name nobody made: %v", err)
			}
			if err := os.WriteFile(filepath.Join(da, "x"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			// No negative caching: b sees the new name at once.
			if _, err := os.Stat(filepath.Join(db, "x")); err != nil {
				t.Errorf("b stat of a's new file: %v", err)
			}
			// a replaces x by a rename; b's next open finds the new file
			// even though b cached the old one's entry.
			if err := os.WriteFile(filepath.Join(da, "y"), []byte("y"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(da, "y"), filepath.Join(da, "x")); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(filepath.Join(db, "x")); err != nil || string(got) != "y" {
				t.Errorf("b read %q, %v after a renamed y over x", got, err)
			}
			// a removes x; b's open says it is gone. b still has x's
			// entry cached (for the 1 s entry timeout), so its open goes
			// to the inode, which lives on while b's previous handle is
			// open: the kernel sends that handle's RELEASE after close(2)
			// has returned. Allow it half the entry timeout to arrive,
			// well before b would look the name up again anyway.
			if err := os.Remove(filepath.Join(da, "x")); err != nil {
				t.Fatal(err)
			}
			var err error
			for deadline := time.Now().Add(500 * time.Millisecond); ; {
				_, err = os.ReadFile(filepath.Join(db, "x"))
				if os.IsNotExist(err) || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !os.IsNotExist(err) {
				t.Errorf("b read of a removed file: %v, want ENOENT", err)
			}
			ents, err := os.ReadDir(db)
			if err != nil || len(ents) != 0 {
				t.Errorf("b lists %v, %v in a directory a emptied", ents, err)
			}
		})
		t.Run("fcntl locks", func(t *testing.T) {
			da, db := subdir(t, a, "fcntl"), filepath.Join(b, "fcntl")
			if err := os.WriteFile(filepath.Join(da, "f"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			fa := openRW(t, filepath.Join(da, "f"))
			fb := openRW(t, filepath.Join(db, "f"))
			wr := func(start, n int64) *syscall.Flock_t {
				return &syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: start, Len: n}
			}
			if err := syscall.FcntlFlock(fa.Fd(), syscall.F_SETLK, wr(0, 10)); err != nil {
				t.Fatalf("a lock: %v", err)
			}
			if err := syscall.FcntlFlock(fb.Fd(), syscall.F_SETLK, wr(5, 10)); err != syscall.EAGAIN {
				t.Errorf("b lock of a range a holds: %v, want EAGAIN", err)
			}
			got := wr(0, 1)
			if err := syscall.FcntlFlock(fb.Fd(), syscall.F_GETLK, got); err != nil || got.Type != syscall.F_WRLCK {
				t.Errorf("b F_GETLK: %v, type %d, want a's write lock", err, got.Type)
			}
			if err := syscall.FcntlFlock(fb.Fd(), syscall.F_SETLK, wr(10, 10)); err != nil {
				t.Errorf("b lock of the range after a's: %v", err)
			}
			// A blocking lock in b waits for a's close (close releases a
			// process's POSIX locks).
			done := make(chan error, 1)
			go func() { done <- syscall.FcntlFlock(fb.Fd(), syscall.F_SETLKW, wr(0, 5)) }()
			select {
			case err := <-done:
				t.Fatalf("b's F_SETLKW returned %v while a held the lock", err)
			case <-time.After(300 * time.Millisecond):
			}
			fa.Close()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("b's F_SETLKW after a's close: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("b's F_SETLKW still waits 20s after a closed its file")
			}
		})
		t.Run("flock", func(t *testing.T) {
			da, db := subdir(t, a, "flock"), filepath.Join(b, "flock")
			if err := os.WriteFile(filepath.Join(da, "f"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			fa := openRW(t, filepath.Join(da, "f"))
			fb := openRW(t, filepath.Join(db, "f"))
			if err := syscall.Flock(int(fa.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				t.Fatalf("a flock: %v", err)
			}
			if err := syscall.Flock(int(fb.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != syscall.EWOULDBLOCK {
				t.Errorf("b flock while a holds it: %v, want EWOULDBLOCK", err)
			}
			if err := syscall.Flock(int(fa.Fd()), syscall.LOCK_UN); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Flock(int(fb.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
				t.Errorf("b flock after a's unlock: %v", err)
			}
			if err := syscall.Flock(int(fa.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
				t.Errorf("a shared flock beside b's: %v", err)
			}
			// Closing b's descriptor releases its flock: the kernel asks
			// for that in the RELEASE it sends after close(2) has
			// returned, so a's lock may have to wait for it a moment.
			fb.Close()
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := syscall.Flock(int(fa.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
				if err == nil {
					break
				}
				if err != syscall.EWOULDBLOCK || time.Now().After(deadline) {
					t.Errorf("a exclusive flock after b closed: %v (10s later)", err)
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
		t.Run("data", func(t *testing.T) {
			// A file larger than a chunk (4 MiB), striped over the nodes,
			// written in one mount and read in the other.
			da, db := subdir(t, a, "data"), filepath.Join(b, "data")
			data := make([]byte, 9<<20+123)
			for i := range data {
				data[i] = byte(i*7 + i>>12)
			}
			if err := os.WriteFile(filepath.Join(da, "big"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(db, "big"))
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("b read %d bytes (%v), equal %v", len(got), err, bytes.Equal(got, data))
			}
		})
	})
}

func openRW(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
