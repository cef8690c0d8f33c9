package pmem

import "errors"

// Sentinel errors. Callers test them with errors.Is; the wrapping error
// carries the details (which copy, which slot, which path) and, for errors
// an operator sees, what to do about it.
var (
	// ErrNotFormatted: the region holds no octofs superblock at all.
	ErrNotFormatted = errors.New("pmem: region is not formatted")
	// ErrBadMagic: the region holds something that is not an octofs region.
	ErrBadMagic = errors.New("pmem: not an octofs region (bad magic)")
	// ErrVersion: the region was written by a format version this build
	// does not read.
	ErrVersion = errors.New("pmem: unsupported region format version")
	// ErrTornSuperblock: no copy of the superblock passes its checksum.
	ErrTornSuperblock = errors.New("pmem: superblock damaged (checksum mismatch)")
	// ErrGeometry: the superblock's geometry is impossible or does not fit
	// the device.
	ErrGeometry = errors.New("pmem: invalid region geometry")
	// ErrWrongCluster: the region belongs to another cluster or node.
	ErrWrongCluster = errors.New("pmem: region belongs to another cluster")
	// ErrNotPmem: the caller required persistent memory and the path is
	// not DAX.
	ErrNotPmem = errors.New("pmem: not persistent memory")
	// ErrNotDurable: the caller required durability and the path is
	// volatile memory (tmpfs, ramfs, anonymous).
	ErrNotDurable = errors.New("pmem: region is volatile")
	// ErrNoSpace: the region has no free block run or record left; the
	// file system layer maps it to ENOSPC.
	ErrNoSpace = errors.New("pmem: no space left in region")
	// ErrRecordFull: the record has no free extent slot.
	ErrRecordFull = errors.New("pmem: record has no free extent slot")
	// ErrTxTooLarge: a transaction does not fit in one redo-log slot.
	ErrTxTooLarge = errors.New("pmem: transaction too large for a log slot")
	// ErrTxDone: the transaction was already committed or aborted.
	ErrTxDone = errors.New("pmem: transaction already finished")
	// ErrLogCorrupt: a committed redo-log slot fails its checksum or
	// points outside the region.
	ErrLogCorrupt = errors.New("pmem: redo log damaged")
	// ErrRecordCorrupt: a record header or its record-bitmap bit is
	// inconsistent.
	ErrRecordCorrupt = errors.New("pmem: record damaged")
	// ErrBadAddress: an offset, record id or extent lies outside what the
	// caller may touch (reserved areas, out of range, not 8-byte aligned).
	ErrBadAddress = errors.New("pmem: bad address")
	// ErrNotFresh: Tx.WriteFresh targeted bytes not allocated in this
	// transaction.
	ErrNotFresh = errors.New("pmem: unlogged write outside this transaction's new allocations")
	// ErrPersist: flushing to the medium failed (msync I/O error); the
	// region is unusable until reopened, and every commit in flight when
	// it happened fails with it.
	ErrPersist = errors.New("pmem: persisting to the medium failed")
	// ErrReadOnly: the region was opened for inspection only.
	ErrReadOnly = errors.New("pmem: region is read-only")
	// ErrBusy: another process has the region open.
	ErrBusy = errors.New("pmem: region is in use")
	// ErrMedia: a read or write of the region hit a poisoned or vanished
	// page (see MediaError).
	ErrMedia = errors.New("pmem: media error")
	// ErrFormatted: octofs format was asked to format a region that
	// already holds one (or other data) without being forced.
	ErrFormatted = errors.New("pmem: already formatted")
	// ErrClosed: the region was closed.
	ErrClosed = errors.New("pmem: region is closed")
	// ErrUnsupported: this platform cannot open the requested kind of region.
	ErrUnsupported = errors.New("pmem: unsupported on this platform")
)
