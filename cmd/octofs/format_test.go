package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
)

func runFormatCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newFormatCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), err
}

func TestFormatCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	tests := []struct {
		name    string
		args    []string
		wantErr error
		want    string
	}{
		{"no path", nil, nil, ""},
		{"missing file without a size", []string{"--pmem", path}, pmem.ErrGeometry, "--size"},
		{"bad size", []string{"--pmem", path, "--size", "lots"}, nil, ""},
		{"new file", []string{"--pmem", path, "--size", "8MiB", "--block-size", "512"}, nil, "clean"},
		{"already formatted", []string{"--pmem", path}, pmem.ErrFormatted, "--force"},
		{"forced", []string{"--pmem", path, "--force", "--block-size", "512"}, nil, "formatted " + path},
		{"bad requirement", []string{"--pmem", path, "--force", "--pmem-require", "fast"}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runFormatCmd(t, tc.args...)
			switch {
			case tc.want != "" && tc.wantErr == nil:
				require.NoError(t, err, out)
				require.Contains(t, out, tc.want)
			case tc.wantErr != nil:
				require.ErrorIs(t, err, tc.wantErr)
				require.Contains(t, err.Error(), tc.want)
			default:
				require.Error(t, err)
			}
		})
	}
	r, err := pmem.Open(path, pmem.Options{})
	require.NoError(t, err, "octofs serve can open what format made")
	require.Equal(t, uint32(512), r.Geometry().BlockSize)
	require.Equal(t, uint64(8<<20), r.Geometry().RegionSize)
	require.NoError(t, r.Close())
}

func TestParseByteSize(t *testing.T) {
	tests := map[string]int64{"4096": 4096, "256MiB": 256 << 20, "64GiB": 64 << 30, "1T": 1 << 40, "8 MB": 8 << 20, "2kib": 2048}
	for in, want := range tests {
		got, err := parseByteSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "-1", "GiB", "1.5GiB", "9999999999TiB"} {
		_, err := parseByteSize(bad)
		require.Error(t, err, bad)
	}
}
