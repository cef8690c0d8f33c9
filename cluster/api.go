package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// servePprof serves net/http/pprof's pages under PathDebugPprof.
func servePprof(w http.ResponseWriter, r *http.Request) {
	switch name := strings.TrimPrefix(r.URL.Path, PathDebugPprof); name {
	case "":
		pprof.Index(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "trace":
		pprof.Trace(w, r)
	case "cmdline":
		pprof.Cmdline(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	default:
		pprof.Handler(name).ServeHTTP(w, r)
	}
}

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
	handle("POST "+PathPin, "pin", n.handlePin)
	handle("GET "+PathHealth, "health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.Handle("GET "+PathMetrics, promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	// Go's profiles (CPU, heap, goroutines), for the cluster's operators
	// only: a profile shows the process's internals and costs CPU.
	handle("GET "+PathDebugPprof, "pprof", func(w http.ResponseWriter, r *http.Request) {
		if n.requireToken(w, r) {
			servePprof(w, r)
		}
	})

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
	// Status is public, but a wrong token is still refused, as everywhere.
	if _, err := n.authorize(r); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n.Status())
}

// mapView is the map as this caller may see it, marked stale when this
// node has not caught up with the cluster.
func (n *Node) mapView(m *Map, authed bool) *Map {
	reason := n.notCaughtUp()
	if authed && reason == "" {
		return m
	}
	if authed {
		m = m.Clone()
	} else {
		m = m.Redact()
	}
	if reason != "" {
		m.Stale, m.StaleReason = true, reason
	}
	return m
}

func (n *Node) handleMap(w http.ResponseWriter, r *http.Request) {
	authed, err := n.authorize(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n.mapView(n.Map(), authed))
}

// nodesForwardTimeout bounds asking the leader for the node table.
const nodesForwardTimeout = 2 * time.Second

func (n *Node) handleNodes(w http.ResponseWriter, r *http.Request) {
	authed, err := n.authorize(r)
	if err != nil {
		writeError(w, err)
		return
	}
	// The leader knows heartbeat ages: ask it when it is someone else.
	var stale string
	if !n.IsLeader() && r.Header.Get(headerForwarded) == "" {
		leader, addr := n.Leader()
		if addr == "" {
			stale = "no leader known to this node; heartbeat ages unknown and the map may be old"
		} else {
			var out NodesResponse
			ctx, cancel := context.WithTimeout(r.Context(), nodesForwardTimeout)
			err := newAdminClient([]string{addr}, "", n.cfg.ClientTLS, n.peers).do(ctx, http.MethodGet, PathNodes, nil, nil, &out, forwardHeader(r))
			cancel()
			if err == nil {
				writeJSON(w, http.StatusOK, out)
				return
			}
			stale = fmt.Sprintf("could not ask the leader %s: %v; answered from this node's view (heartbeat ages unknown, the map may be old)", leader, err)
			n.log.Info("nodes: asking the leader failed; answering stale", "leader", addr, "err", err)
		}
	}
	resp := n.Nodes()
	if stale != "" {
		resp.Stale, resp.StaleReason = true, stale
	}
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
	writeJSON(w, http.StatusOK, n.mapView(m, authed))
}

// leaderWrite runs op here if this node leads, and otherwise forwards the
// request to the leader, bounded by ForwardTimeout. If raft elects another
// leader meanwhile (the old one stopped), the forward is abandoned and the
// request goes to the new one. If the leader does not answer, the caller
// hears which leader and why (*LeaderUnreachableError), and may retry: the
// other voters elect a new leader if it stays silent.
func (n *Node) leaderWrite(w http.ResponseWriter, r *http.Request, body any, op func(ctx context.Context) (any, error)) {
	var res any
	var err error
	for range 3 {
		res, err = op(r.Context())
		var nl *NotLeaderError
		if !errors.As(err, &nl) || nl.LeaderAdminAddr == "" || r.Header.Get(headerForwarded) != "" {
			break
		}
		var out json.RawMessage
		moved, ferr := n.forward(r, nl, body, &out)
		if ferr == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(out)
			return
		}
		if moved {
			n.log.Info("leadership moved while forwarding; trying the new leader", "old", nl.LeaderID)
			continue
		}
		if tryNext(ferr) {
			n.log.Warn("forwarding to the leader failed", "leader", nl.LeaderID, "addr", nl.LeaderAdminAddr, "err", ferr)
			ferr = &LeaderUnreachableError{LeaderID: nl.LeaderID, LeaderAddr: nl.LeaderAdminAddr, Cause: ferr}
		}
		err = ferr
		break
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// forward sends the request to the leader nl names, bounded by
// ForwardTimeout, and abandons it (moved) if raft's leader changes first.
func (n *Node) forward(r *http.Request, nl *NotLeaderError, body, out any) (moved bool, err error) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var leaderMoved atomic.Bool
	go func() {
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if id, _ := n.Leader(); id != nl.LeaderID && id != "" {
				leaderMoved.Store(true)
				cancel()
				return
			}
		}
	}()
	c := newAdminClient([]string{nl.LeaderAdminAddr}, "", n.cfg.ClientTLS, n.peers)
	err = c.doAttempt(ctx, n.cfg.ForwardTimeout, http.MethodPost, r.URL.Path, r.URL.Query(), body, out, forwardHeader(r))
	return err != nil && leaderMoved.Load(), err
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
	n.leaderWrite(w, r, req, func(ctx context.Context) (any, error) { return n.Join(ctx, req) })
}

func (n *Node) handleRemove(w http.ResponseWriter, r *http.Request) {
	if !n.requireToken(w, r) {
		return
	}
	id := NodeID(r.PathValue("id"))
	force := false
	if v := r.URL.Query().Get(queryForceLoseData); v != "" {
		var err error
		if force, err = strconv.ParseBool(v); err != nil {
			writeError(w, fmt.Errorf("%w: %s=%q", ErrBadRequest, queryForceLoseData, v))
			return
		}
	}
	n.leaderWrite(w, r, nil, func(ctx context.Context) (any, error) { return n.remove(ctx, id, force) })
}

func (n *Node) handleDrain(w http.ResponseWriter, r *http.Request) {
	if !n.requireToken(w, r) {
		return
	}
	id := NodeID(r.PathValue("id"))
	n.leaderWrite(w, r, nil, func(ctx context.Context) (any, error) { return n.Drain(ctx, id) })
}

func (n *Node) handlePin(w http.ResponseWriter, r *http.Request) {
	if !n.requireToken(w, r) {
		return
	}
	p, err := strconv.ParseUint(r.PathValue("p"), 10, 32)
	if err != nil {
		writeError(w, fmt.Errorf("%w: partition %q", ErrBadRequest, r.PathValue("p")))
		return
	}
	var req PinRequest
	if err := DecodeRequest(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	if !ValidNodeID(req.Node) {
		writeError(w, fmt.Errorf("%w: pin needs the owner's node id", ErrBadRequest))
		return
	}
	n.leaderWrite(w, r, req, func(ctx context.Context) (any, error) { return n.pin(ctx, uint32(p), req.Node) })
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

// handleSelfJoin tells a node that has no cluster state to join. Such a
// node holds no map yet, but joining binds it (and its region) to a
// cluster for good, so it must not obey whoever reaches its admin port
// first: a node started with the cluster's token accepts only that token;
// one started without accepts a caller that presents its join secret (in
// <data-dir>/join-secret on the node, or given at its start) and adopts
// the caller's token for the join, forgetting it if the cluster refuses.
func (n *Node) handleSelfJoin(w http.ResponseWriter, r *http.Request) {
	if n.joined.Load() {
		if n.requireToken(w, r) {
			writeError(w, fmt.Errorf("%w: node %s is already a cluster member", ErrBadRequest, n.id))
		}
		return
	}
	got := bearer(r)
	if got == "" {
		writeError(w, fmt.Errorf("%w: telling a node to join needs the cluster token", ErrUnauthorized))
		return
	}
	n.tokenMu.Lock()
	switch {
	case n.cfg.Token != "":
		if !TokensEqual(n.cfg.Token, got) {
			n.tokenMu.Unlock()
			n.log.Warn("refused a join order with another cluster's token", "remote", r.RemoteAddr)
			writeError(w, refuse(ErrUnauthorized, "cluster: node %s was started with its cluster's token and joins only with that token", n.id))
			return
		}
	case !TokensEqual(n.joinSecret, r.Header.Get(headerJoinSecret)):
		n.tokenMu.Unlock()
		n.log.Warn("refused a join order without this node's join secret", "remote", r.RemoteAddr)
		writeError(w, refuse(ErrJoinSecret, "cluster: node %s waits to be added and obeys only a caller with its join secret "+
			"(in <data-dir>/%s on that node, or the one it was started with): pass it with --join-secret-file",
			n.id, JoinSecretFile))
		return
	default:
		n.token = got
	}
	n.tokenMu.Unlock()
	var req SelfJoinRequest
	if err := DecodeRequest(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	if len(req.Members) == 0 {
		writeError(w, fmt.Errorf("%w: no member addresses", ErrBadRequest))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), selfJoinTimeout)
	defer cancel()
	m, err := n.joinVia(ctx, req.Members)
	if err != nil {
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
	resp := SelfJoinResponse{NodeID: n.id, ClusterID: m.ClusterID, Epoch: m.Epoch, Via: strings.Join(req.Members, ",")}
	if info, ok := m.Node(n.id); ok {
		resp.State = info.State
	}
	writeJSON(w, http.StatusOK, resp)
}
