// Package wire is the namespace service's language: the op table, the
// request and reply envelopes, every request and reply body, and the
// records of the per-partition logs, all encoded with internal/codec.
// Everything a peer or the media controls is decoded here, and every
// decoder has a fuzz target (fuzz_test.go).
//
// # Envelopes
//
// A request is a Header (version, op, the sender's map epoch, client id
// and incarnation, the request sequence for at-most-once execution and
// the lowest sequence still unanswered, and the caller's credentials)
// followed by the op's body. A reply is a ReplyHeader (version, status,
// the responder's map epoch and incarnation, and an inode number that
// StatusRedirect and StatusWrongOwner use) followed, when the status is
// StatusOK, by the op's reply body.
//
// Statuses are Linux errno values (1..4095), or octofs statuses above
// that (StatusWrongOwner, StatusRedirect, ...), which a client resolves
// itself and never shows a program.
//
// # Invariants
//
//   - Every envelope and every record starts with its version byte; a
//     decoder refuses versions it does not know, naming both.
//   - A message that decodes re-encodes to the same bytes: Finish refuses
//     trailing bytes, booleans are 0 or 1, counts are bounded before
//     anything is allocated (tested by the fuzz targets).
//   - Decoders bound lengths only as far as needed to stay safe (names to
//     4096 bytes, xattr values to 1 MiB); the service applies the POSIX
//     limits (255-byte names, 64 KiB values) so that callers get the
//     errno Linux gives (ENAMETOOLONG, ERANGE, E2BIG), not a decode error.
//   - Op numbers and record kinds are part of the protocol and of the
//     on-media format: never renumber; add.
package wire
