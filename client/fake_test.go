package client

import (
	"sync"
	"testing"
	"time"
)

// fakeCluster is one namespace and one data store shared by the clients
// of a test, as a cluster is.
type fakeCluster struct {
	*Memory
	ns   *memNS
	data *memData
	log  *eventLog
	now  time.Time
	mu   sync.Mutex
}

func newFakeCluster() *fakeCluster {
	fc := &fakeCluster{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	fc.Memory = NewMemory(fc.clock)
	fc.ns, fc.data, fc.log = fc.Memory.ns, fc.Memory.data, &fc.Memory.log
	return fc
}

// clock is the test's clock: it moves only when the test says.
func (fc *fakeCluster) clock() time.Time {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.now
}

func (fc *fakeCluster) advance(d time.Duration) {
	fc.mu.Lock()
	fc.now = fc.now.Add(d)
	fc.mu.Unlock()
}

// client returns a new client of the fake cluster.
func (fc *fakeCluster) client(t testing.TB, mod ...func(*Config)) *Client {
	t.Helper()
	cfg := Config{Now: fc.clock, OpTimeout: 5 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	c := fc.Memory.Client(cfg)
	t.Cleanup(func() { c.Close() })
	return c
}
