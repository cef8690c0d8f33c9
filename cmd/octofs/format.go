package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/octofs/octofs/pmem"
)

// formatOptions are the flags of `octofs format`.
type formatOptions struct {
	path, size, require string
	force               bool
	geo                 pmem.FormatOptions
}

func newFormatCmd() *cobra.Command {
	o := &formatOptions{}
	cmd := &cobra.Command{
		Use:   "format --pmem PATH [--size SIZE] [--force]",
		Short: "Prepare a persistent-memory region: a device-DAX device, an existing file, or a new file",
		Long: `Formats PATH as an empty octofs region, so that octofs serve --pmem PATH
can use it.

PATH may be a device-DAX device (/dev/daxX.Y), an existing file (a file on
a DAX file system, or a plain file; a sparse one has its blocks allocated
first), or a missing file, which is created with --size bytes, all of its
blocks allocated (refused if the file system has no room) and takes its
name only once it is formatted.

A PATH that already holds an octofs region, or any other data in its first
8 KiB, is refused unless --force is given: formatting destroys it. Stop
the node using the region first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFormat(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.path, "pmem", "", "the region to format: a devdax device or a file")
	f.StringVar(&o.size, "size", "", "size of a new region file, e.g. 64GiB (an existing file or device keeps its size)")
	f.BoolVar(&o.force, "force", false, "format even if PATH holds a region or other data (destroys it)")
	f.StringVar(&o.require, "pmem-require", "none", "refuse a weaker backing: none, durable (no tmpfs) or pmem (DAX only)")
	f.Uint32Var(&o.geo.BlockSize, "block-size", 0, "data block size in bytes (default 4096)")
	f.Uint32Var(&o.geo.RecordSize, "record-size", 0, "record size in bytes (default 256)")
	f.Uint32Var(&o.geo.ExtentSlots, "extent-slots", 0, "extents per record (default 4)")
	f.Uint32Var(&o.geo.LogSlots, "log-slots", 0, "transactions in flight at once (default 16, fewer on small regions)")
	f.Uint32Var(&o.geo.LogSlotSize, "log-slot-size", 0, "bytes of log per transaction (default 131072)")
	f.Uint64Var(&o.geo.NumRecords, "records", 0, "number of records (default one per 16 blocks)")
	return cmd
}

func runFormat(cmd *cobra.Command, o *formatOptions) error {
	if o.path == "" {
		return errors.New("--pmem PATH is required (a /dev/daxX.Y device or a file)")
	}
	require, err := pmem.ParseRequirement(o.require)
	if err != nil {
		return fmt.Errorf("--pmem-require: %w", err)
	}
	var size int64
	if o.size != "" {
		if size, err = parseByteSize(o.size); err != nil {
			return fmt.Errorf("--size: %w", err)
		}
	}
	o.geo.Now = time.Now()
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := pmem.FormatFile(o.path, o.geo, pmem.FormatFileOptions{Size: size, Force: o.force}, pmem.Options{Require: require, Logger: logger})
	if err != nil {
		return fmt.Errorf("format %s: %w", o.path, err)
	}
	defer r.Close()
	fmt.Fprintf(cmd.OutOrStdout(), "formatted %s\n", o.path)
	pmem.Check(r).WriteText(cmd.OutOrStdout())
	return nil
}

// parseByteSize reads 1048576, 512MiB, 64GiB, 1TiB, 100GB (powers of two
// whatever the spelling: region sizes are).
func parseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}} {
		for _, spelled := range []string{u.suffix + "IB", u.suffix + "B", u.suffix} {
			if strings.HasSuffix(t, spelled) {
				t, mult = strings.TrimSuffix(t, spelled), 1<<u.shift
				break
			}
		}
		if mult != 1 {
			break
		}
	}
	t = strings.TrimSuffix(t, "B")
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (use e.g. 268435456, 256MiB or 64GiB)", s)
	}
	return n * mult, nil
}
