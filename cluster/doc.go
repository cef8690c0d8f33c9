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
//     After any change of the set of owning nodes (a node comes up from
//     joining, drains or is removed) every owner holds floor(P/N) or
//     ceil(P/N) partitions, and the change moved the fewest partitions that
//     allows (checked against a brute-force minimum in the tests).
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
//     changes nothing and is answered 401.
//
// # Dependencies
//
// cluster may import rdma/ and pmem/ types but never metadata/, dataplane/
// or fuse/: those import cluster, through MapSource.
package cluster
