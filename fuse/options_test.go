package fuse

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReadOnlyAndNoAtime mounts one cluster three times: read-write (to
// make the files), read-only, and read-write with noatime. Through the
// read-only mount every change fails with EROFS and nothing changes,
// reads work and leave atime alone; through the noatime mount reads and
// listings leave atime alone while changes work.
func TestReadOnlyAndNoAtime(t *testing.T) {
	forEachFixture(t, func(t *testing.T, f *fixture) {
		rw, _ := f.mount(t, Options{})
		ro, _ := f.mount(t, Options{ReadOnly: true})
		na, _ := f.mount(t, Options{NoAtime: true})
		// Times are checked through a mount that caches no attributes.
		fresh, _ := f.mount(t, Options{NoCache: true})
		d := subdir(t, rw, "ro")
		if err := os.WriteFile(filepath.Join(d, "f"), []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		// atime before mtime: relatime would update it at the next read.
		old := time.Unix(1_000_000, 0)
		for _, name := range []string{"f", "sub"} {
			if err := os.Chtimes(filepath.Join(d, name), old, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		atime := func(name string) time.Time {
			t.Helper()
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(fresh, "ro", name), &st); err != nil {
				t.Fatal(err)
			}
			return time.Unix(st.Atim.Unix())
		}

		rf, rd := filepath.Join(ro, "ro", "f"), filepath.Join(ro, "ro", "sub")
		for name, change := range map[string]func() error{
			"create":    func() error { return os.WriteFile(filepath.Join(ro, "ro", "new"), nil, 0o644) },
			"write":     func() error { return os.WriteFile(rf, []byte("other"), 0o644) },
			"open rdwr": func() error { f, err := os.OpenFile(rf, os.O_RDWR, 0); f.Close(); return err },
			"truncate":  func() error { return os.Truncate(rf, 0) },
			"mkdir":     func() error { return os.Mkdir(filepath.Join(rd, "x"), 0o755) },
			"unlink":    func() error { return os.Remove(rf) },
			"rmdir":     func() error { return os.Remove(rd) },
			"rename":    func() error { return os.Rename(rf, filepath.Join(ro, "ro", "g")) },
			"chmod":     func() error { return os.Chmod(rf, 0o600) },
			"utimes":    func() error { return os.Chtimes(rf, time.Now(), time.Now()) },
			"symlink":   func() error { return os.Symlink("f", filepath.Join(ro, "ro", "l")) },
			"link":      func() error { return os.Link(rf, filepath.Join(ro, "ro", "h")) },
			"setxattr":  func() error { return unix.Setxattr(rf, "user.a", []byte("v"), 0) },
		} {
			if err := change(); !errors.Is(err, syscall.EROFS) {
				t.Errorf("%s through the read-only mount: %v, want EROFS", name, err)
			}
		}
		b, err := os.ReadFile(rf)
		if err != nil || string(b) != "data" {
			t.Fatalf("read through the read-only mount: %q, %v", b, err)
		}
		if _, err := os.ReadDir(rd); err != nil {
			t.Fatal(err)
		}
		if a := atime("f"); !a.Equal(old) {
			t.Errorf("a read through the read-only mount moved atime to %v", a)
		}
		if a := atime("sub"); !a.Equal(old) {
			t.Errorf("a listing through the read-only mount moved atime to %v", a)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(ro, &st); err != nil || st.Flags&unix.ST_RDONLY == 0 {
			t.Errorf("statfs of the read-only mount: flags %#x (%v), want ST_RDONLY", st.Flags, err)
		}

		nf := filepath.Join(na, "ro", "f")
		if b, err := os.ReadFile(nf); err != nil || string(b) != "data" {
			t.Fatalf("read through the noatime mount: %q, %v", b, err)
		}
		if _, err := os.ReadDir(filepath.Join(na, "ro", "sub")); err != nil {
			t.Fatal(err)
		}
		if a := atime("f"); !a.Equal(old) {
			t.Errorf("a read through the noatime mount moved atime to %v", a)
		}
		if a := atime("sub"); !a.Equal(old) {
			t.Errorf("a listing through the noatime mount moved atime to %v", a)
		}
		if err := os.WriteFile(filepath.Join(na, "ro", "g"), []byte("x"), 0o644); err != nil {
			t.Errorf("a write through the noatime mount: %v", err)
		}
		// The control: the read-write mount's read does move it.
		if _, err := os.ReadFile(filepath.Join(d, "f")); err != nil {
			t.Fatal(err)
		}
		if a := atime("f"); a.Equal(old) {
			t.Error("a read through the read-write mount left atime alone: the test cannot tell")
		}
	})
}
