package cluster

import (
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer carries raft's TCP transport over a listener the caller may
// have opened (tests pass 127.0.0.1:0 listeners so ports never collide).
type streamLayer struct {
	net.Listener
	advertise net.Addr
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

func (s *streamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.Listener.Addr()
}
