#!/usr/bin/env bash
# make demo: start a local octofs cluster on loopback, mount it with FUSE,
# copy this repository's source tree in, read it back and verify it, show
# the cluster and the mount, then unmount, stop every process this script
# started (by PID) and fsck the regions.
#
# Knobs (environment): DEMO_NODES (3), DEMO_DIR (.work/demo),
# DEMO_MNT (mount point; /mnt/octofs as root, else DEMO_DIR/mnt),
# DEMO_PMEM_DIR (where the regions go; a directory of its own under
# /dev/shm where there is one, else DEMO_DIR), DEMO_JOBS (cp -a processes
# copying the tree at once, 4), DEMO_PORT (first port tried, 17400),
# DEMO_TIMEOUT (seconds to form, 60), DEMO_PMEM_MB (each node's region
# in MiB, at least 64; 1024 where the regions' file system has four times that free for
# every node, else 256), DEMO_KEEP=1 leaves the cluster
# running and mounted when the script ends (scripts/demo.sh stop, or make
# demo-stop, takes it down).
#
# Each node gets a file-backed pmem region exported over the soft RDMA
# provider. On tmpfs a region behaves as persistent memory does (a fence
# costs a memory flush); in a file on a disk every durable append would be
# an msync to the disk, which would show the disk's speed, not octofs's.
# Whatever fails, every process started here is stopped, the mount is
# unmounted and tmpfs regions are removed.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin}
NODES=${DEMO_NODES:-3}
WORK=${DEMO_DIR:-.work/demo}
PORT=${DEMO_PORT:-17400}
TIMEOUT=${DEMO_TIMEOUT:-60}
OCTOFS="$BIN/octofs"
OCTOCTL="$BIN/octoctl"
if [ -z "${DEMO_MNT:-}" ]; then
	if [ "$(id -u)" = 0 ]; then DEMO_MNT=/mnt/octofs; else DEMO_MNT="$WORK/mnt"; fi
fi
MNT=$DEMO_MNT
STATE="$WORK/demo.state" # PIDs, the mount point and the regions, for `demo.sh stop`
JOBS=${DEMO_JOBS:-4}
START=$SECONDS

[ -x "$OCTOFS" ] && [ -x "$OCTOCTL" ] || { echo "demo: build first (make build)" >&2; exit 1; }

# step prints a step's title with the seconds since the start.
step() { echo; echo "== [$((SECONDS - START))s] $*"; }

# unmount_fs unmounts the demo's mount and waits for its daemon to exit.
mount_pid=
unmount_fs() {
	if grep -qs " $(readlink -f "$MNT") fuse" /proc/mounts; then
		echo "== unmounting $MNT"
		if command -v fusermount3 >/dev/null 2>&1; then
			fusermount3 -u "$MNT" 2>/dev/null || umount "$MNT" 2>/dev/null || true
		else
			umount "$MNT" 2>/dev/null || true
		fi
		if grep -qs " $(readlink -f "$MNT") fuse" /proc/mounts; then
			echo "demo: $MNT is busy (a shell or program has files open in it); detaching it" >&2
			umount -l "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT" 2>/dev/null || true
		fi
	fi
	if [ -n "$mount_pid" ]; then
		for _ in $(seq 100); do kill -0 "$mount_pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$mount_pid" 2>/dev/null; then
			echo "demo: mount daemon $mount_pid did not exit after the unmount; killing it" >&2
			kill -KILL "$mount_pid" 2>/dev/null || true
		fi
		mount_pid=
	fi
}

# stop: take down what DEMO_KEEP=1 left running.
if [ "${1:-}" = stop ]; then
	[ -f "$STATE" ] || { echo "demo: nothing to stop ($STATE not found)"; exit 0; }
	# shellcheck disable=SC1090
	. "$STATE"
	MNT=$state_mnt mount_pid=$state_mount_pid
	unmount_fs
	for pid in $state_node_pids; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in $state_node_pids; do
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -f "$STATE"
	echo "== octoctl fsck: each node's region checked offline after the nodes stopped"
	status=0
	for r in ${state_regions:-"$WORK"/n*/pmem}; do "$OCTOCTL" fsck --region "$r" || status=1; done
	[ -z "${state_region_dir:-}" ] || rm -rf "$state_region_dir"
	exit $status
fi

pids=()
# stop_nodes stops every node this script started, by PID: SIGTERM, a
# bounded wait, then SIGKILL.
stop_nodes() {
	[ ${#pids[@]} -gt 0 ] || return 0
	echo "== stopping ${#pids[@]} node(s): ${pids[*]}"
	kill -TERM "${pids[@]}" 2>/dev/null || true
	for _ in $(seq 50); do
		local alive=0
		for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for pid in "${pids[@]}"; do
		if kill -0 "$pid" 2>/dev/null; then
			echo "demo: node $pid did not stop on SIGTERM; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
	done
	pids=()
}
kept=0
# REGION_DIR is the regions' own directory under /dev/shm, removed at the
# end (empty: the regions live under WORK).
REGION_DIR=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ $kept = 0 ]; then
		unmount_fs
		stop_nodes
		[ -z "$REGION_DIR" ] || rm -rf "$REGION_DIR"
	fi
	exit $rc
}
trap cleanup EXIT INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Each node takes three ports (admin, raft, RDMA); find 3*NODES free ones.
ports=()
p=$PORT
while [ ${#ports[@]} -lt $((3 * NODES)) ]; do
	[ $p -lt $((PORT + 1000)) ] || { echo "demo: no free ports from $PORT on" >&2; exit 1; }
	if port_free "$p"; then ports+=("$p"); fi
	p=$((p + 1))
done
admin_addr() { echo "127.0.0.1:${ports[$((3 * ($1 - 1)))]}"; }
raft_addr() { echo "127.0.0.1:${ports[$((3 * ($1 - 1) + 1))]}"; }
rdma_addr() { echo "127.0.0.1:${ports[$((3 * ($1 - 1) + 2))]}"; }

# region I: node I's pmem region (a plain file here; a DAX file or devdax
# device on real pmem).
region() { echo "$PMEM_DIR/n$1.pmem"; }

# node_args I: the flags of node I beyond the control plane's: its region
# and where clients reach it over RDMA.
node_args() {
	echo --pmem "$(region "$1")" --pmem-size $((PMEM_MB << 20)) --rdma-addr "$(rdma_addr "$1")"
}

# pmem_mb: each region's size in MiB. A region on tmpfs is memory (it is
# prefaulted), so the default is 1 GiB only where the file system has four
# times the cluster's total free; a real workload (a build, a database, a
# test suite's large files) fills 3 x 256 MiB quickly.
MIN_PMEM_MB=64

pmem_mb() {
	local free_mb
	free_mb=$(df -Pm "$PMEM_DIR" | awk 'NR == 2 { print $4 }')
	if [ -n "${DEMO_PMEM_MB:-}" ]; then
		case $DEMO_PMEM_MB in
		*[!0-9]* | 0* | ????????*) echo "demo: DEMO_PMEM_MB=$DEMO_PMEM_MB is not a size in MiB (say 1024)" >&2; return 1 ;;
		esac
		if [ "$DEMO_PMEM_MB" -lt "$MIN_PMEM_MB" ]; then
			echo "demo: DEMO_PMEM_MB=$DEMO_PMEM_MB: each region needs at least $MIN_PMEM_MB MiB (the copied tree, the logs)" >&2
			return 1
		fi
		if [ $((DEMO_PMEM_MB * NODES)) -gt "${free_mb:-0}" ]; then
			echo "demo: DEMO_PMEM_MB=$DEMO_PMEM_MB: $NODES regions need $((DEMO_PMEM_MB * NODES)) MiB, $PMEM_DIR has ${free_mb:-0} MiB free" >&2
			return 1
		fi
		echo "$DEMO_PMEM_MB"
		return
	fi
	if [ "${free_mb:-0}" -ge $((4 * 1024 * NODES)) ]; then echo 1024; else echo 256; fi
}

if [ -f "$STATE" ]; then
	echo "demo: a kept demo is still running ($STATE); run scripts/demo.sh stop (make demo-stop) first" >&2
	exit 1
fi
if grep -qs " $(readlink -f "$MNT" 2>/dev/null || echo "$MNT") " /proc/mounts; then
	echo "demo: $MNT is already a mount point; unmount it or set DEMO_MNT" >&2
	exit 1
fi
rm -rf "$WORK"
mkdir -p "$WORK"
if [ -n "${DEMO_PMEM_DIR:-}" ]; then
	PMEM_DIR=$DEMO_PMEM_DIR
elif [ -d /dev/shm ] && [ -w /dev/shm ]; then
	REGION_DIR=$(mktemp -d /dev/shm/octofs-demo.XXXXXX)
	PMEM_DIR=$REGION_DIR
else
	PMEM_DIR=$WORK
fi
mkdir -p "$PMEM_DIR"
PMEM_MB=$(pmem_mb)

start_node() {
	local i=$1
	shift
	mkdir -p "$WORK/n$i"
	# shellcheck disable=SC2046
	"$OCTOFS" serve --node-id "n$i" --data-dir "$WORK/n$i/data" \
		--admin-addr "$(admin_addr "$i")" --raft-addr "$(raft_addr "$i")" \
		--heartbeat-interval 200ms --down-after 2s \
		"$@" $(node_args "$i") >"$WORK/n$i/log" 2>&1 &
	pids+=($!)
	echo "   n$i: pid $!, admin $(admin_addr "$i"), raft $(raft_addr "$i"), rdma $(rdma_addr "$i"), region $(region "$i") ($PMEM_MB MiB), log $WORK/n$i/log"
}

# wait_until SECONDS DESCRIPTION COMMAND...: poll COMMAND until it succeeds.
wait_until() {
	local limit=$1 what=$2
	shift 2
	local deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		if [ $SECONDS -ge $deadline ]; then
			echo "demo: timed out after ${limit}s waiting for $what; logs under $WORK" >&2
			return 1
		fi
		for pid in "${pids[@]}"; do
			kill -0 "$pid" 2>/dev/null || { echo "demo: node pid $pid exited; see its log under $WORK" >&2; return 1; }
		done
		sleep 0.2
	done
}

formed() {
	local s
	s=$("$OCTOCTL" status --json --server "$(admin_addr 1)" --timeout 2s) || return 1
	[ "$(grep -c '"n[0-9]*"' <<<"$(sed -n '/"voters"/,/]/p' <<<"$s")")" -eq $((NODES < 3 ? NODES : 3)) ] &&
		grep -q "\"up\": $NODES" <<<"$s"
}

step "starting $NODES octofs nodes under $WORK"
start_node 1 --bootstrap
TOKEN_FILE="$WORK/n1/data/token"
wait_until "$TIMEOUT" "the first node to create the cluster token" test -s "$TOKEN_FILE"
for i in $(seq 2 "$NODES"); do
	start_node "$i" --join "$(admin_addr 1)" --token-file "$TOKEN_FILE"
done
wait_until "$TIMEOUT" "$NODES nodes up with their voters" formed

export OCTOFS_ADMIN
OCTOFS_ADMIN=$(for i in $(seq "$NODES"); do admin_addr "$i"; done | paste -sd, -)
step "octoctl status"
"$OCTOCTL" status
step "octoctl nodes"
"$OCTOCTL" nodes

step "octofs mount --daemon at $MNT"
mkdir -p "$MNT"
chmod 0755 "$MNT"
if [ "$(id -u)" != 0 ] && ! command -v fusermount3 >/dev/null 2>&1; then
	echo "demo: mounting needs root or fusermount3 (apt-get install fuse3)" >&2
	exit 1
fi
mount_out=$("$OCTOFS" mount --daemon --cluster "$OCTOFS_ADMIN" --token-file "$TOKEN_FILE" \
	--log-file "$WORK/mount.log" --log-level info "$MNT" 2>&1) || {
	echo "$mount_out" >&2
	echo "demo: the mount failed; its log is $WORK/mount.log" >&2
	exit 1
}
echo "   $mount_out"
mount_pid=$(sed -n 's/.*(pid \([0-9]*\)).*/\1/p' <<<"$mount_out")
[ -n "$mount_pid" ] || { echo "demo: could not read the mount daemon's PID from: $mount_out" >&2; exit 1; }
grep " $(readlink -f "$MNT") " /proc/mounts | sed 's/^/   \/proc\/mounts: /'

step "copying this repository's source tree into the mount"
SRC="$WORK/src"
mkdir -p "$SRC"
if git rev-parse --git-dir >/dev/null 2>&1; then
	git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$SRC"
else
	tar --exclude=./.work --exclude=./bin --exclude=./.git -cf - . | tar -xf - -C "$SRC"
fi
files=$(find "$SRC" -type f | wc -l)
echo "   $files files, $(du -sh "$SRC" | cut -f1) (staged in $SRC)"
# cp -a of each top-level entry, JOBS at a time: a copy waits on the
# cluster's round trips, not on the CPU, so several at once finish sooner.
t0=$(date +%s%N)
mkdir "$MNT/src"
find "$SRC" -mindepth 1 -maxdepth 1 -print0 | xargs -0 -P "$JOBS" -I{} cp -a {} "$MNT/src/"
chmod --reference="$SRC" "$MNT/src"
touch -r "$SRC" "$MNT/src"
ms=$((($(date +%s%N) - t0) / 1000000))
echo "   cp -a into $MNT/src ($JOBS at a time) took $((ms / 1000)).$((ms % 1000 / 100))s"

step "reading it back and verifying it"
t0=$SECONDS
diff -r "$SRC" "$MNT/src"
echo "   diff -r $SRC $MNT/src: identical ($((SECONDS - t0))s)"
sum_tree() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16); }
a=$(sum_tree "$SRC")
b=$(sum_tree "$MNT/src")
echo "   sha256 of every file, staged: $a, in the mount: $b"
[ "$a" = "$b" ] || { echo "demo: checksums differ" >&2; exit 1; }
echo "   $(find "$MNT/src" -type f | wc -l) files and $(find "$MNT/src" -type d | wc -l) directories in the mount"

step "df $MNT"
df -h "$MNT"
step "octoctl status (the cluster serving the mount)"
"$OCTOCTL" status

if [ "${DEMO_KEEP:-0}" = 1 ]; then
	cat >"$STATE" <<EOS
state_mnt='$MNT'
state_mount_pid='$mount_pid'
state_node_pids='${pids[*]}'
state_regions='$(for i in $(seq "$NODES"); do region "$i"; done | paste -sd' ' -)'
state_region_dir='$REGION_DIR'
EOS
	kept=1
	step "left running (DEMO_KEEP=1)"
	echo "   mount:     $MNT (served by pid $mount_pid; log $WORK/mount.log)"
	echo "   nodes:     pids ${pids[*]}; logs $WORK/n*/log"
	echo "   try:       ls -l $MNT/src; df -h $MNT; OCTOFS_ADMIN=$OCTOFS_ADMIN $OCTOCTL status"
	echo "   stop:      make demo-stop   (or scripts/demo.sh stop: unmount, stop the nodes, fsck)"
	exit 0
fi

step "tearing down"
unmount_fs
stop_nodes
step "octoctl fsck: each node's region checked offline after the nodes stopped"
for i in $(seq "$NODES"); do
	"$OCTOCTL" fsck --region "$(region "$i")"
done
echo
echo "demo: done in $((SECONDS - START))s. Look at: the cluster status and df above, the node logs"
echo "      ($WORK/n*/log) and the mount's log ($WORK/mount.log); DEMO_KEEP=1 make demo leaves it all"
echo "      running to explore, make demo-stop ends it."
