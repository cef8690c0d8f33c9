package rpc

import (
	"errors"
	"fmt"
)

// Sentinel errors. Calls return them wrapped; test with errors.Is.
var (
	// ErrTimeout: the call's context ended before its reply arrived. The
	// call may or may not have executed; retry with the same request id.
	// The error also wraps the context's error.
	ErrTimeout = errors.New("rpc: call timed out; it may or may not have executed (retry with the same request id)")
	// ErrClosed: Close was called on this side.
	ErrClosed = errors.New("rpc: closed")
	// ErrBroken: the connection broke (the peer closed it or died, the
	// transport failed, or a side broke the protocol). Every call in flight
	// fails with it at once; each may or may not have executed. Dial again
	// (Pool does) and retry with the same request id.
	ErrBroken = errors.New("rpc: connection broken; calls in flight may or may not have executed (dial again and retry with the same request id)")
	// ErrTooLarge: a request or reply exceeds a side's MaxMessage.
	ErrTooLarge = errors.New("rpc: message too large")
	// ErrUnknownOp: the server has no handler for the op.
	ErrUnknownOp = errors.New("rpc: unknown op")
	// ErrBusy: the server had no room for the call; retry later. A
	// handler may return it (wrapped) to answer StatusBusy.
	ErrBusy = errors.New("rpc: server busy")
	// ErrShuttingDown: the server is closing; call another node or later.
	ErrShuttingDown = errors.New("rpc: server shutting down")
	// ErrHandler: the handler returned an error; the StatusError carries
	// its message.
	ErrHandler = errors.New("rpc: handler failed")
	// ErrProtocol: a peer sent something malformed. The connection that
	// carried it is closed (calls on it fail with ErrBroken).
	ErrProtocol = errors.New("rpc: protocol violation")
	// ErrConfig: a configuration is invalid.
	ErrConfig = errors.New("rpc: invalid configuration")
	// ErrNotInline is what an inline handler (Server.HandleInline)
	// returns to be run again on a goroutine of its own, where it may
	// wait; it must not have changed anything.
	ErrNotInline = errors.New("rpc: the handler must run on its own goroutine")
)

// StatusError is a reply whose status is not StatusOK. errors.Is matches
// it against the sentinel of its status (ErrUnknownOp, ErrTooLarge,
// ErrBusy, ErrShuttingDown, ErrHandler).
type StatusError struct {
	Status Status
	Op     uint16
	// Msg is the server's explanation (for StatusHandlerError, the
	// handler's error text, truncated).
	Msg string
}

func (e *StatusError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("rpc: op %d: %v", e.Op, e.Status)
	}
	return fmt.Sprintf("rpc: op %d: %v: %s", e.Op, e.Status, e.Msg)
}

// Is matches the sentinel of e's status.
func (e *StatusError) Is(target error) bool {
	switch e.Status {
	case StatusUnknownOp:
		return target == ErrUnknownOp
	case StatusTooLarge:
		return target == ErrTooLarge
	case StatusBusy:
		return target == ErrBusy
	case StatusShuttingDown:
		return target == ErrShuttingDown
	case StatusHandlerError:
		return target == ErrHandler
	}
	return false
}

// notSentError marks a call that failed before its request was posted, so
// that Pool may retry it on a fresh connection without any risk of
// executing it twice. errors.Is still sees the wrapped error.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// wasNotSent reports whether err says the call never left this side.
func wasNotSent(err error) bool {
	var ns *notSentError
	return errors.As(err, &ns)
}
