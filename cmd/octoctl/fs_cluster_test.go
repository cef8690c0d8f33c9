package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/octofs/octofs/node/nodetest"
)

// TestFSCommandsOnCluster runs `octoctl fs` against a 3-node cluster over
// RDMA: the commands' wiring (flags, token, soft NIC address, client).
func TestFSCommandsOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster; skipped with -short")
	}
	tc := nodetest.Start(t, nodetest.Options{})
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tc.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--server", strings.Join(tc.AdminAddrs(), ","), "--token-file", tokenFile, "--timeout", "60s"}
	ctl := func(args ...string) string {
		t.Helper()
		out, err := runCtl(t, append(args, conn...)...)
		if err != nil {
			t.Fatalf("octoctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	src := filepath.Join(t.TempDir(), "tree")
	writeTree(t, src, map[string]string{"a.txt": "alpha", "sub/b.txt": strings.Repeat("b", 5<<20), "sub/link": "->../a.txt"})
	ctl("fs", "mkdir", "-p", "/data/in")
	ctl("fs", "put", "-r", src, "/data/in")
	if out := ctl("fs", "ls", "/data/in/tree"); out != "a.txt\nsub\n" {
		t.Fatalf("fs ls:\n%s", out)
	}
	if out := ctl("fs", "ls", "-l", "/data/in/tree/sub"); !strings.Contains(out, "link -> ../a.txt") || !strings.Contains(out, "5242880") {
		t.Fatalf("fs ls -l:\n%s", out)
	}
	if out := ctl("fs", "cat", "/data/in/tree/a.txt"); out != "alpha" {
		t.Fatalf("fs cat: %q", out)
	}
	back := t.TempDir()
	ctl("fs", "get", "-r", "/data/in/tree", back)
	got, err := os.ReadFile(filepath.Join(back, "tree", "sub", "b.txt"))
	if err != nil || len(got) != 5<<20 || strings.Trim(string(got), "b") != "" {
		t.Fatalf("fs get: %d bytes back, %v", len(got), err)
	}
	ctl("fs", "mv", "/data/in/tree", "/data/tree")
	if out := ctl("fs", "stat", "--json", "/data/tree/a.txt"); !strings.Contains(out, `"size": 5`) {
		t.Fatalf("fs stat --json:\n%s", out)
	}
	if out := ctl("fs", "df"); !strings.Contains(out, "SIZE") {
		t.Fatalf("fs df:\n%s", out)
	}
	ctl("fs", "rm", "-r", "/data")
	if out, err := runCtl(t, append([]string{"fs", "stat", "/data"}, conn...)...); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("fs stat after rm -r: %v\n%s", err, out)
	}
}
