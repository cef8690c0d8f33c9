package cluster

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Each is wrapped with detail and checked with errors.Is;
// the admin API carries them across HTTP as error codes (see apiError).
var (
	// ErrNotLeader: the call must run on the leader and this node is not it.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrJoinSecret: a waiting node refused to be told to join without its
	// join secret. It matches ErrUnauthorized too.
	ErrJoinSecret = fmt.Errorf("%w: the waiting node's join secret is missing or wrong", ErrUnauthorized)
	// ErrLeaderUnreachable: a follower could not reach the leader to forward
	// a request (see LeaderUnreachableError).
	ErrLeaderUnreachable = errors.New("cluster: the leader does not answer")
	// ErrNoLeader: no leader is known yet (election in progress or no quorum).
	ErrNoLeader = errors.New("cluster: no leader yet; wait for the election or check that a majority of voters is running")
	// ErrUnauthorized: the request had no token or the wrong one.
	// Its text names no flag: each program adds how to give the token.
	ErrUnauthorized = errors.New("cluster: missing or wrong cluster token (the token is in <data-dir>/token on any member)")
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
	// Like ErrUnauthorized, its text names no flag.
	ErrUnreachable = errors.New("cluster: cannot reach the admin server")
	// ErrClosed: the node is shut down.
	ErrClosed = errors.New("cluster: node is shut down")
	// ErrBadRequest: the request is invalid.
	ErrBadRequest = errors.New("cluster: bad request")
	// ErrAddressInUse: a join or update names an address another member uses.
	ErrAddressInUse = errors.New("cluster: address used by another member")
	// ErrNotOwner: a partition is owned by another node than the caller
	// (see NotOwnerError for the owner).
	ErrNotOwner = errors.New("cluster: partition owned by another node")
	// ErrHoldsData: the node owns pinned partitions, whose data cannot move
	// yet (see HoldsDataError).
	ErrHoldsData = errors.New("cluster: node holds file-system data")
	// ErrNotCaughtUp: the answering node cannot reach a leader, so its
	// view of the cluster may be old.
	ErrNotCaughtUp = errors.New("cluster: node has not caught up with the cluster")
	// ErrDataDirInUse: another process holds the data directory.
	ErrDataDirInUse = errors.New("cluster: data directory in use")
)

// refusal is an error whose text is its message alone but that matches a
// sentinel: for refusals whose sentinel text would mislead (a waiting node
// refusing a caller without its join secret is an ErrUnauthorized, but not
// about the cluster token).
type refusal struct {
	msg string
	is  error
}

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return e.is }

func refuse(is error, format string, a ...any) error {
	return &refusal{msg: fmt.Sprintf(format, a...), is: is}
}

// LeaderUnreachableError is a follower's answer when forwarding to the
// leader failed: it names the leader and the cause. The request was not
// applied by this leader unless it comes back, and the other voters elect
// a new one if it stays silent; clients retry.
type LeaderUnreachableError struct {
	LeaderID   NodeID
	LeaderAddr string
	Cause      error
}

func (e *LeaderUnreachableError) Error() string {
	cause := fmt.Sprint(e.Cause)
	var ue *unreachableError
	if errors.As(e.Cause, &ue) {
		cause = strings.Join(ue.causes, "; ")
	}
	return fmt.Sprintf("cluster: the leader %s at %s does not answer (%s); the other voters elect a new leader if it stays silent: retry in a few seconds",
		e.LeaderID, e.LeaderAddr, cause)
}

// Unwrap makes errors.Is(err, ErrLeaderUnreachable) true.
func (e *LeaderUnreachableError) Unwrap() error { return ErrLeaderUnreachable }

// NotOwnerError refuses a partition operation by a node that does not own
// the partition; it names the owner so the caller can reload its map.
type NotOwnerError struct {
	Partition uint32
	Owner     NodeID
	Requester NodeID
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("cluster: partition %d is owned by %s, not %s; reload the map and send the request to %s", e.Partition, e.Owner, e.Requester, e.Owner)
}

// Unwrap makes errors.Is(err, ErrNotOwner) true.
func (e *NotOwnerError) Unwrap() error { return ErrNotOwner }

// HoldsDataError refuses to drain or remove a node that owns pinned
// partitions: their file-system data lives only on that node and
// partitions cannot move with their data yet.
type HoldsDataError struct {
	Node       NodeID
	Partitions int
}

func (e *HoldsDataError) Error() string {
	return fmt.Sprintf("cluster: node %s holds file-system data in %d partitions; moving partitions with their data is not built yet; "+
		"keep %s in the cluster (restart it if it is down), or, if it is gone for good, remove it with "+
		"`octoctl remove %s --force-lose-data`, which loses the files stored in those %d partitions",
		e.Node, e.Partitions, e.Node, e.Node, e.Partitions)
}

// Unwrap makes errors.Is(err, ErrHoldsData) true.
func (e *HoldsDataError) Unwrap() error { return ErrHoldsData }

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
