package soft

import (
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/octofs/octofs/rdma"
)

// The soft provider's wire format, version 2. The two queue pairs of an RC
// connection share one TCP connection, a link (link.go), that carries both
// directions: each side's requests and its responses to the other side's
// requests travel interleaved, frame by frame. Which side dials is fixed by
// the two endpoints (qp.dialsPeer).
//
// A link starts with a hello (dialer → acceptor) and its answer:
//
//	hello:  magic "OSR\x02" (4) | source QPN (4) | destination QPN (4) |
//	        destination secret (16) | source address length (2) | source address
//	answer: magic "OSR\x02" (4) | status (1) | reserved (3) | source secret (16)
//
// The hello proves that the dialer knows the secret of the queue pair it
// connects to, which only the peer told through the connection manager
// learnt (rdma.Endpoint.Secret); the answer proves the same of the
// acceptor, by returning the dialer's secret (zeros unless the status is
// ok). A hello that fails the check is refused and leaves the queue pair
// alone. Every frame after the hello comes from the authenticated peer.
//
// Frames are a fixed header followed by Length payload bytes for SEND,
// WRITE and READ response frames:
//
//	0  version (1) | type (1) | flags (1) | code (1)
//	4  PSN (4)
//	8  length (4)
//	12 acknowledged PSN (4), with flagAck
//	16 rkey (4)
//	20 immediate (4)
//	24 remote address; in a READ response, the offset of its data (8)
//	32 compare/add, or the original value in an atomic response (8)
//	40 swap (8)
//
// Any frame may carry an acknowledgement of the peer's requests (flagAck):
// every request of the peer up to and including the acknowledged PSN has
// been executed. That is how an ACK rides on traffic going the other way;
// a frame of type ACK carries only that. A READ's length is in its request
// frame; its response is one frame, or two when it is longer than
// readTailMax (the data but the last readTailMax bytes, then those), see
// link_tx.go for why. Integers are big endian, as on an InfiniBand wire.

const (
	wireVersion     = 2
	frameHeaderSize = 48
	helloMagic      = "OSR\x02"
	helloFixedSize  = 4 + 4 + 4 + rdma.SecretSize + 2
	helloAnswerSize = 4 + 4 + rdma.SecretSize
	maxHelloAddr    = 256
	// maxMsgSize bounds one message, as the IB spec's 2^31 does; the
	// soft provider allows 1 GiB.
	maxMsgSize = 1 << 30
	// readTailMax is the largest final frame of a READ response.
	readTailMax = 64 << 10
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
	frameAck      // carries only an acknowledgement (flagAck)
	frameNak      // the request at PSN failed with Code (a nakCode)
	frameRNRNak   // no receive for the request at PSN; retry after timer Code
	frameReadResp // Length bytes of READ data for PSN, at offset RemoteAddr
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
	AckPSN     uint32
	RKey       uint32
	Imm        uint32
	RemoteAddr uint64
	CompareAdd uint64
	Swap       uint64
}

// Frame flags.
const (
	flagSolicited = 1 << iota
	flagHasImm
	flagAck    // AckPSN acknowledges the peer's requests through it
	flagsKnown = flagSolicited | flagHasImm | flagAck
)

// Byte offsets of the fields a transmitter patches in an encoded header.
const (
	hdrFlagsOff  = 2
	hdrAckPSNOff = 12
)

func (h *frameHeader) encode(b []byte) {
	_ = b[frameHeaderSize-1]
	b[0] = wireVersion
	b[1] = byte(h.Type)
	b[2] = h.Flags
	b[3] = h.Code
	binary.BigEndian.PutUint32(b[4:], h.PSN)
	binary.BigEndian.PutUint32(b[8:], h.Length)
	binary.BigEndian.PutUint32(b[12:], h.AckPSN)
	binary.BigEndian.PutUint32(b[16:], h.RKey)
	binary.BigEndian.PutUint32(b[20:], h.Imm)
	binary.BigEndian.PutUint64(b[24:], h.RemoteAddr)
	binary.BigEndian.PutUint64(b[32:], h.CompareAdd)
	binary.BigEndian.PutUint64(b[40:], h.Swap)
}

// setAck makes an encoded header acknowledge the peer's requests
// through psn.
func setAck(b []byte, psn uint32) {
	b[hdrFlagsOff] |= flagAck
	binary.BigEndian.PutUint32(b[hdrAckPSNOff:], psn)
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
		AckPSN:     binary.BigEndian.Uint32(b[12:]),
		RKey:       binary.BigEndian.Uint32(b[16:]),
		Imm:        binary.BigEndian.Uint32(b[20:]),
		RemoteAddr: binary.BigEndian.Uint64(b[24:]),
		CompareAdd: binary.BigEndian.Uint64(b[32:]),
		Swap:       binary.BigEndian.Uint64(b[40:]),
	}
	if h.Type == 0 || h.Type >= frameTypeEnd {
		return fmt.Errorf("%w: unknown frame type %d", rdma.ErrProtocol, h.Type)
	}
	if h.Flags&^flagsKnown != 0 {
		return fmt.Errorf("%w: unknown frame flags %#x", rdma.ErrProtocol, h.Flags)
	}
	if h.Flags&flagAck == 0 && h.AckPSN != 0 {
		return fmt.Errorf("%w: acknowledged PSN without the flag", rdma.ErrProtocol)
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
	case frameReadResp:
		if h.RemoteAddr > maxMsgSize-uint64(h.Length) {
			return fmt.Errorf("%w: READ response data at %d+%d", rdma.ErrProtocol, h.RemoteAddr, h.Length)
		}
	}
	if h.Type == frameAck && h.Flags&flagAck == 0 {
		return fmt.Errorf("%w: ACK frame without an acknowledgement", rdma.ErrProtocol)
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
		return "queue pair is connected to another peer, or the secret is wrong"
	case helloBusy:
		return "queue pair is connected already"
	}
	return fmt.Sprintf("status %d", uint8(s))
}

type hello struct {
	SrcQPN, DstQPN uint32
	// DstSecret is the secret of the queue pair connected to.
	DstSecret [rdma.SecretSize]byte
	SrcAddr   string
}

func (m *hello) marshal() []byte {
	b := make([]byte, 0, helloFixedSize+len(m.SrcAddr))
	b = append(b, helloMagic...)
	b = binary.BigEndian.AppendUint32(b, m.SrcQPN)
	b = binary.BigEndian.AppendUint32(b, m.DstQPN)
	b = append(b, m.DstSecret[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.SrcAddr)))
	return append(b, m.SrcAddr...)
}

func readHello(r io.Reader) (*hello, error) {
	var fixed [helloFixedSize]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return nil, err
	}
	if string(fixed[:4]) != helloMagic {
		return nil, fmt.Errorf("%w: not a soft RDMA connection (or another version)", rdma.ErrProtocol)
	}
	m := &hello{
		SrcQPN: binary.BigEndian.Uint32(fixed[4:]),
		DstQPN: binary.BigEndian.Uint32(fixed[8:]),
	}
	copy(m.DstSecret[:], fixed[12:])
	n := int(binary.BigEndian.Uint16(fixed[12+rdma.SecretSize:]))
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

// helloAnswer answers a hello; Proof is the dialer's own secret when the
// status is helloOK, zeros otherwise.
type helloAnswer struct {
	Status helloStatus
	Proof  [rdma.SecretSize]byte
}

func (a *helloAnswer) marshal() []byte {
	b := make([]byte, helloAnswerSize)
	copy(b, helloMagic)
	b[4] = byte(a.Status)
	copy(b[8:], a.Proof[:])
	return b
}

func readHelloAnswer(r io.Reader) (*helloAnswer, error) {
	var b [helloAnswerSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return nil, err
	}
	if string(b[:4]) != helloMagic || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return nil, fmt.Errorf("%w: bad hello answer", rdma.ErrProtocol)
	}
	if b[4] > uint8(helloBusy) {
		return nil, fmt.Errorf("%w: unknown hello status %d", rdma.ErrProtocol, b[4])
	}
	a := &helloAnswer{Status: helloStatus(b[4])}
	copy(a.Proof[:], b[8:])
	if a.Status != helloOK && a.Proof != ([rdma.SecretSize]byte{}) {
		return nil, fmt.Errorf("%w: hello refusal with a proof", rdma.ErrProtocol)
	}
	return a, nil
}

// secretsEqual compares two secrets in constant time.
func secretsEqual(a, b *[rdma.SecretSize]byte) bool {
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
