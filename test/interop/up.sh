#!/bin/bash
# Boot the interop guest (a copy of ../../shared/lab/rxe/up.sh, extended): rxe0 on its virtio-net
# eth0 (198.18.1.2/24), NIC = tap rxetap0 in host netns "rxehost" (198.18.1.1/24). Instead of
# looping servers the guest runs jobs: see guest-run.sh (mode "interop") and job.sh.
# Env: LAB_BUILD (default /tmp/rxelab), FLAVOR=trixie-bpo, WAIT (seconds, default 300).
set -euo pipefail
D=$(cd "$(dirname "$0")" && pwd); L=${LAB_BUILD:-/tmp/rxelab}; B=$L${FLAVOR:+/$FLAVOR}
NS=rxehost; TAP=rxetap0; MODE=interop; PIDF=$L/$MODE.pid
if [ -f "$PIDF" ] && [ "$(cat /proc/$(cat "$PIDF")/comm 2>/dev/null)" = qemu-system-x86 ]; then
  echo "already up (pid $(cat "$PIDF"))"; exit 0; fi
# The lab's own guest (../../shared/lab/rxe/up.sh) uses the same tap, MAC and addresses.
if [ -f "$L/serve.pid" ] && [ "$(cat /proc/$(cat "$L/serve.pid")/comm 2>/dev/null)" = qemu-system-x86 ]; then
  echo "the lab guest is up (pid $(cat "$L/serve.pid")): stop it first (shared/lab/rxe/down.sh)"; exit 1; fi
mkdir -p "$B"
[ -f "$B/rootfs.img" ] || "$D/build-rootfs.sh"
command -v ping >/dev/null || apt-get install -y -q --no-install-recommends iputils-ping
ip netns list | grep -qx "$NS\( .*\)\?" || ip netns add $NS
ip -n $NS link show $TAP >/dev/null 2>&1 || ip -n $NS tuntap add dev $TAP mode tap
ip -n $NS addr replace 198.18.1.1/24 dev $TAP
ip -n $NS link set lo up; ip -n $NS link set $TAP up
rm -rf "$B/share-$MODE/jobs"; rm -f "$B/share-$MODE/out/READY"
setsid ip netns exec $NS env TAP=$TAP "$D/boot.sh" $MODE > "$B/$MODE.out" 2>&1 < /dev/null &
echo $! > "$PIDF"
for i in $(seq 1 ${WAIT:-300}); do
  [ -f "$B/share-$MODE/out/READY" ] && break
  kill -0 "$(cat "$PIDF")" 2>/dev/null || { echo "qemu exited: $(tail -3 "$B/$MODE.out")"; break; }
  sleep 1; done
cat "$B/share-$MODE/out/READY" 2>/dev/null || { echo "guest not ready, see $B/console-$MODE.log"; exit 1; }
ip netns exec $NS ping -c 3 -W 2 198.18.1.2
echo "up: qemu pid $(cat "$PIDF"), console $B/console-$MODE.log, guest logs $B/share-$MODE/out/; stop with $D/down.sh"
