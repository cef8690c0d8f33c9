package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
)

func runFsck(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newFsckCmd()
	var out, stderr bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), err
}

func TestFsckCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	r, err := pmem.Create(path, 256<<10, pmem.FormatOptions{BlockSize: 512, RecordSize: 128, LogSlots: 4, LogSlotSize: 1024, NumRecords: 64}, pmem.Options{})
	require.NoError(t, err)
	tx, err := r.Begin(t.Context())
	require.NoError(t, err)
	id, err := tx.AllocRecord(1)
	require.NoError(t, err)
	_, err = tx.AllocExtent(id, 2)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	g := r.Geometry()
	// Leak a block behind the allocator's back.
	r.Bytes()[g.BlkBitmapOff+1] |= 0x80
	require.NoError(t, r.Close())

	tests := []struct {
		name    string
		args    []string
		wantErr bool
		want    string
	}{
		{"missing flag", nil, true, ""},
		{"check finds the leak", []string{"--region", path}, true, "run again with --repair"},
		{"json report", []string{"--region", path, "--json"}, true, `"clean":false`},
		{"repair", []string{"--region", path, "--repair"}, false, "[repaired]"},
		{"clean afterwards", []string{"--region", path}, false, "clean"},
		{"release needs repair", []string{"--region", path, "--release-quarantined"}, true, ""},
		{"release with repair", []string{"--region", path, "--repair", "--release-quarantined"}, false, "clean"},
		{"not a region", []string{"--region", filepath.Join(t.TempDir(), "nothing")}, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runFsck(t, tc.args...)
			if tc.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err, out)
			}
			require.Contains(t, out, tc.want)
			if bytes.Contains([]byte(tc.name), []byte("json")) {
				var v map[string]any
				require.NoError(t, json.Unmarshal([]byte(out), &v))
				require.Equal(t, path, v["region"])
			}
		})
	}
}
