#!/usr/bin/env bash
# Two softfabric binaries side by side on the same single-queue veth, in
# one run, alternating A and B: the 64 B RDMA write message rate, 64 KiB
# RDMA write bandwidth and the 64 B write round trip, REPEAT times each;
# prints every figure and the medians, and for the bandwidth test the
# client process's CPU time per KiB moved (user + system, from the shell's
# times builtin, so it works for binaries that do not report it
# themselves). Needs root and ip(8). Addresses 198.18.0.1 and .2 inside
# namespaces this script creates and removes.
#
#   scripts/bench-ab.sh OLD_BINARY NEW_BINARY
#
# UP_FLAGS are given to `up` (--no-daemon: the devices in process).
# QUEUES sets the veths' queue counts (default 1); TESTS replaces the
# tests, each "KEY perf-args..." on a line of its own.
set -euo pipefail
old=${1:?old binary} new=${2:?new binary}
repeat=${REPEAT:-3}
up_flags=${UP_FLAGS:-}
queues=${QUEUES:-1}
a=sfab-a b=sfab-b
if [[ $EUID -ne 0 ]]; then echo "bench-ab: needs root" >&2; exit 1; fi
cleanup() { ip netns del $a 2>/dev/null || true; ip netns del $b 2>/dev/null || true; }
trap cleanup EXIT
cleanup
mkdir -p /run/softfabric/bpf
mountpoint -q /run/softfabric/bpf || mount -t bpf bpf /run/softfabric/bpf
ip netns add $a
ip netns add $b
ip link add name eth0 numtxqueues $queues numrxqueues $queues netns $a type veth peer name eth0 numtxqueues $queues numrxqueues $queues netns $b
for ns in $a $b; do ip -n $ns link set dev lo up; ip -n $ns link set dev eth0 up; done
ip -n $a addr add 198.18.0.1/24 dev eth0
ip -n $b addr add 198.18.0.2/24 dev eth0

# field KEY: a number from perf's JSON on stdin.
field() { grep -o "\"$1\": [0-9.e+-]*" | head -1 | awk '{print $2}'; }

one() { # BIN KEY perf-args...: one measurement
	local bin=$1 key=$2; shift 2
	ip netns exec $a "$bin" up eth0 $up_flags >/dev/null
	ip netns exec $b "$bin" up eth0 $up_flags >/dev/null
	ip netns exec $b "$bin" perf "$1" --iface eth0 >/dev/null 2>&1 &
	local srv=$!
	sleep 0.3
	local tmp
	tmp=$(mktemp)
	# times: the shell's, then its children's user and system time.
	local t
	t=$( { ip netns exec $a "$bin" perf "$@" --iface eth0 --json 198.18.0.2 >"$tmp"; times; } | tail -1)
	local v
	v=$(field "$key" <"$tmp")
	if [[ $key == bw_avg_gbps ]]; then
		local bytes iters
		bytes=$(field bytes <"$tmp") iters=$(field iterations <"$tmp")
		v="$v/$(echo "$t" | awk -v b="$bytes" -v n="$iters" '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.0f", (u[1]*60+u[2]+s[1]*60+s[2])*1e9/(b*n/1024) }')"
	fi
	rm -f "$tmp"
	echo "$v"
	wait $srv || true
	ip netns exec $a "$bin" down eth0 >/dev/null
	ip netns exec $b "$bin" down eth0 >/dev/null
}

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

printf '%-22s %-5s %s\n' test bin "figures (median last)"
tests=${TESTS:-"msg_rate_mpps write --size 64 --iters 200000
bw_avg_gbps write --size 65536 --iters 20000
lat_median_us write --size 64 --lat --iters 20000"}
mapfile -t tl <<<"$tests"
for t in "${tl[@]}"; do
	[[ -n $t ]] || continue
	set -- $t
	key=$1; shift
	fa=() fb=()
	for _ in $(seq "$repeat"); do
		fa+=("$(one "$old" "$key" "$@")")
		fb+=("$(one "$new" "$key" "$@")")
	done
	ma=$(printf '%s\n' "${fa[@]%/*}" | median) mb=$(printf '%s\n' "${fb[@]%/*}" | median)
	printf '%-22s %-5s %s  median %s\n' "$key" old "${fa[*]}" "$ma"
	printf '%-22s %-5s %s  median %s\n' "$key" new "${fb[*]}" "$mb"
	awk -v a="$ma" -v b="$mb" -v k="$key" 'BEGIN { printf "%-22s new/old %.3f\n", k, b/a }'
	if [[ $key == bw_avg_gbps ]]; then
		ca=$(printf '%s\n' "${fa[@]#*/}" | median) cb=$(printf '%s\n' "${fb[@]#*/}" | median)
		printf '%-22s old %s, new %s ns/KiB (median), new/old %s\n' "client cpu per KiB" "$ca" "$cb" "$(awk -v a="$ca" -v b="$cb" 'BEGIN { printf "%.3f", b/a }')"
	fi
done
echo "(bandwidth figures are rate/client CPU ns per KiB)"
