// Package node composes an octofs storage node from the layers below it:
// the node's persistent-memory region, its RDMA device and the one
// listener every client and peer connects to, the data export, the
// per-partition logs (pmem/plog), the namespace service (metadata) and the
// chunk service (dataplane), the self-identified RPC server (rdma/rpc)
// they answer on, and the node's membership (cluster). `octofs serve` is a
// thin wrapper over it; package node/nodetest starts whole clusters in one
// test process.
//
// # Start-up order
//
//  1. OpenStorage opens (or creates) the region, opens the RDMA device and
//     listens on the RDMA address. Nothing is served yet: a connection
//     request is refused with "node starting".
//  2. The caller starts the cluster node (cluster.Start) with the storage's
//     RDMA address and region descriptor, so the map records them.
//  3. Serve waits until the node knows its cluster, binds the region to it
//     (refusing a region of another cluster or node), opens the logs, starts
//     the services, which replay the partitions this node owns, and only
//     then accepts RPC and data connections.
//
// # Connections
//
// Every connection request carries a dataplane.Hello: the cluster token,
// the purpose ("rpc" or "data"), who is asking and its incarnation. The
// accept loop checks the token and hands RPC connections to the RPC server
// and data connections to the export. A request that fails the check is
// rejected with the reason; it never reaches a service.
//
// # Invariants
//
//   - A region is served only by the node it is bound to (its superblock
//     records the cluster and node).
//   - No service answers before it has replayed its logs.
//   - Close stops accepting, closes the services, then the export, the
//     device and the region, in that order, so no remote access or log
//     append runs on a closed region.
package node
