package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
)

// probeResult is one node's check.
type probeResult struct {
	Node        cluster.NodeID `json:"node"`
	RDMAAddr    string         `json:"rdma_addr"`
	Region      string         `json:"region,omitempty"`
	Length      uint64         `json:"length,omitempty"`
	OK          bool           `json:"ok"`
	Error       string         `json:"error,omitempty"`
	Incarnation uint64         `json:"incarnation,omitempty"`
	ConnectUS   float64        `json:"data_connect_us,omitempty"`
	NullP50US   float64        `json:"null_p50_us,omitempty"`
	NullP99US   float64        `json:"null_p99_us,omitempty"`
	Calls       int            `json:"calls,omitempty"`
}

func newProbeCmd() *cobra.Command {
	var (
		f     *fsFlags
		nodes []string
		calls int
	)
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Check each node's RPC and data endpoints as a client would",
		Long: `For each node with storage in the cluster map, open a data connection to
its RDMA address with the cluster token (the node answers with its
incarnation and a data session; nothing of the region is reachable until
the chunk service hands out extents), then time --calls null RPCs to it
over self-identified RPC, the path every metadata operation takes.
Exits non-zero if any node fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer s.close()
			ctx, cancel := f.cluster.context(cmd)
			defer cancel()
			m := s.c.Map()
			var targets []cluster.NodeInfo
			for _, n := range m.Nodes {
				if n.RDMAAddr != "" && n.State != cluster.StateRemoved && (len(nodes) == 0 || slices.Contains(nodes, string(n.ID))) {
					targets = append(targets, n)
				}
			}
			if len(targets) == 0 {
				return errors.New("no node to probe: none in the map has storage (start nodes with --pmem) or --node matched none")
			}
			tok, _ := f.cluster.tokenValue()
			results := make([]probeResult, 0, len(targets))
			failed := 0
			for _, n := range targets {
				r := probeNode(ctx, s.c, n, tok, calls)
				if !r.OK {
					failed++
				}
				results = append(results, r)
			}
			if f.cluster.json {
				if err := printJSON(cmd.OutOrStdout(), results); err != nil {
					return err
				}
			} else {
				t := newTable(cmd.OutOrStdout(), "NODE", "RDMA", "REGION", "LENGTH", "DATA CONNECT", "NULL P50", "NULL P99", "RESULT")
				for _, r := range results {
					result := "ok"
					if !r.OK {
						result = r.Error
					}
					t.row(string(r.Node), r.RDMAAddr, dash(r.Region), strconv.FormatUint(r.Length, 10),
						micros(r.ConnectUS), micros(r.NullP50US), micros(r.NullP99US), result)
				}
				if err := t.flush(); err != nil {
					return err
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d nodes failed the probe", failed, len(results))
			}
			return nil
		},
	}
	f = addFSFlags(cmd)
	fl := cmd.Flags()
	fl.StringSliceVar(&nodes, "node", nil, "probe only these node ids (default: every node with storage)")
	fl.IntVar(&calls, "calls", 100, "null RPCs to time per node")
	return cmd
}

func micros(us float64) string {
	if us == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fµs", us)
}

// probeNode opens a data connection to one node and times null RPCs to it.
func probeNode(ctx context.Context, c *client.Client, n cluster.NodeInfo, token string, calls int) probeResult {
	r := probeResult{Node: n.ID, RDMAAddr: n.RDMAAddr, Region: n.Region.UUID, Length: n.Region.Length}
	fail := func(what string, err error) probeResult {
		r.Error = what + ": " + err.Error()
		return r
	}
	start := time.Now()
	g, err := c.ProbeData(ctx, n, dataplane.Hello{Token: token, ClientID: c.ID(), Client: "octoctl probe"})
	if err != nil {
		return fail("data connection", err)
	}
	r.ConnectUS = float64(time.Since(start).Microseconds())
	r.Incarnation = g.Incarnation
	samples := make([]time.Duration, 0, calls)
	for range calls {
		t := time.Now()
		if err := c.Ping(ctx, n.ID); err != nil {
			return fail("null RPC", err)
		}
		samples = append(samples, time.Since(t))
	}
	if len(samples) > 0 {
		s := summarize(samples)
		r.NullP50US, r.NullP99US, r.Calls = s.p50, s.p99, s.n
	}
	r.OK = true
	return r
}
