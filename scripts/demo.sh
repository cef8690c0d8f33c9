#!/usr/bin/env bash
# make demo: start a local octofs cluster on loopback, mount it with FUSE,
# copy this repository's source tree in, read it back and verify it, show
# the cluster and the mount, then unmount, stop every process this script
# started (by PID) and fsck the regions.
#
# Knobs (environment): DEMO_NODES (3), DEMO_DIR (.work/demo),
# DEMO_MNT (mount point; /mnt/octofs as root, else DEMO_DIR/mnt),
# DEMO_PORT (first port tried, 17400), DEMO_TIMEOUT (seconds to form, 60),
# DEMO_KEEP=1 leaves the cluster running and mounted when the script ends
# (scripts/demo.sh stop, or make demo-stop, takes it down).
#
# Each node gets a file-backed pmem region exported over the soft RDMA
# provider. Whatever fails, every process started here is stopped and the
# mount is unmounted.
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
STATE="$WORK/demo.state" # PIDs and the mount point, for `demo.sh stop`
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
	for r in "$WORK"/n*/pmem; do "$OCTOCTL" fsck --region "$r"; done
	exit 0
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
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ $kept = 0 ]; then
		unmount_fs
		stop_nodes
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

# node_args I: the flags of node I beyond the control plane's: its pmem
# region (a plain file here; a DAX file or devdax device on real pmem) and
# where clients reach it over RDMA.
node_args() {
	echo --pmem "$WORK/n$1/pmem" --pmem-size $((256 << 20)) --rdma-addr "$(rdma_addr "$1")"
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
	echo "   n$i: pid $!, admin $(admin_addr "$i"), raft $(raft_addr "$i"), rdma $(rdma_addr "$i"), log $WORK/n$i/log"
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
t0=$SECONDS
cp -a "$SRC" "$MNT/src"
echo "   cp -a into $MNT/src took $((SECONDS - t0))s"

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
	"$OCTOCTL" fsck --region "$WORK/n$i/pmem"
done
echo
echo "demo: done in $((SECONDS - START))s. Look at: the cluster status and df above, the node logs"
echo "      ($WORK/n*/log) and the mount's log ($WORK/mount.log); DEMO_KEEP=1 make demo leaves it all"
echo "      running to explore, make demo-stop ends it."
