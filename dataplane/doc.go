// Package dataplane moves file bytes between clients and the nodes' pmem
// regions.
//
// Built so far: Export, the node side of client-active I/O. It registers a
// node's whole region as one RDMA memory region and accepts RC connections
// from clients that present the cluster token (Hello, in the connection's
// private data); they then read, write and lock the region with one-sided
// operations that the RDMA provider executes without the node's code.
// DialExport is the client side. The region's descriptor (uuid, base,
// length, rkey) is published in the cluster map, readable only with the
// token.
//
// Still to come (see docs/architecture.md): chunk placement, extent maps
// kept by each chunk's owner in pmem, and the read and write paths built on
// them. The whole region, metadata areas included, is writable by any
// client holding the token until the data path registers narrower regions.
package dataplane
