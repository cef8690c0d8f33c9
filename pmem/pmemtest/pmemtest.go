// Package pmemtest is the power-loss test harness for code built on pmem.
// It runs a workload — one goroutine or several — against a region on a
// pmem.Tracker, which sits under the production flush code (the same
// cache-line flushes, fences and msyncs a node issues), and at crash
// points (every flush, fence and msync, and one store in four) draws crash images: the durable lines plus a
// random subset of the lines not yet durable. Each goes to a check,
// typically: recover it with Recover or RecoverWith (recovery itself runs
// on a tracker and can be crashed too), run fsck, and compare the result
// with a model of what must have survived. metadata/ and dataplane/ use it
// for their own crash tests the way pmem's tests do.
//
// Runs are reproducible from their seed, which every failure reports.
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
	// Fence is the crash point (flush, fence or msync, counted from 1
	// after formatting) at which power failed: the image holds what was
	// durable before it and a random part of what was not.
	Fence int
	// Kind is "store", "flush", "fence" or "msync".
	Kind string
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
	// formatted region; fences during formatting are not crash points
	// here (TestFormatCrash in pmem covers them).
	Format pmem.FormatOptions
	// Instruction is how the region persists on the tracker: a CPU
	// cache-flush instruction (default CLWB) or pmem.InstrMsync, each
	// through the production flush path.
	Instruction pmem.Instruction
	// Seed makes the run reproducible.
	Seed uint64
	// StatesPerFence is how many crash images are drawn at each flush,
	// fence and msync (default 4); one store in four gets one.
	StatesPerFence int
	// MaxStates stops the run once this many states have been checked
	// (0: run the workload to its end).
	MaxStates int
	// MaxFailures stops the run after this many failed checks (default 5).
	MaxFailures int
	// Concurrent says the workload runs several goroutines that flush at
	// once: the tracker then models each goroutine's fences separately
	// (pmem.Tracker.TrackGoroutines), at a cost.
	Concurrent bool
	// Workload runs against the tracked region until it is done or ctx is
	// cancelled (which happens when MaxStates or MaxFailures is reached).
	// It may run several goroutines (set Concurrent); it returns when they
	// are done.
	Workload func(ctx context.Context, r *pmem.Region) error
	// Check verifies one crash state. It runs inside the crash point, on
	// the goroutine that reached it, while every goroutine of the
	// workload is stopped at its next store, flush or fence: it may read
	// the workload's model (under the model's own locks), but must not use
	// the region the workload is using.
	Check func(c Crash) error
}

// Failure is a crash state whose check failed.
type Failure struct {
	Fence, State int
	Kind         string
	Seed         uint64
	Err          error
}

func (f Failure) Error() string {
	return fmt.Sprintf("crash state %d (%s %d, seed %#x): %v", f.State, f.Kind, f.Fence, f.Seed, f.Err)
}

// Result summarises a run.
type Result struct {
	States   int // crash states checked
	Fences   int // crash points the workload reached
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

func instruction(i pmem.Instruction) pmem.Instruction {
	if i == pmem.InstrNone {
		return pmem.InstrCLWB
	}
	return i
}

// Run formats a tracked region, runs the workload on it and checks crash
// states at every crash point. The returned error is the workload's or
// the set-up's; check failures are in Result.Failures.
func Run(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	if cfg.StatesPerFence <= 0 {
		cfg.StatesPerFence = 4
	}
	if cfg.MaxFailures <= 0 {
		cfg.MaxFailures = 5
	}
	t := pmem.NewTracker(make([]byte, cfg.Size))
	t.TrackGoroutines(cfg.Concurrent)
	r, err := pmem.Format(t.Medium(instruction(cfg.Instruction)), cfg.Format, pmem.Options{})
	if err != nil {
		return res, err
	}
	defer r.Close()
	base := t.Points()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seeds := rand.New(rand.NewPCG(cfg.Seed, 0x6f63746f))
	t.OnCrashPoint(func(p pmem.CrashPoint) {
		if ctx.Err() != nil {
			return
		}
		states := cfg.StatesPerFence
		if p.Kind == "store" {
			// Stores are many; a crash after one in four of them, one
			// image each, covers what flushes and fences do not see
			// (a flush that never comes).
			if seeds.IntN(4) != 0 {
				return
			}
			states = 1
		}
		for range states {
			seed := seeds.Uint64()
			img := p.Image(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
			c := Crash{Fence: p.N - base, Kind: p.Kind, State: res.States, Seed: seed, Image: img}
			res.States++
			if err := cfg.Check(c); err != nil {
				res.Failures = append(res.Failures, Failure{Fence: c.Fence, Kind: c.Kind, State: c.State, Seed: seed, Err: err})
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
	t.OnCrashPoint(nil)
	res.Fences = t.Points() - base
	if err != nil && !errors.Is(err, context.Canceled) {
		return res, fmt.Errorf("pmemtest: workload: %w", err)
	}
	return res, nil
}

// RecoverConfig says how to recover a crash image.
type RecoverConfig struct {
	Options pmem.Options
	// Instruction is how recovery persists (default CLWB).
	Instruction pmem.Instruction
	// CrashStates, if positive, crashes recovery itself: at every crash
	// point recovery reaches, and once more when it has returned, that
	// many images of what recovery had made durable are drawn (from Seed)
	// and handed to CheckCrash, which typically recovers each again and
	// compares it with the model: recovery must survive its own crash.
	CrashStates int
	Seed        uint64
	CheckCrash  func(image []byte) error
}

// Recover opens a copy of a crash image the way a restarting node would
// (recovery included, on a tracker, through the production flush code)
// and runs fsck on it. Close the region when done.
func Recover(image []byte, opts pmem.Options) (*pmem.Region, *pmem.Report, error) {
	return RecoverWith(image, RecoverConfig{Options: opts})
}

// RecoverWith is Recover with crashes during recovery (see RecoverConfig).
func RecoverWith(image []byte, cfg RecoverConfig) (*pmem.Region, *pmem.Report, error) {
	t := pmem.NewTracker(image)
	var crashErr error
	var seeds *rand.Rand
	draw := func(img func(*rand.Rand) []byte, where string) {
		for range cfg.CrashStates {
			if crashErr != nil {
				return
			}
			seed := seeds.Uint64()
			if err := cfg.CheckCrash(img(rand.New(rand.NewPCG(seed, 1)))); err != nil {
				crashErr = fmt.Errorf("crash %s (seed %#x): %w", where, seed, err)
			}
		}
	}
	if cfg.CrashStates > 0 {
		seeds = rand.New(rand.NewPCG(cfg.Seed, 0x7265636f))
		t.OnCrashPoint(func(p pmem.CrashPoint) {
			draw(p.Image, fmt.Sprintf("during recovery at its %s %d", p.Kind, p.N))
		})
	}
	r, err := pmem.Attach(t.Medium(instruction(cfg.Instruction)), cfg.Options)
	t.OnCrashPoint(nil)
	if err != nil {
		return nil, nil, fmt.Errorf("recovery: %w", err)
	}
	if cfg.CrashStates > 0 {
		// Recovery is done only if nothing it did can be undone: a crash
		// now must leave nothing to recover.
		for range cfg.CrashStates {
			seed := seeds.Uint64()
			img := t.CrashImage(rand.New(rand.NewPCG(seed, 2)))
			again, err := pmem.Attach(pmem.NewMemMediumFrom(img), pmem.Options{})
			if err != nil {
				crashErr = fmt.Errorf("crash right after recovery (seed %#x): %w", seed, err)
				break
			}
			if rec := again.Recovery(); rec.Replayed != 0 || rec.SuperblockRepaired != "" {
				crashErr = fmt.Errorf("crash right after recovery (seed %#x): recovery had left work that was not durable: %+v", seed, rec)
				break
			}
		}
		draw(t.CrashImage, "right after recovery")
	}
	if crashErr != nil {
		r.Close()
		return nil, nil, crashErr
	}
	rep := pmem.Check(r)
	if !rep.Clean() {
		r.Close()
		return nil, rep, fmt.Errorf("fsck after recovery:\n%s", rep)
	}
	return r, rep, nil
}
