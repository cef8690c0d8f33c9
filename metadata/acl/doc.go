// Package acl is POSIX access control lists as Linux keeps them: the
// binary xattr format of system.posix_acl_access and
// system.posix_acl_default (Decode validates as posix_acl_valid does,
// Encode writes it), and the rules a file system applies to them: the
// mode an ACL implies (EquivMode), a chmod's effect on the ACL (Chmod),
// what a new inode takes from its directory's default ACL (Inherit) and
// the permission check (Permits).
//
// The metadata service stores ACLs as ordinary xattrs of the inode and
// uses this package to keep them and the mode in step; the FUSE mount
// lets the kernel cache and enforce them (FUSE_POSIX_ACL), and the
// service enforces them too, so that a client that bypasses the kernel
// gets the same answers. Nothing here does I/O.
package acl
