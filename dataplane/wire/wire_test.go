package wire

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRequestRoundTrip(t *testing.T) {
	for name, r := range map[string]Request{
		"map":      {Op: OpMap, Header: Header{Epoch: 3, ClientID: 4, Incarnation: 5}, Session: 6, Ino: 1<<48 | 7, Chunk: 2},
		"allocate": {Op: OpAllocate, Session: 1, Ino: 9, Chunk: 1, Off: 4097, Len: 8190, Ahead: ChunkSize - 3*4096, MineHead: 3, MineTail: 4},
		"persist":  {Op: OpPersist, Ino: 9, Owner: 77, Ranges: []Range{{Chunk: 0, Off: 0, Len: 10}, {Chunk: 5, Off: 100, Len: 1, Stamp: 12}}},
		"trim":     {Op: OpTrim, Ino: 9, Size: 123456789},
		"collect":  {Op: OpTrimCollect, Node: "n2"},
		"done":     {Op: OpTrimDone, Node: "n2", Trims: []Trim{{Ino: 1, Size: 0}, {Ino: 2, Size: 4097}}},
		"usage":    {Op: OpUsage, Ino: 1<<48 | 9},
		"fallocate": {Op: OpFallocate, Session: 2, Ino: 9, Chunk: 3, Off: 1, Len: 2,
			Mode: FallocPunchHole | FallocKeepSize},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeRequest(r.Encode())
			require.NoError(t, err)
			require.Equal(t, r, got)
		})
	}
}

func TestRequestRefused(t *testing.T) {
	outside := Request{Op: OpAllocate, Off: ChunkSize - 1, Len: 2}
	badRange := Request{Op: OpPersist, Ranges: []Range{{Off: ChunkSize, Len: 1}}}
	tooFar := Request{Op: OpAllocate, Len: 1, Ahead: ChunkSize + 1}
	v2 := (&Request{Op: OpMap}).Encode()
	v2[0] = Version + 1
	for name, b := range map[string][]byte{
		"range past the chunk":   outside.Encode(),
		"persist past the chunk": badRange.Encode(),
		"ahead past a chunk":     tooFar.Encode(),
		"other version":          v2,
		"truncated":              (&Request{Op: OpMap}).Encode()[:20],
		"trailing":               append((&Request{Op: OpMap}).Encode(), 1),
		"empty":                  nil,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeRequest(b)
			require.ErrorIs(t, err, ErrMalformed)
		})
	}
}

func TestReplyRoundTrip(t *testing.T) {
	for name, r := range map[string]Reply{
		"map": {Status: StatusOK, Epoch: 2, Incarnation: 3, Lease: 2 * time.Second,
			Extents: []Extent{{Off: 0, Len: 4096, Addr: 1 << 40, RKey: 7}, {Off: 8192, Len: 8192, Addr: 5, RKey: 7, Stamp: 3}}},
		"wrong owner": {Status: StatusWrongOwner, Epoch: 9, Message: "partition 3 is owned by n2"},
		"statfs":      {Capacity: Capacity{Total: 1 << 30, Free: 1 << 29, Used: 100, Quarantined: 5}},
		"collect":     {Trims: []Trim{{Ino: 7, Size: 8}}, More: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeReply(r.Encode())
			require.NoError(t, err)
			require.Equal(t, r, got)
		})
	}
}

func TestReplyRefused(t *testing.T) {
	for name, r := range map[string]Reply{
		"overlapping": {Extents: []Extent{{Off: 0, Len: 8192}, {Off: 4096, Len: 4096}}},
		"empty":       {Extents: []Extent{{Off: 0, Len: 0}}},
		"past chunk":  {Extents: []Extent{{Off: ChunkSize - 4096, Len: 8192}}},
		"status":      {Status: 0x20000},
		"lease":       {Lease: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeReply(r.Encode())
			require.ErrorIs(t, err, ErrMalformed)
		})
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for name, r := range map[string]Record{
		"map":           {Kind: RecordMap, Ino: 5, Chunk: 6, Runs: []Run{{First: 0, Count: 2, Block: 100}, {First: 5, Count: 1, Block: 7}}},
		"unmap":         {Kind: RecordUnmap, Ino: 5, Chunk: 6, First: 3, Count: 1021},
		"map unwritten": {Kind: RecordMapUnwritten, Ino: 5, Chunk: 6, Runs: []Run{{First: 2, Count: 1000, Block: 100}}},
		"convert":       {Kind: RecordConvert, Ino: 5, Chunk: 6, First: 2, Count: 10},
		"defer":         {Kind: RecordDefer, Ino: 5, Node: "n3", Size: 1 << 40},
		"defer done":    {Kind: RecordDeferDone, Ino: 5, Node: "n3", Size: 0},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeRecord(r.Encode(), 1024)
			require.NoError(t, err)
			require.Equal(t, r, got)
		})
	}
}

func TestRecordRefused(t *testing.T) {
	for name, r := range map[string]Record{
		"unmap past chunk":   {Kind: RecordUnmap, First: 1000, Count: 25},
		"convert past chunk": {Kind: RecordConvert, First: 1024, Count: 1},
		"unwritten overlap":  {Kind: RecordMapUnwritten, Runs: []Run{{First: 0, Count: 5}, {First: 4, Count: 1}}},
		"run past chunk":     {Kind: RecordMap, Runs: []Run{{First: 1020, Count: 5}}},
		"runs overlap":       {Kind: RecordMap, Runs: []Run{{First: 0, Count: 5}, {First: 4, Count: 1}}},
		"empty run":          {Kind: RecordMap, Runs: []Run{{First: 0, Count: 0}}},
		"unknown kind":       {Kind: 9},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeRecord(r.Encode(), 1024)
			require.ErrorIs(t, err, ErrMalformed)
		})
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add((&Request{Op: OpPersist, Ranges: []Range{{Chunk: 1, Off: 2, Len: 3, Stamp: 4}}}).Encode())
	f.Add((&Request{Op: OpAllocate, Len: 5, Ahead: 4096}).Encode())
	f.Add((&Request{Op: OpTrimDone, Node: "n1", Trims: []Trim{{Ino: 1, Size: 2}}}).Encode())
	f.Add((&Request{Op: OpUsage, Ino: 3}).Encode())
	f.Add((&Request{Op: OpMap, Session: 1}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			require.True(t, errors.Is(err, ErrMalformed), "%v", err)
			return
		}
		require.True(t, bytes.Equal(b, r.Encode()), "a request that decodes re-encodes to its bytes")
	})
}

func FuzzDecodeReply(f *testing.F) {
	f.Add((&Reply{Extents: []Extent{{Off: 0, Len: 4096, Addr: 1, RKey: 2}, {Off: 4096, Len: 4096, Addr: 2, RKey: 2, Stamp: 9}}, Lease: time.Second}).Encode())
	f.Add((&Reply{Status: StatusWrongOwner, Message: "m"}).Encode())
	f.Add((&Reply{Trims: []Trim{{Ino: 1, Size: 2}}, More: true}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeReply(b)
		if err != nil {
			require.True(t, errors.Is(err, ErrMalformed), "%v", err)
			return
		}
		require.True(t, bytes.Equal(b, r.Encode()), "a reply that decodes re-encodes to its bytes")
	})
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add((&Record{Kind: RecordMap, Runs: []Run{{First: 1, Count: 2, Block: 3}}}).Encode())
	f.Add((&Record{Kind: RecordUnmap, First: 1, Count: 2}).Encode())
	f.Add((&Record{Kind: RecordMapUnwritten, Runs: []Run{{First: 1, Count: 2, Block: 3}}}).Encode())
	f.Add((&Record{Kind: RecordConvert, First: 1, Count: 2}).Encode())
	f.Add((&Record{Kind: RecordDefer, Ino: 1, Node: "n1", Size: 2}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b, 1024)
		if err != nil {
			require.True(t, errors.Is(err, ErrMalformed), "%v", err)
			return
		}
		require.True(t, bytes.Equal(b, r.Encode()), "a record that decodes re-encodes to its bytes")
	})
}
