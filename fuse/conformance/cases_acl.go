package conformance

// aclCases are POSIX ACLs (system.posix_acl_access and _default, as
// setfacl and getfacl use them): access through named users and groups
// within the mask, the mode they imply, chmod's effect on them, who may
// set them, and what a new inode inherits from its directory's default
// ACL (instead of the umask).
func aclCases() []Case {
	const (
		named   = "u::rw-,u:65534:r--,g::r--,m::r--,o::---"
		grouped = "u::rw-,g::---,g:65534:rw-,m::rw-,o::---"
		def     = "u::rwx,g::r-x,g:65534:rwx,m::rwx,o::r-x"
	)
	return []Case{
		c("acl/a named user reads through the ACL", "root create f 0640", "root write f hello",
			"root setacl f access "+named+" => 0", "root stat f mode => 0640",
			"root getacl f access => "+named, "root listxattr f => system.posix_acl_access",
			"nobody read f => \"hello\"", "other read f => EACCES", "nobody write f x => EACCES"),
		c("acl/the mask limits named entries", "root create f 0600",
			"root setacl f access u::rw-,u:65534:rw-,g::r--,m::r--,o::--- => 0", "root stat f mode => 0640",
			"nobody read f => \"\"", "nobody write f x => EACCES"),
		c("acl/a named group and its members", "root create f 0600", "root setacl f access "+grouped+" => 0",
			"root stat f mode => 0660", "member write f x => 0", "nobody write f y => 0", "other read f => EACCES",
			"root read f => \"y\""),
		c("acl/chmod rewrites the mask, not the named entries", "root create f 0600",
			"root setacl f access u::rw-,u:65534:rw-,g::r--,m::rw-,o::--- => 0", "root snap f",
			"root chmod f 0640 => 0", "root getacl f access => u::rw-,u:65534:rw-,g::r--,m::r--,o::---",
			"nobody read f => \"\"", "nobody write f x => EACCES", "root chmod f 0600 => 0",
			"nobody read f => EACCES", "root times f => m- c+"),
		c("acl/an ACL the mode can say is the mode", "root create f 0600",
			"root setacl f access u::rwx,g::r-x,o::r-- => 0", "root stat f mode => 0754",
			"root getxattr f system.posix_acl_access => ENODATA", "root listxattr f => (none)"),
		c("acl/removing the access ACL keeps the mode", "root create f 0600",
			"root setacl f access "+named+" => 0", "root removexattr f system.posix_acl_access => 0",
			"root stat f mode => 0640", "nobody read f => EACCES", "root getacl f access => ENODATA"),
		c("acl/only the owner sets an ACL", mkAs("regular", "f", "65534 65534"), "root chmod f 0600",
			"other setacl f access "+named+" => EPERM", "member setacl f access "+named+" => EPERM",
			"nobody setacl f access u::rw-,u:65533:r--,g::---,m::r--,o::--- => 0", "other read f => \"\"",
			"member read f => EACCES"),
		c("acl/setting one outside the group clears setgid", mkAs("regular", "f", "65534 0"),
			"root chmod f 02755", "nobody setacl f access u::rwx,g::r-x,o::r-x => 0", "root stat f mode => 0755"),
		c("acl/a malformed ACL", "root create f 0644",
			"root setacl f access u::rw-,u:65534:r--,g::r--,o::r-- => EINVAL",
			"root setacl f access g::r--,u::rw-,o::r-- => EINVAL", "root getacl f access => ENODATA"),
		c("acl/a default ACL belongs to directories", "root create f 0644", "root mkdir d 0755",
			"root setacl f default "+def+" => EACCES", "root setacl f default - => 0",
			"root setacl d default "+def+" => 0", "root getacl d default => "+def, "root stat d mode => 0755",
			"root setacl d default - => 0", "root getacl d default => ENODATA"),
		c("acl/new inodes inherit the default ACL, not the umask", "root mkdir d 0755",
			"root setacl d default "+def+" => 0", "root umask 077",
			"root create d/f 0666 => 0", "root stat d/f mode => 0664",
			"root getacl d/f access => u::rw-,g::r-x,g:65534:rwx,m::rw-,o::r--", "root getacl d/f default => ENODATA",
			"root mkdir d/s 0777 => 0", "root stat d/s mode => 0775",
			"root getacl d/s access => "+def, "root getacl d/s default => "+def,
			"root mkfifo d/p 0640 => 0", "root stat d/p mode => 0640",
			"root getacl d/p access => u::rw-,g::r-x,g:65534:rwx,m::r--,o::---",
			"root symlink x d/l => 0", "root lstat d/l mode => 0777",
			"root create d/s/g 0600 => 0", "root getacl d/s/g access => u::rw-,g::r-x,g:65534:rwx,m::---,o::---"),
		c("acl/an inherited ACL grants access", "root mkdir d 0755", "root setacl d default "+def+" => 0",
			"root create d/f 0666 => 0", "member write d/f x => 0", "other write d/f y => EACCES",
			"member create d/g 0644 => EACCES", "root mkdir d/s 0777 => 0", "member create d/s/g 0644 => 0",
			"member lstat d/s/g mode => 0644", "member getacl d/s/g access => u::rw-,g::r-x,g:65534:rwx,m::r--,o::r--"),
		c("acl/renames between directories the ACL opens", "root mkdir a 0755", "root mkdir b 0755",
			"root setacl a access u::rwx,u:65534:rwx,g::r-x,m::rwx,o::r-x => 0",
			"root setacl b access u::rwx,u:65534:rwx,g::r-x,m::rwx,o::r-x => 0",
			"nobody create a/f 0644 => 0", "nobody rename a/f b/f => 0", "nobody mkdir a/s 0755 => 0",
			"nobody rename a/s b/s => 0", "other create a/g 0644 => EACCES", "nobody unlink b/f => 0"),
	}
}
