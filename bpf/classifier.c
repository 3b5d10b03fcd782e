//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// The softfabric XDP classifier: the software analog of the HFI's Receive
// Side Matching. It parses Ethernet (one optional 802.1Q tag), IPv4 or IPv6
// and UDP, and for RoCEv2 frames (UDP destination port 4791) checks the BTH
// version and P_Key, applies the rule table, looks the destination QP up and
// redirects the frame to the AF_XDP socket of its context on the queue it
// arrived on. Everything that is not RoCEv2 goes to the kernel untouched.
//
// Only the linear part of a frame is parsed, so the same code serves the
// plain "xdp" program and the multi-buffer "xdp.frags" one.
//
// The file includes no kernel headers: the handful of UAPI definitions it
// needs are written out below, so the object does not depend on which
// linux-libc-dev (or asm/ include directory) the build machine has.

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

// From include/uapi/linux/bpf.h.
enum xdp_action {
	XDP_ABORTED = 0,
	XDP_DROP,
	XDP_PASS,
	XDP_TX,
	XDP_REDIRECT,
};

struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
};

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_XSKMAP = 17,
};

#define BPF_F_NO_PREALLOC (1U << 0)

// Sizes of the tables; the Go side mirrors them (bpf/classifier.go).
#define MAX_QUEUES 64
#define MAX_CONTEXTS 16
#define MAX_RULES 32
#define MAX_UNITS 4
#define MAX_PKEYS 1024
#define MAX_QPS 65536
#define MAX_MATCH_OFFSET 128

#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86dd
#define ETH_P_8021Q 0x8100
#define IPPROTO_UDP 17
#define ROCE_V2_PORT 4791
#define IPV6_HLEN 40
#define UDP_HLEN 8
#define BTH_LEN 12
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

// Counter slots, in the order of bpf.Counters.
enum {
	CNT_REDIRECTED,
	CNT_PASSED,
	CNT_BAD_VERSION,
	CNT_BAD_PKEY,
	CNT_UNKNOWN_QPN,
	CNT_SHORT,
	CNT_NO_SOCKET,
	CNT_RULE_DROP,
	CNT_RULE_HIT, // MAX_RULES slots from here
	CNT_QUEUE_REDIRECTED = CNT_RULE_HIT + MAX_RULES, // MAX_QUEUES slots from here
	CNT_MAX = CNT_QUEUE_REDIRECTED + MAX_QUEUES,
};

enum {
	ACTION_REDIRECT = 0,
	ACTION_DROP = 1,
	ACTION_PASS = 2,
};

struct unit {
	__u32 offset; // from the start of the frame, at most MAX_MATCH_OFFSET-4
	__u32 mask;   // host order, applied to the big-endian word at offset
	__u32 value;
};

struct rule {
	__u32 nunits; // 0: rule disabled
	__u32 action;
	__u32 context;
	__u32 pad;
	struct unit units[MAX_UNITS];
};

struct config {
	// One past the highest enabled rule, so frames skip the rule loop
	// entirely when the table is empty.
	__u32 nrules;
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_CONTEXTS * MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_QPS);
	__type(key, __u32);   // destination QPN, 24 bits
	__type(value, __u32); // context
} qp_contexts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PKEYS);
	__type(key, __u16);   // P_Key without the membership bit
	__type(value, __u16); // the P_Key as allowed, membership bit included
} pkeys SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__type(value, struct rule);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &slot);

	if (v)
		*v += 1;
}

static __always_inline int verdict(__u32 slot, int action)
{
	count(slot);
	return action;
}

// redirect sends the frame to the context's socket on the arrival queue,
// or drops it when there is none. The XSKMAP is indexed
// context*MAX_QUEUES+queue because XDP can only hand a frame to a socket
// bound to the queue it came in on.
static __always_inline int redirect(struct xdp_md *ctx, __u32 context)
{
	__u32 queue = ctx->rx_queue_index;

	if (context >= MAX_CONTEXTS || queue >= MAX_QUEUES)
		return verdict(CNT_NO_SOCKET, XDP_DROP);
	// The low bits of the flags are what the helper returns when the key
	// has no socket: XDP_ABORTED here, which a hit never returns.
	if (bpf_redirect_map(&xsks, context * MAX_QUEUES + queue, XDP_ABORTED) != XDP_REDIRECT)
		return verdict(CNT_NO_SOCKET, XDP_DROP);
	// Per receive queue too: what each worker's socket is given.
	count(CNT_QUEUE_REDIRECTED + queue);
	return verdict(CNT_REDIRECTED, XDP_REDIRECT);
}

// unit_matches reads the big-endian word at u->offset and compares it under
// the mask. A word that does not lie wholly inside the frame's linear part
// does not match.
static __always_inline int unit_matches(void *data, void *data_end, const struct unit *u)
{
	__u32 off = u->offset;
	__u8 *p;
	__u32 w;

	if (off > MAX_MATCH_OFFSET - 4)
		return 0;
	p = (__u8 *)data + off;
	if ((void *)(p + 4) > data_end)
		return 0;
	// Byte loads: the offset may be unaligned.
	w = (__u32)p[0] << 24 | (__u32)p[1] << 16 | (__u32)p[2] << 8 | (__u32)p[3];
	return (w & u->mask) == u->value;
}

// match_rules returns the first enabled rule all of whose units match, and
// its index in *idx, or NULL.
static __always_inline struct rule *match_rules(void *data, void *data_end, __u32 *idx)
{
	__u32 zero = 0, n, i;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);

	if (!cfg)
		return 0;
	n = cfg->nrules;
	for (i = 0; i < MAX_RULES; i++) {
		struct rule *r;
		__u32 j, nu, ok = 1;

		if (i >= n)
			break;
		r = bpf_map_lookup_elem(&rules, &i);
		if (!r)
			break;
		nu = r->nunits;
		if (nu == 0 || nu > MAX_UNITS)
			continue;
#pragma unroll
		for (j = 0; j < MAX_UNITS; j++) {
			if (j < nu && !unit_matches(data, data_end, &r->units[j])) {
				ok = 0;
				break;
			}
		}
		if (ok) {
			*idx = i;
			return r;
		}
	}
	return 0;
}

static __always_inline int classify(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *p = data;
	__u32 l3 = ETH_HLEN, l4;
	__u16 proto;
	__u8 *bth;

	if ((void *)(p + ETH_HLEN) > data_end)
		return verdict(CNT_PASSED, XDP_PASS);
	proto = (__u16)p[12] << 8 | p[13];
	if (proto == ETH_P_8021Q) {
		if ((void *)(p + ETH_HLEN + 4) > data_end)
			return verdict(CNT_PASSED, XDP_PASS);
		proto = (__u16)p[16] << 8 | p[17];
		l3 += 4;
	}

	if (proto == ETH_P_IP) {
		__u8 *ip = p + l3;
		__u32 ihl;

		if ((void *)(ip + 20) > data_end)
			return verdict(CNT_PASSED, XDP_PASS);
		if ((ip[0] >> 4) != 4 || ip[9] != IPPROTO_UDP)
			return verdict(CNT_PASSED, XDP_PASS);
		// Fragments go to the kernel, which reassembles them.
		if (((__u16)ip[6] << 8 | ip[7]) & (IP_MF | IP_OFFSET))
			return verdict(CNT_PASSED, XDP_PASS);
		ihl = (ip[0] & 0xf) * 4;
		if (ihl < 20)
			return verdict(CNT_PASSED, XDP_PASS);
		l4 = l3 + ihl;
	} else if (proto == ETH_P_IPV6) {
		__u8 *ip = p + l3;

		if ((void *)(ip + IPV6_HLEN) > data_end)
			return verdict(CNT_PASSED, XDP_PASS);
		// Extension headers are not parsed: RoCEv2 sends none.
		if ((ip[0] >> 4) != 6 || ip[6] != IPPROTO_UDP)
			return verdict(CNT_PASSED, XDP_PASS);
		l4 = l3 + IPV6_HLEN;
	} else {
		return verdict(CNT_PASSED, XDP_PASS);
	}

	// l4 is at most 18+60: the bound lets the verifier follow the pointer.
	if (l4 > ETH_HLEN + 4 + 60)
		return verdict(CNT_PASSED, XDP_PASS);
	{
		__u8 *udp = p + l4;

		if ((void *)(udp + UDP_HLEN) > data_end)
			return verdict(CNT_PASSED, XDP_PASS);
		if (((__u16)udp[2] << 8 | udp[3]) != ROCE_V2_PORT)
			return verdict(CNT_PASSED, XDP_PASS);
		bth = udp + UDP_HLEN;
	}

	// From here on the frame is RoCEv2 and never reaches the kernel stack
	// unless a rule says so.
	if ((void *)(bth + BTH_LEN) > data_end)
		return verdict(CNT_SHORT, XDP_DROP);
	if (bth[1] & 0x0f)
		return verdict(CNT_BAD_VERSION, XDP_DROP);
	{
		__u16 key = ((__u16)bth[2] << 8 | bth[3]) & 0x7fff;

		if (!bpf_map_lookup_elem(&pkeys, &key))
			return verdict(CNT_BAD_PKEY, XDP_DROP);
	}

	{
		__u32 i = 0;
		struct rule *r = match_rules(data, data_end, &i);

		if (r) {
			count(CNT_RULE_HIT + i);
			switch (r->action) {
			case ACTION_REDIRECT:
				return redirect(ctx, r->context);
			case ACTION_PASS:
				return verdict(CNT_PASSED, XDP_PASS);
			default:
				return verdict(CNT_RULE_DROP, XDP_DROP);
			}
		}
	}

	{
		__u32 qpn = (__u32)bth[5] << 16 | (__u32)bth[6] << 8 | bth[7];
		__u32 *context = bpf_map_lookup_elem(&qp_contexts, &qpn);

		if (!context)
			return verdict(CNT_UNKNOWN_QPN, XDP_DROP);
		return redirect(ctx, *context);
	}
}

SEC("xdp")
int classifier(struct xdp_md *ctx)
{
	return classify(ctx);
}

SEC("xdp.frags")
int classifier_frags(struct xdp_md *ctx)
{
	return classify(ctx);
}

char __license[] SEC("license") = "Dual MIT/GPL";
