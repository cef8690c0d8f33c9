package main

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
)

// hub is a learning Ethernet switch for QEMU's stream netdevs: every VM's
// NIC connects to its unix socket, and each frame travels as QEMU's stream
// framing has it, a 4-byte big-endian length and the frame. Two VMs could
// connect directly; the hub makes any number of them one L2 segment.
type hub struct {
	ln net.Listener

	mu    sync.Mutex
	ports map[*hubPort]struct{}
	macs  map[[6]byte]*hubPort
	wg    sync.WaitGroup
}

type hubPort struct {
	c  net.Conn
	mu sync.Mutex // serialises writes
}

func newHub(path string) (*hub, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	h := &hub{ln: ln, ports: map[*hubPort]struct{}{}, macs: map[[6]byte]*hubPort{}}
	h.wg.Add(1)
	go h.accept()
	return h, nil
}

func (h *hub) accept() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		p := &hubPort{c: c}
		h.mu.Lock()
		h.ports[p] = struct{}{}
		h.mu.Unlock()
		h.wg.Add(1)
		go h.serve(p)
	}
}

// maxFrame bounds a frame: MTU 9000 plus headers, with room to spare.
const maxFrame = 65536

func (h *hub) serve(p *hubPort) {
	defer h.wg.Done()
	defer h.drop(p)
	var hdr [4]byte
	buf := make([]byte, 4+maxFrame)
	var targets []*hubPort // reused: one frame at a time
	for {
		if _, err := io.ReadFull(p.c, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxFrame || n < 14 {
			return // not QEMU's framing: drop the port
		}
		copy(buf, hdr[:])
		if _, err := io.ReadFull(p.c, buf[4:4+n]); err != nil {
			return
		}
		frame := buf[4 : 4+n]
		var dst, src [6]byte
		copy(dst[:], frame[0:6])
		copy(src[:], frame[6:12])
		h.mu.Lock()
		h.macs[src] = p
		out, known := h.macs[dst]
		targets = targets[:0]
		if known && dst[0]&1 == 0 {
			if out != p {
				targets = append(targets, out)
			}
		} else {
			for q := range h.ports {
				if q != p {
					targets = append(targets, q)
				}
			}
		}
		h.mu.Unlock()
		for _, q := range targets {
			q.mu.Lock()
			_, err := q.c.Write(buf[:4+n])
			q.mu.Unlock()
			if err != nil && !errors.Is(err, net.ErrClosed) {
				q.c.Close()
			}
		}
	}
}

func (h *hub) drop(p *hubPort) {
	p.c.Close()
	h.mu.Lock()
	delete(h.ports, p)
	for mac, q := range h.macs {
		if q == p {
			delete(h.macs, mac)
		}
	}
	h.mu.Unlock()
}

// Close stops the hub and disconnects every port.
func (h *hub) Close() {
	h.ln.Close()
	h.mu.Lock()
	for p := range h.ports {
		p.c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}
