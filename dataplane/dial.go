package dataplane

import (
	"context"
	"crypto/rand"
	"encoding/binary"

	"github.com/octofs/octofs/rdma"
)

// DialData opens a data connection to a node's export (through the node's
// listener) with h (Purpose is set to PurposeData). The queue pair is
// created in pd, with cq for both queues and room for depth outstanding
// requests. The caller closes the connection.
func DialData(ctx context.Context, pd rdma.PD, cq rdma.CQ, addr string, depth int, h Hello) (*rdma.Conn, Grant, error) {
	h.Purpose = PurposeData
	hello, err := EncodeHello(h)
	if err != nil {
		return nil, Grant{}, err
	}
	conn, err := rdma.Dial(ctx, pd, addr, rdma.ConnParams{
		QP:          rdma.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: depth, MaxRecvWR: 1},
		Access:      rdma.AccessRemoteRead, // nothing of the client is registered for remote access anyway
		PrivateData: hello,
	})
	if err != nil {
		return nil, Grant{}, err
	}
	g, err := DecodeGrant(conn.PrivateData)
	if err != nil {
		conn.Close()
		return nil, Grant{}, err
	}
	return conn, g, nil
}

// RandomID returns a random non-zero 64-bit id: client ids and
// incarnations.
func RandomID() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}
