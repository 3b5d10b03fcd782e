#!/bin/bash
# Stop the guest started by up.sh (by its recorded PID) and remove tap rxetap0 + netns rxehost.
D=$(cd "$(dirname "$0")" && pwd); L=${LAB_BUILD:-/tmp/rxelab}; PIDF=$L/interop.pid
if [ -f "$PIDF" ]; then P=$(cat "$PIDF")
  if [ "$(cat /proc/$P/comm 2>/dev/null)" = qemu-system-x86 ]; then kill "$P"
    for i in $(seq 1 20); do kill -0 "$P" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$P" 2>/dev/null && kill -9 "$P"; fi
  rm -f "$PIDF"; fi
ip -n rxehost link del rxetap0 2>/dev/null || true
ip netns del rxehost 2>/dev/null || true
echo down
