// Package alloc is the volatile free-space index of a pmem region: which
// records and blocks are taken, and where a run of free ones is.
//
// Tree is what regions use. It is a bitmap (1 = used) with a summary tree
// over fixed-size chunks of it: every node of the tree knows the longest
// free run inside its range and the free runs touching its two ends, so a
// search for the leftmost run of n free entries at or after a hint visits
// O(log chunks) nodes and scans at most two chunks word by word, whatever
// the fragmentation; a full index answers "no space" from the root alone.
// Marking a range used or free costs one word operation per 64 entries plus
// the summaries of the chunks it touches and their ancestors.
//
// Scan is the index regions used before (a bit-by-bit scan of the bitmap
// from the hint). It is kept as the baseline `octoctl bench pmem` measures
// Tree against and as the oracle Tree's tests compare with: both return the
// same answer for every search.
//
// Invariants (checked by Tree.check in tests):
//   - Entries past Len are marked used in the words, so no run reaches past
//     the end; Word hides them.
//   - Every node's summary equals the one computed from its range of the
//     bitmap; Used equals the number of used entries.
//
// Neither type is safe for concurrent use; the region serialises calls
// with a mutex held for the length of one call (microseconds). The index
// is volatile: regions rebuild it from their persistent bitmaps on open.
package alloc
