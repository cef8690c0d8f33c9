package rpc

import (
	"errors"
	"runtime"
	"time"

	"github.com/octofs/octofs/rdma"
)

// sendQueueWait bounds how long a post waits for room in a full send
// queue: longer than the default transport budget (~4.3 s), after which a
// peer that has not acknowledged anything is gone anyway.
const sendQueueWait = 5 * time.Second

// postSendRetry posts wrs, waiting while the send queue is full. A send
// queue entry is free only once the peer acknowledged the request (and,
// on verbs, a later signaled completion was polled), which a provider may
// learn late; a full queue is back-pressure, not a failure. reclaim, if
// set, is called between tries to poll completions.
func postSendRetry(post func([]rdma.SendWR) error, wrs []rdma.SendWR, reclaim func()) error {
	var deadline time.Time
	pause := 10 * time.Microsecond
	for i := 0; ; i++ {
		err := post(wrs)
		if err == nil || !errors.Is(err, rdma.ErrQueueFull) {
			return err
		}
		wrs = unposted(wrs, err)
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(sendQueueWait)
		} else if now.After(deadline) {
			return err
		}
		if reclaim != nil {
			reclaim()
		}
		if i < 8 {
			runtime.Gosched()
		} else {
			time.Sleep(pause)
			pause = min(2*pause, time.Millisecond)
		}
	}
}

// unposted is what a post of wrs that failed with err left unposted: a
// PostError names the first work request not posted, those before it
// were.
func unposted(wrs []rdma.SendWR, err error) []rdma.SendWR {
	var pe *rdma.PostError
	if errors.As(err, &pe) && pe.Index > 0 && pe.Index < len(wrs) {
		return wrs[pe.Index:]
	}
	return wrs
}
