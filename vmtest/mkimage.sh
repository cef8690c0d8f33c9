#!/usr/bin/env bash
# mkimage.sh builds the guest kernel and initramfs of the VM harness from
# Debian packages: Debian's linux-image-amd64 kernel with the modules the
# harness needs (virtio, 9p, rdma_rxe and its crc32 dependency, nvdimm/dax,
# ext4, fuse), busybox-static as the base system, and the RDMA userspace
# (libibverbs1, ibverbs-providers, ibverbs-utils, perftest, iproute2's rdma)
# with exactly the shared libraries those programs load.
#
# Usage: vmtest/mkimage.sh WORKDIR
# Produces WORKDIR/vmlinuz and WORKDIR/initramfs.gz. Downloaded .debs are
# kept in WORKDIR/debs, so a rebuild needs no network; the image is rebuilt
# only when this script or vmtest/init changed or a package is new.
set -euo pipefail

work=${1:?usage: mkimage.sh WORKDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work/debs"
work=$(cd "$work" && pwd)
debs=$work/debs

log() { echo "mkimage: $*" >&2; }

# Userspace packages whose programs go into the image. Their library
# dependencies are resolved below and downloaded too.
tools_pkgs=(busybox-static libibverbs1 ibverbs-providers ibverbs-utils perftest iproute2)
# Programs copied from them (path inside the package), with their libraries.
programs=(
	/usr/bin/ibv_devices /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong
	/usr/bin/ib_write_bw /usr/bin/ib_read_bw /usr/bin/ib_send_lat /usr/bin/ib_read_lat
	/usr/bin/ib_write_lat /usr/bin/ib_send_bw /usr/bin/ib_atomic_lat /usr/bin/ib_atomic_bw
	/bin/ip /usr/bin/rdma
)
# Kernel modules loaded at boot (with their dependencies, found by depmod).
modules=(
	virtio_pci virtio_net virtio_console 9p 9pnet_virtio
	crc32_generic crc32-pclmul ib_core ib_uverbs rdma_rxe
	nfit libnvdimm nd_pmem nd_btt dax_pmem device_dax ext4 crc32c_generic crc32c-intel
	fuse
)

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
	log "needs apt-get and dpkg-deb (a Debian host)"; exit 1
fi

# Candidate versions of every package, from one apt-cache call; apt's
# package lists are updated once if apt knows nothing yet.
declare -A cand
load_candidates() {
	local p v
	while read -r p v; do cand[$p]=$v; done < <(apt-cache policy "$@" 2>/dev/null |
		awk '/^[^ ].*:$/{p=substr($1,1,length($1)-1)} /Candidate:/{print p, $2}')
}
ensure_candidates() {
	local p missing=()
	load_candidates "$@"
	for p in "$@"; do [ -n "${cand[$p]:-}" ] && [ "${cand[$p]}" != "(none)" ] || missing+=("$p"); done
	if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
		log "apt knows no ${missing[*]}: apt-get update"
		apt-get update -qq >&2
		load_candidates "$@"
	fi
	for p in "$@"; do
		[ -n "${cand[$p]:-}" ] && [ "${cand[$p]}" != "(none)" ] || { log "no Debian package $p"; exit 1; }
	done
}

# deb_of PKG prints the path of PKG's candidate .deb in the cache (apt
# writes an epoch's colon as %3a).
deb_of() { echo "$debs/${1}_${cand[$1]//:/%3a}_$(dpkg --print-architecture).deb"; }
deb_of_any() { local f; f=$(deb_of "$1"); [ -f "$f" ] || f=$(ls "$debs/${1}_${cand[$1]//:/%3a}_"*.deb 2>/dev/null | head -1); echo "$f"; }

# fetch PKG... downloads each package's candidate .deb into $debs unless
# that version is cached already.
fetch() {
	local p want=()
	ensure_candidates "$@"
	for p in "$@"; do [ -n "$(deb_of_any "$p")" ] || want+=("$p"); done
	if [ ${#want[@]} -gt 0 ]; then
		log "downloading ${#want[@]} packages"
		(cd "$debs" && apt-get download -q "${want[@]}" 2>&1 | grep -v -e '^W: Download is performed unsandboxed' -e '^Get:' -e '^Fetched' >&2 || true)
		for p in "${want[@]}"; do
			[ -n "$(deb_of_any "$p")" ] || { log "download of $p failed"; exit 1; }
		done
	fi
}

kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if [ -z "$kpkg" ]; then
	ensure_candidates linux-image-amd64
	kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
fi
kver=${kpkg#linux-image-}

# Library packages the tools depend on, transitively (names starting with
# lib, plus gcc's base): enough to resolve every shared object below.
lib_pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
	--no-breaks --no-replaces --no-enhances "${tools_pkgs[@]}" 2>/dev/null |
	grep -v '^[ <]' | grep -E '^(lib|zlib)' | sort -u)
all_pkgs=($(printf '%s\n' "$kpkg" "${tools_pkgs[@]}" $lib_pkgs | sort -u))
fetch "${all_pkgs[@]}"

# Rebuild only when an input changed.
stamp=$( { for p in "${all_pkgs[@]}"; do basename "$(deb_of_any "$p")"; done
	cat "$0" "$here/init"; } | sha256sum | cut -c1-16)
if [ -f "$work/initramfs.gz" ] && [ -f "$work/vmlinuz" ] && [ "$(cat "$work/image.stamp" 2>/dev/null)" = "$stamp" ]; then
	log "image up to date ($kver)"
	exit 0
fi

log "building image for kernel $kver"
stage=$work/stage
root=$work/root
rm -rf "$stage" "$root"
mkdir -p "$stage" "$root"
for p in "${all_pkgs[@]}"; do
	[ "$p" = "$kpkg" ] && continue
	dpkg-deb -x "$(deb_of_any "$p")" "$stage"
done
kstage=$work/kernel
if [ ! -f "$kstage/boot/vmlinuz-$kver" ]; then
	rm -rf "$kstage"; mkdir -p "$kstage"
	dpkg-deb -x "$(deb_of_any "$kpkg")" "$kstage"
fi
cp "$kstage/boot/vmlinuz-$kver" "$work/vmlinuz"

# The image is usr-merged: /bin, /sbin and /lib point into /usr.
mkdir -p "$root"/usr/{bin,sbin,lib/x86_64-linux-gnu,lib64} "$root"/{dev,proc,sys,tmp,run,mnt,etc,root,var}
ln -s usr/bin "$root/bin"; ln -s usr/sbin "$root/sbin"; ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"

# dest_of PATH maps a path inside a package to the usr-merged image.
dest_of() { local p=${1#/usr}; echo "$root/usr$p"; }

libpath=$stage/lib/x86_64-linux-gnu:$stage/usr/lib/x86_64-linux-gnu
loader=$stage/lib64/ld-linux-x86-64.so.2
[ -x "$loader" ] || loader=$stage/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2

# copy_elf FILE copies FILE (a path inside the stage) and every library it
# needs, resolved inside the stage, not on this host.
declare -A copied
copy_file() {
	local src=$1 rel=${1#"$stage"} d
	[ -n "${copied[$rel]:-}" ] && return 0
	copied[$rel]=1
	d=$(dest_of "$rel"); mkdir -p "$(dirname "$d")"
	cp -L "$src" "$d"
}
copy_elf() {
	local f=$1 lib
	copy_file "$f"
	while read -r lib; do
		[ -n "$lib" ] || continue
		case $lib in "$stage"/*) ;; *) log "$f needs $lib from outside the packages"; exit 1 ;; esac
		# The loader lists soname paths; cp -L stores the library
		# under its soname, which is the name the loader looks for.
		copy_file "$lib"
	done < <("$loader" --library-path "$libpath" --list "$f" 2>/dev/null |
		awk '/=> not found/{print "MISSING:" $1; next} /=>/{print $3}' |
		sed "s|^MISSING:\(.*\)|/missing/\1|")
}

for p in "${programs[@]}"; do
	f=
	for d in /bin /sbin /usr/bin /usr/sbin; do
		[ -e "$stage$d/${p##*/}" ] && { f=$stage$d/${p##*/}; break; }
	done
	[ -n "$f" ] || { log "no $p in the packages"; exit 1; }
	copy_elf "$f"
done
# libibverbs loads its providers with dlopen: rxe (Soft-RoCE) and, for
# real NICs passed through, the rest of ibverbs-providers.
for f in "$stage"/usr/lib/x86_64-linux-gnu/libibverbs/*.so; do copy_elf "$f"; done
mkdir -p "$root/etc/libibverbs.d"
cp "$stage"/etc/libibverbs.d/*.driver "$root/etc/libibverbs.d/"
# The loader itself, where binaries built on Debian look for it.
cp -L "$loader" "$root/usr/lib64/ld-linux-x86-64.so.2"
cp -L "$loader" "$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"

# busybox provides every command that no real program above provides; its
# applets must not shadow the real ip, rdma or modprobe.
cp "$stage/bin/busybox" "$root/usr/bin/busybox"
for a in $("$root/usr/bin/busybox" --list); do
	[ -e "$root/usr/bin/$a" ] || [ -e "$root/usr/sbin/$a" ] || ln -s busybox "$root/usr/bin/$a"
done

# Kernel modules: the closure of $modules under busybox depmod's view.
kmods=$kstage/lib/modules/$kver
"$root/usr/bin/busybox" depmod -b "$kstage" "$kver"
declare -A want_mod
mod_path() { # module name -> path relative to kmods, via modules.dep
	local n=${1//-/_}
	awk -F: -v n="$n" '{p=$1; b=p; sub(/.*\//,"",b); sub(/\.ko$/,"",b); gsub(/-/,"_",b); if (b==n) {print p; exit}}' "$kmods/modules.dep"
}
for m in "${modules[@]}"; do
	p=$(mod_path "$m"); [ -n "$p" ] || { log "no module $m in $kpkg"; exit 1; }
	want_mod[$p]=1
	for d in $(awk -F: -v p="$p" '$1==p{print $2}' "$kmods/modules.dep"); do want_mod[$d]=1; done
done
for p in "${!want_mod[@]}"; do
	mkdir -p "$(dirname "$root/usr/lib/modules/$kver/$p")"
	cp "$kmods/$p" "$root/usr/lib/modules/$kver/$p"
done
cp "$kmods"/modules.builtin* "$kmods"/modules.order "$root/usr/lib/modules/$kver/" 2>/dev/null || true
"$root/usr/bin/busybox" depmod -b "$root" "$kver"
# The kernel calls /sbin/modprobe for modules it wants on demand (rxe's
# crc32 through the crypto API).
rm -f "$root/usr/bin/modprobe"; ln -s ../bin/busybox "$root/usr/sbin/modprobe"

cp "$here/init" "$root/init"; chmod 755 "$root/init"
echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"
echo "root:x:0:" >"$root/etc/group"
echo "$kver" >"$root/etc/kernel-release"

(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet | gzip -6) >"$work/initramfs.gz.tmp"
mv "$work/initramfs.gz.tmp" "$work/initramfs.gz"
echo "$stamp" >"$work/image.stamp"
log "image: $(du -h "$work/vmlinuz" | cut -f1) kernel, $(du -h "$work/initramfs.gz" | cut -f1) initramfs"
