package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// errorCodes maps sentinel errors to the admin API's error codes and back.
// It is the one place where errors cross HTTP.
var errorCodes = []struct {
	err    error
	code   string
	status int
}{
	{ErrUnauthorized, "unauthorized", http.StatusUnauthorized},
	{ErrNotLeader, "not_leader", http.StatusMisdirectedRequest},
	{ErrNoLeader, "no_leader", http.StatusServiceUnavailable},
	{ErrUnknownNode, "unknown_node", http.StatusNotFound},
	{ErrNodeExists, "node_exists", http.StatusConflict},
	{ErrNodeRemoved, "node_removed", http.StatusGone},
	{ErrNoEligibleNodes, "no_eligible_nodes", http.StatusConflict},
	{ErrBadTransition, "bad_transition", http.StatusConflict},
	{ErrNotInitialized, "not_initialized", http.StatusServiceUnavailable},
	{ErrBadRequest, "bad_request", http.StatusBadRequest},
	{ErrMalformed, "bad_request", http.StatusBadRequest},
	{ErrUnsupportedVersion, "unsupported_version", http.StatusBadRequest},
	{ErrClosed, "closed", http.StatusServiceUnavailable},
}

func toAPIError(err error) (int, apiError) {
	var nl *NotLeaderError
	if errors.As(err, &nl) && nl.LeaderAdminAddr != "" {
		return http.StatusMisdirectedRequest, apiError{Error: err.Error(), Code: "not_leader", LeaderID: nl.LeaderID, LeaderAddr: nl.LeaderAdminAddr}
	}
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.status, apiError{Error: err.Error(), Code: c.code}
		}
	}
	return http.StatusInternalServerError, apiError{Error: err.Error(), Code: "internal"}
}

func fromAPIError(status int, e apiError) error {
	if e.Code == "not_leader" {
		return &NotLeaderError{LeaderID: e.LeaderID, LeaderAdminAddr: e.LeaderAddr}
	}
	for _, c := range errorCodes {
		if c.code == e.Code {
			// The server's text already carries the sentinel's text and detail.
			return &remoteError{msg: e.Error, err: c.err}
		}
	}
	return fmt.Errorf("cluster: admin API answered %d: %s", status, e.Error)
}

// remoteError is an error that came back over the admin API: its text is the
// server's, and errors.Is matches the sentinel it was mapped from.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

// AdminClient calls the admin API of a cluster. It tries its servers in
// order until one answers, and follows a leader hint once for writes.
type AdminClient struct {
	servers []string
	token   string
	scheme  string
	http    *http.Client
}

// NewAdminClient returns a client for the given admin addresses (host:port,
// or URLs). With tlsConf set it speaks HTTPS. token may be empty for the
// public reads.
func NewAdminClient(servers []string, token string, tlsConf *tls.Config) *AdminClient {
	c := &AdminClient{servers: servers, token: token, scheme: "http"}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tlsConf != nil {
		c.scheme = "https"
		tr.TLSClientConfig = tlsConf.Clone() // net/http mutates it
	}
	c.http = &http.Client{Transport: tr}
	return c
}

// CloseIdleConnections releases pooled connections.
func (c *AdminClient) CloseIdleConnections() { c.http.CloseIdleConnections() }

func (c *AdminClient) url(server, path string, q url.Values) string {
	base := server
	if !strings.Contains(server, "://") {
		base = c.scheme + "://" + server
	}
	u := strings.TrimRight(base, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// do sends one request to each server in turn until one answers; an
// answer (even an error answer) ends the loop.
func (c *AdminClient) do(ctx context.Context, method, path string, q url.Values, in, out any, hdr http.Header) error {
	if len(c.servers) == 0 {
		return fmt.Errorf("%w: no server address given", ErrUnreachable)
	}
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	var lastErr error
	for _, s := range c.servers {
		err := c.doOne(ctx, method, c.url(s, path, q), body, out, hdr)
		if !errors.Is(err, ErrUnreachable) {
			return err
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return lastErr
}

func (c *AdminClient) doOne(ctx context.Context, method, u string, body []byte, out any, hdr http.Header) error {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w (%s: %v)", ErrUnreachable, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("%w (%s: %v)", ErrUnreachable, u, err)
	}
	err = DecodeResponse(resp.StatusCode, b, out)
	if errors.Is(err, ErrMalformed) {
		return fmt.Errorf("%s: %w", u, err)
	}
	return err
}

// maxResponseBytes bounds admin API responses.
const maxResponseBytes = 16 << 20

// DecodeResponse turns an admin API answer into out (2xx) or into the error
// it carries. A map in the answer is validated before it is believed.
func DecodeResponse(status int, body []byte, out any) error {
	if status/100 != 2 {
		var e apiError
		if json.Unmarshal(body, &e) != nil || e.Code == "" {
			return fmt.Errorf("%w: answer %d: %.200s", ErrMalformed, status, strings.TrimSpace(string(body)))
		}
		return fromAPIError(status, e)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%w: response: %v", ErrMalformed, err)
	}
	if m, ok := out.(*Map); ok {
		return m.Validate()
	}
	return nil
}

// writeRetryFor bounds how long a write keeps retrying while the cluster
// has no leader (an election, or a leadership hand-over).
const writeRetryFor = 10 * time.Second

// write sends a mutating request. It follows a leader hint, and retries
// (bounded) while no leader is known: such a refusal comes before the
// leader applies anything, so the retry cannot apply a change twice.
func (c *AdminClient) write(ctx context.Context, path string, in, out any) error {
	deadline := time.Now().Add(writeRetryFor)
	target := c
	backoff := 50 * time.Millisecond
	for {
		err := target.do(ctx, http.MethodPost, path, nil, in, out, nil)
		var nl *NotLeaderError
		switch {
		case errors.As(err, &nl) && nl.LeaderAdminAddr != "":
			target = &AdminClient{servers: []string{nl.LeaderAdminAddr}, token: c.token, scheme: c.scheme, http: c.http}
		case errors.Is(err, ErrNoLeader):
			target = c
		default:
			return err
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, backoff) {
			return err
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Status returns the answering node's view of the cluster.
func (c *AdminClient) Status(ctx context.Context) (*Status, error) {
	var s Status
	return &s, c.do(ctx, http.MethodGet, PathStatus, nil, nil, &s, nil)
}

// Map returns the cluster map; without a valid token it is redacted.
func (c *AdminClient) Map(ctx context.Context) (*Map, error) {
	var m Map
	return &m, c.do(ctx, http.MethodGet, PathMap, nil, nil, &m, nil)
}

// Nodes lists the nodes, from the leader's view when it is reachable.
func (c *AdminClient) Nodes(ctx context.Context) (*NodesResponse, error) {
	var n NodesResponse
	return &n, c.do(ctx, http.MethodGet, PathNodes, nil, nil, &n, nil)
}

// Watch waits up to wait for a map with an epoch above epoch and returns it;
// after wait it returns the current map (whose epoch may equal epoch).
func (c *AdminClient) Watch(ctx context.Context, epoch uint64, wait time.Duration) (*Map, error) {
	q := url.Values{"epoch": {fmt.Sprint(epoch)}, "wait": {wait.String()}}
	var m Map
	return &m, c.do(ctx, http.MethodGet, PathWatch, q, nil, &m, nil)
}

// Join asks the cluster to admit a node.
func (c *AdminClient) Join(ctx context.Context, req JoinRequest) (*Map, error) {
	var m Map
	return &m, c.write(ctx, PathJoin, req, &m)
}

// SelfJoin tells the idle node this client talks to to join the cluster
// whose members are given.
func (c *AdminClient) SelfJoin(ctx context.Context, members []string) error {
	return c.do(ctx, http.MethodPost, PathSelfJoin, nil, SelfJoinRequest{Members: members}, nil, nil)
}

// Remove removes a node from the cluster.
func (c *AdminClient) Remove(ctx context.Context, id NodeID) (*Map, error) {
	var m Map
	return &m, c.write(ctx, strings.Replace(PathRemove, "{id}", url.PathEscape(string(id)), 1), nil, &m)
}

// Drain hands a node's partitions to the others.
func (c *AdminClient) Drain(ctx context.Context, id NodeID) (*Map, error) {
	var m Map
	return &m, c.write(ctx, strings.Replace(PathDrain, "{id}", url.PathEscape(string(id)), 1), nil, &m)
}

// Heartbeat reports a node to the leader.
func (c *AdminClient) Heartbeat(ctx context.Context, req HeartbeatRequest) (*HeartbeatResponse, error) {
	var r HeartbeatResponse
	return &r, c.do(ctx, http.MethodPost, PathHeartbeat, nil, req, &r, nil)
}
