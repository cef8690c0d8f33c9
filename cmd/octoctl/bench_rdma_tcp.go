package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"time"
)

// The plain-TCP baseline: what the same two processes get from the
// kernel's TCP over the same path, with Go's defaults (TCP_NODELAY on).
// A connection starts with one JSON line naming the test.

type tcpBenchRequest struct {
	Mode string `json:"mode"` // "stream" or "pingpong"
	Size int    `json:"size"`
}

// serveTCPBaseline answers baseline connections until ctx ends.
func serveTCPBaseline(ctx context.Context, ln net.Listener) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			context.AfterFunc(ctx, func() { c.Close() })
			serveTCPConn(c)
		}()
	}
}

func serveTCPConn(c net.Conn) {
	br := bufio.NewReaderSize(c, 64<<10)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return
	}
	var req tcpBenchRequest
	if json.Unmarshal(line, &req) != nil || req.Size < 1 || req.Size > maxBenchSize {
		return
	}
	switch req.Mode {
	case "stream":
		// Read until the client closes its side, then report the count
		// so that the client's clock stops when everything arrived.
		buf := make([]byte, max(req.Size, 256<<10))
		var total uint64
		for {
			n, err := br.Read(buf)
			total += uint64(n)
			if err != nil {
				break
			}
		}
		var ack [8]byte
		binary.BigEndian.PutUint64(ack[:], total)
		c.Write(ack[:])
	case "pingpong":
		buf := make([]byte, req.Size)
		for {
			if _, err := io.ReadFull(br, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}
}

func dialTCPBench(ctx context.Context, addr string, req tcpBenchRequest) (*net.TCPConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("TCP baseline: %w", err)
	}
	line, _ := json.Marshal(req)
	if _, err := c.Write(append(line, '\n')); err != nil {
		c.Close()
		return nil, fmt.Errorf("TCP baseline: %w", err)
	}
	return c.(*net.TCPConn), nil
}

// tcpStream writes size-byte messages for d and returns what moved, in
// the time until the server acknowledged every byte.
func tcpStream(ctx context.Context, addr string, size int, d time.Duration) (bwResult, error) {
	c, err := dialTCPBench(ctx, addr, tcpBenchRequest{Mode: "stream", Size: size})
	if err != nil {
		return bwResult{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	buf := make([]byte, size)
	var sent uint64
	start := time.Now()
	deadline := start.Add(d)
	for time.Now().Before(deadline) {
		// Check the clock every few writes: small writes are cheap.
		for range 16 {
			n, err := c.Write(buf)
			sent += uint64(n)
			if err != nil {
				return bwResult{}, fmt.Errorf("TCP stream: %w", err)
			}
		}
	}
	if err := c.CloseWrite(); err != nil {
		return bwResult{}, err
	}
	var ack [8]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return bwResult{}, fmt.Errorf("TCP stream: waiting for the server's count: %w", err)
	}
	el := time.Since(start)
	if got := binary.BigEndian.Uint64(ack[:]); got != sent {
		return bwResult{}, fmt.Errorf("TCP stream: server received %d bytes of %d", got, sent)
	}
	return bwResult{bytes: float64(sent), msgs: float64(sent) / float64(size), secs: el.Seconds()}, nil
}
