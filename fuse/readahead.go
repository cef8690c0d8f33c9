package fuse

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrReadAhead is returned by SetReadAhead when the kernel's read-ahead of
// a mount cannot be set.
var ErrReadAhead = errors.New("fuse: cannot set the mount's read-ahead")

// SetReadAhead sets the kernel's read-ahead for the FUSE mount at dir to
// bytes (rounded down to KiB). The kernel starts every FUSE mount at its
// default of 128 KiB and never raises it from the INIT reply's
// max_readahead, so a sequential reader of a mount would see 128 KiB READ
// requests one or two at a time however large max_read is; only the
// mount's backing device info in sysfs (/sys/class/bdi/MAJOR:MINOR/
// read_ahead_kb) raises it, which takes root. Files opened before the
// change keep the old value.
func SetReadAhead(dir string, bytes int) error {
	path, err := readAheadFile(dir)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(bytes>>10)), 0); err != nil {
		return fmt.Errorf("%w: %v (as root: echo %d > %s)", ErrReadAhead, err, bytes>>10, path)
	}
	return nil
}

// ReadAhead returns the kernel's read-ahead of the FUSE mount at dir, in
// bytes.
func ReadAhead(dir string) (int, error) {
	path, err := readAheadFile(dir)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrReadAhead, err)
	}
	kb, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrReadAhead, path, err)
	}
	return kb << 10, nil
}

// readAheadFile is the sysfs file that holds the read-ahead of the mount
// at dir: its device number names its backing device info.
func readAheadFile(dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", fmt.Errorf("%w: stat %s: %v", ErrReadAhead, dir, err)
	}
	return fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}
