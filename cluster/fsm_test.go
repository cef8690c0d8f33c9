package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files under testdata")

// golden compares got with testdata/name, or rewrites it with -rewrite.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *rewrite {
		require.NoError(t, os.WriteFile(p, got, 0o644))
		return
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "run go test -run %s -rewrite to create it", t.Name())
	require.Equal(t, string(want), string(got), "golden %s differs; if the change is intended, rerun with -rewrite", p)
}

func mustApply(t *testing.T, m *Map, c Command) *Map {
	t.Helper()
	b, err := EncodeCommand(c)
	require.NoError(t, err)
	dc, err := DecodeCommand(b)
	require.NoError(t, err)
	n, err := applyCommand(m, dc)
	require.NoError(t, err)
	require.NoError(t, n.Validate())
	return n
}

// info is a node entry with addresses of its own (a host per node id).
func info(id NodeID) NodeInfo {
	host := "host-" + string(id)
	return NodeInfo{ID: id, AdminAddr: host + ":7400", RaftAddr: host + ":7401", RDMAAddr: host + ":7402",
		Region: RegionDescriptor{UUID: "uuid-" + string(id), Base: 0x7f0000000000, Length: 1 << 30, RKey: 0x1234}}
}

// testMap returns an initialized map with P partitions and the given nodes
// up, built through the command path.
func testMap(t *testing.T, p int, nodes ...NodeID) *Map {
	t.Helper()
	m := mustApply(t, &Map{}, Command{Type: CmdInit, Init: &InitCommand{ClusterID: "octofs-test", Partitions: p, First: info(nodes[0])}})
	for _, id := range nodes[1:] {
		ni := info(id)
		m = mustApply(t, m, Command{Type: CmdAddNode, Node: &ni})
		m = mustApply(t, m, Command{Type: CmdSetState, SetState: &SetStateCommand{ID: id, State: StateUp}})
	}
	return m
}

func TestApplyCommand(t *testing.T) {
	base := testMap(t, 12, "a", "b", "c")
	drained := mustApply(t, base, Command{Type: CmdDrain, Target: "c"})
	removed := mustApply(t, base, Command{Type: CmdRemove, Target: "c"})
	down := mustApply(t, base, Command{Type: CmdSetState, SetState: &SetStateCommand{ID: "b", State: StateDown}})
	joining := mustApply(t, base, Command{Type: CmdAddNode, Node: &NodeInfo{ID: "d", AdminAddr: "x", RaftAddr: "y"}})
	d := info("d")
	tests := map[string]struct {
		m       *Map
		c       Command
		wantErr error
		check   func(t *testing.T, before, after *Map)
	}{
		"init twice":      {m: base, c: Command{Type: CmdInit, Init: &InitCommand{ClusterID: "x", Partitions: 4, First: d}}, wantErr: ErrAlreadyInitialized},
		"add before init": {m: &Map{}, c: Command{Type: CmdAddNode, Node: &d}, wantErr: ErrNotInitialized},
		"add existing":    {m: base, c: Command{Type: CmdAddNode, Node: ptr(info("a"))}, wantErr: ErrNodeExists},
		"add removed":     {m: removed, c: Command{Type: CmdAddNode, Node: ptr(info("c"))}, wantErr: ErrNodeRemoved},
		"add joins without partitions": {m: base, c: Command{Type: CmdAddNode, Node: &d}, check: func(t *testing.T, before, after *Map) {
			n, _ := after.Node("d")
			require.Equal(t, StateJoining, n.State)
			require.Equal(t, before.Partitions, after.Partitions)
		}},
		"joining to up takes a share": {m: joining, c: Command{Type: CmdSetState, SetState: &SetStateCommand{ID: "d", State: StateUp}}, check: func(t *testing.T, before, after *Map) {
			require.Equal(t, 3, after.PartitionCounts()["d"])
		}},
		"up to down keeps partitions": {m: base, c: Command{Type: CmdSetState, SetState: &SetStateCommand{ID: "b", State: StateDown}}, check: func(t *testing.T, before, after *Map) {
			require.Equal(t, before.Partitions, after.Partitions)
		}},
		"down to up":             {m: down, c: Command{Type: CmdSetState, SetState: &SetStateCommand{ID: "b", State: StateUp}}},
		"up to up refused":       {m: base, c: Command{Type: CmdSetState, SetState: &SetStateCommand{ID: "b", State: StateUp}}, wantErr: ErrBadTransition},
		"draining to up refused": {m: drained, c: Command{Type: CmdSetState, SetState: &SetStateCommand{ID: "c", State: StateUp}}, wantErr: ErrBadTransition},
		"set state unknown node": {m: base, c: Command{Type: CmdSetState, SetState: &SetStateCommand{ID: "zz", State: StateDown}}, wantErr: ErrUnknownNode},
		"drain unknown":          {m: base, c: Command{Type: CmdDrain, Target: "zz"}, wantErr: ErrUnknownNode},
		"drain twice":            {m: drained, c: Command{Type: CmdDrain, Target: "c"}, wantErr: ErrBadTransition},
		"remove removed":         {m: removed, c: Command{Type: CmdRemove, Target: "c"}, wantErr: ErrBadTransition},
		"remove a drained node":  {m: drained, c: Command{Type: CmdRemove, Target: "c"}},
		"drain the last owner":   {m: mustApply(t, drained, Command{Type: CmdDrain, Target: "b"}), c: Command{Type: CmdDrain, Target: "a"}, wantErr: ErrNoEligibleNodes},
		"update keeps state": {m: down, c: Command{Type: CmdUpdateNode, Node: &NodeInfo{ID: "b", AdminAddr: "new", RaftAddr: "r", Region: RegionDescriptor{RKey: 99}}}, check: func(t *testing.T, before, after *Map) {
			n, _ := after.Node("b")
			require.Equal(t, StateDown, n.State)
			require.Equal(t, uint32(99), n.Region.RKey)
		}},
		"update unknown": {m: base, c: Command{Type: CmdUpdateNode, Node: &d}, wantErr: ErrUnknownNode},
		"drain moves everything off": {m: base, c: Command{Type: CmdDrain, Target: "a"}, check: func(t *testing.T, before, after *Map) {
			c := after.PartitionCounts()
			require.Zero(t, c["a"])
			require.Equal(t, 6, c["b"])
			require.Equal(t, 6, c["c"])
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := tc.m.Clone()
			after, err := applyCommand(tc.m, tc.c)
			require.Equal(t, before, tc.m, "applyCommand must not modify its input")
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.Nil(t, after)
				return
			}
			require.NoError(t, err)
			require.NoError(t, after.Validate())
			if tc.m.Initialized() {
				require.Equal(t, tc.m.Epoch+1, after.Epoch, "every change increments the epoch")
			}
			if tc.check != nil {
				tc.check(t, tc.m, after)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestDecodeCommandRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want error
	}{
		"not json":         {`{`, ErrMalformed},
		"no version":       {`{"type":"drain","target":"a"}`, ErrMalformed},
		"future version":   {`{"v":3,"type":"drain","target":"a"}`, ErrUnsupportedVersion},
		"version zero":     {`{"v":0,"type":"drain","target":"a"}`, ErrUnsupportedVersion},
		"pin in version 1": {`{"v":1,"type":"pin","pin":{"partition":1,"node":"a"}}`, ErrMalformed},
		"force in v1":      {`{"v":1,"type":"remove","target":"a","force":true}`, ErrMalformed},
		"force on drain":   {`{"v":2,"type":"drain","target":"a","force":true}`, ErrMalformed},
		"pin no node":      {`{"v":2,"type":"pin","pin":{"partition":1,"node":""}}`, ErrMalformed},
		"pin too far":      {`{"v":2,"type":"pin","pin":{"partition":65536,"node":"a"}}`, ErrMalformed},
		"unknown type":     {`{"v":1,"type":"explode"}`, ErrUnknownCommand},
		"unknown field":    {`{"v":1,"type":"drain","target":"a","x":1}`, ErrMalformed},
		"wrong payload":    {`{"v":1,"type":"drain","node":{"id":"a"}}`, ErrMalformed},
		"two payloads":     {`{"v":1,"type":"drain","target":"a","node":{"id":"a"}}`, ErrMalformed},
		"trailing":         {`{"v":1,"type":"drain","target":"a"} {}`, ErrMalformed},
		"set to draining":  {`{"v":1,"type":"set_state","set_state":{"id":"a","state":"draining"}}`, ErrMalformed},
		"init no nodes":    {`{"v":1,"type":"init","init":{"cluster_id":"x","partitions":4,"first":{"id":""}}}`, ErrMalformed},
		"init too many":    {`{"v":1,"type":"init","init":{"cluster_id":"x","partitions":65537,"first":{"id":"a"}}}`, ErrMalformed},
		"add without id":   {`{"v":1,"type":"add_node","node":{"id":""}}`, ErrMalformed},
		"version a string": {`{"v":"1","type":"drain","target":"a"}`, ErrMalformed},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeCommand([]byte(tc.in))
			require.ErrorIs(t, err, tc.want)
		})
	}
}

// TestFSMRefusesUnknownCommands: a command this build does not understand
// is answered with an error, logged, and leaves the map as it was.
func TestFSMRefusesUnknownCommands(t *testing.T) {
	var logs bytes.Buffer
	f := newFSM(slog.New(slog.NewTextHandler(&logs, nil)))
	m := testMap(t, 8, "a", "b")
	f.set(m)
	for i, tc := range []struct {
		data string
		want error
	}{
		{`{"v":1,"type":"explode"}`, ErrUnknownCommand},
		{`{"v":9,"type":"drain","target":"a"}`, ErrUnsupportedVersion},
		{`garbage`, ErrMalformed},
		{`{"v":1,"type":"drain","target":"nobody"}`, ErrUnknownNode},
	} {
		resp := f.Apply(&raft.Log{Index: uint64(10 + i), Type: raft.LogCommand, Data: []byte(tc.data)})
		err, ok := resp.(error)
		require.True(t, ok, "response %T", resp)
		require.ErrorIs(t, err, tc.want)
		cur, _ := f.current()
		require.Same(t, m, cur, "map must be unchanged")
	}
	require.Equal(t, uint64(4), f.applyErrors.Load())
	require.Contains(t, logs.String(), "map command refused")
	// Non-command entries are ignored.
	require.Nil(t, f.Apply(&raft.Log{Type: raft.LogBarrier}))
}

func TestSnapshotRoundTrip(t *testing.T) {
	m := testMap(t, 16, "n1", "n2", "n3")
	m = mustApply(t, m, Command{Type: CmdAddNode, Node: ptr(info("n4"))})
	m = mustApply(t, m, Command{Type: CmdSetState, SetState: &SetStateCommand{ID: "n2", State: StateDown}})
	m = mustApply(t, m, Command{Type: CmdDrain, Target: "n3"})
	m.ClusterID = "octofs-golden"
	// Version 1 had no pinned partitions; version 2 writes them.
	v1 := m.Clone()
	for i := range v1.Nodes {
		v1.Nodes[i].AdminAddr, v1.Nodes[i].RaftAddr, v1.Nodes[i].RDMAAddr = "127.0.0.1:7400", "127.0.0.1:7401", "127.0.0.1:7402"
	}
	m = mustApply(t, m, Command{Type: CmdPin, Pin: &PinCommand{Partition: 3, Node: m.Partitions[3]}})
	m = mustApply(t, m, Command{Type: CmdPin, Pin: &PinCommand{Partition: 1, Node: m.Partitions[1]}})

	// Through the FSM's own Snapshot/Persist/Restore path.
	f := newFSM(slog.New(slog.DiscardHandler))
	f.publish(m, 42)
	snap, err := f.Snapshot()
	require.NoError(t, err)
	sink := &memSink{}
	require.NoError(t, snap.Persist(sink))
	require.True(t, sink.closed)
	golden(t, "snapshot-v2.golden", sink.Bytes())

	g := newFSM(slog.New(slog.DiscardHandler))
	require.NoError(t, g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	got, _ := g.current()
	require.Equal(t, m, got)
	require.Equal(t, uint64(42), g.index.Load())
	require.Equal(t, []uint32{1, 3}, got.Pinned)

	// The golden file written by an earlier build must still restore,
	// with nothing pinned.
	old, err := os.ReadFile(filepath.Join("testdata", "snapshot-v1.golden"))
	require.NoError(t, err)
	fromDisk, err := DecodeSnapshot(old)
	require.NoError(t, err)
	require.Equal(t, v1, fromDisk)
	require.Empty(t, fromDisk.Pinned)
	h := newFSM(slog.New(slog.DiscardHandler))
	require.NoError(t, h.Restore(io.NopCloser(bytes.NewReader(old))))
	require.Zero(t, h.index.Load(), "a version 1 snapshot does not know its index")
}

func TestDecodeSnapshotRejects(t *testing.T) {
	good, err := EncodeSnapshot(testMap(t, 4, "a"))
	require.NoError(t, err)
	var generic map[string]any
	require.NoError(t, json.Unmarshal(good, &generic))
	mutate := func(f func(map[string]any)) string {
		c := map[string]any{}
		b, _ := json.Marshal(generic)
		_ = json.Unmarshal(b, &c)
		f(c)
		out, _ := json.Marshal(c)
		return string(out)
	}
	for name, tc := range map[string]struct {
		in   string
		want error
	}{
		"garbage":       {"xx", ErrMalformed},
		"wrong format":  {mutate(func(m map[string]any) { m["format"] = "other" }), ErrMalformed},
		"newer version": {mutate(func(m map[string]any) { m["version"] = 3 }), ErrUnsupportedVersion},
		"pinned in v1": {mutate(func(m map[string]any) {
			m["version"] = 1
			m["map"].(map[string]any)["pinned"] = []any{0}
		}), ErrMalformed},
		"pinned unsorted": {mutate(func(m map[string]any) { m["map"].(map[string]any)["pinned"] = []any{2, 1} }), ErrMalformed},
		"pinned too far":  {mutate(func(m map[string]any) { m["map"].(map[string]any)["pinned"] = []any{4} }), ErrMalformed},
		"stale":           {mutate(func(m map[string]any) { m["map"].(map[string]any)["stale"] = true }), ErrMalformed},
		"no map":          {mutate(func(m map[string]any) { delete(m, "map") }), ErrMalformed},
		"bad owner": {mutate(func(m map[string]any) {
			m["map"].(map[string]any)["partitions"].([]any)[0] = "ghost"
		}), ErrMalformed},
		"redacted": {mutate(func(m map[string]any) { m["map"].(map[string]any)["redacted"] = true }), ErrMalformed},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeSnapshot([]byte(tc.in))
			require.ErrorIs(t, err, tc.want)
		})
	}
	f := newFSM(slog.New(slog.DiscardHandler))
	require.Error(t, f.Restore(io.NopCloser(bytes.NewReader([]byte("nope")))))
}

type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return errors.New("cancelled") }

func TestRedact(t *testing.T) {
	m := testMap(t, 4, "a", "b")
	r := m.Redact()
	require.True(t, r.Redacted)
	for _, n := range r.Nodes {
		require.Zero(t, n.Region.RKey)
	}
	for _, n := range m.Nodes {
		require.NotZero(t, n.Region.RKey, "Redact must not touch the original")
	}
}

// ownedBy returns the first k partitions node id owns in m.
func ownedBy(m *Map, id NodeID, k int) []uint32 {
	var out []uint32
	for p, o := range m.Partitions {
		if o == id && len(out) < k {
			out = append(out, uint32(p))
		}
	}
	return out
}

func pinAll(t *testing.T, m *Map, id NodeID, ps []uint32) *Map {
	for _, p := range ps {
		m = mustApply(t, m, Command{Type: CmdPin, Pin: &PinCommand{Partition: p, Node: id}})
	}
	return m
}

func TestPinCommands(t *testing.T) {
	base := testMap(t, 12, "a", "b", "c")
	bParts := ownedBy(base, "b", 4)
	require.Len(t, bParts, 4)
	cPart := ownedBy(base, "c", 1)[0]
	pinned := pinAll(t, base, "b", bParts[:3])
	joining := mustApply(t, pinned, Command{Type: CmdAddNode, Node: ptr(info("d"))})
	pin := func(p uint32, id NodeID) Command {
		return Command{Type: CmdPin, Pin: &PinCommand{Partition: p, Node: id}}
	}
	tests := map[string]struct {
		m       *Map
		c       Command
		wantErr error
		check   func(t *testing.T, before, after *Map)
	}{
		"pin by the owner": {m: base, c: pin(bParts[0], "b"), check: func(t *testing.T, before, after *Map) {
			require.Equal(t, []uint32{bParts[0]}, after.Pinned)
			require.Equal(t, before.Partitions, after.Partitions)
			require.Equal(t, before.Epoch+1, after.Epoch)
		}},
		"pin by another node":   {m: base, c: pin(cPart, "b"), wantErr: ErrNotOwner},
		"pin beyond the table":  {m: base, c: pin(12, "b"), wantErr: ErrBadRequest},
		"pin an unknown node's": {m: base, c: pin(cPart, "zz"), wantErr: ErrNotOwner},
		"drain with data":       {m: pinned, c: Command{Type: CmdDrain, Target: "b"}, wantErr: ErrHoldsData},
		"remove with data":      {m: pinned, c: Command{Type: CmdRemove, Target: "b"}, wantErr: ErrHoldsData},
		"drain another node":    {m: pinned, c: Command{Type: CmdDrain, Target: "c"}, check: keepsPinned},
		"forced remove loses the data": {m: pinned, c: Command{Type: CmdRemove, Target: "b", Force: true}, check: func(t *testing.T, before, after *Map) {
			require.Empty(t, after.Pinned, "b's pins go with it")
			require.Zero(t, after.PartitionCounts()["b"])
			checkBalanced(t, after.Partitions, []NodeID{"a", "c"})
		}},
		"forced remove of a node without data": {m: pinned, c: Command{Type: CmdRemove, Target: "c", Force: true}, check: keepsPinned},
		"a new node gets unpinned partitions only": {m: joining, c: Command{Type: CmdSetState, SetState: &SetStateCommand{ID: "d", State: StateUp}}, check: func(t *testing.T, before, after *Map) {
			keepsPinned(t, before, after)
			// 9 unpinned partitions over 4 nodes: 2 or 3 each; d gets 2.
			checkBalancedUnpinned(t, after, []NodeID{"a", "b", "c", "d"})
			require.Equal(t, 2, after.PartitionCounts()["d"])
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := tc.m.Clone()
			after, err := applyCommand(tc.m, tc.c)
			require.Equal(t, before, tc.m, "applyCommand must not modify its input")
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.Nil(t, after)
				t.Log(err)
				return
			}
			require.NoError(t, err)
			require.NoError(t, after.Validate())
			require.Equal(t, tc.m.Epoch+1, after.Epoch)
			tc.check(t, tc.m, after)
		})
	}
	// Pinning a pinned partition changes nothing, not even the epoch.
	again, err := applyCommand(pinned, pin(bParts[0], "b"))
	require.NoError(t, err)
	require.Same(t, pinned, again)
	// The refusal names the owner.
	_, err = applyCommand(base, pin(cPart, "b"))
	var no *NotOwnerError
	require.ErrorAs(t, err, &no)
	require.Equal(t, NotOwnerError{Partition: cPart, Owner: "c", Requester: "b"}, *no)
	_, err = applyCommand(pinned, Command{Type: CmdDrain, Target: "b"})
	require.EqualError(t, err, "cluster: node b holds file-system data in 3 partitions; moving partitions with their data is not built yet; "+
		"keep b in the cluster (restart it if it is down), or, if it is gone for good, remove it with `octoctl remove b --force-lose-data`, "+
		"which loses the files stored in those 3 partitions")
}

// checkBalancedUnpinned checks that each eligible node owns floor(U/N) or
// ceil(U/N) of the U unpinned partitions.
func checkBalancedUnpinned(t *testing.T, m *Map, eligible []NodeID) {
	t.Helper()
	var unpinned []NodeID
	for p, id := range m.Partitions {
		if !m.IsPinned(uint32(p)) {
			unpinned = append(unpinned, id)
		}
	}
	checkBalanced(t, unpinned, eligible)
}

// keepsPinned checks that every partition pinned before is pinned after,
// to the same owner.
func keepsPinned(t *testing.T, before, after *Map) {
	t.Helper()
	require.Equal(t, before.Pinned, after.Pinned)
	for _, p := range before.Pinned {
		require.Equal(t, before.Partitions[p], after.Partitions[p], "pinned partition %d moved", p)
	}
}
