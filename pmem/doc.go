// Package pmem owns a node's persistent-memory region: opening it (devdax,
// a file on a DAX file system, a plain file, or volatile memory), flushing
// and fencing stores, the versioned on-media layout, allocation, the redo
// log that makes multi-word updates atomic, recovery and fsck. It knows
// nothing about files; metadata and dataplane build on it.
package pmem
