package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// SnapshotVersion is the version of the snapshot format.
const SnapshotVersion = 1

const snapshotFormat = "octofs-cluster-map"

// snapshotFile is the on-disk snapshot: the map with a format name and version.
type snapshotFile struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Map     *Map   `json:"map"`
}

// EncodeSnapshot encodes m in the snapshot format.
func EncodeSnapshot(m *Map) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(snapshotFile{Format: snapshotFormat, Version: SnapshotVersion, Map: m}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeSnapshot decodes and validates a snapshot.
func DecodeSnapshot(b []byte) (*Map, error) {
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: snapshot: %v", ErrMalformed, err)
	}
	if head.Format != snapshotFormat {
		return nil, fmt.Errorf("%w: snapshot format %q", ErrMalformed, head.Format)
	}
	if head.Version != SnapshotVersion {
		return nil, fmt.Errorf("%w: snapshot version %d, this build reads %d", ErrUnsupportedVersion, head.Version, SnapshotVersion)
	}
	var s snapshotFile
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: snapshot: %v", ErrMalformed, err)
	}
	if d.More() {
		return nil, fmt.Errorf("%w: trailing data after snapshot", ErrMalformed)
	}
	if s.Map == nil {
		return nil, fmt.Errorf("%w: snapshot without map", ErrMalformed)
	}
	if s.Map.Redacted {
		return nil, fmt.Errorf("%w: redacted map in snapshot", ErrMalformed)
	}
	if err := s.Map.Validate(); err != nil {
		return nil, err
	}
	return s.Map, nil
}

// mapCell publishes an immutable map by pointer swap; changed is closed and
// replaced on every change so that watchers wake up. The FSM and RemoteMap
// both hold their map in one.
type mapCell struct {
	mu      sync.Mutex
	cur     *Map
	changed chan struct{}
}

func newMapCell(m *Map) mapCell { return mapCell{cur: m, changed: make(chan struct{})} }

// current returns the map and a channel closed when it is replaced.
func (c *mapCell) current() (*Map, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur, c.changed
}

func (c *mapCell) set(m *Map) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = m
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait returns the first map with an epoch above since. When ctx ends it
// returns the current map and ctx's error; when closed is closed, the
// current map and ErrClosed.
func (c *mapCell) wait(ctx context.Context, since uint64, closed <-chan struct{}) (*Map, error) {
	for {
		m, changed := c.current()
		if m.Epoch > since {
			return m, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return m, ctx.Err()
		case <-closed:
			return m, ErrClosed
		}
	}
}

// fsm is the raft state machine holding the cluster map.
type fsm struct {
	log *slog.Logger
	mapCell

	applyErrors atomic.Uint64
}

var _ raft.FSM = (*fsm)(nil)

func newFSM(log *slog.Logger) *fsm {
	return &fsm{log: log, mapCell: newMapCell(&Map{})}
}

// Apply applies one log entry. A command that does not decode or does not
// apply leaves the map unchanged and is returned as the entry's response
// (an error); every replica rejects it the same way, so the replicas stay
// identical.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	c, err := DecodeCommand(l.Data)
	if err == nil {
		var m *Map
		cur, _ := f.current()
		if m, err = applyCommand(cur, c); err == nil {
			f.set(m)
			f.log.Debug("map changed", "epoch", m.Epoch, "command", c.Type, "index", l.Index)
			return m
		}
	}
	f.applyErrors.Add(1)
	f.log.Warn("map command refused; map unchanged", "index", l.Index, "err", err)
	return err
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	m, _ := f.current()
	return mapSnapshot{m}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	m, err := DecodeSnapshot(b)
	if err != nil {
		f.log.Error("cannot restore snapshot", "err", err)
		return err
	}
	f.set(m)
	f.log.Info("map restored from snapshot", "epoch", m.Epoch)
	return nil
}

type mapSnapshot struct{ m *Map }

func (s mapSnapshot) Persist(sink raft.SnapshotSink) error {
	b, err := EncodeSnapshot(s.m)
	if err == nil {
		_, err = sink.Write(b)
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (mapSnapshot) Release() {}
