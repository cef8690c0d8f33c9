package dataplane

import (
	"crypto/subtle"
	"fmt"

	"github.com/octofs/octofs/internal/codec"
	"github.com/octofs/octofs/rdma"
)

// Purpose says what an RDMA connection to a node is for. A node has one
// rdma.Listener; the accept loop (package node) decodes the Hello of each
// request and hands it to the service the purpose names.
type Purpose string

// Connection purposes.
const (
	// PurposeRPC is a connection for self-identified RPC (rdma/rpc):
	// metadata and chunk-service requests, client to node or node to node.
	PurposeRPC Purpose = "rpc"
	// PurposeData is a client's data connection (Export.Accept): one-sided
	// READ and WRITE of the node's data pools, apart from the RPC
	// connection so that bulk reads never delay metadata calls.
	PurposeData Purpose = "data"
)

// Hello is what a peer sends with its RDMA connection request, in the
// connection manager's private data: what the connection is for, who is
// asking, and the cluster token that proves it may ask.
type Hello struct {
	Purpose Purpose
	// Token is the cluster token.
	Token string
	// ClientID names the calling client process (random, non-zero, fixed
	// for the process's life); a node calling a node puts its own
	// process identity here.
	ClientID uint64
	// Incarnation is the sender process's incarnation: random, non-zero,
	// new at every start. A node refuses work from an older incarnation
	// of a peer once it has met a newer one.
	Incarnation uint64
	// Node is the sending node's id for node-to-node connections, empty
	// for clients.
	Node string
	// Client is a free-form name of the caller, for the node's logs.
	Client string
}

// helloVersion is the Hello encoding this node speaks. Version 1 was JSON;
// version 2 is the binary codec every other message uses.
const helloVersion = 2

// Bounds of a Hello's strings: together they fit rdma.MaxPrivateData.
const (
	maxHelloToken   = 256
	maxHelloNode    = 128
	maxHelloClient  = 128
	maxHelloPurpose = 16
)

// EncodeHello returns h as connection private data.
func EncodeHello(h Hello) ([]byte, error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	e := codec.NewEncoder(make([]byte, 0, 64+len(h.Token)+len(h.Node)+len(h.Client)))
	e.U8(helloVersion)
	e.String16(string(h.Purpose))
	e.String16(h.Token)
	e.U64(h.ClientID)
	e.U64(h.Incarnation)
	e.String16(h.Node)
	e.String16(h.Client)
	if e.Len() > rdma.MaxPrivateData {
		return nil, fmt.Errorf("%w: connection request of %d bytes", ErrBadHello, e.Len())
	}
	return e.Bytes(), nil
}

// DecodeHello parses connection private data.
func DecodeHello(b []byte) (Hello, error) {
	d := codec.NewDecoder(b)
	if v := d.U8(); d.Err() == nil && v != helloVersion {
		return Hello{}, fmt.Errorf("%w: version %d, this node speaks %d (upgrade the older side)", ErrBadHello, v, helloVersion)
	}
	h := Hello{
		Purpose:     Purpose(d.String16(maxHelloPurpose)),
		Token:       d.String16(maxHelloToken),
		ClientID:    d.U64(),
		Incarnation: d.U64(),
		Node:        d.String16(maxHelloNode),
		Client:      d.String16(maxHelloClient),
	}
	if err := d.Finish(); err != nil {
		return Hello{}, fmt.Errorf("%w: %v", ErrBadHello, err)
	}
	if err := h.check(); err != nil {
		return Hello{}, err
	}
	return h, nil
}

func (h Hello) check() error {
	switch {
	case h.Purpose != PurposeRPC && h.Purpose != PurposeData:
		return fmt.Errorf("%w: purpose %q (want %q or %q)", ErrBadHello, h.Purpose, PurposeRPC, PurposeData)
	case h.ClientID == 0:
		return fmt.Errorf("%w: client id 0", ErrBadHello)
	case h.Incarnation == 0:
		return fmt.Errorf("%w: incarnation 0", ErrBadHello)
	case len(h.Token) > maxHelloToken:
		return fmt.Errorf("%w: token of %d bytes, at most %d", ErrBadHello, len(h.Token), maxHelloToken)
	case len(h.Node) > maxHelloNode:
		return fmt.Errorf("%w: node id of %d bytes, at most %d", ErrBadHello, len(h.Node), maxHelloNode)
	case len(h.Client) > maxHelloClient:
		return fmt.Errorf("%w: client name of %d bytes, at most %d", ErrBadHello, len(h.Client), maxHelloClient)
	}
	return nil
}

// Authorize checks the Hello's token against the cluster's, in constant
// time. An empty cluster token (a node that has not joined yet) admits
// nobody.
func (h Hello) Authorize(token string) error {
	if token == "" || subtle.ConstantTimeCompare([]byte(h.Token), []byte(token)) != 1 {
		return fmt.Errorf("%w: wrong cluster token (use the token in the first node's data directory)", ErrUnauthorized)
	}
	return nil
}

// Grant is what a node answers a data connection with, in the accept's
// private data: the session the connection is, to be named in chunk-service
// requests so that their answers carry this connection's rkeys, and the
// node's incarnation, so that the client drops extents learnt from an
// earlier process of the node.
type Grant struct {
	// Session names the data connection at the node; never reused by one
	// node process.
	Session uint64
	// Incarnation is the node process's incarnation.
	Incarnation uint64
	// BlockSize is the node's data block size in bytes.
	BlockSize uint32
}

// grantVersion is the Grant encoding this node speaks.
const grantVersion = 1

// EncodeGrant returns g as connection private data.
func EncodeGrant(g Grant) []byte {
	e := codec.NewEncoder(make([]byte, 0, 32))
	e.U8(grantVersion)
	e.U64(g.Session)
	e.U64(g.Incarnation)
	e.U32(g.BlockSize)
	return e.Bytes()
}

// DecodeGrant parses a data connection's accept private data.
func DecodeGrant(b []byte) (Grant, error) {
	d := codec.NewDecoder(b)
	if v := d.U8(); d.Err() == nil && v != grantVersion {
		return Grant{}, fmt.Errorf("%w: grant version %d, this client speaks %d (upgrade the older side)", ErrBadHello, v, grantVersion)
	}
	g := Grant{Session: d.U64(), Incarnation: d.U64(), BlockSize: d.U32()}
	if err := d.Finish(); err != nil {
		return Grant{}, fmt.Errorf("%w: grant: %v", ErrBadHello, err)
	}
	if g.Session == 0 || g.Incarnation == 0 || g.BlockSize == 0 {
		return Grant{}, fmt.Errorf("%w: grant with a zero field %+v", ErrBadHello, g)
	}
	return g, nil
}
