package cluster

import (
	"bytes"
	"testing"
)

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []Command{
		{Type: CmdInit, Init: &InitCommand{ClusterID: "c", Partitions: 8, First: NodeInfo{ID: "a"}}},
		{Type: CmdAddNode, Node: &NodeInfo{ID: "b", RaftAddr: "r", AdminAddr: "x"}},
		{Type: CmdSetState, SetState: &SetStateCommand{ID: "b", State: StateUp}},
		{Type: CmdDrain, Target: "a"},
		{Type: CmdRemove, Target: "b"},
		{Type: CmdUpdateNode, Node: &NodeInfo{ID: "a", Region: RegionDescriptor{RKey: 7}}},
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
		m := &Map{ClusterID: "c", Epoch: 3, Nodes: []NodeInfo{{ID: "a", State: StateUp}, {ID: "b", State: StateJoining}}, Partitions: []NodeID{"a", "a", "a"}}
		if n, err := applyCommand(m, c); err == nil {
			if verr := n.Validate(); verr != nil {
				t.Fatalf("applying %+v gave an invalid map: %v", c, verr)
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
		if m2.Epoch != m.Epoch || len(m2.Nodes) != len(m.Nodes) || len(m2.Partitions) != len(m.Partitions) {
			t.Fatal("snapshot round trip changed the map")
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"id":"n1","admin_addr":"a","raft_addr":"r","region":{"rkey":5}}`))
	f.Add([]byte(`{"id":"n1","admin_addr":"a","raft_addr":"r","applied_index":9,"epoch":2}`))
	f.Add([]byte(`{"members":["127.0.0.1:7400"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var j JoinRequest
		_ = DecodeRequest(bytes.NewReader(b), &j)
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
