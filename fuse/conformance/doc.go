// Package conformance is a differential POSIX conformance suite for octofs
// mounts: a library of cases in the manner of pjdfstest (chmod, chown,
// link, mkdir, mkfifo, mknod, open, rename, rmdir, symlink, truncate,
// unlink, utimensat) and beyond it (xattrs, directory listings, time
// stamps, writes, setgid and sticky directories, long names, mdtest-style
// storms), and the machinery that runs a case on a local file system and
// on a mount and says how the two differ. docs/conformance.md says how to
// run it, how to read a failure and what the references are.
//
// A case (Case) is a script of system calls, each made by one of a few
// users (Users), with optional expectations. Running it (RunCase) yields
// the answer of every step (an errno name, "0", or a query's output) and a
// description of the case's directory afterwards (type, mode, owner, link
// count, size, contents, xattr names of every entry). The reference is
// the kernel's own file system (tmpfs); a back end conforms on a case when
// both results are equal (Diff). The expectations written in a case check
// the case against the reference (CheckWants), so a case that no longer
// tests what it says fails on its own.
//
// Invariants:
//
//   - A case's steps run in order on one OS thread that has its own
//     working directory and umask (unshare(CLONE_FS)) and takes each
//     step's credentials with the raw setgroups/setresgid/setresuid
//     system calls, which change only that thread. The thread is never
//     handed back to the Go scheduler: it exits with the case, so no
//     credential or directory leaks into other work.
//   - Steps run with exactly their user's rights: between steps the
//     thread is root (its saved uid stays 0); during a step its real,
//     effective and file-system ids are the user's and the kernel has
//     dropped its capabilities.
//   - Cases run in a child process (ServeChild, started by StartRunner),
//     never in the process that serves the FUSE mount, so a case stuck in
//     the kernel can be killed without killing the server that would have
//     to answer it.
//   - Nothing in a result depends on timing: times are compared as
//     "changed or not" after a snapshot that waits for the clock to move
//     past them, listings are sorted, concurrent workloads report counts
//     that are exact when the file system is right.
package conformance
