package rpc

import (
	"encoding/binary"
	"fmt"
)

// The wire format, in one place: the message header, the immediate value
// and the server's parameters in the connection's private data. Every
// decoder here has a fuzz target (wire_test.go); the golden test pins the
// bytes.
//
// A message is one SEND_WITH_IMM: a 40-byte header, then the payload when
// it travels inline. Integers are big endian.
//
//	off len field
//	  0   1 version (1)
//	  1   1 kind: 1 request, 2 reply, 3 release
//	  2   1 flags: bit 0 "large": the payload is not in the message but in
//	        the sender's registered memory at (addr, rkey), for the
//	        receiver to RDMA READ
//	  3   1 status (replies; zero otherwise)
//	  4   2 op
//	  6   2 reserved, zero
//	  8   8 request id (chosen by the caller; echoed by the reply)
//	 16   4 payload length
//	 20   4 reply limit (requests: the largest reply, header included, that
//	        fits the caller's receive buffer; zero otherwise)
//	 24   8 addr (large: the payload's address; zero otherwise)
//	 32   4 rkey (large: the key that lets the receiver READ it; zero otherwise)
//	 36   4 reserved, zero
//
// A release (kind 3) is a bare header with every other field zero: the
// caller has read a large reply and the server may reuse its buffer.
const (
	// HeaderSize is the size of every message's header.
	HeaderSize = 40
	// wireVersion is the header version this package speaks.
	wireVersion = 1
)

// kind is what a message is.
type kind uint8

const (
	kindRequest kind = 1
	kindReply   kind = 2
	kindRelease kind = 3
)

// Header flags.
const (
	flagLarge  uint8 = 1 << 0
	knownFlags       = flagLarge
)

// Status is the outcome of a call, carried by its reply.
type Status uint8

// Statuses.
const (
	// StatusOK: the handler returned a reply; the payload is that reply.
	StatusOK Status = iota
	// StatusUnknownOp: no handler is registered for the op; nothing ran.
	StatusUnknownOp
	// StatusTooLarge: the request or the reply exceeded the server's
	// limit. A request refused so did not run; a reply refused so was
	// produced by a handler that ran.
	StatusTooLarge
	// StatusBusy: the server had no room to run the handler (too many
	// running, or no memory for a large message); nothing ran unless the
	// payload says the reply was refused.
	StatusBusy
	// StatusShuttingDown: the server is closing; nothing ran.
	StatusShuttingDown
	// StatusHandlerError: the handler returned an error (or panicked);
	// the payload is its message.
	StatusHandlerError

	numStatuses
)

var statusNames = [...]string{"ok", "unknown op", "too large", "busy", "shutting down", "handler error"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", s)
}

// header is a message header, decoded.
type header struct {
	Kind      kind
	Flags     uint8
	Status    Status
	Op        uint16
	RequestID uint64
	Length    uint32
	Limit     uint32
	Addr      uint64
	RKey      uint32
}

func (h *header) large() bool { return h.Flags&flagLarge != 0 }

// put encodes h into b[:HeaderSize].
func (h *header) put(b []byte) {
	_ = b[HeaderSize-1]
	b[0] = wireVersion
	b[1] = byte(h.Kind)
	b[2] = h.Flags
	b[3] = byte(h.Status)
	binary.BigEndian.PutUint16(b[4:], h.Op)
	binary.BigEndian.PutUint16(b[6:], 0)
	binary.BigEndian.PutUint64(b[8:], h.RequestID)
	binary.BigEndian.PutUint32(b[16:], h.Length)
	binary.BigEndian.PutUint32(b[20:], h.Limit)
	binary.BigEndian.PutUint64(b[24:], h.Addr)
	binary.BigEndian.PutUint32(b[32:], h.RKey)
	binary.BigEndian.PutUint32(b[36:], 0)
}

// minInline is the smallest receive buffer either side accepts: room for
// a header and a status message.
const minInline = 256

// maxStatusMessage bounds the message of a status reply, so that every
// status reply fits the smallest receive buffer.
const maxStatusMessage = minInline - HeaderSize

// maxWireMessage bounds every payload length on the wire, whatever the
// configuration: 1 GiB, the verbs maximum message size.
const maxWireMessage = 1 << 30

// parseMessage checks a received message, msg being exactly the bytes
// the SEND carried, and returns its header and inline payload (a slice of
// msg, nil for a large one). Everything the peer controls is checked
// here, before anything acts on it.
func parseMessage(msg []byte) (header, []byte, error) {
	var h header
	if len(msg) < HeaderSize {
		return h, nil, fmt.Errorf("%w: message of %d bytes, shorter than a header", ErrProtocol, len(msg))
	}
	if msg[0] != wireVersion {
		return h, nil, fmt.Errorf("%w: header version %d, this side speaks %d (run the same octofs version on both sides)", ErrProtocol, msg[0], wireVersion)
	}
	h.Kind = kind(msg[1])
	h.Flags = msg[2]
	h.Status = Status(msg[3])
	h.Op = binary.BigEndian.Uint16(msg[4:])
	h.RequestID = binary.BigEndian.Uint64(msg[8:])
	h.Length = binary.BigEndian.Uint32(msg[16:])
	h.Limit = binary.BigEndian.Uint32(msg[20:])
	h.Addr = binary.BigEndian.Uint64(msg[24:])
	h.RKey = binary.BigEndian.Uint32(msg[32:])
	if binary.BigEndian.Uint16(msg[6:]) != 0 || binary.BigEndian.Uint32(msg[36:]) != 0 {
		return h, nil, fmt.Errorf("%w: reserved header bytes are not zero", ErrProtocol)
	}
	if h.Flags&^knownFlags != 0 {
		return h, nil, fmt.Errorf("%w: unknown header flags %#x", ErrProtocol, h.Flags)
	}
	if h.Length > maxWireMessage {
		return h, nil, fmt.Errorf("%w: payload of %d bytes", ErrProtocol, h.Length)
	}
	switch h.Kind {
	case kindRequest:
		if h.Status != 0 {
			return h, nil, fmt.Errorf("%w: request with status %d", ErrProtocol, h.Status)
		}
		if h.Limit < minInline {
			return h, nil, fmt.Errorf("%w: reply limit %d, less than %d", ErrProtocol, h.Limit, minInline)
		}
	case kindReply:
		if h.Status >= numStatuses {
			return h, nil, fmt.Errorf("%w: unknown status %d", ErrProtocol, h.Status)
		}
		if h.Limit != 0 {
			return h, nil, fmt.Errorf("%w: reply with a reply limit", ErrProtocol)
		}
	case kindRelease:
		if h.Flags != 0 || h.Status != 0 || h.Op != 0 || h.RequestID != 0 || h.Length != 0 || h.Limit != 0 || h.Addr != 0 || h.RKey != 0 {
			return h, nil, fmt.Errorf("%w: release with fields set", ErrProtocol)
		}
		if len(msg) != HeaderSize {
			return h, nil, fmt.Errorf("%w: release of %d bytes", ErrProtocol, len(msg))
		}
		return h, nil, nil
	default:
		return h, nil, fmt.Errorf("%w: unknown message kind %d", ErrProtocol, h.Kind)
	}
	if h.large() {
		if len(msg) != HeaderSize {
			return h, nil, fmt.Errorf("%w: large message with %d inline bytes", ErrProtocol, len(msg)-HeaderSize)
		}
		if h.Length == 0 {
			return h, nil, fmt.Errorf("%w: large message of zero bytes", ErrProtocol)
		}
		return h, nil, nil
	}
	if h.Addr != 0 || h.RKey != 0 {
		return h, nil, fmt.Errorf("%w: inline message with a remote buffer", ErrProtocol)
	}
	if uint64(len(msg)) != HeaderSize+uint64(h.Length) {
		return h, nil, fmt.Errorf("%w: header says %d payload bytes, message carries %d", ErrProtocol, h.Length, len(msg)-HeaderSize)
	}
	return h, msg[HeaderSize:], nil
}

// The immediate value of every message names the caller's slot (low 16
// bits) and the slot's generation (high 16 bits), which changes with every
// call on the slot. Requests, their reply and the caller's release carry
// the same immediate. The client matches a reply to its call by the
// immediate alone; the server uses the slot to find per-slot state.

// MaxSlots bounds the calls in flight on one connection.
const MaxSlots = 1024

func makeImm(slot, gen uint16) uint32 { return uint32(gen)<<16 | uint32(slot) }

func splitImm(imm uint32) (slot, gen uint16) { return uint16(imm), uint16(imm >> 16) }

// The server's parameters travel in the private data of its accept, so
// that a client sizes its side from them:
//
//	off len field
//	  0   4 magic "ORPC"
//	  4   1 version (1)
//	  5   3 reserved, zero
//	  8   2 slots: calls the server takes in flight on this connection
//	 10   2 reserved, zero
//	 12   4 inline size: bytes of a server receive buffer, header included
//	 16   4 max message: the largest request payload the server accepts
const (
	paramsMagic = "ORPC"
	paramsSize  = 20
)

// serverParams is what a server tells a client when it accepts.
type serverParams struct {
	Slots      int
	InlineSize int
	MaxMessage int
}

func (p serverParams) marshal() []byte {
	b := make([]byte, paramsSize)
	copy(b, paramsMagic)
	b[4] = wireVersion
	binary.BigEndian.PutUint16(b[8:], uint16(p.Slots))
	binary.BigEndian.PutUint32(b[12:], uint32(p.InlineSize))
	binary.BigEndian.PutUint32(b[16:], uint32(p.MaxMessage))
	return b
}

// decodeServerParams parses an accept's private data.
func decodeServerParams(b []byte) (serverParams, error) {
	var p serverParams
	if len(b) != paramsSize || string(b[:4]) != paramsMagic {
		return p, fmt.Errorf("%w: the peer is not an rpc server (private data of %d bytes)", ErrProtocol, len(b))
	}
	if b[4] != wireVersion {
		return p, fmt.Errorf("%w: server speaks version %d, this client %d (run the same octofs version on both sides)", ErrProtocol, b[4], wireVersion)
	}
	if b[5]|b[6]|b[7]|b[10]|b[11] != 0 {
		return p, fmt.Errorf("%w: reserved parameter bytes are not zero", ErrProtocol)
	}
	p.Slots = int(binary.BigEndian.Uint16(b[8:]))
	p.InlineSize = int(binary.BigEndian.Uint32(b[12:]))
	p.MaxMessage = int(binary.BigEndian.Uint32(b[16:]))
	switch {
	case p.Slots < 1 || p.Slots > MaxSlots:
		return p, fmt.Errorf("%w: server offers %d slots", ErrProtocol, p.Slots)
	case p.InlineSize < minInline || p.InlineSize > maxInlineSize:
		return p, fmt.Errorf("%w: server inline size %d", ErrProtocol, p.InlineSize)
	case p.MaxMessage < 0 || p.MaxMessage > maxWireMessage:
		return p, fmt.Errorf("%w: server max message %d", ErrProtocol, p.MaxMessage)
	}
	return p, nil
}

// maxInlineSize bounds receive buffers: beyond this, large messages by
// RDMA READ are the better path anyway.
const maxInlineSize = 1 << 20
