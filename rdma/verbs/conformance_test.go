//go:build verbs && cgo

package verbs_test

import (
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/rdmatest"
	"github.com/octofs/octofs/rdma/verbs"
)

// deviceConfig selects the device under test: OCTOFS_VERBS_DEVICE names
// it (default: the first with an active port) and OCTOFS_VERBS_GID_INDEX
// forces a GID index (default: automatic).
func deviceConfig(t testing.TB) rdma.DeviceConfig {
	cfg := rdma.DeviceConfig{Device: os.Getenv("OCTOFS_VERBS_DEVICE"), GIDIndex: rdma.AutoGID}
	if s := os.Getenv("OCTOFS_VERBS_GID_INDEX"); s != "" {
		i, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("OCTOFS_VERBS_GID_INDEX=%q: %v", s, err)
		}
		cfg.GIDIndex = i
	}
	return cfg
}

// openOrSkip opens the device under test, skipping the test where this
// machine has none.
func openOrSkip(t testing.TB) rdma.Device {
	t.Helper()
	dev, err := verbs.Open(deviceConfig(t))
	if errors.Is(err, rdma.ErrNoDevice) {
		t.Skipf("no usable RDMA device here (%v); `make vm-test` runs this suite on Soft-RoCE in QEMU VMs", err)
	}
	if err != nil {
		t.Fatalf("open verbs device: %v", err)
	}
	return dev
}

// TestConformance runs the provider-agnostic suite. On rxe every device
// opened by the suite is the same rxe0 (its queue pairs talk over rxe's
// loopback), which is a real kernel RC transport all the same.
func TestConformance(t *testing.T) {
	openOrSkip(t).Close()
	rdmatest.Run(t, rdmatest.Provider{
		Name: verbs.ProviderName,
		Open: func(t testing.TB) rdma.Device {
			dev := openOrSkip(t)
			t.Cleanup(func() { dev.Close() })
			return dev
		},
	})
}
