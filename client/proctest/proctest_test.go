package proctest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestStartKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds octofs and starts processes; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := Build(ctx, filepath.Join("..", ".."), t.TempDir(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, Options{Binary: bin, Dir: t.TempDir(), RegionSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	pid := c.Nodes[1].PID()
	c.Kill(1)
	if c.Nodes[1].Running() {
		t.Fatal("node still runs after Kill")
	}
	if err := c.Restart(ctx, 1); err != nil {
		t.Fatalf("%v\n%s", err, c.Logs(20))
	}
	if p := c.Nodes[1].PID(); p == 0 || p == pid {
		t.Fatalf("restarted node has pid %d (was %d)", p, pid)
	}
	c.Stop()
	for _, n := range c.Nodes {
		if n.Running() {
			t.Fatalf("%s runs after Stop", n.ID)
		}
	}
}
