package rpc

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/soft"
)

// TestHostileServer: a server that answers with a reply that matches no
// call, or a malformed one, gets the connection closed; the call fails
// with ErrBroken (wrapping ErrProtocol), never with someone else's reply.
func TestHostileServer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(imm uint32, req header) (uint32, []byte)
	}{
		{"wrong generation", func(imm uint32, req header) (uint32, []byte) {
			return imm + 1<<16, encode(header{Kind: kindReply, Op: req.Op, RequestID: req.RequestID}, nil)
		}},
		{"wrong slot", func(imm uint32, req header) (uint32, []byte) {
			return imm ^ 1, encode(header{Kind: kindReply, Op: req.Op, RequestID: req.RequestID}, nil)
		}},
		{"wrong request id", func(imm uint32, req header) (uint32, []byte) {
			return imm, encode(header{Kind: kindReply, Op: req.Op, RequestID: req.RequestID + 1}, nil)
		}},
		{"a request instead of a reply", func(imm uint32, req header) (uint32, []byte) {
			return imm, encode(header{Kind: kindRequest, Op: req.Op, RequestID: req.RequestID, Limit: 4096}, nil)
		}},
		{"malformed header", func(imm uint32, req header) (uint32, []byte) {
			b := encode(header{Kind: kindReply, Op: req.Op, RequestID: req.RequestID}, nil)
			b[6] = 1
			return imm, b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, err := soft.Open(rdma.DeviceConfig{})
			require.NoError(t, err)
			t.Cleanup(func() { dev.Close() })
			pd, err := dev.AllocPD()
			require.NoError(t, err)
			mem := make([]byte, 1<<16)
			mr, err := pd.RegMR(mem, rdma.AccessLocalWrite)
			require.NoError(t, err)
			cq, err := dev.CreateCQ(256)
			require.NoError(t, err)
			ln, err := rdma.Listen(pd, "127.0.0.1:0")
			require.NoError(t, err)
			t.Cleanup(func() { ln.Close() })
			served := make(chan error, 1)
			ctx, cancel := context.WithCancel(ctxT(t))
			t.Cleanup(cancel)
			go func() {
				served <- func() error {
					conn, err := ln.Accept(ctx, rdma.ConnParams{
						QP:          rdma.QPConfig{SendCQ: cq, RecvCQ: cq},
						PrivateData: serverParams{Slots: 4, InlineSize: 4096, MaxMessage: 1 << 20}.marshal(),
						Setup: func(qp rdma.QP) error {
							return qp.PostRecv([]rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{{Addr: mr.Addr(), Length: 4096, LKey: mr.LKey()}}}})
						},
					})
					if err != nil {
						return err
					}
					defer conn.Close()
					var wc [4]rdma.WorkCompletion
					for {
						n, err := cq.Wait(ctx, wc[:])
						if err != nil {
							return err
						}
						for _, w := range wc[:n] {
							if w.Opcode != rdma.WCRecv || w.Status != rdma.WCSuccess {
								continue
							}
							req, _, err := parseMessage(mem[:w.ByteLen])
							if err != nil {
								return err
							}
							imm, msg := tc.reply(w.Imm, req)
							copy(mem[8192:], msg)
							if err := conn.QP.PostSend([]rdma.SendWR{{Opcode: rdma.OpSendWithImm, Imm: imm,
								SGL: []rdma.SGE{{Addr: mr.Addr() + 8192, Length: uint32(len(msg)), LKey: mr.LKey()}}}}); err != nil {
								return err
							}
							<-conn.Done() // the client closes on the bad reply
							return nil
						}
					}
				}()
			}()
			c := newTestDevice(t).dial(t, ln.Addr().String(), ClientConfig{Slots: 4})
			_, err = c.Call(ctxT(t), opEcho, 77, []byte("hi"))
			require.ErrorIs(t, err, ErrBroken)
			require.ErrorIs(t, err, ErrProtocol)
			<-c.Done()
			require.NoError(t, <-served)
		})
	}
}
