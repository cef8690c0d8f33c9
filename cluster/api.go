package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxBodyBytes bounds admin request bodies.
const maxBodyBytes = 1 << 20

// startAdmin serves the admin API on the admin listener.
func (n *Node) startAdmin() {
	mux := http.NewServeMux()
	handle := func(pattern, route string, h http.HandlerFunc) {
		mux.Handle(pattern, n.instrument(route, h))
	}
	handle("GET "+PathStatus, "status", n.handleStatus)
	handle("GET "+PathMap, "map", n.handleMap)
	handle("GET "+PathNodes, "nodes", n.handleNodes)
	handle("GET "+PathWatch, "watch", n.handleWatch)
	handle("POST "+PathJoin, "join", n.handleJoin)
	handle("POST "+PathSelfJoin, "self_join", n.handleSelfJoin)
	handle("POST "+PathHeartbeat, "heartbeat", n.handleHeartbeat)
	handle("POST "+PathRemove, "remove", n.handleRemove)
	handle("POST "+PathDrain, "drain", n.handleDrain)
	handle("GET "+PathHealth, "health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.Handle("GET "+PathMetrics, promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))

	n.httpSrv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
	}
	ln := n.adminLn
	n.goRun(func() {
		var err error
		if n.cfg.AdminTLS != nil {
			n.httpSrv.TLSConfig = n.cfg.AdminTLS.Clone()
			err = n.httpSrv.ServeTLS(ln, "", "")
		} else {
			err = n.httpSrv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("admin API stopped", "err", err)
			n.fail(fmt.Errorf("cluster: admin API: %w", err))
		}
	})
}

// statusRecorder remembers the status code for the request counter.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (n *Node) instrument(route string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h(rec, r)
		n.metrics.requests.WithLabelValues(route, strconv.Itoa(rec.code)).Inc()
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	status, body := toAPIError(err)
	if body.LeaderAddr != "" {
		w.Header().Set("X-Octofs-Leader", body.LeaderAddr)
	}
	writeJSON(w, status, body)
}

// bearer returns the request's bearer token, or "".
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	return ""
}

// authorize reports whether the request carries this cluster's token. A
// request with a token that does not match is an error (not a downgrade to
// the public view), so a wrong token is noticed.
func (n *Node) authorize(r *http.Request) (bool, error) {
	got := bearer(r)
	if got == "" && r.Header.Get("Authorization") == "" {
		return false, nil
	}
	if !TokensEqual(n.getToken(), got) {
		return false, ErrUnauthorized
	}
	return true, nil
}

// requireToken refuses the request unless it carries the token.
func (n *Node) requireToken(w http.ResponseWriter, r *http.Request) bool {
	ok, err := n.authorize(r)
	if err == nil && !ok {
		err = ErrUnauthorized
	}
	if err != nil {
		n.log.Warn("refused admin request without valid token", "path", r.URL.Path, "remote", r.RemoteAddr)
		writeError(w, err)
		return false
	}
	return true
}

// DecodeRequest decodes an admin request body strictly: one JSON object of
// the expected shape, no unknown fields, at most maxBodyBytes.
func DecodeRequest(body io.Reader, v any) error {
	b, err := io.ReadAll(io.LimitReader(body, maxBodyBytes+1))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if len(b) > maxBodyBytes {
		return fmt.Errorf("%w: body over %d bytes", ErrBadRequest, maxBodyBytes)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if d.More() {
		return fmt.Errorf("%w: trailing data", ErrBadRequest)
	}
	return nil
}

func (n *Node) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, n.Status())
}

// mapView is the map as this caller may see it.
func mapView(m *Map, authed bool) *Map {
	if authed {
		return m
	}
	return m.Redact()
}

func (n *Node) handleMap(w http.ResponseWriter, r *http.Request) {
	authed, err := n.authorize(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, mapView(n.Map(), authed))
}

func (n *Node) handleNodes(w http.ResponseWriter, r *http.Request) {
	authed, err := n.authorize(r)
	if err != nil {
		writeError(w, err)
		return
	}
	// The leader knows heartbeat ages: ask it when it is someone else.
	if !n.IsLeader() && r.Header.Get(headerForwarded) == "" {
		if _, addr := n.Leader(); addr != "" {
			c := NewAdminClient([]string{addr}, "", n.cfg.ClientTLS)
			var out NodesResponse
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			err := c.do(ctx, http.MethodGet, PathNodes, nil, nil, &out, forwardHeader(r))
			cancel()
			c.CloseIdleConnections()
			if err == nil {
				writeJSON(w, http.StatusOK, out)
				return
			}
		}
	}
	resp := n.Nodes()
	if !authed {
		for i := range resp.Nodes {
			resp.Nodes[i].Region.RKey = 0
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// forwardHeader is what a follower sends along when it forwards: the
// caller's credentials and the mark that stops a second hop.
func forwardHeader(r *http.Request) http.Header {
	h := http.Header{headerForwarded: {"1"}}
	if a := r.Header.Get("Authorization"); a != "" {
		h.Set("Authorization", a)
	}
	return h
}

func (n *Node) handleWatch(w http.ResponseWriter, r *http.Request) {
	authed, err := n.authorize(r)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	var since uint64
	if s := q.Get("epoch"); s != "" {
		if since, err = strconv.ParseUint(s, 10, 64); err != nil {
			writeError(w, fmt.Errorf("%w: epoch %q", ErrBadRequest, s))
			return
		}
	}
	wait := DefaultWatchWait
	if s := q.Get("wait"); s != "" {
		if wait, err = time.ParseDuration(s); err != nil || wait < 0 || wait > 5*time.Minute {
			writeError(w, fmt.Errorf("%w: wait %q (0 to 5m)", ErrBadRequest, s))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	m, err := n.Watch(ctx, since)
	if errors.Is(err, ErrClosed) {
		writeError(w, err)
		return
	}
	// A timeout answers with the current map: the caller compares epochs.
	writeJSON(w, http.StatusOK, mapView(m, authed))
}

// leaderWrite runs op here if this node leads, and otherwise forwards the
// request to the leader once; if that fails it answers with the leader hint.
func (n *Node) leaderWrite(w http.ResponseWriter, r *http.Request, body any, op func(ctx context.Context) (*Map, error)) {
	m, err := op(r.Context())
	var nl *NotLeaderError
	if errors.As(err, &nl) && nl.LeaderAdminAddr != "" && r.Header.Get(headerForwarded) == "" {
		c := NewAdminClient([]string{nl.LeaderAdminAddr}, "", n.cfg.ClientTLS)
		var out Map
		ferr := c.do(r.Context(), http.MethodPost, r.URL.Path, nil, body, &out, forwardHeader(r))
		c.CloseIdleConnections()
		if ferr == nil {
			writeJSON(w, http.StatusOK, &out)
			return
		}
		n.log.Info("forwarding to leader failed; answering with a leader hint", "leader", nl.LeaderAdminAddr, "err", ferr)
		if !errors.Is(ferr, ErrUnreachable) {
			err = ferr
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func (n *Node) handleJoin(w http.ResponseWriter, r *http.Request) {
	if !n.requireToken(w, r) {
		return
	}
	var req JoinRequest
	if err := DecodeRequest(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	n.leaderWrite(w, r, req, func(ctx context.Context) (*Map, error) { return n.Join(ctx, req) })
}

func (n *Node) handleRemove(w http.ResponseWriter, r *http.Request) {
	if !n.requireToken(w, r) {
		return
	}
	id := NodeID(r.PathValue("id"))
	n.leaderWrite(w, r, nil, func(ctx context.Context) (*Map, error) { return n.Remove(ctx, id) })
}

func (n *Node) handleDrain(w http.ResponseWriter, r *http.Request) {
	if !n.requireToken(w, r) {
		return
	}
	id := NodeID(r.PathValue("id"))
	n.leaderWrite(w, r, nil, func(ctx context.Context) (*Map, error) { return n.Drain(ctx, id) })
}

func (n *Node) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	if !n.requireToken(w, r) {
		return
	}
	var req HeartbeatRequest
	if err := DecodeRequest(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	resp, err := n.recordHeartbeat(req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleSelfJoin tells a node that has no cluster state to join. A node
// that has no token yet adopts the caller's (trust on first use; such a
// node holds no data and no map); one that has a token requires it.
func (n *Node) handleSelfJoin(w http.ResponseWriter, r *http.Request) {
	got := bearer(r)
	if got == "" {
		writeError(w, ErrUnauthorized)
		return
	}
	n.tokenMu.Lock()
	switch {
	case n.token == "":
		n.token = got
	case !TokensEqual(n.token, got):
		n.tokenMu.Unlock()
		writeError(w, ErrUnauthorized)
		return
	}
	n.tokenMu.Unlock()
	if n.joined.Load() {
		writeError(w, fmt.Errorf("%w: node %s is already a cluster member", ErrBadRequest, n.id))
		return
	}
	var req SelfJoinRequest
	if err := DecodeRequest(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	if len(req.Members) == 0 {
		writeError(w, fmt.Errorf("%w: no member addresses", ErrBadRequest))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := n.joinCluster(ctx, req.Members); err != nil {
		if !n.joined.Load() {
			// Forget an adopted token that the cluster refused.
			n.tokenMu.Lock()
			if n.cfg.Token == "" {
				n.token = ""
			}
			n.tokenMu.Unlock()
		}
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n.Status())
}
