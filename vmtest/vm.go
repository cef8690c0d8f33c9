package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/octofs/octofs/vmtest/agentproto"
)

// vmSpec describes one guest of the cluster.
type vmSpec struct {
	Name string // vm1, vm2, ...
	IP   string // on the virtual link, without prefix length
	MAC  string
	// LinkServer makes this guest's NIC listen on HubSock instead of
	// connecting to it: the first of two directly linked guests.
	LinkServer bool
	// Pmem gives the guest an emulated NVDIMM of PmemSize bytes, backed
	// by a file, for each entry, set up by init as the entry says:
	// "devdax" or "fsdax". The i-th is the kernel's region i.
	Pmem     []string
	PmemSize int64
}

// vm is a running QEMU guest and the connection to its agent.
type vm struct {
	spec    vmSpec
	cmd     *exec.Cmd
	console string // console log path
	exited  chan struct{}

	conn   net.Conn
	enc    *json.Encoder
	encMu  sync.Mutex
	mu     sync.Mutex
	nextID uint64
	jobs   map[uint64]*job
	hello  agentproto.Reply
}

// job is a command running in a guest.
type job struct {
	vm   *vm
	id   uint64
	name string
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
	code int
	err  string
	// echo, if set, receives the job's output as it arrives.
	echo func(string)
}

// bootConfig is what every guest shares.
type bootConfig struct {
	Qemu   string
	Kernel string
	Initrd string
	Share  string // read-only 9p share, /mnt/host in the guest
	RunDir string // sockets, console logs, pmem files
	// HubSock is the unix socket every guest's NIC connects to: the hub's,
	// or with a direct link between two guests, the first guest's own.
	HubSock string
	MTU     int
}

// bootVM starts QEMU for spec and waits for its agent's hello.
func bootVM(ctx context.Context, bc bootConfig, spec vmSpec, procs *procTable) (*vm, error) {
	agentSock := filepath.Join(bc.RunDir, spec.Name+"-agent.sock")
	os.Remove(agentSock)
	ln, err := net.Listen("unix", agentSock)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	consoleSock := filepath.Join(bc.RunDir, spec.Name+"-console.sock")
	consoleLog := filepath.Join(bc.RunDir, spec.Name+"-console.log")
	os.Remove(consoleSock)
	os.Remove(consoleLog)

	appendArgs := []string{
		"console=ttyS0", "panic=-1", "quiet", "loglevel=4",
		"octo.name=" + spec.Name, "octo.ip=" + spec.IP + "/24",
		fmt.Sprintf("octo.mtu=%d", bc.MTU), "octo.rxe=1",
	}
	args := []string{
		"-name", spec.Name,
		"-accel", "tcg", "-cpu", "max", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", bc.Kernel, "-initrd", bc.Initrd,
		// The console is a socket (attach with socat to debug) that QEMU
		// also logs to a file.
		"-chardev", fmt.Sprintf("socket,id=con,path=%s,server=on,wait=off,logfile=%s", consoleSock, consoleLog),
		"-serial", "chardev:con",
		"-netdev", fmt.Sprintf("stream,id=n0,server=%s,addr.type=unix,addr.path=%s", onOff(spec.LinkServer), bc.HubSock),
		"-device", fmt.Sprintf("virtio-net-pci,netdev=n0,mac=%s,host_mtu=%d", spec.MAC, bc.MTU),
		"-fsdev", fmt.Sprintf("local,id=fs0,path=%s,security_model=none,readonly=on", bc.Share),
		"-device", "virtio-9p-pci,fsdev=fs0,mount_tag=host",
		"-device", "virtio-serial-pci",
		"-chardev", fmt.Sprintf("socket,id=agent,path=%s", agentSock),
		"-device", "virtserialport,chardev=agent,name=" + agentproto.PortName,
	}
	if len(spec.Pmem) > 0 {
		args = append(args, "-machine", "pc,nvdimm=on", "-m", fmt.Sprintf("512M,slots=%d,maxmem=4G", len(spec.Pmem)+1))
		for i := range spec.Pmem {
			pmemFile := filepath.Join(bc.RunDir, fmt.Sprintf("%s-%d.pmem", spec.Name, i))
			args = append(args,
				"-object", fmt.Sprintf("memory-backend-file,id=pm%d,share=on,mem-path=%s,size=%d", i, pmemFile, spec.PmemSize),
				"-device", fmt.Sprintf("nvdimm,id=nv%d,memdev=pm%d", i, i))
		}
		appendArgs = append(appendArgs, "octo.pmem="+strings.Join(spec.Pmem, ","))
	} else {
		args = append(args, "-machine", "pc", "-m", "512M")
	}
	args = append(args, "-append", strings.Join(appendArgs, " "))

	cmd := exec.Command(bc.Qemu, args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	qemuLog, err := os.Create(filepath.Join(bc.RunDir, spec.Name+"-qemu.log"))
	if err != nil {
		return nil, err
	}
	defer qemuLog.Close()
	cmd.Stdout, cmd.Stderr = qemuLog, qemuLog
	// If the harness dies without cleaning up, the kernel kills QEMU.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := procs.start(cmd); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	v := &vm{spec: spec, cmd: cmd, console: consoleLog, exited: make(chan struct{}), jobs: map[uint64]*job{}}
	go func() {
		cmd.Wait()
		procs.exited(cmd)
		close(v.exited)
	}()

	// QEMU connects to the agent socket at start-up; the agent says hello
	// once the guest has booted.
	type accepted struct {
		c   net.Conn
		err error
	}
	ac := make(chan accepted, 1)
	go func() { c, err := ln.Accept(); ac <- accepted{c, err} }()
	bootTimeout := time.NewTimer(3 * time.Minute)
	defer bootTimeout.Stop()
	var conn net.Conn
	select {
	case a := <-ac:
		if a.err != nil {
			return v, a.err
		}
		conn = a.c
	case <-v.exited:
		return v, fmt.Errorf("qemu exited at start: %s", tailFile(filepath.Join(bc.RunDir, spec.Name+"-qemu.log"), 10))
	case <-ctx.Done():
		return v, ctx.Err()
	}
	v.conn = conn
	v.enc = json.NewEncoder(conn)
	hello := make(chan agentproto.Reply, 1)
	go v.read(hello)
	select {
	case h := <-hello:
		v.hello = h
		return v, nil
	case <-v.exited:
		return v, fmt.Errorf("guest stopped before its agent started; console:\n%s", tailFile(consoleLog, 20))
	case <-bootTimeout.C:
		return v, fmt.Errorf("no agent after 3 minutes; console:\n%s", tailFile(consoleLog, 20))
	case <-ctx.Done():
		return v, ctx.Err()
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// read dispatches the agent's replies to their jobs.
func (v *vm) read(hello chan<- agentproto.Reply) {
	sc := bufio.NewScanner(v.conn)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		var r agentproto.Reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue
		}
		if r.Hello != "" {
			select {
			case hello <- r:
			default:
			}
			continue
		}
		v.mu.Lock()
		j := v.jobs[r.ID]
		if r.Done {
			delete(v.jobs, r.ID)
		}
		v.mu.Unlock()
		if j == nil {
			continue
		}
		if r.Out != "" {
			j.mu.Lock()
			j.out.WriteString(r.Out)
			echo := j.echo
			j.mu.Unlock()
			if echo != nil {
				echo(r.Out)
			}
		}
		if r.Done {
			j.code, j.err = r.Code, r.Err
			close(j.done)
		}
	}
	// The guest is gone: every job ends.
	v.mu.Lock()
	for id, j := range v.jobs {
		j.code, j.err = -1, "guest connection lost"
		close(j.done)
		delete(v.jobs, id)
	}
	v.mu.Unlock()
}

// start runs argv in the guest.
func (v *vm) start(name string, env []string, argv ...string) (*job, error) {
	v.mu.Lock()
	v.nextID++
	j := &job{vm: v, id: v.nextID, name: name, done: make(chan struct{})}
	v.jobs[j.id] = j
	v.mu.Unlock()
	v.encMu.Lock()
	err := v.enc.Encode(agentproto.Request{ID: j.id, Op: "run", Argv: argv, Env: env})
	v.encMu.Unlock()
	if err != nil {
		v.mu.Lock()
		delete(v.jobs, j.id)
		v.mu.Unlock()
		return nil, fmt.Errorf("%s: send job: %w", v.spec.Name, err)
	}
	return j, nil
}

// run runs argv in the guest and waits for it for at most timeout.
func (v *vm) run(ctx context.Context, timeout time.Duration, env []string, argv ...string) (string, error) {
	j, err := v.start(strings.Join(argv, " "), env, argv...)
	if err != nil {
		return "", err
	}
	return j.wait(ctx, timeout)
}

// wait waits for the job's end; on timeout or ctx's end it kills the job.
// The error is nil only for exit code 0.
func (j *job) wait(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-j.done:
	case <-t.C:
		j.kill()
		select { // give the guest a moment to report the killed job's end
		case <-j.done:
		case <-time.After(5 * time.Second):
		}
		return j.output(), fmt.Errorf("%s: %q timed out after %v", j.vm.spec.Name, j.name, timeout)
	case <-ctx.Done():
		j.kill()
		return j.output(), ctx.Err()
	}
	if j.code != 0 {
		msg := fmt.Sprintf("exit code %d", j.code)
		if j.err != "" {
			msg += ": " + j.err
		}
		return j.output(), fmt.Errorf("%s: %q: %s", j.vm.spec.Name, j.name, msg)
	}
	return j.output(), nil
}

func (j *job) output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.out.String()
}

func (j *job) kill() {
	j.vm.encMu.Lock()
	j.vm.enc.Encode(agentproto.Request{Op: "kill", Target: j.id})
	j.vm.encMu.Unlock()
}

// shutdown powers the guest off, and kills QEMU if it does not stop.
func (v *vm) shutdown(procs *procTable) {
	if v.enc != nil {
		v.encMu.Lock()
		v.conn.SetWriteDeadline(time.Now().Add(time.Second))
		v.enc.Encode(agentproto.Request{Op: "poweroff"})
		v.encMu.Unlock()
	}
	select {
	case <-v.exited:
	case <-time.After(10 * time.Second):
		procs.kill(v.cmd)
		<-v.exited
	}
	if v.conn != nil {
		v.conn.Close()
	}
}

// procTable records every process the harness started, by PID, so that
// any exit path (error, panic, signal) can kill what is still running.
type procTable struct {
	mu    sync.Mutex
	procs map[*exec.Cmd]struct{}
}

func (p *procTable) start(cmd *exec.Cmd) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	if p.procs == nil {
		p.procs = map[*exec.Cmd]struct{}{}
	}
	p.procs[cmd] = struct{}{}
	return nil
}

func (p *procTable) exited(cmd *exec.Cmd) {
	p.mu.Lock()
	delete(p.procs, cmd)
	p.mu.Unlock()
}

// kill sends SIGKILL to cmd's process group (QEMU leads its own).
func (p *procTable) kill(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Process.Kill()
}

// killAll kills every process still running and reports their PIDs.
func (p *procTable) killAll() []int {
	p.mu.Lock()
	cmds := make([]*exec.Cmd, 0, len(p.procs))
	for c := range p.procs {
		cmds = append(cmds, c)
	}
	p.mu.Unlock()
	var pids []int
	for _, c := range cmds {
		pids = append(pids, c.Process.Pid)
		p.kill(c)
	}
	return pids
}

// tailFile returns the last n lines of a file, for error messages.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return tailString(string(b), n)
}
