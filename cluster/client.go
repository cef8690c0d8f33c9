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
	{ErrJoinSecret, "join_secret", http.StatusUnauthorized}, // before ErrUnauthorized, which it matches
	{ErrUnauthorized, "unauthorized", http.StatusUnauthorized},
	{ErrNotLeader, "not_leader", http.StatusMisdirectedRequest},
	{ErrNoLeader, "no_leader", http.StatusServiceUnavailable},
	{ErrLeaderUnreachable, "leader_unreachable", http.StatusServiceUnavailable},
	{ErrUnknownNode, "unknown_node", http.StatusNotFound},
	{ErrNodeExists, "node_exists", http.StatusConflict},
	{ErrNodeRemoved, "node_removed", http.StatusGone},
	{ErrNoEligibleNodes, "no_eligible_nodes", http.StatusConflict},
	{ErrBadTransition, "bad_transition", http.StatusConflict},
	{ErrAddressInUse, "address_in_use", http.StatusConflict},
	{ErrNotOwner, "not_owner", http.StatusConflict},
	{ErrHoldsData, "holds_data", http.StatusConflict},
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
	var no *NotOwnerError
	if errors.As(err, &no) {
		p := no.Partition
		return http.StatusConflict, apiError{Error: err.Error(), Code: "not_owner", Owner: no.Owner, Requester: no.Requester, Partition: &p}
	}
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.status, apiError{Error: err.Error(), Code: c.code}
		}
	}
	return http.StatusInternalServerError, apiError{Error: err.Error(), Code: "internal"}
}

func fromAPIError(status int, e apiError) error {
	switch {
	case e.Code == "not_leader":
		return &NotLeaderError{LeaderID: e.LeaderID, LeaderAdminAddr: e.LeaderAddr}
	case e.Code == "not_owner" && e.Partition != nil && e.Owner != "":
		return &NotOwnerError{Partition: *e.Partition, Owner: e.Owner, Requester: e.Requester}
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

// unreachableError says which servers were tried and why each failed. It
// matches ErrUnreachable, and the context's error when the caller's
// deadline ended the attempts.
type unreachableError struct {
	causes []string
	ctxErr error
}

func (e *unreachableError) Error() string {
	msg := ErrUnreachable.Error() + " (" + strings.Join(e.causes, "; ") + ")"
	if e.ctxErr != nil {
		msg += "; gave up: " + e.ctxErr.Error()
	}
	return msg
}

func (e *unreachableError) Unwrap() []error {
	if e.ctxErr != nil {
		return []error{ErrUnreachable, e.ctxErr}
	}
	return []error{ErrUnreachable}
}

// DefaultAttemptTimeout bounds one request to one server, so that a server
// that accepts connections but never answers (a stopped process) costs
// that long before the next server is tried. Writes get WriteAttemptTimeout.
const (
	DefaultAttemptTimeout = 4 * time.Second
	WriteAttemptTimeout   = 8 * time.Second
)

// AdminClient calls the admin API of a cluster. It tries its servers in
// order until one answers, giving each at most its attempt timeout, and
// follows a leader hint for writes.
type AdminClient struct {
	servers []string
	token   string
	scheme  string
	http    *http.Client
	// attempt bounds one request to one server (DefaultAttemptTimeout).
	attempt time.Duration
	// extraHeader is sent with every request (a join secret).
	extraHeader http.Header
}

// NewAdminClient returns a client for the given admin addresses (host:port,
// or URLs). With tlsConf set it speaks HTTPS. token may be empty for the
// public reads.
func NewAdminClient(servers []string, token string, tlsConf *tls.Config) *AdminClient {
	return newAdminClient(servers, token, tlsConf, newHTTPClient(tlsConf))
}

func newAdminClient(servers []string, token string, tlsConf *tls.Config, hc *http.Client) *AdminClient {
	c := &AdminClient{servers: servers, token: token, scheme: "http", http: hc, attempt: DefaultAttemptTimeout}
	if tlsConf != nil {
		c.scheme = "https"
	}
	return c
}

// newHTTPClient returns the HTTP client admin clients share. It keeps up to
// 32 idle connections per server, so that a node forwarding many requests
// to the leader reuses connections instead of leaving sockets in TIME_WAIT.
func newHTTPClient(tlsConf *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	if tlsConf != nil {
		tr.TLSClientConfig = tlsConf.Clone() // net/http mutates it
	}
	return &http.Client{Transport: tr}
}

// SetAttemptTimeout changes how long one request to one server may take
// before the next server is tried (default DefaultAttemptTimeout; writes
// take at least WriteAttemptTimeout).
func (c *AdminClient) SetAttemptTimeout(d time.Duration) {
	if d > 0 {
		c.attempt = d
	}
}

// SetJoinSecret makes the client present a waiting node's join secret (see
// SelfJoin).
func (c *AdminClient) SetJoinSecret(secret string) {
	c.extraHeader = http.Header{headerJoinSecret: {secret}}
}

// Servers returns the admin addresses the client tries, in order.
func (c *AdminClient) Servers() []string { return c.servers }

// CloseIdleConnections releases pooled connections.
func (c *AdminClient) CloseIdleConnections() { c.http.CloseIdleConnections() }

// with returns a client for other servers sharing c's token, TLS and
// connections.
func (c *AdminClient) with(servers []string) *AdminClient {
	d := *c
	d.servers = servers
	return &d
}

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

// tryNext reports whether an error from one server should send the request
// to the next one: the server did not answer, or is shutting down.
func tryNext(err error) bool {
	return errors.Is(err, ErrUnreachable) || errors.Is(err, ErrClosed)
}

// do sends one request to each server in turn until one answers; an
// answer (even an error answer) ends the loop, except from a node that is
// shutting down. Each server gets at most attempt (and the caller's ctx).
func (c *AdminClient) do(ctx context.Context, method, path string, q url.Values, in, out any, hdr http.Header) error {
	return c.doAttempt(ctx, c.attempt, method, path, q, in, out, hdr)
}

func (c *AdminClient) doAttempt(ctx context.Context, attempt time.Duration, method, path string, q url.Values, in, out any, hdr http.Header) error {
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
	var causes []string
	var last error
	for _, s := range c.servers {
		if ctx.Err() != nil {
			break
		}
		err := c.doOne(ctx, attempt, s, method, c.url(s, path, q), body, out, hdr)
		if !tryNext(err) {
			return err
		}
		last = err
		var ue *unreachableError
		if errors.As(err, &ue) {
			causes = append(causes, ue.causes...)
		} else {
			causes = append(causes, err.Error())
		}
	}
	if ctx.Err() != nil || len(causes) > 1 {
		if len(causes) == 0 {
			causes = []string{"no server tried"}
		}
		return &unreachableError{causes: causes, ctxErr: ctx.Err()}
	}
	return last
}

func (c *AdminClient) doOne(ctx context.Context, attempt time.Duration, server, method, u string, body []byte, out any, hdr http.Header) error {
	actx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, method, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	for k, v := range c.extraHeader {
		req.Header[k] = v
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	fail := func(err error) error {
		cause := err.Error()
		var ue *url.Error
		if errors.As(err, &ue) {
			cause = ue.Err.Error()
		}
		switch {
		case ctx.Err() != nil:
			cause = "no answer before the caller's deadline"
		case actx.Err() != nil:
			cause = fmt.Sprintf("no answer within %v (the process may be stopped or overloaded)", attempt)
		}
		return &unreachableError{causes: []string{server + ": " + cause}, ctxErr: ctx.Err()}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fail(err)
	}
	err = DecodeResponse(resp.StatusCode, b, out)
	if errors.Is(err, ErrMalformed) || errors.Is(err, ErrClosed) {
		return fmt.Errorf("%s: %w", server, err)
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

// retryWrite reports whether a write refused with err may be sent again: the
// refusal came before any leader applied it (no leader, or the leader did
// not answer a forwarded request; the changes are idempotent, see Drain).
func retryWrite(err error) bool {
	return errors.Is(err, ErrNoLeader) || errors.Is(err, ErrLeaderUnreachable)
}

// write sends a mutating request. It follows a leader hint, and retries
// (bounded) while no leader is known or the leader does not answer. If the
// caller's deadline ends the retries, the error says what the last real
// answer was.
func (c *AdminClient) write(ctx context.Context, path string, q url.Values, in, out any) error {
	deadline := time.Now().Add(writeRetryFor)
	target := c
	backoff := 50 * time.Millisecond
	attempt := max(c.attempt, WriteAttemptTimeout)
	var answer error // the last error that was not the caller's deadline
	gaveUp := func(err error) error {
		if answer != nil && answer != err && ctx.Err() != nil {
			return fmt.Errorf("%w (retried until the caller's deadline: %w)", answer, ctx.Err())
		}
		return err
	}
	for {
		err := target.doAttempt(ctx, attempt, http.MethodPost, path, q, in, out, nil)
		if err != nil && ctx.Err() == nil {
			answer = err
		}
		var nl *NotLeaderError
		switch {
		case errors.As(err, &nl) && nl.LeaderAdminAddr != "":
			target = c.with([]string{nl.LeaderAdminAddr})
		case retryWrite(err):
			target = c
		case tryNext(err) && target != c && ctx.Err() == nil:
			// The hinted leader did not answer: ask the servers again.
			target = c
		default:
			return gaveUp(err)
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, backoff) {
			return gaveUp(err)
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

// Nodes lists the nodes, from the leader's view when it is reachable
// (otherwise the answer is marked stale).
func (c *AdminClient) Nodes(ctx context.Context) (*NodesResponse, error) {
	var n NodesResponse
	return &n, c.do(ctx, http.MethodGet, PathNodes, nil, nil, &n, nil)
}

// Watch waits up to wait for a map with an epoch above epoch and returns it;
// after wait it returns the current map (whose epoch may equal epoch).
func (c *AdminClient) Watch(ctx context.Context, epoch uint64, wait time.Duration) (*Map, error) {
	q := url.Values{"epoch": {fmt.Sprint(epoch)}, "wait": {wait.String()}}
	var m Map
	return &m, c.doAttempt(ctx, wait+c.attempt, http.MethodGet, PathWatch, q, nil, &m, nil)
}

// Join asks the cluster to admit a node.
func (c *AdminClient) Join(ctx context.Context, req JoinRequest) (*JoinResponse, error) {
	var r JoinResponse
	return &r, c.write(ctx, PathJoin, nil, req, &r)
}

// SelfJoin tells the waiting node this client talks to to join the cluster
// whose members are given. The node must have been started with the
// cluster's token (then the client's token must be it), or the client must
// present the node's join secret (SetJoinSecret).
func (c *AdminClient) SelfJoin(ctx context.Context, members []string) (*SelfJoinResponse, error) {
	var r SelfJoinResponse
	return &r, c.doAttempt(ctx, max(c.attempt, selfJoinTimeout+WriteAttemptTimeout), http.MethodPost, PathSelfJoin, nil, SelfJoinRequest{Members: members}, &r, nil)
}

func nodePath(pattern string, id NodeID) string {
	return strings.Replace(pattern, "{id}", url.PathEscape(string(id)), 1)
}

// Remove removes a node from the cluster. A node that owns pinned
// partitions is refused (ErrHoldsData); see ForceRemove.
func (c *AdminClient) Remove(ctx context.Context, id NodeID) (*Map, error) {
	var m Map
	return &m, c.write(ctx, nodePath(PathRemove, id), nil, nil, &m)
}

// ForceRemove removes a node even if it owns pinned partitions: the
// file-system data in them is lost, and they go to other nodes empty. Use
// it only for a node that is gone for good.
func (c *AdminClient) ForceRemove(ctx context.Context, id NodeID) (*Map, error) {
	var m Map
	return &m, c.write(ctx, nodePath(PathRemove, id), url.Values{queryForceLoseData: {"true"}}, nil, &m)
}

// Drain hands a node's partitions to the others. A node that owns pinned
// partitions is refused (ErrHoldsData).
func (c *AdminClient) Drain(ctx context.Context, id NodeID) (*Map, error) {
	var m Map
	return &m, c.write(ctx, nodePath(PathDrain, id), nil, nil, &m)
}

// Pin pins partition p to node, which must own it (else a *NotOwnerError
// names the owner). Pinning a pinned partition again changes nothing.
func (c *AdminClient) Pin(ctx context.Context, p uint32, node NodeID) (*Map, error) {
	var m Map
	return &m, c.write(ctx, strings.Replace(PathPin, "{p}", fmt.Sprint(p), 1), nil, PinRequest{Node: node}, &m)
}

// Heartbeat reports a node to the leader.
func (c *AdminClient) Heartbeat(ctx context.Context, req HeartbeatRequest) (*HeartbeatResponse, error) {
	var r HeartbeatResponse
	return &r, c.do(ctx, http.MethodPost, PathHeartbeat, nil, req, &r, nil)
}
