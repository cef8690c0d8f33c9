package pmem

import (
	"errors"
	"fmt"
	"runtime/debug"
	"unsafe"
)

// MediaError is a fault on the region's memory: a poisoned page (an
// uncorrectable media error on persistent memory) or a page that is gone
// (the region file was truncated behind the process's back). The
// operation that touched it fails with it instead of the process dying of
// SIGBUS. It matches ErrMedia.
type MediaError struct {
	// Addr is the faulting address.
	Addr uintptr
	// Offset is Addr's offset in the region, -1 if outside it.
	Offset int64
}

func (e *MediaError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("%v at address %#x", ErrMedia, e.Addr)
	}
	return fmt.Sprintf("%v at region offset %#x: the page is poisoned or the region file shrank; stop the node, check the device (ndctl list --media-errors, dmesg) and run octoctl fsck", ErrMedia, e.Offset)
}

func (e *MediaError) Unwrap() error { return ErrMedia }

// asFault turns a recovered panic into a *MediaError if it is a memory
// fault (runtime/debug.SetPanicOnFault was on), nil otherwise.
func asFault(p any, buf []byte) *MediaError {
	if me, ok := p.(*MediaError); ok {
		return me
	}
	f, ok := p.(interface{ Addr() uintptr })
	if !ok {
		return nil
	}
	e := &MediaError{Addr: f.Addr(), Offset: -1}
	if len(buf) > 0 {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
		if e.Addr >= base && e.Addr < base+uintptr(len(buf)) {
			e.Offset = int64(e.Addr - base)
		}
	}
	return e
}

// The guards are deferred, with the previous SetPanicOnFault setting as
// argument, by every method that touches the mapping:
//
//	defer r.guardRead(&err, debug.SetPanicOnFault(true))
//
// guardRead turns a fault into the method's error; guardWrite also fails
// the region, since a store or flush may have been left half done;
// guardPanic re-panics with a *MediaError for methods without an error
// result. Other panics pass through unchanged.

func (r *Region) guardRead(err *error, old bool) {
	debug.SetPanicOnFault(old)
	if p := recover(); p != nil {
		e := asFault(p, r.buf)
		if e == nil {
			panic(p)
		}
		*err = e
	}
}

func (r *Region) guardWrite(err *error, old bool) {
	debug.SetPanicOnFault(old)
	if p := recover(); p != nil {
		e := asFault(p, r.buf)
		if e == nil {
			panic(p)
		}
		r.fail(e)
		*err = e
	}
}

func (r *Region) guardPanic(old bool) {
	debug.SetPanicOnFault(old)
	if p := recover(); p != nil {
		if e := asFault(p, r.buf); e != nil {
			panic(e)
		}
		panic(p)
	}
}

// Guarded runs fn with memory faults turned into errors: code that reads
// or writes a region through Bytes, Payload or ExtentBytes (or calls
// Load8 or Root, which panic with a *MediaError) runs inside it to get an
// error wrapping ErrMedia instead of a crash when a page is poisoned or
// gone.
func Guarded(fn func() error) (err error) {
	defer func(old bool) {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			e := asFault(p, nil)
			if e == nil {
				panic(p)
			}
			err = e
		}
	}(debug.SetPanicOnFault(true))
	return fn()
}

// Guarded is the package's Guarded for code touching this region: the
// MediaError it returns carries the offset in the region.
func (r *Region) Guarded(fn func() error) error {
	err := Guarded(fn)
	var me *MediaError
	if errors.As(err, &me) && me.Offset < 0 && len(r.buf) > 0 {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(r.buf)))
		if me.Addr >= base && me.Addr < base+uintptr(len(r.buf)) {
			me.Offset = int64(me.Addr - base)
		}
	}
	return err
}
