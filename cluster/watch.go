package cluster

import (
	"context"
	"log/slog"
	"time"
)

// MapSource is what the layers above (metadata, dataplane, FUSE) need from
// the control plane: the current map and a way to wait for a newer one.
// Node implements it in-process; RemoteMap implements it over the admin API.
type MapSource interface {
	// Current returns the newest map known (immutable; may be uninitialized).
	Current() *Map
	// Watch returns the first map with an epoch above since, waiting until
	// ctx ends (then it returns the current map and ctx's error).
	Watch(ctx context.Context, since uint64) (*Map, error)
}

var (
	_ MapSource = (*Node)(nil)
	_ MapSource = (*RemoteMap)(nil)
)

// Current returns the node's current map.
func (n *Node) Current() *Map { return n.Map() }

// RemoteMap follows the cluster map over the admin API with long-polls
// (GET /v1/watch?epoch=N), failing over between the client's servers.
// With the cluster token the map includes region keys.
type RemoteMap struct {
	c    *AdminClient
	wait time.Duration
	log  *slog.Logger
	maps mapCell

	cancel context.CancelFunc
	done   chan struct{}
}

// WatchRemote fetches the map (waiting until some server answers or ctx
// ends) and keeps following it in the background until Close. wait is the
// long-poll duration (0: DefaultWatchWait).
func WatchRemote(ctx context.Context, c *AdminClient, wait time.Duration, log *slog.Logger) (*RemoteMap, error) {
	if wait <= 0 {
		wait = DefaultWatchWait
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var m *Map
	backoff := 50 * time.Millisecond
	for {
		var err error
		if m, err = c.Map(ctx); err == nil {
			break
		}
		if !sleepCtx(ctx, backoff) {
			return nil, err
		}
		backoff = min(2*backoff, time.Second)
	}
	bg, cancel := context.WithCancel(context.Background())
	r := &RemoteMap{c: c, wait: wait, log: log, maps: newMapCell(m), cancel: cancel, done: make(chan struct{})}
	go r.follow(bg)
	return r, nil
}

func (r *RemoteMap) follow(ctx context.Context) {
	defer close(r.done)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		since := r.Current().Epoch
		m, err := r.c.Watch(ctx, since, r.wait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Debug("map watch failed; retrying", "err", err, "in", backoff)
			sleepCtx(ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		r.offer(m)
	}
}

// offer publishes m if it is newer than what we have. Epochs only grow, so
// an older answer (from a lagging server) is ignored. Only follow calls it,
// so the check and the set need no common lock.
func (r *RemoteMap) offer(m *Map) {
	if m.Epoch > r.Current().Epoch {
		r.maps.set(m)
	}
}

// Current returns the newest map seen.
func (r *RemoteMap) Current() *Map {
	m, _ := r.maps.current()
	return m
}

// Watch returns the first map with an epoch above since.
func (r *RemoteMap) Watch(ctx context.Context, since uint64) (*Map, error) {
	return r.maps.wait(ctx, since, r.done)
}

// Close stops following.
func (r *RemoteMap) Close() {
	r.cancel()
	<-r.done
	r.c.CloseIdleConnections()
}
