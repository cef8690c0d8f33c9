package soft

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/octofs/octofs/rdma"
)

// The soft provider's wire format. Every queue pair that sends requests
// dials the peer device's listener and owns that TCP connection: requests
// flow one way on it and responses the other, so one direction of an RC
// connection never waits on the other.
//
// A connection starts with a hello (requester → responder) and its answer:
//
//	hello:  magic "OSR\x01" (4) | source QPN (4) | destination QPN (4) |
//	        source address length (2) | source address
//	answer: magic "OSR\x01" (4) | status (1) | reserved (3)
//
// then carries frames: a fixed header, followed for SEND, WRITE and READ
// responses by Length payload bytes.
//
//	0  version (1) | type (1) | flags (1) | code (1)
//	4  PSN (4)
//	8  length (4)
//	12 rkey (4)
//	16 remote address (8)
//	24 immediate (4) | reserved (4)
//	32 compare/add, or the original value in an atomic response (8)
//	40 swap (8)
//
// Integers are big endian, as on an InfiniBand wire.

const (
	wireVersion     = 1
	frameHeaderSize = 48
	helloMagic      = "OSR\x01"
	helloFixedSize  = 14
	helloAnswerSize = 8
	maxHelloAddr    = 256
	// maxMsgSize bounds one message, as the IB spec's 2^31 does; the
	// soft provider allows 1 GiB.
	maxMsgSize = 1 << 30
)

type frameType uint8

const (
	frameSend frameType = iota + 1
	frameSendImm
	frameWrite
	frameWriteImm
	frameRead
	frameCmpSwp
	frameFetchAdd
	frameAck      // everything up to and including PSN is done
	frameNak      // the request at PSN failed with Code (a nakCode)
	frameRNRNak   // no receive for the request at PSN; retry after timer Code
	frameReadResp // Length bytes of READ data for PSN follow
	frameAtomicResp
	frameTypeEnd
)

func (t frameType) isRequest() bool { return t >= frameSend && t <= frameFetchAdd }

// hasPayload reports whether Length bytes follow the header.
func (t frameType) hasPayload() bool {
	switch t {
	case frameSend, frameSendImm, frameWrite, frameWriteImm, frameReadResp:
		return true
	}
	return false
}

// nakCode is the reason of a NAK, mapping to the requester's WCStatus.
type nakCode uint8

const (
	nakInvalidRequest nakCode = iota + 1
	nakRemoteAccess
	nakRemoteOp
)

func (c nakCode) status() rdma.WCStatus {
	switch c {
	case nakInvalidRequest:
		return rdma.WCRemInvReqErr
	case nakRemoteAccess:
		return rdma.WCRemAccessErr
	default:
		return rdma.WCRemOpErr
	}
}

type frameHeader struct {
	Type       frameType
	Flags      uint8
	Code       uint8
	PSN        uint32
	Length     uint32
	RKey       uint32
	RemoteAddr uint64
	Imm        uint32
	CompareAdd uint64
	Swap       uint64
}

// Frame flags.
const (
	flagSolicited = 1 << iota
	flagHasImm
	flagsKnown = flagSolicited | flagHasImm
)

func (h *frameHeader) encode(b []byte) {
	_ = b[frameHeaderSize-1]
	b[0] = wireVersion
	b[1] = byte(h.Type)
	b[2] = h.Flags
	b[3] = h.Code
	binary.BigEndian.PutUint32(b[4:], h.PSN)
	binary.BigEndian.PutUint32(b[8:], h.Length)
	binary.BigEndian.PutUint32(b[12:], h.RKey)
	binary.BigEndian.PutUint64(b[16:], h.RemoteAddr)
	binary.BigEndian.PutUint32(b[24:], h.Imm)
	binary.BigEndian.PutUint32(b[28:], 0)
	binary.BigEndian.PutUint64(b[32:], h.CompareAdd)
	binary.BigEndian.PutUint64(b[40:], h.Swap)
}

// decode parses and validates a header. It never trusts a length beyond
// maxMsgSize, so a hostile peer cannot make the reader allocate or skip
// unbounded amounts.
func (h *frameHeader) decode(b []byte) error {
	if len(b) < frameHeaderSize {
		return fmt.Errorf("%w: short frame header (%d bytes)", rdma.ErrProtocol, len(b))
	}
	if b[0] != wireVersion {
		return fmt.Errorf("%w: frame version %d, want %d", rdma.ErrProtocol, b[0], wireVersion)
	}
	*h = frameHeader{
		Type:       frameType(b[1]),
		Flags:      b[2],
		Code:       b[3],
		PSN:        binary.BigEndian.Uint32(b[4:]),
		Length:     binary.BigEndian.Uint32(b[8:]),
		RKey:       binary.BigEndian.Uint32(b[12:]),
		RemoteAddr: binary.BigEndian.Uint64(b[16:]),
		Imm:        binary.BigEndian.Uint32(b[24:]),
		CompareAdd: binary.BigEndian.Uint64(b[32:]),
		Swap:       binary.BigEndian.Uint64(b[40:]),
	}
	if h.Type == 0 || h.Type >= frameTypeEnd {
		return fmt.Errorf("%w: unknown frame type %d", rdma.ErrProtocol, h.Type)
	}
	if binary.BigEndian.Uint32(b[28:]) != 0 {
		return fmt.Errorf("%w: reserved frame bytes set", rdma.ErrProtocol)
	}
	if h.Flags&^flagsKnown != 0 {
		return fmt.Errorf("%w: unknown frame flags %#x", rdma.ErrProtocol, h.Flags)
	}
	if h.Length > maxMsgSize {
		return fmt.Errorf("%w: frame length %d over %d", rdma.ErrProtocol, h.Length, maxMsgSize)
	}
	switch h.Type {
	case frameCmpSwp, frameFetchAdd:
		if h.Length != 8 {
			return fmt.Errorf("%w: atomic of %d bytes", rdma.ErrProtocol, h.Length)
		}
	case frameAck, frameRNRNak, frameAtomicResp:
		if h.Length != 0 {
			return fmt.Errorf("%w: %d-byte payload on a frame of type %d", rdma.ErrProtocol, h.Length, h.Type)
		}
	case frameNak:
		if h.Length != 0 || h.Code < uint8(nakInvalidRequest) || h.Code > uint8(nakRemoteOp) {
			return fmt.Errorf("%w: bad NAK (code %d, length %d)", rdma.ErrProtocol, h.Code, h.Length)
		}
	}
	if h.Type == frameRNRNak && h.Code > 31 {
		return fmt.Errorf("%w: RNR timer %d", rdma.ErrProtocol, h.Code)
	}
	return nil
}

type helloStatus uint8

const (
	helloOK helloStatus = iota
	helloNoQP
	helloNotReady
	helloWrongPeer
	helloBusy
)

func (s helloStatus) String() string {
	switch s {
	case helloOK:
		return "ok"
	case helloNoQP:
		return "no such queue pair"
	case helloNotReady:
		return "queue pair not ready to receive"
	case helloWrongPeer:
		return "queue pair is connected to another peer"
	case helloBusy:
		return "queue pair already has a requester connection"
	}
	return fmt.Sprintf("status %d", uint8(s))
}

type hello struct {
	SrcQPN, DstQPN uint32
	SrcAddr        string
}

func (m *hello) marshal() []byte {
	b := make([]byte, 0, helloFixedSize+len(m.SrcAddr))
	b = append(b, helloMagic...)
	b = binary.BigEndian.AppendUint32(b, m.SrcQPN)
	b = binary.BigEndian.AppendUint32(b, m.DstQPN)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.SrcAddr)))
	return append(b, m.SrcAddr...)
}

func readHello(r io.Reader) (*hello, error) {
	var fixed [helloFixedSize]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return nil, err
	}
	if string(fixed[:4]) != helloMagic {
		return nil, fmt.Errorf("%w: not a soft RDMA connection", rdma.ErrProtocol)
	}
	m := &hello{
		SrcQPN: binary.BigEndian.Uint32(fixed[4:]),
		DstQPN: binary.BigEndian.Uint32(fixed[8:]),
	}
	n := int(binary.BigEndian.Uint16(fixed[12:]))
	if n > maxHelloAddr {
		return nil, fmt.Errorf("%w: hello address of %d bytes", rdma.ErrProtocol, n)
	}
	addr := make([]byte, n)
	if _, err := io.ReadFull(r, addr); err != nil {
		return nil, err
	}
	m.SrcAddr = string(addr)
	return m, nil
}

func marshalHelloAnswer(s helloStatus) []byte {
	b := make([]byte, helloAnswerSize)
	copy(b, helloMagic)
	b[4] = byte(s)
	return b
}

func readHelloAnswer(r io.Reader) (helloStatus, error) {
	var b [helloAnswerSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	if string(b[:4]) != helloMagic || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return 0, fmt.Errorf("%w: bad hello answer", rdma.ErrProtocol)
	}
	if b[4] > uint8(helloBusy) {
		return 0, fmt.Errorf("%w: unknown hello status %d", rdma.ErrProtocol, b[4])
	}
	return helloStatus(b[4]), nil
}
