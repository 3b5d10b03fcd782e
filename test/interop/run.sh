#!/bin/bash
# make interop: softfabric against Linux Soft-RoCE (rxe) in the lab guest, both ways, clean and
# with 5 % loss. Needs root. Brings the guest up (up.sh; builds it when $LAB_BUILD has no rootfs),
# runs softfabric in netns rxehost on rxetap0, prints a PASS/FAIL table and takes everything down.
# Env: LAB_BUILD (default /tmp/rxelab), ONLY (regexp of case names to run), KEEP_UP=1 (leave the
# guest and softfabric up afterwards), NETEM / SFFAULTS (the faults of the -loss5 rows, each
# direction; empty: none), sizes: PP_N, PP_LOSS_N, BW_SIZE, BW_N, BW_LOSS_N, BW_R_LOSS_N, RP_N,
# RP_LOSS_N, LAT_N, LAT_LOSS_N.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$D/../.." && pwd)
export LAB_BUILD=${LAB_BUILD:-/tmp/rxelab}
B=$LAB_BUILD${FLAVOR:+/$FLAVOR}; NS=rxehost; TAP=rxetap0; GIP=198.18.1.2; HIP=198.18.1.1
SF=${SOFTFABRIC:-$ROOT/bin/softfabric}
PP_N=${PP_N:-1000} PP_LOSS_N=${PP_LOSS_N:-200} UD_SIZE=${UD_SIZE:-1024} SRQ_Q=${SRQ_Q:-4}
RP_N=${RP_N:-100} RP_LOSS_N=${RP_LOSS_N:-50}
BW_SIZE=${BW_SIZE:-65536} BW_N=${BW_N:-200} BW_LOSS_N=${BW_LOSS_N:-100} BW_Q=${BW_Q:-4} ALL_N=${ALL_N:-5}
BW_R_LOSS_N=${BW_R_LOSS_N:-20} LAT_N=${LAT_N:-1000} LAT_LOSS_N=${LAT_LOSS_N:-200}
# Faults: netem in the guest on what rxe sends, faulty (SOFTFABRIC_DEBUG_LINK_FAULTS) on what
# softfabric sends (AF_XDP transmit bypasses tc, and this host kernel has no netem).
# Either set empty turns that direction's faults off.
NETEM=${NETEM-loss 5% duplicate 2% delay 1ms reorder 5%}
SFFAULTS=${SFFAULTS-loss=5%,dup=2%,reorder=5%,reorderdelay=1ms}
source "$D/job.sh"

[ "$(id -u)" = 0 ] || { echo "interop: needs root (netns, tap, XDP, qemu)"; exit 1; }
RUN=$B/interop/$(date -u +%Y%m%dT%H%M%SZ); mkdir -p "$RUN"
HOSTPIDS=()
cleanup() {
  local p; for p in "${HOSTPIDS[@]}"; do kill "$p" 2>/dev/null; done
  if [ -z "${KEEP_UP:-}" ]; then
    ip netns exec $NS "$SF" down $TAP >> "$RUN/down.log" 2>&1
    [ -d "$B/share-interop" ] && cp -a "$B/share-interop/out" "$B/share-interop/jobs" "$RUN/guest/" 2>/dev/null
    "$D/down.sh" >> "$RUN/down.log" 2>&1
  else
    [ -d "$B/share-interop" ] && cp -a "$B/share-interop/out" "$B/share-interop/jobs" "$RUN/guest/" 2>/dev/null
  fi
  echo "logs: $RUN (host side: *.host, guest side: guest/jobs/*.out, guest console: $B/console-interop.log)"
}
trap cleanup EXIT
trap 'echo "interop: interrupted"; exit 130' INT TERM
mkdir -p "$RUN/guest"

[ -x "$SF" ] || make -C "$ROOT" build || exit 1
mkdir -p /run/softfabric/bpf
mountpoint -q /run/softfabric/bpf || mount -t bpf bpf /run/softfabric/bpf || exit 1
echo "== guest up (LAB_BUILD=$LAB_BUILD)"
"$D/up.sh" 2>&1 | tee "$RUN/up.log" | tail -4; [ "${PIPESTATUS[0]}" = 0 ] || { echo "interop: guest did not come up"; exit 1; }
echo "== softfabric up $TAP (netns $NS)"
ip netns exec $NS "$SF" up $TAP 2>&1 | tee "$RUN/sf-up.log" || { echo "interop: softfabric up failed"; exit 1; }

sfx() { ip netns exec $NS "$SF" "$@"; }
ROWS=(); FAILED=0
row() { # NAME RESULT FIGURE NOTE
  ROWS+=("$(printf '%-27s %-5s %-24s %s' "$1" "$2" "$3" "$4")")
  printf '   %-5s %-24s %s\n' "$2" "$3" "$4"; [ "$2" = PASS ] || FAILED=1; }
tails() { # HOSTLOG GUESTJOB: last lines of both sides, one line
  { echo "host: $(tail -n 3 "$1" 2>/dev/null | tr '\n' ' ')"; echo "| guest: $(tail -n 3 "$(gout "$2")" 2>/dev/null | tr '\n' ' ')"; } | tr -s ' ' | tr '\n' ' '; }
stats() { sfx stats $TAP 2>/dev/null | awk '{print $1, $2}'; }
rxestats() { # guest's rxe counters, as "name value" lines
  gjob rxestat-$1 20 'rdma statistic show link rxe0/1 | tr " " "\n" | grep . | tail -n +3 | paste -d " " - -'
  gwait rxestat-$1 30 && cat "$(gout rxestat-$1)"; }
delta() { # BEFORE AFTER PATTERN -> "name+N ..." for counters matching PATTERN that grew
  join <(sort "$1") <(sort "$2") | awk -v p="$3" '$1 ~ p && $3 > $2 { printf "%s+%d ", $1, $3 - $2 }'; }
want() { [ -z "${ONLY:-}" ] || [[ $1 =~ $ONLY ]]; }
impair() { # on|off: netem on the guest's eth0
  [ -n "$NETEM" ] || return 0
  local spec=""; [ "$1" = on ] && spec=$NETEM
  gnetem "$spec" || { echo "netem $1 failed: $(cat "$(gout netem)")"; return 1; }; }

# runcase NAME LOSS SERVER PORT KIND SFARGS TOOLCMD: one row.
#   SERVER  rxe: the guest's tool serves on PORT, softfabric (SFARGS, which name 198.18.1.2) is
#           the client; sf: softfabric serves on PORT, the guest's tool is the client of
#           198.18.1.1 (TOOLCMD ends with it).
#   KIND    pp: ibv_*_pingpong's "usec/iter" line is the figure; bw: perftest's table (both
#           sides print it), the BW average of its last line; T=SECONDS before KIND sets the
#           row's time limit.
#   SFARGS  softfabric's arguments, without --iface; TOOLCMD the guest's command line, with
#           $DEV and $G (the GID index) left for the guest to expand.
runcase() {
  local name=$1 loss=$2 server=$3 port=$4 kind=$5 sfargs=$6 tool=$7
  local h=$RUN/$name.host env=() fig="" gfig="" rc grc note="" s1 r1 gt=150
  case $kind in T=*) gt=${kind#T=}; gt=${gt%%,*}; kind=${kind#*,} ;; esac
  [ "$loss" = yes ] && [ -n "$SFFAULTS" ] && env=(env SOFTFABRIC_DEBUG_LINK_FAULTS=$SFFAULTS)
  stats > "$RUN/$name.stats0"; rxestats $name-0 > "$RUN/$name.rxe0"
  if [ "$loss" = yes ]; then impair on || { RES=FAIL FIG=- NOTE="could not set netem"; return; }; fi
  # shellcheck disable=SC2086
  exchange "$name" $server $port $gt "$h" "$tool" ip netns exec $NS "${env[@]}" "$SF" $sfargs --iface $TAP
  rc=$HRC grc=$GRC
  if [ "$grc" = 126 ]; then RES=FAIL FIG=- NOTE="guest server not listening: $(tails /dev/null "$name")"; [ "$loss" = yes ] && impair off; return; fi
  [ "$loss" = yes ] && impair off
  case $kind in
  pp) fig=$(awk '/usec\/iter/ {print $(NF-1) " usec/iter"}' "$h")
      [ -n "$fig" ] || fig=$(awk '/usec\/iter/ {print $(NF-1) " usec/iter"}' "$(gout "$name")") ;;
  rp) # rping: the pings each side printed ("ping data: ..."), -V checked by the client
      fig=$(grep -c 'ping data:' "$h")" pings"
      note="rxe: $(grep -c 'ping data:' "$(gout "$name")") pings; " ;;
  uc) # ucmatose: both sides through their transfers and the disconnect, "return status 0"
      grep -q '^data transfers complete' "$h" && grep -q '^return status 0' "$h" &&
        fig="transfers complete"
      note="rxe: $(grep -E '^(data transfers complete|return status)' "$(gout "$name")" | paste -sd ',' -); " ;;
  ua) # udaddy -C 0: every resolution made, "return status 0" on both sides
      grep -q '^return status 0' "$h" && fig="resolved"
      note="rxe: $(grep -E '^return status' "$(gout "$name")"); " ;;
  rd) # rdma_server / rdma_client: "rdma_server: end 0" / "rdma_client: end 0"
      fig=$(grep -Eo '^rdma_(server|client): end 0$' "$h")
      note="rxe: $(grep -Eo '^rdma_(server|client): end -?[0-9]+' "$(gout "$name")"); " ;;
  bw) # perftest's table: "#bytes #iterations BW peak BW average MsgRate", MB/sec = MiB/s
      bwfig() { awk '/#bytes/ {t=1; next} t && $1 ~ /^[0-9]+$/ && NF >= 5 {n++; last=$4} END {if (n) printf "%s MiB/s%s", last, (n > 1 ? " (" n " sizes, last)" : "")}' "$1"; }
      fig=$(bwfig "$h"); gfig=$(bwfig "$(gout "$name")")
      [ -n "$gfig" ] && note="rxe: $gfig; "
      note+=$(grep -o 'transport: .*' "$h" | sed 's/transport: //' | paste -sd ';' -) ;;
  lat) # perftest's latency table: t_typical (usec; half the round trip for send and write) of
      # each side; a read or atomic server prints none (as ib_read_lat's and ib_atomic_lat's)
      latfig() { awk '/t_typical/ {t=1; next} t && $1 ~ /^[0-9]+$/ && NF >= 9 {v=$5} END {if (v != "") printf "%s", v}' "$1"; }
      fig=$(latfig "$h"); gfig=$(latfig "$(gout "$name")")
      if [ -z "$fig" ] && [ "$server" = sf ] && grep -q 'prints no table' "$h"; then fig="served"; fi
      [ -n "$fig" ] && [ "$fig" != served ] && fig="$fig usec t_typical"
      if grep -q 'Correlation coefficient' "$(gout "$name")"; then
        # perftest times with the TSC and converts with the MHz it measures (get_cpu_mhz); under
        # emulation the samples scatter, it gives up, and every figure it prints is inf
        note="rxe: no figure (its clock: $(grep -o 'Correlation coefficient.*' "$(gout "$name")")); "
      elif [ -n "$gfig" ]; then
        note="rxe: $gfig usec; "
        if [[ $fig =~ ^([0-9.]+)\  ]]; then
          local ratio; ratio=$(awk -v a="${BASH_REMATCH[1]}" -v b="$gfig" 'BEGIN {printf "%.2f", a / b}')
          note+="sf/rxe $ratio; "
          # both are medians of the same round trips; under TCG their spread is wide
          awk -v r="$ratio" 'BEGIN {exit !(r < 0.9 || r > 1.1)}' &&
            note+="more than 10 % apart: medians of gaps spread $(awk '/t_typical/ {t=1; next} t && $1 ~ /^[0-9]+$/ && NF >= 9 {printf "%s..%s usec (t_min..99 %%)", $3, $8}' "$h") in the emulated guest; "
        fi
      fi
      note+=$(grep -o 'transport: .*' "$h" | sed 's/transport: //' | paste -sd ';' -) ;;
  esac
  stats > "$RUN/$name.stats1"; rxestats $name-1 > "$RUN/$name.rxe1"
  s1=$(delta "$RUN/$name.stats0" "$RUN/$name.stats1" '^dropped'); r1=$(delta "$RUN/$name.rxe0" "$RUN/$name.rxe1" 'err|duplicate|out_of_seq')
  [ -n "$s1" ] && note+=" sf drops: $s1"; [ -n "$r1" ] && note+=" rxe: $r1"
  if [ "$rc" = 0 ] && [ "$grc" = 0 ] && [ -n "$fig" ]; then RES=PASS FIG=$fig NOTE="$note"
  else RES=FAIL FIG=${fig:--} NOTE="softfabric rc=$rc, rxe rc=$grc (124: timed out); $(tails "$h" "$name")${s1:+ | sf drops: $s1}${r1:+ | rxe: $r1}"; fi
}

# onecase NAME LOSS ...: runcase, and for a pingpong row with faults one more attempt after a
# failure: ibv_*_pingpong has no handshake after its loop, so when the last ACK is lost the side
# that sent last never completes (rxe with retry_cnt 7 retries forever), whoever the peers are.
# The same for rping's rows: rping's client destroys its id as soon as it has sent the DREQ,
# which cancels the DREQ's retransmission (cm_destroy_id in DREQ_SENT), so when that one DREQ
# is lost its server waits for the disconnect for ever, whoever the server is.
# The same for ib_write_lat's rows: it has no handshake after its loop and exits as soon as the
# peer's last write is in, so when its ACK is lost the peer's last write never completes.
# The same for udaddy's rows: the kernel's CM forgets a SIDR request once answered, so when that
# SIDR_REP is lost rxe's udaddy server hears the requester's repeat as a new request, which it
# refuses (all its connections made), whoever the requester is.
# The same for rdma_server / rdma_client's rows: the server disconnects as soon as its own send
# completes, so when the ACK of the client's send is lost, the client's retransmission reaches no
# queue pair and the DREQ ends its wait for that send ("the peer disconnected first"), whoever
# the client is (seen once in 2026-11-26's full run, sf-to-rxe-loss5; 3 of 3 passed again).
# perftest's other tools close with a handshake after all completions: no second chance.
onecase() {
  local name=$1 first=""
  want "$name" || return 0
  echo "== $name"
  runcase "$@"
  if [ "$RES" = FAIL ] && [ "$2" = yes ] && [[ $5 == *pp || $5 == *rp || $5 == ua || $5 == rd || $name == write-lat-* ]]; then
    first=$NOTE; mv "$RUN/$name.host" "$RUN/$name.try1.host" 2>/dev/null
    cp "$(gout "$name")" "$RUN/guest-$name.try1.out" 2>/dev/null
    echo "   attempt 1 FAIL: $first"; echo "   retrying"
    runcase "$@"; NOTE+=" [attempt 1 failed: ${first:0:160}]"
  fi
  row "$name" "$RES" "$FIG" "$NOTE"
}

# Warm the guest up first: under TCG the first run of rxe's code paths is translated on the fly
# and stalls for tens of milliseconds at a time, which the first rows would otherwise pay for.
echo "== warm-up: rxe against itself in the guest (ib_write_bw, ib_read_bw)"
gjob warmup 90 'for t in write read; do ib_${t}_bw -F -d $DEV -x $G -p 18600 -s 65536 -n 200 > /dev/null 2>&1 & sleep 1; ib_${t}_bw -F -d $DEV -x $G -p 18600 -s 65536 -n 200 $IP | tail -2; wait; done'
gwait warmup 100 || echo "   (warm-up failed: $(tail -n 2 "$(gout warmup)" | tr '\n' ' '); going on)"

RC="ibv_rc_pingpong -d \$DEV -g \$G -p 18515"
UD="ibv_ud_pingpong -d \$DEV -g \$G -p 18515 -s $UD_SIZE"
SRQ="ibv_srq_pingpong -d \$DEV -g \$G -p 18515 -q $SRQ_Q"
for loss in no yes; do
  suf=""; n=$PP_N; bn=$BW_N; [ $loss = yes ] && { suf=-loss5; n=$PP_LOSS_N; bn=$BW_LOSS_N; }
  onecase rc-pingpong-sf-to-rxe$suf  $loss rxe 18515 pp "pingpong -n $n $GIP" "$RC -n $n"
  onecase rc-pingpong-rxe-to-sf$suf  $loss sf  18515 pp "pingpong -n $n" "$RC -n $n $HIP"
  if [ $loss = no ]; then # UD is unreliable: a lost datagram stalls ibv_ud_pingpong for good
    onecase ud-pingpong-sf-to-rxe    $loss rxe 18515 pp "pingpong --ud -s $UD_SIZE -n $n $GIP" "$UD -n $n"
    onecase ud-pingpong-rxe-to-sf    $loss sf  18515 pp "pingpong --ud -s $UD_SIZE -n $n" "$UD -n $n $HIP"
  fi
  # rdma_cm: the connection made with IB CM MADs on QP1 (over the loss too), then rping's
  # exchange (SEND, RDMA READ, RDMA WRITE per ping), checked with -V; then the disconnect.
  rn=$RP_N; [ $loss = yes ] && rn=$RP_LOSS_N
  RP="rping -p 7174 -S 64"
  onecase rping-sf-to-rxe$suf $loss rxe cm rp "rping -c -a $GIP -p 7174 -C $rn -V -v --timeout 60s" "$RP -s -a \$IP -v"
  onecase rping-rxe-to-sf$suf $loss sf 7174 rp "rping -s -p 7174 -v" "$RP -c -a $HIP -C $rn -V -v"
  # librdmacm's ucmatose (cmatose.c): -c connections, -C messages of -S bytes each way on each
  # (the server sends first, the client answers), then the server disconnects them all; and
  # rdma_server / rdma_client: one 16-byte message each way (the client first), both disconnect.
  # Port 7471, RDMA-CM's.
  UC="-c 4 -C 100 -S 1000"; [ $loss = yes ] && UC="-c 2 -C 50 -S 1000"
  onecase ucmatose-sf-to-rxe$suf $loss rxe cm uc "ucmatose -s $GIP -p 7471 $UC --timeout 60s" "ucmatose -p 7471 $UC"
  onecase ucmatose-rxe-to-sf$suf $loss sf 7471 uc "ucmatose -p 7471 $UC --timeout 60s" "ucmatose -s $HIP -p 7471 $UC"
  # librdmacm's udaddy: -c UD queue pairs, each "connected" by SIDR (rdma_cm's UDP port space,
  # port 7174), then -C datagrams of -S bytes each way on each (the client first). Under faults
  # the resolutions only (-C 0: SIDR_REQ and SIDR_REP through the faults, no datagrams): udaddy
  # waits for every datagram it was sent, so one lost wedges it, whoever the peer.
  UA="-c 4 -C 100 -S 1000" uk=uc; [ $loss = yes ] && { UA="-c 4 -C 0"; uk=ua; }
  onecase udaddy-sf-to-rxe$suf $loss rxe cm $uk "udaddy -s $GIP $UA --timeout 90s" "udaddy -b \$IP $UA"
  onecase udaddy-rxe-to-sf$suf $loss sf cm $uk "udaddy $UA --timeout 90s" "udaddy -s $HIP $UA"
  onecase rdma-cs-sf-to-rxe$suf $loss rxe cm rd "rdma_client -s $GIP -p 7471 --timeout 60s" "rdma_server -p 7471"
  onecase rdma-cs-rxe-to-sf$suf $loss sf 7471 rd "rdma_server -p 7471 --timeout 120s" "rdma_client -s $HIP -p 7471"
  onecase srq-pingpong-sf-to-rxe$suf $loss rxe 18515 pp "pingpong --srq -q $SRQ_Q -n $n $GIP" "$SRQ -n $n"
  onecase srq-pingpong-rxe-to-sf$suf $loss sf  18515 pp "pingpong --srq -q $SRQ_Q -n $n" "$SRQ -n $n $HIP"
  for op in write send read atomic; do
    s="-s $BW_SIZE"; ss="--size $BW_SIZE"; [ $op = atomic ] && { s=""; ss=""; }
    PT="ib_${op}_bw -F -d \$DEV -x \$G -p 18516 $s -n $bn"
    onecase $op-bw-sf-to-rxe$suf $loss rxe 18516 bw "perf $op --perftest $GIP --port 18516 $ss --iters $bn --timeout 140s" "$PT"
    onecase $op-bw-rxe-to-sf$suf $loss sf  18516 bw "perf $op --perftest-server --port 18516 $ss --iters $bn --timeout 140s" "$PT $HIP"
    # perftest's RDMA-CM mode (-R): the exchange is SEND/RECV on an rdma_cm connection and each
    # QP one more rdma_cm connection, all on port 18516; no TCP (an rxe server: PORT cm). rdma_cm
    # gives rxe's requester the CM's ACK timeout (packet life time 18: 2.1 s, not perftest's
    # -u 14, 67 ms), so each of its timeouts costs 2 s: fewer iterations and more time with faults.
    rbn=$bn rk=bw rto=140s; [ $loss = yes ] && { rbn=$BW_R_LOSS_N rk=T=300,bw rto=290s; }
    PT="ib_${op}_bw -R -F -d \$DEV -x \$G -p 18516 $s -n $rbn"
    onecase $op-bw-R-sf-to-rxe$suf $loss rxe cm    $rk "perf $op --perftest $GIP --rdma-cm --port 18516 $ss --iters $rbn --timeout $rto" "$PT"
    onecase $op-bw-R-rxe-to-sf$suf $loss sf  18516 $rk "perf $op --perftest-server --rdma-cm --port 18516 $ss --iters $rbn --timeout $rto" "$PT $HIP"
  done
  # perftest's latency tools (-s 2, their default): ping-pong of sends or of writes polled in
  # memory, one read or atomic at a time; port 18517.
  ln=$LAT_N; [ $loss = yes ] && ln=$LAT_LOSS_N
  for op in send write read atomic; do
    PT="ib_${op}_lat -F -d \$DEV -x \$G -p 18517 -n $ln"
    onecase $op-lat-sf-to-rxe$suf $loss rxe 18517 lat "perf $op --lat --perftest $GIP --port 18517 --iters $ln --timeout 140s" "$PT"
    onecase $op-lat-rxe-to-sf$suf $loss sf  18517 lat "perf $op --lat --perftest-server --port 18517 --iters $ln --timeout 140s" "$PT $HIP"
  done
  if [ $loss = no ]; then
    # every size (perftest -a: 2 B to 8 MiB) and several QPs
    for op in write read; do
      PT="ib_${op}_bw -F -d \$DEV -x \$G -p 18516 -a -n $ALL_N"
      onecase $op-bw-all-sf-to-rxe $loss rxe 18516 T=280,bw "perf $op --perftest $GIP --port 18516 --all --iters $ALL_N --timeout 270s" "$PT"
      onecase $op-bw-all-rxe-to-sf $loss sf  18516 T=280,bw "perf $op --perftest-server --port 18516 --all --iters $ALL_N --timeout 270s" "$PT $HIP"
    done
    for op in write send read; do # the smallest message: one byte
      PT="ib_${op}_bw -F -d \$DEV -x \$G -p 18516 -s 1 -n $BW_N"
      onecase $op-bw-1B-sf-to-rxe $loss rxe 18516 bw "perf $op --perftest $GIP --port 18516 --size 1 --iters $BW_N --timeout 140s" "$PT"
      onecase $op-bw-1B-rxe-to-sf $loss sf  18516 bw "perf $op --perftest-server --port 18516 --size 1 --iters $BW_N --timeout 140s" "$PT $HIP"
    done
    for op in write send; do
      PT="ib_${op}_bw -F -d \$DEV -x \$G -p 18516 -q $BW_Q -s $BW_SIZE -n $BW_N"
      onecase $op-bw-q$BW_Q-sf-to-rxe $loss rxe 18516 bw "perf $op --perftest $GIP --port 18516 --qps $BW_Q --size $BW_SIZE --iters $BW_N --timeout 140s" "$PT"
      onecase $op-bw-q$BW_Q-rxe-to-sf $loss sf  18516 bw "perf $op --perftest-server --port 18516 --qps $BW_Q --size $BW_SIZE --iters $BW_N --timeout 140s" "$PT $HIP"
    done
    # -R with several QPs: one rdma_cm connection per QP, requested all at once by perftest
    PT="ib_write_bw -R -F -d \$DEV -x \$G -p 18516 -q $BW_Q -s $BW_SIZE -n $BW_N"
    onecase write-bw-R-q$BW_Q-sf-to-rxe $loss rxe cm    bw "perf write --perftest $GIP --rdma-cm --port 18516 --qps $BW_Q --size $BW_SIZE --iters $BW_N --timeout 140s" "$PT"
    onecase write-bw-R-q$BW_Q-rxe-to-sf $loss sf  18516 bw "perf write --perftest-server --rdma-cm --port 18516 --qps $BW_Q --size $BW_SIZE --iters $BW_N --timeout 140s" "$PT $HIP"
  fi
done

sfx stats $TAP > "$RUN/stats.final" 2>&1
gjob dmesg 20 'dmesg | grep -iE "rxe|rdma|infiniband" | tail -30'; gwait dmesg 30; cp "$(gout dmesg)" "$RUN/guest-dmesg.txt" 2>/dev/null
echo
echo "== softfabric interop with Linux rxe ($(awk '{print $1, $3}' "$B/share-interop/out/versions.txt" 2>/dev/null | head -1); ${BW_SIZE} B messages for BW)"
printf '%-27s %-5s %-24s %s\n' case result figure notes
for r in "${ROWS[@]}"; do echo "$r"; done
echo "softfabric stats $TAP (whole run):"; sed 's/^/  /' "$RUN/stats.final"
[ $FAILED = 0 ] && echo "interop: all passed" || echo "interop: FAILED"
exit $FAILED
