package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// frame builds an Ethernet frame in QEMU's stream framing.
func frame(dst, src byte, payload string) []byte {
	f := make([]byte, 14+len(payload))
	copy(f[0:6], []byte{0x52, 0x54, 0, 0, 0, dst})
	if dst == 0xff {
		copy(f[0:6], bytes.Repeat([]byte{0xff}, 6))
	}
	copy(f[6:12], []byte{0x52, 0x54, 0, 0, 0, src})
	copy(f[14:], payload)
	out := binary.BigEndian.AppendUint32(nil, uint32(len(f)))
	return append(out, f...)
}

func readFrame(t *testing.T, c net.Conn) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatalf("read frame header: %v", err)
	}
	f := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(c, f); err != nil {
		t.Fatalf("read frame: %v", err)
	}
	return f
}

// waitPorts waits until the hub has accepted n ports: a frame sent
// before a port is registered is not flooded to it.
func waitPorts(t *testing.T, h *hub, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		got := len(h.ports)
		h.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub has %d ports after 5s, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// expectSilence fails if c receives anything within a short window.
func expectSilence(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var b [1]byte
	if n, _ := c.Read(b[:]); n > 0 {
		t.Fatalf("%s: port got a frame it should not have", what)
	}
}

func TestHubForwardsLikeASwitch(t *testing.T) {
	h, err := newHub(filepath.Join(t.TempDir(), "hub.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var ports [3]net.Conn
	for i := range ports {
		c, err := net.Dial("unix", h.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ports[i] = c
	}
	waitPorts(t, h, len(ports))
	// Unknown destination and broadcast flood to every other port; the
	// sender never gets its own frame back.
	if _, err := ports[0].Write(frame(0xff, 1, "arp who-has")); err != nil {
		t.Fatal(err)
	}
	for _, p := range ports[1:] {
		if got := readFrame(t, p); !bytes.Contains(got, []byte("arp who-has")) {
			t.Fatalf("broadcast arrived as %q", got)
		}
	}
	expectSilence(t, ports[0], "sender of a broadcast")
	// Port 1 answers port 0 by MAC: the hub learned both, so only port 0
	// sees it.
	if _, err := ports[1].Write(frame(1, 2, "arp reply")); err != nil {
		t.Fatal(err)
	}
	if got := readFrame(t, ports[0]); !bytes.Contains(got, []byte("arp reply")) {
		t.Fatalf("unicast arrived as %q", got)
	}
	expectSilence(t, ports[2], "bystander of a learned unicast")
}

func TestHubDropsMalformedPorts(t *testing.T) {
	h, err := newHub(filepath.Join(t.TempDir(), "hub.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	c, err := net.Dial("unix", h.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A length beyond any frame is not QEMU's framing: the hub hangs up.
	c.Write([]byte{0xff, 0xff, 0xff, 0xff})
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if _, err := c.Read(b[:]); err != io.EOF {
		t.Fatalf("after a malformed frame, read = %v, want EOF", err)
	}
}
