package rdma

import (
	"encoding/binary"
	"fmt"
	"io"
)

// The connection manager's messages, one codec for all of them. A message
// is a 12-byte header followed by its body:
//
//	header: magic "OCM\x02" (4) | kind (1) | reserved (3) | body length (4, big endian)
//	body:   QPN (4) | PSN (4) | LID (2) | GID (16) | MTU (4) | secret (16) |
//	        addr length (2) | addr | private length (2) | private data
//
// Version 2 added the endpoint's secret.
const (
	cmMagic      = "OCM\x02"
	cmHeaderSize = 12
	cmFixedBody  = 4 + 4 + 2 + 16 + 4 + SecretSize + 2 + 2
	// MaxPrivateData bounds ConnParams.PrivateData and reject reasons.
	MaxPrivateData = 1024
	cmMaxAddr      = 256
	cmMaxBody      = cmFixedBody + cmMaxAddr + MaxPrivateData
)

type cmKind uint8

const (
	cmRequest cmKind = iota + 1
	cmAccept
	cmReject
	cmReady
)

type cmMsg struct {
	Kind        cmKind
	Endpoint    Endpoint
	PrivateData []byte
}

func (m *cmMsg) marshal() ([]byte, error) {
	if len(m.Endpoint.Addr) > cmMaxAddr {
		return nil, fmt.Errorf("%w: endpoint address of %d bytes, at most %d", ErrInvalid, len(m.Endpoint.Addr), cmMaxAddr)
	}
	if len(m.PrivateData) > MaxPrivateData {
		return nil, fmt.Errorf("%w: %d bytes of private data, at most %d", ErrInvalid, len(m.PrivateData), MaxPrivateData)
	}
	bodyLen := cmFixedBody + len(m.Endpoint.Addr) + len(m.PrivateData)
	b := make([]byte, cmHeaderSize, cmHeaderSize+bodyLen)
	copy(b, cmMagic)
	b[4] = byte(m.Kind)
	binary.BigEndian.PutUint32(b[8:], uint32(bodyLen))
	e := &m.Endpoint
	b = binary.BigEndian.AppendUint32(b, e.QPN)
	b = binary.BigEndian.AppendUint32(b, e.PSN)
	b = binary.BigEndian.AppendUint16(b, e.LID)
	b = append(b, e.GID[:]...)
	b = binary.BigEndian.AppendUint32(b, e.MTU)
	b = append(b, e.Secret[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(e.Addr)))
	b = append(b, e.Addr...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.PrivateData)))
	b = append(b, m.PrivateData...)
	return b, nil
}

// parseCMHeader checks a message header and returns its kind and body length.
func parseCMHeader(h []byte) (cmKind, int, error) {
	if len(h) < cmHeaderSize || string(h[:4]) != cmMagic {
		return 0, 0, fmt.Errorf("%w: not a connection manager message", ErrProtocol)
	}
	kind := cmKind(h[4])
	if kind < cmRequest || kind > cmReady {
		return 0, 0, fmt.Errorf("%w: unknown connection manager message kind %d", ErrProtocol, kind)
	}
	n := binary.BigEndian.Uint32(h[8:])
	if n < cmFixedBody || n > cmMaxBody {
		return 0, 0, fmt.Errorf("%w: connection manager message body of %d bytes", ErrProtocol, n)
	}
	return kind, int(n), nil
}

// parseCMBody decodes a message body of the given kind.
func parseCMBody(kind cmKind, b []byte) (*cmMsg, error) {
	m := &cmMsg{Kind: kind}
	if len(b) < cmFixedBody {
		return nil, fmt.Errorf("%w: short connection manager message", ErrProtocol)
	}
	e := &m.Endpoint
	e.QPN = binary.BigEndian.Uint32(b[0:])
	e.PSN = binary.BigEndian.Uint32(b[4:])
	e.LID = binary.BigEndian.Uint16(b[8:])
	copy(e.GID[:], b[10:26])
	e.MTU = binary.BigEndian.Uint32(b[26:])
	copy(e.Secret[:], b[30:30+SecretSize])
	rest := b[30+SecretSize:]
	addrLen := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if addrLen > cmMaxAddr || addrLen+2 > len(rest) {
		return nil, fmt.Errorf("%w: bad address length %d in connection manager message", ErrProtocol, addrLen)
	}
	e.Addr = string(rest[:addrLen])
	rest = rest[addrLen:]
	privLen := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if privLen > MaxPrivateData || privLen != len(rest) {
		return nil, fmt.Errorf("%w: bad private data length %d in connection manager message", ErrProtocol, privLen)
	}
	if privLen > 0 {
		m.PrivateData = append([]byte(nil), rest...)
	}
	return m, nil
}

func writeCMMsg(w io.Writer, m *cmMsg) error {
	b, err := m.marshal()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func readCMMsg(r io.Reader) (*cmMsg, error) {
	var h [cmHeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	kind, n, err := parseCMHeader(h[:])
	if err != nil {
		return nil, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return parseCMBody(kind, body)
}
