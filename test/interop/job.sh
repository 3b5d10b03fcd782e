#!/bin/bash
# Host side of the guest's job protocol (guest-run.sh, mode "interop").
# Sourced: gjob NAME TIMEOUT SCRIPT   drop a job (SCRIPT: bash text run in the guest)
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

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -u; t=60; [ "${1:-}" = -t ] && { t=$2; shift 2; }
  [ $# -ge 1 ] || { sed -n '2,10p' "$0"; exit 2; }
  [ -d "$GJ" ] || { echo "no $GJ: is the guest up (up.sh)?"; exit 2; }
  n=cmd-$$-$(date +%s); gjob "$n" "$t" "$*"; gwait "$n" $((t + 15)); rc=$?
  cat "$GJ/$n.out" 2>/dev/null; echo "rc=$rc"; exit $rc
fi
