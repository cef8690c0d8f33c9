// Package pmemtest is the power-loss test harness for code built on pmem.
// It runs a workload against a region on a pmem.Tracker, and at every
// fence draws crash images — the durable lines plus a random subset of
// the lines not yet durable — and hands each to a check, typically:
// recover it with Recover, run fsck, and compare the result with a model
// of what must have survived. metadata/ and dataplane/ use it for their
// own crash tests the way pmem's tests do.
package pmemtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/octofs/octofs/pmem"
)

// Crash is one simulated power failure.
type Crash struct {
	// Fence is the fence at which power failed: the image holds what was
	// durable before it and a random part of what was not.
	Fence int
	// State numbers the crash states of a run from 0.
	State int
	// Seed is the seed that drew this image from the run's tracker.
	Seed uint64
	// Image is the medium's content after the failure. It belongs to the
	// check; Recover copies it.
	Image []byte
}

// Config describes a crash exploration.
type Config struct {
	// Size of the region in bytes (a multiple of 64).
	Size int
	// Format shapes the region. The workload starts from a freshly
	// formatted region; fences during formatting are not crash points.
	Format pmem.FormatOptions
	// Seed makes the run reproducible.
	Seed uint64
	// StatesPerFence is how many crash images are drawn at each fence
	// (default 4).
	StatesPerFence int
	// MaxStates stops the run once this many states have been checked
	// (0: run the workload to its end).
	MaxStates int
	// MaxFailures stops the run after this many failed checks (default 5).
	MaxFailures int
	// Workload runs against the tracked region until it is done or ctx is
	// cancelled (which happens when MaxStates or MaxFailures is reached).
	Workload func(ctx context.Context, r *pmem.Region) error
	// Check verifies one crash state. It runs inside the fence, on the
	// workload's goroutine, while the workload is paused: it may read the
	// workload's model without locks, but must not use the region the
	// workload is using.
	Check func(c Crash) error
}

// Failure is a crash state whose check failed.
type Failure struct {
	Fence, State int
	Seed         uint64
	Err          error
}

func (f Failure) Error() string {
	return fmt.Sprintf("crash state %d (fence %d, seed %#x): %v", f.State, f.Fence, f.Seed, f.Err)
}

// Result summarises a run.
type Result struct {
	States   int // crash states checked
	Fences   int // fences the workload issued
	Failures []Failure
}

// Err joins the failures, nil when every state passed.
func (r Result) Err() error {
	errs := make([]error, len(r.Failures))
	for i, f := range r.Failures {
		errs[i] = f
	}
	return errors.Join(errs...)
}

// Run formats a tracked region, runs the workload on it and checks crash
// states at every fence. The returned error is the workload's or the
// set-up's; check failures are in Result.Failures.
func Run(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	if cfg.StatesPerFence <= 0 {
		cfg.StatesPerFence = 4
	}
	if cfg.MaxFailures <= 0 {
		cfg.MaxFailures = 5
	}
	t := pmem.NewTracker(make([]byte, cfg.Size))
	r, err := pmem.Format(t, cfg.Format, pmem.Options{})
	if err != nil {
		return res, err
	}
	defer r.Close()
	base := t.Fences()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seeds := rand.New(rand.NewPCG(cfg.Seed, 0x6f63746f))
	t.OnFence(func(fence int) {
		if ctx.Err() != nil {
			return
		}
		for range cfg.StatesPerFence {
			seed := seeds.Uint64()
			img := t.CrashImage(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
			c := Crash{Fence: fence - base, State: res.States, Seed: seed, Image: img}
			res.States++
			if err := cfg.Check(c); err != nil {
				res.Failures = append(res.Failures, Failure{Fence: c.Fence, State: c.State, Seed: seed, Err: err})
				if len(res.Failures) >= cfg.MaxFailures {
					cancel()
					return
				}
			}
			if cfg.MaxStates > 0 && res.States >= cfg.MaxStates {
				cancel()
				return
			}
		}
	})
	err = cfg.Workload(ctx, r)
	t.OnFence(nil)
	res.Fences = t.Fences() - base
	if err != nil && !errors.Is(err, context.Canceled) {
		return res, fmt.Errorf("pmemtest: workload: %w", err)
	}
	return res, nil
}

// Recover opens a copy of a crash image the way a restarting node would
// (recovery included) and runs fsck on it. The region is on volatile
// memory; close it when done.
func Recover(image []byte, opts pmem.Options) (*pmem.Region, *pmem.Report, error) {
	r, err := pmem.Attach(pmem.NewMemMediumFrom(image), opts)
	if err != nil {
		return nil, nil, fmt.Errorf("recovery: %w", err)
	}
	rep := pmem.Check(r)
	if !rep.Clean() {
		r.Close()
		return nil, rep, fmt.Errorf("fsck after recovery:\n%s", rep)
	}
	return r, rep, nil
}
