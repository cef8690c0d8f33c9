//go:build verbs && cgo

package verbs_test

import (
	"testing"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/rdmatest"
)

// TestHotPathAllocs: posting a request and polling its completion
// allocate nothing, so the data path puts no load on the Go collector.
func TestHotPathAllocs(t *testing.T) {
	dev := openOrSkip(t)
	t.Cleanup(func() { dev.Close() })
	n := rdmatest.NewNode(t, dev, 64<<10, rdma.AccessAll)
	pr := rdmatest.ConnectNodes(t, n, n, rdmatest.Options{})
	wrs := []rdma.SendWR{{ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{n.SGE(0, 64)}, RemoteAddr: n.Addr(4096), RKey: n.MR.RKey()}}
	var wc [4]rdma.WorkCompletion
	roundTrip := func() {
		if err := pr.A.QP.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		for {
			k, err := pr.A.SendCQ.Poll(wc[:])
			if err != nil {
				t.Fatal(err)
			}
			if k > 0 {
				if wc[0].Status != rdma.WCSuccess {
					t.Fatalf("completion %s", rdmatest.FormatWC(wc[0]))
				}
				return
			}
		}
	}
	roundTrip() // warm up
	if a := testing.AllocsPerRun(50, roundTrip); a != 0 {
		t.Fatalf("PostSend + Poll allocate %.1f times per request, want 0", a)
	}
}
