// Package cluster coordinates membership with raft and publishes the
// cluster map: the epoch, the nodes with their addresses and region
// descriptors, and the partition table. Placement functions map inodes,
// directory entries and file chunks to the nodes that own them.
//
// # Pieces
//
//   - Map (clustermap.go) is the raft FSM state; applyCommand (command.go)
//     is the only code that changes it; fsm.go wraps it for raft, with
//     versioned snapshots.
//   - Placement (inode.go, placement.go): inode numbers carry their
//     partition in the top PartitionBits bits; PartitionForName and
//     ChunkPartition hash (parent, name) and (inode, chunk) to partitions;
//     rebalance reassigns the table.
//   - Node (node.go, leader.go) runs raft (hashicorp/raft, raft-boltdb/v2
//     log and stable store, file snapshots, all in the data directory), the
//     leader's supervision loop and the admin API (api.go). AdminClient
//     (client.go) is the one HTTP client: octoctl, node-to-node calls and
//     RemoteMap (watch.go) use it.
//   - Raft's transport (transport.go) is mutual TLS with certificates of
//     a cluster CA (pki.go) and bounded connections; datadir.go locks a
//     data directory to one process.
//
// # Invariants
//
//   - The epoch grows by exactly one with every applied change; a refused
//     command (unknown type or version, malformed, invalid transition)
//     leaves the map and the epoch unchanged on every replica, because the
//     decision depends only on the map and the command.
//   - A *Map handed out is immutable. Readers never lock; writers publish a
//     new map and close a channel to wake watchers.
//   - Every partition is owned by a node in state up or down. Down nodes
//     keep their partitions (without replication the data is only there).
//   - A pinned partition (Map.Pinned: it holds file-system data on its
//     owner) never changes owner: rebalancing leaves it in place, and drain
//     or remove of its owner is refused (HoldsDataError); only a forced
//     remove unpins it, losing the data. A pin is applied only for the
//     partition's current owner (else NotOwnerError); pinning a pinned
//     partition changes nothing, not even the epoch.
//   - After any change of the set of owning nodes (a node comes up from
//     joining, drains or is removed) every owner holds floor(U/N) or
//     ceil(U/N) of the U unpinned partitions, and the change moved the
//     fewest partitions that allows (checked against a brute-force minimum
//     in the tests).
//   - A node's epoch never goes backwards, across restarts included: the
//     FSM saves each map it applies before publishing it and starts from
//     the saved map; re-applied entries at or below its raft index are
//     skipped (they are committed, so already in it).
//   - No address (admin, raft) belongs to two members that are not removed.
//   - Nodes are sorted by id and unique. Removed nodes stay as tombstones so
//     their ids are never reused.
//   - State transitions: joining -> up (leader, once caught up); up <-> down
//     (leader's failure detector); any but removed -> draining; any but
//     removed -> removed. Nothing else.
//   - Raft bootstraps only when the data directory holds no raft state and
//     Bootstrap is set; a restart never bootstraps or joins again.
//   - Only a leader that has completed a barrier in its term writes (ready);
//     it creates the map on first leadership, then supervises: failure
//     detection, joining -> up, raft configuration following the map, and
//     promotion of caught-up non-voters while voters < MaxVoters.
//   - Every mutating admin call and every read of region keys requires the
//     cluster token, compared in constant time; a request with a wrong token
//     changes nothing and is answered 401, on every path.
//   - Raft talks only with members: both ends of a raft connection present
//     a certificate of the cluster CA naming a node of the map that is not
//     removed (a node without a map yet, while joining, trusts the CA
//     alone). Certificates are issued only with a join, which needs the
//     token. Unauthenticated connections never reach raft's buffers; the
//     port bounds handshakes, connections per peer and in total.
//   - A waiting node (no state, neither bootstrap nor join) joins only when
//     told by a caller with the token it was started with or its join
//     secret.
//   - One process holds a data directory (flock on <data-dir>/lock).
//
// # Dependencies
//
// cluster may import rdma/ and pmem/ types but never metadata/, dataplane/
// or fuse/: those import cluster, through MapSource.
package cluster
