package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestHelperArgs(t *testing.T) {
	t.Setenv("OCTOFS_TOKEN", "t") // no default token file
	const src = "10.0.0.1:7400,10.0.0.2:7400"
	base := []string{"mount", "--cluster", src, "--fsname", src}
	for _, tc := range []struct {
		prog string
		args []string
		want []string // nil: not a helper call
		err  string
	}{
		{"octofs", []string{"mount", "--cluster", src, "/mnt"}, nil, ""},
		{"octofs", []string{"serve", "--node-id", "n1"}, nil, ""},
		{"mount.octofs", []string{src, "/mnt"}, append(slices.Clone(base), "--daemon", "/mnt"), ""},
		{"octofs", []string{src, "/mnt", "-o", "rw,nosuid,nodev,token_file=/etc/t,allow_other"},
			append(slices.Clone(base), "--read-only=false", "--token-file", "/etc/t", "--allow-other=yes", "--daemon", "/mnt"), ""},
		{"mount.octofs", []string{src, "/mnt", "-n", "-o", "ro,noatime,attr_timeout=2.5,entry_timeout=300ms,_netdev,x-systemd.automount"},
			append(slices.Clone(base), "--read-only", "--noatime", "--attr-timeout", "2.5s", "--entry-timeout", "300ms", "--daemon", "/mnt"), ""},
		{"mount.fuse.octofs", []string{src, "/mnt", "-r", "-ofsname=prod,foreground"},
			append(slices.Clone(base), "--read-only", "--fsname", "prod", "/mnt"), ""},
		{"mount.octofs", []string{src, "/mnt", "-o", "bogus"}, nil, `unknown mount option "bogus"`},
		{"mount.octofs", []string{src, "/mnt", "-s", "-o", "bogus"}, append(slices.Clone(base), "--daemon", "/mnt"), ""},
		{"mount.octofs", []string{src, "/mnt", "-o", "token_file"}, nil, "needs a value"},
		{"mount.octofs", []string{src, "/mnt", "-o", "ro=1"}, nil, "takes no value"},
		{"mount.octofs", []string{src, "/mnt", "-o", "attr_timeout=-1"}, nil, "want 0 to 24h0m0s"},
		{"mount.octofs", []string{src, "/mnt", "-o", "attr_timeout=-1s"}, nil, "want 0 to 24h0m0s"},
		{"mount.octofs", []string{src, "/mnt", "-o", "attr_timeout=NaN"}, nil, "want 0 to 24h0m0s"},
		{"mount.octofs", []string{src, "/mnt", "-o", "op_timeout=inf"}, nil, "want 0 to 24h0m0s"},
		{"mount.octofs", []string{src, "/mnt", "-o", "op_timeout=1e300"}, nil, "want 0 to 24h0m0s"},
		{"mount.octofs", []string{src, "/mnt", "-o", "entry_timeout=soon"}, nil, "want seconds"},
		{"mount.octofs", []string{src}, nil, "want a cluster address list and a mount point"},
		{"mount.octofs", []string{src, "/mnt", "-o"}, nil, "-o needs options"},
		{"mount.octofs", []string{src, "/mnt", "-x"}, nil, "unknown flag -x"},
	} {
		got, err := helperArgs(tc.prog, tc.args)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %q: error %v, want one saying %q", tc.prog, tc.args, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s %q: %v", tc.prog, tc.args, err)
		case !slices.Equal(got, tc.want):
			t.Errorf("%s %q:\n got %q\nwant %q", tc.prog, tc.args, got, tc.want)
		}
	}
	if _, err := helperArgs("mount.octofs", []string{src, "/mnt", "-f"}); !errors.Is(err, errFakeMount) {
		t.Errorf("mount -f: %v, want errFakeMount", err)
	}
}
