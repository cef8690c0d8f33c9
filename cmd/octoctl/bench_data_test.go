package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBenchDataPlan(t *testing.T) {
	p, err := (&benchDataOptions{size: "64M", rounds: 3, reads: 2000}).plan()
	if err != nil || p.size != 64<<20 || p.rounds != 3 || p.reads != 2000 {
		t.Fatalf("plan = %+v, %v", p, err)
	}
	for name, o := range map[string]*benchDataOptions{
		"not whole chunks": {size: "6M", rounds: 1, reads: 100},
		"no size":          {size: "x", rounds: 1, reads: 100},
		"no rounds":        {size: "4M", rounds: 0, reads: 100},
		"few reads":        {size: "4M", rounds: 1, reads: 1},
	} {
		if _, err := o.plan(); err == nil {
			t.Fatalf("%s: plan accepted", name)
		}
	}
}

// TestBenchDataPairInterleaves: the two sides alternate chunk by chunk,
// each chunk is four 1 MiB operations at its offsets, and each side's time
// is its own.
func TestBenchDataPairInterleaves(t *testing.T) {
	var order []string
	a := func(off uint64) error { order = append(order, "a"); return nil }
	b := func(off uint64) error {
		order = append(order, "b")
		time.Sleep(time.Millisecond) // b is slower; the rates must say so
		return nil
	}
	ra, rb, err := benchDataPair(3*benchDataChunk, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "aaaabbbbbbbbaaaaaaaabbbb" {
		t.Fatalf("order %s", got)
	}
	if !(ra > rb) || rb <= 0 {
		t.Fatalf("rates a %.1f, b %.1f MiB/s: b sleeps 1ms per MiB", ra, rb)
	}
	boom := errors.New("boom")
	if _, _, err := benchDataPair(benchDataChunk, a, func(uint64) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
}

func TestBenchDataBandwidthTable(t *testing.T) {
	rounds := []benchDataRound{
		{newFile: 90, rawFresh: 100, over: 80, rawOver: 100, read: 100, rawRead: 100, hotWrite: 200, hotRead: 200},
		{newFile: 50, rawFresh: 100, over: 95, rawOver: 100, read: 90, rawRead: 100, hotWrite: 200, hotRead: 200},
		{newFile: 99, rawFresh: 100, over: 100, rawOver: 100, read: 95, rawRead: 100, hotWrite: 200, hotRead: 200},
	}
	tb := benchDataBandwidthTable(rounds, &benchDataPlan{size: 8 << 20, rounds: 3}, "here")
	if len(tb.Rows) != 6 {
		t.Fatalf("%d rows", len(tb.Rows))
	}
	// New file against fresh blocks: ratios 0.9, 0.5, 0.99: median 0.90.
	if r := tb.Rows[0]; r[0] != "write, new file" || r[4] != "0.90x" || r[5] != "0.50-0.99x" {
		t.Fatalf("row %v", r)
	}
}
