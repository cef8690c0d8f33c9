package conformance

import (
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The executor runs a case's steps on one OS thread of the child process.
// The thread has its own working directory and umask (unshare(CLONE_FS)),
// so cases run side by side, and it takes each step's credentials with
// the raw setgroups, setresgid and setresuid system calls, which change
// only the calling thread (Go's own wrappers change every thread). The
// saved uid stays 0 so the thread can become root again between steps;
// the kernel still drops every capability while the effective and
// file-system uids are not 0, so a step runs with exactly the user's
// rights. The thread is never unlocked: it exits with its goroutine, and
// its credentials with it.

// ErrScript means a case's script is malformed: a test bug, not a file
// system answer.
var ErrScript = errors.New("conformance: malformed script")

// executor is the state of one running case.
type executor struct {
	dir   string
	fds   map[string]int
	snaps map[string]times
	// clockRes is CLOCK_REALTIME_COARSE's resolution: file systems stamp
	// times from that clock.
	clockRes time.Duration
}

type times struct{ a, m, c unix.Timespec }

// RunCase runs steps in the fresh directory dir (made here, mode 0755,
// owned by root) on the calling goroutine, which it locks to its thread
// for good. Call it on a goroutine of its own that ends afterwards.
func RunCase(dir string, steps []string) Result {
	runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
	var r Result
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		r.Err = fmt.Sprintf("unshare(CLONE_FS): %v", err)
		return r
	}
	if err := unix.Mkdir(dir, 0o755); err != nil {
		r.Err = fmt.Sprintf("mkdir %s: %v", dir, err)
		return r
	}
	if err := unix.Chmod(dir, 0o755); err != nil {
		r.Err = fmt.Sprintf("chmod %s: %v", dir, err)
		return r
	}
	if err := unix.Chdir(dir); err != nil {
		r.Err = fmt.Sprintf("chdir %s: %v", dir, err)
		return r
	}
	unix.Umask(0)
	x := &executor{dir: dir, fds: map[string]int{}, snaps: map[string]times{}, clockRes: coarseRes()}
	defer x.closeAll()
	for _, line := range steps {
		s, err := ParseStep(line)
		if err != nil {
			r.Err = err.Error()
			return r
		}
		out, err := x.run(s)
		if err != nil {
			r.Err = fmt.Sprintf("%q: %v", line, err)
			return r
		}
		r.Steps = append(r.Steps, out)
	}
	x.closeAll()
	tree, err := walkTree()
	if err != nil {
		r.Err = fmt.Sprintf("walking the result: %v", err)
		return r
	}
	r.Tree = tree
	return r
}

// closeAll closes the descriptors the case left open.
func (x *executor) closeAll() {
	for k, fd := range x.fds {
		unix.Close(fd)
		delete(x.fds, k)
	}
}

// run runs one step as its user and returns the answer.
func (x *executor) run(s Step) (string, error) {
	u := Users[s.User]
	if err := setCreds(u); err != nil {
		restoreRoot()
		return "", fmt.Errorf("set credentials of %s: %w", s.User, err)
	}
	args := expandAll(s.Args)
	for i, a := range args {
		// @k names descriptor k's file: /proc/self/fd/N.
		if strings.HasPrefix(a, "@") {
			name, rest, _ := strings.Cut(a[1:], "/")
			fd, ok := x.fds[name]
			if !ok {
				restoreRoot()
				return "", fmt.Errorf("%w: no descriptor %q", ErrScript, name)
			}
			args[i] = fmt.Sprintf("/proc/self/fd/%d", fd)
			if rest != "" {
				args[i] += "/" + rest
			}
		}
	}
	out, err := x.op(s.Op, args, u)
	if rerr := restoreRoot(); rerr != nil {
		// A thread that cannot become root again would run every later
		// step with the wrong rights.
		panic(fmt.Sprintf("conformance: cannot restore root credentials: %v", rerr))
	}
	var en unix.Errno
	if errors.As(err, &en) {
		return errnoName(en), nil
	}
	if err != nil {
		return "", err
	}
	if out == "" {
		out = "0"
	}
	return out, nil
}

// setCreds makes the calling thread u (groups, then gids, then uids: the
// order in which root may still change them).
func setCreds(u User) error {
	if u.UID == 0 && u.GID == 0 && len(u.Groups) == 0 {
		return nil
	}
	var p unsafe.Pointer
	if len(u.Groups) > 0 {
		p = unsafe.Pointer(&u.Groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(u.Groups)), uintptr(p), 0); e != 0 {
		return e
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(u.GID), uintptr(u.GID), uintptr(u.GID)); e != 0 {
		return e
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(u.UID), uintptr(u.UID), 0); e != 0 {
		return e
	}
	return nil
}

// restoreRoot makes the calling thread root again (its saved uid is 0).
func restoreRoot() error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 0, 0, 0); e != 0 {
		return e
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, 0, 0, 0); e != 0 {
		return e
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

func errnoName(e unix.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno%d", int(e))
}

// Placeholders in arguments, replaced before a step runs: names of 255
// and 256 bytes, paths of 4095 and 4096 bytes (40 directories of 99 bytes
// and a last name, so that the 4096-byte one is too long only as a path),
// symlink targets and xattr values of given sizes.
var placeholders = []struct{ key, val string }{
	{"$N255", strings.Repeat("n", 255)},
	{"$N256", strings.Repeat("n", 256)},
	{"$P4095", longPath(4095)},
	{"$P4096", longPath(4096)},
	{"$T4095", strings.Repeat("t", 4095)},
	{"$T4096", strings.Repeat("t", 4096)},
	{"$V65536", strings.Repeat("v", 65536)},
	{"$V65537", strings.Repeat("v", 65537)},
	{"$V4000", strings.Repeat("v", 4000)},
	{"$X255", "user." + strings.Repeat("x", 250)},
	{"$X256", "user." + strings.Repeat("x", 251)},
	// Bytes a script line cannot hold (JSON would mangle the first).
	{"$BIN", "\xff\xfe"},
	{"$TAB", "a\tb"},
	{"$NL", "a\nb"},
}

func longPath(n int) string {
	dir := strings.Repeat("p", 99) + "/"
	prefix := strings.Repeat(dir, 40)
	return prefix + strings.Repeat("f", n-len(prefix))
}

func expandAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		for _, p := range placeholders {
			a = strings.ReplaceAll(a, p.key, p.val)
		}
		out[i] = a
	}
	return out
}

func parseMode(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: mode %q", ErrScript, s)
	}
	return uint32(v), nil
}

func parseInt(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: number %q", ErrScript, s)
	}
	return v, nil
}

var openFlagNames = map[string]int{
	"O_RDONLY": unix.O_RDONLY, "O_WRONLY": unix.O_WRONLY, "O_RDWR": unix.O_RDWR,
	"O_CREAT": unix.O_CREAT, "O_EXCL": unix.O_EXCL, "O_TRUNC": unix.O_TRUNC, "O_APPEND": unix.O_APPEND,
	"O_NOFOLLOW": unix.O_NOFOLLOW, "O_DIRECTORY": unix.O_DIRECTORY, "O_NOATIME": unix.O_NOATIME,
	"O_NONBLOCK": unix.O_NONBLOCK, "O_PATH": unix.O_PATH, "O_SYNC": unix.O_SYNC, "O_DIRECT": unix.O_DIRECT,
	"O_TMPFILE": unix.O_TMPFILE,
}

func parseOpenFlags(s string) (int, error) {
	f := 0
	for _, n := range strings.Split(s, ",") {
		v, ok := openFlagNames[n]
		if !ok {
			return 0, fmt.Errorf("%w: open flag %q", ErrScript, n)
		}
		f |= v
	}
	return f | unix.O_CLOEXEC, nil
}

// timeArg is a utimensat time: NOW, OMIT, or seconds[.nanoseconds].
func timeArg(s string) (unix.Timespec, error) {
	switch s {
	case "NOW":
		return unix.Timespec{Nsec: unix.UTIME_NOW}, nil
	case "OMIT":
		return unix.Timespec{Nsec: unix.UTIME_OMIT}, nil
	}
	sec, nsec, _ := strings.Cut(s, ".")
	v, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return unix.Timespec{}, fmt.Errorf("%w: time %q", ErrScript, s)
	}
	var n int64
	if nsec != "" {
		if n, err = strconv.ParseInt(nsec, 10, 64); err != nil {
			return unix.Timespec{}, fmt.Errorf("%w: time %q", ErrScript, s)
		}
	}
	return unix.Timespec{Sec: v, Nsec: n}, nil
}

var typeNames = map[uint32]string{unix.S_IFREG: "regular", unix.S_IFDIR: "dir", unix.S_IFLNK: "symlink",
	unix.S_IFIFO: "fifo", unix.S_IFSOCK: "socket", unix.S_IFCHR: "char", unix.S_IFBLK: "block"}

// defaultFields are what stat prints when the step names none.
const defaultFields = "type,mode,uid,gid,nlink,size"

// statFields prints the named fields of st, comma-separated. A
// directory's size prints "-": it is the file system's own business
// (tmpfs counts entries, ext4 and octofs say 4096).
func statFields(st *unix.Stat_t, fields string) (string, error) {
	var out []string
	for _, f := range strings.Split(fields, ",") {
		switch f {
		case "type":
			out = append(out, typeNames[st.Mode&unix.S_IFMT])
		case "mode":
			out = append(out, fmt.Sprintf("%#o", st.Mode&0o7777))
		case "uid":
			out = append(out, strconv.FormatUint(uint64(st.Uid), 10))
		case "gid":
			out = append(out, strconv.FormatUint(uint64(st.Gid), 10))
		case "nlink":
			out = append(out, strconv.FormatUint(uint64(st.Nlink), 10))
		case "size":
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				out = append(out, "-")
			} else {
				out = append(out, strconv.FormatInt(st.Size, 10))
			}
		case "rdev":
			out = append(out, fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
		case "atime":
			out = append(out, fmt.Sprintf("%d.%09d", st.Atim.Sec, st.Atim.Nsec))
		case "mtime":
			out = append(out, fmt.Sprintf("%d.%09d", st.Mtim.Sec, st.Mtim.Nsec))
		case "blocks0":
			// Whether the file has blocks at all (counts differ by file
			// system; an empty file has none everywhere).
			out = append(out, strconv.FormatBool(st.Blocks == 0))
		default:
			return "", fmt.Errorf("%w: stat field %q", ErrScript, f)
		}
	}
	return strings.Join(out, ","), nil
}

// need checks the argument count of op.
func need(op string, args []string, n int) error {
	if len(args) < n {
		return fmt.Errorf("%w: %s needs %d arguments", ErrScript, op, n)
	}
	return nil
}

// op runs one operation with the thread's current credentials. An errno
// error is the file system's answer; any other error a script bug.
func (x *executor) op(op string, a []string, u User) (string, error) {
	argc := map[string]int{
		"create": 2, "open": 2, "mkdir": 2, "rmdir": 1, "unlink": 1, "mkfifo": 2, "mknod": 5,
		"link": 2, "linkat_follow": 2, "symlink": 2, "readlink": 1, "rename": 2, "rename2": 3,
		"chmod": 2, "lchmod": 2, "chown": 3, "lchown": 3, "truncate": 2, "utimensat": 3, "utimes_null": 1,
		"access": 2, "stat": 1, "lstat": 1, "sametimes": 1, "snap": 1, "times": 1, "atime": 1,
		"write": 2, "append": 2, "pwrite": 3, "read": 1, "readat": 3, "fill": 3, "sum": 1,
		"setxattr": 3, "lsetxattr": 3, "getxattr": 2, "lgetxattr": 2, "listxattr": 1, "llistxattr": 1,
		"removexattr": 2, "lremovexattr": 2, "setacl": 3, "getacl": 2,
		"ls": 1, "lstypes": 1, "count": 1, "many": 2, "sameino": 2, "seekdir": 2, "storm": 3, "churn": 2,
		"mkpath": 1, "umask": 1, "statfs": 1,
		"fopen": 3, "fclose": 1, "fwrite": 2, "fpwrite": 3, "fread": 2, "fpread": 3, "ftruncate": 2,
		"fchmod": 2, "fchown": 3, "fstat": 1, "futimens": 3, "fsync": 1, "fsetxattr": 3, "fgetxattr": 2,
		"fsnap": 1, "ftimes": 1, "fsum": 1, "fallocate": 4,
	}
	n, ok := argc[op]
	if !ok {
		return "", fmt.Errorf("%w: unknown op %q", ErrScript, op)
	}
	if err := need(op, a, n); err != nil {
		return "", err
	}
	switch op {
	case "create":
		m, err := parseMode(a[1])
		if err != nil {
			return "", err
		}
		fd, e := unix.Open(a[0], unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, m)
		if e != nil {
			return "", e
		}
		return "", unix.Close(fd)
	case "open":
		flags, err := parseOpenFlags(a[1])
		if err != nil {
			return "", err
		}
		m := uint32(0o644)
		if len(a) > 2 {
			if m, err = parseMode(a[2]); err != nil {
				return "", err
			}
		}
		fd, e := unix.Open(a[0], flags, m)
		if e != nil {
			return "", e
		}
		return "", unix.Close(fd)
	case "mkdir":
		m, err := parseMode(a[1])
		if err != nil {
			return "", err
		}
		return "", unix.Mkdir(a[0], m)
	case "rmdir":
		return "", unix.Rmdir(a[0])
	case "unlink":
		return "", unix.Unlink(a[0])
	case "mkfifo":
		m, err := parseMode(a[1])
		if err != nil {
			return "", err
		}
		return "", unix.Mkfifo(a[0], m)
	case "mknod": // path type mode major minor
		t, ok := map[string]uint32{"fifo": unix.S_IFIFO, "char": unix.S_IFCHR, "block": unix.S_IFBLK,
			"socket": unix.S_IFSOCK, "regular": unix.S_IFREG, "none": 0, "dir": unix.S_IFDIR, "bad": 0o170000}[a[1]]
		if !ok {
			return "", fmt.Errorf("%w: mknod type %q", ErrScript, a[1])
		}
		m, err := parseMode(a[2])
		if err != nil {
			return "", err
		}
		maj, err1 := parseInt(a[3])
		minor, err2 := parseInt(a[4])
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		return "", unix.Mknod(a[0], t|m, int(unix.Mkdev(uint32(maj), uint32(minor))))
	case "link":
		return "", unix.Link(a[0], a[1])
	case "linkat_follow":
		return "", unix.Linkat(unix.AT_FDCWD, a[0], unix.AT_FDCWD, a[1], unix.AT_SYMLINK_FOLLOW)
	case "symlink":
		return "", unix.Symlink(a[0], a[1])
	case "readlink":
		buf := make([]byte, 8192)
		n, e := unix.Readlink(a[0], buf)
		if e != nil {
			return "", e
		}
		return quoteShort(buf[:n]), nil
	case "rename":
		return "", unix.Rename(a[0], a[1])
	case "rename2":
		flags := map[string]uint{"noreplace": unix.RENAME_NOREPLACE, "exchange": unix.RENAME_EXCHANGE,
			"whiteout": unix.RENAME_WHITEOUT, "none": 0, "both": unix.RENAME_NOREPLACE | unix.RENAME_EXCHANGE}
		f, ok := flags[a[2]]
		if !ok {
			return "", fmt.Errorf("%w: rename flag %q", ErrScript, a[2])
		}
		return "", unix.Renameat2(unix.AT_FDCWD, a[0], unix.AT_FDCWD, a[1], f)
	case "chmod", "lchmod":
		m, err := parseMode(a[1])
		if err != nil {
			return "", err
		}
		if op == "lchmod" {
			return "", unix.Fchmodat(unix.AT_FDCWD, a[0], m, unix.AT_SYMLINK_NOFOLLOW)
		}
		return "", unix.Chmod(a[0], m)
	case "chown", "lchown":
		uid, err1 := parseInt(a[1])
		gid, err2 := parseInt(a[2])
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		if op == "lchown" {
			return "", unix.Lchown(a[0], int(uid), int(gid))
		}
		return "", unix.Chown(a[0], int(uid), int(gid))
	case "truncate":
		n, err := parseInt(a[1])
		if err != nil {
			return "", err
		}
		return "", unix.Truncate(a[0], n)
	case "utimensat": // path atime mtime [nofollow]
		at, err1 := timeArg(a[1])
		mt, err2 := timeArg(a[2])
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		flags := 0
		if len(a) > 3 && a[3] == "nofollow" {
			flags = unix.AT_SYMLINK_NOFOLLOW
		}
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, a[0], []unix.Timespec{at, mt}, flags)
	case "utimes_null":
		p, err := unix.BytePtrFromString(a[0])
		if err != nil {
			return "", err
		}
		fd := unix.AT_FDCWD
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), uintptr(unsafe.Pointer(p)), 0, 0, 0, 0)
		if e != 0 {
			return "", e
		}
		return "", nil
	case "access":
		m := uint32(0)
		for _, c := range a[1] {
			v, ok := map[rune]uint32{'r': unix.R_OK, 'w': unix.W_OK, 'x': unix.X_OK, 'f': unix.F_OK}[c]
			if !ok {
				return "", fmt.Errorf("%w: access mode %q", ErrScript, a[1])
			}
			m |= v
		}
		return "", unix.Faccessat(unix.AT_FDCWD, a[0], m, 0)
	case "stat", "lstat":
		var st unix.Stat_t
		var e error
		if op == "stat" {
			e = unix.Stat(a[0], &st)
		} else {
			e = unix.Lstat(a[0], &st)
		}
		if e != nil {
			return "", e
		}
		fields := defaultFields
		if len(a) > 1 {
			fields = a[1]
		}
		return statFields(&st, fields)
	case "sametimes": // whether atime, mtime and ctime are one instant
		var st unix.Stat_t
		if err := unix.Lstat(a[0], &st); err != nil {
			return "", err
		}
		eq := func(x, y unix.Timespec) string {
			if x == y {
				return "="
			}
			return "!="
		}
		return "a" + eq(st.Atim, st.Mtim) + "m" + eq(st.Mtim, st.Ctim) + "c", nil
	case "snap":
		var st unix.Stat_t
		if err := unix.Lstat(a[0], &st); err != nil {
			return "", err
		}
		x.snapshot(a[0], &st)
		return "", nil
	case "times", "atime": // path [snapshot name, default the path]
		var st unix.Stat_t
		if err := unix.Lstat(a[0], &st); err != nil {
			return "", err
		}
		key := a[0]
		if len(a) > 1 {
			key = a[1]
		}
		return x.changed(key, &st, op == "atime")
	case "write", "append":
		flags := unix.O_WRONLY | unix.O_CLOEXEC
		if op == "append" {
			flags |= unix.O_APPEND
		}
		fd, e := unix.Open(a[0], flags, 0)
		if e != nil {
			return "", e
		}
		if _, e := unix.Write(fd, []byte(a[1])); e != nil {
			unix.Close(fd)
			return "", e
		}
		return "", unix.Close(fd)
	case "pwrite", "fill": // path offset data | path offset length
		off, err := parseInt(a[1])
		if err != nil {
			return "", err
		}
		data := []byte(a[2])
		if op == "fill" {
			n, err := parseInt(a[2])
			if err != nil {
				return "", err
			}
			data = pattern(off, n)
		}
		fd, e := unix.Open(a[0], unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if e != nil {
			return "", e
		}
		if _, e := unix.Pwrite(fd, data, off); e != nil {
			unix.Close(fd)
			return "", e
		}
		return "", unix.Close(fd)
	case "read", "sum":
		fd, e := unix.Open(a[0], unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if e != nil {
			return "", e
		}
		defer unix.Close(fd)
		b, e := readAll(fd)
		if e != nil {
			return "", e
		}
		if op == "sum" {
			return checksum(b), nil
		}
		return quoteShort(b), nil
	case "readat": // path offset length
		off, err1 := parseInt(a[1])
		n, err2 := parseInt(a[2])
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		fd, e := unix.Open(a[0], unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if e != nil {
			return "", e
		}
		defer unix.Close(fd)
		buf := make([]byte, n)
		got, e := unix.Pread(fd, buf, off)
		if e != nil {
			return "", e
		}
		return quoteShort(buf[:got]), nil
	case "setxattr", "lsetxattr": // path name value [create|replace]
		flags := 0
		if len(a) > 3 {
			f, ok := map[string]int{"create": unix.XATTR_CREATE, "replace": unix.XATTR_REPLACE, "both": 3}[a[3]]
			if !ok {
				return "", fmt.Errorf("%w: xattr flag %q", ErrScript, a[3])
			}
			flags = f
		}
		if op == "lsetxattr" {
			return "", unix.Lsetxattr(a[0], a[1], []byte(a[2]), flags)
		}
		return "", unix.Setxattr(a[0], a[1], []byte(a[2]), flags)
	case "getxattr", "lgetxattr": // path name [bufsize]
		get := unix.Getxattr
		if op == "lgetxattr" {
			get = unix.Lgetxattr
		}
		return getSized(a, func(buf []byte) (int, error) { return get(a[0], a[1], buf) }, quoteShort)
	case "listxattr", "llistxattr": // path [bufsize]
		list := unix.Listxattr
		if op == "llistxattr" {
			list = unix.Llistxattr
		}
		return getSized(append([]string{a[0], ""}, a[1:]...), func(buf []byte) (int, error) { return list(a[0], buf) }, xattrNames)
	case "setacl": // path access|default u::rw-,u:65534:r--,g::r--,m::r--,o::--- (or "-": empty)
		name, err := aclXattr(a[1])
		if err != nil {
			return "", err
		}
		v, err := parseACL(a[2])
		if err != nil {
			return "", err
		}
		return "", unix.Setxattr(a[0], name, v, 0)
	case "getacl": // path access|default: the ACL as setacl takes it
		name, err := aclXattr(a[1])
		if err != nil {
			return "", err
		}
		buf := make([]byte, 4096)
		n, e := unix.Getxattr(a[0], name, buf)
		if e != nil {
			return "", e
		}
		return formatACL(buf[:n])
	case "removexattr":
		return "", unix.Removexattr(a[0], a[1])
	case "lremovexattr":
		return "", unix.Lremovexattr(a[0], a[1])
	case "ls", "lstypes", "count":
		ents, err := listDir(a[0])
		if err != nil {
			return "", err
		}
		return formatListing(op, ents), nil
	case "many": // dir count: as this user, create dir/f0000...
		n, err := parseInt(a[1])
		if err != nil {
			return "", err
		}
		for i := range n {
			fd, e := unix.Open(fmt.Sprintf("%s/f%05d", a[0], i), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if e != nil {
				return "", e
			}
			unix.Close(fd)
		}
		return "", nil
	case "sameino":
		var s1, s2 unix.Stat_t
		if e := unix.Stat(a[0], &s1); e != nil {
			return "", e
		}
		if e := unix.Stat(a[1], &s2); e != nil {
			return "", e
		}
		if s1.Ino == s2.Ino && s1.Dev == s2.Dev {
			return "same", nil
		}
		return "different", nil
	case "seekdir":
		k, err := parseInt(a[1])
		if err != nil {
			return "", err
		}
		return seekdirCheck(a[0], int(k))
	case "storm":
		threads, err1 := parseInt(a[1])
		files, err2 := parseInt(a[2])
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		return storm(a[0], int(threads), int(files), u)
	case "churn":
		n, err := parseInt(a[1])
		if err != nil {
			return "", err
		}
		return churn(a[0], int(n), u)
	case "mkpath": // every directory of a path but its last name, mode 0755
		parts := strings.Split(a[0], "/")
		p := ""
		for _, d := range parts[:len(parts)-1] {
			if p != "" {
				p += "/"
			}
			p += d
			if e := unix.Mkdir(p, 0o755); e != nil && e != unix.EEXIST {
				return "", e
			}
		}
		return "", nil
	case "umask":
		m, err := parseMode(a[0])
		if err != nil {
			return "", err
		}
		unix.Umask(int(m))
		return "", nil
	case "statfs":
		var st unix.Statfs_t
		if e := unix.Statfs(a[0], &st); e != nil {
			return "", e
		}
		return fmt.Sprintf("namelen=%d", st.Namelen), nil
	}
	return x.fdOp(op, a)
}

// fdOp runs the operations on descriptors a case keeps open by name.
func (x *executor) fdOp(op string, a []string) (string, error) {
	if op == "fopen" { // name path flags [mode]
		flags, err := parseOpenFlags(a[2])
		if err != nil {
			return "", err
		}
		m := uint32(0o644)
		if len(a) > 3 {
			if m, err = parseMode(a[3]); err != nil {
				return "", err
			}
		}
		if _, ok := x.fds[a[0]]; ok {
			return "", fmt.Errorf("%w: descriptor %q is open", ErrScript, a[0])
		}
		fd, e := unix.Open(a[1], flags, m)
		if e != nil {
			return "", e
		}
		x.fds[a[0]] = fd
		return "", nil
	}
	fd, ok := x.fds[a[0]]
	if !ok {
		return "", fmt.Errorf("%w: no descriptor %q", ErrScript, a[0])
	}
	switch op {
	case "fclose":
		delete(x.fds, a[0])
		return "", unix.Close(fd)
	case "fwrite":
		_, e := unix.Write(fd, []byte(a[1]))
		return "", e
	case "fpwrite":
		off, err := parseInt(a[1])
		if err != nil {
			return "", err
		}
		_, e := unix.Pwrite(fd, []byte(a[2]), off)
		return "", e
	case "fread":
		n, err := parseInt(a[1])
		if err != nil {
			return "", err
		}
		buf := make([]byte, n)
		got, e := unix.Read(fd, buf)
		if e != nil {
			return "", e
		}
		return quoteShort(buf[:got]), nil
	case "fpread":
		off, err1 := parseInt(a[1])
		n, err2 := parseInt(a[2])
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		buf := make([]byte, n)
		got, e := unix.Pread(fd, buf, off)
		if e != nil {
			return "", e
		}
		return quoteShort(buf[:got]), nil
	case "ftruncate":
		n, err := parseInt(a[1])
		if err != nil {
			return "", err
		}
		return "", unix.Ftruncate(fd, n)
	case "fchmod":
		m, err := parseMode(a[1])
		if err != nil {
			return "", err
		}
		return "", unix.Fchmod(fd, m)
	case "fchown":
		uid, err1 := parseInt(a[1])
		gid, err2 := parseInt(a[2])
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		return "", unix.Fchown(fd, int(uid), int(gid))
	case "fstat", "fsnap", "ftimes":
		var st unix.Stat_t
		if e := unix.Fstat(fd, &st); e != nil {
			return "", e
		}
		switch op {
		case "fsnap":
			x.snapshot("fd:"+a[0], &st)
			return "", nil
		case "ftimes":
			return x.changed("fd:"+a[0], &st, false)
		}
		fields := defaultFields
		if len(a) > 1 {
			fields = a[1]
		}
		return statFields(&st, fields)
	case "futimens":
		at, err1 := timeArg(a[1])
		mt, err2 := timeArg(a[2])
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		ts := [2]unix.Timespec{at, mt}
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
		if e != 0 {
			return "", e
		}
		return "", nil
	case "fsync":
		return "", unix.Fsync(fd)
	case "fsetxattr":
		return "", unix.Fsetxattr(fd, a[1], []byte(a[2]), 0)
	case "fgetxattr":
		return getSized([]string{"", a[1]}, func(buf []byte) (int, error) { return unix.Fgetxattr(fd, a[1], buf) }, quoteShort)
	case "fsum":
		if _, e := unix.Seek(fd, 0, 0); e != nil {
			return "", e
		}
		b, e := readAll(fd)
		if e != nil {
			return "", e
		}
		return checksum(b), nil
	case "fallocate": // name mode offset length
		mode, err1 := parseInt(a[1])
		off, err2 := parseInt(a[2])
		n, err3 := parseInt(a[3])
		if err := errors.Join(err1, err2, err3); err != nil {
			return "", err
		}
		return "", unix.Fallocate(fd, uint32(mode), off, n)
	}
	return "", fmt.Errorf("%w: unknown op %q", ErrScript, op)
}

// snapshot remembers st's times under key and waits until the coarse
// clock, which file systems stamp times from, has moved past all of them,
// so that any later update of a time shows as a change.
func (x *executor) snapshot(key string, st *unix.Stat_t) {
	x.snaps[key] = times{st.Atim, st.Mtim, st.Ctim}
	latest := st.Ctim
	for _, t := range []unix.Timespec{st.Atim, st.Mtim} {
		if t.Nano() > latest.Nano() {
			latest = t
		}
	}
	// Bounded: the clock moves by its resolution (a few milliseconds)
	// at most; times in the future (set explicitly) are not waited for.
	deadline := time.Now().Add(10*x.clockRes + 10*time.Millisecond)
	for time.Now().Before(deadline) {
		var now unix.Timespec
		unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &now)
		if now.Nano() > latest.Nano() || latest.Nano() > time.Now().Add(time.Second).UnixNano() {
			return
		}
		time.Sleep(x.clockRes / 4)
	}
}

// changed describes how st's times moved since the snapshot under key:
// "m+ c-" for mtime and ctime (- unchanged, + later, < earlier), or "a+"
// for atime alone. atime is apart because its updates follow the mount's
// atime rules (relatime), which are not what most cases are about.
func (x *executor) changed(key string, st *unix.Stat_t, atime bool) (string, error) {
	s, ok := x.snaps[key]
	if !ok {
		return "", fmt.Errorf("%w: no snapshot of %q", ErrScript, key)
	}
	mark := func(before, after unix.Timespec) string {
		switch {
		case after.Nano() == before.Nano():
			return "-"
		case after.Nano() > before.Nano():
			return "+"
		}
		return "<"
	}
	if atime {
		return "a" + mark(s.a, st.Atim), nil
	}
	return "m" + mark(s.m, st.Mtim) + " c" + mark(s.c, st.Ctim), nil
}

func coarseRes() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_REALTIME_COARSE, &ts); err != nil || ts.Nano() <= 0 {
		return 4 * time.Millisecond
	}
	return time.Duration(ts.Nano())
}

// getSized calls get as getxattr(2) and listxattr(2) are called: with
// a[2] (if given) as the buffer size. Size 0 asks for the size, which is
// printed; without a[2] the buffer is large enough.
func getSized(a []string, get func([]byte) (int, error), format func([]byte) string) (string, error) {
	size := int64(1 << 17)
	if len(a) > 2 {
		var err error
		if size, err = parseInt(a[2]); err != nil {
			return "", err
		}
	}
	if size == 0 {
		n, e := get(nil)
		if e != nil {
			return "", e
		}
		return fmt.Sprintf("size=%d", n), nil
	}
	buf := make([]byte, size)
	n, e := get(buf)
	if e != nil {
		return "", e
	}
	return format(buf[:n]), nil
}

// xattrNames prints a listxattr buffer as sorted names.
func xattrNames(b []byte) string {
	var names []string
	for _, n := range strings.Split(string(b), "\x00") {
		if n != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ",")
}

// quoteShort prints bytes as a quoted string, or as their length and
// checksum when they are long.
func quoteShort(b []byte) string {
	if len(b) > 64 {
		return checksum(b)
	}
	return strconv.Quote(string(b))
}

func checksum(b []byte) string {
	return fmt.Sprintf("len=%d,crc=%08x", len(b), crc32.ChecksumIEEE(b))
}

// pattern is n bytes of a pattern that depends on the offset, so that
// misplaced bytes show in a checksum.
func pattern(off, n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((off+int64(i))%251 + 1)
	}
	return b
}

func readAll(fd int) ([]byte, error) {
	var out []byte
	buf := make([]byte, 1<<16)
	for {
		n, e := unix.Read(fd, buf)
		if e != nil {
			return nil, e
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}
