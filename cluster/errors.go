package cluster

import (
	"errors"
	"fmt"
)

// Sentinel errors. Each is wrapped with detail and checked with errors.Is;
// the admin API carries them across HTTP as error codes (see apiError).
var (
	// ErrNotLeader: the call must run on the leader and this node is not it.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrNoLeader: no leader is known yet (election in progress or no quorum).
	ErrNoLeader = errors.New("cluster: no leader yet; wait for the election or check that a majority of voters is running")
	// ErrUnauthorized: the request had no token or the wrong one.
	ErrUnauthorized = errors.New("cluster: missing or wrong cluster token; pass --token, --token-file or OCTOFS_TOKEN (the token is in <data-dir>/token on any node)")
	// ErrUnknownNode: the node id is not in the map.
	ErrUnknownNode = errors.New("cluster: unknown node; list the nodes with `octoctl nodes`")
	// ErrNodeExists: a different node already uses this id.
	ErrNodeExists = errors.New("cluster: a node with this id already exists; choose another --node-id")
	// ErrNodeRemoved: the node id was removed and cannot come back.
	ErrNodeRemoved = errors.New("cluster: node was removed from the cluster; wipe its data directory and join with a new --node-id")
	// ErrNoEligibleNodes: the change would leave no node to own partitions.
	ErrNoEligibleNodes = errors.New("cluster: no node left to own the partitions; add a node before draining or removing the last one")
	// ErrBadTransition: the node cannot move from its state to the requested one.
	ErrBadTransition = errors.New("cluster: invalid node state transition")
	// ErrNotInitialized: the map has not been created yet (epoch 0).
	ErrNotInitialized = errors.New("cluster: cluster map not initialized yet; wait for the first leader")
	// ErrAlreadyInitialized: an init command reached an initialized map.
	ErrAlreadyInitialized = errors.New("cluster: cluster map already initialized")
	// ErrUnknownCommand: an FSM command type this version does not know.
	ErrUnknownCommand = errors.New("cluster: unknown map command")
	// ErrUnsupportedVersion: a command or snapshot of a version this build cannot read.
	ErrUnsupportedVersion = errors.New("cluster: unsupported format version; upgrade octofs on this node")
	// ErrMalformed: bytes that do not decode into a command, snapshot or message.
	ErrMalformed = errors.New("cluster: malformed data")
	// ErrNoState: the data directory holds no cluster state and the node was
	// told neither to bootstrap nor to join.
	ErrNoState = errors.New("cluster: no cluster state in the data directory")
	// ErrUnreachable: no admin server answered.
	ErrUnreachable = errors.New("cluster: cannot reach the admin server; check --server (or OCTOFS_ADMIN) and that `octofs serve` runs there")
	// ErrClosed: the node is shut down.
	ErrClosed = errors.New("cluster: node is shut down")
	// ErrBadRequest: the request is invalid.
	ErrBadRequest = errors.New("cluster: bad request")
)

// NotLeaderError is returned by leader-only calls on a follower. It names the
// leader when one is known, so callers can retry there.
type NotLeaderError struct {
	LeaderID        NodeID
	LeaderAdminAddr string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderAdminAddr == "" {
		return ErrNoLeader.Error()
	}
	return fmt.Sprintf("cluster: not the leader; the leader is %s at %s", e.LeaderID, e.LeaderAdminAddr)
}

// Unwrap makes errors.Is(err, ErrNotLeader) true, and ErrNoLeader when no
// leader is known.
func (e *NotLeaderError) Unwrap() error {
	if e.LeaderAdminAddr == "" {
		return ErrNoLeader
	}
	return ErrNotLeader
}
