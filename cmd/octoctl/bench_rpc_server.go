package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
	"github.com/octofs/octofs/rdma/rpc"
)

// The bench server: an rdma/rpc Server behind an rdma.Listener, as a node
// runs one, with a null op and an echo op, and the TCP baseline's
// request/response server.

// Ops of the bench server.
const (
	benchRPCNull uint16 = 1 // replies with nothing
	benchRPCEcho uint16 = 2 // replies with the request's payload
)

// benchRPCHello is the private data of the bench's connection requests;
// the server accepts no other.
const benchRPCHello = "octoctl-bench-rpc/1"

func serveBenchRPC(ctx context.Context, o *benchRPCOptions, out io.Writer) error {
	host, port, err := net.SplitHostPort(o.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", o.listen, err)
	}
	cfg := rdma.DeviceConfig{Device: o.device, GIDIndex: o.gidIndex, Addr: o.softAddr}
	if cfg.Addr == "" && o.provider == "soft" {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("--listen %q: with the soft provider, listen on the address clients reach, or give --soft-addr", o.listen)
		}
		cfg.Addr = net.JoinHostPort(host, "0")
	}
	dev, err := provider.Open(o.provider, cfg)
	if err != nil {
		return fmt.Errorf("open %s device: %w", o.provider, err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	srv, err := rpc.NewServer(rpc.ServerConfig{Device: dev, PD: pd, Workers: o.workers})
	if err != nil {
		return err
	}
	defer srv.Close()
	// Both answer on the worker, as the TCP baseline's server answers on
	// its connection's goroutine (and as octofs serves short reads).
	null := func(context.Context, *rpc.Call) ([]byte, error) { return nil, nil }
	echo := func(_ context.Context, c *rpc.Call) ([]byte, error) {
		// The payload is only valid until the handler returns.
		return append([]byte(nil), c.Payload...), nil
	}
	srv.HandleInline(benchRPCNull, null, null)
	srv.HandleInline(benchRPCEcho, echo, echo)
	ln, err := rdma.Listen(pd, o.listen)
	if err != nil {
		return err
	}
	defer ln.Close()

	tcpListen := o.tcpListen
	if tcpListen == "" {
		p, _ := strconv.Atoi(port)
		if p != 0 {
			p++
		}
		tcpListen = net.JoinHostPort(host, strconv.Itoa(p))
	}
	tln, err := net.Listen("tcp", tcpListen)
	if err != nil {
		return fmt.Errorf("TCP baseline: %w (choose another port with --tcp-listen)", err)
	}
	defer tln.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		serveRPCBenchTCP(ctx, tln)
	}()

	fmt.Fprintf(os.Stderr, "octoctl bench rpc: serving on %s (device %s, provider %s), TCP baseline on %s\n",
		ln.Addr(), dev.Name(), dev.Provider(), tln.Addr())
	fmt.Fprintf(out, "%s%s %s\n", benchRPCReadyPrefix, ln.Addr(), tln.Addr())
	if o.exitWithParent {
		go func() {
			io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	for {
		req, err := ln.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if string(req.PrivateData) != benchRPCHello {
			req.Reject("not an octoctl bench rpc client")
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Accept(ctx, req, "bench client"); err != nil {
				fmt.Fprintf(os.Stderr, "octoctl bench rpc: connection from QP %d: %v\n", req.Remote.QPN, err)
			}
		}()
	}
}

// The TCP baseline: a connection starts with one JSON line naming the
// message size; then every size-byte request is answered by size bytes.
// The server reads whatever requests have arrived and writes their replies
// in one flush, as a pipelining request/response server does.
type rpcBenchTCPRequest struct {
	Size int `json:"size"`
}

func serveRPCBenchTCP(ctx context.Context, ln net.Listener) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			serveRPCBenchTCPConn(c)
		}()
	}
}

func serveRPCBenchTCPConn(c net.Conn) {
	br := bufio.NewReaderSize(c, 64<<10)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return
	}
	var req rpcBenchTCPRequest
	if json.Unmarshal(line, &req) != nil || req.Size < 1 || req.Size > rpc.DefaultMaxMessage+rpc.HeaderSize {
		return
	}
	bw := bufio.NewWriterSize(c, 64<<10)
	buf := make([]byte, req.Size)
	for {
		if _, err := io.ReadFull(br, buf); err != nil {
			return
		}
		if _, err := bw.Write(buf); err != nil {
			return
		}
		if br.Buffered() < req.Size {
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}
