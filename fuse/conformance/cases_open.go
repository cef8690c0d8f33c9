package conformance

import "fmt"

// Cases of open(2).

// accessFor is what open with flags answers for a user whose permission
// bits are bits (r=4, w=2).
func accessFor(bits int, flags string) string {
	need := map[string]int{"O_RDONLY": 4, "O_WRONLY": 2, "O_RDWR": 6}[flags]
	if bits&need == need {
		return "0"
	}
	return "EACCES"
}

func openCases() []Case {
	var cs []Case
	// The permission matrix: a file owned by nobody:nobody in each mode,
	// opened by the owner, a supplementary and a primary group member,
	// someone else, and root, for reading, writing and both.
	for _, mode := range []int{0o000, 0o400, 0o200, 0o600, 0o040, 0o020, 0o060, 0o004, 0o002, 0o006,
		0o700, 0o070, 0o007, 0o477, 0o747, 0o774, 0o644, 0o466} {
		s := steps(mkAs("regular", "f", "65534 65534"), fmt.Sprintf("root chmod f 0%03o", mode))
		for _, who := range []struct {
			user  string
			shift int
		}{{"nobody", 6}, {"member", 3}, {"primary", 3}, {"other", 0}} {
			bits := mode >> who.shift & 7
			for _, fl := range []string{"O_RDONLY", "O_WRONLY", "O_RDWR"} {
				s = append(s, fmt.Sprintf("%s open f %s => %s", who.user, fl, accessFor(bits, fl)))
			}
		}
		s = append(s, "root open f O_RDWR => 0")
		cs = append(cs, c(fmt.Sprintf("open/permission matrix for mode %03o", mode), s))
	}
	cs = append(cs,
		c("open/creates a file", "root mkdir d 0777", "root chmod d 0777", "root snap d",
			"nobody open d/f O_CREAT,O_WRONLY 0640 => 0", "root lstat d/f => regular,0640,65534,65534,1,0",
			"root times d => m+ c+"),
		c("open/a new file's times are one instant", "root open f O_CREAT,O_WRONLY 0644 => 0",
			"root sametimes f => a=m=c"),
		c("open/O_CREAT of an existing file changes nothing", "root create f 0644", "root write f abc",
			"root snap f", "root snap .", "root open f O_CREAT,O_WRONLY 0600 => 0", "root lstat f mode,size => 0644,3",
			"root times f => m- c-", "root times . => m- c-"),
		c("open/O_CREAT,O_EXCL over every type", "root create f 0644", "root mkdir d 0755", "root mkfifo p 0644",
			"root symlink f l", "root symlink nothing dangling", "root open f O_CREAT,O_EXCL,O_WRONLY => EEXIST",
			"root open d O_CREAT,O_EXCL,O_RDONLY => EEXIST", "root open p O_CREAT,O_EXCL,O_RDONLY => EEXIST",
			"root open l O_CREAT,O_EXCL,O_WRONLY => EEXIST", "root open dangling O_CREAT,O_EXCL,O_WRONLY => EEXIST",
			"root lstat nothing type => ENOENT"),
		c("open/O_EXCL without O_CREAT", "root create f 0644", "root open f O_EXCL,O_RDONLY => 0"),
		c("open/O_CREAT through a dangling symlink creates its target", "root symlink nothing l",
			"root open l O_CREAT,O_WRONLY 0600 => 0", "root lstat nothing type,mode => regular,0600",
			"root symlink sub/x m", "root open m O_CREAT,O_WRONLY => ENOENT"),
		c("open/O_CREAT through a symlinked directory", "root mkdir d 0755", "root symlink d l",
			"root open l/f O_CREAT,O_WRONLY 0640 => 0", "root lstat d/f type,mode => regular,0640"),
		c("open/O_CREAT needs write and search", "root mkdir d 0755", "nobody open d/f O_CREAT,O_WRONLY => EACCES",
			"root chmod d 0776", "nobody open d/f O_CREAT,O_WRONLY => EACCES", "root chmod d 0773",
			"nobody open d/f O_CREAT,O_WRONLY => 0"),
		c("open/O_CREAT with umask", "root umask 027", "root open f O_CREAT,O_WRONLY 0777 => 0",
			"root lstat f mode => 0750"),
		c("open/O_CREAT with special bits", "root open f O_CREAT,O_WRONLY 07777 => 0", "root lstat f mode",
			"root mkdir d 0777", "root chmod d 0777", "nobody open d/g O_CREAT,O_WRONLY 07777 => 0", "root lstat d/g mode"),
		c("open/a new file of mode 0444 is writable by its creator", "root mkdir d 0777", "root chmod d 0777",
			"nobody fopen k d/f O_CREAT,O_RDWR 0444", "nobody fwrite k abc => 0", "nobody fclose k",
			"root read d/f => \"abc\"", "nobody open d/f O_WRONLY => EACCES"),
		c("open/O_TRUNC", "root create f 0644", "root write f hello", "root snap f",
			"root open f O_WRONLY,O_TRUNC => 0", "root lstat f size => 0", "root times f => m+ c+",
			"root snap f", "root open f O_WRONLY,O_TRUNC => 0", "root times f => m+ c+"),
		c("open/O_TRUNC with O_RDONLY", "root create f 0666", "root write f hello", "root chmod f 0644",
			"nobody open f O_RDONLY,O_TRUNC => EACCES", "root stat f size => 5", "root chmod f 0646",
			"other open f O_RDONLY,O_TRUNC => 0", "root stat f size => 0"),
		c("open/O_TRUNC on a fifo and a directory", "root mkfifo p 0666", "root open p O_RDWR,O_TRUNC => 0",
			"root mkdir d 0755", "root open d O_RDONLY,O_TRUNC => EISDIR"),
		c("open/O_TRUNC by another user clears setuid", "root create f 0666", "root write f abc",
			"root chmod f 06777", "other open f O_WRONLY,O_TRUNC => 0", "root stat f mode,size"),
		c("open/EISDIR", "root mkdir d 0755", "root open d O_WRONLY => EISDIR", "root open d O_RDWR => EISDIR",
			"root open d O_RDONLY => 0", "root open d O_CREAT,O_RDONLY => EISDIR", "root open d/ O_RDONLY => 0"),
		c("open/O_DIRECTORY", "root create f 0644", "root open f O_RDONLY,O_DIRECTORY => ENOTDIR",
			"root mkdir d 0755", "root open d O_RDONLY,O_DIRECTORY => 0", "root symlink d l",
			"root open l O_RDONLY,O_DIRECTORY => 0", "root open new O_CREAT,O_DIRECTORY,O_RDONLY => EINVAL",
			"root open f/ O_RDONLY => ENOTDIR"),
		c("open/O_NOFOLLOW", "root create f 0644", "root symlink f l", "root open l O_RDONLY,O_NOFOLLOW => ELOOP",
			"root open l O_RDONLY => 0", "root open f O_RDONLY,O_NOFOLLOW => 0",
			"root open l O_PATH,O_NOFOLLOW => 0", "root mkdir d 0755", "root symlink d m",
			"root open m/ O_RDONLY,O_NOFOLLOW => 0"),
		c("open/O_NOATIME needs ownership", mkAs("regular", "f", "65534 65534"), "root chmod f 0644",
			"other open f O_RDONLY,O_NOATIME => EPERM", "nobody open f O_RDONLY,O_NOATIME => 0",
			"root open f O_RDONLY,O_NOATIME => 0"),
		c("open/O_APPEND", "root create f 0644", "root write f hello", "root fopen k f O_WRONLY,O_APPEND",
			"root fwrite k abc => 0", "root fpwrite k 0 XY => 0", "root fclose k", "root read f => \"helloabcXY\""),
		c("open/O_APPEND by two descriptors", "root create f 0644", "root fopen a f O_WRONLY,O_APPEND",
			"root fopen b f O_WRONLY,O_APPEND", "root fwrite a 11", "root fwrite b 22", "root fwrite a 33",
			"root fclose a", "root fclose b", "root read f => \"112233\""),
		c("open/O_RDWR reads back its writes", "root create f 0644", "root fopen k f O_RDWR",
			"root fwrite k abcdef", "root fpread k 2 3 => \"cde\"", "root fstat k size => 6", "root fclose k"),
		c("open/O_TMPFILE", "root mkdir d 0755", "root open d O_TMPFILE,O_RDWR 0600", "root ls d => (empty)"),
		c("open/O_TMPFILE named by linkat", "root mkdir d 0755", "root fopen k d O_TMPFILE,O_RDWR 0640",
			"root fwrite k hello", "root fstat k nlink,size => 0,5", "root ls d => (empty)",
			"root linkat_follow @k d/t => 0", "root stat d/t type,nlink,size", "root read d/t => \"hello\"",
			"root linkat_follow @k d/u => 0", "root fclose k", "root stat d/t nlink => 2"),
		c("open/O_TMPFILE with O_EXCL cannot be named", "root mkdir d 0755",
			"root fopen k d O_TMPFILE,O_WRONLY,O_EXCL 0600", "root linkat_follow @k d/t => ENOENT",
			"root fclose k", "root ls d => (empty)"),
		c("open/O_TMPFILE needs write permission and a writable descriptor", "root mkdir d 0755",
			"nobody open d O_TMPFILE,O_RDWR 0600 => EACCES", "root open d O_TMPFILE,O_RDONLY 0600 => EINVAL",
			"root create f 0644", "root open f O_TMPFILE,O_RDWR 0600 => ENOTDIR"),
		c("open/ENXIO on a fifo without readers", "root mkfifo p 0666", "nobody open p O_WRONLY,O_NONBLOCK => ENXIO"),
		c("open/EACCES for a directory without read permission", "root mkdir d 0311",
			"nobody open d O_RDONLY => EACCES", "nobody open d O_PATH => 0", "root open d O_RDONLY => 0"),
		c("open/ELOOP at the last name", loopSteps, "root open s1 O_RDONLY => ELOOP", "root open s1 O_CREAT,O_WRONLY => ELOOP"),
		c("open/a path of 4095 bytes", "root mkpath $P4095", "root open $P4095 O_CREAT,O_WRONLY => 0",
			"root open $P4095 O_RDONLY => 0", "root open $P4096 O_CREAT,O_WRONLY => ENAMETOOLONG"),
		c("open/several descriptors see each other's writes", "root create f 0644", "root fopen a f O_WRONLY",
			"root fopen b f O_RDONLY", "root fwrite a hello", "root fpread b 0 10 => \"hello\"",
			"root fstat b size => 5", "root fclose a", "root fclose b"),
		c("open/an open file of another user survives chmod", "root create f 0666", "other fopen k f O_RDWR",
			"root chmod f 0", "other fwrite k abc => 0", "other fpread k 0 3 => \"abc\"", "other fclose k",
			"root read f => \"abc\""),
	)
	return append(cs, pathErrors("open", "open %s O_RDONLY", false)...)
}
