#!/usr/bin/env bash
# The softfabric demo: two network namespaces joined by a veth pair,
# `softfabric up` in each (a daemon that owns the device), an RC ping-pong,
# two applications sharing each device at once, two applications on one
# host reaching each other through its daemon, an RDMA write bandwidth run
# in process next to the raw AF_XDP and UDP socket baselines, then
# `softfabric down` and clean-up. Needs root. Addresses: 198.18.0.1 and 198.18.0.2 (RFC 2544
# benchmarking range), inside namespaces this script creates and removes.
set -euo pipefail

bin=${SOFTFABRIC:-bin/softfabric}
a=sfdemo-a b=sfdemo-b
if [[ $EUID -ne 0 ]]; then echo "demo: needs root (network namespaces, XDP)" >&2; exit 1; fi
[[ -x $bin ]] || { echo "demo: $bin missing (make build)" >&2; exit 1; }

cleanup() {
	ip netns exec $a "$bin" down eth0 >/dev/null 2>&1 || true
	ip netns exec $b "$bin" down eth0 >/dev/null 2>&1 || true
	ip netns del $a 2>/dev/null || true
	ip netns del $b 2>/dev/null || true
}
trap cleanup EXIT
cleanup

step() { printf '\n== %s\n' "$*"; }

# Pins live on a bpffs at /run/softfabric/bpf, mounted from the host's
# mount namespace so that every `ip netns exec` shares it.
mkdir -p /run/softfabric/bpf
mountpoint -q /run/softfabric/bpf || mount -t bpf bpf /run/softfabric/bpf

step "two hosts: namespaces $a and $b, a veth made as users make it (the kernel's default queues)"
ip netns add $a
ip netns add $b
ip link add name eth0 netns $a type veth peer name eth0 netns $b
for ns in $a $b; do
	ip -n $ns link set dev lo up
	ip -n $ns link set dev eth0 up
done
ip -n $a addr add 198.18.0.1/24 dev eth0
ip -n $b addr add 198.18.0.2/24 dev eth0

step "softfabric up eth0 (in both): the classifier, and a daemon that owns the device"
ip netns exec $a "$bin" up eth0
ip netns exec $b "$bin" up eth0
ip netns exec $b "$bin" status eth0

step "the kernel stack still works beside it: ping"
ip netns exec $a ping -c 2 -i 0.2 198.18.0.2 | tail -2

step "RC ping-pong (like ibv_rc_pingpong): 4096 B, 1000 iterations"
ip netns exec $b "$bin" pingpong --iface eth0 &
sleep 0.5
ip netns exec $a "$bin" pingpong --iface eth0 198.18.0.2
wait

step "two applications on each device at once: RDMA write bandwidth (64 KiB) and RC send latency (64 B)"
ip netns exec $b "$bin" perf write --iface eth0 --port 18515 >/dev/null &
srv1=$!
ip netns exec $b "$bin" perf send --iface eth0 --port 18600 >/dev/null &
srv2=$!
sleep 0.5
ip netns exec $a "$bin" perf write --iface eth0 --port 18515 --size 65536 --iters 4000 198.18.0.2 >/tmp/sfdemo-write.$$ 2>&1 &
cli1=$!
ip netns exec $a "$bin" perf send --iface eth0 --port 18600 --size 64 --lat --iters 4000 198.18.0.2 >/tmp/sfdemo-send.$$ 2>&1 &
cli2=$!
sleep 0.3
echo "-- the daemon in $b while both run:"
ip netns exec $b "$bin" status eth0 | grep -E "contexts|daemon|worker|app\["
wait $cli1 $cli2 $srv1 $srv2
cat /tmp/sfdemo-write.$$ /tmp/sfdemo-send.$$
rm -f /tmp/sfdemo-write.$$ /tmp/sfdemo-send.$$

step "two applications on one host reach each other through their daemon (loopback, as rxe): RC ping-pong at $b's own address"
ip netns exec $b "$bin" pingpong --iface eth0 -p 18700 &
sleep 0.5
ip netns exec $b "$bin" pingpong --iface eth0 -p 18700 198.18.0.2
wait
ip netns exec $b "$bin" status eth0 | grep -E "worker\["

step "classifier counters and the daemon's in $b"
ip netns exec $b "$bin" stats eth0

step "in process (up --no-daemon): RDMA write bandwidth, 64 KiB, next to raw AF_XDP and a UDP socket"
for ns in $a $b; do ip netns exec $ns "$bin" down eth0 >/dev/null; ip netns exec $ns "$bin" up eth0 --no-daemon; done
ip netns exec $b "$bin" perf write --iface eth0 >/dev/null &
sleep 0.5
ip netns exec $a "$bin" perf write --iface eth0 --size 65536 --iters 2000 --compare 198.18.0.2
wait

step "softfabric down eth0 (in both): nothing left attached"
ip netns exec $a "$bin" down eth0
ip netns exec $b "$bin" down eth0
ip -n $b -d link show eth0 | grep -c xdp >/dev/null && { echo "demo: XDP still attached" >&2; exit 1; } || true
echo "done."
