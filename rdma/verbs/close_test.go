//go:build verbs && cgo

package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/octofs/octofs/rdma"
)

// TestCloseWakesWait: closing a CQ wakes a Wait parked on its completion
// channel, and later calls report rdma.ErrClosed instead of blocking or
// touching freed memory; closing the device does the same for what it
// still owns.
func TestCloseWakesWait(t *testing.T) {
	dev := openOrSkip(t)
	defer dev.Close()
	cq, err := dev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		var wc [1]rdma.WorkCompletion
		_, err := cq.Wait(context.Background(), wc[:])
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // the scenario: Wait is parked first
	if err := cq.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("parked Wait returned %v, want rdma.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake a parked Wait")
	}
	var wc [1]rdma.WorkCompletion
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cq.Wait(ctx, wc[:]); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("Wait after Close = %v, want rdma.ErrClosed", err)
	}
	if _, err := cq.Poll(wc[:]); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("Poll after Close = %v, want rdma.ErrClosed", err)
	}

	// The device's Close destroys what is left, and the objects say so.
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq2, err := dev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq2, RecvCQ: cq2})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := rdma.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer rdma.FreeBuffer(buf)
	mr, err := pd.RegMR(buf, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatalf("device Close with live objects: %v", err)
	}
	if err := qp.PostRecv([]rdma.RecvWR{{ID: 1}}); !errors.Is(err, rdma.ErrClosed) {
		t.Errorf("PostRecv after the device closed = %v, want rdma.ErrClosed", err)
	}
	if _, err := cq2.Poll(wc[:]); !errors.Is(err, rdma.ErrClosed) {
		t.Errorf("Poll after the device closed = %v, want rdma.ErrClosed", err)
	}
	if err := mr.Dereg(); !errors.Is(err, rdma.ErrClosed) {
		t.Errorf("Dereg after the device closed = %v, want rdma.ErrClosed", err)
	}
}
