package pmem

import (
	"bytes"
	"errors"
	"fmt"
	"os"
)

// Create makes a new region file of size bytes at path and formats it.
// The file's blocks are allocated first (ErrNoSpace when its file system
// cannot hold them, rather than SIGBUS later), and the region is built as
// path+".creating" and takes its name only once it is formatted and
// durable, so a failure or a crash at any point leaves no half-made
// region at path. It refuses a path that exists; octofs format prepares
// existing files and devices.
func Create(path string, size int64, fo FormatOptions, o Options) (*Region, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("pmem: create region %s: %w: open it instead, or reformat it with octofs format --pmem %s --force", path, os.ErrExist, path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("pmem: create region: %w", err)
	}
	tmp := path + ".creating"
	if err := removeStaleCreate(tmp); err != nil {
		return nil, err
	}
	m, err := OpenFileMedium(tmp, FileOptions{Require: o.Require, Create: true, Size: size})
	if err != nil {
		return nil, err
	}
	r, err := Format(m, fo, o)
	if err == nil {
		err = m.sync()
	}
	if err == nil {
		err = linkNew(tmp, path)
	}
	os.Remove(tmp) // the region lives on under path
	if err != nil {
		if r != nil {
			r.Close()
		} else {
			m.Close()
		}
		return nil, fmt.Errorf("pmem: create region %s: %w", path, err)
	}
	m.info.Path = path
	r.info.Path = path
	return r, nil
}

// FormatFileOptions say how octofs format treats the path it is given.
type FormatFileOptions struct {
	// Size creates a missing region file of this many bytes. An existing
	// file or device is formatted at its own size; a Size that disagrees
	// with it is refused.
	Size int64
	// Force formats a path that already holds an octofs region or other
	// data, destroying it.
	Force bool
}

// FormatFile prepares a region on path, which may be missing (a new file
// of ff.Size bytes, see Create), an existing file (preallocated if it is
// sparse) or a device-DAX device. It refuses, with ErrFormatted, a path
// whose superblock area holds an octofs region of any version or any
// other non-zero data, unless ff.Force. The region is returned open.
func FormatFile(path string, fo FormatOptions, ff FormatFileOptions, o Options) (*Region, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if ff.Size <= 0 {
			return nil, fmt.Errorf("%w: %s does not exist: give its size (octofs format --pmem %s --size 64GiB) to create it", ErrGeometry, path, path)
		}
		return Create(path, ff.Size, fo, o)
	}
	m, err := OpenFileMedium(path, FileOptions{Require: o.Require})
	if err != nil {
		return nil, err
	}
	if ff.Size > 0 && int64(len(m.Bytes())) != ff.Size {
		m.Close()
		return nil, fmt.Errorf("%w: %s is %d bytes, not the %d given with --size: omit --size to format it at its size, or remove it to create a new one", ErrGeometry, path, len(m.Bytes()), ff.Size)
	}
	if !ff.Force {
		if what := describeContent(m.Bytes()); what != "" {
			m.Close()
			return nil, fmt.Errorf("%w: %s %s; formatting destroys it: check the path, and pass --force if its content is no longer needed", ErrFormatted, path, what)
		}
	}
	r, err := Format(m, fo, o)
	if err != nil {
		m.Close()
		return nil, err
	}
	return r, nil
}

// describeContent says what the superblock area of b holds, "" when it
// is blank. It reads only the two superblock slots.
func describeContent(b []byte) (what string) {
	err := Guarded(func() error {
		n := min(len(b), 2*superblockSlot)
		for _, c := range []int{0, superblockSlot} {
			if c+superblockSize > n {
				continue
			}
			sb, err := DecodeSuperblock(b[c : c+superblockSlot])
			switch {
			case err == nil:
				cluster := "not yet in a cluster"
				if !sb.ClusterUUID.IsZero() {
					cluster = fmt.Sprintf("of cluster %s, node %#x", sb.ClusterUUID, sb.NodeID)
				}
				what = fmt.Sprintf("holds octofs region %s (%s, formatted with %d-byte blocks)", sb.RegionUUID, cluster, sb.Geometry.BlockSize)
				return nil
			case errors.Is(err, ErrNotFormatted), errors.Is(err, ErrBadMagic):
			default:
				what = fmt.Sprintf("holds an octofs region that this build cannot read (%v)", err)
				return nil
			}
		}
		if !bytes.Equal(b[:n], make([]byte, n)) {
			what = "holds data that is not an octofs region"
		}
		return nil
	})
	if err != nil {
		return fmt.Sprintf("cannot be read (%v)", err)
	}
	return what
}
