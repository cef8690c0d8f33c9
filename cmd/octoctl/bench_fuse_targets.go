package main

import (
	"io"
	"os"
	"path/filepath"

	"github.com/octofs/octofs/client"
)

// The targets `octoctl bench fuse` measures: a directory of a mounted
// file system (the octofs mount, go-fuse's loopback) and the client
// library's native API, behind one interface.

// benchFS is one target.
type benchFS interface {
	create(name string) error
	stat(name string) error
	readSmall(name string, buf []byte) error
	writeSmall(name string, data []byte) error
	remove(name string) error
	mkdir(name string) error
	writeSeq(name string, chunk []byte, n int) error
	readSeq(name string, chunk []byte) (int, error)
}

// dirFS is a directory of a mounted file system.
type dirFS struct{ root string }

func (d dirFS) p(name string) string { return filepath.Join(d.root, name) }

func (d dirFS) create(name string) error {
	f, err := os.OpenFile(d.p(name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
func (d dirFS) stat(name string) error { _, err := os.Stat(d.p(name)); return err }
func (d dirFS) readSmall(name string, buf []byte) error {
	f, err := os.Open(d.p(name))
	if err != nil {
		return err
	}
	_, err = f.Read(buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
func (d dirFS) writeSmall(name string, data []byte) error {
	return os.WriteFile(d.p(name), data, 0o644)
}
func (d dirFS) remove(name string) error { return os.Remove(d.p(name)) }
func (d dirFS) mkdir(name string) error  { return os.Mkdir(d.p(name), 0o755) }
func (d dirFS) writeSeq(name string, chunk []byte, n int) error {
	f, err := os.OpenFile(d.p(name), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for i := range n {
		if _, err := f.WriteAt(chunk, int64(i*len(chunk))); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
func (d dirFS) readSeq(name string, chunk []byte) (int, error) {
	f, err := os.Open(d.p(name))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return readAll(f, chunk)
}

// readAll reads r to its end with reads of len(chunk) and returns the
// bytes read.
func readAll(r io.Reader, chunk []byte) (int, error) {
	total := 0
	for {
		n, err := r.Read(chunk)
		total += n
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// nativeFS is the client library's native API under a directory.
type nativeFS struct {
	fs   *client.FS
	root string
}

func (n nativeFS) p(name string) string { return n.root + "/" + name }

func (n nativeFS) create(name string) error {
	f, err := n.fs.OpenFile(n.p(name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
func (n nativeFS) stat(name string) error { _, err := n.fs.Stat(n.p(name)); return err }
func (n nativeFS) readSmall(name string, buf []byte) error {
	f, err := n.fs.Open(n.p(name))
	if err != nil {
		return err
	}
	_, err = f.Read(buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
func (n nativeFS) writeSmall(name string, data []byte) error {
	return n.fs.WriteFile(n.p(name), data, 0o644)
}
func (n nativeFS) remove(name string) error { return n.fs.Remove(n.p(name)) }
func (n nativeFS) mkdir(name string) error  { return n.fs.Mkdir(n.p(name), 0o755) }
func (n nativeFS) writeSeq(name string, chunk []byte, count int) error {
	f, err := n.fs.OpenFile(n.p(name), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for i := range count {
		if _, err := f.WriteAt(chunk, int64(i*len(chunk))); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
func (n nativeFS) readSeq(name string, chunk []byte) (int, error) {
	f, err := n.fs.Open(n.p(name))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return readAll(f, chunk)
}
