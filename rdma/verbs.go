package rdma

import (
	"context"
	"fmt"
	"time"
)

// Access is a set of memory-region or queue-pair access rights
// (IBV_ACCESS_*).
type Access uint32

// Access rights. Remote write and remote atomic rights require LocalWrite on
// a memory region, as in verbs.
const (
	AccessLocalWrite Access = 1 << iota
	AccessRemoteWrite
	AccessRemoteRead
	AccessRemoteAtomic

	AccessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	s := ""
	for _, f := range []struct {
		bit  Access
		name string
	}{
		{AccessLocalWrite, "local-write"},
		{AccessRemoteWrite, "remote-write"},
		{AccessRemoteRead, "remote-read"},
		{AccessRemoteAtomic, "remote-atomic"},
	} {
		if a&f.bit != 0 {
			if s != "" {
				s += "|"
			}
			s += f.name
		}
	}
	return s
}

// Opcode is the operation of a send work request (IBV_WR_*).
type Opcode uint8

// Send work request opcodes.
const (
	OpSend Opcode = iota
	OpSendWithImm
	OpWrite
	OpWriteWithImm
	OpRead
	OpAtomicCmpAndSwp
	OpAtomicFetchAndAdd
)

var opcodeNames = [...]string{"SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD"}

func (o Opcode) String() string {
	if int(o) < len(opcodeNames) {
		return opcodeNames[o]
	}
	return fmt.Sprintf("Opcode(%d)", o)
}

// IsAtomic reports whether o is one of the 8-byte atomic operations.
func (o Opcode) IsAtomic() bool { return o == OpAtomicCmpAndSwp || o == OpAtomicFetchAndAdd }

// HasImm reports whether o carries immediate data.
func (o Opcode) HasImm() bool { return o == OpSendWithImm || o == OpWriteWithImm }

// ConsumesRecv reports whether o consumes a receive work request at the
// responder.
func (o Opcode) ConsumesRecv() bool {
	return o == OpSend || o == OpSendWithImm || o == OpWriteWithImm
}

// SendFlags modify a send work request (IBV_SEND_*).
type SendFlags uint8

// Send flags.
const (
	// SendSignaled asks for a completion when the request succeeds. Failed
	// requests always complete.
	SendSignaled SendFlags = 1 << iota
	// SendFence delays the request until every earlier RDMA READ and
	// atomic on the queue pair has completed.
	SendFence
	// SendInline copies the payload at post time; the SGEs' lkeys are not
	// checked and the buffers may be reused as soon as PostSend returns.
	SendInline
	// SendSolicited sets the solicited-event bit.
	SendSolicited
)

// SGE is a scatter/gather element: a range of registered local memory.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request. The zero value of every field that an
// opcode does not use is ignored.
type SendWR struct {
	ID     uint64
	Opcode Opcode
	Flags  SendFlags
	SGL    []SGE
	// Imm is the immediate value of *_WITH_IMM opcodes.
	Imm uint32
	// RemoteAddr and RKey name the target of RDMA and atomic operations.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value of CMP_AND_SWP or the addend of
	// FETCH_AND_ADD; Swap is the swap value of CMP_AND_SWP.
	CompareAdd uint64
	Swap       uint64
}

// RecvWR is a receive work request.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WCStatus is the status of a work completion (IBV_WC_*).
type WCStatus uint8

// Work completion statuses, with the same meaning as in verbs.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocProtErr
	WCWRFlushErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCGeneralErr
)

var statusNames = [...]string{
	"success", "local length error", "local QP operation error", "local protection error",
	"work request flushed", "bad response", "local access error", "remote invalid request",
	"remote access error", "remote operation error", "transport retry counter exceeded",
	"RNR retry counter exceeded", "general error",
}

func (s WCStatus) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", s)
}

// WCOpcode is the operation a work completion reports (IBV_WC_*).
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend WCOpcode = iota
	WCWrite
	WCRead
	WCCompSwap
	WCFetchAdd
	WCRecv
	WCRecvWriteWithImm
)

var wcOpcodeNames = [...]string{"SEND", "RDMA_WRITE", "RDMA_READ", "COMP_SWAP", "FETCH_ADD", "RECV", "RECV_RDMA_WITH_IMM"}

func (o WCOpcode) String() string {
	if int(o) < len(wcOpcodeNames) {
		return wcOpcodeNames[o]
	}
	return fmt.Sprintf("WCOpcode(%d)", o)
}

// WCOpcodeOf is the completion opcode that a send work request with opcode
// o reports.
func WCOpcodeOf(o Opcode) WCOpcode {
	switch o {
	case OpWrite, OpWriteWithImm:
		return WCWrite
	case OpRead:
		return WCRead
	case OpAtomicCmpAndSwp:
		return WCCompSwap
	case OpAtomicFetchAndAdd:
		return WCFetchAdd
	default:
		return WCSend
	}
}

// WorkCompletion reports the outcome of one work request. Opcode, ByteLen,
// Imm and HasImm are valid only when Status is WCSuccess, as in verbs.
type WorkCompletion struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	QPN     uint32
	ByteLen uint32
	Imm     uint32
	HasImm  bool
}

// Err returns nil for a successful completion and an error wrapping
// ErrCompletion otherwise.
func (wc *WorkCompletion) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &CompletionError{ID: wc.ID, QPN: wc.QPN, Status: wc.Status}
}

// QPState is the state of a queue pair (IBV_QPS_*).
type QPState uint8

// Queue pair states. An RC queue pair moves Reset → Init → RTR → RTS; any
// state may move to Err or back to Reset.
const (
	QPSReset QPState = iota
	QPSInit
	QPSRTR
	QPSRTS
	QPSErr
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", s)
}

// Endpoint is what one side of an RC connection tells the other out of
// band: enough for the peer's queue pair to reach this one. Each provider
// fills the fields its transport needs.
type Endpoint struct {
	// QPN is the queue pair number and PSN the first packet sequence
	// number this side will send.
	QPN uint32
	PSN uint32
	// LID and GID address the port on InfiniBand and RoCE.
	LID uint16
	GID [16]byte
	// MTU is the path MTU in bytes this side supports (0: provider default).
	MTU uint32
	// Addr is a transport address for providers that carry RC over a
	// network of their own (the soft provider: host:port).
	Addr string
	// Secret is a random value that a provider carrying RC over a
	// network of its own (soft) requires of whoever claims to be this
	// queue pair's peer: only a side that was told this Endpoint through
	// the connection manager can connect to the queue pair. Providers
	// whose fabric identifies peers itself (verbs) leave it zero.
	Secret [SecretSize]byte
}

// SecretSize is the length of Endpoint.Secret.
const SecretSize = 16

// QPConfig sizes a queue pair (struct ibv_qp_init_attr).
type QPConfig struct {
	SendCQ, RecvCQ CQ
	// MaxSendWR and MaxRecvWR bound the outstanding work requests of each
	// queue; MaxSendSGE and MaxRecvSGE the SGEs per request; MaxInline the
	// bytes of inline data. Zero picks a provider default.
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInline              int
	// SignalAll makes every send request signaled (sq_sig_all).
	SignalAll bool
}

// QPCaps are the sizes a device granted a queue pair, which may exceed
// what QPConfig asked for (devices round queue sizes up).
type QPCaps struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInline              int
}

// QPAttr carries the attributes of a state transition (struct
// ibv_qp_attr). Modify uses the fields that the target state needs:
//
//   - Init: Access (the remote operations this QP accepts), Port.
//   - RTR: Remote, MinRNRTimer, MaxDestRdAtomic, PathMTU.
//   - RTS: Timeout, RetryCount, RNRRetry, MaxRdAtomic, SendPSN.
//   - Err and Reset: nothing.
type QPAttr struct {
	State QPState

	Access Access
	// Port is the port number; 0 means the port the device was opened on.
	Port uint8

	Remote          Endpoint
	PathMTU         uint32
	MaxDestRdAtomic uint8
	// MinRNRTimer is how long a requester waits before it retries a SEND
	// that found no posted receive here.
	MinRNRTimer RNRTimer

	// Timeout is the local ACK timeout, 4.096 µs × 2^Timeout (0: infinite).
	Timeout uint8
	// RetryCount is how often a timed-out request is retried (0-7).
	RetryCount uint8
	// RNRRetry is how often an RNR-NAKed request is retried (7: forever).
	RNRRetry    uint8
	MaxRdAtomic uint8
	// SendPSN, if not zero, is the first PSN this side sends (the verbs
	// sq_psn), set on the move from RTR to RTS; zero keeps the one the
	// queue pair's Endpoint announced. The peer must have been given the
	// same in the Endpoint of its RTR. (Tests use it to make PSNs wrap.)
	SendPSN uint32
}

// RNRTimer is the IB encoding (0-31) of the minimum RNR NAK timer.
type RNRTimer uint8

// rnrTimerMicros is IBA table 45: the RNR timer field's values.
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// Micros returns the timer's value in microseconds.
func (t RNRTimer) Micros() uint32 { return rnrTimerMicros[t&31] }

// Caps describes what a device supports (part of struct ibv_device_attr).
type Caps struct {
	MaxQPWR     int
	MaxSGE      int
	MaxInline   int
	MaxCQE      int
	MaxMRSize   uint64
	MaxMsgSize  uint32
	MaxRdAtomic int
	// Atomics reports whether ATOMIC_CMP_AND_SWP and ATOMIC_FETCH_AND_ADD
	// are supported; AtomicsGlobal whether they are atomic against the
	// host CPU too, not only against other RDMA atomics.
	Atomics       bool
	AtomicsGlobal bool
	// Flush reports whether the device can make remote writes durable
	// (IBA RDMA FLUSH).
	Flush bool
}

// Device is an open RDMA device (an ibv_context).
type Device interface {
	// Name is the device's name ("soft0", "rxe0", "mlx5_0").
	Name() string
	// Provider is the provider's name ("soft", "verbs").
	Provider() string
	Caps() Caps
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue that holds up to depth entries;
	// more unpolled completions than that overrun it.
	CreateCQ(depth int) (CQ, error)
	// Close releases the device and everything created from it.
	Close() error
}

// PD is a protection domain: memory regions and queue pairs of one PD can
// only be used together.
type PD interface {
	// RegMR registers buf for access. buf must stay valid and must not be
	// moved until Dereg; providers that pin memory (verbs) need memory
	// from mmap or C, never the Go heap: use Alloc.
	RegMR(buf []byte, access Access) (MR, error)
	CreateQP(cfg QPConfig) (QP, error)
	// Close deallocates the PD; it fails with ErrBusy while memory
	// regions or queue pairs of it remain.
	Close() error
}

// MR is a registered memory region.
type MR interface {
	Addr() uint64
	Len() int
	LKey() uint32
	RKey() uint32
	Access() Access
	// Bytes is the registered memory.
	Bytes() []byte
	// Dereg deregisters the region. When it returns, no access through
	// its keys is in progress and every later one fails.
	Dereg() error
}

// CQ is a completion queue.
type CQ interface {
	// Poll moves up to len(wc) completions into wc and returns how many.
	// It never blocks and never allocates. After an overrun it returns
	// ErrCQOverrun.
	Poll(wc []WorkCompletion) (int, error)
	// Wait blocks until at least one completion is available, then polls
	// like Poll. It returns ctx's error if ctx ends first.
	Wait(ctx context.Context, wc []WorkCompletion) (int, error)
	Close() error
}

// QP is a reliable-connected queue pair.
type QP interface {
	QPN() uint32
	State() QPState
	// Caps returns the queue sizes the device granted the queue pair.
	Caps() QPCaps
	// Endpoint returns what the peer needs to connect to this queue pair.
	Endpoint() Endpoint
	// Modify moves the queue pair to attr.State.
	Modify(attr QPAttr) error
	// PostSend posts wrs in order. Errors detectable at post time are
	// returned at once as a *PostError naming the first bad request;
	// requests before it were posted.
	PostSend(wrs []SendWR) error
	// PostRecv posts receive requests, like PostSend.
	PostRecv(wrs []RecvWR) error
	// Close destroys the queue pair; outstanding requests are discarded
	// without completions.
	Close() error
}

// Faults injects failures into a provider, for tests of the layers above.
// Providers that can implement it do; callers type-assert a Device.
type Faults interface {
	// DropConnections severs every connection of the device, as a link
	// failure would: outstanding requests complete with an error.
	DropConnections()
	// SetDelay delays every response this device sends by d (0: none).
	SetDelay(d time.Duration)
	// FailKey makes this device, as a responder, reject rkey as if it
	// named no memory region. FailKey(0) clears it.
	FailKey(rkey uint32)
}
