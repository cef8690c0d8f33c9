package conformance

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// dirent is one entry getdents64 returned, with the offset that resumes
// the listing after it (what telldir reports).
type dirent struct {
	name string
	ino  uint64
	off  int64
	typ  uint8
}

// getdentsBuf is small on purpose: a listing of a few dozen entries takes
// several getdents calls, as a listing of a large directory does.
const getdentsBuf = 1024

// readDirents reads the rest of the listing of the directory open as fd.
func readDirents(fd int) ([]dirent, error) {
	var out []dirent
	buf := make([]byte, getdentsBuf)
	for range 1 << 20 { // bounded: a million pages
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, parseDirents(buf[:n])...)
	}
	return nil, fmt.Errorf("conformance: a listing that never ends")
}

// parseDirents decodes linux_dirent64 records.
func parseDirents(b []byte) []dirent {
	var out []dirent
	for len(b) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			break
		}
		name := b[19:reclen]
		if i := strings.IndexByte(string(name), 0); i >= 0 {
			name = name[:i]
		}
		out = append(out, dirent{name: string(name), ino: binary.NativeEndian.Uint64(b[0:8]),
			off: int64(binary.NativeEndian.Uint64(b[8:16])), typ: b[18]})
		b = b[reclen:]
	}
	return out
}

func listDir(path string) ([]dirent, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readDirents(fd)
}

var dtypeNames = map[uint8]string{unix.DT_REG: "regular", unix.DT_DIR: "dir", unix.DT_LNK: "symlink",
	unix.DT_FIFO: "fifo", unix.DT_SOCK: "socket", unix.DT_CHR: "char", unix.DT_BLK: "block", unix.DT_UNKNOWN: "unknown"}

// formatListing prints a listing: "ls" the sorted names (without "." and
// ".."), "lstypes" name:d_type pairs, "count" how many names, how many
// came more than once, and whether "." and ".." were there.
func formatListing(op string, ents []dirent) string {
	seen := map[string]int{}
	var names []string
	for _, e := range ents {
		seen[e.name]++
		if e.name == "." || e.name == ".." || seen[e.name] > 1 {
			continue
		}
		switch op {
		case "lstypes":
			names = append(names, e.name+":"+dtypeNames[e.typ])
		default:
			names = append(names, e.name)
		}
	}
	sort.Strings(names)
	if op == "count" {
		dups := 0
		for _, k := range seen {
			dups += k - 1
		}
		return fmt.Sprintf("n=%d dups=%d dots=%d", len(names), dups, min(seen["."], 1)+min(seen[".."], 1))
	}
	if len(names) == 0 {
		return "(empty)"
	}
	return strings.Join(names, ",")
}

// seekdirCheck lists dir, then seeks back to the offset after its k-th
// entry (counting "." and "..") and lists again from there: the second
// listing must be the first one's tail.
func seekdirCheck(dir string, k int) (string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	all, err := readDirents(fd)
	if err != nil {
		return "", err
	}
	if k < 1 || k > len(all) {
		return "", fmt.Errorf("%w: seekdir after entry %d of %d", ErrScript, k, len(all))
	}
	if _, err := unix.Seek(fd, all[k-1].off, 0); err != nil {
		return "", err
	}
	rest, err := readDirents(fd)
	if err != nil {
		return "", err
	}
	want := all[k:]
	if len(rest) != len(want) {
		return fmt.Sprintf("tail of %d entries, want %d", len(rest), len(want)), nil
	}
	for i := range rest {
		if rest[i].name != want[i].name {
			return fmt.Sprintf("tail entry %d is %q, want %q", i, rest[i].name, want[i].name), nil
		}
	}
	// And from the start again.
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return "", err
	}
	again, err := readDirents(fd)
	if err != nil {
		return "", err
	}
	if len(again) != len(all) {
		return fmt.Sprintf("rewound listing has %d entries, want %d", len(again), len(all)), nil
	}
	return fmt.Sprintf("ok n=%d", len(all)), nil
}

// onThreadAs runs f on a new locked thread with u's credentials, and
// waits for it. The thread exits afterwards.
func onThreadAs(u User, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := setCreds(u); err != nil {
			errc <- fmt.Errorf("set credentials: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// errCounts counts errnos by name.
type errCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *errCounts) add(op string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	name := err.Error()
	if e, ok := err.(unix.Errno); ok {
		name = errnoName(e)
	}
	c.m[op+":"+name]++
}

func (c *errCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) == 0 {
		return "none"
	}
	var out []string
	for k, v := range c.m {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// storm is mdtest's pattern in one directory: threads create files
// concurrently, stat every one, the directory is listed, and they remove
// them all, each thread on its own OS thread with u's credentials.
func storm(dir string, threads, files int, u User) (string, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	var errs errCounts
	var mu sync.Mutex
	counts := map[string]int{}
	phase := func(name string, f func(t, i int) error) {
		var wg sync.WaitGroup
		for t := range threads {
			wg.Go(func() {
				ok := 0
				err := onThreadAs(u, func() error {
					for i := range files {
						if err := f(t, i); err != nil {
							errs.add(name, err)
							continue
						}
						ok++
					}
					return nil
				})
				if err != nil {
					errs.add(name, err)
				}
				mu.Lock()
				counts[name] += ok
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	fname := func(t, i int) string { return fmt.Sprintf("s%02d.%05d", t, i) }
	phase("create", func(t, i int) error {
		fd, err := unix.Openat(dfd, fname(t, i), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	})
	phase("stat", func(t, i int) error {
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, fname(t, i), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || st.Size != 0 {
			return fmt.Errorf("bad attributes")
		}
		return nil
	})
	ents, err := listDir(dir)
	if err != nil {
		return "", err
	}
	listed := formatListing("count", ents)
	phase("remove", func(t, i int) error { return unix.Unlinkat(dfd, fname(t, i), 0) })
	ents, err = listDir(dir)
	if err != nil {
		return "", err
	}
	left := formatListing("count", ents)
	return fmt.Sprintf("created=%d stat=%d listed=[%s] removed=%d left=[%s] errors=%s",
		counts["create"], counts["stat"], listed, counts["remove"], left, errs.String()), nil
}

// churn lists a directory of n entries in small pages while another
// thread removes and adds other entries: every entry that is there
// throughout must be listed exactly once, and no name twice.
func churn(dir string, n int, u User) (string, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	mk := func(name string) error {
		fd, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	}
	var errs errCounts
	for i := range n {
		for _, name := range []string{fmt.Sprintf("e%05d", i), fmt.Sprintf("x%05d", i)} {
			if err := mk(name); err != nil {
				errs.add("setup", err)
			}
		}
	}
	lfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(lfd)
	buf := make([]byte, getdentsBuf)
	var got []dirent
	first, err := unix.Getdents(lfd, buf)
	if err != nil {
		return "", err
	}
	got = append(got, parseDirents(buf[:first])...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := onThreadAs(u, func() error {
			for i := range n {
				if err := unix.Unlinkat(dfd, fmt.Sprintf("x%05d", i), 0); err != nil {
					errs.add("unlink", err)
				}
				if err := mk(fmt.Sprintf("y%05d", i)); err != nil {
					errs.add("create", err)
				}
			}
			return nil
		})
		if err != nil {
			errs.add("thread", err)
		}
	}()
	rest, err := readDirents(lfd)
	<-done
	if err != nil {
		return "", err
	}
	got = append(got, rest...)
	seen := map[string]int{}
	for _, e := range got {
		seen[e.name]++
	}
	once, dups := 0, 0
	for i := range n {
		if seen[fmt.Sprintf("e%05d", i)] == 1 {
			once++
		}
	}
	for _, k := range seen {
		if k > 1 {
			dups++
		}
	}
	return fmt.Sprintf("untouched-once=%d/%d names-twice=%d errors=%s", once, n, dups, errs.String()), nil
}

// walkTree describes the working directory's tree as root: one line per
// entry, "path fields", with a symlink's target, a device's numbers, a
// regular file's length and checksum, and the xattr names of regular
// files and directories.
func walkTree() ([]string, error) {
	fd, err := unix.Open(".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	err = walkDir(fd, "", &out, 0)
	unix.Close(fd)
	sort.Strings(out)
	return out, err
}

func walkDir(dfd int, prefix string, out *[]string, depth int) error {
	if depth > 64 {
		return fmt.Errorf("conformance: tree deeper than 64")
	}
	ents, err := readDirents(dfd)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.name == "." || e.name == ".." {
			continue
		}
		p := prefix + e.name
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			*out = append(*out, p+" "+errnoOf(err))
			continue
		}
		line, _ := statFields(&st, defaultFields)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR, unix.S_IFBLK:
			line += fmt.Sprintf(",rdev=%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		case unix.S_IFLNK:
			buf := make([]byte, 8192)
			n, err := unix.Readlinkat(dfd, e.name, buf)
			if err != nil {
				line += ",readlink=" + errnoOf(err)
			} else {
				line += ",->" + quoteShort(buf[:n])
			}
		case unix.S_IFREG, unix.S_IFDIR:
			flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				flags |= unix.O_DIRECTORY
			}
			fd, err := unix.Openat(dfd, e.name, flags, 0)
			if err != nil {
				line += ",open=" + errnoOf(err)
				break
			}
			if names, err := flistxattr(fd); err != nil {
				line += ",xattrs=" + errnoOf(err)
			} else if names != "(none)" {
				line += ",xattrs=" + names
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				err = walkDir(fd, p+"/", out, depth+1)
			} else if st.Size > maxWalkRead {
				line += ",data=not read"
			} else {
				var b []byte
				if b, err = readAll(fd); err == nil {
					line += ",data=" + checksum(b)
				}
			}
			unix.Close(fd)
			if err != nil {
				return err
			}
		}
		*out = append(*out, p+" "+line)
	}
	return nil
}

// maxWalkRead is the largest file whose bytes the walk reads (sparse files
// of terabytes are compared by size only).
const maxWalkRead = 64 << 20

func flistxattr(fd int) (string, error) {
	buf := make([]byte, 1<<16)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil {
		return "", err
	}
	return xattrNames(buf[:n]), nil
}

func errnoOf(err error) string {
	if e, ok := err.(unix.Errno); ok {
		return errnoName(e)
	}
	return err.Error()
}
