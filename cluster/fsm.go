package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// SnapshotVersion is the version of the snapshot format this build writes.
// Version 2 added the raft index of the map and the map's pinned
// partitions; version 1 snapshots still load (with nothing pinned).
const SnapshotVersion = 2

const snapshotFormat = "octofs-cluster-map"

// snapshotFile is the on-disk snapshot: the map with a format name and
// version, and the raft index of the last command applied to it. The same
// format holds the FSM's saved map (see fsm).
type snapshotFile struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Index is the raft index of the last command applied to Map (0: not
	// known, as in version 1).
	Index uint64 `json:"index,omitempty"`
	Map   *Map   `json:"map"`
}

// EncodeSnapshot encodes m in the snapshot format.
func EncodeSnapshot(m *Map) ([]byte, error) { return encodeSnapshot(m, 0) }

func encodeSnapshot(m *Map, index uint64) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(snapshotFile{Format: snapshotFormat, Version: SnapshotVersion, Index: index, Map: m}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeSnapshot decodes and validates a snapshot.
func DecodeSnapshot(b []byte) (*Map, error) {
	m, _, err := decodeSnapshot(b)
	return m, err
}

func decodeSnapshot(b []byte) (*Map, uint64, error) {
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, 0, fmt.Errorf("%w: snapshot: %v", ErrMalformed, err)
	}
	if head.Format != snapshotFormat {
		return nil, 0, fmt.Errorf("%w: snapshot format %q", ErrMalformed, head.Format)
	}
	if head.Version < 1 || head.Version > SnapshotVersion {
		return nil, 0, fmt.Errorf("%w: snapshot version %d, this build reads 1 to %d", ErrUnsupportedVersion, head.Version, SnapshotVersion)
	}
	var s snapshotFile
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		return nil, 0, fmt.Errorf("%w: snapshot: %v", ErrMalformed, err)
	}
	if d.More() {
		return nil, 0, fmt.Errorf("%w: trailing data after snapshot", ErrMalformed)
	}
	if s.Map == nil {
		return nil, 0, fmt.Errorf("%w: snapshot without map", ErrMalformed)
	}
	if s.Version == 1 && (s.Index != 0 || len(s.Map.Pinned) != 0) {
		return nil, 0, fmt.Errorf("%w: version 1 snapshot with version 2 fields", ErrMalformed)
	}
	if s.Map.Redacted || s.Map.Stale || s.Map.StaleReason != "" {
		return nil, 0, fmt.Errorf("%w: redacted or stale map in snapshot", ErrMalformed)
	}
	if err := s.Map.Validate(); err != nil {
		return nil, 0, err
	}
	return s.Map, s.Index, nil
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
//
// It saves every map it publishes, with the raft index of the command that
// made it, to statePath (written and synced before the map is published),
// and loads it when the node starts. Raft restores the FSM from its latest
// snapshot and re-applies only the entries it learns are committed, which
// a node without quorum never learns; the saved map lets such a node show
// the newest map it ever applied, so a node's epoch never goes backwards
// across restarts. Entries at or below the saved index are skipped when
// raft re-applies them: they are committed, so they are already in it.
type fsm struct {
	log *slog.Logger
	mapCell
	// statePath is where the applied map is saved ("" keeps it in memory).
	statePath string
	// index is the raft index of the last command applied.
	index atomic.Uint64

	applyErrors   atomic.Uint64
	persistErrors atomic.Uint64
}

// mapStateFile is the FSM's saved map in the raft directory.
const mapStateFile = "map-state.json"

var _ raft.FSM = (*fsm)(nil)

func newFSM(log *slog.Logger) *fsm {
	return &fsm{log: log, mapCell: newMapCell(&Map{})}
}

// openFSM returns an FSM that saves its map at path, starting from the
// map saved there if there is one.
func openFSM(log *slog.Logger, path string) (*fsm, error) {
	f := newFSM(log)
	f.statePath = path
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: read the saved map: %w", err)
	}
	m, index, err := decodeSnapshot(b)
	if err != nil {
		return nil, fmt.Errorf("cluster: saved map %s: %w; remove the file to rebuild the map from raft", path, err)
	}
	f.mapCell.set(m)
	f.index.Store(index)
	log.Info("loaded the saved cluster map", "epoch", m.Epoch, "index", index)
	return f, nil
}

// publish saves m (made by the command at index) and then publishes it.
func (f *fsm) publish(m *Map, index uint64) {
	if f.statePath != "" {
		if err := f.save(m, index); err != nil {
			f.persistErrors.Add(1)
			f.log.Error("cannot save the cluster map; after a restart this node shows an older map until it catches up", "err", err)
		}
	}
	f.index.Store(index)
	f.set(m)
}

func (f *fsm) save(m *Map, index uint64) error {
	b, err := encodeSnapshot(m, index)
	if err != nil {
		return err
	}
	return writeFileSync(f.statePath, b)
}

// writeFileSync replaces path with b atomically and durably: a temporary
// file, synced, renamed over path, and the directory synced.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	fh, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fh.Write(b)
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// Apply applies one log entry. A command that does not decode or does not
// apply leaves the map unchanged and is returned as the entry's response
// (an error); every replica rejects it the same way, so the replicas stay
// identical.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	cur, _ := f.current()
	if l.Index <= f.index.Load() {
		// Raft re-applies committed entries after a restart; the saved map
		// already holds their effect.
		return cur
	}
	c, err := DecodeCommand(l.Data)
	if err == nil {
		var m *Map
		if m, err = applyCommand(cur, c); err == nil {
			if m == cur {
				f.index.Store(l.Index) // a no-op (pin of a pinned partition)
				return m
			}
			f.publish(m, l.Index)
			f.log.Debug("map changed", "epoch", m.Epoch, "command", c.Type, "index", l.Index)
			return m
		}
	}
	f.index.Store(l.Index)
	f.applyErrors.Add(1)
	f.log.Warn("map command refused; map unchanged", "index", l.Index, "err", err)
	return err
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	m, _ := f.current()
	return mapSnapshot{m: m, index: f.index.Load()}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	m, index, err := decodeSnapshot(b)
	if err != nil {
		f.log.Error("cannot restore snapshot", "err", err)
		return err
	}
	if cur := f.index.Load(); index != 0 && index <= cur {
		f.log.Info("snapshot is not newer than the saved map; keeping the saved map", "snapshot_index", index, "saved_index", cur, "epoch", m.Epoch)
		return nil
	}
	f.publish(m, index)
	f.log.Info("map restored from snapshot", "epoch", m.Epoch, "index", index)
	return nil
}

type mapSnapshot struct {
	m     *Map
	index uint64
}

func (s mapSnapshot) Persist(sink raft.SnapshotSink) error {
	b, err := encodeSnapshot(s.m, s.index)
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
