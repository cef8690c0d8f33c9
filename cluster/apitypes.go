package cluster

import "time"

// Admin API paths. Every node serves all of them; see docs/cluster.md.
const (
	PathStatus    = "/v1/status"
	PathMap       = "/v1/map"
	PathNodes     = "/v1/nodes"
	PathWatch     = "/v1/watch"
	PathJoin      = "/v1/join"      // a member admits a node (token)
	PathSelfJoin  = "/v1/self/join" // an idle node is told to join (token)
	PathHeartbeat = "/v1/heartbeat" // node to leader (token)
	PathRemove    = "/v1/nodes/{id}/remove"
	PathDrain     = "/v1/nodes/{id}/drain"
	PathMetrics   = "/metrics"
	PathHealth    = "/healthz"

	// headerForwarded marks a request a follower forwarded to the leader,
	// so it is never forwarded twice.
	headerForwarded = "X-Octofs-Forwarded"
)

// Status is a node's view of the cluster (GET /v1/status).
type Status struct {
	ClusterID string `json:"cluster_id"`
	NodeID    NodeID `json:"node_id"`
	// RaftState is Leader, Follower, Candidate or Shutdown.
	RaftState string `json:"raft_state"`
	// NodeState is this node's state in the map ("" before it is in it).
	NodeState       NodeState         `json:"node_state,omitempty"`
	Leader          NodeID            `json:"leader,omitempty"`
	LeaderAdminAddr string            `json:"leader_admin_addr,omitempty"`
	Term            uint64            `json:"term"`
	CommitIndex     uint64            `json:"commit_index"`
	AppliedIndex    uint64            `json:"applied_index"`
	Epoch           uint64            `json:"epoch"`
	Partitions      int               `json:"partitions"`
	Voters          []NodeID          `json:"voters"`
	NonVoters       []NodeID          `json:"nonvoters"`
	NodeStates      map[NodeState]int `json:"node_states"`
	// Joined is false on a node waiting to be added to a cluster.
	Joined bool `json:"joined"`
}

// NodeStatus is one row of GET /v1/nodes.
type NodeStatus struct {
	NodeInfo
	// Suffrage is voter, nonvoter, or none (not in the raft configuration).
	Suffrage   string `json:"suffrage"`
	Partitions int    `json:"partitions"`
	Leader     bool   `json:"leader,omitempty"`
	// HeartbeatAgeMillis is how long ago the leader heard from the node;
	// -1 when the answering node is not the leader and does not know.
	HeartbeatAgeMillis int64 `json:"heartbeat_age_ms"`
}

// NodesResponse is the body of GET /v1/nodes.
type NodesResponse struct {
	Epoch uint64 `json:"epoch"`
	// From is the node that answered (the leader, when one is known).
	From  NodeID       `json:"from"`
	Nodes []NodeStatus `json:"nodes"`
}

// JoinRequest asks a member to admit a node (POST /v1/join).
type JoinRequest struct {
	ID        NodeID           `json:"id"`
	AdminAddr string           `json:"admin_addr"`
	RaftAddr  string           `json:"raft_addr"`
	RDMAAddr  string           `json:"rdma_addr,omitempty"`
	Region    RegionDescriptor `json:"region"`
}

// nodeInfo is the map entry the request describes; the FSM sets its state.
func (r JoinRequest) nodeInfo() NodeInfo {
	return NodeInfo{ID: r.ID, AdminAddr: r.AdminAddr, RaftAddr: r.RaftAddr, RDMAAddr: r.RDMAAddr, Region: r.Region}
}

// SelfJoinRequest tells an idle node which members to join (POST /v1/self/join).
type SelfJoinRequest struct {
	Members []string `json:"members"`
}

// HeartbeatRequest is a node's periodic report to the leader.
type HeartbeatRequest struct {
	JoinRequest
	// AppliedIndex is the node's raft applied index, for the caught-up check.
	AppliedIndex uint64 `json:"applied_index"`
	Epoch        uint64 `json:"epoch"`
}

// HeartbeatResponse answers a heartbeat.
type HeartbeatResponse struct {
	Epoch uint64    `json:"epoch"`
	State NodeState `json:"state"`
}

// apiError is the JSON body of every error response.
type apiError struct {
	Error string `json:"error"`
	// Code is machine-readable: no_leader, not_leader, unauthorized,
	// unknown_node, node_exists, node_removed, no_eligible_nodes,
	// bad_transition, bad_request, not_initialized, unsupported_version,
	// closed, internal (see errorCodes).
	Code string `json:"code"`
	// LeaderID and LeaderAddr are set with not_leader.
	LeaderID   NodeID `json:"leader_id,omitempty"`
	LeaderAddr string `json:"leader_addr,omitempty"`
}

// DefaultWatchWait is how long a watch long-poll waits for a new epoch.
const DefaultWatchWait = 30 * time.Second
