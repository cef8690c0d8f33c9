#!/usr/bin/env bash
# make demo: start a local octofs cluster on loopback, wait for it to form,
# show it with octoctl, and stop every process this script started.
#
# Knobs (environment): DEMO_NODES (3), DEMO_DIR (.work/demo),
# DEMO_PORT (first port tried, 17400), DEMO_TIMEOUT (seconds to form, 60),
# DEMO_KEEP=1 keeps the cluster running until Ctrl-C.
#
# Each node gets a file-backed pmem region exported over the soft RDMA
# provider; demo_steps shows the data path. Later layers add steps (e.g. a
# FUSE mount) there.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin}
NODES=${DEMO_NODES:-3}
WORK=${DEMO_DIR:-.work/demo}
PORT=${DEMO_PORT:-17400}
TIMEOUT=${DEMO_TIMEOUT:-60}
OCTOFS="$BIN/octofs"
OCTOCTL="$BIN/octoctl"

[ -x "$OCTOFS" ] && [ -x "$OCTOCTL" ] || { echo "demo: build first (make build)" >&2; exit 1; }

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
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_nodes
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
	echo --pmem "$WORK/n$1/pmem" --pmem-size $((64 << 20)) --rdma-addr "$(rdma_addr "$1")"
}

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

echo "== starting $NODES octofs nodes under $WORK"
start_node 1 --bootstrap
TOKEN_FILE="$WORK/n1/data/token"
wait_until "$TIMEOUT" "the first node to create the cluster token" test -s "$TOKEN_FILE"
for i in $(seq 2 "$NODES"); do
	start_node "$i" --join "$(admin_addr 1)" --token-file "$TOKEN_FILE"
done
wait_until "$TIMEOUT" "$NODES nodes up with their voters" formed

export OCTOFS_ADMIN
OCTOFS_ADMIN=$(for i in $(seq "$NODES"); do admin_addr "$i"; done | paste -sd, -)
echo
echo "== octoctl status"
"$OCTOCTL" status
echo
echo "== octoctl nodes"
"$OCTOCTL" nodes

# demo_steps: what the data layers show on the running cluster.
demo_steps() {
	echo
	echo "== octoctl map --token-file (regions and their rkeys)"
	"$OCTOCTL" map --token-file "$TOKEN_FILE"
}
demo_steps

if [ "${DEMO_KEEP:-0}" = 1 ]; then
	echo
	echo "cluster running; OCTOFS_ADMIN=$OCTOFS_ADMIN octoctl --token-file $TOKEN_FILE ...; Ctrl-C stops it"
	wait
fi

stop_nodes
echo
echo "== octoctl fsck: each node's region checked offline after the nodes stopped"
for i in $(seq "$NODES"); do
	"$OCTOCTL" fsck --region "$WORK/n$i/pmem"
done
