package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/octofs/octofs/pmem"
)

// errFsckProblems makes octoctl exit non-zero after printing a report
// that still has problems; the report already said what they are.
var errFsckProblems = errors.New("fsck found problems")

func newFsckCmd() *cobra.Command {
	var (
		region  string
		repair  bool
		release bool
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "fsck --region PATH",
		Short: "Check (and repair) a node's persistent-memory region offline",
		Long: `Checks every invariant of a region's layout: both superblock copies, the
redo log, the record bitmap against the record headers, every extent
against the data area and the others, and the block bitmap against the
extents owned by allocated records.

Run it on a stopped node (the region must not be open elsewhere). Without
--repair nothing is written: the region (a file or a /dev/daxX.Y device)
is mapped read-only and recovery (replaying committed transactions)
happens in memory. With --repair the region is recovered in place, damaged
log slots are discarded and every repairable problem is fixed, each fix in
its own crash-safe transaction; one pass suffices.

Repair never frees anything a record may still own. A record whose header
is damaged is quarantined: kept, with its payload and the extents it may
own, under kind 0xffff, for the layer above or an operator to inspect.
Blocks that no record owns are freed only while no record is damaged,
quarantined or overlapping another. --release-quarantined (with --repair)
frees quarantined records and their blocks: their content is lost.

Exit status: 0 when the region is clean (after repair, with --repair),
1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if region == "" {
				return errors.New("--region PATH is required (a region file or a /dev/daxX.Y device)")
			}
			var logger *slog.Logger
			if !asJSON {
				logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			}
			if release && !repair {
				return errors.New("--release-quarantined frees records: it needs --repair")
			}
			rep, err := pmem.CheckFileWith(cmd.Context(), region, pmem.CheckOptions{Repair: repair, ReleaseQuarantined: release, Logger: logger})
			out := cmd.OutOrStdout()
			if err != nil {
				if asJSON {
					_ = json.NewEncoder(out).Encode(map[string]string{"region": region, "error": err.Error()})
				}
				return fmt.Errorf("fsck %s: %w", region, err)
			}
			if asJSON {
				if err := json.NewEncoder(out).Encode(struct {
					Region string `json:"region"`
					Clean  bool   `json:"clean"`
					*pmem.Report
				}{region, rep.Clean(), rep}); err != nil {
					return err
				}
			} else {
				rep.WriteText(out)
			}
			if !rep.Clean() {
				return errFsckProblems
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&region, "region", "", "region file or device-DAX device to check")
	f.BoolVar(&repair, "repair", false, "recover the region in place and fix what can be fixed")
	f.BoolVar(&release, "release-quarantined", false, "with --repair: free quarantined records and their blocks (their content is lost)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
