// Package dataplane moves file bytes: chunk placement, extent maps kept by
// each chunk's owner in pmem, and client-active reads and writes with
// one-sided RDMA.
//
// Nothing is implemented here yet: it is built on rdma, pmem and cluster
// (see docs/architecture.md for the plan).
package dataplane
