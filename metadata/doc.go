// Package metadata is the namespace service: inodes, directories and the
// POSIX namespace operations, served over self-identified RPC on RC
// send/receive, with collect-dispatch transactions for operations that span
// two nodes.
//
// Nothing is implemented here yet: it is built on rdma, pmem and cluster
// (see docs/architecture.md for the plan).
package metadata
