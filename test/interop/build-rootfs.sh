#!/bin/bash
# Build the guest rootfs (debootstrap) + ext4 image + kernel/initrd under build/.
# Idempotent: debootstrap runs once (marker build/rootfs/.debootstrap-done), packages
# added to PKGS later are installed into an existing rootfs; the init script and the
# disk image are refreshed on every run.
set -euo pipefail
# FLAVOR=trixie-bpo: trixie userland + trixie-backports kernel (rxe with netns support),
# built under build/trixie-bpo/ ; default: bookworm + its 6.1 kernel under build/.
D=$(cd "$(dirname "$0")" && pwd); B=${LAB_BUILD:-/tmp/rxelab}${FLAVOR:+/$FLAVOR}; R=$B/rootfs
export TMPDIR=$B/tmp; mkdir -p "$TMPDIR"
# Reuse the mirror/suite configured for this host's apt.
SRC=/etc/apt/sources.list.d/debian.sources
MIRROR=${MIRROR:-$(awk '/^URIs:/{print $2; exit}' $SRC 2>/dev/null || echo http://deb.debian.org/debian)}
SUITE=${SUITE:-$(awk '/^Suites:/{print $2; exit}' $SRC 2>/dev/null || echo bookworm)}
[ "${FLAVOR:-}" = trixie-bpo ] && SUITE=trixie
# rdmacm-utils: librdmacm's examples (rping, ucmatose, udaddy, rdma_server, rdma_client, mckey);
# Fedora calls it librdmacm-utils.
PKGS=linux-image-amd64,initramfs-tools,kmod,rdma-core,ibverbs-utils,rdmacm-utils,perftest,iproute2,iputils-ping,procps,util-linux
command -v debootstrap >/dev/null || apt-get install -y --no-install-recommends debootstrap
command -v qemu-system-x86_64 >/dev/null || apt-get install -y --no-install-recommends qemu-system-x86
if [ ! -e "$R/.debootstrap-done" ]; then
  rm -rf "$R"
  if [ "${FLAVOR:-}" = trixie-bpo ]; then
    debootstrap --variant=minbase --include=${PKGS#linux-image-amd64,} "$SUITE" "$R" "$MIRROR"
    echo "deb $MIRROR $SUITE-backports main" > "$R/etc/apt/sources.list.d/backports.list"
    mount -t proc proc "$R/proc"; trap 'umount "$R/proc"' EXIT
    chroot "$R" apt-get update -q
    chroot "$R" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -t $SUITE-backports linux-image-amd64
    umount "$R/proc"; trap - EXIT
  else
    debootstrap --variant=minbase --include=$PKGS "$SUITE" "$R" "$MIRROR"
  fi
  touch "$R/.debootstrap-done"
fi
# A rootfs debootstrapped before a package joined PKGS gets it now.
MISSING=()
for p in ${PKGS//,/ }; do
  chroot "$R" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q ' installed$' || MISSING+=("$p")
done
if [ ${#MISSING[@]} -gt 0 ]; then
  echo "installing into the existing rootfs: ${MISSING[*]}"
  cp -f /etc/resolv.conf "$R/etc/resolv.conf"
  mount -t proc proc "$R/proc"; trap 'umount "$R/proc"' EXIT
  chroot "$R" apt-get update -q
  chroot "$R" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${MISSING[@]}"
  chroot "$R" apt-get clean
  umount "$R/proc"; trap - EXIT
fi
install -m 0755 "$D/guest-init.sh" "$R/sbin/lab-init"
echo rxeguest > "$R/etc/hostname"
K=$(ls "$R"/boot/vmlinuz-* | sort -V | tail -1)
cp -f "$K" "$B/vmlinuz"; cp -f "$R/boot/initrd.img-${K##*/vmlinuz-}" "$B/initrd.img"
rm -f "$B/rootfs.img"
mkfs.ext4 -q -L rxeroot -d "$R" "$B/rootfs.img" 2G
echo "built $B/rootfs.img kernel ${K##*/vmlinuz-}"
