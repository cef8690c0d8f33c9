// Command vmagent runs in each vmtest guest (started by vmtest/init) and
// executes the host's jobs: it reads agentproto.Requests from the
// virtio-serial port named agentproto.PortName, runs each job in its own
// process group and streams its output and exit code back. It is built
// static (CGO_ENABLED=0) and reaches the guest through the 9p share, so
// changing it needs no new initramfs.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/octofs/octofs/vmtest/agentproto"
)

func main() {
	log.SetPrefix("vmagent: ")
	log.SetFlags(0)
	port, err := findPort(agentproto.PortName, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	f, err := os.OpenFile(port, os.O_RDWR, 0)
	if err != nil {
		log.Fatal(err)
	}
	a := &agent{w: json.NewEncoder(f), jobs: map[uint64]*exec.Cmd{}}
	host, _ := os.Hostname()
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	a.send(agentproto.Reply{Hello: host, Kernel: strings.TrimSpace(string(kernel))})
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var req agentproto.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			log.Printf("bad request: %v", err)
			continue
		}
		switch req.Op {
		case "run":
			a.run(req)
		case "kill":
			a.kill(req.Target)
		case "poweroff":
			syscall.Sync()
			syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
		default:
			a.send(agentproto.Reply{ID: req.ID, Done: true, Code: -1, Err: "unknown op " + req.Op})
		}
	}
	log.Fatalf("port closed: %v", sc.Err())
}

// findPort finds the /dev node of the virtio-serial port called name.
func findPort(name string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		paths, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err == nil && strings.TrimSpace(string(b)) == name {
				return "/dev/" + filepath.Base(filepath.Dir(p)), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no virtio-serial port %q", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type agent struct {
	mu   sync.Mutex
	w    *json.Encoder
	jobs map[uint64]*exec.Cmd
}

func (a *agent) send(r agentproto.Reply) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.w.Encode(r); err != nil {
		log.Printf("send: %v", err)
	}
}

func (a *agent) run(req agentproto.Request) {
	if len(req.Argv) == 0 {
		a.send(agentproto.Reply{ID: req.ID, Done: true, Code: -1, Err: "empty argv"})
		return
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Env = append(os.Environ(), req.Env...)
	cmd.Dir = req.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		a.send(agentproto.Reply{ID: req.ID, Done: true, Code: -1, Err: err.Error()})
		return
	}
	a.mu.Lock()
	a.jobs[req.ID] = cmd
	a.mu.Unlock()
	streamed := make(chan struct{})
	go func() {
		defer close(streamed)
		buf := make([]byte, 16<<10)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				a.send(agentproto.Reply{ID: req.ID, Out: string(buf[:n])})
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		<-streamed
		a.mu.Lock()
		delete(a.jobs, req.ID)
		a.mu.Unlock()
		r := agentproto.Reply{ID: req.ID, Done: true, Code: cmd.ProcessState.ExitCode()}
		if err != nil && r.Code < 0 {
			r.Err = err.Error()
		}
		a.send(r)
	}()
}

func (a *agent) kill(id uint64) {
	a.mu.Lock()
	cmd := a.jobs[id]
	a.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
