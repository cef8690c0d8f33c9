package fuse

import (
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
)

// Permission and errno tests in the manner of pjdfstest: each case is a
// script of system calls, each run by a helper process as one of several
// users (root, nobody, other, and member, who is in nobody's group as a
// supplementary group), with the errno or result Linux gives. The same
// scripts run on the local file system the tests live on (ext4 or tmpfs:
// the reference, which checks the scripts themselves) and on every mount
// back end, so a difference is the mount's bug, not the script's.
//
// A script line is: WANT USER OP ARGS... where WANT is an errno name, "0",
// the literal output (stat fields, readlink's target), "save:K" (remember
// the output as K), ">K" (output sorts after K: a later ctime) or "=K".
// $N255 and $N256 in arguments are names of 255 and 256 bytes.

// permCase is one script; tags name what a back end may lack.
type permCase struct {
	tags   []string
	script []string
}

var permCases = map[string]permCase{
	// chmod
	"chmod/owner": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65534",
		"0 nobody chmod f 0600", "0600 root stat f mode"}},
	"chmod/non-owner": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65534",
		"EPERM other chmod f 0600", "EPERM member chmod f 0666", "0644 root stat f mode"}},
	"chmod/root": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65534",
		"0 root chmod f 0777", "0777 nobody stat f mode"}},
	"chmod/search denied": {nil, []string{
		"0 root mkdir d 0755", "0 root create d/f 0644", "0 root chown d/f 65534 65534", "0 root chmod d 0744",
		"EACCES nobody chmod d/f 0600", "0 root chmod d 0755", "0 nobody chmod d/f 0600"}},
	"chmod/setgid cleared outside the group": {[]string{"setgid"}, []string{
		"0 root create f 0644", "0 root chown f 65534 65533",
		"0 nobody chmod f 02755", "0755 root stat f mode",
		"0 root chmod f 02755", "02755 root stat f mode"}},
	"chmod/setuid and sticky kept": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65534",
		"0 nobody chmod f 04755", "04755 root stat f mode",
		"0 nobody chmod f 01755", "01755 root stat f mode"}},
	"chmod/errors": {nil, []string{
		"0 root create f 0644", "ENOENT root chmod nothing 0644", "ENOTDIR root chmod f/x 0644",
		"ENAMETOOLONG root chmod $N256 0644", "0 root symlink s2 s1", "0 root symlink s1 s2", "ELOOP root chmod s1 0644"}},
	"chmod/follows symlinks": {nil, []string{
		"0 root create f 0644", "0 root symlink f l", "0 root chmod l 0600", "0600 root stat f mode"}},
	"chmod/updates ctime": {[]string{"ctime"}, []string{
		"0 root create f 0644", "save:c root stat f ctime", "0 root chmod f 0600", ">c root stat f ctime"}},

	// chown
	"chown/root": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65533", "65534,65533 root stat f uid,gid"}},
	"chown/non-root to another uid": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65534",
		"EPERM nobody chown f 65533 -1", "EPERM other chown f 65533 65533", "65534,65534 root stat f uid,gid"}},
	"chown/owner to a group of theirs": {[]string{"chownperm"}, []string{
		"0 root create f 0644", "0 root chown f 65532 65532",
		"0 member chown f -1 65534", "65532,65534 root stat f uid,gid",
		"EPERM member chown f -1 65533", "0 member chown f 65532 65532", "65532,65532 root stat f uid,gid"}},
	"chown/non-owner in the group": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65534", "EPERM member chown f -1 65534"}},
	"chown/clears setuid and setgid": {[]string{"killpriv"}, []string{
		"0 root create f 0644", "0 root chown f 65532 65532", "0 root chmod f 06555",
		"0 member chown f -1 65534", "0555,65532,65534 root stat f mode,uid,gid",
		"0 root chmod f 06555", "0 root chown f 65533 65533", "0555 root stat f mode",
		"0 root chmod f 02545", "0 root chown f 65534 65534", "02545 root stat f mode"}},
	"chown/directory keeps setgid": {nil, []string{
		"0 root mkdir d 0755", "0 root chmod d 02755", "0 root chown d 65534 65534", "02755 root stat d mode"}},
	"lchown/symlink itself": {nil, []string{
		"0 root create f 0644", "0 root symlink f l", "0 root lchown l 65534 65533",
		"65534,65533 root lstat l uid,gid", "0,0 root stat f uid,gid"}},
	"chown/updates ctime": {[]string{"ctime"}, []string{
		"0 root create f 0644", "save:c root stat f ctime", "0 root chown f 65534 65534", ">c root stat f ctime"}},
	"chown/errors": {nil, []string{
		"ENOENT root chown nothing 1 1", "0 root mkdir d 0700", "0 root create d/f 0644",
		"EACCES nobody chown d/f 65534 65534", "ENAMETOOLONG root chown $N256 1 1"}},

	// link
	"link/basic": {nil, []string{
		"0 root create f 0644", "0 root link f g", "2 root stat f nlink", "2 root stat g nlink",
		"0 root unlink f", "1 root stat g nlink", "regular,0644 root stat g type,mode"}},
	"link/errors": {nil, []string{
		"0 root create f 0644", "0 root create g 0644", "EEXIST root link f g",
		"0 root mkdir d 0755", "EPERM root link d e", "ENOENT root link nothing e",
		"ENAMETOOLONG root link f $N256", "ENOENT root link f nodir/e"}},
	"link/needs write on the directory": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65534", "0 root mkdir d 0755",
		"EACCES nobody link f d/g", "0 root chmod d 0777", "0 nobody link f d/g", "2 root stat f nlink"}},
	"link/updates ctime": {[]string{"ctime"}, []string{
		"0 root create f 0644", "0 root mkdir d 0755", "save:c root stat f ctime", "save:d root stat d ctime",
		"0 root link f d/g", ">c root stat f ctime", ">d root stat d ctime"}},

	// mkdir
	"mkdir/owner and mode": {nil, []string{
		"0 root mkdir d 0777", "0 root chmod d 0777", "0 nobody mkdir d/n 0777",
		"dir,0755,65534,65534 root stat d/n type,mode,uid,gid", "3 root stat d nlink"}},
	"mkdir/errors": {nil, []string{
		"0 root mkdir d 0755", "EEXIST root mkdir d 0755", "0 root create f 0644", "EEXIST root mkdir f 0755",
		"EACCES nobody mkdir d/n 0755", "ENOENT root mkdir nodir/n 0755", "ENOTDIR root mkdir f/n 0755",
		"ENAMETOOLONG root mkdir $N256 0755", "0 root mkdir $N255 0755"}},
	"mkdir/setgid directory": {[]string{"setgid"}, []string{
		"0 root mkdir g 0777", "0 root chown g 0 65533", "0 root chmod g 02777",
		"0 nobody mkdir g/sub 0755", "02755,65534,65533 root stat g/sub mode,uid,gid",
		"0 nobody create g/f 0644", "0644,65534,65533 root stat g/f mode,uid,gid"}},
	"mkdir/updates parent times": {[]string{"ctime"}, []string{
		"0 root mkdir d 0755", "save:c root stat d ctime", "0 root mkdir d/n 0755", ">c root stat d ctime"}},

	// mkfifo and mknod
	"mkfifo/basic": {nil, []string{
		"0 root mkdir d 0777", "0 root chmod d 0777", "0 nobody mkfifo d/p 0644",
		"fifo,0644,65534,65534 root stat d/p type,mode,uid,gid"}},
	"mkfifo/errors": {nil, []string{
		"0 root mkfifo p 0644", "EEXIST root mkfifo p 0644", "0 root mkdir d 0755",
		"EACCES nobody mkfifo d/p 0644", "ENAMETOOLONG root mkfifo $N256 0644"}},
	"mknod/devices by root": {nil, []string{
		"0 root mknod c c 0644 0x0103", "char,0644 root stat c type,mode",
		"0 root mknod s s 0644 0", "socket root stat s type"}},

	// open
	"open/read permission": {nil, []string{
		"0 root create f 0600", "EACCES nobody open f O_RDONLY", "0 root chmod f 0604", "0 nobody open f O_RDONLY"}},
	"open/write permission": {nil, []string{
		"0 root create f 0644", "EACCES nobody open f O_WRONLY", "EACCES nobody open f O_RDWR",
		"EACCES nobody open f O_RDONLY,O_TRUNC", "0 nobody open f O_RDONLY", "0 root chmod f 0646",
		"0 nobody open f O_WRONLY,O_TRUNC"}},
	"open/directories": {nil, []string{
		"0 root mkdir d 0755", "EISDIR root open d O_WRONLY", "EISDIR root open d O_RDWR", "0 root open d O_RDONLY",
		"0 root create f 0644", "ENOTDIR root open f O_RDONLY,O_DIRECTORY", "0 root open d O_RDONLY,O_DIRECTORY"}},
	"open/create": {nil, []string{
		"0 root mkdir d 0777", "0 root chmod d 0777", "0 nobody open d/n O_CREAT,O_WRONLY 0640",
		"regular,0640,65534,65534 root stat d/n type,mode,uid,gid",
		"EEXIST nobody open d/n O_CREAT,O_EXCL,O_WRONLY 0640", "0 nobody open d/n O_CREAT,O_WRONLY 0640",
		"0 nobody open d/ro O_CREAT,O_RDWR 0444", "0444 root stat d/ro mode"}},
	"open/create needs write and search": {nil, []string{
		"0 root mkdir d 0755", "EACCES nobody open d/n O_CREAT,O_WRONLY 0644",
		"0 root chmod d 0776", "EACCES nobody open d/n O_CREAT,O_WRONLY 0644",
		"0 root chmod d 0777", "0 nobody open d/n O_CREAT,O_WRONLY 0644"}},
	"open/symlinks": {nil, []string{
		"0 root create f 0644", "0 root symlink f l", "ELOOP root open l O_RDONLY,O_NOFOLLOW", "0 root open l O_RDONLY",
		"EEXIST root open l O_CREAT,O_EXCL,O_WRONLY 0644", "0 root symlink nothing dangling",
		"0 root open dangling O_CREAT,O_WRONLY 0644", "regular root stat nothing type"}},
	"open/noatime needs ownership": {nil, []string{
		"0 root create f 0644", "EPERM nobody open f O_RDONLY,O_NOATIME", "0 root chown f 65534 65534",
		"0 nobody open f O_RDONLY,O_NOATIME"}},
	"open/truncate": {nil, []string{
		"0 root create f 0644", "0 root chmod f 0666", "0 root write f hello", "5 root stat f size",
		"0 nobody open f O_WRONLY,O_TRUNC", "0 root stat f size"}},
	"open/errors": {nil, []string{
		"ENOENT root open nothing O_RDONLY", "ENAMETOOLONG root open $N256 O_RDONLY",
		"ENAMETOOLONG root open $N256 O_CREAT,O_WRONLY 0644", "0 root create f 0644",
		"ENOTDIR root open f/x O_RDONLY", "0 root symlink s2 s1", "0 root symlink s1 s2", "ELOOP root open s1 O_RDONLY"}},

	// rename
	"rename/basic": {nil, []string{
		"0 root create f 0644", "0 root rename f g", "ENOENT root stat f type", "regular root stat g type",
		"0 root mkdir d 0755", "0 root rename g d/h", "regular root stat d/h type", "0 root rename d e", "dir root stat e type"}},
	"rename/types": {nil, []string{
		"0 root create f 0644", "0 root mkdir d 0755", "0 root mkdir e 0755", "0 root create e/x 0644",
		"EISDIR root rename f d", "ENOTDIR root rename d f", "ENOTEMPTY root rename d e",
		"0 root mkdir d2 0755", "0 root rename d d2", "ENOENT root stat d type", "EINVAL root rename e e/sub"}},
	"rename/replaces a file": {nil, []string{
		"0 root create f 0644", "0 root write f new", "0 root create g 0600", "0 root rename f g",
		"0644,3 root stat g mode,size", "0:new root read g"}},
	"rename/needs write on both directories": {nil, []string{
		"0 root mkdir a 0755", "0 root mkdir b 0777", "0 root chmod b 0777", "0 root create a/f 0644",
		"0 root chown a/f 65534 65534", "EACCES nobody rename a/f b/f", "0 root chmod a 0777",
		"0 root chmod b 0755", "EACCES nobody rename a/f b/f", "0 root chmod b 0777", "0 nobody rename a/f b/f"}},
	"rename/moved directory needs write on itself": {[]string{"dirperm"}, []string{
		"0 root mkdir a 0777", "0 root chmod a 0777", "0 root mkdir b 0777", "0 root chmod b 0777",
		"0 root mkdir a/d 0755", "EACCES nobody rename a/d b/d", "0 root chown a/d 65534 65534",
		"0 nobody rename a/d b/d", "dir root stat b/d type"}},
	"rename/sticky directory": {[]string{"sticky"}, []string{
		"0 root mkdir t 0777", "0 root chmod t 01777", "0 nobody create t/f 0644", "0 other create t/o 0644",
		"EPERM other rename t/f t/g", "EPERM other rename t/o t/f", "0 nobody rename t/f t/g",
		"0 root rename t/g t/h", "0 root chown t 65533 65533", "0 other rename t/h t/i"}},
	"rename/noreplace and exchange": {[]string{"exchange"}, []string{
		"0 root create f 0644", "0 root mkdir d 0755", "EEXIST root rename_noreplace f d",
		"0 root rename_exchange f d", "dir root stat f type", "regular root stat d type",
		"0 root rename_noreplace f g", "dir root stat g type"}},
	"rename/errors": {nil, []string{
		"ENOENT root rename nothing x", "0 root create f 0644", "ENAMETOOLONG root rename f $N256",
		"0 root rename f $N255", "ENOENT root rename $N255 nodir/f"}},
	"rename/updates ctime": {[]string{"ctime"}, []string{
		"0 root create f 0644", "0 root mkdir a 0755", "0 root mkdir b 0755", "save:c root stat f ctime",
		"save:a root stat a ctime", "save:b root stat b ctime", "0 root rename f a/f", ">a root stat a ctime",
		"0 root rename a/f b/f", ">b root stat b ctime", ">c root stat b/f ctime"}},

	// rmdir
	"rmdir/errors": {nil, []string{
		"0 root mkdir d 0755", "0 root mkdir d/e 0755", "ENOTEMPTY root rmdir d", "0 root create f 0644",
		"ENOTDIR root rmdir f", "ENOENT root rmdir nothing", "EINVAL root rmdir d/e/.",
		"ENOTEMPTY root rmdir d/e/..", "ENAMETOOLONG root rmdir $N256", "0 root rmdir d/e", "0 root rmdir d",
		"ENOENT root stat d type"}},
	"rmdir/needs write on the parent": {nil, []string{
		"0 root mkdir d 0755", "0 root mkdir d/e 0777", "0 root chown d/e 65534 65534",
		"EACCES nobody rmdir d/e", "0 root chmod d 0777", "0 nobody rmdir d/e"}},
	"rmdir/sticky directory": {[]string{"sticky"}, []string{
		"0 root mkdir t 0777", "0 root chmod t 01777", "0 nobody mkdir t/n 0755", "EPERM other rmdir t/n",
		"0 nobody rmdir t/n", "0 nobody mkdir t/n 0755", "0 root rmdir t/n"}},
	"rmdir/updates parent nlink": {nil, []string{
		"0 root mkdir d 0755", "0 root mkdir d/e 0755", "3 root stat d nlink", "0 root rmdir d/e", "2 root stat d nlink"}},

	// symlink
	"symlink/basic": {nil, []string{
		"0 root mkdir d 0777", "0 root chmod d 0777", "0 nobody symlink some/target d/l",
		"symlink,65534,65534 root lstat d/l type,uid,gid", "some/target root readlink d/l"}},
	"symlink/errors": {nil, []string{
		"0 root create f 0644", "EEXIST root symlink x f", "0 root mkdir d 0755", "EACCES nobody symlink x d/l",
		"ENAMETOOLONG root symlink x $N256", "ENOENT root symlink x nodir/l", "ENOENT root symlink  empty"}},
	"symlink/long target": {nil, []string{
		"0 root symlink $P1023 l1", "0 root symlink $P4095 l2", "4095 root lstat l2 size",
		"ENAMETOOLONG root symlink $P4096 l3"}},

	// truncate
	"truncate/basic": {nil, []string{
		"0 root create f 0644", "0 root write f hello", "0 root chown f 65534 65534",
		"0 nobody truncate f 2", "2 root stat f size", "0:he root read f", "0 nobody truncate f 100",
		"100 root stat f size"}},
	"truncate/errors": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65534", "EACCES other truncate f 1",
		"0 root mkdir d 0755", "EISDIR root truncate d 0", "ENOENT root truncate nothing 0",
		"EINVAL root ftruncate f O_RDONLY 0", "0 root ftruncate f O_WRONLY 3", "3 root stat f size"}},
	"truncate/clears setuid": {[]string{"killpriv"}, []string{
		"0 root create f 0644", "0 root chown f 65534 65534", "0 root chmod f 06777",
		"0 other truncate f 0", "0777 root stat f mode"}},
	"truncate/updates times": {[]string{"ctime"}, []string{
		"0 root create f 0644", "save:c root stat f ctime", "0 root truncate f 10", ">c root stat f ctime"}},

	// write by another user
	"write/clears setuid": {[]string{"killpriv"}, []string{
		"0 root create f 0644", "0 root chown f 65534 65534", "0 root chmod f 06777",
		"0 other write f x", "0777 root stat f mode", "0 root chmod f 06777", "0 root write f y",
		"06777 root stat f mode"}},
	"write/append": {nil, []string{
		"0 root create f 0644", "0 root chmod f 0666", "0 root write f abc", "0 other append f def", "0:abcdef root read f"}},

	// unlink
	"unlink/basic": {nil, []string{
		"0 root create f 0644", "0 root unlink f", "ENOENT root stat f type",
		"0 root mkfifo p 0644", "0 root unlink p", "0 root symlink x l", "0 root unlink l"}},
	"unlink/errors": {nil, []string{
		"0 root mkdir d 0755", "EISDIR root unlink d", "ENOENT root unlink nothing", "0 root create d/f 0644",
		"EACCES nobody unlink d/f", "ENAMETOOLONG root unlink $N256", "0 root create f 0644", "ENOTDIR root unlink f/x"}},
	"unlink/sticky directory": {[]string{"sticky"}, []string{
		"0 root mkdir t 0777", "0 root chmod t 01777", "0 nobody create t/f 0644", "EPERM other unlink t/f",
		"0 nobody unlink t/f", "0 nobody create t/f 0644", "0 root chown t 65533 65533", "0 other unlink t/f"}},
	"unlink/updates ctime": {[]string{"ctime"}, []string{
		"0 root create f 0644", "0 root link f g", "save:c root stat f ctime", "0 root unlink g",
		">c root stat f ctime"}},

	// utimensat
	"utimensat/owner sets times": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65534", "0 nobody utimensat f 100 200",
		"100,200 root stat f atime,mtime", "0 nobody utimensat f UTIME_OMIT UTIME_OMIT",
		"100,200 root stat f atime,mtime", "0 nobody utimensat f 300 UTIME_OMIT", "300,200 root stat f atime,mtime"}},
	"utimensat/non-owner": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65534", "0 root chmod f 0666", "EPERM other utimensat f 100 200",
		"0 other utimensat f UTIME_NOW UTIME_NOW", "0 root chmod f 0644",
		"EACCES other utimensat f UTIME_NOW UTIME_NOW", "EPERM other utimensat f 100 200",
		"0 root utimensat f 1 2", "1,2 root stat f atime,mtime"}},
	"utimensat/symlink itself": {nil, []string{
		"0 root create f 0644", "0 root symlink f l", "0 root utimensat l 5 6 AT_SYMLINK_NOFOLLOW",
		"5,6 root lstat l atime,mtime"}},

	// groups
	"groups/supplementary": {nil, []string{
		"0 root create f 0640", "0 root chown f 0 65534", "0 root write f data",
		"0:data member read f", "0:data nobody read f", "EACCES other read f"}},
	"groups/classes are exclusive": {nil, []string{
		"0 root create f 0644", "0 root chown f 65534 65534", "0 root chmod f 0046",
		"EACCES nobody read f", "0: member read f", "EACCES member write f x", "0 other write f x"}},
	"dirs/search and read": {nil, []string{
		"0 root mkdir d 0700", "0 root create d/f 0644", "EACCES nobody stat d/f type", "EACCES nobody chdir d",
		"0 root chmod d 0711", "0 nobody chdir d",
		"regular nobody stat d/f type", "EACCES nobody readdir d", "0 root chmod d 0755", "0:f nobody readdir d"}},
	"access/modes": {nil, []string{
		"0 root create f 0640", "0 root chown f 65534 65534", "0 nobody access f rw", "EACCES nobody access f x",
		"EACCES other access f r", "0 root access f rw", "EACCES root access f x", "0 root chmod f 0641",
		"0 root access f x", "0 other access f x"}},
}

// permBackends run the scripts: the local file system (the reference)
// and every mount back end.
func TestPermissions(t *testing.T) {
	mountable(t) // the helper changes users: root only
	t.Run("local", func(t *testing.T) {
		dir, err := os.MkdirTemp("", "octofs-perm-local-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		os.Chmod(dir, 0o755)
		runPermCases(t, dir, nil)
	})
	forEachFixture(t, func(t *testing.T, f *fixture) {
		// What users get: the kernel checks with the attributes it
		// caches (default_permissions) and the cluster checks again.
		t.Run("mount", func(t *testing.T) {
			mnt, _ := f.mount(t, Options{})
			runPermCases(t, subdir(t, mnt, "mount"), f.gaps)
		})
		// The cluster's own checks, with the kernel checking nothing.
		t.Run("server", func(t *testing.T) {
			mnt, _ := f.mount(t, Options{ServerPermissions: true})
			runPermCases(t, subdir(t, mnt, "server"), f.serverGaps)
		})
	})
}

func runPermCases(t *testing.T, base string, gaps map[string]string) {
	names := make([]string, 0, len(permCases))
	for name := range permCases {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := permCases[name]
		t.Run(name, func(t *testing.T) {
			for _, tag := range c.tags {
				if why, ok := gaps[tag]; ok {
					t.Skip(why)
				}
			}
			dir := subdir(t, base, name)
			runScript(t, dir, c.script)
		})
	}
}

var users = map[string]user{"root": root, "nobody": nobody, "other": other, "member": member}

// expand replaces the long-name placeholders of a script argument.
func expand(a string) string {
	switch a {
	case "$N255":
		return strings.Repeat("n", 255)
	case "$N256":
		return strings.Repeat("n", 256)
	case "$P1023", "$P4095", "$P4096":
		n := map[string]int{"$P1023": 1023, "$P4095": 4095, "$P4096": 4096}[a]
		return longPath(n)
	}
	return a
}

// longPath is a relative path of n bytes made of names of at most 255.
func longPath(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(strings.Repeat("p", min(255, n-b.Len())))
	}
	return b.String()
}

func runScript(t *testing.T, dir string, script []string) {
	t.Helper()
	saved := map[string]string{}
	for i, line := range script {
		f := strings.Split(line, " ")
		if len(f) < 3 {
			t.Fatalf("line %d %q: malformed", i+1, line)
		}
		want, who, args := f[0], f[1], f[2:]
		u, ok := users[who]
		if !ok {
			t.Fatalf("line %d %q: unknown user", i+1, line)
		}
		args = slices.Clone(args)
		for j := range args {
			args[j] = expand(args[j])
		}
		got := as(t, u, dir, args...)
		switch {
		case strings.HasPrefix(want, "save:"):
			saved[want[5:]] = got
		case strings.HasPrefix(want, ">"):
			if prev := saved[want[1:]]; !(len(got) > len(prev) || len(got) == len(prev) && got > prev) {
				t.Errorf("line %d %q: got %s, want after %s", i+1, line, got, prev)
			}
		case strings.HasPrefix(want, "="):
			if prev := saved[want[1:]]; got != prev {
				t.Errorf("line %d %q: got %s, want %s", i+1, line, got, prev)
			}
		default:
			if got != want {
				t.Errorf("line %d %q: got %s, want %s", i+1, line, got, want)
			}
		}
	}
}
