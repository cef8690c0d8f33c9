//go:build verbs && cgo

package verbs

/*
#include <errno.h>
#include "shim.h"
static int octo_errno(void) { return errno; }
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/octofs/octofs/rdma"
)

// This file is the one place that maps libibverbs' errnos and completion
// statuses to package rdma's.

// errnoErr returns rc as an Errno, or the thread's errno when rc is 0 (for
// calls that return NULL or -1 and set errno). cgo calls run on one OS
// thread from call to return, so errno read right after is the call's.
func errnoErr(rc int) syscall.Errno {
	if rc != 0 {
		if rc < 0 {
			rc = -rc
		}
		return syscall.Errno(rc)
	}
	if e := C.octo_errno(); e != 0 {
		return syscall.Errno(e)
	}
	return syscall.EIO
}

// mapErrno wraps an errno with the rdma sentinel of the same meaning.
func mapErrno(e syscall.Errno) error {
	switch e {
	case syscall.EINVAL, syscall.EOPNOTSUPP:
		return fmt.Errorf("%w (%v)", rdma.ErrInvalid, e)
	case syscall.EBUSY:
		return fmt.Errorf("%w (%v)", rdma.ErrBusy, e)
	case syscall.ENODEV, syscall.ENXIO:
		return fmt.Errorf("%w (%v)", rdma.ErrNoDevice, e)
	case syscall.EPERM, syscall.EACCES:
		return fmt.Errorf("%w (%v)", rdma.ErrInvalid, e)
	}
	return e
}

// mapPostErrno maps the errno of ibv_post_send/ibv_post_recv: ENOMEM means
// the work queue is full.
func mapPostErrno(e syscall.Errno) error {
	if e == syscall.ENOMEM {
		return fmt.Errorf("%w (%v)", rdma.ErrQueueFull, e)
	}
	return mapErrno(e)
}

var errNoGID = errors.New("no usable GID")

// wcStatus maps enum ibv_wc_status.
func wcStatus(s uint32) rdma.WCStatus {
	switch s {
	case C.IBV_WC_SUCCESS:
		return rdma.WCSuccess
	case C.IBV_WC_LOC_LEN_ERR:
		return rdma.WCLocLenErr
	case C.IBV_WC_LOC_QP_OP_ERR:
		return rdma.WCLocQPOpErr
	case C.IBV_WC_LOC_PROT_ERR:
		return rdma.WCLocProtErr
	case C.IBV_WC_WR_FLUSH_ERR:
		return rdma.WCWRFlushErr
	case C.IBV_WC_BAD_RESP_ERR:
		return rdma.WCBadRespErr
	case C.IBV_WC_LOC_ACCESS_ERR:
		return rdma.WCLocAccessErr
	case C.IBV_WC_REM_INV_REQ_ERR, C.IBV_WC_REM_INV_RD_REQ_ERR:
		return rdma.WCRemInvReqErr
	case C.IBV_WC_REM_ACCESS_ERR:
		return rdma.WCRemAccessErr
	case C.IBV_WC_REM_OP_ERR, C.IBV_WC_REM_ABORT_ERR:
		return rdma.WCRemOpErr
	case C.IBV_WC_RETRY_EXC_ERR, C.IBV_WC_RESP_TIMEOUT_ERR:
		return rdma.WCRetryExcErr
	case C.IBV_WC_RNR_RETRY_EXC_ERR:
		return rdma.WCRNRRetryExcErr
	}
	return rdma.WCGeneralErr
}

// wcOpcode maps enum ibv_wc_opcode.
func wcOpcode(o uint32) rdma.WCOpcode {
	switch o {
	case C.IBV_WC_RDMA_WRITE:
		return rdma.WCWrite
	case C.IBV_WC_RDMA_READ:
		return rdma.WCRead
	case C.IBV_WC_COMP_SWAP:
		return rdma.WCCompSwap
	case C.IBV_WC_FETCH_ADD:
		return rdma.WCFetchAdd
	case C.IBV_WC_RECV:
		return rdma.WCRecv
	case C.IBV_WC_RECV_RDMA_WITH_IMM:
		return rdma.WCRecvWriteWithImm
	}
	return rdma.WCSend
}

// wrOpcode maps rdma.Opcode to enum ibv_wr_opcode.
func wrOpcode(o rdma.Opcode) (uint32, bool) {
	switch o {
	case rdma.OpSend:
		return C.IBV_WR_SEND, true
	case rdma.OpSendWithImm:
		return C.IBV_WR_SEND_WITH_IMM, true
	case rdma.OpWrite:
		return C.IBV_WR_RDMA_WRITE, true
	case rdma.OpWriteWithImm:
		return C.IBV_WR_RDMA_WRITE_WITH_IMM, true
	case rdma.OpRead:
		return C.IBV_WR_RDMA_READ, true
	case rdma.OpAtomicCmpAndSwp:
		return C.IBV_WR_ATOMIC_CMP_AND_SWP, true
	case rdma.OpAtomicFetchAndAdd:
		return C.IBV_WR_ATOMIC_FETCH_AND_ADD, true
	}
	return 0, false
}

// sendFlags maps rdma.SendFlags to IBV_SEND_*.
func sendFlags(f rdma.SendFlags) uint32 {
	var v uint32
	if f&rdma.SendSignaled != 0 {
		v |= C.IBV_SEND_SIGNALED
	}
	if f&rdma.SendFence != 0 {
		v |= C.IBV_SEND_FENCE
	}
	if f&rdma.SendInline != 0 {
		v |= C.IBV_SEND_INLINE
	}
	if f&rdma.SendSolicited != 0 {
		v |= C.IBV_SEND_SOLICITED
	}
	return v
}

// accessFlags maps rdma.Access to IBV_ACCESS_*.
func accessFlags(a rdma.Access) C.int {
	var v C.int
	if a&rdma.AccessLocalWrite != 0 {
		v |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if a&rdma.AccessRemoteWrite != 0 {
		v |= C.IBV_ACCESS_REMOTE_WRITE
	}
	if a&rdma.AccessRemoteRead != 0 {
		v |= C.IBV_ACCESS_REMOTE_READ
	}
	if a&rdma.AccessRemoteAtomic != 0 {
		v |= C.IBV_ACCESS_REMOTE_ATOMIC
	}
	return v
}

// qpState maps enum ibv_qp_state. SQE and SQD do not occur on RC queue
// pairs driven by this provider; SQE is an error state and SQD still sends.
func qpState(s int) rdma.QPState {
	switch s {
	case C.IBV_QPS_RESET:
		return rdma.QPSReset
	case C.IBV_QPS_INIT:
		return rdma.QPSInit
	case C.IBV_QPS_RTR:
		return rdma.QPSRTR
	case C.IBV_QPS_RTS, C.IBV_QPS_SQD:
		return rdma.QPSRTS
	}
	return rdma.QPSErr
}
