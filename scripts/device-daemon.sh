#!/usr/bin/env bash
# The daemon's costs on a many-core host, in one prepared run, for the
# lent device machine (which has no Go toolchain to count on and no ip(8)):
# build here with `scripts/device-daemon.sh build` (bin/softfabric and the
# test binaries, under bin/), carry bin/ there, and run
# `scripts/device-daemon.sh run` there; everything it measures is written
# under $OUT (default ./device-out): the shared-memory hop
# (shmlink BenchmarkPingPong*), the 64 B round trip in process against
# through the daemon alternated 9 times, then every BenchmarkDaemon case 3
# times; BINS and PROFILE (below) add builds to compare and CPU profiles.
# Root; namespaces 198.18.0.0/15 it makes and removes itself.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
build)
	make build
	CGO_ENABLED=0 go test -c -o bin/shmlink.test ./dataplane/link/shmlink
	CGO_ENABLED=0 go test -c -o bin/scale.test ./test/scale
	ls -l bin/
	;;
run)
	out=${OUT:-./device-out}
	mkdir -p "$out"
	nproc > "$out/nproc"
	export SOFTFABRIC_BIN=$PWD/bin/softfabric
	# BINS: other builds (names under bin/, comma-separated, the first
	# the baseline) compared with each other in the same runs, each in
	# process and through its daemon (SOFTFABRIC_SCALE_BINS).
	if [ -n "${BINS:-}" ]; then
		SOFTFABRIC_BIN=$PWD/bin/${BINS%%,*}
		export SOFTFABRIC_SCALE_BINS=$(echo "$BINS" | tr ',' '\n' | sed "s|^|$PWD/bin/|" | paste -sd,)
	fi
	[ -x bin/shmlink.test ] && (cd dataplane/link/shmlink && ../../../bin/shmlink.test -test.run '^$' -test.bench 'PingPong' -test.count 2 -test.benchtime 2s) > "$out/hop.txt" 2>&1 || true
	# The round trip alone, 9 runs alternated.
	(cd test/scale && SOFTFABRIC_SCALE_CASES=write-64B-lat SOFTFABRIC_SCALE_LOOPBACK=0 SOFTFABRIC_SCALE_REPEAT=${RTT_REPEAT:-9} \
		../../bin/scale.test -test.run '^$' -test.bench '^BenchmarkDaemon$' -test.benchtime 1x -test.timeout 8m) > "$out/rtt.txt" 2>&1 || true
	# Every case (or those CASES names, comma-separated), 3 runs
	# alternated.
	(cd test/scale && SOFTFABRIC_SCALE_CASES=${CASES:-} SOFTFABRIC_SCALE_REPEAT=${REPEAT:-3} SOFTFABRIC_SCALE_DURATION=2s \
		../../bin/scale.test -test.run '^$' -test.bench '^BenchmarkDaemon$' -test.benchtime 1x -test.timeout 8m) > "$out/daemon.txt" 2>&1 || true
	# PROFILE=CASES: one more run of those cases (default the round
	# trip), of softfabric or the last of BINS alone, each client and
	# daemon writing a CPU profile under $out/prof (go tool pprof reads
	# them here).
	if [ -n "${PROFILE:-}" ]; then
		mkdir -p "$out/prof"
		[ "$PROFILE" = 1 ] && PROFILE=write-64B-lat
		[ -n "${BINS:-}" ] && SOFTFABRIC_BIN=$PWD/bin/${BINS##*,}
		(cd test/scale && unset SOFTFABRIC_SCALE_BINS && SOFTFABRIC_SCALE_PROFILE=$(realpath "$out/prof") SOFTFABRIC_SCALE_LOOPBACK=0 SOFTFABRIC_SCALE_CASES=$PROFILE SOFTFABRIC_SCALE_REPEAT=1 SOFTFABRIC_SCALE_DURATION=4s SOFTFABRIC_SCALE_LAT_ITERS=400000 \
			../../bin/scale.test -test.run '^$' -test.bench '^BenchmarkDaemon$' -test.benchtime 1x -test.timeout 8m) > "$out/prof.txt" 2>&1 || true
	fi
	tail -n 20 "$out"/*.txt
	;;
*)
	echo "usage: $0 build|run" >&2
	exit 2
	;;
esac
