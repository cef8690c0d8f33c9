package plog

import "errors"

// Sentinel errors. The wrapping error names the log, the segment and the
// offset where it applies, and for what an operator sees, what to do.
var (
	// ErrCorrupt: a log's structures (head, segment chain, a record below
	// the published tail) fail their checks. The log cannot be replayed
	// past the damage; the message says where it is.
	ErrCorrupt = errors.New("plog: log damaged")
	// ErrNoSpace: the region has no record or block run left for a new
	// segment or pool. It always wraps pmem.ErrNoSpace as well, so callers
	// that map pmem's ENOSPC see it too.
	ErrNoSpace = errors.New("plog: no space left for the log")
	// ErrTooLarge: a record or a group of records is larger than one
	// append may carry (MaxGroupSize), or a pool larger than one pmem
	// transaction can allocate.
	ErrTooLarge = errors.New("plog: too large")
	// ErrDeleted: the log was deleted; open it again with Store.Log to
	// start a new, empty one.
	ErrDeleted = errors.New("plog: log deleted")
	// ErrBadID: a LogID with service 0 (reserved for "no log").
	ErrBadID = errors.New("plog: invalid log id")
	// ErrNotFound: FreePool of an extent that is not one of the log's pools.
	ErrNotFound = errors.New("plog: no such pool")
	// ErrGeometry: the region's records are too small for plog's headers.
	ErrGeometry = errors.New("plog: region geometry unsuitable")
)
