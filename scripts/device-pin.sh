#!/usr/bin/env bash
# Where the daemon's workers and the applications run, on a many-core
# host: the 64 B write round trip and rate, in process and through the
# daemon (BenchmarkDaemon), with nothing pinned; with each daemon's worker
# and its application on the two hyperthreads of one core; and with all
# four on cores of their own. For the lent device machine: build here
# with `scripts/device-daemon.sh build`, carry bin/, run this there.
# Results under $OUT (default ./device-out). Root.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-./device-out}
mkdir -p "$out"
t=/sys/devices/system/cpu
n=$(nproc)
# One CPU of each core (cpu 0 left out), in order, and each one's sibling.
declare -a one sib
seen=" "
for ((c = 1; c < n; c++)); do
	k=$(cat $t/cpu$c/topology/thread_siblings_list)
	case "$seen" in *" $k "*) continue ;; esac
	seen="$seen$k "
	one+=("$c")
	sib+=("$(echo "$k" | tr ',-' '\n\n' | { grep -vx "$c" || true; } | head -1)")
done
for ((c = 0; c < n; c++)); do echo "cpu$c: $(cat $t/cpu$c/topology/thread_siblings_list)"; done > "$out/topology.txt"
run() {
	local name=$1
	shift
	(cd test/scale && env "$@" SOFTFABRIC_BIN="$PWD/../../bin/softfabric" SOFTFABRIC_SCALE_CASES=write-64B-lat,write-64B-1qp \
		SOFTFABRIC_SCALE_LOOPBACK=0 SOFTFABRIC_SCALE_REPEAT=${REPEAT:-3} SOFTFABRIC_SCALE_DURATION=2s \
		../../bin/scale.test -test.run '^$' -test.bench '^BenchmarkDaemon$' -test.benchtime 1x -test.timeout 5m) 2>&1 |
		grep -A2 '^case' | sed "s/^/$name /" >> "$out/pin.txt"
}
run unpinned
if [ -n "${sib[0]:-}" ] && [ -n "${sib[1]:-}" ]; then
	run "siblings(${one[0]},${sib[0]}|${one[1]},${sib[1]})" SOFTFABRIC_SCALE_DAEMON_CPUS_A="${one[0]}" SOFTFABRIC_SCALE_CPUS_A="${sib[0]}" \
		SOFTFABRIC_SCALE_DAEMON_CPUS_B="${one[1]}" SOFTFABRIC_SCALE_CPUS_B="${sib[1]}"
fi
if [ ${#one[@]} -ge 4 ]; then
	run "cores(${one[0]},${one[2]}|${one[1]},${one[3]})" SOFTFABRIC_SCALE_DAEMON_CPUS_A="${one[0]}" SOFTFABRIC_SCALE_CPUS_A="${one[2]}" \
		SOFTFABRIC_SCALE_DAEMON_CPUS_B="${one[1]}" SOFTFABRIC_SCALE_CPUS_B="${one[3]}"
fi
cat "$out/topology.txt" "$out/pin.txt"
