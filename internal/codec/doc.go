// Package codec is octofs's one binary encoding for wire messages and log
// records: little-endian fixed-width integers, length-prefixed byte strings,
// nothing else. Every message type of the metadata and data services encodes
// itself with an Encoder and decodes with a Decoder, so that the bounds
// checks, the size limits and the error for malformed input are written once.
//
// Invariants:
//
//   - Decoding never panics and never allocates more than the input's length
//     for a length-prefixed field: a length larger than what remains is
//     ErrMalformed, found before any allocation.
//   - A Decoder's first error sticks: later reads return zero values, and
//     Err (or Finish) reports the first problem with the field it happened at.
//   - Finish also refuses trailing bytes, so a message that decodes is exactly
//     the message that was encoded.
//
// Versioning is the caller's: each message or record starts with its own
// version byte where it may change, and decoders refuse versions they do not
// know with an error that names both.
package codec
