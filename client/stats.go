package client

import (
	"context"
	"syscall"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/dataplane/dpclient"
	dpwire "github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/metadata/wire"
)

// Stats counts a client's work since New: the RPCs it sent (namespace and
// chunk-service ops, retries included) and the data engine's counters
// (RDMA operations, bytes, retries). Costs per operation are differences
// of two snapshots divided by the operations between them, as `octoctl
// bench meta` reports round trips per operation.
type Stats struct {
	// RPCs counts requests by op name ("lookup", "create", "alloc", ...).
	RPCs map[string]uint64 `json:"rpcs"`
	// Data is the data engine's counters (zero for Memory's clients).
	Data dpclient.Stats `json:"data"`
}

// TotalRPCs is the sum of RPCs over all ops.
func (s Stats) TotalRPCs() uint64 {
	var n uint64
	for _, v := range s.RPCs {
		n += v
	}
	return n
}

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() Stats {
	s := Stats{RPCs: map[string]uint64{}}
	switch {
	case c.remote != nil:
		for op, n := range c.remote.calls.snapshot() {
			s.RPCs[opName(op)] += n
		}
		s.Data = c.remote.data.Stats()
	default:
		if m, ok := c.ns.(memSession); ok {
			m.mu.Lock()
			for op, n := range m.calls {
				s.RPCs[op] = uint64(n)
			}
			m.mu.Unlock()
		}
	}
	return s
}

// opName names an RPC op of either service: namespace ops are 0x01xx.
func opName(op uint16) string {
	if op>>8 == uint16(wire.OpNull)>>8 {
		return wire.Op(op).String()
	}
	return dpwire.Op(op).String()
}

// Ping sends one null request to node's namespace service and waits for
// the answer: a round trip through the RPC layer and the service's
// dispatch, nothing else. Benchmarks compare operations with it.
func (c *Client) Ping(ctx context.Context, node cluster.NodeID) error {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err == nil {
		if c.remote == nil {
			return syscall.ENOTSUP
		}
		err = c.remote.md.Null(octx, node)
	}
	return c.fail(ctx, "null", err)
}

// ProbeData opens a data connection to node the way the data engine does,
// with h (Purpose, ClientID and Incarnation are filled in), and closes it
// again: what the node granted tells its incarnation. octoctl probe uses it
// to check a node's data endpoint apart from the engine's own connections.
func (c *Client) ProbeData(ctx context.Context, node cluster.NodeInfo, h dataplane.Hello) (dataplane.Grant, error) {
	if c.remote == nil {
		return dataplane.Grant{}, syscall.ENOTSUP
	}
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return dataplane.Grant{}, err
	}
	cq, err := c.remote.dev.CreateCQ(4)
	if err != nil {
		return dataplane.Grant{}, err
	}
	defer cq.Close()
	h.ClientID, h.Incarnation = c.id, c.incarnation
	conn, g, err := dataplane.DialData(octx, c.remote.pd, cq, node.RDMAAddr, 1, h)
	if err != nil {
		return dataplane.Grant{}, err
	}
	conn.Close()
	return g, nil
}
