#!/usr/bin/env bash
# make bench-e2e: `softfabric perf` between two network namespaces on a veth
# pair, each RDMA measurement next to the raw AF_XDP and UDP socket
# baselines over the same veth in the same run (--compare). Appends the
# tables and the ratios to BENCHMARKS.md. Needs root. Addresses 198.18.0.1
# and .2 inside namespaces this script creates and removes.
set -euo pipefail

bin=${SOFTFABRIC:-bin/softfabric}
out=${BENCH_OUT:-BENCHMARKS.md}
mode=${MODE:-auto}
a=sfbench-a b=sfbench-b
if [[ $EUID -ne 0 ]]; then echo "bench-e2e: needs root" >&2; exit 1; fi

cleanup() {
	ip netns del $a 2>/dev/null || true
	ip netns del $b 2>/dev/null || true
}
trap cleanup EXIT
cleanup
mkdir -p /run/softfabric/bpf
mountpoint -q /run/softfabric/bpf || mount -t bpf bpf /run/softfabric/bpf
ip netns add $a
ip netns add $b
# A veth made as users make it: the kernel's default queues (one active).
ip link add name eth0 netns $a type veth peer name eth0 netns $b
for ns in $a $b; do ip -n $ns link set dev lo up; ip -n $ns link set dev eth0 up; done
ip -n $a addr add 198.18.0.1/24 dev eth0
ip -n $b addr add 198.18.0.2/24 dev eth0
# In process: the raw AF_XDP baselines need the device's sockets (the
# daemon's cost is measured below, side by side).
ip netns exec $a "$bin" up eth0 --mode "$mode" --no-daemon >/dev/null
ip netns exec $b "$bin" up eth0 --mode "$mode" --no-daemon >/dev/null
xdp=$(ip netns exec $b "$bin" status eth0 --json | grep -o '"xdp": "[a-z]*"' | cut -d'"' -f4)

tmp=$(mktemp)
run() {
	ip netns exec $b "$bin" perf "$1" --iface eth0 >/dev/null 2>&1 &
	local srv=$!
	sleep 0.3
	echo "\$ softfabric perf $* --compare" >>"$tmp"
	ip netns exec $a "$bin" perf "$@" --iface eth0 --compare 198.18.0.2 >>"$tmp" 2>&1 || echo "(failed)" >>"$tmp"
	wait $srv || true
}

run write --size 64 --iters 200000
run write --size 4096 --iters 50000
run write --size 65536 --iters 5000
run read --size 64 --iters 100000
run read --size 65536 --iters 5000
run send --size 64 --iters 200000
run send --size 65536 --iters 5000
run send --size 64 --lat --iters 20000
run write --size 64 --lat --iters 20000

{
	echo
	echo "## softfabric perf between namespaces ($(date -u +%Y-%m-%d), XDP $xdp)"
	echo
	echo "Machine: $(nproc) vCPU, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), Linux $(uname -r)."
	echo "Command: \`make bench-e2e\` (scripts/bench-e2e.sh): two namespaces on a veth made as users make it (one active queue), MTU 1500"
	echo "(path MTU 1024), \`softfabric perf OP ... --compare\`: the RDMA run, then raw AF_XDP and a UDP socket over the"
	echo "same veth at the same size, in the same run. Bandwidth baselines are timed at the receiver; latency is the"
	echo "round trip of one operation in flight (RC: request and its ACK or response; baselines: an echo)."
	echo
	echo '```'
	cat "$tmp"
	echo '```'
} >>"$out"
rm -f "$tmp"
ip netns exec $a "$bin" down eth0 >/dev/null
ip netns exec $b "$bin" down eth0 >/dev/null

# Through the daemon against in process, the two alternating on the same
# namespaces (test/scale BenchmarkDaemon, as make bench-daemon).
daemon=$(SOFTFABRIC_BIN=$(realpath "$bin") SOFTFABRIC_SCALE_DURATION=${SCALE_DURATION:-3s} SOFTFABRIC_SCALE_REPEAT=${SCALE_REPEAT:-3} \
	go test -count=1 -run '^$' -bench '^BenchmarkDaemon$' -benchtime 1x -timeout 30m ./test/scale 2>&1 | sed -n '/^case/,/^goos/p' | grep -v '^goos')
{
	echo
	echo "### Through the daemon, against in process ($(date -u +%Y-%m-%d))"
	echo
	echo "Same machine; \`make bench-daemon\`: one queue, \`up\` (a daemon) and \`up --no-daemon\` alternating on the same"
	echo "namespaces, the median of the runs (listed) of each. Latency: median 64 B write round trip."
	echo
	echo '```'
	echo "$daemon"
	echo '```'
} >>"$out"
echo "bench-e2e: results appended to $out"
