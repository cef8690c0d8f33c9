package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
)

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestFSPassesFSTest(t *testing.T) {
	forBackends(t, func(t *testing.T, newClient func() *Client) {
		fsys := newClient().FS(RootCred)
		files := map[string]string{
			"a.txt":           "alpha",
			"dir/b.txt":       "bravo\n",
			"dir/sub/c.bin":   strings.Repeat("\x00\x01", 3000),
			"dir/sub/empty":   "",
			"other/deep/x/y":  "why",
			"other/deep/x/y2": "why not",
		}
		var names []string
		for name, data := range files {
			mustDo(t, fsys.MkdirAll("/"+name[:max(strings.LastIndexByte(name, '/'), 0)], 0o755))
			mustDo(t, fsys.WriteFile("/"+name, []byte(data), 0o644))
			names = append(names, name)
		}
		mustDo(t, fsys.Symlink("dir/b.txt", "/link"))
		if err := fstest.TestFS(fsys.IOFS(), names...); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			got, err := fs.ReadFile(fsys.IOFS(), name)
			if err != nil || string(got) != data {
				t.Fatalf("ReadFile(%s) = %d bytes, %v", name, len(got), err)
			}
		}
	})
}

func TestPathResolution(t *testing.T) {
	forBackends(t, func(t *testing.T, newClient func() *Client) {
		fsys := newClient().FS(RootCred)
		mustDo(t, fsys.MkdirAll("/a/b/c", 0o755))
		mustDo(t, fsys.WriteFile("/a/b/c/f", []byte("data"), 0o644))
		mustDo(t, fsys.Symlink("b/c", "/a/rel"))       // relative, inside a
		mustDo(t, fsys.Symlink("/a/b", "/abs"))        // absolute
		mustDo(t, fsys.Symlink("../b/c/f", "/a/b/up")) // through ..
		mustDo(t, fsys.Symlink("loop2", "/loop1"))
		mustDo(t, fsys.Symlink("loop1", "/loop2"))
		mustDo(t, fsys.Symlink("/nowhere", "/dangling"))
		for name, tc := range map[string]struct {
			path string
			want error
			size int64
			dir  bool
		}{
			"plain":                  {"/a/b/c/f", nil, 4, false},
			"relative start":         {"a/b/c/f", nil, 4, false},
			"dots":                   {"/a/./b/../b/c/./f", nil, 4, false},
			"dot dot above root":     {"/../../a/b/c/f", nil, 4, false},
			"relative symlink":       {"/a/rel/f", nil, 4, false},
			"absolute symlink":       {"/abs/c/f", nil, 4, false},
			"symlink then dot dot":   {"/abs/../b/c/f", nil, 4, false},
			"link through dot dot":   {"/a/b/up", nil, 4, false},
			"dot dot of link target": {"/a/rel/../c/f", nil, 4, false},
			"trailing slash dir":     {"/a/b/", nil, 0, true},
			"trailing slash file":    {"/a/b/c/f/", syscall.ENOTDIR, 0, false},
			"file as directory":      {"/a/b/c/f/g", syscall.ENOTDIR, 0, false},
			"missing":                {"/a/nope", syscall.ENOENT, 0, false},
			"loop":                   {"/loop1", syscall.ELOOP, 0, false},
			"dangling":               {"/dangling", syscall.ENOENT, 0, false},
			"root":                   {"/", nil, 0, true},
			"empty":                  {"", syscall.ENOENT, 0, false},
			"long component":         {"/" + strings.Repeat("x", 256), syscall.ENAMETOOLONG, 0, false},
		} {
			t.Run(name, func(t *testing.T) {
				fi, err := fsys.Stat(tc.path)
				if tc.want != nil {
					if !errors.Is(err, tc.want) {
						t.Fatalf("Stat(%q) = %v, want %v", tc.path, err, tc.want)
					}
					return
				}
				if err != nil {
					t.Fatalf("Stat(%q): %v", tc.path, err)
				}
				if fi.IsDir() != tc.dir || (!tc.dir && fi.Size() != tc.size) {
					t.Fatalf("Stat(%q) = dir %v size %d", tc.path, fi.IsDir(), fi.Size())
				}
			})
		}
		fi, err := fsys.Lstat("/abs")
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("Lstat of a symlink: %v, %v", fi, err)
		}
		if target, err := fsys.Readlink("/a/rel"); err != nil || target != "b/c" {
			t.Fatalf("Readlink = %q, %v", target, err)
		}
		if _, err := fsys.Stat("/missing"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Stat of a missing name: %v does not match fs.ErrNotExist", err)
		}
	})
}

func TestPermissionsTravelWithTheFS(t *testing.T) {
	forBackends(t, func(t *testing.T, newClient func() *Client) {
		c := newClient()
		root, a := c.FS(RootCred), c.FS(alice)
		mustDo(t, root.Mkdir("/private", 0o700))
		mustDo(t, root.WriteFile("/private/f", []byte("x"), 0o644))
		if _, err := a.Stat("/private/f"); !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("alice through root's 0700 directory: %v, want EACCES", err)
		}
		mustDo(t, root.Mkdir("/home", 0o777))
		mustDo(t, a.WriteFile("/home/mine", []byte("x"), 0o600))
		fi, err := a.Stat("/home/mine")
		if err != nil || fi.Sys().(*Attr).UID != alice.UID {
			t.Fatalf("alice's new file: %v, %v", fi, err)
		}
		if _, err := c.FS(bob).Open("/home/mine"); !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("bob opens alice's 0600 file: %v", err)
		}
		if err := c.FS(bob).Chmod("/home/mine", 0o777); !errors.Is(err, syscall.EPERM) {
			t.Fatalf("bob chmods alice's file: %v", err)
		}
	})
}

func TestMkdirAllAndRemoveAll(t *testing.T) {
	forBackends(t, func(t *testing.T, newClient func() *Client) {
		fsys := newClient().FS(RootCred)
		mustDo(t, fsys.MkdirAll("/x/y/z", 0o755))
		mustDo(t, fsys.MkdirAll("/x/y/z", 0o755)) // exists: nil
		mustDo(t, fsys.WriteFile("/x/file", nil, 0o644))
		if err := fsys.MkdirAll("/x/file/sub", 0o755); !errors.Is(err, syscall.ENOTDIR) {
			t.Fatalf("MkdirAll through a file: %v", err)
		}
		// A tree wider than one ReadDir batch, with files and directories.
		for i := range defaultReadDirBatch + 10 {
			mustDo(t, fsys.WriteFile("/x/y/f"+itoa(i), []byte("d"), 0o644))
		}
		mustDo(t, fsys.Symlink("/x/y", "/x/y/z/back"))
		mustDo(t, fsys.RemoveAll("/x"))
		if _, err := fsys.Stat("/x"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("after RemoveAll: %v", err)
		}
		mustDo(t, fsys.RemoveAll("/never-was"))
		// Nothing is left.
		if ents, err := fsys.ReadDir("/"); err != nil || len(ents) != 0 {
			t.Fatalf("root after RemoveAll: %v, %v", ents, err)
		}
	})
}

// itoa formats i with four digits, so names sort as numbers.
func itoa(i int) string { return fmt.Sprintf("%04d", i) }

func TestRemoveRenameLink(t *testing.T) {
	forBackends(t, func(t *testing.T, newClient func() *Client) {
		fsys := newClient().FS(RootCred)
		mustDo(t, fsys.Mkdir("/d", 0o755))
		mustDo(t, fsys.WriteFile("/d/f", []byte("1"), 0o644))
		if err := fsys.Remove("/d"); !errors.Is(err, syscall.ENOTEMPTY) {
			t.Fatalf("Remove of a full directory: %v", err)
		}
		mustDo(t, fsys.Link("/d/f", "/d/g"))
		if fi, _ := fsys.Stat("/d/g"); fi.Sys().(*Attr).Nlink != 2 {
			t.Fatalf("nlink after link: %d", fi.Sys().(*Attr).Nlink)
		}
		mustDo(t, fsys.Rename("/d/g", "/h"))
		mustDo(t, fsys.WriteFile("/other", nil, 0o644))
		if err := fsys.Rename2("/h", "/other", RenameNoReplace); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("rename with NOREPLACE over a file: %v", err)
		}
		mustDo(t, fsys.Remove("/other"))
		var le *os.LinkError
		if err := fsys.Rename("/nope", "/x"); !errors.As(err, &le) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("rename of a missing name: %v", err)
		}
		mustDo(t, fsys.Remove("/h"))
		mustDo(t, fsys.Remove("/d/f"))
		mustDo(t, fsys.Remove("/d"))
		if err := fsys.Remove("/"); !errors.Is(err, syscall.EBUSY) {
			t.Fatalf("Remove of the root: %v", err)
		}
		if err := fsys.Mkdir("/", 0o755); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("Mkdir of the root: %v", err)
		}
	})
}

func TestFSFileIsOsLike(t *testing.T) {
	forBackends(t, func(t *testing.T, newClient func() *Client) {
		fsys := newClient().FS(RootCred)
		data := make([]byte, 3*copyBlock+12345)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		f, err := fsys.Create("/big")
		mustDo(t, err)
		if n, err := io.Copy(f, bytes.NewReader(data)); err != nil || n != int64(len(data)) {
			t.Fatalf("io.Copy in: %d, %v", n, err)
		}
		mustDo(t, f.Close())
		g, err := fsys.Open("/big")
		mustDo(t, err)
		var out bytes.Buffer
		if n, err := io.Copy(&out, g); err != nil || n != int64(len(data)) || !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("io.Copy out: %d, %v, equal %v", n, err, bytes.Equal(out.Bytes(), data))
		}
		// Seek and Read.
		if off, err := g.Seek(-10, io.SeekEnd); err != nil || off != int64(len(data)-10) {
			t.Fatalf("Seek end: %d, %v", off, err)
		}
		buf := make([]byte, 20)
		n, err := io.ReadFull(g, buf)
		if n != 10 || err != io.ErrUnexpectedEOF || !bytes.Equal(buf[:10], data[len(data)-10:]) {
			t.Fatalf("read of the last 10 bytes: %d, %v", n, err)
		}
		if n, err := g.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("read at EOF: %d, %v", n, err)
		}
		if n, err := g.ReadAt(buf, int64(len(data)-5)); n != 5 || err != io.EOF {
			t.Fatalf("ReadAt across EOF: %d, %v (io.ReaderAt wants io.EOF with a short read)", n, err)
		}
		if _, err := g.Write([]byte("x")); !errors.Is(err, syscall.EBADF) {
			t.Fatalf("write to a read-only file: %v", err)
		}
		mustDo(t, g.Close())

		// O_APPEND with a position.
		a, err := fsys.OpenFile("/log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		mustDo(t, err)
		a.WriteString("a")
		a.Seek(0, io.SeekStart)
		a.WriteString("b")
		if _, err := a.WriteAt([]byte("c"), 0); err == nil {
			t.Fatal("WriteAt on an O_APPEND file succeeded; os.File refuses it")
		}
		mustDo(t, a.Close())
		if b, _ := fsys.ReadFile("/log"); string(b) != "ab" {
			t.Fatalf("appended file holds %q", b)
		}
		// O_EXCL and O_TRUNC.
		if _, err := fsys.OpenFile("/log", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("O_EXCL on an existing file: %v", err)
		}
		tr, err := fsys.OpenFile("/log", os.O_WRONLY|os.O_TRUNC, 0)
		mustDo(t, err)
		mustDo(t, tr.Close())
		if fi, _ := fsys.Stat("/log"); fi.Size() != 0 {
			t.Fatalf("size after O_TRUNC: %d", fi.Size())
		}
		// Directories open for reading only, and list in chunks.
		mustDo(t, fsys.Mkdir("/dir", 0o755))
		for i := range 5 {
			mustDo(t, fsys.WriteFile("/dir/"+itoa(i), nil, 0o644))
		}
		if _, err := fsys.OpenFile("/dir", os.O_RDWR, 0); !errors.Is(err, syscall.EISDIR) {
			t.Fatalf("open a directory for writing: %v", err)
		}
		d, err := fsys.Open("/dir")
		mustDo(t, err)
		var names []string
		for range 10 {
			ents, err := d.ReadDir(2)
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if err == io.EOF {
				break
			}
			mustDo(t, err)
		}
		slices.Sort(names)
		if strings.Join(names, ",") != "0000,0001,0002,0003,0004" {
			t.Fatalf("listing in chunks of 2: %v", names)
		}
		mustDo(t, d.Close())
	})
}
