package fuse

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/octofs/octofs/client"
)

// dirHandle lists a directory by cookie. The offsets the kernel sees
// (telldir) are 1 after ".", 2 after "..", and 2+cookie after an entry
// whose server cookie is cookie, so seekdir to any offset handed out
// resumes exactly there, however the directory changed meanwhile.
type dirHandle struct {
	n *node
	// f is the directory's open, registered with its owner so that a
	// removed directory stays answerable (fstat: nlink 0) until closed.
	f *client.File

	mu   sync.Mutex
	pos  uint64 // offset of the next entry to return: 0 ".", 1 "..", else 2+cookie of the last returned
	page []client.DirEntry
	eof  bool // page holds the last entries: the listing ends when it runs out
	// last is the entry Readdirent returned last: READDIRPLUS asks Lookup
	// for it next.
	last client.DirEntry
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
)

// dirPage is how many entries one readdir call asks the server for.
const dirPage = 512

// fill reads the page of entries after the current position.
func (d *dirHandle) fill(ctx context.Context) error {
	ctx = detach(ctx)
	cookie := uint64(0)
	if d.pos > 2 {
		cookie = d.pos - 2
	}
	ents, eof, err := d.f.ReadDirPage(ctx, cookie, dirPage)
	if err != nil {
		return err
	}
	d.page, d.eof = ents, eof || len(ents) == 0
	return nil
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	ctx = detach(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.pos {
	case 0:
		d.pos = 1
		return &fuse.DirEntry{Name: ".", Ino: d.n.ino(), Mode: syscall.S_IFDIR, Off: 1}, 0
	case 1:
		d.pos = 2
		ino := d.n.ino()
		if _, p := d.n.Parent(); p != nil {
			ino = p.StableAttr().Ino
		}
		return &fuse.DirEntry{Name: "..", Ino: ino, Mode: syscall.S_IFDIR, Off: 2}, 0
	}
	if len(d.page) == 0 {
		if d.eof {
			return nil, 0
		}
		if err := d.fill(ctx); err != nil {
			return nil, d.n.fail("readdir", err)
		}
		if len(d.page) == 0 {
			return nil, 0
		}
	}
	e := d.page[0]
	d.page = d.page[1:]
	d.pos = 2 + e.Cookie
	d.last = e
	return &fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Type, Off: d.pos}, 0
}

// Lookup answers READDIRPLUS for the entry Readdirent returned last, with
// the attributes its listing carried: ls -l costs no lookup per entry. An
// entry listed without them (its inode lives in another partition, or the
// caller may not search the directory) is left out of the plus part (the
// kernel looks it up when it needs it).
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	d.mu.Lock()
	e := d.last
	d.mu.Unlock()
	if e.Name != name || e.Attr == nil {
		return nil, syscall.ENOENT
	}
	return d.n.entry(ctx, e.Attr, out), 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off == d.pos {
		return 0
	}
	d.pos = off
	d.page, d.eof = nil, false
	return 0
}

func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {
	d.f.Close(detach(ctx))
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	// Namespace operations are durable when they return.
	return 0
}
