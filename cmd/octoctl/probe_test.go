package main

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/node/nodetest"
)

// TestProbe runs `octoctl probe` against a two-node cluster: every node's
// data endpoint grants a session and answers null RPCs; without the token
// the command refuses to start.
func TestProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster; skipped with -short")
	}
	c := nodetest.Start(t, nodetest.Options{Nodes: 2})
	srv := "--server=" + c.AdminAddrs()[0]
	out, err := runCtl(t, "probe", srv, "--token", c.Token, "--calls", "10")
	require.NoError(t, err, out)
	for _, n := range c.Nodes {
		require.Regexp(t, regexp.MustCompile(`(?m)^`+string(n.ID)+` +`+regexp.QuoteMeta(n.Storage.RDMAAddr())+` .* ok$`), out)
	}

	out, err = runCtl(t, "probe", srv, "--token", c.Token, "--json", "--node", "n2", "--calls", "3")
	require.NoError(t, err, out)
	require.Contains(t, out, `"node": "n2"`)
	require.Contains(t, out, `"calls": 3`)
	require.NotContains(t, out, `"node": "n1"`)

	_, err = runCtl(t, "probe", srv, "--token", "wrong-token", "--timeout", "3s")
	require.Error(t, err, "a wrong token gets nothing")
}
