package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/spf13/cobra"
)

// defaultServer is the admin address octoctl talks to without --server or
// OCTOFS_ADMIN: the default of `octofs serve --admin-addr`.
const defaultServer = "127.0.0.1:7400"

// clusterFlags are the connection flags shared by the cluster commands.
type clusterFlags struct {
	servers   []string
	token     string
	tokenFile string
	tlsCA     string
	json      bool
	timeout   time.Duration
	attempt   time.Duration
	// stderr receives warnings (the command's error stream).
	stderr io.Writer
}

func addClusterFlags(cmd *cobra.Command) *clusterFlags {
	f := &clusterFlags{}
	def := []string{defaultServer}
	if env := os.Getenv("OCTOFS_ADMIN"); env != "" {
		def = strings.Split(env, ",")
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.servers, "server", def, "admin address(es) of cluster nodes (env OCTOFS_ADMIN)")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the cluster token, e.g. <data-dir>/token (or set OCTOFS_TOKEN)")
	fl.StringVar(&f.token, "token", "", "cluster token; visible to every user in ps: prefer --token-file or OCTOFS_TOKEN")
	fl.StringVar(&f.tlsCA, "tls-ca", "", "CA certificate (PEM) of the admin API; implies HTTPS")
	fl.BoolVar(&f.json, "json", false, "print JSON for scripts instead of a table")
	fl.DurationVar(&f.timeout, "timeout", 15*time.Second, "give up after this long")
	fl.DurationVar(&f.attempt, "attempt-timeout", cluster.DefaultAttemptTimeout, "wait this long for one --server before trying the next (writes wait at least "+cluster.WriteAttemptTimeout.String()+")")
	f.stderr = os.Stderr
	cmd.PreRun = func(cmd *cobra.Command, _ []string) { f.stderr = cmd.ErrOrStderr() }
	return f
}

// tokenValue returns the token from --token-file, OCTOFS_TOKEN or --token;
// --token works but warns, since other users see it in ps.
func (f *clusterFlags) tokenValue() (string, error) {
	switch {
	case f.token != "":
		fmt.Fprintln(f.stderr, "octoctl: warning: --token shows the cluster token to every user of this machine (ps, /proc); use --token-file FILE or OCTOFS_TOKEN instead")
		return f.token, nil
	case f.tokenFile != "":
		t, err := cluster.ReadTokenFile(f.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return t, nil
	}
	return os.Getenv("OCTOFS_TOKEN"), nil
}

func (f *clusterFlags) tlsConfig() (*tls.Config, error) {
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca: no certificate in %s", f.tlsCA)
		}
		return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
	}
	for _, s := range f.servers {
		if strings.HasPrefix(s, "https://") {
			return &tls.Config{MinVersion: tls.VersionTLS12}, nil
		}
	}
	return nil, nil
}

// client returns an admin client for --server; needToken makes a missing
// token an error with advice instead of a refused request.
func (f *clusterFlags) client(needToken bool) (*cluster.AdminClient, error) {
	return f.clientFor(f.servers, needToken)
}

// clientFor is client for other servers than --server.
func (f *clusterFlags) clientFor(servers []string, needToken bool) (*cluster.AdminClient, error) {
	tok, err := f.tokenValue()
	if err != nil {
		return nil, err
	}
	if needToken && tok == "" {
		return nil, fmt.Errorf("this command needs the cluster token: pass --token-file <data-dir>/token (of any node) or set OCTOFS_TOKEN")
	}
	tc, err := f.tlsConfig()
	if err != nil {
		return nil, err
	}
	c := cluster.NewAdminClient(servers, tok, tc)
	c.SetAttemptTimeout(f.attempt)
	return c, nil
}

// explain adds to an error from the cluster what the operator can do
// about it with octoctl's own flags.
func explain(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cluster.ErrJoinSecret):
		return err
	case errors.Is(err, cluster.ErrUnauthorized):
		return fmt.Errorf("%w; pass the cluster token with --token-file <data-dir>/token or OCTOFS_TOKEN", err)
	case errors.Is(err, cluster.ErrUnreachable):
		return fmt.Errorf("%w; check --server (or OCTOFS_ADMIN) and that `octofs serve` runs there; give several nodes, comma-separated, and the next is tried when one does not answer", err)
	}
	return err
}

func (f *clusterFlags) context(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), f.timeout)
}

// show runs one read against --server and prints the answer: as JSON with
// --json, for people with human otherwise.
func show[T any](cmd *cobra.Command, f *clusterFlags, get func(*cluster.AdminClient, context.Context) (T, error), human func(io.Writer, T) error) error {
	c, err := f.client(false)
	if err != nil {
		return err
	}
	ctx, cancel := f.context(cmd)
	defer cancel()
	v, err := get(c, ctx)
	if err != nil {
		return explain(err)
	}
	if f.json {
		err = printJSON(cmd.OutOrStdout(), v)
	} else {
		err = human(cmd.OutOrStdout(), v)
	}
	if err != nil {
		return err
	}
	return staleAnswer(v)
}

// staleAnswer fails a command whose answer came from a node that is not
// in touch with the cluster, after it was printed: scripts must not take
// an old view for the cluster's.
func staleAnswer(v any) error {
	var why string
	switch v := v.(type) {
	case *cluster.Status:
		if v.Joined && !v.CaughtUp {
			why = fmt.Sprintf("%s: %s", v.NodeID, v.NotCaughtUp)
		}
	case *cluster.Map:
		if v.Stale {
			why = v.StaleReason
		}
	case *cluster.NodesResponse:
		if v.Stale {
			why = fmt.Sprintf("%s answered from its own view: %s", v.From, v.StaleReason)
		}
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("%w (%s); ask another node with --server, or check that a majority of the voters runs", cluster.ErrNotCaughtUp, why)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints aligned columns for people.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }
func (t *table) flush() error        { return t.tw.Flush() }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func joinIDs(ids []cluster.NodeID) string {
	if len(ids) == 0 {
		return "-"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return strings.Join(s, ", ")
}

// completeNodeIDs offers the ids in the cluster map for shell completion.
func completeNodeIDs(f *clusterFlags) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := f.client(false)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		m, err := c.Map(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var ids []string
		for _, n := range m.Nodes {
			if n.State != cluster.StateRemoved {
				ids = append(ids, string(n.ID)+"\t"+string(n.State))
			}
		}
		return ids, cobra.ShellCompDirectiveNoFileComp
	}
}
