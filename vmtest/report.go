package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// report collects the outcome of every check and prints the closing
// summary: failures first, then the comparison tables, then one
// "vm-test: N passed, N failed, N skipped" line.
type report struct {
	mu                      sync.Mutex
	passed, failed, skipped int
	failures                []string
	tables                  []string
}

func (r *report) pass(name, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passed++
	fmt.Printf("PASS %s: %s\n", name, detail)
}

func (r *report) fail(name, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed++
	r.failures = append(r.failures, name+": "+firstLines(detail, 12))
	fmt.Printf("FAIL %s: %s\n", name, detail)
}

func (r *report) skip(name, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.skipped++
	fmt.Printf("SKIP %s: %s\n", name, detail)
}

// add counts checks made inside a step (the conformance suite's tests).
func (r *report) add(passed, failed, skipped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passed += passed
	r.failed += failed
	r.skipped += skipped
}

func (r *report) table(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tables = append(r.tables, s)
	fmt.Print(s)
}

func (r *report) summary(elapsed time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Println()
	fmt.Println("==================== vm-test summary ====================")
	for _, t := range r.tables {
		fmt.Print(t)
	}
	if len(r.failures) > 0 {
		fmt.Println("failures:")
		for _, f := range r.failures {
			fmt.Println("  " + strings.ReplaceAll(f, "\n", "\n    "))
		}
	}
	fmt.Printf("vm-test took %.0fs\n", elapsed.Seconds())
	fmt.Printf("vm-test: %d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped)
	os.Stdout.Sync()
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("... (%d more lines)", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}
