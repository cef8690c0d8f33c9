// Command pmemformat formats a persistent-memory region (a devdax device
// in a vmtest guest) as an empty octofs region, so that `octofs serve
// --pmem PATH` can use it: `octofs serve` creates and formats a region
// only where no file exists, and a device always exists. It stands in
// for `octofs format`, which the file-system step uses instead as soon as
// the octofs binary has it.
//
// Usage: pmemformat PATH
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/octofs/octofs/pmem"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pmemformat PATH (a devdax device or an existing file; destroys what it holds)")
		os.Exit(2)
	}
	if err := format(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "pmemformat: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("formatted %s\n", os.Args[1])
}

func format(path string) error {
	m, err := pmem.OpenFileMedium(path, pmem.FileOptions{})
	if err != nil {
		return err
	}
	r, err := pmem.Format(m, pmem.FormatOptions{Now: time.Now()}, pmem.Options{})
	if err != nil {
		m.Close()
		return err
	}
	return r.Close()
}
