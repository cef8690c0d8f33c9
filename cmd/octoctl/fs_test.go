package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/octofs/octofs/client"
)

// memFS returns the native API of a fresh in-memory cluster, as root.
func memFS(t *testing.T) *client.FS {
	t.Helper()
	c := client.NewMemory(nil).Client(client.Config{})
	t.Cleanup(func() { c.Close() })
	return c.FS(client.RootCred)
}

// writeTree makes files (name -> content; a content starting with "->"
// makes a symlink) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(data, "->"); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(data), 0o640)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestFSPutGetRoundTrip(t *testing.T) {
	fsys := memFS(t)
	src := filepath.Join(t.TempDir(), "src")
	files := map[string]string{
		"a.txt":         "alpha",
		"sub/b.bin":     strings.Repeat("\x00\xff", 70000),
		"sub/deep/c":    "",
		"sub/link":      "->../a.txt",
		"empty/.keep":   "k",
		"sub/deep/d.go": "package d\n",
	}
	writeTree(t, src, files)
	if err := fsys.Mkdir("/in", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := fsPut(fsys, nil, src, "/in", false); err == nil {
		t.Fatal("put of a directory without -r succeeded")
	}
	st, err := fsPut(fsys, nil, src, "/in", true)
	if err != nil {
		t.Fatal(err)
	}
	if st.files != 5 || st.links != 1 {
		t.Fatalf("put counted %d files and %d links, want 5 and 1", st.files, st.links)
	}
	// The tree landed inside the existing directory, as cp -r does.
	if fi, err := fsys.Stat("/in/src/a.txt"); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("put file: %v, %v", fi, err)
	}
	dst := t.TempDir()
	if _, err := fsGet(fsys, nil, "/in/src", dst, true); err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		p := filepath.Join(dst, "src", name)
		if target, ok := strings.CutPrefix(want, "->"); ok {
			if got, err := os.Readlink(p); err != nil || got != target {
				t.Fatalf("%s: symlink to %q, %v", name, got, err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want {
			t.Fatalf("%s: %d bytes back, %v", name, len(got), err)
		}
	}
	// get - writes one file to standard output; put - reads standard input.
	var out bytes.Buffer
	if _, err := fsGet(fsys, &out, "/in/src/a.txt", "-", false); err != nil || out.String() != "alpha" {
		t.Fatalf("get -: %q, %v", out.String(), err)
	}
	if _, err := fsPut(fsys, strings.NewReader("from stdin"), "-", "/in/s", false); err != nil {
		t.Fatal(err)
	}
	if b, _ := fsys.ReadFile("/in/s"); string(b) != "from stdin" {
		t.Fatalf("put - wrote %q", b)
	}
}

func TestFSListStatRemove(t *testing.T) {
	fsys := memFS(t)
	if err := fsys.MkdirAll("/d/e", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.WriteFile("/d/f", []byte("12345"), fs.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Symlink("f", "/d/l"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := fsList(&out, fsys, []string{"/d"}, false); err != nil {
		t.Fatal(err)
	}
	if out.String() != "e\nf\nl\n" {
		t.Fatalf("ls:\n%s", out.String())
	}
	out.Reset()
	if err := fsList(&out, fsys, []string{"/d"}, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"drwxr-xr-x", "-rwsr-xr-x", "l -> f", "     5 "} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("ls -l lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := fsStat(&out, fsys, []string{"/d/l"}, true); err != nil {
		t.Fatal(err)
	}
	var s statJSON
	if err := json.Unmarshal(out.Bytes(), &s); err != nil || s.Type != "symbolic link" || s.Target != "f" {
		t.Fatalf("stat --json: %+v, %v", s, err)
	}
	if err := fsRemove(fsys, []string{"/d"}, false, false); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rm of a full directory without -r: %v", err)
	}
	if err := fsRemove(fsys, []string{"/nope"}, false, false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("rm of a missing path: %v", err)
	}
	if err := fsRemove(fsys, []string{"/nope"}, true, true); err != nil {
		t.Fatalf("rm -rf of a missing path: %v", err)
	}
	if err := fsRemove(fsys, []string{"/d"}, true, false); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Stat("/d"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after rm -r: %v", err)
	}
}

func TestModeStringAndParsers(t *testing.T) {
	for name, tc := range map[string]struct {
		mode uint32
		want string
	}{
		"file":        {syscall.S_IFREG | 0o644, "-rw-r--r--"},
		"sticky dir":  {syscall.S_IFDIR | 0o1777, "drwxrwxrwt"},
		"sticky no x": {syscall.S_IFDIR | 0o1776, "drwxrwxrwT"},
		"setuid":      {syscall.S_IFREG | 0o4755, "-rwsr-xr-x"},
		"setgid no x": {syscall.S_IFREG | 0o2644, "-rw-r-Sr--"},
		"symlink":     {syscall.S_IFLNK | 0o777, "lrwxrwxrwx"},
		"char device": {syscall.S_IFCHR | 0o600, "crw-------"},
		"fifo":        {syscall.S_IFIFO | 0o600, "prw-------"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := modeString(tc.mode); got != tc.want {
				t.Fatalf("modeString(%o) = %s, want %s", tc.mode, got, tc.want)
			}
		})
	}
	if m, err := parseMode("1777"); err != nil || m != os.ModeSticky|0o777 {
		t.Fatalf("parseMode 1777 = %v, %v", m, err)
	}
	if _, err := parseMode("999"); err == nil {
		t.Fatal("parseMode accepted 999")
	}
	for in, want := range map[string][2]int{"1000": {1000, -1}, "1000:50": {1000, 50}, ":50": {-1, 50}} {
		u, g, err := parseOwner(in)
		if err != nil || u != want[0] || g != want[1] {
			t.Fatalf("parseOwner(%q) = %d, %d, %v", in, u, g, err)
		}
	}
	if _, _, err := parseOwner(":"); err == nil {
		t.Fatal("parseOwner accepted :")
	}
}

func TestDf(t *testing.T) {
	var out bytes.Buffer
	if err := fsDf(&out, client.StatFS{Bsize: 4096, Blocks: 262144, Bfree: 131072, Bavail: 131072, Files: 100, Ffree: 90}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1.0G", "512.0M", "50%", "100", "10", "90"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("df lacks %q:\n%s", want, out.String())
		}
	}
}
