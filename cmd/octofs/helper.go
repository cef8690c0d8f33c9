package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// The mount helper: mount(8) runs /sbin/mount.octofs (for fstab type
// "octofs") as
//
//	mount.octofs SOURCE MOUNTPOINT [-sfnvrw] [-o OPTIONS]
//
// and mount.fuse3 (for type "fuse.octofs") runs `octofs SOURCE MOUNTPOINT
// -o OPTIONS`. SOURCE is the cluster's admin addresses, comma-separated;
// OPTIONS are mount(8)'s comma-separated options. helperArgs turns either
// into an `octofs mount` command line, which returns once the file
// system is mounted (--daemon), as mount(8) expects of a helper.
// docs/fuse.md ("Mounting from fstab") lists the options.

// helperNames are the program names under which octofs is a mount helper.
var helperNames = map[string]bool{"mount.octofs": true, "mount.fuse.octofs": true}

// defaultTokenFile is where a mount from fstab finds the cluster token
// when its options name none and OCTOFS_TOKEN is not set (mount(8) runs
// helpers with a bare environment).
const defaultTokenFile = "/etc/octofs/token"

// helperArgs returns the `octofs mount` arguments for a helper invocation
// (program name prog, arguments args), or nil if this is not one: prog
// is not a helper name and the first argument is not a cluster address
// followed by a mount point.
func helperArgs(prog string, args []string) ([]string, error) {
	if !helperNames[prog] {
		if len(args) < 2 || !strings.Contains(args[0], ":") || strings.HasPrefix(args[0], "-") || strings.HasPrefix(args[1], "-") {
			return nil, nil
		}
	}
	var pos, opts []string
	sloppy, fake := false, false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o":
			if i+1 == len(args) {
				return nil, errors.New("-o needs options")
			}
			i++
			opts = append(opts, strings.Split(args[i], ",")...)
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, strings.Split(a[2:], ",")...)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for _, c := range a[1:] {
				switch c {
				case 's':
					sloppy = true
				case 'f':
					fake = true
				case 'n', 'v', 'w':
				case 'r':
					opts = append(opts, "ro")
				default:
					return nil, fmt.Errorf("unknown flag -%c (usage: mount.octofs ADDR[,ADDR...] MOUNTPOINT [-sfnvrw] [-o OPTIONS])", c)
				}
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, fmt.Errorf("want a cluster address list and a mount point, got %q (usage: mount.octofs ADDR[,ADDR...] MOUNTPOINT [-o OPTIONS])", pos)
	}
	source, dir := pos[0], pos[1]
	out := []string{"mount", "--cluster", source, "--fsname", source}
	daemon, tokenGiven := true, os.Getenv("OCTOFS_TOKEN") != ""
	for _, o := range opts {
		key, val, hasVal := strings.Cut(strings.TrimSpace(o), "=")
		flag, kind := helperOption(key)
		switch {
		case key == "":
		case kind == optIgnored:
		case kind == optUnknown:
			if !sloppy {
				return nil, fmt.Errorf("unknown mount option %q (docs/fuse.md lists them)", o)
			}
		case kind == optSwitch:
			if hasVal {
				return nil, fmt.Errorf("mount option %q takes no value", key)
			}
			switch key {
			case "foreground":
				daemon = false
			case "rw":
				out = append(out, "--read-only=false")
			default:
				out = append(out, flag)
			}
		default:
			if !hasVal || val == "" {
				return nil, fmt.Errorf("mount option %q needs a value (%s=...)", key, key)
			}
			if kind == optSeconds {
				d, err := secondsOrDuration(val)
				if err != nil {
					return nil, fmt.Errorf("mount option %s=%s: %w", key, val, err)
				}
				val = d.String()
			}
			if key == "token_file" {
				tokenGiven = true
			}
			out = append(out, flag, val)
		}
	}
	if !tokenGiven {
		if _, err := os.Stat(defaultTokenFile); err == nil {
			out = append(out, "--token-file", defaultTokenFile)
		}
	}
	if daemon {
		out = append(out, "--daemon")
	}
	if fake {
		// mount -f: check the command line, mount nothing.
		return nil, errFakeMount
	}
	return append(out, dir), nil
}

// errFakeMount is helperArgs's answer to mount -f (fake): the command
// line is good, and there is nothing to do.
var errFakeMount = errors.New("fake mount")

// How a mount option maps onto `octofs mount`.
const (
	optUnknown = iota
	optIgnored // mount(8)'s own, or always so (nosuid, nodev)
	optSwitch  // a flag without a value
	optValue   // a flag with the option's value
	optSeconds // a flag with a duration: seconds (as FUSE file systems take them) or a Go duration
)

// helperOption returns the flag and kind of mount option key.
func helperOption(key string) (string, int) {
	switch key {
	case "token_file", "log_file", "log_level", "rdma_provider", "rdma_device", "soft_addr",
		"max_write", "max_readahead", "max_background", "write_behind", "fsname":
		return "--" + strings.ReplaceAll(key, "_", "-"), optValue
	case "attr_timeout", "entry_timeout", "negative_timeout", "op_timeout", "connect_timeout":
		return "--" + strings.ReplaceAll(key, "_", "-"), optSeconds
	case "ro":
		return "--read-only", optSwitch
	case "noatime", "noexec", "debug":
		return "--" + key, optSwitch
	case "no_cache", "server_permissions":
		return "--" + strings.ReplaceAll(key, "_", "-"), optSwitch
	case "allow_other":
		return "--allow-other=yes", optSwitch
	case "rw", "foreground":
		return "", optSwitch
	case "defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "_netdev", "nofail",
		"async", "exec", "relatime", "nosuid", "nodev", "suid", "dev", "default_permissions", "loud", "silent",
		"subtype", "blkdev":
		return "", optIgnored
	}
	if strings.HasPrefix(key, "x-") || strings.HasPrefix(key, "comment") {
		return "", optIgnored
	}
	return "", optUnknown
}

// secondsOrDuration parses "1", "0.5" (seconds) or "1s", "500ms": a
// duration from zero to maxOptionDuration (a NaN, an infinity or a
// negative number would otherwise become a nonsense duration).
func secondsOrDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return 0, fmt.Errorf("want seconds (2.5) or a duration (500ms)")
		}
		if math.IsNaN(f) || f < 0 || f > maxOptionDuration.Seconds() {
			return 0, fmt.Errorf("want 0 to %v", maxOptionDuration)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 || d > maxOptionDuration {
		return 0, fmt.Errorf("want 0 to %v", maxOptionDuration)
	}
	return d, nil
}

// maxOptionDuration bounds the helper's timeouts: a day.
const maxOptionDuration = 24 * time.Hour
