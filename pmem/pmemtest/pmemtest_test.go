package pmemtest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/pmemtest"
)

// TestRunTellsAtomicFromNot checks the harness on the smallest invariant
// there is: two words that must always be equal. Updating them with two
// failure-atomic single-word stores is wrong, and the harness must find a
// crash state that shows it; updating them in one transaction is right,
// and every crash state must pass.
func TestRunTellsAtomicFromNot(t *testing.T) {
	tests := []struct {
		name       string
		update     func(ctx context.Context, r *pmem.Region, v uint64) error
		wantFailed bool
	}{
		{"two single-word stores", func(_ context.Context, r *pmem.Region, v uint64) error {
			if err := r.Store8(r.RootOffset(0), v); err != nil {
				return err
			}
			return r.Store8(r.RootOffset(1), v)
		}, true},
		{"one transaction", func(ctx context.Context, r *pmem.Region, v uint64) error {
			tx, err := r.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Abort()
			if err := tx.SetRoot(0, v); err != nil {
				return err
			}
			if err := tx.SetRoot(1, v); err != nil {
				return err
			}
			return tx.Commit()
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := pmemtest.Run(context.Background(), pmemtest.Config{
				Size:           pmem.MinRegionSize,
				Format:         pmem.FormatOptions{BlockSize: 512, RecordSize: 128, LogSlots: 2, LogSlotSize: 512, NumRecords: 16},
				Seed:           7,
				StatesPerFence: 8,
				Workload: func(ctx context.Context, r *pmem.Region) error {
					for v := uint64(1); v <= 20 && ctx.Err() == nil; v++ {
						if err := tc.update(ctx, r, v); err != nil {
							return err
						}
					}
					return nil
				},
				Check: func(c pmemtest.Crash) error {
					r, _, err := pmemtest.Recover(c.Image, pmem.Options{})
					if err != nil {
						return err
					}
					defer r.Close()
					if a, b := r.Root(0), r.Root(1); a != b {
						return fmt.Errorf("roots differ: %d != %d", a, b)
					}
					return nil
				},
			})
			require.NoError(t, err)
			require.Positive(t, res.States)
			if tc.wantFailed {
				require.NotEmpty(t, res.Failures, "the harness missed a torn two-word update in %d states", res.States)
				require.Contains(t, res.Err().Error(), "roots differ")
			} else {
				require.NoError(t, res.Err())
			}
		})
	}
}
