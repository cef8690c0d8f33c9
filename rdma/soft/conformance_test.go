package soft

import (
	"testing"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/rdmatest"
)

// softProvider opens soft devices on loopback for rdmatest.
var softProvider = rdmatest.Provider{
	Name: "soft",
	Open: func(t testing.TB) rdma.Device {
		t.Helper()
		dev, err := Open(rdma.DeviceConfig{Addr: "127.0.0.1:0"})
		if err != nil {
			t.Fatalf("soft.Open: %v", err)
		}
		t.Cleanup(func() { dev.Close() })
		return dev
	},
}

// TestConformance runs the provider-agnostic verbs conformance suite
// against soft devices on loopback.
func TestConformance(t *testing.T) {
	rdmatest.Run(t, softProvider)
}
