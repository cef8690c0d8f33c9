package cluster

import "fmt"

// Inode number layout. An inode number carries the partition that owns it
// in its high bits, so finding an inode's owner never needs a lookup and
// rename never moves an inode:
//
//	 63            48 47                                           0
//	+----------------+----------------------------------------------+
//	|   partition    |        number local to the partition         |
//	+----------------+----------------------------------------------+
//
// The layout is part of the on-media format: changing it changes every
// stored inode number.
const (
	// PartitionBits is the width of the partition field.
	PartitionBits = 16
	// LocalBits is the width of the partition-local number.
	LocalBits = 64 - PartitionBits
	// MaxPartitions is the largest partition count a cluster can have.
	MaxPartitions = 1 << PartitionBits
	// MaxLocalInode is the largest partition-local inode number.
	MaxLocalInode = 1<<LocalBits - 1
	// DefaultPartitions is the partition count of a new cluster.
	DefaultPartitions = 256
)

// RootInode is the file system root: partition 0, local number 1. It equals
// 1, the inode number FUSE uses for the root.
const RootInode uint64 = 1

// InodeNumber builds an inode number from a partition and a number local to
// that partition.
func InodeNumber(partition uint32, local uint64) uint64 {
	if partition >= MaxPartitions {
		panic(fmt.Sprintf("cluster: partition %d out of range", partition))
	}
	if local > MaxLocalInode {
		panic(fmt.Sprintf("cluster: local inode number %d out of range", local))
	}
	return uint64(partition)<<LocalBits | local
}

// PartitionOf returns the partition an inode number belongs to.
func PartitionOf(ino uint64) uint32 { return uint32(ino >> LocalBits) }

// LocalOf returns the partition-local part of an inode number.
func LocalOf(ino uint64) uint64 { return ino & MaxLocalInode }
