// Package rdmatest is the conformance suite of octofs's verbs API: the
// behaviour every RDMA provider must show, written once against package
// rdma's interfaces, the way go-fuse's posixtest is written against a mount.
//
// A provider runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		rdmatest.Run(t, rdmatest.Provider{
//			Name: "soft",
//			Open: func(t testing.TB) rdma.Device { ... open, t.Cleanup(dev.Close) ... },
//		})
//	}
//
// Each test is a subtest of Run keyed by the behaviour it checks, so
// `go test -run 'Conformance/RNR'` picks one. The tests follow the IB
// specification where it is strict and accept every outcome it allows where
// it is not (and where Soft-RoCE, rxe, legitimately differs); each such
// place says why in a comment.
//
// Every wait is bounded: a test that would hang fails after
// DefaultWaitTimeout instead. Tests run one after another, never in
// parallel, because several of them measure time.
//
// The helpers the tests share (Node, Side, NewPair, Connect, WaitN, ...) are
// exported for providers' own tests and for layers above rdma that want a
// connected queue pair in a few lines.
package rdmatest
