package rdma

import (
	"errors"
	"fmt"
)

// Sentinel errors. Providers wrap them with %w; callers test with errors.Is.
var (
	// ErrInvalid is a bad argument (EINVAL): an unknown opcode, too many
	// SGEs, inline data over the limit, an atomic whose local buffer is not
	// one 8-byte SGE, an access combination verbs forbids.
	ErrInvalid = errors.New("rdma: invalid argument")
	// ErrQueueFull means a work queue has no room (ENOMEM from post).
	ErrQueueFull = errors.New("rdma: work queue full")
	// ErrBadState means the queue pair's state does not allow the call,
	// such as posting a send before RTS or an illegal transition.
	ErrBadState = errors.New("rdma: invalid queue pair state")
	// ErrBusy means a resource is still in use (EBUSY).
	ErrBusy = errors.New("rdma: resource busy")
	// ErrCQOverrun means completions arrived while the CQ was full; the
	// CQ and its queue pairs are in error.
	ErrCQOverrun = errors.New("rdma: completion queue overrun")
	// ErrClosed means the object was closed or destroyed.
	ErrClosed = errors.New("rdma: closed")
	// ErrCompletion is wrapped by every *CompletionError.
	ErrCompletion = errors.New("rdma: work request failed")
	// ErrNoDevice means no device of the name or provider exists here.
	ErrNoDevice = errors.New("rdma: no such device")
	// ErrUnsupported means the provider or device cannot do this.
	ErrUnsupported = errors.New("rdma: not supported")
	// ErrProtocol means a peer sent something malformed; the connection
	// carrying it is closed.
	ErrProtocol = errors.New("rdma: protocol error")
	// ErrRejected means the peer refused a connection request.
	ErrRejected = errors.New("rdma: connection rejected")
)

// PostError reports the first work request that PostSend or PostRecv
// refused. Requests before Index were posted; it and those after were not.
type PostError struct {
	Index int
	Err   error
}

func (e *PostError) Error() string { return fmt.Sprintf("work request %d: %v", e.Index, e.Err) }
func (e *PostError) Unwrap() error { return e.Err }

// CompletionError is a failed work completion as an error.
type CompletionError struct {
	ID     uint64
	QPN    uint32
	Status WCStatus
}

func (e *CompletionError) Error() string {
	return fmt.Sprintf("rdma: work request %d on QP %d: %v", e.ID, e.QPN, e.Status)
}

// Is makes errors.Is(err, ErrCompletion) true for every CompletionError.
func (e *CompletionError) Is(target error) bool { return target == ErrCompletion }
