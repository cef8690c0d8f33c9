package conformance

import (
	"fmt"
	"sort"
)

// The case library. Every case is a script (see docs/conformance.md for
// the language); the areas follow pjdfstest's directories (chmod, chown,
// ftruncate, link, mkdir, mkfifo, mknod, open, rename, rmdir, symlink,
// truncate, unlink, utimensat) plus what a Linux program meets beyond
// them (xattr, readdir, times, write, setgid, sticky, names, storm).
//
// Users (see Users): root; nobody (65534:65534); other (65533:65533);
// member (65532:65532, also in group 65534); primary (65531, primary group
// 65534); multi (65530:65530, also in 65533 and 65534).

// All returns every case, sorted by name. Names are unique.
func All() []Case {
	var all []Case
	for _, area := range [][]Case{
		chmodCases(), chownCases(), truncateCases(), linkCases(), mkdirCases(), mkfifoCases(), mknodCases(),
		openCases(), renameCases(), rmdirCases(), symlinkCases(), unlinkCases(), utimensatCases(),
		xattrCases(), readdirCases(), timesCases(), writeCases(), setgidCases(), stickyCases(), namesCases(),
		stormCases(), accessCases(), aclCases(),
	} {
		all = append(all, area...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	for i := 1; i < len(all); i++ {
		if all[i].Name == all[i-1].Name {
			panic("conformance: two cases named " + all[i].Name)
		}
	}
	return all
}

// fileTypes are the types pjdfstest loops over; nonDirTypes without
// directories.
var (
	fileTypes   = []string{"regular", "dir", "fifo", "block", "char", "socket", "symlink"}
	nonDirTypes = []string{"regular", "fifo", "block", "char", "socket", "symlink"}
	// chmodTypes are the types chmod(2) reaches (it follows symlinks).
	chmodTypes = []string{"regular", "dir", "fifo", "block", "char", "socket"}
)

// mk is the step by which who makes an object of type typ at p (modes
// 0644, directories 0755; devices 1:2; symlinks point at "target").
func mk(who, typ, p string) string {
	switch typ {
	case "regular":
		return who + " create " + p + " 0644"
	case "dir":
		return who + " mkdir " + p + " 0755"
	case "fifo":
		return who + " mkfifo " + p + " 0644"
	case "block":
		return who + " mknod " + p + " block 0644 1 2"
	case "char":
		return who + " mknod " + p + " char 0644 1 2"
	case "socket":
		return who + " mknod " + p + " socket 0644 0 0"
	case "symlink":
		return who + " symlink target " + p
	}
	panic("conformance: unknown type " + typ)
}

// mkAs makes the object as root and gives it to uid:gid (devices need
// root to make).
func mkAs(typ, p, owner string) []string {
	return []string{mk("root", typ, p), "root lchown " + p + " " + owner}
}

// steps joins groups of steps.
func steps(groups ...any) []string {
	var out []string
	for _, g := range groups {
		switch v := g.(type) {
		case string:
			out = append(out, v)
		case []string:
			out = append(out, v...)
		default:
			panic(fmt.Sprintf("conformance: step group of type %T", g))
		}
	}
	return out
}

// c is a case.
func c(name string, s ...any) Case { return Case{Name: name, Steps: steps(s...)} }

// loopSteps make s1 and s2 symlinks to each other.
var loopSteps = []string{"root symlink s2 s1", "root symlink s1 s2"}

// pathErrors are the path-resolution errors every call taking a path
// returns for the same reasons: ENOENT, ENOTDIR, ENAMETOOLONG (name and
// path), ELOOP, EACCES (search). call is the operation with "%s" where the
// path goes; it runs as root except for EACCES. creates says the call
// makes its path (so a missing last name is no error).
func pathErrors(area, call string, creates bool) []Case {
	at := func(p string) string { return fmt.Sprintf(call, p) }
	enoent := []string{"root " + at("nodir/x") + " => ENOENT"}
	if !creates {
		enoent = append(enoent, "root "+at("nothing")+" => ENOENT")
	}
	return []Case{
		c(area+"/path: ENOENT", enoent),
		c(area+"/path: ENOTDIR", "root create f 0644", "root "+at("f/x")+" => ENOTDIR",
			"root symlink f l", "root "+at("l/x")+" => ENOTDIR"),
		c(area+"/path: ENAMETOOLONG name", "root "+at("$N256")+" => ENAMETOOLONG", "root mkdir d 0755",
			"root "+at("d/$N256")+" => ENAMETOOLONG"),
		// The kernel measures a path before it looks anything up: no
		// directories needed.
		c(area+"/path: ENAMETOOLONG path", "root "+at("$P4096")+" => ENAMETOOLONG"),
		c(area+"/path: ELOOP", loopSteps, "root "+at("s1/x")+" => ELOOP"),
		c(area+"/path: EACCES search", "root mkdir d 0755", "root create d/f 0666", "root mkdir d/e 0777",
			"root chmod d 0766", "nobody "+at("d/f")+" => EACCES", "nobody "+at("d/e/x")+" => EACCES"),
	}
}
