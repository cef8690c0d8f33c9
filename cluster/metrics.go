package cluster

import (
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics is a node's Prometheus registry. It is per node (no global
// registry), so several nodes can live in one test process.
type metrics struct {
	reg           *prometheus.Registry
	leaderChanges prometheus.Counter
	heartbeats    prometheus.Counter
	markedDown    prometheus.Counter
	requests      *prometheus.CounterVec
}

func newMetrics(n *Node) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "octofs_cluster_leadership_won_total", Help: "Times this node became raft leader.",
		}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "octofs_cluster_heartbeats_received_total", Help: "Heartbeats received while leader.",
		}),
		markedDown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "octofs_cluster_nodes_marked_down_total", Help: "Nodes this leader marked down for silence.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "octofs_admin_requests_total", Help: "Admin API requests by route and status code.",
		}, []string{"route", "code"}),
	}
	m.reg.MustRegister(m.leaderChanges, m.heartbeats, m.markedDown, m.requests,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "octofs_cluster_map_commands_refused_total", Help: "FSM commands refused (map unchanged).",
		}, func() float64 { return float64(n.fsm.applyErrors.Load()) }),
		&stateCollector{n: n},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// stateCollector reads raft and map state at scrape time, so the gauges
// are never stale.
type stateCollector struct{ n *Node }

var (
	descEpoch      = prometheus.NewDesc("octofs_cluster_epoch", "Epoch of this node's cluster map.", nil, nil)
	descRaftState  = prometheus.NewDesc("octofs_raft_state", "1 for this node's current raft state.", []string{"state"}, nil)
	descTerm       = prometheus.NewDesc("octofs_raft_term", "Current raft term.", nil, nil)
	descCommit     = prometheus.NewDesc("octofs_raft_commit_index", "Raft commit index.", nil, nil)
	descApplied    = prometheus.NewDesc("octofs_raft_applied_index", "Raft applied index.", nil, nil)
	descLeader     = prometheus.NewDesc("octofs_cluster_is_leader", "1 if this node leads and serves writes.", nil, nil)
	descNodes      = prometheus.NewDesc("octofs_cluster_nodes", "Nodes in the map by state.", []string{"state"}, nil)
	descSuffrage   = prometheus.NewDesc("octofs_raft_servers", "Raft servers by suffrage.", []string{"suffrage"}, nil)
	descPartitions = prometheus.NewDesc("octofs_cluster_partitions_owned", "Partitions owned per node.", []string{"node"}, nil)
	descPinned     = prometheus.NewDesc("octofs_cluster_partitions_pinned", "Pinned partitions (holding file-system data) per node.", []string{"node"}, nil)
	descCaughtUp   = prometheus.NewDesc("octofs_cluster_caught_up", "1 if this node is in touch with a leader, so its map is current.", nil, nil)
	descRaftConns  = prometheus.NewDesc("octofs_raft_conns", "Inbound raft connections by state.", []string{"state"}, nil)
	descRaftRefuse = prometheus.NewDesc("octofs_raft_conns_closed_total", "Inbound raft connections refused or closed, by reason.", []string{"reason"}, nil)
	descSaveErrs   = prometheus.NewDesc("octofs_cluster_map_save_errors_total", "Failures to save the applied map to the data directory.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEpoch, descRaftState, descTerm, descCommit, descApplied, descLeader, descNodes, descSuffrage, descPartitions,
		descPinned, descCaughtUp, descRaftConns, descRaftRefuse, descSaveErrs} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	m := n.Map()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	g(descEpoch, float64(m.Epoch))
	state := n.raftState()
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if s == state {
			v = 1
		}
		g(descRaftState, v, s.String())
	}
	g(descTerm, float64(n.raft.CurrentTerm()))
	g(descCommit, float64(n.raft.CommitIndex()))
	g(descApplied, float64(n.raft.AppliedIndex()))
	leader := 0.0
	if n.IsLeader() {
		leader = 1
	}
	g(descLeader, leader)
	states := map[NodeState]int{}
	for _, info := range m.Nodes {
		states[info.State]++
	}
	for _, s := range []NodeState{StateJoining, StateUp, StateDown, StateDraining, StateRemoved} {
		g(descNodes, float64(states[s]), string(s))
	}
	v, nv := n.suffrages()
	g(descSuffrage, float64(len(v)), "voter")
	g(descSuffrage, float64(len(nv)), "nonvoter")
	for id, cnt := range m.PartitionCounts() {
		g(descPartitions, float64(cnt), string(id))
	}
	for id, cnt := range m.PinnedCounts() {
		g(descPinned, float64(cnt), string(id))
	}
	caught := 0.0
	if n.notCaughtUp() == "" {
		caught = 1
	}
	g(descCaughtUp, caught)
	authed, handshaking := n.stream.openConns()
	g(descRaftConns, float64(authed), "authenticated")
	g(descRaftConns, float64(handshaking), "handshaking")
	st := &n.stream.stats
	for reason, v := range map[string]uint64{
		"busy": st.refusedBusy.Load(), "handshake_failed": st.failedHandshakes.Load(),
		"evicted": st.evicted.Load(), "idle": st.idleClosed.Load(),
	} {
		ch <- prometheus.MustNewConstMetric(descRaftRefuse, prometheus.CounterValue, float64(v), reason)
	}
	ch <- prometheus.MustNewConstMetric(descSaveErrs, prometheus.CounterValue, float64(n.fsm.persistErrors.Load()))
}
