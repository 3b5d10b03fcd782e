#!/bin/bash
# Host side of the guest's job protocol (guest-run.sh, mode "interop").
# Sourced: gjob NAME TIMEOUT SCRIPT   drop a job (SCRIPT: bash text run in the guest)
#          exchange, gnetem           see below
#          gready NAME SECONDS        wait for the job's "listening PORT" marker (1: not ready)
#          gwait NAME SECONDS         wait for it to end; prints nothing, returns its exit status
#                                     (124: guest timeout, 125: no status after SECONDS)
#          gout NAME                  its output file
# Run:     ./job.sh [-t SECONDS] 'COMMAND'   one command in the guest, its output and exit status.
# Env: LAB_BUILD (default /tmp/rxelab), FLAVOR.
GJ=${LAB_BUILD:-/tmp/rxelab}${FLAVOR:+/$FLAVOR}/share-interop/jobs

gjob() { # NAME TIMEOUT SCRIPT
  local n=$1 t=$2; shift 2
  rm -f "$GJ/$n".{job,run,out,rc,ready}
  printf '# timeout=%s\n%s\n' "$t" "$*" > "$GJ/.$n.tmp" && mv "$GJ/.$n.tmp" "$GJ/$n.job"
}
gready() { # NAME SECONDS
  local i; for ((i = 0; i < $2 * 10; i++)); do
    [ -e "$GJ/$1.ready" ] && return 0
    [ -e "$GJ/$1.rc" ] && return 1
    sleep 0.1; done; return 1; }
gwait() { # NAME SECONDS
  local i; for ((i = 0; i < $2 * 10; i++)); do
    [ -e "$GJ/$1.rc" ] && return "$(cat "$GJ/$1.rc")"; sleep 0.1; done; return 125; }
gout() { echo "$GJ/$1.out"; }
gnetem() { # SPEC: netem SPEC on what the guest sends (empty: none); 1 when tc failed
  gjob netem 20 "tc qdisc del dev eth0 root 2>/dev/null; ${1:+tc qdisc add dev eth0 root netem $1 && tc qdisc show dev eth0}"
  gwait netem 30; }
# exchange NAME SERVER PORT SECONDS LOG TOOL CMD...: one conversation between the guest's TOOL
# (bash text) and the host command CMD, within about SECONDS. SERVER rxe: TOOL serves on PORT
# and CMD is its client; sf: CMD serves on PORT in netns rxehost and TOOL is its client. CMD's
# output goes to LOG. Sets HRC and GRC, the host's and the guest's exit statuses (124: timed
# out; GRC 126: the guest's server never listened, and CMD did not run). CMD runs in the
# background and is waited for, so that a signal reaches the caller's trap at once; its pid is
# added to HOSTPIDS for the caller's clean-up.
exchange() {
  local name=$1 server=$2 port=$3 t=$4 log=$5 tool=$6 hp i; shift 6
  if [ "$server" = rxe ]; then
    # PORT cm: an rdma_cm server, with no TCP listener to wait for; give it time to listen.
    local ready="listening $port"
    [ "$port" = cm ] && ready="sleep 3; : > \$JOB.ready"
    gjob "$name" "$t" "stdbuf -oL $tool & $ready; wait \$!"
    if ! gready "$name" 30; then HRC=-; GRC=126; return; fi
    timeout -k 5 $((t - 10)) "$@" > "$log" 2>&1 & hp=$!; HOSTPIDS+=($hp)
    wait $hp; HRC=$?
    gwait "$name" 30; GRC=$?
  else
    timeout -k 5 $((t + 10)) "$@" > "$log" 2>&1 & hp=$!; HOSTPIDS+=($hp)
    # PORT cm: a server that listens by SIDR alone (udaddy), with no TCP listener to wait for.
    if [ "$port" = cm ]; then sleep 2
    else for i in $(seq 1 100); do [ -n "$(ip netns exec rxehost ss -Hltn "sport = :$port")" ] && break; sleep 0.1; done; fi
    gjob "$name" "$t" "stdbuf -oL $tool"
    gwait "$name" $((t + 20)); GRC=$?
    wait $hp; HRC=$?
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -u; t=60; [ "${1:-}" = -t ] && { t=$2; shift 2; }
  [ $# -ge 1 ] || { sed -n '2,10p' "$0"; exit 2; }
  [ -d "$GJ" ] || { echo "no $GJ: is the guest up (up.sh)?"; exit 2; }
  n=cmd-$$-$(date +%s); gjob "$n" "$t" "$*"; gwait "$n" $((t + 15)); rc=$?
  cat "$GJ/$n.out" 2>/dev/null; echo "rc=$rc"; exit $rc
fi
