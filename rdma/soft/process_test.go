package soft

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/rdma"
)

// peerEnv makes the test binary act as the responder process of
// TestPeerProcessKilled instead of running tests.
const peerEnv = "OCTOFS_SOFT_PEER"

// TestPeerProcessHelper is the child process: it exports a region, accepts
// one connection, prints what the parent needs and waits to be killed.
func TestPeerProcessHelper(t *testing.T) {
	if os.Getenv(peerEnv) == "" {
		t.Skip("runs only as the child of TestPeerProcessKilled")
	}
	dev, err := Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(64)
	require.NoError(t, err)
	buf, err := rdma.AllocBuffer(1 << 20)
	require.NoError(t, err)
	mr, err := pd.RegMR(buf, rdma.AccessAll)
	require.NoError(t, err)
	ln, err := rdma.Listen(pd, "127.0.0.1:0")
	require.NoError(t, err)
	fmt.Printf("PEER %s %d %d\n", ln.Addr(), mr.Addr(), mr.RKey())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = ln.Accept(ctx, rdma.ConnParams{QP: rdma.QPConfig{SendCQ: cq, RecvCQ: cq}})
	require.NoError(t, err)
	fmt.Println("CONNECTED")
	<-ctx.Done() // the parent kills this process long before
}

// TestPeerProcessKilled kills the peer process with SIGKILL while requests
// are outstanding: every one of them completes with an error, the queue
// pair lands in the error state, and nothing hangs.
func TestPeerProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerProcessHelper$", "-test.v=false")
	cmd.Env = append(os.Environ(), peerEnv+"=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := bufio.NewScanner(out)
	var addr string
	var raddr uint64
	var rkey uint32
	for lines.Scan() {
		if _, err := fmt.Sscanf(lines.Text(), "PEER %s %d %d", &addr, &raddr, &rkey); err == nil {
			break
		}
	}
	require.NotEmpty(t, addr, "child did not report its address")

	dev, err := Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(1024)
	require.NoError(t, err)
	buf, err := rdma.AllocBuffer(1 << 20)
	require.NoError(t, err)
	defer rdma.FreeBuffer(buf)
	mr, err := pd.RegMR(buf, rdma.AccessAll)
	require.NoError(t, err)
	defer mr.Dereg()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The default transport timeout (seconds) is far longer than the
	// test waits for the failure, and Stats below say which it was.
	conn, err := rdma.Dial(ctx, pd, addr, rdma.ConnParams{QP: rdma.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 512}})
	require.NoError(t, err)
	defer conn.Close()
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "CONNECTED") {
	}

	read := func(id uint64) rdma.SendWR {
		return rdma.SendWR{ID: id, Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{{Addr: mr.Addr(), Length: 1 << 20, LKey: mr.LKey()}}, RemoteAddr: raddr, RKey: rkey}
	}
	require.NoError(t, conn.QP.PostSend([]rdma.SendWR{read(0)}))
	var wc [1]rdma.WorkCompletion
	n, err := cq.Wait(ctx, wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, rdma.WCSuccess, wc[0].Status, "a READ from the live peer")

	const outstanding = 256
	wrs := make([]rdma.SendWR, outstanding)
	for i := range wrs {
		wrs[i] = read(uint64(i + 1))
	}
	require.NoError(t, conn.QP.PostSend(wrs))
	require.NoError(t, cmd.Process.Kill())
	start := time.Now()

	statuses := map[rdma.WCStatus]int{}
	for got := 0; got < outstanding; {
		n, err := cq.Wait(ctx, wc[:])
		require.NoError(t, err, "waiting for the outstanding READs to complete after the kill")
		got += n
		statuses[wc[0].Status]++
	}
	t.Logf("all %d outstanding READs completed %v after SIGKILL: %v", outstanding, time.Since(start), statuses)
	require.Equal(t, rdma.QPSErr, conn.QP.State())
	require.Equal(t, uint64(1), dev.Stats().ConnectionsLost, "the failure came from the lost connection")
	require.Zero(t, dev.Stats().Timeouts)
	require.Positive(t, statuses[rdma.WCRetryExcErr]+statuses[rdma.WCWRFlushErr], "requests outstanding at the kill fail")
	require.Equal(t, 1, statuses[rdma.WCRetryExcErr], "the oldest outstanding request reports the transport failure")
	for s := range statuses {
		require.Contains(t, []rdma.WCStatus{rdma.WCSuccess, rdma.WCRetryExcErr, rdma.WCWRFlushErr}, s)
	}

	require.NoError(t, conn.QP.PostSend([]rdma.SendWR{read(999)}))
	n, err = cq.Wait(ctx, wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, rdma.WCWRFlushErr, wc[0].Status, "a request posted after the failure is flushed")
}
