package conformance

import "fmt"

// Cases beyond single system calls: xattrs, directory listings, time
// stamps, writes, setgid and sticky directories, long names, and mdtest's
// storms.

func accessCases() []Case {
	return []Case{
		c("access/owner, group and other bits", mkAs("regular", "f", "65534 65534"), "root chmod f 0640",
			"nobody access f rw => 0", "nobody access f x => EACCES", "member access f r => 0",
			"member access f w => EACCES", "primary access f r => 0", "other access f r => EACCES",
			"other access f f => 0"),
		c("access/root", "root create f 0600", "root access f rw => 0", "root access f x => EACCES",
			"root chmod f 0601", "root access f x => 0", "root chmod f 0", "root access f rw => 0",
			"root mkdir d 0", "root access d rwx => 0"),
		c("access/classes are exclusive", mkAs("regular", "f", "65534 65534"), "root chmod f 0077",
			"nobody access f r => EACCES", "member access f rwx => 0", "other access f rwx => 0"),
		c("access/of a symlink follows it", "root create f 0600", "root symlink f l", "nobody access l r => EACCES",
			"root chmod f 0604", "nobody access l r => 0", "root symlink nothing dangling",
			"root access dangling f => ENOENT"),
		c("access/path errors", "root access nothing f => ENOENT", "root create f 0644", "root access f/x f => ENOTDIR",
			"root mkdir d 0700", "root create d/g 0666", "nobody access d/g r => EACCES"),
	}
}

func xattrCases() []Case {
	return []Case{
		c("xattr/set, get, list and remove", "root create f 0644", "root snap f",
			"root setxattr f user.a one => 0", "root times f => m- c+", "root setxattr f user.b '' => 0",
			"root getxattr f user.a => \"one\"", "root getxattr f user.b => \"\"", "root listxattr f => user.a,user.b",
			"root snap f", "root getxattr f user.a", "root times f => m- c-",
			"root removexattr f user.a => 0", "root times f => m- c+", "root listxattr f => user.b",
			"root removexattr f user.b => 0", "root listxattr f => (none)"),
		c("xattr/create and replace flags", "root create f 0644", "root setxattr f user.a 1 replace => ENODATA",
			"root setxattr f user.a 1 create => 0", "root setxattr f user.a 2 create => EEXIST",
			"root setxattr f user.a 3 replace => 0", "root getxattr f user.a => \"3\"", "root setxattr f user.a 4 both"),
		c("xattr/ENODATA", "root create f 0644", "root getxattr f user.none => ENODATA",
			"root removexattr f user.none => ENODATA", "root snap f", "root removexattr f user.none",
			"root times f => m- c-"),
		c("xattr/sizes and ERANGE", "root create f 0644", "root setxattr f user.a hello",
			"root getxattr f user.a 0 => size=5", "root getxattr f user.a 5 => \"hello\"",
			"root getxattr f user.a 4 => ERANGE", "root listxattr f 0 => size=7", "root listxattr f 6 => ERANGE",
			"root listxattr f 7 => user.a"),
		c("xattr/name lengths", "root create f 0644", "root setxattr f $X255 v => 0", "root getxattr f $X255 => \"v\"",
			"root setxattr f $X256 v => ERANGE", "root getxattr f $X256 => ERANGE", "root setxattr f user. v",
			"root setxattr f '' v => ERANGE"),
		c("xattr/value sizes", "root create f 0644", "root setxattr f user.big $V65536 => 0",
			"root getxattr f user.big", "root setxattr f user.big $V65537 => E2BIG",
			"root setxattr f user.mid $V4000 => 0", "root getxattr f user.mid 0 => size=4000"),
		c("xattr/many names", manyXattrs(100), "root listxattr f 0 => size=1000", "root getxattr f user.a099 => \"99\""),
		c("xattr/user namespace needs write to set and read to get", mkAs("regular", "f", "65534 65534"),
			"root chmod f 0640", "root setxattr f user.a v", "member getxattr f user.a => \"v\"",
			"other getxattr f user.a => EACCES", "member setxattr f user.b v => EACCES",
			"other listxattr f", "member listxattr f => user.a", "nobody setxattr f user.b v => 0",
			"root chmod f 0", "nobody getxattr f user.a => EACCES", "root getxattr f user.a => \"v\"",
			"member removexattr f user.a => EACCES", "nobody removexattr f user.a => EACCES"),
		c("xattr/user namespace on a directory", "root mkdir d 0777", "root chmod d 0777",
			"nobody setxattr d user.a v => 0", "root chmod d 0755", "nobody setxattr d user.b v => EACCES",
			"nobody getxattr d user.a => \"v\"", "root chmod d 01777", "nobody setxattr d user.c v => EPERM",
			"root setxattr d user.c v => 0", "root listxattr d => user.a,user.c"),
		c("xattr/user namespace on other types", "root mkfifo p 0666", "root setxattr p user.a v => EPERM",
			"root getxattr p user.a => ENODATA", "root symlink p l", "root lsetxattr l user.a v => EPERM",
			"root lgetxattr l user.a => ENODATA", "root llistxattr l => (none)", "root mknod c char 0666 1 3",
			"root setxattr c user.a v => EPERM"),
		c("xattr/follows symlinks", "root create f 0644", "root symlink f l", "root setxattr l user.a v => 0",
			"root getxattr f user.a => \"v\"", "root listxattr l => user.a", "root removexattr l user.a => 0",
			"root listxattr f => (none)"),
		c("xattr/trusted namespace is root's", "root create f 0666", "root setxattr f trusted.a v => 0",
			"root getxattr f trusted.a => \"v\"", "nobody setxattr f trusted.b v => EPERM",
			"nobody getxattr f trusted.a => ENODATA", "root setxattr f user.u v", "nobody listxattr f => user.u",
			"root listxattr f => trusted.a,user.u", "nobody removexattr f trusted.a => EPERM"),
		c("xattr/security namespace", "root create f 0666", "root setxattr f security.a v",
			"root getxattr f security.a", "nobody setxattr f security.b v", "nobody getxattr f security.a"),
		c("xattr/unknown namespaces", "root create f 0644", "root setxattr f foo.bar v => ENOTSUP",
			"root getxattr f foo.bar => ENOTSUP", "root setxattr f user v => ENOTSUP"),
		c("xattr/through a descriptor", "root create f 0644", "root fopen k f O_RDONLY",
			"root fsetxattr k user.a v => 0", "root fgetxattr k user.a => \"v\"", "root fclose k",
			"root getxattr f user.a => \"v\""),
		c("xattr/of an unlinked open file", "root create f 0644", "root setxattr f user.a v",
			"root fopen k f O_RDONLY", "root unlink f", "root fgetxattr k user.a => \"v\"",
			"root fsetxattr k user.b w => 0", "root fclose k"),
		c("xattr/kept by rename and link", "root create f 0644", "root setxattr f user.a v", "root rename f g",
			"root link g h", "root getxattr h user.a => \"v\""),
		c("xattr/ENOENT and ENOTDIR", "root getxattr nothing user.a => ENOENT", "root create f 0644",
			"root setxattr f/x user.a v => ENOTDIR", "root listxattr nothing => ENOENT"),
	}
}

func manyXattrs(n int) []string {
	out := []string{"root create f 0644"}
	for i := range n {
		out = append(out, fmt.Sprintf("root setxattr f user.a%03d %d", i, i))
	}
	return out
}

func readdirCases() []Case {
	return []Case{
		c("readdir/an empty directory", "root mkdir d 0755", "root ls d => (empty)",
			"root count d => n=0 dups=0 dots=2", "root sameino d/.. . => same"),
		c("readdir/entry types", "root mkdir d 0755", mk("root", "regular", "d/regular"), mk("root", "dir", "d/dir"),
			mk("root", "fifo", "d/fifo"), mk("root", "block", "d/block"), mk("root", "char", "d/char"),
			mk("root", "socket", "d/socket"), mk("root", "symlink", "d/symlink"),
			"root lstypes d => block:block,char:char,dir:dir,fifo:fifo,regular:regular,socket:socket,symlink:symlink"),
		c("readdir/more entries than a page", "root mkdir d 0755", "root many d 530", "root count d => n=530 dups=0 dots=2"),
		c("readdir/seekdir resumes", "root mkdir d 0755", "root many d 100", "root seekdir d 1 => ok n=102",
			"root seekdir d 2 => ok n=102", "root seekdir d 50 => ok n=102", "root seekdir d 101 => ok n=102"),
		c("readdir/during creates and removes", "root mkdir d 0755",
			"root churn d 270 => untouched-once=270/270 names-twice=0 errors=none"),
		c("readdir/after removals and renames", "root mkdir d 0755", "root create d/a 0644", "root create d/b 0644",
			"root create d/c 0644", "root unlink d/b", "root rename d/a d/z", "root mkdir d/e 0755", "root ls d => c,e,z"),
		c("readdir/needs read permission", "root mkdir d 0755", "root create d/f 0644", "root chmod d 0711",
			"nobody ls d => EACCES", "nobody stat d/f type => regular", "root chmod d 0744", "nobody ls d => f",
			"nobody stat d/f type => EACCES", "member ls d => f"),
		c("readdir/updates atime", "root mkdir d 0755", "root create d/f 0644", "root utimensat d 100 100",
			"root snap d", "root ls d => f", "root atime d => a+", "root times d => m- c-"),
		c("readdir/by another user updates atime", "root mkdir d 0755", "root create d/f 0644",
			"root utimensat d 100 100", "root snap d", "nobody ls d => f", "root atime d => a+", "root times d => m- c-"),
		c("readdir/of a removed directory", "root mkdir d 0755", "root fopen k d O_RDONLY,O_DIRECTORY",
			"root rmdir d", "root ls @k", "root fclose k"),
	}
}

func timesCases() []Case {
	return []Case{
		c("times/a new file's times", "root create f 0644", "root stat f blocks0 => true"),
		c("times/write updates mtime and ctime", "root create f 0644", "root snap f", "root write f abc",
			"root times f => m+ c+", "root snap .", "root write f def", "root times . => m- c-"),
		c("times/read updates atime (relatime)", "root create f 0644", "root write f abc",
			"root utimensat f 100 200", "root snap f", "root read f => \"abc\"", "root atime f => a+",
			"root times f => m- c-"),
		c("times/a second read does not update atime (relatime)", "root create f 0644", "root write f abc",
			"root utimensat f 100 200", "root snap f", "root read f", "root snap f", "root read f",
			"root atime f => a-",
			"root times f => m- c-"),
		c("times/a read by another user updates atime", "root create f 0644", "root write f abc",
			"root utimensat f 100 200", "root snap f", "nobody read f => \"abc\"", "root atime f => a+",
			"root times f => m- c-"),
		c("times/a read through O_NOATIME leaves atime", "root create f 0644", "root write f abc",
			"root utimensat f 100 200", "root snap f", "root fopen k f O_RDONLY,O_NOATIME", "root fread k 3 => \"abc\"",
			"root fclose k", "root atime f => a-", "root read f => \"abc\"", "root atime f => a+"),
		c("times/a read after a write updates atime again", "root create f 0644", "root write f abc",
			"root read f", "root write f def", "root snap f", "root read f => \"def\"", "root atime f => a+"),
		c("times/open and close change nothing", "root create f 0644", "root write f abc", "root snap f",
			"root open f O_RDONLY", "root open f O_WRONLY", "root open f O_RDWR", "root times f => m- c-", "root atime f => a-"),
		c("times/queries change nothing", "root create f 0644", "root symlink f l", "root setxattr f user.a v",
			"root snap f", "root snap l", "root stat f", "root lstat l", "root readlink l", "root access f r",
			"root getxattr f user.a", "root listxattr f", "root times f => m- c-", "root times l => m- c-",
			"root atime f => a-"),
		c("times/a zero-length write", "root create f 0644", "root fopen k f O_WRONLY", "root fsnap k",
			"root fwrite k ''", "root ftimes k", "root fclose k"),
		c("times/write through an open descriptor, checked before close", "root create f 0644",
			"root fopen k f O_WRONLY", "root fsnap k", "root fwrite k abc", "root ftimes k => m+ c+",
			"root stat f size => 3", "root fclose k"),
		c("times/utimensat then close keeps the times set", "root create f 0644", "root fopen k f O_WRONLY",
			"root fwrite k abc", "root futimens k 100 200", "root fclose k",
			"root stat f atime,mtime,size => 100.000000000,200.000000000,3"),
		c("times/fsync changes nothing more", "root create f 0644", "root fopen k f O_WRONLY", "root fwrite k abc",
			"root fsync k", "root fsnap k", "root fsync k", "root ftimes k => m- c-", "root fclose k"),
		c("times/a directory's mtime on every change of its entries", "root mkdir d 0755", "root snap d",
			"root create d/f 0644", "root times d => m+ c+", "root snap d", "root link d/f d/g",
			"root times d => m+ c+", "root snap d", "root rename d/g d/h", "root times d => m+ c+",
			"root snap d", "root symlink x d/l", "root times d => m+ c+", "root snap d", "root unlink d/l",
			"root times d => m+ c+", "root snap d", "root mkdir d/e 0755", "root times d => m+ c+",
			"root snap d", "root rmdir d/e", "root times d => m+ c+", "root snap d", "root mkfifo d/p 0644",
			"root times d => m+ c+", "root snap d", "root write d/f x", "root times d => m- c-"),
	}
}

func writeCases() []Case {
	return []Case{
		c("write/by the owner clears setuid and setgid", mkAs("regular", "f", "65534 65534"),
			"root chmod f 06777", "nobody write f x => 0", "root stat f mode => 0777"),
		c("write/by another user clears setuid and setgid", "root create f 0644", "root chmod f 06777",
			"other write f x => 0", "root stat f mode => 0777"),
		c("write/setgid without group execute", "root create f 0644", "root chown f 0 65534",
			"root chmod f 02767", "member write f x => 0", "root stat f mode => 02767", "other write f x => 0",
			"root stat f mode => 0767", "root chmod f 04767", "member write f y => 0", "root stat f mode => 0767"),
		c("write/by root keeps setuid and setgid", "root create f 0644", "root chmod f 06777",
			"root write f y => 0", "root stat f mode => 06777"),
		c("write/through a descriptor opened before chmod", "root create f 0666", "other fopen k f O_WRONLY",
			"root chmod f 06777", "other fwrite k x => 0", "root stat f mode => 0777", "other fclose k"),
		c("write/clears setuid of a file open by root too", "root create f 0666", "root chmod f 04777",
			"root fopen r f O_RDWR", "other write f x => 0", "root fstat r mode => 0777", "root fclose r"),
		c("write/EBADF on a read-only descriptor", "root create f 0644", "root fopen k f O_RDONLY",
			"root fwrite k x => EBADF", "root fclose k"),
		c("write/sparse writes read zeros", "root create f 0644", "root pwrite f 10 x", "root stat f size => 11",
			"root readat f 0 11 => \"\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00x\"",
			"root pwrite f 5000000 y", "root stat f size => 5000001", "root sum f"),
		c("write/overwrite in the middle", "root create f 0644", "root fill f 0 10000", "root pwrite f 4000 HELLO",
			"root sum f", "root readat f 3998 9"),
		c("write/beyond the largest file size", "root create f 0644", "root fopen k f O_WRONLY",
			"root fpwrite k 1152921504606846976 x", "root fclose k", "root stat f size"),
		c("write/fallocate", "root create f 0644", "root fopen k f O_RDWR", "root fallocate k 0 0 8192 => 0",
			"root fstat k size => 8192", "root fallocate k 1 0 20000 => 0", "root fstat k size => 8192",
			"root fclose k"),
	}
}

func setgidCases() []Case {
	base := []string{"root mkdir g 0777", "root chown g 0 65533", "root chmod g 02777"}
	return []Case{
		c("setgid/a file takes the directory's group", base, "nobody create g/f 0644 => 0",
			"root stat g/f mode,uid,gid => 0644,65534,65533"),
		c("setgid/a directory takes the group and the bit", base, "nobody mkdir g/d 0755 => 0",
			"root stat g/d mode,uid,gid => 02755,65534,65533", "nobody mkdir g/d/e 0700 => 0",
			"root stat g/d/e mode,gid => 02700,65533"),
		c("setgid/fifos, devices and symlinks take the group", base, "nobody mkfifo g/p 0644 => 0",
			"root mknod g/c char 0644 1 3 => 0", "nobody symlink x g/l => 0", "nobody mknod g/s socket 0644 0 0 => 0",
			"root lstat g/p gid => 65533", "root lstat g/c gid => 65533", "root lstat g/l gid => 65533",
			"root lstat g/s gid => 65533"),
		c("setgid/a non-member's new file loses setgid", base, "nobody open g/f O_CREAT,O_WRONLY 02755 => 0",
			"root stat g/f mode,gid", "other open g/h O_CREAT,O_WRONLY 02755 => 0", "root stat g/h mode,gid",
			"nobody mkfifo g/p 02755 => 0", "root stat g/p mode"),
		c("setgid/a member's new file keeps setgid", base, "multi open g/f O_CREAT,O_WRONLY 02755 => 0",
			"root stat g/f mode,gid => 02755,65533"),
		c("setgid/rename and link keep the group", base, "nobody create f 0644", "root mkdir x 0777",
			"root chmod x 0777", "nobody create x/f 0644", "nobody rename x/f g/f => 0",
			"root stat g/f gid => 65534", "nobody create x/h 0644", "nobody link x/h g/h => 0", "root stat g/h gid => 65534"),
		c("setgid/chmod of the directory by a non-member owner", "root mkdir g 0777", "root chown g 65534 65533",
			"nobody chmod g 02777 => 0", "root stat g mode => 0777"),
		c("setgid/without the bit the creator's group", "root mkdir g 0777", "root chmod g 0777",
			"root chown g 0 65533", "nobody create g/f 0644", "root stat g/f gid => 65534"),
	}
}

func stickyCases() []Case {
	base := []string{"root mkdir t 0777", "root chmod t 01777", "root chown t 65533 65533"}
	return []Case{
		c("sticky/unlink by the file's owner, the directory's owner and root", base,
			"nobody create t/a 0666", "nobody create t/b 0666", "nobody create t/c 0666",
			"member unlink t/a => EPERM", "primary unlink t/a => EPERM", "nobody unlink t/a => 0",
			"other unlink t/b => 0", "root unlink t/c => 0"),
		c("sticky/unlink of other types", base, "nobody mkfifo t/p 0666", "nobody symlink x t/l",
			"member unlink t/p => EPERM", "member unlink t/l => EPERM", "nobody unlink t/l => 0"),
		c("sticky/rmdir", base, "nobody mkdir t/d 0777", "member rmdir t/d => EPERM", "nobody rmdir t/d => 0",
			"nobody mkdir t/e 0777", "other rmdir t/e => 0"),
		c("sticky/rename from it", base, "nobody create t/f 0666", "root mkdir x 0777", "root chmod x 0777",
			"member rename t/f t/g => EPERM", "member rename t/f x/g => EPERM", "nobody rename t/f t/g => 0",
			"other rename t/g t/h => 0", "root rename t/h t/i => 0"),
		c("sticky/rename over someone else's file", base, "nobody create t/f 0666", "member create t/m 0666",
			"member rename t/m t/f => EPERM", "nobody rename t/f t/m => EPERM", "other rename t/m t/f => 0"),
		c("sticky/a directory moved out needs write on it", base, "nobody mkdir t/d 0755", "root mkdir x 0777",
			"root chmod x 0777", "nobody rename t/d x/d => 0"),
		c("sticky/exchange", base, "nobody create t/f 0666", "member create t/m 0666",
			"member rename2 t/m t/f exchange => EPERM", "other rename2 t/m t/f exchange => 0"),
		c("sticky/group write does not help", base, "nobody create t/f 0666", "root chmod t 01770",
			"root chown t 65533 65534", "member unlink t/f => EPERM", "root chmod t 0770", "member unlink t/f => 0"),
		c("sticky/on a file means nothing", "root mkdir d 0777", "root chmod d 0777", "nobody create d/f 0666",
			"root chmod d/f 01666", "member unlink d/f => 0"),
	}
}

func namesCases() []Case {
	var cs []Case
	long := []string{"root mkpath $P4095"}
	cs = append(cs,
		c("names/every call on a path of 4095 bytes", long, "root create $P4095 0644 => 0",
			"root stat $P4095 type => regular", "root chmod $P4095 0600 => 0", "root chown $P4095 1 1 => 0",
			"root truncate $P4095 5 => 0", "root utimensat $P4095 1 2 => 0", "root setxattr $P4095 user.a v => 0",
			"root link $P4095 short => 0", "root unlink $P4095 => 0", "root rename short $P4095 => 0",
			"root readlink $P4095 => EINVAL", "root unlink $P4095 => 0", "root mkdir $P4095 0755 => 0",
			"root rmdir $P4095 => 0", "root mkfifo $P4095 0644 => 0", "root unlink $P4095 => 0"),
		c("names/every call on a path of 4096 bytes", long, "root create $P4096 0644 => ENAMETOOLONG",
			"root stat $P4096 type => ENAMETOOLONG", "root mkdir $P4096 0755 => ENAMETOOLONG",
			"root symlink x $P4096 => ENAMETOOLONG", "root setxattr $P4096 user.a v => ENAMETOOLONG"),
		c("names/255 and 256 bytes in every call", "root create $N255 0644 => 0", "root stat $N255 type => regular",
			"root create $N256 0644 => ENAMETOOLONG", "root stat $N256 type => ENAMETOOLONG",
			"root mkdir $N256 0755 => ENAMETOOLONG", "root link $N255 $N256 => ENAMETOOLONG",
			"root rename $N255 $N256 => ENAMETOOLONG", "root unlink $N256 => ENAMETOOLONG",
			"root symlink x $N256 => ENAMETOOLONG", "root ls . => "+repeatN(255)),
		c("names/bytes that are not UTF-8 and unusual characters", "root create $BIN 0644 => 0",
			"root create a\\b 0644 => 0", "root create .hidden 0644 => 0", "root create ... 0644 => 0",
			"root create $TAB 0644 => 0", "root create $NL 0644 => 0", "root count . => n=6 dups=0 dots=2",
			"root stat $BIN type => regular", "root stat $TAB type => regular"),
		c("names/statfs reports the longest name", "root statfs . => namelen=255"),
		c("names/empty path", "root stat '' type => ENOENT", "root create '' 0644 => ENOENT",
			"root mkdir '' 0755 => ENOENT"),
		c("names/dot components", "root mkdir d 0755", "root create d/f 0644", "root stat d/./f type => regular",
			"root stat d/../d/f type => regular", "root stat ./d//f type => regular", "root create d/./g 0644 => 0",
			"root ls d => f,g"),
	)
	return cs
}

func repeatN(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'n'
	}
	return string(b)
}

func stormCases() []Case {
	return []Case{
		c("storm/mdtest in one directory", "root mkdir d 0755",
			"root storm d 4 30 => created=120 stat=120 listed=[n=120 dups=0 dots=2] removed=120 left=[n=0 dups=0 dots=2] errors=none"),
		c("storm/mdtest as a user", "root mkdir d 0777", "root chmod d 0777",
			"nobody storm d 2 25 => created=50 stat=50 listed=[n=50 dups=0 dots=2] removed=50 left=[n=0 dups=0 dots=2] errors=none"),
		c("storm/in a setgid directory", "root mkdir d 0777", "root chown d 0 65533", "root chmod d 02777",
			"nobody storm d 2 15 => created=30 stat=30 listed=[n=30 dups=0 dots=2] removed=30 left=[n=0 dups=0 dots=2] errors=none"),
	}
}
