package client

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/octofs/octofs/cluster"
)

// The client's file semantics, on both backends (Memory and the real
// namespace service): what FUSE and programs rely on.

func TestCloseToOpenAcrossClients(t *testing.T) {
	forBackends(t, func(t *testing.T, newClient func() *Client) {
		ctx := context.Background()
		c1, c2 := newClient(), newClient()
		a, w, err := c1.Create(ctx, alice, cluster.RootInode, "f", 0o644, syscall.O_RDWR)
		if errors.Is(err, syscall.EACCES) {
			// The real root is 0755 root:root: make a home first.
			if _, err := c1.Mkdir(ctx, RootCred, cluster.RootInode, "h", 0o777); err != nil {
				t.Fatal(err)
			}
			h, _ := c1.Lookup(ctx, alice, cluster.RootInode, "h")
			a, w, err = c1.Create(ctx, alice, h.Ino, "f", 0o644, syscall.O_RDWR)
		}
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte("0123456789"), 1000)
		if _, err := w.WriteAt(ctx, msg, 0); err != nil {
			t.Fatal(err)
		}
		// Within the writing client: visible at once, size included.
		if got, err := c1.GetAttr(ctx, alice, a.Ino); err != nil || got.Size != uint64(len(msg)) {
			t.Fatalf("size in the writer before close: %d, %v", got.Size, err)
		}
		// Another client sees nothing committed yet.
		if got, err := c2.GetAttr(ctx, alice, a.Ino); err != nil || got.Size != 0 {
			t.Fatalf("size in another client before close: %d, %v", got.Size, err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := c2.Open(ctx, alice, a.Ino, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg)+10)
		n, err := r.ReadAt(ctx, buf, 0)
		if err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("read after close-to-open: %d bytes, %v", n, err)
		}
		if got, _ := r.Attr(ctx); got.Size != uint64(len(msg)) || got.Mtime.IsZero() {
			t.Fatalf("attributes after open: size %d mtime %v", got.Size, got.Mtime)
		}
		r.Close(ctx)
	})
}

// home makes a directory alice and bob may write in, and returns it.
func home(t *testing.T, c *Client) uint64 {
	t.Helper()
	a, err := c.Mkdir(context.Background(), RootCred, cluster.RootInode, "home", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	return a.Ino
}

func TestSemanticsOnBothBackends(t *testing.T) {
	forBackends(t, func(t *testing.T, newClient func() *Client) {
		ctx := context.Background()
		c1, c2 := newClient(), newClient()
		dir := home(t, c1)

		t.Run("append from two clients", func(t *testing.T) {
			a, f1, err := c1.Create(ctx, alice, dir, "log", 0o644, syscall.O_WRONLY|syscall.O_APPEND)
			if err != nil {
				t.Fatal(err)
			}
			f1.WriteAt(ctx, []byte("one\n"), 0)
			f1.Close(ctx)
			f2, err := c2.Open(ctx, alice, a.Ino, syscall.O_WRONLY|syscall.O_APPEND)
			if err != nil {
				t.Fatal(err)
			}
			f2.WriteAt(ctx, []byte("two\n"), 0)
			f2.Close(ctx)
			r, _ := c1.Open(ctx, alice, a.Ino, syscall.O_RDONLY)
			buf := make([]byte, 64)
			n, _ := r.ReadAt(ctx, buf, 0)
			r.Close(ctx)
			if string(buf[:n]) != "one\ntwo\n" {
				t.Fatalf("file holds %q", buf[:n])
			}
		})

		t.Run("creator writes a 0444 file and ftruncates it", func(t *testing.T) {
			_, f, err := c1.Create(ctx, alice, dir, "ro", 0o444, syscall.O_WRONLY)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(ctx, []byte("abcdef"), 0); err != nil {
				t.Fatalf("write: %v", err)
			}
			if err := f.Truncate(ctx, 3); err != nil {
				t.Fatalf("ftruncate through the creating descriptor: %v", err)
			}
			if err := f.Close(ctx); err != nil {
				t.Fatal(err)
			}
			a, _ := c2.Lookup(ctx, alice, dir, "ro")
			if a.Size != 3 {
				t.Fatalf("size %d after ftruncate to 3", a.Size)
			}
			if _, err := c2.Open(ctx, alice, a.Ino, syscall.O_WRONLY); err != syscall.EACCES {
				t.Fatalf("a later open for writing of the 0444 file: %v, want EACCES", err)
			}
		})

		t.Run("unlinked while open", func(t *testing.T) {
			a, f, err := c1.Create(ctx, alice, dir, "tmp", 0o600, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(ctx, []byte("still here"), 0)
			if err := c2.Unlink(ctx, alice, dir, "tmp"); err != nil {
				t.Fatal(err)
			}
			if _, err := c2.Lookup(ctx, alice, dir, "tmp"); err != syscall.ENOENT {
				t.Fatalf("lookup after unlink: %v", err)
			}
			buf := make([]byte, 10)
			if n, err := f.ReadAt(ctx, buf, 0); err != nil || string(buf[:n]) != "still here" {
				t.Fatalf("read of the unlinked open file: %q, %v", buf[:n], err)
			}
			if err := f.Flush(ctx); err != nil {
				t.Fatalf("flush of the unlinked open file: %v", err)
			}
			if got, err := c1.GetAttr(ctx, alice, a.Ino); err != nil || got.Nlink != 0 {
				t.Fatalf("attributes of the unlinked open file: nlink %d, %v", got.Nlink, err)
			}
			if err := f.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})

		t.Run("blocking lock across clients", func(t *testing.T) {
			a, f1, err := c1.Create(ctx, alice, dir, "lk", 0o644, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			f2, err := c2.Open(ctx, alice, a.Ino, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			lk := Lock{Kind: LockPOSIX, Type: LockWrite, Owner: 1, Start: 0, End: 99}
			if err := f1.SetLk(ctx, lk, false); err != nil {
				t.Fatal(err)
			}
			// Same owner number, another client: a conflict.
			if err := f2.SetLk(ctx, lk, false); err != syscall.EAGAIN {
				t.Fatalf("conflicting lock from another client: %v", err)
			}
			got, err := f2.GetLk(ctx, lk)
			if err != nil || got.Type != LockWrite || got.Start != 0 || got.End != 99 {
				t.Fatalf("GetLk = %+v, %v", got, err)
			}
			done := make(chan error, 1)
			go func() { done <- f2.SetLk(ctx, lk, true) }()
			select {
			case err := <-done:
				t.Fatalf("blocking lock returned %v while the lock was held", err)
			case <-time.After(50 * time.Millisecond):
			}
			unlock := lk
			unlock.Type = LockUnlock
			if err := f1.SetLk(ctx, unlock, false); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("blocking lock not granted within 10s of the release")
			}
			f1.Close(ctx)
			f2.Close(ctx)
		})

		t.Run("errors as Linux gives them", func(t *testing.T) {
			d, err := c1.Mkdir(ctx, alice, dir, "full", 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c1.Mknod(ctx, alice, d.Ino, "x", syscall.S_IFREG|0o644, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := c1.Mknod(ctx, alice, dir, "plain", syscall.S_IFREG|0o644, 0); err != nil {
				t.Fatal(err)
			}
			for name, tc := range map[string]struct {
				err  error
				want syscall.Errno
			}{
				"rmdir of a full directory": {c1.Rmdir(ctx, alice, dir, "full"), syscall.ENOTEMPTY},
				"unlink of a directory":     {c1.Unlink(ctx, alice, dir, "full"), syscall.EISDIR},
				"rmdir of a file":           {c1.Rmdir(ctx, alice, d.Ino, "x"), syscall.ENOTDIR},
				"unlink of a missing name":  {c1.Unlink(ctx, alice, dir, "nope"), syscall.ENOENT},
				"mkdir over a file":         {errOf(c1.Mkdir(ctx, alice, d.Ino, "x", 0o755)), syscall.EEXIST},
				"bob writes alice's dir":    {errOf(c1.Mknod(ctx, bob, d.Ino, "y", syscall.S_IFREG|0o644, 0)), syscall.EACCES},
				"rename a dir over a file":  {c1.Rename(ctx, alice, dir, "full", dir, "plain", 0), syscall.ENOTDIR},
				"rename a file over a dir":  {c1.Rename(ctx, alice, dir, "plain", dir, "full", 0), syscall.EISDIR},
			} {
				if tc.err != tc.want {
					t.Errorf("%s: %v, want %v", name, tc.err, tc.want)
				}
			}
		})

		t.Run("readdir pages end with eof", func(t *testing.T) {
			d, err := c1.Mkdir(ctx, alice, dir, "list", 0o755)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				if _, err := c1.Mknod(ctx, alice, d.Ino, "e"+string(rune('a'+i)), syscall.S_IFREG|0o644, 0); err != nil {
					t.Fatal(err)
				}
			}
			ents, eof, err := c1.ReadDirPage(ctx, alice, d.Ino, 0, 3)
			if err != nil || len(ents) != 3 || eof {
				t.Fatalf("first page: %d entries, eof %v, %v", len(ents), eof, err)
			}
			ents2, eof, err := c1.ReadDirPage(ctx, alice, d.Ino, ents[2].Cookie, 3)
			if err != nil || len(ents2) != 2 || !eof {
				t.Fatalf("second page: %d entries, eof %v, %v", len(ents2), eof, err)
			}
		})
	})
}

func errOf(_ Attr, err error) error { return err }
