package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
	"github.com/spf13/cobra"
)

// probeResult is one node's data-path check.
type probeResult struct {
	Node       cluster.NodeID `json:"node"`
	RDMAAddr   string         `json:"rdma_addr"`
	Region     string         `json:"region,omitempty"`
	Length     uint64         `json:"length,omitempty"`
	OK         bool           `json:"ok"`
	Error      string         `json:"error,omitempty"`
	ConnectUS  float64        `json:"connect_us,omitempty"`
	ReadP50US  float64        `json:"read_p50_us,omitempty"`
	ReadP99US  float64        `json:"read_p99_us,omitempty"`
	ReadsTaken int            `json:"reads,omitempty"`
}

func newProbeCmd() *cobra.Command {
	var (
		f        *clusterFlags
		nodes    []string
		prov     string
		device   string
		softAddr string
		reads    int
	)
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Check each node's data path: connect over RDMA and read its region one-sidedly",
		Long: `For each node with a region in the cluster map, connect to its RDMA address
with the cluster token, read the region's superblock with an RDMA READ and
check that it is the region the map names, then time --reads 8-byte READs.
The node's CPU takes no part in the reads: the RDMA provider serves them.
Exits non-zero if any node fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok, err := f.tokenValue()
			if err != nil {
				return err
			}
			c, err := f.client(true)
			if err != nil {
				return err
			}
			ctx, cancel := f.context(cmd)
			defer cancel()
			m, err := c.Map(ctx)
			if err != nil {
				return err
			}
			var targets []cluster.NodeInfo
			for _, n := range m.Nodes {
				if n.RDMAAddr != "" && (len(nodes) == 0 || slices.Contains(nodes, string(n.ID))) {
					targets = append(targets, n)
				}
			}
			if len(targets) == 0 {
				return errors.New("no node to probe: none in the map has a region (start nodes with --pmem) or --node matched none")
			}
			addr := softAddr
			if addr == "" && prov == "soft" {
				host, err := localHostFor(targets[0].RDMAAddr)
				if err != nil {
					return err
				}
				addr = net.JoinHostPort(host, "0")
			}
			dev, err := provider.Open(prov, rdma.DeviceConfig{Device: device, GIDIndex: rdma.AutoGID, Addr: addr})
			if err != nil {
				return err
			}
			defer dev.Close()
			results := make([]probeResult, 0, len(targets))
			failed := 0
			for _, n := range targets {
				r := probeNode(ctx, dev, n, tok, reads)
				if !r.OK {
					failed++
				}
				results = append(results, r)
			}
			if f.json {
				if err := printJSON(cmd.OutOrStdout(), results); err != nil {
					return err
				}
			} else {
				t := newTable(cmd.OutOrStdout(), "NODE", "RDMA", "REGION", "LENGTH", "CONNECT", "READ P50", "READ P99", "RESULT")
				for _, r := range results {
					result := "ok"
					if !r.OK {
						result = r.Error
					}
					t.row(string(r.Node), r.RDMAAddr, dash(r.Region), strconv.FormatUint(r.Length, 10),
						micros(r.ConnectUS), micros(r.ReadP50US), micros(r.ReadP99US), result)
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
	f = addClusterFlags(cmd)
	fl := cmd.Flags()
	fl.StringSliceVar(&nodes, "node", nil, "probe only these node ids (default: every node with a region)")
	fl.StringVar(&prov, "provider", provider.Default, "RDMA provider: "+strings.Join(provider.Names(), ", "))
	fl.StringVar(&device, "device", "", "verbs: device name such as rxe0 (default: the first active one)")
	fl.StringVar(&softAddr, "soft-addr", "", "soft: host:port of this side's software NIC (default: the address that reaches the nodes)")
	fl.IntVar(&reads, "reads", 100, "8-byte READs to time per node")
	return cmd
}

func micros(us float64) string {
	if us == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fµs", us)
}

// probeNode connects to one node's export, checks its superblock and times
// small READs.
func probeNode(ctx context.Context, dev rdma.Device, n0 cluster.NodeInfo, token string, reads int) probeResult {
	r := probeResult{Node: n0.ID, RDMAAddr: n0.RDMAAddr, Region: n0.Region.UUID, Length: n0.Region.Length}
	fail := func(err error) probeResult {
		r.Error = err.Error()
		return r
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return fail(err)
	}
	defer pd.Close()
	cq, err := dev.CreateCQ(16)
	if err != nil {
		return fail(err)
	}
	defer cq.Close()
	buf, err := rdma.AllocBuffer(4096)
	if err != nil {
		return fail(err)
	}
	defer rdma.FreeBuffer(buf)
	mr, err := pd.RegMR(buf, rdma.AccessLocalWrite)
	if err != nil {
		return fail(err)
	}
	defer mr.Dereg()

	start := time.Now()
	conn, err := dataplane.DialExport(ctx, pd, cq, n0.RDMAAddr, token, "octoctl probe")
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	r.ConnectUS = float64(time.Since(start).Microseconds())

	var wc [1]rdma.WorkCompletion
	read := func(n uint32) error {
		if err := conn.QP.PostSend([]rdma.SendWR{{Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{{Addr: mr.Addr(), Length: n, LKey: mr.LKey()}}, RemoteAddr: n0.Region.Base, RKey: n0.Region.RKey}}); err != nil {
			return err
		}
		if _, err := cq.Wait(ctx, wc[:]); err != nil {
			return err
		}
		return wc[0].Err()
	}
	if err := read(4096); err != nil {
		return fail(fmt.Errorf("read the superblock: %w", err))
	}
	sb, err := pmem.DecodeSuperblock(buf)
	if err != nil {
		return fail(fmt.Errorf("the region's first bytes: %w", err))
	}
	if sb.RegionUUID.String() != n0.Region.UUID {
		return fail(fmt.Errorf("region %s found where the map says %s", sb.RegionUUID, n0.Region.UUID))
	}
	samples := make([]time.Duration, 0, reads)
	for range reads {
		t := time.Now()
		if err := read(8); err != nil {
			return fail(err)
		}
		samples = append(samples, time.Since(t))
	}
	if len(samples) > 0 {
		s := summarize(samples)
		r.ReadP50US, r.ReadP99US, r.ReadsTaken = s.p50, s.p99, s.n
	}
	r.OK = true
	return r
}
