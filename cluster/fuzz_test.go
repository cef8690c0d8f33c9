package cluster

import (
	"bytes"
	"crypto/x509"
	"testing"
	"time"
)

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []Command{
		{Type: CmdInit, Init: &InitCommand{ClusterID: "c", Partitions: 8, First: NodeInfo{ID: "a"}}},
		{Type: CmdAddNode, Node: &NodeInfo{ID: "b", RaftAddr: "r", AdminAddr: "x"}},
		{Type: CmdSetState, SetState: &SetStateCommand{ID: "b", State: StateUp}},
		{Type: CmdDrain, Target: "a"},
		{Type: CmdRemove, Target: "b"},
		{Type: CmdUpdateNode, Node: &NodeInfo{ID: "a", Region: RegionDescriptor{RKey: 7}}},
		{Type: CmdPin, Pin: &PinCommand{Partition: 1, Node: "a"}},
		{Type: CmdRemove, Target: "a", Force: true},
	} {
		b, err := EncodeCommand(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"v":2,"type":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			return
		}
		// A decoded command re-encodes, and applying it to a valid map
		// either fails or yields a valid map.
		if _, err := EncodeCommand(c); err != nil {
			t.Fatalf("decoded command does not re-encode: %v", err)
		}
		m := &Map{ClusterID: "c", Epoch: 3, Nodes: []NodeInfo{{ID: "a", State: StateUp, RaftAddr: "r:1"}, {ID: "b", State: StateJoining}},
			Partitions: []NodeID{"a", "a", "a"}, Pinned: []uint32{2}}
		if n, err := applyCommand(m, c); err == nil {
			if verr := n.Validate(); verr != nil {
				t.Fatalf("applying %+v gave an invalid map: %v", c, verr)
			}
			if n != m && n.Epoch != m.Epoch+1 {
				t.Fatalf("applying %+v moved the epoch from %d to %d", c, m.Epoch, n.Epoch)
			}
			if n.IsPinned(2) && n.Partitions[2] != "a" {
				t.Fatalf("applying %+v moved a pinned partition", c)
			}
		}
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	m := &Map{ClusterID: "c", Epoch: 3, Nodes: []NodeInfo{{ID: "a", State: StateUp}}, Partitions: []NodeID{"a", "a"}}
	b, err := EncodeSnapshot(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"format":"octofs-cluster-map","version":1,"map":{"epoch":0}}`))
	b2, err := encodeSnapshot(&Map{ClusterID: "c", Epoch: 4, Nodes: []NodeInfo{{ID: "a", State: StateUp}}, Partitions: []NodeID{"a", "a"}, Pinned: []uint32{1}}, 9)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b2)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeSnapshot(b)
		if err != nil {
			return
		}
		out, err := EncodeSnapshot(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := DecodeSnapshot(out)
		if err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		if m2.Epoch != m.Epoch || len(m2.Nodes) != len(m.Nodes) || len(m2.Partitions) != len(m.Partitions) || len(m2.Pinned) != len(m.Pinned) {
			t.Fatal("snapshot round trip changed the map")
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"id":"n1","admin_addr":"a","raft_addr":"r","region":{"rkey":5}}`))
	f.Add([]byte(`{"id":"n1","admin_addr":"a","raft_addr":"r","applied_index":9,"epoch":2}`))
	f.Add([]byte(`{"members":["127.0.0.1:7400"]}`))
	f.Add([]byte(`{"node":"n2"}`))
	f.Add([]byte(`{"id":"n1","admin_addr":"a","raft_addr":"r","csr":"-----BEGIN CERTIFICATE REQUEST-----\nAA==\n-----END CERTIFICATE REQUEST-----\n"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var j JoinRequest
		_ = DecodeRequest(bytes.NewReader(b), &j)
		var p PinRequest
		_ = DecodeRequest(bytes.NewReader(b), &p)
		var h HeartbeatRequest
		_ = DecodeRequest(bytes.NewReader(b), &h)
		var s SelfJoinRequest
		_ = DecodeRequest(bytes.NewReader(b), &s)
	})
}

func FuzzDecodeResponse(f *testing.F) {
	m, _ := EncodeSnapshot(&Map{ClusterID: "c", Epoch: 2, Nodes: []NodeInfo{{ID: "a", State: StateUp}}, Partitions: []NodeID{"a"}})
	f.Add(200, m)
	f.Add(200, []byte(`{"cluster_id":"c","epoch":1,"nodes":[{"id":"a","state":"up"}],"partitions":["a","a"]}`))
	f.Add(401, []byte(`{"error":"no","code":"unauthorized"}`))
	f.Add(421, []byte(`{"error":"x","code":"not_leader","leader_id":"b","leader_addr":"127.0.0.1:1"}`))
	f.Add(500, []byte(`oops`))
	f.Add(409, []byte(`{"error":"x","code":"not_owner","partition":3,"owner":"n3","requester":"n2"}`))
	f.Add(503, []byte(`{"error":"x","code":"leader_unreachable"}`))
	f.Fuzz(func(t *testing.T, status int, b []byte) {
		var m Map
		if err := DecodeResponse(status, b, &m); err == nil && status/100 == 2 {
			if verr := m.Validate(); verr != nil {
				t.Fatalf("accepted an invalid map: %v", verr)
			}
		}
		var s Status
		_ = DecodeResponse(status, b, &s)
		var n NodesResponse
		_ = DecodeResponse(status, b, &n)
	})
}

// FuzzSignCSR feeds the certificate request of a join (wire data from a
// token holder) to the CA: it must never panic, and a certificate it
// issues must name the joining node and chain to the CA.
func FuzzSignCSR(f *testing.F) {
	p, _, err := bootstrapPKI("n1", time.Now())
	if err != nil {
		f.Fatal(err)
	}
	_, csr, err := newNodeKey("n2")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(csr)
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAA==\n-----END CERTIFICATE REQUEST-----\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		certPEM, err := p.signCSR(b, "n2", time.Now())
		if err != nil {
			return
		}
		c, err := decodeCert(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		if c.Subject.CommonName != "n2" {
			t.Fatalf("issued a certificate for %q", c.Subject.CommonName)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: p.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatal(err)
		}
	})
}
