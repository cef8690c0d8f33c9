package plog_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/plog"
)

// BenchmarkAppend appends 100-byte records on a volatile region (no
// flush cost: the CPU path) and on a plain-file region (every fence an
// msync). Variants, measured side by side in one run:
//
//	1 appender          one goroutine, one log
//	16 serialized       16 goroutines, one log, a mutex around Append:
//	                    what the log would cost without group commit
//	16 appenders        16 goroutines, one log, group commit
//	16 logs             16 goroutines, one log each (partitions in parallel)
//
// ns/op is wall time per append; appends/commit is how many appends
// shared one flush-fence-publish round.
func BenchmarkAppend(b *testing.B) {
	for _, backing := range []string{"volatile", "file"} {
		for _, v := range []struct {
			name       string
			goroutines int
			logs       int
			serialize  bool
		}{
			{"1 appender", 1, 1, false},
			{"16 serialized", 16, 1, true},
			{"16 appenders", 16, 1, false},
			{"16 logs", 16, 16, false},
		} {
			b.Run(fmt.Sprintf("%s/%s", backing, v.name), func(b *testing.B) {
				r := benchRegion(b, backing)
				s, err := plog.Open(r, plog.Options{})
				if err != nil {
					b.Fatal(err)
				}
				logs := make([]*plog.Log, v.logs)
				for i := range logs {
					if logs[i], err = s.Log(plog.LogID{Service: 1, Partition: uint32(i)}); err != nil {
						b.Fatal(err)
					}
				}
				rec := make([]byte, 100)
				var mu sync.Mutex
				var next atomic.Int64
				var trimming atomic.Bool
				b.SetBytes(int64(len(rec)))
				b.ResetTimer()
				var wg sync.WaitGroup
				for g := range v.goroutines {
					l := logs[g%len(logs)]
					wg.Go(func() {
						for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
							if v.serialize {
								mu.Lock()
							}
							err := l.Append(rec)
							if v.serialize {
								mu.Unlock()
							}
							if err != nil {
								b.Error(err)
								return
							}
							// Keep the region from filling: empty a log that grew past
							// 16 MiB, as a service's rewrite would.
							if i%1024 == 0 && l.Stats().Bytes > 16<<20 && trimming.CompareAndSwap(false, true) {
								if err := l.Rewrite(func(func([]byte) error) error { return nil }); err != nil {
									b.Error(err)
								}
								trimming.Store(false)
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				var appends, commits uint64
				for _, l := range logs {
					st := l.Stats()
					appends += st.Appends
					commits += st.Commits
				}
				b.ReportMetric(float64(appends)/float64(max(commits, 1)), "appends/commit")
			})
		}
	}
}

func benchRegion(b *testing.B, backing string) *pmem.Region {
	b.Helper()
	const size = 256 << 20
	var r *pmem.Region
	var err error
	switch backing {
	case "volatile":
		r, err = pmem.Format(pmem.NewMemMedium(size), pmem.FormatOptions{}, pmem.Options{})
	case "file":
		r, err = pmem.Create(filepath.Join(b.TempDir(), "region"), size, pmem.FormatOptions{}, pmem.Options{})
		if err == nil && r.Info().Mode != pmem.ModeFile {
			b.Skipf("the temporary directory is on %v, not a plain file system: msync is not measured", r.Info().Mode)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}
