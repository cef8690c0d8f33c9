package pmem_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
)

// A file of 1 GiB in 4 KiB blocks is 262,144 blocks; the file system
// allocates them as records owning large extents (data pools of 16,384
// blocks, 64 MiB), so deleting the file frees one record and its 16
// extents.
const (
	fileBlocks   = 262144
	poolBlocks   = 16384
	filePools    = fileBlocks / poolBlocks
	fileKind     = 7
	fileRootSlot = 0
)

// createFile allocates the file record with its pools and writes a marker
// into the first block of each, in one transaction.
func createFile(ctx context.Context, r *pmem.Region, serial uint64) (pmem.RecordID, error) {
	tx, err := r.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Abort()
	id, err := tx.AllocRecord(fileKind)
	if err != nil {
		return 0, err
	}
	for i := range filePools {
		e, err := tx.AllocExtent(id, poolBlocks)
		if err != nil {
			return 0, err
		}
		var marker [8]byte
		binary.LittleEndian.PutUint64(marker[:], serial<<8|uint64(i))
		if err := tx.WriteFresh(r.ExtentOffset(e), marker[:]); err != nil {
			return 0, err
		}
	}
	rec, _ := r.Record(id)
	if err := tx.Write8(rec.PayloadOff, serial); err != nil {
		return 0, err
	}
	if err := tx.SetRoot(fileRootSlot, uint64(id)); err != nil {
		return 0, err
	}
	return id, tx.Commit()
}

// deleteFile frees the file record and every block it owns in one
// transaction.
func deleteFile(ctx context.Context, r *pmem.Region, id pmem.RecordID) error {
	tx, err := r.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	if err := tx.FreeRecord(id); err != nil {
		return err
	}
	if err := tx.SetRoot(fileRootSlot, 0); err != nil {
		return err
	}
	return tx.Commit()
}

// fileState reads what a recovered region holds of the file: "present"
// (the record, all its pools with their markers, every block allocated)
// or "gone" (no record, no block allocated); anything else is an error.
func fileState(r *pmem.Region) (string, error) {
	id := pmem.RecordID(r.Root(fileRootSlot))
	st := r.Stats()
	if id == 0 {
		if st.RecordsUsed != 0 || st.BlocksUsed != 0 {
			return "", fmt.Errorf("the file is unrooted but %d records and %d blocks are in use", st.RecordsUsed, st.BlocksUsed)
		}
		return "gone", nil
	}
	rec, err := r.Record(id)
	if err != nil {
		return "", err
	}
	if rec.Kind != fileKind || len(rec.Extents) != filePools {
		return "", fmt.Errorf("file record %d is %+v", id, rec)
	}
	serial := r.Load8(rec.PayloadOff)
	for i, e := range rec.Extents {
		if e.Count != poolBlocks {
			return "", fmt.Errorf("pool %d is %v", i, e)
		}
		b, err := r.ExtentBytes(e)
		if err != nil {
			return "", err
		}
		if got, want := binary.LittleEndian.Uint64(b), serial<<8|uint64(i); got != want {
			return "", fmt.Errorf("pool %d marker %#x, want %#x", i, got, want)
		}
	}
	if st.RecordsUsed != 1 || st.BlocksUsed != fileBlocks {
		return "", fmt.Errorf("the file is present but %d records and %d blocks are in use", st.RecordsUsed, st.BlocksUsed)
	}
	return "present", nil
}

// imageMedium is a crash image recovered where it lies: volatile, no copy.
type imageMedium struct{ b []byte }

func (m imageMedium) Bytes() []byte         { return m.b }
func (m imageMedium) Flush(int, int) error  { return nil }
func (m imageMedium) Fence() error          { return nil }
func (m imageMedium) Info() pmem.MediumInfo { return pmem.MediumInfo{Mode: pmem.ModeVolatile} }
func (m imageMedium) Close() error          { return nil }

// TestDeleteLargeFileCrash deletes a record owning 262,144 blocks (a
// 1 GiB file's worth of 4 KiB blocks; 512-byte blocks here so that the
// simulated medium stays at 128 MiB) and crashes at every flush, fence
// and msync of the deletion, several images each: every recovery holds
// the file whole or not at all.
func TestDeleteLargeFileCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: simulates a 140 MiB medium")
	}
	seed := testSeed(t)
	for _, instr := range []pmem.Instruction{pmem.InstrCLWB, pmem.InstrMsync} {
		t.Run(instr.String(), func(t *testing.T) {
			tr := pmem.NewTracker(make([]byte, fileBlocks*512+(8<<20)))
			r, err := pmem.Format(tr.Medium(instr), pmem.FormatOptions{BlockSize: 512, RecordSize: 512, ExtentSlots: filePools, LogSlots: 4, LogSlotSize: 8192, NumRecords: 16}, pmem.Options{})
			require.NoError(t, err)
			id, err := createFile(t.Context(), r, 1)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(seed, 5))
			outcomes := map[string]int{}
			var failures []error
			tr.OnCrashPoint(func(p pmem.CrashPoint) {
				if p.Kind == "store" {
					return // the medium is large: flushes, fences and msyncs only
				}
				for range 3 {
					// Recovered in place (no copies of a 140 MiB image).
					got, err := pmem.Attach(imageMedium{p.Image(rng)}, pmem.Options{})
					if err == nil {
						if rep := pmem.Check(got); !rep.Clean() {
							err = fmt.Errorf("fsck after recovery:\n%s", rep)
						}
					}
					if err == nil {
						var state string
						state, err = fileState(got)
						outcomes[state]++
						got.Close()
					}
					if err != nil {
						failures = append(failures, fmt.Errorf("%s %d: %w", p.Kind, p.N, err))
					}
				}
			})
			require.NoError(t, deleteFile(t.Context(), r, id))
			tr.OnCrashPoint(nil)
			require.Empty(t, failures, "seed %d", seed)
			require.Positive(t, outcomes["present"])
			require.Positive(t, outcomes["gone"])
			state, err := fileState(r)
			require.NoError(t, err)
			require.Equal(t, "gone", state)
			t.Logf("deleting a record owning %d blocks in %d extents: %d crash points, recoveries %v", fileBlocks, filePools, tr.Points(), outcomes)
		})
	}
}
