#!/bin/bash
# Boot the guest once (copy of ../../shared/lab/rxe/boot.sh; LAB_BUILD defaults to /tmp/rxelab): ./boot.sh [MODE] (default test). Env: NET=initns|netns, DUR, LATN,
# ONLY_PINGPONG=1, FLAVOR=trixie-bpo (kernel from trixie-backports, build/trixie-bpo/), TAP=<tap ifname> (adds a virtio-net NIC on that tap; run inside its netns).
# The guest runs build[/FLAVOR]/share-MODE/run.sh MODE, writes .../share-MODE/out/, then powers off (disk opened snapshot=on).
set -euo pipefail
D=$(cd "$(dirname "$0")" && pwd); B=${LAB_BUILD:-/tmp/rxelab}${FLAVOR:+/$FLAVOR}; S=$B/share-${1:-test}; MODE=${1:-test}
[ -f "$B/rootfs.img" ] || "$D/build-rootfs.sh"
rm -rf "$S/out"; mkdir -p "$S/out"
install -m 0755 "$D/guest-run.sh" "$S/run.sh"
env | grep -E '^(NET|DUR|LATN|ONLY_PINGPONG|GUEST_IP|WRITE_BW_ARGS|SEND_BW_ARGS)=' | sed 's/^/export /' > "$S/env" || true
NIC=()
[ -n "${TAP:-}" ] && NIC=(-netdev tap,id=n0,ifname=$TAP,script=no,downscript=no
                          -device virtio-net-pci,netdev=n0,mac=52:54:00:18:01:02)
# /dev/kvm here is kvm_pvm (needs a PVM-enabled guest kernel; a stock kernel hangs in its
# decompressor), so use TCG unless hardware KVM (kvm_intel/kvm_amd) is loaded.
if [ -z "${ACCEL:-}" ]; then
  if [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; then ACCEL="-enable-kvm"; CPU=${CPU:-host}
  else ACCEL="-accel tcg,thread=multi"; CPU=${CPU:-max}; fi
fi
exec qemu-system-x86_64 $ACCEL -cpu "$CPU" -smp 2 -m 2048 -nographic -no-reboot \
  -kernel "$B/vmlinuz" -initrd "$B/initrd.img" \
  -append "earlyprintk=ttyS0 root=/dev/vda rw console=ttyS0 init=/sbin/lab-init lab=$MODE panic=-1 net.ifnames=0" \
  -drive file="$B/rootfs.img",if=virtio,format=raw,snapshot=on \
  -virtfs local,path="$S",mount_tag=share,security_model=none,id=share \
  -serial file:"$B/console-$MODE.log" ${MON:--monitor none} -nic none "${NIC[@]}"
