package plog

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
)

// fixture is a region with two logs (A rewritten once, several segments
// each), a pool on A and a pool on B, ready to be damaged.
type fixture struct {
	r            *pmem.Region
	a, b         LogID
	headA, headB pmem.RecordID
	segsA, segsB []segInfo
	poolA        pmem.RecordID
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	r, err := pmem.Format(pmem.NewMemMedium(2<<20), pmem.FormatOptions{BlockSize: 512}, pmem.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	s, err := Open(r, Options{SegmentSize: 512})
	require.NoError(t, err)
	fx := &fixture{r: r, a: LogID{1, 1}, b: LogID{2, 1}}
	la, err := s.Log(fx.a)
	require.NoError(t, err)
	lb, err := s.Log(fx.b)
	require.NoError(t, err)
	for i := range 12 {
		require.NoError(t, la.Append(fmt.Appendf(nil, "a%d %0100d", i, i)))
		require.NoError(t, lb.Append(fmt.Appendf(nil, "b%d %0100d", i, i)))
	}
	require.NoError(t, la.Rewrite(func(emit func([]byte) error) error {
		for i := range 6 {
			if err := emit(fmt.Appendf(nil, "snap%d %0150d", i, i)); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, la.Append([]byte("after the rewrite")))
	_, err = la.AllocPool(3)
	require.NoError(t, err)
	_, err = lb.AllocPool(2)
	require.NoError(t, err)
	fx.headA, fx.headB = la.head, lb.head
	fx.segsA, fx.segsB = la.segs, lb.segs
	for e, id := range la.pools {
		_ = e
		fx.poolA = id
	}
	require.GreaterOrEqual(t, len(fx.segsA), 3)
	require.GreaterOrEqual(t, len(fx.segsB), 3)
	rep := Check(r)
	require.True(t, rep.Clean(), "%s", rep)
	return fx
}

// poke overwrites the word at a record payload offset.
func (fx *fixture) poke(t *testing.T, id pmem.RecordID, off, v uint64) {
	t.Helper()
	require.NoError(t, fx.r.Store8(payloadOff(fx.r.Geometry(), id)+off, v))
}

func (fx *fixture) peek(id pmem.RecordID, off uint64) uint64 {
	return fx.r.Load8(payloadOff(fx.r.Geometry(), id) + off)
}

// data is segment si's published bytes.
func (fx *fixture) data(si segInfo) []byte { return fx.r.Bytes()[si.dataOff : si.dataOff+si.end] }

// allocRecord makes a record of kind with the given payload (and an
// extent of blocks if blocks > 0), outside plog.
func (fx *fixture) allocRecord(t *testing.T, kind uint16, payload []byte, blocks uint64) pmem.RecordID {
	t.Helper()
	tx, err := fx.r.Begin(context.Background())
	require.NoError(t, err)
	defer tx.Abort()
	id, err := tx.AllocRecord(kind)
	require.NoError(t, err)
	if blocks > 0 {
		_, err = tx.AllocExtent(id, blocks)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Write(payloadOff(fx.r.Geometry(), id), payload))
	require.NoError(t, tx.Commit())
	return id
}

func TestCheckFindsDamage(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, fx *fixture)
		sev    pmem.Severity
		area   string
		msg    string // a substring of the finding
		// brokenLog is the log Open must refuse (ErrCorrupt); zero: none.
		brokenLog LogID
		// openFixes: the finding is a leftover Open clears (warnings).
		openFixes bool
	}{
		{"head magic", func(t *testing.T, fx *fixture) { fx.poke(t, fx.headA, 0, fx.peek(fx.headA, 0)^1) },
			pmem.SevError, "plog head", "no plog magic", LogID{1, 1}, false},
		{"head format version", func(t *testing.T, fx *fixture) { fx.poke(t, fx.headA, 0, fx.peek(fx.headA, 0)+1<<32) },
			pmem.SevError, "plog head", "format version 2", LogID{1, 1}, false},
		{"head payload type", func(t *testing.T, fx *fixture) { fx.poke(t, fx.headA, 0, word0(typeSegment)) },
			pmem.SevError, "plog head", "payload type 2", LogID{1, 1}, false},
		{"head log id service 0", func(t *testing.T, fx *fixture) { fx.poke(t, fx.headB, offID, 5) },
			pmem.SevError, "plog head", "log id word", LogID{}, false},
		{"head epoch 0", func(t *testing.T, fx *fixture) { fx.poke(t, fx.headA, offEpoch, 0) },
			pmem.SevError, "plog head", "epoch 0", LogID{1, 1}, false},
		{"head names no last segment", func(t *testing.T, fx *fixture) { fx.poke(t, fx.headA, offLast, 0) },
			pmem.SevError, "plog head", "names first segment", LogID{1, 1}, false},
		{"head state unknown", func(t *testing.T, fx *fixture) { fx.poke(t, fx.headB, offState, 7) },
			pmem.SevError, "plog head", "state 7", LogID{2, 1}, false},
		{"head first segment out of range", func(t *testing.T, fx *fixture) { fx.poke(t, fx.headB, offFirst, 1<<40) },
			pmem.SevError, "plog head", "outside", LogID{2, 1}, false},
		{"head's last is not the chain's end", func(t *testing.T, fx *fixture) { fx.poke(t, fx.headB, offLast, uint64(fx.segsB[1].id)) },
			pmem.SevError, "plog chain", "the chain ends at", LogID{2, 1}, false},
		{"segment magic", func(t *testing.T, fx *fixture) { fx.poke(t, fx.segsB[1].id, 0, 0) },
			pmem.SevError, "plog chain", "no plog magic", LogID{2, 1}, false},
		{"segment of another log", func(t *testing.T, fx *fixture) { fx.poke(t, fx.segsB[1].id, offOwner, uint64(fx.headA)) },
			pmem.SevError, "plog chain", "belongs to", LogID{2, 1}, false},
		{"segment epoch", func(t *testing.T, fx *fixture) { fx.poke(t, fx.segsA[1].id, offSegEp, 1) },
			pmem.SevError, "plog chain", "epoch 1, the head's is 2", LogID{1, 1}, false},
		{"segment sequence number", func(t *testing.T, fx *fixture) { fx.poke(t, fx.segsB[2].id, offSegSeq, 9) },
			pmem.SevError, "plog chain", "sequence number 9", LogID{2, 1}, false},
		{"segment next is not a segment", func(t *testing.T, fx *fixture) { fx.poke(t, fx.segsB[0].id, offNext, uint64(fx.headA)) },
			pmem.SevError, "plog chain", "not a plog segment", LogID{2, 1}, false},
		{"segment next loops back", func(t *testing.T, fx *fixture) { fx.poke(t, fx.segsB[1].id, offNext, uint64(fx.segsB[0].id)) },
			pmem.SevError, "plog chain", "twice (a loop)", LogID{2, 1}, false},
		{"segment end past its extent", func(t *testing.T, fx *fixture) { fx.poke(t, fx.segsB[0].id, offEnd, 1<<20) },
			pmem.SevError, "plog chain", "past its", LogID{2, 1}, false},
		{"segment end not a multiple of 8", func(t *testing.T, fx *fixture) { fx.poke(t, fx.segsB[0].id, offEnd, fx.segsB[0].end-4) },
			pmem.SevError, "plog chain", "not a multiple of 8", LogID{2, 1}, false},
		{"segment shared by two chains", func(t *testing.T, fx *fixture) {
			last := fx.segsB[len(fx.segsB)-1]
			fx.poke(t, last.id, offNext, uint64(fx.segsA[0].id))
		}, pmem.SevError, "plog chain", "in the chains of head records", LogID{2, 1}, false},
		{"record byte below the tail", func(t *testing.T, fx *fixture) { fx.data(fx.segsA[1])[20] ^= 0x40 },
			pmem.SevError, "plog records", "checksum", LogID{}, false},
		{"record length overruns the tail", func(t *testing.T, fx *fixture) {
			binary.LittleEndian.PutUint32(fx.data(fx.segsB[0])[0:], 1000)
		}, pmem.SevError, "plog records", "overruns", LogID{}, false},
		{"record padding not zero", func(t *testing.T, fx *fixture) {
			d := fx.data(fx.segsB[0])
			n := binary.LittleEndian.Uint32(d)
			d[frameHdr+n] = 1
		}, pmem.SevError, "plog records", "padding", LogID{}, false},
		{"tail beyond the written records", func(t *testing.T, fx *fixture) {
			last := fx.segsB[len(fx.segsB)-1]
			fx.poke(t, last.id, offEnd, last.end+64)
		}, pmem.SevError, "plog records", "record", LogID{}, false},
		{"two live heads for one log", func(t *testing.T, fx *fixture) {
			fx.allocRecord(t, KindHead, encodeHead(head{ID: fx.b, Epoch: 1}), 0)
		}, pmem.SevError, "plog head", "2 live heads", LogID{2, 1}, false},
		{"head owning an extent", func(t *testing.T, fx *fixture) {
			fx.allocRecord(t, KindHead, encodeHead(head{ID: LogID{3, 3}, Epoch: 1}), 1)
		}, pmem.SevError, "plog head", "owns 1 extents", LogID{3, 3}, false},
		{"segment without a head", func(t *testing.T, fx *fixture) {
			fx.allocRecord(t, KindSegment, encodeSegment(segment{ID: fx.a, Owner: fx.poolA, Epoch: 1}), 1)
		}, pmem.SevError, "plog segment", "not a plog log head", LogID{}, false},
		{"segment with two extents", func(t *testing.T, fx *fixture) {
			id := fx.allocRecord(t, KindSegment, encodeSegment(segment{ID: fx.a, Owner: fx.headA, Epoch: 1}), 1)
			tx, err := fx.r.Begin(context.Background())
			require.NoError(t, err)
			_, err = tx.AllocExtent(id, 1)
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
		}, pmem.SevError, "plog segment", "owns 2 extents", LogID{}, false},
		{"segment of the current epoch outside the chain", func(t *testing.T, fx *fixture) {
			fx.allocRecord(t, KindSegment, encodeSegment(segment{ID: fx.b, Owner: fx.headB, Epoch: 1, Seq: 1}), 1)
		}, pmem.SevError, "plog segment", "current epoch 1 but is not in its chain", LogID{}, false},
		{"pool without a head", func(t *testing.T, fx *fixture) {
			fx.allocRecord(t, KindPool, encodePool(pool{ID: fx.a, Owner: fx.segsA[0].id}), 2)
		}, pmem.SevError, "plog pool", "not a plog log head", LogID{}, false},
		{"pool naming another log's head", func(t *testing.T, fx *fixture) { fx.poke(t, fx.poolA, offOwner, uint64(fx.headB)) },
			pmem.SevError, "plog pool", "is of log 1/1 but names head record", LogID{}, false},
		{"pool payload damaged", func(t *testing.T, fx *fixture) { fx.poke(t, fx.poolA, offOwner, 0) },
			pmem.SevError, "plog pool", "no owner", LogID{}, false},
		{"segments left by an interrupted rewrite", func(t *testing.T, fx *fixture) {
			fx.allocRecord(t, KindSegment, encodeSegment(segment{ID: fx.a, Owner: fx.headA, Epoch: 3}), 1)
			fx.allocRecord(t, KindSegment, encodeSegment(segment{ID: fx.b, Owner: fx.headB, Epoch: 2, Seq: 1}), 1)
		}, pmem.SevWarning, "plog segment", "left by an interrupted rewrite", LogID{}, true},
		{"an interrupted delete", func(t *testing.T, fx *fixture) { fx.poke(t, fx.headB, offState, stateDeleting) },
			pmem.SevWarning, "plog head", "is being deleted", LogID{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t)
			base := fx.r.Stats()
			tc.damage(t, fx)
			rep := Check(fx.r)
			found := false
			for _, f := range rep.Findings {
				if f.Severity == tc.sev && f.Area == tc.area && strings.Contains(f.Message, tc.msg) {
					found = true
				}
			}
			require.True(t, found, "want a %s in %q saying %q; got:\n%s", tc.sev, tc.area, tc.msg, rep)
			require.False(t, rep.Clean())

			s, err := Open(fx.r, Options{})
			require.NoError(t, err, "Open refuses the region instead of the damaged log")
			if tc.brokenLog != (LogID{}) {
				_, err := s.Log(tc.brokenLog)
				require.ErrorIs(t, err, ErrCorrupt)
			}
			for _, id := range s.IDs() {
				if l, err := s.Log(id); err == nil {
					_ = l.Replay(func([]byte) error { return nil })
				}
			}
			after := Check(fx.r)
			if tc.openFixes {
				require.True(t, after.Clean(), "after Open:\n%s", after)
				require.True(t, pmem.Check(fx.r).Clean())
				require.LessOrEqual(t, fx.r.Stats().RecordsUsed, base.RecordsUsed)
			} else {
				require.False(t, after.Clean(), "Open hid the damage")
			}
			t.Logf("%s", strings.TrimSpace(rep.String()))
		})
	}
}
