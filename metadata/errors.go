package metadata

import "errors"

// Sentinel errors.
var (
	// ErrClosed: the service was closed.
	ErrClosed = errors.New("metadata: service closed")
	// ErrCorrupt: a partition's log holds records that contradict each
	// other (an entry in a missing directory, a change of an inode's
	// type...). The partition is not served; restore it from a replica,
	// or report the log (plog check shows where it is) as a bug.
	ErrCorrupt = errors.New("metadata: partition log inconsistent")
)
