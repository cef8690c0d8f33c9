// Package wire is the chunk service's language: its RPC messages (op
// numbers, requests, replies, statuses) and the records of its
// per-partition logs, all in internal/codec. Everything a peer or the
// media controls is decoded here, bounds-checked, and every decoder has a
// fuzz target.
//
// Invariants:
//
//   - Every message and record starts with its version byte; a decoder
//     refuses versions it does not know, naming both.
//   - A message that decodes re-encodes to the same bytes (Finish refuses
//     trailing bytes; counts are bounded before anything is allocated).
//   - Ranges inside a chunk are checked against ChunkSize at decoding, so
//     the service never sees an offset outside the chunk.
package wire
