// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// xlat's XDP fast path: applies rewrite recipes that the Rust engine computed.
//
// This program is not a translator. The engine (crates/engine) decides everything: which
// sessions exist, when they expire, what each direction's packets become. For a session it
// judges simple enough (NAT44 UDP, NAT44 TCP in the established state) it hands the daemon
// one recipe per direction -- the packet's tuple as it arrives, the tuple to write, and the
// RFC 1624 checksum adjustments, which are constant per session because the rewrite is -- and
// the daemon stores them in `recipes`. Here we only:
//   1. parse Ethernet + IPv4 + TCP/UDP, and hand anything unusual to the kernel (XDP_PASS):
//      IP options, fragments, TTL <= 1 (the kernel answers with ICMP Time Exceeded, RFC 1812
//      5.3.1), TCP SYN/FIN/RST (state changes belong to the engine), no recipe;
//   2. look up the route for the rewritten packet (bpf_fib_lookup, honouring the kernel's
//      routing and neighbour tables and the egress MTU); no route, no neighbour entry yet,
//      or a packet too big for the egress link goes to the kernel untouched;
//   3. rewrite addresses and ports, decrement the TTL (RFC 1812 5.3.1: this is a router
//      hop), apply the precomputed checksum adjustments (RFC 1624 eqn. 3, so a bad checksum
//      stays bad; a zero UDP checksum stays zero, RFC 768), set the MACs and redirect to an
//      egress interface the daemon listed.
// Untouched packets reach the kernel, which routes them into xlat's TUN device as if this
// program were not there: the engine stays correct for all of them.
//
// Liveness: each recipe records when it last matched (CLOCK_MONOTONIC ns, written at most
// every 1/8 s so a busy flow does not dirty its cache line per packet); the engine reads it
// before expiring the session, so idle timeouts mean the same with and without this path.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#ifndef AF_INET
#define AF_INET 2
#endif

// Keep in step with crates/xdp/src/lib.rs (`Key`, `Value`, `Counter`).
struct flow_key {
	__u32 src;   // network byte order, as on the wire
	__u32 dst;
	__u16 sport; // network byte order
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct recipe {
	__u32 src; // network byte order
	__u32 dst;
	__u16 sport;
	__u16 dport;
	__u32 ip_delta; // one's-complement sum to add to ~checksum, TTL decrement included
	__u32 l4_delta; // the same for the TCP/UDP checksum (pseudo-header and ports)
	__u32 flags;    // reserved, zero
	__u64 last_seen;
};

enum counter {
	C_REDIRECTED,
	C_PASS_NOT_IPV4,
	C_PASS_TRUNCATED,
	C_PASS_OPTIONS,
	C_PASS_FRAGMENT,
	C_PASS_TTL,
	C_PASS_PROTO,
	C_PASS_TCP_CONTROL,
	C_PASS_NO_RECIPE,
	C_PASS_NO_ROUTE,
	C_PASS_NO_NEIGH,
	C_PASS_TOO_BIG,
	C_PASS_EGRESS,
	C_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct flow_key);
	__type(value, struct recipe);
	__uint(max_entries, 65536); // the daemon sets [dataplane].table_size at load time
	// Entries allocated as sessions come: kernel memory follows the table, not its maximum
	// (inserts happen on the engine's slow path; lookups cost the same).
	__uint(map_flags, BPF_F_NO_PREALLOC);
} recipes SEC(".maps");

// Interfaces the program may redirect to (the ones the daemon attached it to).
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
	__uint(max_entries, 64);
} egress SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, C_MAX);
} counters SEC(".maps");

static __always_inline int count(__u32 c, int verdict)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);
	if (v)
		*v += 1;
	return verdict;
}

// RFC 1624 eqn. 3: HC' = ~(~HC + delta), delta = sum of (~m + m') over the changed words.
static __always_inline __u16 csum_apply(__u16 check_be, __u32 delta)
{
	__u32 s = (__u16)~bpf_ntohs(check_be);
	s += delta;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return bpf_htons((__u16)~s);
}

#define NS_PER_STAMP (1000000000ULL / 8)

SEC("xdp")
int xlat_fast(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return count(C_PASS_TRUNCATED, XDP_PASS);
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return count(C_PASS_NOT_IPV4, XDP_PASS);
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		return count(C_PASS_TRUNCATED, XDP_PASS);
	if (ip->version != 4 || ip->ihl != 5)
		return count(C_PASS_OPTIONS, XDP_PASS);
	// MF set or a non-zero offset: fragments need the engine's reassembly-free tracking.
	if (ip->frag_off & bpf_htons(0x3fff))
		return count(C_PASS_FRAGMENT, XDP_PASS);
	if (ip->ttl <= 1)
		return count(C_PASS_TTL, XDP_PASS);

	struct flow_key key = {.src = ip->saddr, .dst = ip->daddr, .proto = ip->protocol};
	__u16 *l4check;
	int udp = 0;
	void *l4 = (void *)(ip + 1);
	if (ip->protocol == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > end)
			return count(C_PASS_TRUNCATED, XDP_PASS);
		if (th->syn || th->fin || th->rst)
			return count(C_PASS_TCP_CONTROL, XDP_PASS);
		key.sport = th->source;
		key.dport = th->dest;
		l4check = &th->check;
	} else if (ip->protocol == IPPROTO_UDP) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > end)
			return count(C_PASS_TRUNCATED, XDP_PASS);
		key.sport = uh->source;
		key.dport = uh->dest;
		l4check = &uh->check;
		udp = 1;
	} else {
		return count(C_PASS_PROTO, XDP_PASS);
	}

	struct recipe *r = bpf_map_lookup_elem(&recipes, &key);
	if (!r)
		return count(C_PASS_NO_RECIPE, XDP_PASS);

	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.sport = r->sport;
	fib.dport = r->dport;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = r->src;
	fib.ipv4_dst = r->dst;
	fib.ifindex = ctx->ingress_ifindex;
	long rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return count(C_PASS_NO_NEIGH, XDP_PASS);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return count(C_PASS_TOO_BIG, XDP_PASS);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return count(C_PASS_NO_ROUTE, XDP_PASS);
	__u32 out = fib.ifindex;
	if (!bpf_map_lookup_elem(&egress, &out))
		return count(C_PASS_EGRESS, XDP_PASS);

	__u64 now = bpf_ktime_get_ns();
	if (now - r->last_seen >= NS_PER_STAMP)
		r->last_seen = now;

	ip->saddr = r->src;
	ip->daddr = r->dst;
	ip->ttl -= 1;
	ip->check = csum_apply(ip->check, r->ip_delta);
	if (udp) {
		struct udphdr *uh = l4;
		uh->source = r->sport;
		uh->dest = r->dport;
		if (uh->check) {
			__u16 c = csum_apply(uh->check, r->l4_delta);
			uh->check = c ? c : 0xffff;
		}
	} else {
		struct tcphdr *th = l4;
		th->source = r->sport;
		th->dest = r->dport;
		*l4check = csum_apply(*l4check, r->l4_delta);
	}
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	count(C_REDIRECTED, 0);
	return bpf_redirect_map(&egress, out, 0);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
