#!/bin/bash
# Records the pcapng fixtures in test/fixtures/rxe/: short exchanges between softfabric (host,
# netns rxehost, rxetap0) and Linux rxe's unmodified tools in the lab guest, captured by
# softfabric itself (SOFTFABRIC_DEBUG_PCAP: the frames it received from rxe and the frames it
# sent, on interfaces rxetap0-rx and rxetap0-tx). The replay tests (test/rxereplay) feed rxe's
# frames back into softfabric's parser and transport. Needs the guest up and softfabric up
# on rxetap0 (KEEP_UP=1 test/interop/run.sh, or up.sh and `softfabric up rxetap0` in rxehost).
# Env: ONLY (regexp of capture names), OUT (default test/fixtures/rxe).
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$D/../.." && pwd)
SF=${SOFTFABRIC:-$ROOT/bin/softfabric}; OUT=${OUT:-$ROOT/test/fixtures/rxe}
NS=rxehost; TAP=rxetap0; GIP=198.18.1.2; HIP=198.18.1.1
source "$D/job.sh"
mkdir -p "$OUT"
HOSTPIDS=()
want() { [ -z "${ONLY:-}" ] || [[ $1 =~ $ONLY ]]; }

# cap NAME SERVER PORT SFARGS TOOLCMD [NETEM [SFFAULTS]]: SERVER rxe (the tool serves) or sf;
# NETEM impairs what rxe sends, SFFAULTS (SOFTFABRIC_DEBUG_LINK_FAULTS, applied above the
# capture: dropped frames are not recorded) what softfabric sends.
cap() {
  local name=$1 server=$2 port=$3 sfargs=$4 tool=$5 ne=${6:-} sff=${7:-} f=$OUT/$1.pcapng
  want "$name" || return 0
  [ -n "$ne" ] && gnetem "$ne"
  local env=(env SOFTFABRIC_DEBUG_PCAP=$f SOFTFABRIC_DEBUG_PCAP_LIMIT=2000)
  [ -n "$sff" ] && env+=(SOFTFABRIC_DEBUG_LINK_FAULTS=$sff)
  # shellcheck disable=SC2086
  exchange "cap-$name" $server $port 60 "$OUT/.$name.log" "$tool" ip netns exec $NS "${env[@]}" "$SF" $sfargs --iface $TAP
  [ -n "$ne" ] && gnetem ""
  [ "$GRC" = 126 ] && echo "$name: guest server not listening"
  printf '%-28s softfabric rc=%s rxe rc=%s %s\n' "$name" "$HRC" "$GRC" "$(grep -o '[0-9]* frames recorded.*' "$OUT/.$name.log")"
  rm -f "$OUT/.$name.log"
}

RC="ibv_rc_pingpong -d \$DEV -g \$G -p 18515"
cap rc-pingpong-sf-client  rxe 18515 "pingpong -n 10 $GIP" "$RC -n 10"
cap rc-pingpong-rxe-client sf  18515 "pingpong -n 10" "$RC -n 10 $HIP"
cap ud-pingpong-rxe-client sf  18515 "pingpong --ud -s 512 -n 10" "ibv_ud_pingpong -d \$DEV -g \$G -p 18515 -s 512 -n 10 $HIP"
cap srq-pingpong-rxe-client sf 18515 "pingpong --srq -q 2 -s 1500 -n 10" "ibv_srq_pingpong -d \$DEV -g \$G -p 18515 -q 2 -s 1500 -n 10 $HIP"
for op in write send read; do
  cap $op-sf-client  rxe 18516 "perf $op --perftest $GIP --port 18516 --size 3000 --iters 8" "ib_${op}_bw -F -d \$DEV -x \$G -p 18516 -s 3000 -n 8"
  cap $op-rxe-client sf  18516 "perf $op --perftest-server --port 18516 --size 3000 --iters 8" "ib_${op}_bw -F -d \$DEV -x \$G -p 18516 -s 3000 -n 8 $HIP"
done
for t in FETCH_AND_ADD CMP_AND_SWAP; do
  n=$(echo $t | tr A-Z_ a-z-)
  cap atomic-$n-sf-client  rxe 18516 "perf atomic --perftest $GIP --port 18516 --atomic-type $t --iters 8" "ib_atomic_bw -F -d \$DEV -x \$G -p 18516 -A $t -n 8"
  cap atomic-$n-rxe-client sf  18516 "perf atomic --perftest-server --port 18516 --atomic-type $t --iters 8" "ib_atomic_bw -F -d \$DEV -x \$G -p 18516 -A $t -n 8 $HIP"
done
# rxe's sequence NAKs and duplicate ACKs (20 % loss on what softfabric sends), and its
# repeated read responses (20 % loss on what rxe sends)
cap write-sf-client-loss rxe 18516 "perf write --perftest $GIP --port 18516 --size 4096 --iters 20" "ib_write_bw -F -d \$DEV -x \$G -p 18516 -s 4096 -n 20" "" "loss=20%"
cap read-sf-client-loss  rxe 18516 "perf read --perftest $GIP --port 18516 --size 4096 --iters 20" "ib_read_bw -F -d \$DEV -x \$G -p 18516 -s 4096 -n 20" "loss 20%"
# rxe as the requester under loss: its writes lost (netem: softfabric NAKs, rxe goes back), and
# softfabric's read responses lost (faulty: rxe asks again for the rest of a read)
cap write-rxe-client-loss sf 18516 "perf write --perftest-server --port 18516 --size 4096 --iters 5" "ib_write_bw -F -d \$DEV -x \$G -p 18516 -s 4096 -n 5 $HIP" "loss 10%"
cap read-rxe-client-loss  sf 18516 "perf read --perftest-server --port 18516 --size 4096 --iters 5" "ib_read_bw -F -d \$DEV -x \$G -p 18516 -s 4096 -n 5 $HIP" "" "loss=10%"
# rdma_cm: the CM MADs on QP1 (REQ, MRA where rxe sends one, REP, RTU, then DREQ and DREP) around
# two rping round trips, each side the active one in turn.
cap rdmacm-rping-sf-client  rxe cm   "rping -c -a $GIP -p 7174 -C 2 -V -v" "rping -s -a \$IP -p 7174 -v"
cap rdmacm-rping-rxe-client sf  7174 "rping -s -p 7174 -v" "rping -c -a $HIP -p 7174 -C 2 -V -v"
# rdma_cm's UD port space: SIDR_REQ and SIDR_REP on QP1 (udaddy, port 7174), then two datagrams
# each way, each side the requester in turn.
cap rdmacm-udaddy-sf-client  rxe cm "udaddy -s $GIP -c 1 -C 2 -S 64 --timeout 30s" "udaddy -b \$IP -c 1 -C 2 -S 64"
cap rdmacm-udaddy-rxe-client sf  cm "udaddy -c 1 -C 2 -S 64 --timeout 30s" "udaddy -s $HIP -c 1 -C 2 -S 64"
ls -la "$OUT"
