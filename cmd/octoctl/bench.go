package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure octofs layers against baselines run side by side",
		Long: `Each benchmark runs the octofs layer and a baseline on the same machine in
the same run and prints both with their ratio, so that a noisy machine
still gives comparable numbers.`,
	}
	// Subcommands: bench rdma (bench_rdma.go), bench pmem (bench_pmem.go).
	cmd.AddCommand(newBenchRDMACmd())
	cmd.AddCommand(newBenchPmemCmd())
	cmd.AddCommand(newBenchMetaCmd())
	cmd.AddCommand(newBenchDataCmd())
	cmd.AddCommand(newBenchRPCCmd())
	cmd.AddCommand(newBenchFuseCmd())
	return cmd
}

// benchTable is the one output format of every benchmark: a title, column
// names and rows, printed aligned for people or as JSON for scripts.
type benchTable struct {
	Title   string     `json:"title"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
	Notes   []string   `json:"notes,omitempty"`
}

func (t *benchTable) add(cells ...string) { t.Rows = append(t.Rows, cells) }

func (t *benchTable) note(format string, args ...any) {
	t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
}

func (t *benchTable) print(w io.Writer, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(t)
	}
	fmt.Fprintf(w, "%s\n", t.Title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(t.Columns, "\t")+"\t")
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range t.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	fmt.Fprintln(w)
	return nil
}

// ratio formats a/b for a table cell.
func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// figure formats a measured rate for a table cell: one decimal, or three
// significant digits below 1, so that a small rate never reads as zero.
func figure(v float64) string {
	if v != 0 && v < 1 {
		return fmt.Sprintf("%.3g", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// humanBytes formats a size the way perftest and people write it: 64B, 4KiB, 1MiB.
func humanBytes(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// startCPUProfile starts a CPU profile of this process into path (none if
// path is empty) and returns what stops it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
