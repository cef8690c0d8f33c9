package fuse

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The helper runs system calls as another user, the way pjdfstest's
// fstest does: the test binary re-executes itself (through /proc/self/exe,
// which needs no search permission on the build directory) with the
// user's uid, gid and groups, and then serves requests on its standard
// input, one JSON array per line ([dir, op, args...]), answering each with
// one JSON string: the errno name, or "0" or the call's result. One helper
// per user lives for the whole test binary (a process start costs a third
// of a second with the race detector).

const helperEnv = "OCTOFS_FUSE_TEST_HELPER"

// user is who runs a helper call.
type user struct {
	uid    uint32
	gid    uint32
	groups []uint32
}

var (
	root   = user{0, 0, nil}
	nobody = user{65534, 65534, nil}
	other  = user{65533, 65533, nil}
	// member is in nobody's group as a supplementary group.
	member = user{65532, 65532, []uint32{65534}}
)

func (u user) String() string { return fmt.Sprintf("%d:%d%v", u.uid, u.gid, u.groups) }

// helperProc is one running helper.
type helperProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

var helpers struct {
	mu sync.Mutex
	m  map[string]*helperProc
}

// stopHelpers ends every helper (TestMain calls it).
func stopHelpers() {
	helpers.mu.Lock()
	defer helpers.mu.Unlock()
	for k, h := range helpers.m {
		h.in.Close()
		h.cmd.Process.Kill()
		h.cmd.Wait()
		delete(helpers.m, k)
	}
}

// helperFor returns the running helper of u, starting it if needed.
//
// The helper changes to each request's directory itself, after exec: a
// child that touches a mount served by this process between fork and exec
// deadlocks it (Go's fork holds a P until the exec, so a garbage
// collection cannot stop the world, so the FUSE server cannot answer).
// Never set exec.Cmd.Dir to a directory in an in-process mount.
func helperFor(t testing.TB, u user) *helperProc {
	t.Helper()
	helpers.mu.Lock()
	defer helpers.mu.Unlock()
	if h := helpers.m[u.String()]; h != nil {
		return h
	}
	cmd := exec.Command("/proc/self/exe")
	// The race detector sleeps a second at exit unless told not to.
	cmd.Env = []string{helperEnv + "=1", "PATH=/usr/bin:/bin", "GORACE=atexit_sleep_ms=0"}
	// Groups nil sets no supplementary groups at all (setgroups(0)).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups},
		Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the helper as %v: %v", u, err)
	}
	h := &helperProc{cmd: cmd, in: in, out: bufio.NewReader(out)}
	if helpers.m == nil {
		helpers.m = make(map[string]*helperProc)
	}
	helpers.m[u.String()] = h
	return h
}

// as runs op with args as u in dir and returns what the helper answered.
// A call that takes more than a minute fails the test (and the helper is
// killed, so that nothing waits on a hung mount forever).
func as(t testing.TB, u user, dir string, args ...string) string {
	t.Helper()
	h := helperFor(t, u)
	req, _ := json.Marshal(append([]string{dir}, args...))
	type answer struct {
		s   string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		if _, err := h.in.Write(append(req, '\n')); err != nil {
			done <- answer{err: err}
			return
		}
		line, err := h.out.ReadBytes('\n')
		if err != nil {
			done <- answer{err: err}
			return
		}
		var s string
		err = json.Unmarshal(line, &s)
		done <- answer{s, err}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			t.Fatalf("helper %v as %v: %v", args, u, a.err)
		}
		if strings.HasPrefix(a.s, "helper error: ") {
			t.Fatalf("helper %v as %v: %s", args, u, a.s)
		}
		return a.s
	case <-time.After(time.Minute):
		h.cmd.Process.Kill()
		helpers.mu.Lock()
		delete(helpers.m, u.String())
		helpers.mu.Unlock()
		t.Fatalf("helper %v as %v: no answer within a minute", args, u)
		return ""
	}
}

// helperMain is the helper's main: it serves requests until its input
// ends.
func helperMain() int {
	syscall.Umask(0o022)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req []string
		if err := json.Unmarshal(in.Bytes(), &req); err != nil || len(req) < 2 {
			enc.Encode(fmt.Sprintf("helper error: bad request %q", in.Text()))
			continue
		}
		enc.Encode(helperCall(req[0], req[1], req[2:]))
	}
	return 0
}

// helperCall runs one request and formats its answer.
func helperCall(dir, op string, args []string) string {
	if err := os.Chdir(dir); err != nil {
		return "helper error: " + err.Error()
	}
	// Back out of the directory, so that the helper keeps no mount busy.
	defer os.Chdir("/")
	out, err := helperOp(op, args)
	switch e := err.(type) {
	case nil:
		if out == "" {
			out = "0"
		}
		return out
	case syscall.Errno:
		return errnoName(e)
	default:
		return "helper error: " + err.Error()
	}
}

func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno%d", int(e))
}

func num(s string) (uint64, error) { return strconv.ParseUint(s, 0, 64) }

func mode(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 8, 32)
	return uint32(v), err
}

var openFlagNames = map[string]int{
	"O_RDONLY": unix.O_RDONLY, "O_WRONLY": unix.O_WRONLY, "O_RDWR": unix.O_RDWR,
	"O_CREAT": unix.O_CREAT, "O_EXCL": unix.O_EXCL, "O_TRUNC": unix.O_TRUNC, "O_APPEND": unix.O_APPEND,
	"O_NOFOLLOW": unix.O_NOFOLLOW, "O_DIRECTORY": unix.O_DIRECTORY, "O_NOATIME": unix.O_NOATIME,
}

func openFlagsOf(s string) (int, error) {
	f := 0
	for _, n := range strings.Split(s, ",") {
		v, ok := openFlagNames[n]
		if !ok {
			return 0, fmt.Errorf("unknown open flag %q", n)
		}
		f |= v
	}
	return f, nil
}

// timeArg is a utimensat time: seconds, UTIME_NOW or UTIME_OMIT.
func timeArg(s string) (unix.Timespec, error) {
	switch s {
	case "UTIME_NOW":
		return unix.Timespec{Nsec: unix.UTIME_NOW}, nil
	case "UTIME_OMIT":
		return unix.Timespec{Nsec: unix.UTIME_OMIT}, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return unix.Timespec{Sec: v}, err
}

// statFields prints the named fields of st, comma-separated (pjdfstest's
// stat output): mode (octal, permission and special bits), type, uid, gid,
// nlink, size, atime, mtime, ctime (seconds).
func statFields(st *unix.Stat_t, fields string) (string, error) {
	var out []string
	for _, f := range strings.Split(fields, ",") {
		switch f {
		case "mode":
			out = append(out, fmt.Sprintf("0%o", st.Mode&0o7777))
		case "type":
			out = append(out, map[uint32]string{unix.S_IFREG: "regular", unix.S_IFDIR: "dir", unix.S_IFLNK: "symlink",
				unix.S_IFIFO: "fifo", unix.S_IFSOCK: "socket", unix.S_IFCHR: "char", unix.S_IFBLK: "block"}[st.Mode&unix.S_IFMT])
		case "uid":
			out = append(out, strconv.FormatUint(uint64(st.Uid), 10))
		case "gid":
			out = append(out, strconv.FormatUint(uint64(st.Gid), 10))
		case "nlink":
			out = append(out, strconv.FormatUint(uint64(st.Nlink), 10))
		case "size":
			out = append(out, strconv.FormatInt(st.Size, 10))
		case "atime":
			out = append(out, strconv.FormatInt(st.Atim.Sec, 10))
		case "mtime":
			out = append(out, strconv.FormatInt(st.Mtim.Sec, 10))
		case "ctime":
			out = append(out, strconv.FormatInt(st.Ctim.Sec, 10)+"."+fmt.Sprintf("%09d", st.Ctim.Nsec))
		default:
			return "", fmt.Errorf("unknown stat field %q", f)
		}
	}
	return strings.Join(out, ","), nil
}

// helperOp runs one operation. Paths are relative to the working
// directory. Errors that are not errnos are malformed requests.
func helperOp(op string, a []string) (string, error) {
	need := map[string]int{"open": 2, "create": 2, "mkdir": 2, "rmdir": 1, "unlink": 1, "mkfifo": 2, "mknod": 4,
		"link": 2, "symlink": 2, "rename": 2, "chmod": 2, "chown": 3, "lchown": 3, "truncate": 2, "ftruncate": 3,
		"utimensat": 3, "stat": 2, "lstat": 2, "write": 2, "append": 2, "writes": 3, "read": 1, "readdir": 1, "access": 2,
		"rename_exchange": 2, "rename_noreplace": 2, "readlink": 1, "chdir": 1}
	if n, ok := need[op]; !ok {
		return "", fmt.Errorf("unknown op %q", op)
	} else if len(a) < n {
		return "", fmt.Errorf("%s needs %d arguments", op, n)
	}
	switch op {
	case "open":
		flags, err := openFlagsOf(a[1])
		if err != nil {
			return "", err
		}
		m := uint32(0o644)
		if len(a) > 2 {
			if m, err = mode(a[2]); err != nil {
				return "", err
			}
		}
		fd, e := unix.Open(a[0], flags, m)
		if e != nil {
			return "", e
		}
		return "", unix.Close(fd)
	case "create":
		m, err := mode(a[1])
		if err != nil {
			return "", err
		}
		fd, e := unix.Open(a[0], unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, m)
		if e != nil {
			return "", e
		}
		return "", unix.Close(fd)
	case "mkdir":
		m, err := mode(a[1])
		if err != nil {
			return "", err
		}
		return "", unix.Mkdir(a[0], m)
	case "rmdir":
		return "", unix.Rmdir(a[0])
	case "unlink":
		return "", unix.Unlink(a[0])
	case "mkfifo":
		m, err := mode(a[1])
		if err != nil {
			return "", err
		}
		return "", unix.Mkfifo(a[0], m)
	case "mknod": // path type(f|c|b|s) mode rdev
		m, err := mode(a[2])
		if err != nil {
			return "", err
		}
		rdev, err := num(a[3])
		if err != nil {
			return "", err
		}
		t := map[string]uint32{"f": unix.S_IFIFO, "c": unix.S_IFCHR, "b": unix.S_IFBLK, "s": unix.S_IFSOCK, "r": unix.S_IFREG}[a[1]]
		return "", unix.Mknod(a[0], t|m, int(rdev))
	case "link":
		return "", unix.Link(a[0], a[1])
	case "symlink":
		return "", unix.Symlink(a[0], a[1])
	case "readlink":
		buf := make([]byte, 8192)
		n, e := unix.Readlink(a[0], buf)
		if e != nil {
			return "", e
		}
		return string(buf[:n]), nil
	case "rename":
		return "", unix.Rename(a[0], a[1])
	case "rename_exchange":
		return "", unix.Renameat2(unix.AT_FDCWD, a[0], unix.AT_FDCWD, a[1], unix.RENAME_EXCHANGE)
	case "rename_noreplace":
		return "", unix.Renameat2(unix.AT_FDCWD, a[0], unix.AT_FDCWD, a[1], unix.RENAME_NOREPLACE)
	case "chmod":
		m, err := mode(a[1])
		if err != nil {
			return "", err
		}
		return "", unix.Chmod(a[0], m)
	case "chown", "lchown":
		uid, err1 := strconv.Atoi(a[1])
		gid, err2 := strconv.Atoi(a[2])
		if err1 != nil || err2 != nil {
			return "", fmt.Errorf("bad uid/gid %q %q", a[1], a[2])
		}
		if op == "lchown" {
			return "", unix.Lchown(a[0], uid, gid)
		}
		return "", unix.Chown(a[0], uid, gid)
	case "truncate":
		n, err := num(a[1])
		if err != nil {
			return "", err
		}
		return "", unix.Truncate(a[0], int64(n))
	case "ftruncate": // path open-flags size
		flags, err := openFlagsOf(a[1])
		if err != nil {
			return "", err
		}
		n, err := num(a[2])
		if err != nil {
			return "", err
		}
		fd, e := unix.Open(a[0], flags, 0o644)
		if e != nil {
			return "", e
		}
		defer unix.Close(fd)
		return "", unix.Ftruncate(fd, int64(n))
	case "utimensat": // path atime mtime [AT_SYMLINK_NOFOLLOW]
		at, err1 := timeArg(a[1])
		mt, err2 := timeArg(a[2])
		if err1 != nil || err2 != nil {
			return "", fmt.Errorf("bad times %q %q", a[1], a[2])
		}
		flags := 0
		if len(a) > 3 && a[3] == "AT_SYMLINK_NOFOLLOW" {
			flags = unix.AT_SYMLINK_NOFOLLOW
		}
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, a[0], []unix.Timespec{at, mt}, flags)
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
		return statFields(&st, a[1])
	case "write", "append": // path data: open for writing (appending), write, close
		flags := unix.O_WRONLY
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
	case "writes": // path data n: open for writing, n writes of data, close
		n, e := strconv.Atoi(a[2])
		if e != nil {
			return "", e
		}
		fd, e := unix.Open(a[0], unix.O_WRONLY, 0)
		if e != nil {
			return "", e
		}
		for range n {
			if _, e := unix.Write(fd, []byte(a[1])); e != nil {
				unix.Close(fd)
				return "", e
			}
		}
		return "", unix.Close(fd)
	case "read":
		b, e := os.ReadFile(a[0])
		if e != nil {
			var pe *os.PathError
			if errors.As(e, &pe) {
				return "", pe.Err
			}
			return "", e
		}
		return "0:" + string(b), nil
	case "readdir":
		ents, e := os.ReadDir(a[0])
		if e != nil {
			var pe *os.PathError
			if errors.As(e, &pe) {
				return "", pe.Err
			}
			return "", e
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return "0:" + strings.Join(names, ","), nil
	case "access":
		m := uint32(0)
		for _, c := range a[1] {
			m |= map[rune]uint32{'r': unix.R_OK, 'w': unix.W_OK, 'x': unix.X_OK, 'f': unix.F_OK}[c]
		}
		return "", unix.Faccessat(unix.AT_FDCWD, a[0], m, 0)
	case "chdir":
		return "", unix.Chdir(a[0])
	}
	return "", fmt.Errorf("unknown op %q", op)
}
