#!/bin/bash
# Runs inside the guest as /share/run.sh MODE (MODE: test | serve | interop). Output in /share/out/.
# A copy of ../../shared/lab/rxe/guest-run.sh with the "interop" mode added (jobs instead of
# looping servers; the host side is job.sh).
set -u
MODE=${1:-test}; OUT=/share/out; mkdir -p $OUT
[ -f /share/env ] && . /share/env
NET=${NET:-initns}           # netns: two netns + veth (needs rxe netns support, fails on 6.1)
                             # initns: veth ends both in init_net, forced over the wire
LATN=${LATN:-10000}

gid_idx() { # $1=rxe dev, $2=ipv4 -> index of its RoCEv2 IPv4-mapped GID
  local hex; hex=$(printf '%02x%02x:%02x%02x' ${2//./ })
  for f in /sys/class/infiniband/$1/ports/1/gids/*; do
    grep -q "ffff:$hex\$" "$f" 2>/dev/null && { basename "$f"; return; }; done; echo 1; }

setup_pair() {
  ip link add vethA type veth peer name vethB
  if [ "$NET" = netns ]; then
    ip netns add nsA; ip netns add nsB
    ip link set vethA netns nsA; ip link set vethB netns nsB
    XA="ip netns exec nsA"; XB="ip netns exec nsB"
  else
    XA=""; XB=""
    sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    for i in vethA vethB; do sysctl -qw net.ipv4.conf.$i.accept_local=1 net.ipv4.conf.$i.rp_filter=0; done
  fi
  $XA ip addr add 198.18.0.1/24 dev vethA; $XA ip link set vethA up; $XA ip link set lo up
  $XB ip addr add 198.18.0.2/24 dev vethB; $XB ip link set vethB up; $XB ip link set lo up
  if [ "$NET" = initns ]; then
    # local-table lookup after per-destination tables => 198.18.0.1<->.2 really crosses the veth
    ip rule add pref 10 iif lo to 198.18.0.2 lookup 10; ip route add 198.18.0.2 dev vethA src 198.18.0.1 table 10
    ip rule add pref 11 iif lo to 198.18.0.1 lookup 11; ip route add 198.18.0.1 dev vethB src 198.18.0.2 table 11
    ip rule add pref 100 lookup local; ip rule del pref 0 lookup local
    # static neighbours (ARP with a local sender IP is filtered)
    ip neigh replace 198.18.0.2 lladdr $(cat /sys/class/net/vethB/address) dev vethA
    ip neigh replace 198.18.0.1 lladdr $(cat /sys/class/net/vethA/address) dev vethB
  fi
  $XA rdma link add rxe0 type rxe netdev vethA
  $XB rdma link add rxe1 type rxe netdev vethB
  sleep 1
  GA=$(gid_idx rxe0 198.18.0.1); GB=$(gid_idx rxe1 198.18.0.2)
}

pair() { # $1=name, rest: common args. server on rxe1/nsB, client on rxe0/nsA -> 198.18.0.2
  local name=$1; shift; local bin=$1; shift
  echo "### $name" ; echo "server: $XB $bin -d rxe1 -x $GB $*"; echo "client: $XA $bin -d rxe0 -x $GA $* 198.18.0.2"
  $XB timeout 120 $bin -d rxe1 -x $GB "$@" > $OUT/$name.server 2>&1 & local sp=$!
  sleep 1.5
  $XA timeout 120 $bin -d rxe0 -x $GA "$@" 198.18.0.2 > $OUT/$name.client 2>&1; echo "client rc=$?" >> $OUT/$name.client
  wait $sp; echo "server rc=$?" >> $OUT/$name.server
  cat $OUT/$name.client; $XA ip -s link show vethA | awk "NR==4||NR==6{print \"vethA rx/tx bytes,pkts:\", \$1, \$2}"
}

serve() { # guest NIC eth0 (virtio-net on host tap in netns rxehost) + rxe0, servers in loops
  local ip=${GUEST_IP:-198.18.1.2}
  ip addr add $ip/24 dev eth0; ip link set eth0 up; sleep 1
  rdma link add rxe0 type rxe netdev eth0; sleep 1
  local g; g=$(gid_idx rxe0 $ip)
  { rdma link show; ip -br addr; ibv_devinfo -v -d rxe0 | grep -E 'hca_id|state|mtu|GID'; echo "GID index $g"; } | tee $OUT/serve-setup.txt
  ( while :; do ibv_rc_pingpong -d rxe0 -g $g -p 18515; sleep 0.2; done ) > $OUT/serve-rc_pingpong.log 2>&1 &
  ( while :; do ib_write_bw -F -d rxe0 -x $g -p 18516 ${WRITE_BW_ARGS:-}; sleep 0.2; done ) > $OUT/serve-write_bw.log 2>&1 &
  ( while :; do ib_send_bw -F -d rxe0 -x $g -p 18517 ${SEND_BW_ARGS:-}; sleep 0.2; done ) > $OUT/serve-send_bw.log 2>&1 &
  echo "READY rxe0 on eth0 $ip gid_index=$g: rc_pingpong:18515 ib_write_bw:18516 ib_send_bw:18517" | tee $OUT/READY
  while :; do sleep 3600; done
}

interop() { # like serve, but runs jobs the host drops into /share/jobs instead of looping servers.
  # Protocol (host side: job.sh): the host writes NAME.job (a bash script, atomically by rename;
  # an optional line "# timeout=SECONDS", default 60); this loop claims it (renames it NAME.run),
  # runs it under timeout with JOB=/share/jobs/NAME, G (GID index), DEV=rxe0 and IP in the
  # environment, output in NAME.out, then writes the exit status to NAME.rc (124: timed out).
  # Jobs run concurrently. "listening PORT" in a job writes NAME.ready once a TCP listener is up.
  local ip=${GUEST_IP:-198.18.1.2} J=/share/jobs
  ip addr add $ip/24 dev eth0; ip link set eth0 up; sleep 1
  rdma link add rxe0 type rxe netdev eth0; sleep 1
  local g; g=$(gid_idx rxe0 $ip)
  modprobe sch_netem 2>&1 || true
  { rdma link show; ip -br addr; ibv_devinfo -v -d rxe0 | grep -E 'hca_id|state|mtu|GID'; echo "GID index $g"
    lsmod | grep -E '^sch_netem' || echo "no sch_netem"; } | tee $OUT/interop-setup.txt
  mkdir -p $J
  export G=$g DEV=rxe0 IP=$ip
  listening() { local i; for i in $(seq 1 600); do
      [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ] && { : > "$JOB.ready"; return 0; }; sleep 0.1; done
    echo "listening: nothing on port $1 after 60 s"; return 1; }
  export -f listening
  echo "READY rxe0 on eth0 $ip gid_index=$g: jobs in /share/jobs" | tee $OUT/READY
  local f n t
  while :; do
    for f in $J/*.job; do
      [ -e "$f" ] || continue
      n=${f%.job}; mv "$f" "$n.run" 2>/dev/null || continue
      t=$(sed -n 's/^# timeout=\([0-9]*\).*/\1/p' "$n.run" | head -1)
      echo "$(date +%T) job ${n##*/} (timeout ${t:-60})" >> $OUT/jobs.log
      ( export JOB=$n; timeout -k 5 ${t:-60} bash "$n.run" > "$n.out" 2>&1; echo $? > "$n.rc.tmp"; mv "$n.rc.tmp" "$n.rc" ) < /dev/null &
    done
    sleep 0.2
  done
}

{ uname -a; rdma -V; ib_write_bw --version 2>&1 | head -2; } > $OUT/versions.txt
[ "$MODE" = serve ] && serve
[ "$MODE" = interop ] && interop
setup_pair
{ rdma link show; $XA ip -br addr; $XB ip -br addr; $XA ip rule; $XA ip route get 198.18.0.2 from 198.18.0.1; $XA ibv_devinfo -v -d rxe0 | grep -E 'hca_id|state|mtu|GID'; echo "GA=$GA GB=$GB NET=$NET"; } > $OUT/setup.txt 2>&1
cat $OUT/setup.txt
$XA ping -c 3 -W 1 198.18.0.2 > $OUT/ping.txt 2>&1; cat $OUT/ping.txt

if [ "$MODE" = test ]; then
  # ibv_rc_pingpong uses -g for the GID index
  echo "### rc_pingpong"
  $XB timeout 60 ibv_rc_pingpong -d rxe1 -g $GB > $OUT/rc_pingpong.server 2>&1 & sp=$!; sleep 1
  $XA timeout 60 ibv_rc_pingpong -d rxe0 -g $GA 198.18.0.2 > $OUT/rc_pingpong.client 2>&1; echo "client rc=$?" >> $OUT/rc_pingpong.client
  wait $sp; echo "server rc=$?" >> $OUT/rc_pingpong.server; cat $OUT/rc_pingpong.client $OUT/rc_pingpong.server
  $XA ip -s link show vethA | tee $OUT/vethA_counters.txt
  [ -n "${ONLY_PINGPONG:-}" ] && exit 0
  # iteration mode (-n): under TCG the -D window often catches ~0 completions for big messages
  for sn in 64:100000 4096:20000 65536:2000 1048576:100; do s=${sn%:*}; n=${sn#*:}
    if [ -n "${DUR:-}" ]; then M="-D $DUR"; else M="-n $n"; fi
    pair write_bw_$s ib_write_bw -F -c RC -s $s $M
    pair send_bw_$s ib_send_bw -F -c RC -s $s $M
  done
  for s in 64 4096; do
    pair write_lat_$s ib_write_lat -F -c RC -s $s -n $LATN
    pair send_lat_$s ib_send_lat -F -c RC -s $s -n $LATN
  done
  dmesg | grep -iE 'rxe|rdma' | tail -20 > $OUT/dmesg.txt
fi
