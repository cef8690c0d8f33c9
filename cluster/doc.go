// Package cluster coordinates membership with raft and publishes the
// cluster map: the epoch, the nodes with their addresses and region
// descriptors, and the partition table. Placement functions map inodes,
// directory entries and file chunks to the nodes that own them.
package cluster
