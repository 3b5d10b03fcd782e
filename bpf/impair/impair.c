//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * impair: a tc (tcx) program that drops, corrupts and duplicates frames at
 * configurable rates, for tests on kernels without netem.
 *
 * Self-contained on purpose: the uapi headers pull in <asm/types.h>, which
 * a bpfel target does not find without an architecture include path, so the
 * few definitions needed are spelled out here (all stable uapi).
 */

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* Leading fields of the uapi struct __sk_buff, in uapi order. */
struct __sk_buff {
	__u32 len;
	__u32 pkt_type;
	__u32 mark;
	__u32 queue_mapping;
	__u32 protocol;
	__u32 vlan_present;
	__u32 vlan_tci;
	__u32 vlan_proto;
	__u32 priority;
	__u32 ingress_ifindex;
	__u32 ifindex;
};

#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_F_INGRESS (1ULL << 0)

/*
 * TC_ACT_UNSPEC is TCX_NEXT: "no verdict from me", so a program attached
 * after this one (a capture, another test hook) still runs. With nothing
 * after it, it means pass, like TC_ACT_OK.
 */
#define TC_ACT_UNSPEC (-1)
#define TC_ACT_SHOT 2

#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define IPPROTO_HOPOPTS 0
#define IPPROTO_UDP 17
#define IPPROTO_ROUTING 43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_DSTOPTS 60
#define UDP_HLEN 8
#define IPV6_HLEN 40

#define PPM 1000000

/*
 * A clone made for duplication passes through this program again (egress:
 * dev_queue_xmit on the same device; ingress: the backlog of the same
 * device). It carries this mark so it is let through untouched instead of
 * being impaired again, which at 100 % duplication would loop for ever.
 */
#define CLONE_MARK 0x1a4b5eedu

/* Must match Config's wire form in impair.go. */
struct config {
	__u32 drop_ppm;
	__u32 corrupt_ppm;
	__u32 duplicate_ppm;
	__u16 udp_port; /* host order; 0 = every frame */
	__u16 pad;
};

/* Must match Counters in impair.go. */
struct counters {
	__u64 seen;
	__u64 matched;
	__u64 dropped;
	__u64 corrupted;
	__u64 duplicated;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters);
} counters SEC(".maps");

static __always_inline int chance(__u32 ppm)
{
	if (ppm == 0)
		return 0;
	if (ppm >= PPM)
		return 1;
	return bpf_get_prandom_u32() % PPM < ppm;
}

/*
 * parse finds the UDP header. It returns 1 and sets *udp_off, *dport and
 * *end (one past the last byte the UDP length covers) for a UDP datagram
 * over IPv4 or IPv6 (at most two VLAN tags in the frame; a tag offloaded
 * to skb->vlan_tci is not in the data at all), and 0 for anything else,
 * including IPv4 fragments after the first.
 */
static __always_inline int parse(struct __sk_buff *skb, __u32 *udp_off, __u16 *dport, __u32 *end)
{
	__u32 off = 12;
	__be16 proto;
	__u8 l4;

	if (bpf_skb_load_bytes(skb, off, &proto, sizeof(proto)))
		return 0;
	off += 2;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if (bpf_skb_load_bytes(skb, off + 2, &proto, sizeof(proto)))
			return 0;
		off += 4;
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		__u8 vihl;
		__be16 frag;

		if (bpf_skb_load_bytes(skb, off, &vihl, 1) || (vihl >> 4) != 4 || (vihl & 0xf) < 5)
			return 0;
		if (bpf_skb_load_bytes(skb, off + 6, &frag, sizeof(frag)) || (frag & bpf_htons(0x1fff)))
			return 0;
		if (bpf_skb_load_bytes(skb, off + 9, &l4, 1))
			return 0;
		off += (vihl & 0xf) * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, off + 6, &l4, 1))
			return 0;
		off += IPV6_HLEN;
		/* Skip a few extension headers; a non-first fragment has no UDP header. */
#pragma unroll
		for (int i = 0; i < 4; i++) {
			__u8 ext[2];

			if (l4 != IPPROTO_HOPOPTS && l4 != IPPROTO_ROUTING && l4 != IPPROTO_DSTOPTS &&
			    l4 != IPPROTO_FRAGMENT)
				break;
			if (bpf_skb_load_bytes(skb, off, ext, sizeof(ext)))
				return 0;
			if (l4 == IPPROTO_FRAGMENT) {
				__be16 fo;

				if (bpf_skb_load_bytes(skb, off + 2, &fo, sizeof(fo)) || (fo & bpf_htons(0xfff8)))
					return 0;
				off += 8;
			} else {
				off += (ext[1] + 1) * 8;
			}
			l4 = ext[0];
		}
	} else {
		return 0;
	}
	if (l4 != IPPROTO_UDP)
		return 0;

	__be16 uh[2]; /* dest port, length */
	if (bpf_skb_load_bytes(skb, off + 2, uh, sizeof(uh)))
		return 0;
	*udp_off = off;
	*dport = bpf_ntohs(uh[0]);
	*end = off + bpf_ntohs(uh[1]);
	return 1;
}

/*
 * corrupt flips one random bit in [from, to), clamped to the frame. The
 * checksums are left alone on purpose: the receiver's own integrity check
 * (RoCE's ICRC, a test's payload hash) must be what catches it.
 */
static __always_inline int corrupt(struct __sk_buff *skb, __u32 from, __u32 to)
{
	__u32 r = bpf_get_prandom_u32();
	__u8 b;

	if (to > skb->len)
		to = skb->len;
	if (from >= to)
		return 0;
	__u32 off = from + (r >> 3) % (to - from);
	if (off > 0xffff) /* keeps the verifier's range of off small */
		return 0;
	if (bpf_skb_load_bytes(skb, off, &b, 1))
		return 0;
	b ^= 1 << (r & 7);
	return bpf_skb_store_bytes(skb, off, &b, 1, 0) == 0;
}

static __always_inline int impair(struct __sk_buff *skb, __u64 redirect_flags)
{
	__u32 zero = 0;
	struct config *cfg;
	struct counters *cnt;
	__u32 udp_off = 0, end = 0;
	__u16 dport = 0;
	int udp;

	if (skb->mark == CLONE_MARK) {
		skb->mark = 0;
		return TC_ACT_UNSPEC;
	}
	cfg = bpf_map_lookup_elem(&config, &zero);
	cnt = bpf_map_lookup_elem(&counters, &zero);
	if (!cfg || !cnt)
		return TC_ACT_UNSPEC;
	cnt->seen++;

	udp = parse(skb, &udp_off, &dport, &end);
	if (cfg->udp_port && (!udp || dport != cfg->udp_port))
		return TC_ACT_UNSPEC;
	cnt->matched++;

	if (chance(cfg->drop_ppm)) {
		cnt->dropped++;
		return TC_ACT_SHOT;
	}
	/*
	 * Duplicate before corrupting so the copy is pristine: a frame that is
	 * both duplicated and corrupted arrives once good and once bad.
	 */
	if (chance(cfg->duplicate_ppm)) {
		__u32 mark = skb->mark;

		skb->mark = CLONE_MARK;
		if (bpf_clone_redirect(skb, skb->ifindex, redirect_flags) == 0)
			cnt->duplicated++;
		skb->mark = mark;
	}
	if (chance(cfg->corrupt_ppm)) {
		/*
		 * Not UDP (only with udp_port 0): anything after the Ethernet
		 * header. corrupt clamps to skb->len; reading skb->len here
		 * instead lets clang merge it with &end into one load through
		 * either pointer, which the verifier rejects.
		 */
		__u32 from = udp ? udp_off + UDP_HLEN : ETH_HLEN;
		__u32 to = udp ? end : 0xffffffff;

		if (corrupt(skb, from, to))
			cnt->corrupted++;
	}
	return TC_ACT_UNSPEC;
}

SEC("tc")
int impair_egress(struct __sk_buff *skb)
{
	return impair(skb, 0);
}

SEC("tc")
int impair_ingress(struct __sk_buff *skb)
{
	return impair(skb, BPF_F_INGRESS);
}

char __license[] SEC("license") = "Dual MIT/GPL";
