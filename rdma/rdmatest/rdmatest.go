package rdmatest

import (
	"testing"

	"github.com/octofs/octofs/rdma"
)

// Provider opens devices for the suite. Devices opened by one Provider can
// connect to each other.
type Provider struct {
	// Name names the provider in failure messages ("soft", "verbs").
	Name string
	// Open opens a fresh device and registers its Close with t.Cleanup.
	// It fails t (t.Fatal) or skips it if no device can be opened.
	Open func(t testing.TB) rdma.Device
}

// conformanceTest is one behaviour every provider must show.
type conformanceTest struct {
	name string
	run  func(t *testing.T, p Provider)
}

// tests lists the suite, grouped as issue 2 lists the behaviours (issue 9
// added what a stalled, silent or vanishing peer must not break). Names
// are stable: providers and CI refer to them with -run.
var tests = []conformanceTest{
	// Resources and their rules.
	{"Caps", testCaps},
	{"RegistrationRules", testRegistrationRules},
	{"PDCloseBusy", testPDCloseBusy},
	{"CQWaitContext", testCQWaitContext},
	{"CQWaitContext/PartialResponse", testCQWaitPartialResponse},
	{"ConnectionManager", testConnectionManager},
	{"QPCaps", testQPCaps},

	// Responder checks.
	{"RemoteAccess/MRRights", testRemoteAccessMRRights},
	{"RemoteAccess/UnknownKey", testRemoteAccessUnknownKey},
	{"RemoteAccess/OtherPD", testRemoteAccessOtherPD},
	{"RemoteAccess/Range", testRemoteAccessRange},
	{"RemoteAccess/AddressWrap", testRemoteAccessAddressWrap},
	{"RemoteAccess/QPAccess", testRemoteAccessQPAccess},
	{"RemoteAccess/DeregisteredMR", testRemoteAccessDeregistered},
	{"RemoteAccess/DeregInFlight", testDeregInFlight},
	{"ZeroLength", testZeroLength},

	// Local errors.
	{"LocalErrors/Send", testLocalErrorsSend},
	{"LocalErrors/Recv", testLocalErrorsRecv},
	{"LocalErrors/MaxMsgSize", testLocalErrorsMaxMsgSize},

	// Errors returned by PostSend and PostRecv.
	{"PostErrors/BeforeRTS", testPostBeforeRTS},
	{"PostErrors/TooManySGEs", testPostTooManySGEs},
	{"PostErrors/InlineTooLarge", testPostInlineTooLarge},
	{"PostErrors/QueueFull", testPostQueueFull},
	{"PostErrors/AtomicLength", testPostAtomicLength},
	{"PostErrors/Index", testPostErrorIndex},

	// Atomics.
	{"Atomics/FetchAndAdd", testAtomicFetchAndAdd},
	{"Atomics/CmpAndSwp", testAtomicCmpAndSwp},
	{"Atomics/Misaligned", testAtomicMisaligned},
	{"Atomics/Concurrent", testAtomicConcurrent},

	// Two-sided operations and receives.
	{"TwoSided/Send", testSend},
	{"TwoSided/SendWithImm", testSendWithImm},
	{"TwoSided/WriteWithImm", testWriteWithImm},
	{"TwoSided/SendLongerThanRecv", testSendLongerThanRecv},
	{"TwoSided/Inline", testInline},
	{"ScatterGather", testScatterGather},
	{"RNR/RetrySucceeds", testRNRRetrySucceeds},
	{"RNR/RetryExceeded", testRNRRetryExceeded},
	{"RNR/TimerMinimum", testRNRTimerMinimum},
	{"RNR/RetryCount", testRNRRetryCount},

	// Completions.
	{"Completions/AfterResponder", testCompletionAfterResponder},
	{"Completions/SendOrder", testSendCompletionOrder},
	{"Completions/Unsignaled", testUnsignaled},
	{"Completions/CQOverrun", testCQOverrun},
	{"Completions/UnsignaledOccupancy", testUnsignaledOccupancy},
	{"Completions/SharedCQConcurrentPosters", testSharedCQConcurrentPosters},
	{"Completions/ReadsBehindSmallReads", testReadsBehindSmallReads},

	// The error state.
	{"ErrorState/Flush", testErrorFlush},
	{"ErrorState/ResponderFlush", testErrorStateResponderFlush},
	{"ErrorState/ReceiveAccounting", testReceiveAccounting},
	{"StateMachine/Legal", testStateMachineLegal},
	{"StateMachine/Illegal", testStateMachineIllegal},
	{"StateMachine/ResetReconnect", testStateMachineResetReconnect},

	// Ordering.
	{"Ordering/WritesThenSend", testOrderingWritesThenSend},
	{"Ordering/WriteThenRead", testOrderingWriteThenRead},
	{"Ordering/FenceReadThenWrite", testOrderingFenceReadThenWrite},
	{"Ordering/FenceAtomicThenRead", testOrderingFenceAtomicThenRead},
	{"Ordering/PSNWrap", testPSNWrap},
	{"Loopback", testLoopback},

	// Peers that go away.
	{"PeerDeath/CloseQP", testPeerDeathCloseQP},
	{"PeerDeath/CloseDevice", testPeerDeathCloseDevice},
	{"PeerDeath/Silent", testSilentPeer},

	// Fault injection (rdma.Faults).
	{"Faults/DropConnections", testFaultsDropConnections},
	{"Faults/FailKey", testFaultsFailKey},
	{"Faults/SetDelay", testFaultsSetDelay},
}

// Run runs every conformance test against p, each as a subtest of t keyed
// by the behaviour it checks.
func Run(t *testing.T, p Provider) {
	if p.Open == nil {
		t.Fatal("rdmatest: Provider.Open is nil")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, p) })
	}
}

// Names lists the conformance tests in the order Run runs them.
func Names() []string {
	names := make([]string, len(tests))
	for i, tc := range tests {
		names[i] = tc.name
	}
	return names
}

// requireAtomics skips t when dev cannot do atomics: they are optional in
// verbs (ATOMIC_NONE), so their absence is no failure.
func requireAtomics(t testing.TB, dev rdma.Device) {
	t.Helper()
	if !dev.Caps().Atomics {
		t.Skipf("%s: device reports no atomic support (Caps.Atomics false)", dev.Name())
	}
}
