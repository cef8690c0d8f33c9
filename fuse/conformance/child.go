package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Cases run in a child process, not in the test process: the test
// process serves the FUSE mounts, and a case that hangs in the kernel (a
// mount that stopped answering) must be killable without killing the
// server that would have to answer it. The child is the test binary
// itself (os.Args[0] re-executed through /proc/self/exe with ChildEnv set,
// which the test's TestMain hands to ServeChild). It reads one request per
// line on stdin and writes one result per line on stdout, running up to
// Parallel cases at once, each on its own OS thread.

// ChildEnv marks the child process.
const ChildEnv = "OCTOFS_CONFORMANCE_CHILD"

// ErrChild means the child process failed or was killed.
var ErrChild = errors.New("conformance: child process failed")

type request struct {
	ID    int
	Dir   string
	Steps []string
}

type response struct {
	ID     int
	Result Result
}

// ServeChild is the child's main: it serves requests from in until in
// ends, parallel at a time, and returns the exit status.
func ServeChild(in io.Reader, out io.Writer, parallel int) int {
	if parallel < 1 {
		parallel = 1
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	enc := json.NewEncoder(out)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "conformance child: bad request:", err)
			return 2
		}
		// Requests are read as they come, whatever is running: the
		// parent may be blocked writing the next one.
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res := make(chan Result, 1)
			// RunCase locks its goroutine's thread for good; it gets a
			// goroutine of its own.
			start := time.Now()
			go func() { res <- RunCase(req.Dir, req.Steps) }()
			r := <-res
			r.Elapsed = time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if err := enc.Encode(response{ID: req.ID, Result: r}); err != nil {
				fmt.Fprintln(os.Stderr, "conformance child: write:", err)
				os.Exit(2)
			}
		})
	}
	wg.Wait()
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance child: read:", err)
		return 2
	}
	return 0
}

// Runner is the parent's end of a child process.
type Runner struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer

	// wmu orders requests on stdin; mu guards the rest. They are
	// separate so that a write blocked on a full pipe never holds up the
	// reader.
	wmu     sync.Mutex
	enc     *json.Encoder
	mu      sync.Mutex
	next    int
	pending map[int]chan Result
	dead    error
	done    chan struct{}
}

// StartRunner starts a child process that runs cases parallel at a time.
// The caller must Close it.
func StartRunner(parallel int) (*Runner, error) {
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), ChildEnv+"="+fmt.Sprint(parallel))
	// Never a directory in a mount this process serves: see the fuse
	// package's helper for why.
	cmd.Dir = "/"
	r := &Runner{cmd: cmd, pending: map[int]chan Result{}, done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{w: &r.stderr}
	var err error
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: start: %v", ErrChild, err)
	}
	r.enc = json.NewEncoder(r.stdin)
	go r.read(stdout)
	return r, nil
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (r *Runner) read(stdout io.Reader) {
	defer close(r.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var resp response
		if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
			r.fail(fmt.Errorf("%w: bad response: %v", ErrChild, err))
			return
		}
		r.mu.Lock()
		ch := r.pending[resp.ID]
		delete(r.pending, resp.ID)
		r.mu.Unlock()
		if ch != nil {
			ch <- resp.Result
		}
	}
	r.fail(fmt.Errorf("%w: it exited", ErrChild))
}

// fail ends every pending case with err.
func (r *Runner) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dead == nil {
		r.dead = err
	}
	for id, ch := range r.pending {
		ch <- Result{Err: r.dead.Error()}
		delete(r.pending, id)
	}
}

// Run runs steps in the new directory dir (which must not exist) and
// returns the result. If ctx ends first, the child is killed (a case
// stuck in a system call cannot be stopped otherwise) and every case
// still running fails.
func (r *Runner) Run(ctx context.Context, dir string, steps []string) Result {
	ch := make(chan Result, 1)
	r.mu.Lock()
	if r.dead != nil {
		r.mu.Unlock()
		return Result{Err: r.dead.Error()}
	}
	r.next++
	id := r.next
	r.pending[id] = ch
	r.mu.Unlock()
	r.wmu.Lock()
	err := r.enc.Encode(request{ID: id, Dir: dir, Steps: steps})
	r.wmu.Unlock()
	if err != nil {
		r.fail(fmt.Errorf("%w: write: %v", ErrChild, err))
	}
	select {
	case res := <-ch:
		return res
	case <-ctx.Done():
		r.kill(fmt.Errorf("%w: case in %s did not finish (%v); the child was killed", ErrChild, dir, ctx.Err()))
		return <-ch
	}
}

func (r *Runner) kill(err error) {
	r.fail(err)
	r.cmd.Process.Signal(syscall.SIGKILL) // by PID: our own child
}

// Stderr is what the child wrote to its standard error.
func (r *Runner) Stderr() string {
	lw := r.cmd.Stderr.(*lockedWriter)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.String()
}

// Close ends the child: its input is closed and it exits once its cases
// are done; after limit it is killed.
func (r *Runner) Close(limit time.Duration) error {
	r.stdin.Close()
	exited := make(chan error, 1)
	go func() {
		<-r.done
		exited <- r.cmd.Wait()
	}()
	select {
	case err := <-exited:
		return err
	case <-time.After(limit):
		r.kill(fmt.Errorf("%w: it did not exit within %v", ErrChild, limit))
		return <-exited
	}
}
