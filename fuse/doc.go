// Package fuse adapts the octofs client to a FUSE mount with go-fuse v2. It
// is a thin layer: file system logic lives in metadata and dataplane, and
// errors are mapped to errno in one place here.
//
// Nothing is implemented here yet (see docs/architecture.md for the plan).
package fuse
