package cluster

import "time"

// Admin API paths. Every node serves all of them; see docs/cluster.md.
const (
	PathStatus    = "/v1/status"
	PathMap       = "/v1/map"
	PathNodes     = "/v1/nodes"
	PathWatch     = "/v1/watch"
	PathJoin      = "/v1/join"              // a member admits a node (token)
	PathSelfJoin  = "/v1/self/join"         // an idle node is told to join (token)
	PathHeartbeat = "/v1/heartbeat"         // node to leader (token)
	PathRemove    = "/v1/nodes/{id}/remove" // ?force-lose-data=true
	PathDrain     = "/v1/nodes/{id}/drain"
	PathPin       = "/v1/partitions/{p}/pin" // the owner pins a partition (token)
	PathMetrics   = "/metrics"
	PathHealth    = "/healthz"
	// PathDebugPprof is the prefix of Go's profiles (net/http/pprof),
	// served to holders of the token.
	PathDebugPprof = "/debug/pprof/"

	// headerForwarded marks a request a follower forwarded to the leader,
	// so it is never forwarded twice.
	headerForwarded = "X-Octofs-Forwarded"
	// headerJoinSecret carries a waiting node's join secret (self join).
	headerJoinSecret = "X-Octofs-Join-Secret"
	// queryForceLoseData on remove removes a node that holds pinned data.
	queryForceLoseData = "force-lose-data"
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
	// CaughtUp is true when the node is in a cluster and in touch with its
	// leader, so the epoch and map it reports are current. Otherwise
	// NotCaughtUp says why (no leader in reach, not joined, removed).
	CaughtUp    bool   `json:"caught_up"`
	NotCaughtUp string `json:"not_caught_up,omitempty"`
	// Pinned is how many partitions hold file-system data on their owner.
	Pinned int `json:"pinned"`
}

// NodeStatus is one row of GET /v1/nodes.
type NodeStatus struct {
	NodeInfo
	// Suffrage is voter, nonvoter, or none (not in the raft configuration).
	Suffrage   string `json:"suffrage"`
	Partitions int    `json:"partitions"`
	// Pinned is how many of its partitions hold file-system data.
	Pinned int  `json:"pinned"`
	Leader bool `json:"leader,omitempty"`
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
	// Stale is set when a follower could not ask the leader and answered
	// from its own view (heartbeat ages unknown, the map possibly old);
	// StaleReason says why.
	Stale       bool   `json:"stale,omitempty"`
	StaleReason string `json:"stale_reason,omitempty"`
}

// JoinRequest asks a member to admit a node (POST /v1/join).
type JoinRequest struct {
	ID        NodeID           `json:"id"`
	AdminAddr string           `json:"admin_addr"`
	RaftAddr  string           `json:"raft_addr"`
	RDMAAddr  string           `json:"rdma_addr,omitempty"`
	Region    RegionDescriptor `json:"region"`
	// CSR is the joining node's certificate request (PEM) for raft's
	// mutual TLS; the leader answers with a certificate from the cluster CA.
	CSR string `json:"csr,omitempty"`
}

// JoinResponse answers a join: the map that admits the node and, for a
// request with a CSR, its raft credentials.
type JoinResponse struct {
	Map *Map `json:"map"`
	// Certificate is the node's certificate (PEM), signed by the cluster CA.
	Certificate string `json:"certificate,omitempty"`
	// CA is the cluster CA's certificate and key (PEM): every member can
	// issue certificates to the nodes it admits while it leads.
	CA    string `json:"ca,omitempty"`
	CAKey string `json:"ca_key,omitempty"`
}

// nodeInfo is the map entry the request describes; the FSM sets its state.
func (r JoinRequest) nodeInfo() NodeInfo {
	return NodeInfo{ID: r.ID, AdminAddr: r.AdminAddr, RaftAddr: r.RaftAddr, RDMAAddr: r.RDMAAddr, Region: r.Region}
}

// SelfJoinRequest tells an idle node which members to join (POST /v1/self/join).
type SelfJoinRequest struct {
	Members []string `json:"members"`
}

// SelfJoinResponse says which cluster a waiting node joined.
type SelfJoinResponse struct {
	NodeID    NodeID    `json:"node_id"`
	ClusterID string    `json:"cluster_id"`
	State     NodeState `json:"state"`
	Epoch     uint64    `json:"epoch"`
	// Via is the member that admitted it.
	Via string `json:"via"`
}

// PinRequest pins a partition to the node that owns it (POST /v1/partitions/{p}/pin).
type PinRequest struct {
	Node NodeID `json:"node"`
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
	// Code is machine-readable: no_leader, not_leader, leader_unreachable,
	// unauthorized, join_secret, unknown_node, node_exists, node_removed,
	// no_eligible_nodes, bad_transition, address_in_use, not_owner,
	// holds_data, bad_request, not_initialized, unsupported_version,
	// closed, internal (see errorCodes).
	Code string `json:"code"`
	// LeaderID and LeaderAddr are set with not_leader.
	LeaderID   NodeID `json:"leader_id,omitempty"`
	LeaderAddr string `json:"leader_addr,omitempty"`
	// Partition, Owner and Requester are set with not_owner.
	Partition *uint32 `json:"partition,omitempty"`
	Owner     NodeID  `json:"owner,omitempty"`
	Requester NodeID  `json:"requester,omitempty"`
}

// DefaultWatchWait is how long a watch long-poll waits for a new epoch.
const DefaultWatchWait = 30 * time.Second

// selfJoinTimeout bounds how long a waiting node tries to join when told to.
const selfJoinTimeout = 30 * time.Second
