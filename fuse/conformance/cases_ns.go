package conformance

import (
	"fmt"
	"strings"
)

// Cases of the calls that change names: link, mkdir, mkfifo, mknod,
// rmdir, symlink, unlink (rename has its own file).

func linkCases() []Case {
	var cs []Case
	for _, typ := range nonDirTypes {
		cs = append(cs,
			c("link/a "+typ, mk("root", typ, "x"), "root mkdir d 0755", "root snap x", "root snap d",
				"root link x d/y => 0", "root lstat x type,nlink", "root lstat d/y type,nlink",
				"root times x => m- c+", "root times d => m+ c+", "root snap d/y", "root snap d",
				"root unlink x => 0", "root lstat d/y nlink => 1", "root times d/y => m- c+", "root times d => m- c-"),
			c("link/EEXIST over a "+typ, "root create f 0644", mk("root", typ, "x"), "root link f x => EEXIST",
				"root stat f nlink => 1"),
		)
	}
	cs = append(cs,
		c("link/EEXIST over a dangling symlink and a directory", "root create f 0644", "root symlink nothing l",
			"root link f l => EEXIST", "root mkdir d 0755", "root link f d => EEXIST", "root link f . => EEXIST",
			"root link f .. => EEXIST"),
		c("link/EPERM for a directory", "root mkdir d 0755", "root link d e => EPERM", "root link . e => EPERM",
			"nobody link d e => EPERM"),
		c("link/ENOENT", "root link nothing x => ENOENT", "root create f 0644", "root link f nodir/x => ENOENT",
			"root symlink nothing l", "root linkat_follow l m => ENOENT"),
		c("link/ENOTDIR", "root create f 0644", "root link f/x y => ENOTDIR", "root link f f/y => ENOTDIR"),
		c("link/ENAMETOOLONG", "root create f 0644", "root link f $N256 => ENAMETOOLONG",
			"root link f $N255 => 0", "root link $N256 g => ENAMETOOLONG", "root mkpath $P4095",
			"root link f $P4095 => 0", "root link f $P4096 => ENAMETOOLONG", "root link $P4096 g => ENAMETOOLONG",
			"root stat f nlink => 3"),
		c("link/ELOOP", loopSteps, "root create f 0644", "root link s1/x y => ELOOP", "root link f s1/y => ELOOP"),
		c("link/needs write and search on the new directory", mkAs("regular", "f", "65534 65534"),
			"root mkdir d 0755", "nobody link f d/g => EACCES", "root chmod d 0776", "nobody link f d/g => EACCES",
			"root chmod d 0777", "nobody link f d/g => 0", "root stat f nlink => 2"),
		c("link/needs search on the old directory", "root mkdir d 0755", "root create d/f 0644",
			"root chown d/f 65534 65534", "root mkdir e 0777", "root chmod e 0777", "root chmod d 0700",
			"nobody link d/f e/g => EACCES"),
		c("link/protected hardlinks", "root create f 0600", "root mkdir d 0777", "root chmod d 0777",
			"nobody link f d/g", "root chmod f 0666", "nobody link f d/h"),
		c("link/does not follow a symlink, AT_SYMLINK_FOLLOW does", "root create f 0644", "root symlink f l",
			"root link l m => 0", "root lstat m type,nlink => symlink,2", "root linkat_follow l n => 0",
			"root lstat n type,nlink => regular,2", "root stat f nlink => 2"),
		c("link/of an unlinked open file", "root create f 0644", "root fopen k f O_RDONLY", "root unlink f",
			"root linkat_follow @k g", "root fclose k"),
		c("link/many links", "root create f 0644", "root link f a", "root link f b", "root link f c",
			"root link f d", "root stat f nlink => 5", "root unlink a", "root unlink c", "root stat d nlink => 3"),
	)
	return cs
}

// mkCases are what mkdir, mkfifo and mknod share: owner, mode and umask,
// the parent's times and link count, EEXIST over every type, and the path
// errors. call makes "%s" with mode "%s".
func mkCases(area, call, typ string) []Case {
	at := func(p, mode string) string { return fmt.Sprintf(call, p, mode) }
	parentLinks := "2"
	if typ == "dir" {
		parentLinks = "3"
	}
	cs := []Case{
		c(area+"/owner, mode and the parent's times", "root mkdir d 0777", "root chmod d 0777", "root snap d",
			"nobody "+at("d/x", "0751")+" => 0", "root lstat d/x type,mode,uid,gid => "+typ+",0751,65534,65534",
			"root lstat d nlink => "+parentLinks, "root times d => m+ c+"),
		c(area+"/a new inode's times are one instant", "root "+at("x", "0755")+" => 0", "root sametimes x => a=m=c"),
		c(area+"/umask", "root umask 022", "root "+at("x", "0777")+" => 0", "root lstat x mode => 0755",
			"root umask 0777", "root "+at("y", "0777")+" => 0", "root lstat y mode => 0"),
		c(area+"/special mode bits", "root "+at("x", "07777")+" => 0", "root lstat x mode",
			"root mkdir d 0777", "root chmod d 0777", "nobody "+at("d/y", "07777")+" => 0", "root lstat d/y mode"),
		c(area+"/group of the creator", "root mkdir d 0777", "root chmod d 0777",
			"member "+at("d/x", "0755")+" => 0", "root lstat d/x uid,gid => 65532,65532",
			"primary "+at("d/y", "0755")+" => 0", "root lstat d/y uid,gid => 65531,65534"),
		c(area+"/needs write and search permission", "root mkdir d 0755", "nobody "+at("d/x", "0755")+" => EACCES",
			"root chmod d 0776", "nobody "+at("d/x", "0755")+" => EACCES", "root chmod d 0773",
			"nobody "+at("d/x", "0755")+" => 0", "root chown d 65534 65534", "root chmod d 0577",
			"nobody "+at("d/y", "0755")+" => EACCES", "member "+at("d/y", "0755")+" => 0"),
		c(area+"/EEXIST over dots", "root "+at(".", "0755")+" => EEXIST", "root "+at("..", "0755")+" => EEXIST"),
		c(area+"/failure changes nothing", "root mkdir d 0755", "root snap d", "nobody "+at("d/x", "0755")+" => EACCES",
			"root "+at("d", "0755")+" => EEXIST", "root times d => m- c-"),
		c(area+"/a name of 255 bytes", "root "+at("$N255", "0755")+" => 0", "root lstat $N255 type => "+typ),
		c(area+"/a path of 4095 bytes", "root mkpath $P4095", "root "+at("$P4095", "0755")+" => 0",
			"root lstat $P4095 type => "+typ),
	}
	for _, t := range fileTypes {
		cs = append(cs, c(area+"/EEXIST over a "+t, mk("root", t, "x"), "root snap x",
			"root "+at("x", "0755")+" => EEXIST", "root times x => m- c-"))
	}
	cs = append(cs, c(area+"/EEXIST over a dangling symlink", "root symlink nothing l",
		"root "+at("l", "0755")+" => EEXIST", "root lstat nothing type => ENOENT"))
	return append(cs, pathErrors(area, fmt.Sprintf(call, "%s", "0755"), true)...)
}

func mkdirCases() []Case {
	cs := mkCases("mkdir", "mkdir %s %s", "dir")
	return append(cs,
		c("mkdir/trailing slash", "root mkdir d/ 0755 => 0", "root lstat d type => dir", "root mkdir d/e/ 0755 => 0"),
		c("mkdir/new directory has . and ..", "root mkdir d 0755", "root mkdir d/e 0755", "root lstat d/e nlink => 2",
			"root sameino d/e/.. d => same", "root sameino d/e/. d/e => same", "root ls d/e => (empty)",
			"root count d/e => n=0 dups=0 dots=2"),
		c("mkdir/in a directory of a removed parent", "root mkdir d 0755", "root fopen k d O_RDONLY,O_DIRECTORY",
			"root rmdir d", "root mkdir @k/x 0755", "root fclose k"),
	)
}

func mkfifoCases() []Case {
	cs := mkCases("mkfifo", "mkfifo %s %s", "fifo")
	return append(cs,
		c("mkfifo/open without a reader or writer", "root mkfifo p 0644", "root open p O_RDONLY,O_NONBLOCK => 0",
			"root open p O_WRONLY,O_NONBLOCK => ENXIO", "root open p O_RDWR => 0", "root stat p size => 0"),
		c("mkfifo/trailing slash", "root mkfifo p/ 0644 => ENOENT"),
	)
}

func mknodCases() []Case {
	var cs []Case
	for _, t := range []string{"fifo", "socket", "regular"} {
		cs = append(cs, mkCases("mknod "+t, "mknod %s "+t+" %s 0 0", t)...)
	}
	cs = append(cs, mkCases("mknod char", "mknod %s char %s 1 3", "char")...)
	cs = append(cs, mkCases("mknod block", "mknod %s block %s 7 0", "block")...)
	// mkCases' non-root steps cannot make devices: keep the root ones.
	out := cs[:0]
	for _, k := range cs {
		if (strings.HasPrefix(k.Name, "mknod char/") || strings.HasPrefix(k.Name, "mknod block/")) &&
			nonRoot(k.Steps) {
			continue
		}
		out = append(out, k)
	}
	return append(out,
		c("mknod/device numbers", "root mknod c char 0644 1 3 => 0", "root stat c type,rdev => char,1:3",
			"root mknod b block 0600 259 65536 => 0", "root stat b type,rdev => block,259:65536",
			"root mknod big char 0600 4095 1048575 => 0", "root stat big rdev => 4095:1048575"),
		c("mknod/devices need privilege", "root mkdir d 0777", "root chmod d 0777",
			"nobody mknod d/c char 0644 1 3 => EPERM", "nobody mknod d/b block 0644 1 3 => EPERM",
			"nobody mknod d/p fifo 0644 0 0 => 0", "nobody mknod d/s socket 0644 0 0 => 0", "root ls d => p,s"),
		c("mknod/no type makes a regular file", "root mknod f none 0640 0 0 => 0", "root stat f type,mode => regular,0640"),
		c("mknod/a directory or an unknown type", "root mknod d dir 0755 0 0 => EPERM",
			"root mknod x bad 0644 0 0 => EINVAL", "root ls . => (empty)"),
		c("mknod/opening a device on a nodev mount", "root mknod c char 0666 1 3", "root open c O_RDONLY => EACCES"),
		c("mknod/a socket is not opened", "root mknod s socket 0666 0 0", "root open s O_RDONLY => ENXIO"),
	)
}

func rmdirCases() []Case {
	cs := []Case{
		c("rmdir/removes an empty directory", "root mkdir d 0755", "root mkdir d/e 0755", "root snap d",
			"root lstat d nlink => 3", "root rmdir d/e => 0", "root lstat d/e type => ENOENT", "root lstat d nlink => 2",
			"root times d => m+ c+"),
		c("rmdir/ENOTEMPTY", "root mkdir d 0755", "root create d/f 0644", "root rmdir d => ENOTEMPTY",
			"root mkdir e 0755", "root mkdir e/sub 0755", "root rmdir e => ENOTEMPTY", "root mkdir g 0755",
			"root symlink x g/l", "root rmdir g => ENOTEMPTY", "root snap d", "root rmdir d => ENOTEMPTY",
			"root times d => m- c-"),
		c("rmdir/ENOTDIR", "root create f 0644", "root rmdir f => ENOTDIR", "root mkdir d 0755",
			"root symlink d l", "root rmdir l => ENOTDIR", "root mkfifo p 0644", "root rmdir p => ENOTDIR"),
		c("rmdir/dot and dotdot", "root mkdir d 0755", "root mkdir d/e 0755", "root rmdir d/e/. => EINVAL",
			"root rmdir d/e/.. => ENOTEMPTY", "root rmdir . => EINVAL", "root rmdir .. => ENOTEMPTY",
			"root lstat d/e type => dir"),
		c("rmdir/trailing slash", "root mkdir d 0755", "root rmdir d/ => 0", "root lstat d type => ENOENT"),
		c("rmdir/needs write and search on the parent", "root mkdir d 0755", "root mkdir d/e 0777",
			"root chown d/e 65534 65534", "nobody rmdir d/e => EACCES", "root chmod d 0776", "nobody rmdir d/e => EACCES",
			"root chmod d 0773", "nobody rmdir d/e => 0"),
		c("rmdir/not write on the directory itself", "root mkdir d 0777", "root chmod d 0777", "root mkdir d/e 0555",
			"nobody rmdir d/e => 0"),
		c("rmdir/an open directory", "root mkdir d 0755", "root fopen k d O_RDONLY,O_DIRECTORY", "root rmdir d => 0",
			"root fstat k type,nlink", "root fclose k"),
		c("rmdir/then mkdir the same name", "root mkdir d 0755", "root create d/f 0644", "root unlink d/f",
			"root rmdir d => 0", "root mkdir d 0700 => 0", "root lstat d mode,nlink => 0700,2", "root ls d => (empty)"),
		c("rmdir/with an open file that was unlinked in it", "root mkdir d 0755", "root create d/f 0644",
			"root fopen k d/f O_RDWR", "root unlink d/f", "root rmdir d => 0", "root fwrite k abc => 0",
			"root fpread k 0 9 => \"abc\"", "root fclose k", "root lstat d type => ENOENT"),
		c("rmdir/a name of 255 bytes", "root mkdir $N255 0755", "root rmdir $N255 => 0"),
	}
	return append(cs, pathErrors("rmdir", "rmdir %s", false)...)
}

func symlinkCases() []Case {
	var cs []Case
	for _, t := range fileTypes {
		cs = append(cs, c("symlink/EEXIST over a "+t, mk("root", t, "x"), "root symlink y x => EEXIST",
			"root lstat x type => "+t))
	}
	cs = append(cs,
		c("symlink/owner, mode, size and the parent's times", "root mkdir d 0777", "root chmod d 0777",
			"root snap d", "nobody symlink some/target d/l => 0",
			"root lstat d/l type,mode,uid,gid,nlink,size => symlink,0777,65534,65534,1,11",
			"root readlink d/l => \"some/target\"", "root times d => m+ c+"),
		c("symlink/a new link's times are one instant", "root symlink x l", "root sametimes l => a=m=c"),
		c("symlink/umask does not apply", "root umask 077", "root symlink x l => 0", "root lstat l mode => 0777"),
		c("symlink/dangling and then not", "root symlink f l => 0", "root stat l type => ENOENT",
			"root lstat l type => symlink", "root create f 0644", "root stat l type => regular",
			"root write l abc", "root read f => \"abc\""),
		c("symlink/relative and absolute targets resolve from the link", "root mkdir d 0755", "root create f 0644",
			"root symlink ../f d/l => 0", "root stat d/l type => regular", "root symlink /proc/self d/abs => 0",
			"root stat d/abs type => dir"),
		c("symlink/loops", loopSteps, "root stat s1 type => ELOOP", "root open s1 O_RDONLY => ELOOP",
			"root lstat s1 type => symlink", "root symlink self self => 0", "root stat self type => ELOOP"),
		c("symlink/40 levels are followed, 41 are not", chain(40), "root stat l0 type => regular",
			"root symlink l0 lx", "root stat lx type => ELOOP"),
		c("symlink/target lengths", "root symlink $T4095 a => 0", "root lstat a size => 4095",
			"root readlink a", "root symlink $T4096 b => ENAMETOOLONG", "root symlink '' c => ENOENT",
			"root ls . => a"),
		c("symlink/needs write and search permission", "root mkdir d 0755", "nobody symlink x d/l => EACCES",
			"root chmod d 0776", "nobody symlink x d/l => EACCES", "root chmod d 0777", "nobody symlink x d/l => 0"),
		c("symlink/readlink of what is not a symlink", "root create f 0644", "root readlink f => EINVAL",
			"root mkdir d 0755", "root readlink d => EINVAL", "root readlink nothing => ENOENT"),
		c("symlink/trailing slash", "root mkdir d 0755", "root symlink d l", "root lstat l/ type => dir",
			"root symlink x m/ => ENOENT"),
		c("symlink/name of 255 bytes and path of 4095", "root symlink x $N255 => 0", "root mkpath $P4095",
			"root symlink x $P4095 => 0", "root readlink $P4095 => \"x\""),
		c("symlink/lchown and times of the link", "root create f 0644", "root symlink f l",
			"root lchown l 65534 65534", "root utimensat l 1 2 nofollow", "root lstat l uid,gid,mtime",
			"root stat f uid,gid => 0,0"),
	)
	return append(cs, pathErrors("symlink", "symlink target %s", true)...)
}

// chain is n symlinks l0 -> l1 -> ... -> l(n-1) -> f.
func chain(n int) []string {
	out := []string{"root create f 0644"}
	for i := n - 1; i >= 0; i-- {
		next := "f"
		if i < n-1 {
			next = fmt.Sprintf("l%d", i+1)
		}
		out = append(out, fmt.Sprintf("root symlink %s l%d", next, i))
	}
	return out
}

func unlinkCases() []Case {
	var cs []Case
	for _, t := range nonDirTypes {
		cs = append(cs, c("unlink/a "+t, "root mkdir d 0755", mk("root", t, "d/x"), "root snap d",
			"root unlink d/x => 0", "root lstat d/x type => ENOENT", "root times d => m+ c+", "root ls d => (empty)"))
	}
	cs = append(cs,
		c("unlink/a link of several", "root create f 0644", "root link f g", "root snap g", "root unlink f => 0",
			"root lstat g nlink => 1", "root times g => m- c+"),
		c("unlink/EISDIR", "root mkdir d 0755", "root unlink d => EISDIR", "root unlink . => EISDIR",
			"root unlink d/. => EISDIR", "root unlink d/.. => EISDIR", "root lstat d type => dir"),
		c("unlink/a symlink, not its target", "root create f 0644", "root symlink f l", "root unlink l => 0",
			"root lstat f type => regular", "root mkdir d 0755", "root symlink d m", "root unlink m/ => ENOTDIR",
			"root unlink m => 0"),
		c("unlink/needs write and search on the parent", "root mkdir d 0755", "root create d/f 0666",
			"root chown d/f 65534 65534", "nobody unlink d/f => EACCES", "root chmod d 0776", "nobody unlink d/f => EACCES",
			"root chmod d 0773", "nobody unlink d/f => 0"),
		c("unlink/not write on the file itself", "root mkdir d 0777", "root chmod d 0777", "root create d/f 0000",
			"other unlink d/f => 0"),
		c("unlink/an open file stays readable", "root create f 0644", "root write f hello", "root fopen k f O_RDWR",
			"root unlink f => 0", "root fstat k nlink,size => 0,5", "root fpread k 0 10 => \"hello\"",
			"root fpwrite k 5 !", "root fpread k 0 10 => \"hello!\"", "root fclose k", "root ls . => (empty)"),
		c("unlink/failure changes nothing", "root mkdir d 0755", "root create d/f 0644", "root snap d",
			"nobody unlink d/f => EACCES", "root times d => m- c-"),
		c("unlink/trailing slash on a file", "root create f 0644", "root unlink f/ => ENOTDIR"),
		c("unlink/then create the same name", "root create f 0644", "root write f old", "root link f g",
			"root unlink f => 0", "root create f 0600 => 0", "root lstat f mode,nlink,size => 0600,1,0",
			"root sameino f g => different", "root read g => \"old\""),
	)
	return append(cs, pathErrors("unlink", "unlink %s", false)...)
}

// nonRoot reports whether a step runs as someone other than root.
func nonRoot(steps []string) bool {
	for _, s := range steps {
		if !strings.HasPrefix(s, "root ") {
			return true
		}
	}
	return false
}
