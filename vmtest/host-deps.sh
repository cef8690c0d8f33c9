#!/usr/bin/env bash
# host-deps.sh installs what make vm-test needs on this (Debian 12) host:
# QEMU, cpio and gzip for the initramfs, and a C toolchain with
# libibverbs-dev to build the verbs provider's binaries. The guests'
# packages are not installed here: mkimage.sh downloads and unpacks them.
set -euo pipefail
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v cpio >/dev/null || need+=(cpio)
command -v gzip >/dev/null || need+=(gzip)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
[ -f /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "vm-test needs: ${need[*]} (Debian packages); install them as root" >&2
	exit 1
fi
echo "vm-test: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
