// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// xlat's XDP fast path: applies rewrite recipes that the Rust engine computed.
//
// This program is not a translator. The engine (crates/engine) decides everything: which
// sessions exist, when they expire, what each direction's packets become. For a session it
// judges simple enough (NAT44 UDP, NAT44 TCP in the established state) it hands the daemon
// one recipe per direction -- the packet's tuple as it arrives, the tuple to write, and the
// RFC 1624 checksum adjustments, which are constant per session because the rewrite is -- and
// the daemon stores them in `recipes` (NAT44), `recipes64` and `recipes46` (NAT64: IPv6 ->
// IPv4 and back, RFC 7915 5.1 and 4.1, the header swapped with bpf_xdp_adjust_head; the
// transport checksum delta is constant there too, RFC 7915 4.5/5.5), and for SIIT `siit64s` and
// `siit46s` (RFC 7915 stateless: keyed by the packet's addresses and protocol, ports kept,
// since what SIIT makes of a TCP/UDP packet depends on nothing else; the engine's mapping --
// EAM, RFC 7757 3.2, or the pref64, RFC 6052 2.2 -- is in the recipe). 6to4 (RFC 3056) needs no
// recipes at all: the endpoint's configuration is the whole of its rewrite, so the daemon writes
// it once into `tun6to4` and the program encapsulates and decapsulates with the engine's own
// checks (RFC 3964 5.3.1; see encap6to4 and decap6to4 below); an ISATAP router (RFC 5214) the
// same way from `isatap` (7.1 and 7.3's checks; encap_isatap and decap_isatap). Here we only:
//   1. parse Ethernet + IPv4 + TCP/UDP, and hand anything unusual to the kernel (XDP_PASS):
//      IP options, fragments, TTL <= 1 (the kernel answers with ICMP Time Exceeded, RFC 1812
//      5.3.1), TCP SYN/FIN/RST (state changes belong to the engine; SIIT has none, so its
//      recipes carry them), no recipe;
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
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
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

// NAT64 outbound: the IPv6 tuple of a packet (no extension headers).
struct flow_key6 {
	__u8 src[16];
	__u8 dst[16];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

// NAT64 outbound: the IPv4 header to write (RFC 7915 5.1). Up to 1260 bytes: DF clear and
// identification id_base + the counter ipv4_ids[id_slot] (RFC 7739 5.3; the engine's
// ipv4_id module computes both from the session's addresses); above: DF set, identification 0.
struct recipe64 {
	__u32 src;
	__u32 dst;
	__u16 sport;
	__u16 dport;
	__u32 l4_delta;
	__u32 flags;
	__u16 id_base;
	__u16 id_slot;
	__u64 last_seen;
};

// NAT64 inbound: the IPv6 header to write (RFC 7915 4.1).
struct recipe46 {
	__u8 src[16];
	__u8 dst[16];
	__u16 sport;
	__u16 dport;
	__u32 l4_delta;
	__u16 mtu_limit; // lowest IPv6 MTU: bigger packets without DF are the engine's to fragment
	__u16 pad;
	__u32 flags;
	__u64 last_seen;
};

// SIIT: a packet's addresses and protocol (IPv4, and IPv6 without extension headers).
struct pair_key4 {
	__u32 src;
	__u32 dst;
	__u8 proto;
	__u8 pad[3];
};

struct pair_key6 {
	__u8 src[16];
	__u8 dst[16];
	__u8 proto;
	__u8 pad[3];
};

// SIIT IPv6 -> IPv4 (RFC 7915 5.1): the IPv4 addresses, the header as struct recipe64 says
// (ports kept); packets longer than mtu_limit as IPv4 go to the engine (Packet Too Big).
struct siit64 {
	__u32 src;
	__u32 dst;
	__u32 l4_delta;
	__u16 id_base;
	__u16 id_slot;
	__u16 mtu_limit;
	__u16 pad;
	__u32 flags;
	__u64 last_seen;
};

// SIIT IPv4 -> IPv6 (RFC 7915 4.1): the IPv6 addresses; packets longer as IPv6 than
// mtu_limit without DF (to be fragmented) or mtu_df with DF (Fragmentation Needed) go to the
// engine.
struct siit46 {
	__u8 src[16];
	__u8 dst[16];
	__u32 l4_delta;
	__u16 mtu_limit;
	__u16 mtu_df;
	__u64 last_seen;
};

enum counter {
	C_REDIRECTED,
	C_TRANSLATED_6TO4,
	C_TRANSLATED_4TO6,
	C_PASS_NOT_IP,
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
	C_PASS_UDP_ZERO,
	C_PASS_BAD_CHECKSUM,
	C_PASS_NO_ROOM,
	C_DROP_POLICED,
	C_TO_AFXDP,
	C_SIIT_6TO4,
	C_SIIT_4TO6,
	C_6TO4_ENCAP,
	C_6TO4_DECAP,
	C_PASS_6TO4,
	C_ISATAP_ENCAP,
	C_ISATAP_DECAP,
	C_PASS_ISATAP,
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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct flow_key6);
	__type(value, struct recipe64);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} recipes64 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct flow_key);
	__type(value, struct recipe46);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} recipes46 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct pair_key6);
	__type(value, struct siit64);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} siit64s SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct pair_key4);
	__type(value, struct siit46);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} siit46s SEC(".maps");

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

// RFC 7739 5.3's counters for the identifications of NAT64's IPv4 packets (recipe64.id_slot;
// as many as the engine's ipv4_id::SLOTS). Shared by all CPUs, incremented atomically.
#define ID_SLOTS 4096
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, ID_SLOTS);
} ipv4_ids SEC(".maps");

static __always_inline int count(__u32 c, int verdict)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);
	if (v)
		*v += 1;
	return verdict;
}

// The AF_XDP slow path ([dataplane] slow_path = "af_xdp", issue 25). What the kernel would
// route into xlat's TUN device -- the engine's packets: NAT44 inside sources, pool and static
// outside addresses, pref64, SIIT's and the tunnels' prefixes, exactly what the daemon's routes
// and rules send there -- goes instead to the AF_XDP socket of the receiving interface and
// queue (Documentation/networking/af_xdp.rst: an XSKMAP entry per queue; a frame is delivered
// only to the socket bound to the queue it arrived on). "Would route into the TUN device" is
// asked of the kernel itself: bpf_fib_lookup of the packet as it arrived, with the kernel's
// policy rules, and BPF_FIB_LOOKUP_SKIP_NEIGH (the TUN device has no neighbours). Anything
// else -- ARP, ND, traffic for the gateway itself, transit the gateway only routes -- stays
// XDP_PASS. No socket for the queue: XDP_PASS (the redirect's fallback action), and the
// kernel's TUN path carries it.
struct slow_cfg {
	__u32 tun_ifindex; // 0: the AF_XDP slow path is off
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct slow_cfg);
	__uint(max_entries, 1);
} slowcfg SEC(".maps");

// The daemon's AF_XDP sockets: interface i's queue q at xsk_base[ifindex] + q.
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1024);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 64);
} xsk_base SEC(".maps");

#ifndef BPF_FIB_LOOKUP_SKIP_NEIGH
#define BPF_FIB_LOOKUP_SKIP_NEIGH (1U << 2)
#endif

// Redirects a packet for the engine to the AF_XDP socket of its queue when the kernel would
// route it into the TUN device; otherwise passes it with counter `c`. `fib` holds the
// packet's family, addresses, protocol and length as it arrived.
static __always_inline int engine_or_pass(struct xdp_md *ctx, struct bpf_fib_lookup *fib,
					  __u32 c)
{
	__u32 zero = 0;
	struct slow_cfg *cfg = bpf_map_lookup_elem(&slowcfg, &zero);
	if (!cfg || !cfg->tun_ifindex)
		return count(c, XDP_PASS);
	__u32 in = ctx->ingress_ifindex;
	__u32 *base = bpf_map_lookup_elem(&xsk_base, &in);
	if (!base)
		return count(c, XDP_PASS);
	fib->ifindex = in;
	long rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS || fib->ifindex != cfg->tun_ifindex)
		return count(c, XDP_PASS);
	count(C_TO_AFXDP, 0);
	return bpf_redirect_map(&xsks, *base + ctx->rx_queue_index, XDP_PASS);
}

static __always_inline int engine4(struct xdp_md *ctx, struct iphdr *ip, __u32 c)
{
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	return engine_or_pass(ctx, &fib, c);
}

static __always_inline int engine6(struct xdp_md *ctx, struct ipv6hdr *ip6, __u32 c)
{
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET6;
	fib.l4_protocol = ip6->nexthdr;
	fib.tot_len = bpf_ntohs(ip6->payload_len) + 40;
	__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, 16);
	return engine_or_pass(ctx, &fib, c);
}

// The slow-path policer ([dataplane] slow_path_pps): TCP/UDP packets with no recipe (new
// flows) and TCP SYN/FIN/RST go to the kernel and the engine, which costs this CPU microseconds
// each before the engine even sees them; a flood of new flows would take the CPU from the
// established flows. A token bucket per CPU admits `rate` of them a second (bursts of
// `burst`) and drops the rest here, counted (a router's control-plane policing). rate 0: off.
struct policer_cfg {
	__u64 rate;  // packets per second
	__u64 burst; // packets
};

struct bucket {
	__u64 last;   // CLOCK_MONOTONIC ns of the last refill
	__u64 tokens; // packets x 1e9
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct policer_cfg);
	__uint(max_entries, 1);
} policer SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct bucket);
	__uint(max_entries, 1);
} buckets SEC(".maps");

#define NS_PER_S 1000000000ULL

static __always_inline int admit(void)
{
	__u32 zero = 0;
	struct policer_cfg *p = bpf_map_lookup_elem(&policer, &zero);
	if (!p || p->rate == 0)
		return 1;
	struct bucket *b = bpf_map_lookup_elem(&buckets, &zero);
	if (!b)
		return 1;
	__u64 now = bpf_ktime_get_ns();
	__u64 el = now - b->last;
	if (el > NS_PER_S)
		el = NS_PER_S; // the loader caps rate at 1e8, so el x rate < 2^64
	b->last = now;
	__u64 t = b->tokens + el * p->rate;
	__u64 cap = p->burst * NS_PER_S;
	if (t > cap)
		t = cap;
	if (t < NS_PER_S) {
		b->tokens = t;
		return 0;
	}
	b->tokens = t - NS_PER_S;
	return 1;
}

// A packet for the engine: passed to the kernel (or the AF_XDP slow path) if the policer
// admits it.
static __always_inline int slow_path4(struct xdp_md *ctx, struct iphdr *ip, __u32 c)
{
	if (!admit())
		return count(C_DROP_POLICED, XDP_DROP);
	return engine4(ctx, ip, c);
}

static __always_inline int slow_path6(struct xdp_md *ctx, struct ipv6hdr *ip6, __u32 c)
{
	if (!admit())
		return count(C_DROP_POLICED, XDP_DROP);
	return engine6(ctx, ip6, c);
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

static __always_inline void stamp(__u64 *last_seen)
{
	__u64 now = bpf_ktime_get_ns();
	if (now - *last_seen >= NS_PER_STAMP)
		*last_seen = now;
}

// The transport checksum after the delta: UDP keeps a zero (no checksum, IPv4 only) and sends
// a computed zero as all ones (RFC 768, RFC 8200 8.1).
static __always_inline __u16 l4_csum(int udp, __u16 check_be, __u32 delta)
{
	if (udp && !check_be)
		return 0;
	__u16 c = csum_apply(check_be, delta);
	return (udp && !c) ? 0xffff : c;
}

// The one's-complement sum of a 20-byte IPv4 header, folded (0xffff when its checksum is right).
static __always_inline __u32 ip4_sum(struct iphdr *ip)
{
	__u32 sum = 0;
	__u16 *w = (__u16 *)ip;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	return (sum & 0xffff) + (sum >> 16);
}

// Writes the recipe's ports and adjusts the TCP/UDP checksum; the caller checked the header's
// bounds.
static __always_inline void rewrite_l4(void *l4, int udp, __u16 sport, __u16 dport, __u32 delta)
{
	if (udp) {
		struct udphdr *uh = l4;
		uh->source = sport;
		uh->dest = dport;
		uh->check = l4_csum(1, uh->check, delta);
	} else {
		struct tcphdr *th = l4;
		th->source = sport;
		th->dest = dport;
		th->check = l4_csum(0, th->check, delta);
	}
}

// Routes the rewritten packet; >= 0 is the egress ifindex, < 0 a counter to pass with.
static __always_inline long route(struct xdp_md *ctx, struct bpf_fib_lookup *fib)
{
	long rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return -C_PASS_NO_NEIGH;
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return -C_PASS_TOO_BIG;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return -C_PASS_NO_ROUTE;
	__u32 out = fib->ifindex;
	if (!bpf_map_lookup_elem(&egress, &out))
		return -C_PASS_EGRESS;
	return out;
}

// IPv4 -> IPv6 (RFC 7915 4.1): swaps the 20-byte header for a 40-byte one from (src6, dst6),
// writes the ports (sport, dport) and adds l4_delta to the transport checksum; the caller
// checked that the packet may be translated here. c: the counter of a translated packet.
static __always_inline int to6(struct xdp_md *ctx, struct iphdr *ip, const __u8 *src6,
			       const __u8 *dst6, __u16 sport, __u16 dport, __u32 l4_delta,
			       __u64 *last_seen, int udp, __u32 c)
{
	__u16 payload = bpf_ntohs(ip->tot_len) - sizeof(struct iphdr);
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET6;
	fib.l4_protocol = ip->protocol;
	fib.sport = sport;
	fib.dport = dport;
	fib.tot_len = payload + 40;
	__builtin_memcpy(fib.ipv6_src, src6, 16);
	__builtin_memcpy(fib.ipv6_dst, dst6, 16);
	fib.ifindex = ctx->ingress_ifindex;
	long out = route(ctx, &fib);
	if (out < 0)
		return count(-out, XDP_PASS);

	__u8 tos = ip->tos, ttl = ip->ttl, proto = ip->protocol;
	stamp(last_seen);
	if (bpf_xdp_adjust_head(ctx, -20))
		return count(C_PASS_NO_ROOM, XDP_PASS);
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	void *l4 = (void *)(ip6 + 1);
	if (l4 + (udp ? sizeof(struct udphdr) : sizeof(struct tcphdr)) > end)
		return count(C_PASS_NO_ROOM, XDP_DROP); // cannot happen: the packet only grew
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IPV6);
	*(__u32 *)ip6 = bpf_htonl((6U << 28) | ((__u32)tos << 20)); // flow label 0
	ip6->payload_len = bpf_htons(payload);
	ip6->nexthdr = proto;
	ip6->hop_limit = ttl - 1;
	__builtin_memcpy(&ip6->saddr, src6, 16);
	__builtin_memcpy(&ip6->daddr, dst6, 16);
	rewrite_l4(l4, udp, sport, dport, l4_delta);
	count(c, 0);
	count(C_REDIRECTED, 0);
	return bpf_redirect_map(&egress, out, 0);
}

// NAT64 inbound (RFC 7915 4.1) by a session's recipe.
static __always_inline int xlat46(struct xdp_md *ctx, struct iphdr *ip, struct recipe46 *r,
				  int udp, __u16 l4check)
{
	__u16 tot = bpf_ntohs(ip->tot_len);
	if (tot < sizeof(struct iphdr))
		return count(C_PASS_TRUNCATED, XDP_PASS);
	__u16 payload = tot - sizeof(struct iphdr);
	// RFC 7915 4.1: without DF, what exceeds the lowest IPv6 MTU is fragmented (engine).
	if (!(ip->frag_off & bpf_htons(0x4000)) && payload + 40 > r->mtu_limit)
		return count(C_PASS_TOO_BIG, XDP_PASS);
	// RFC 7915 4.5: a UDP datagram without checksum gets one computed (engine).
	if (udp && !l4check)
		return count(C_PASS_UDP_ZERO, XDP_PASS);
	// The IPv4 header disappears: verify its checksum instead of carrying it.
	if (ip4_sum(ip) != 0xffff)
		return count(C_PASS_BAD_CHECKSUM, XDP_PASS);
	return to6(ctx, ip, r->src, r->dst, r->sport, r->dport, r->l4_delta, &r->last_seen, udp,
		   C_TRANSLATED_4TO6);
}

// SIIT IPv4 -> IPv6 (RFC 7915 4.1, 4.5) by a pair's recipe, ports kept (sport, dport as the
// packet has them). Follows offload::apply_siit46, the engine's model of it.
static __always_inline int siit46(struct xdp_md *ctx, struct iphdr *ip, struct siit46 *r,
				  int udp, __u16 sport, __u16 dport, __u16 l4check)
{
	__u16 tot = bpf_ntohs(ip->tot_len);
	void *end = (void *)(long)ctx->data_end;
	if (tot < sizeof(struct iphdr) + (udp ? sizeof(struct udphdr) : sizeof(struct tcphdr)) ||
	    (void *)ip + tot > end)
		return count(C_PASS_TRUNCATED, XDP_PASS);
	__u16 payload = tot - sizeof(struct iphdr);
	// RFC 7915 4.1: without DF, longer than the lowest IPv6 MTU: fragmented; with DF, longer
	// than the next hop's: Fragmentation Needed -- the engine's either way.
	__u16 limit = (ip->frag_off & bpf_htons(0x4000)) ? r->mtu_df : r->mtu_limit;
	if (payload + 40 > limit)
		return count(C_PASS_TOO_BIG, XDP_PASS);
	// RFC 7915 4.5: a UDP datagram without checksum gets one computed (engine).
	if (udp && !l4check)
		return count(C_PASS_UDP_ZERO, XDP_PASS);
	// RFC 1812 5.2.2: the IPv4 header disappears: verify its checksum, do not carry it.
	if (ip4_sum(ip) != 0xffff)
		return count(C_PASS_BAD_CHECKSUM, XDP_PASS);
	return to6(ctx, ip, r->src, r->dst, sport, dport, r->l4_delta, &r->last_seen, udp,
		   C_SIIT_4TO6);
}

// 6to4 (RFC 3056) in XDP (issue 25). The engine's endpoint (crates/engine/src/tunnel) is
// stateless: what it does to a packet depends on the packet and the configuration alone, so
// the daemon writes that configuration here once (`tun6to4`, keep in step with `SixToFourCfg`
// in crates/xdp/src/lib.rs, filled from xlat_engine::tunnel::sixtofour::XdpSixToFour) and the
// program applies the engine's checks itself -- every one of them; a packet that fails any,
// or that needs anything but the plain rewrite (fragments, outer CE marks, a hop limit or TTL
// running out, a packet larger than the tunnel MTU, trailing bytes), goes to the kernel and
// the engine as before, which answer or drop it with its reason counted. Only packets the
// kernel itself would route into the TUN device are touched: asked of bpf_fib_lookup (the
// same question the AF_XDP slow path asks), except protocol 41 to the endpoint address when
// the daemon's own rule routes all of it there (T_OWN_ROUTE, outer_to_tun).
#define T_RELAY_ROUTER 1 // RFC 3056 5: this endpoint is a relay router
#define T_PMTUD 2        // RFC 4213 3.2.2: DF on packets above 1280 bytes
#define T_ENCAP 4        // IPv6 -> IPv4 here (off with [nat64] or [siit]: IPv6 is theirs first)
#define T_ENCAP_RELAY 8  // native destinations to the relay here (off with ISATAP beside)
#define T_OWN_ROUTE 16   // the daemon's own rule routes protocol 41 to v4 into the TUN (outer_to_tun)
#define T_REFUSED 8

struct tun6to4_cfg {
	__u32 v4;          // the endpoint's IPv4 address (network byte order); 0: off
	__u32 relay;       // the relay router's (RFC 3056 5.3), 0: none
	__u32 tun_ifindex; // the TUN device the kernel routes the tunnel's packets into
	__u16 mtu;         // the tunnel MTU (RFC 4213 3.2): the largest IPv6 packet encapsulated
	__u8 ttl;          // the outer TTL (RFC 4213 3.3)
	__u8 flags;        // T_*
	__u32 ident;       // the outer identification's counter (RFC 4213 3.5), atomic
	__u32 refused_net[T_REFUSED]; // RFC 3964 5.3.1's refused IPv4 ranges (sixtofour::REFUSED)
	__u32 refused_mask[T_REFUSED]; // 0: unused
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tun6to4_cfg);
	__uint(max_entries, 1);
} tun6to4 SEC(".maps");

// RFC 3964 5.3.1: an IPv4 address 6to4 may use (sixtofour::valid_v4).
static __always_inline int valid_v4(struct tun6to4_cfg *t, __u32 a)
{
#pragma unroll
	for (int i = 0; i < T_REFUSED; i++) {
		__u32 m = t->refused_mask[i];
		if (m && (a & m) == t->refused_net[i])
			return 0;
	}
	return 1;
}

// RFC 3964 5.3.1 / RFC 4291 2.5.5: inner addresses never tunneled (sixtofour::never_tunneled):
// unspecified and loopback (inside ::/96), IPv4-compatible ::/96 and -mapped ::ffff:0:0/96,
// multicast ff00::/8, link-local fe80::/10.
static __always_inline int never_tunneled(const struct in6_addr *a)
{
	const __u8 *b = a->s6_addr;
	if (b[0] == 0xff || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80))
		return 1;
	__u32 w0 = a->s6_addr32[0], w1 = a->s6_addr32[1], w2 = a->s6_addr32[2];
	return !w0 && !w1 && (!w2 || w2 == bpf_htonl(0xffff));
}

// RFC 3056 2: 2002::/16, the IPv4 address in bits 16..48 (network byte order in *v4).
static __always_inline int embedded(const struct in6_addr *a, __u32 *v4)
{
	const __u8 *b = a->s6_addr;
	if (b[0] != 0x20 || b[1] != 0x02)
		return 0;
	__builtin_memcpy(v4, b + 2, 4);
	return 1;
}

// Would the kernel route this packet into the TUN device (and so to the engine)? `fib` holds
// it as it arrived.
static __always_inline int to_tun(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __u32 tun)
{
	fib->ifindex = ctx->ingress_ifindex;
	long rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
	return rc == BPF_FIB_LKUP_RET_SUCCESS && fib->ifindex == tun;
}

// The outer checks every 6in4 decapsulation here shares (RFC 4213 3.6), on protocol 41 to an
// endpoint address whose outer header the caller checked to be 20 bytes, unfragmented, TTL > 1.
// Returns 0 to go on, else the counter of the pass (+1, so that C_REDIRECTED is not 0).
static __always_inline __u32 outer_ok(struct iphdr *ip, struct ipv6hdr *ip6, void *end,
				      __u32 c_pass)
{
	__u16 tot = bpf_ntohs(ip->tot_len);
	if ((void *)(ip6 + 1) > end || tot < sizeof(*ip) + sizeof(*ip6))
		return C_PASS_TRUNCATED + 1;
	// The packet exactly: link padding (RFC 1812 5.2.2) is the engine's to cut.
	if ((void *)ip + tot != end || ip6->version != 6 ||
	    bpf_ntohs(ip6->payload_len) + sizeof(*ip6) != tot - sizeof(*ip))
		return c_pass + 1;
	// RFC 1812 5.2.2: the outer header disappears: verify its checksum, do not carry it.
	if (ip4_sum(ip) != 0xffff)
		return C_PASS_BAD_CHECKSUM + 1;
	// RFC 6040 4.2: a CE mark outside is merged into (or refused with) the inner header: the
	// engine's.
	if ((ip->tos & 3) == 3)
		return c_pass + 1;
	// RFC 4213 3.3: the decapsulated packet is forwarded as IPv6: one hop (RFC 8200 3).
	if (ip6->hop_limit <= 1)
		return C_PASS_TTL + 1;
	return 0;
}

// Would the kernel route a decapsulation's outer packet into the TUN device (so to the engine)?
// With T_OWN_ROUTE in `flags` the daemon's own policy rule says so for every protocol-41 packet
// to the endpoint address (tun.auto_routes: `to V4/32 ipproto 41 lookup T` ahead of `lookup
// local`, crates/daemon/src/tunnel_routes.rs), so nothing is asked per packet; the packet need
// only fit the tunnel MTU plus the outer header, which the TUN device's MTU is at least
// (crates/daemon/src/config.rs): a larger one is left to the kernel and the engine.
// Without it -- the operator routes -- bpf_fib_lookup is asked, as the AF_XDP slow path asks.
static __always_inline int outer_to_tun(struct xdp_md *ctx, struct iphdr *ip, __u32 tun,
					__u16 mtu, __u8 flags)
{
	__u16 tot = bpf_ntohs(ip->tot_len);
	if (flags & T_OWN_ROUTE)
		return tot <= (__u32)mtu + sizeof(*ip);
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = tot;
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	return to_tun(ctx, &fib, tun);
}

// The end of a decapsulation the checks accepted, of an outer packet routed into the TUN device
// (outer_to_tun): the inner packet is routed, its outer header taken off and it is redirected;
// c: the counter of a decapsulated packet.
static __always_inline int strip_outer(struct xdp_md *ctx, struct iphdr *ip, struct ipv6hdr *ip6,
				       __u32 c)
{
	__u16 tot = bpf_ntohs(ip->tot_len);
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET6;
	fib.l4_protocol = ip6->nexthdr;
	fib.tot_len = tot - sizeof(*ip);
	__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, 16);
	fib.ifindex = ctx->ingress_ifindex;
	long out = route(ctx, &fib);
	if (out < 0)
		return count(-out, XDP_PASS);
	if (bpf_xdp_adjust_head(ctx, (int)sizeof(*ip)))
		return count(C_PASS_NO_ROOM, XDP_PASS);
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > end)
		return count(C_PASS_NO_ROOM, XDP_DROP); // cannot happen: checked before shrinking
	// RFC 4213 3.3: the decapsulated packet is forwarded as IPv6, one hop (RFC 8200 3).
	ip6->hop_limit -= 1;
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IPV6);
	count(c, 0);
	count(C_REDIRECTED, 0);
	return bpf_redirect_map(&egress, out, 0);
}

// The outer header of an encapsulation (RFC 4213 3.5) from src4 to dst4.
struct outer4 {
	__u32 src4;
	__u32 dst4;
	__u32 tun;    // the TUN device's ifindex
	__u32 *ident; // the identification's counter (RFC 4213 3.5), atomic
	__u8 ttl;     // RFC 4213 3.3
	__u8 pmtud;   // RFC 4213 3.2.2
};

// The end of an encapsulation the checks accepted (the packet is exactly `len` bytes, no more
// than the tunnel MTU): when the kernel would route the IPv6 packet into the TUN device (so to
// the engine), the outer packet is routed, the outer header put in front and it is redirected;
// c: the counter of an encapsulated packet.
static __always_inline int push_outer(struct xdp_md *ctx, struct ipv6hdr *ip6, __u16 len,
				      struct outer4 *o, __u32 c, __u32 c_pass)
{
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET6;
	fib.l4_protocol = ip6->nexthdr;
	fib.tot_len = len;
	__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, 16);
	if (!to_tun(ctx, &fib, o->tun))
		return count(c_pass, XDP_PASS);
	__builtin_memset(&fib, 0, sizeof(fib));
	fib.family = AF_INET;
	fib.l4_protocol = 41;
	fib.tot_len = len + sizeof(struct iphdr);
	fib.ipv4_src = o->src4;
	fib.ipv4_dst = o->dst4;
	fib.ifindex = ctx->ingress_ifindex;
	long out = route(ctx, &fib);
	if (out < 0)
		return count(-out, XDP_PASS);

	// RFC 6040 4.1 (normal mode): the outer TOS is the inner traffic class.
	__u8 tc = (bpf_ntohl(*(__u32 *)ip6) >> 20) & 0xff;
	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct iphdr)))
		return count(C_PASS_NO_ROOM, XDP_PASS);
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	ip6 = (void *)(ip + 1);
	if ((void *)(ip6 + 1) > end)
		return count(C_PASS_NO_ROOM, XDP_DROP); // cannot happen: the packet only grew
	// The tunnel is one IPv6 hop (RFC 4213 3.3): the router forwarding into it decrements.
	ip6->hop_limit -= 1;
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = tc;
	ip->tot_len = bpf_htons(len + sizeof(struct iphdr));
	// RFC 4213 3.5: a fresh identification per packet (an atomic add, then a read: see to4).
	__sync_fetch_and_add(o->ident, 1);
	ip->id = bpf_htons((__u16)*o->ident);
	// RFC 4213 3.2.2: DF above the IPv6 minimum MTU with path MTU discovery; 3.2.1: never
	// without.
	ip->frag_off = (o->pmtud && len > 1280) ? bpf_htons(0x4000) : 0;
	ip->ttl = o->ttl; // RFC 4213 3.3
	ip->protocol = 41; // RFC 4213 3.5
	ip->saddr = o->src4;
	ip->daddr = o->dst4;
	ip->check = 0;
	ip->check = (__u16)~ip4_sum(ip);
	count(c, 0);
	count(C_REDIRECTED, 0);
	return bpf_redirect_map(&egress, out, 0);
}

// Decapsulation (RFC 4213 3.6, RFC 3056 5.2): protocol 41 to the endpoint address, the outer
// header checked by the caller to be 20 bytes, unfragmented, TTL > 1. Tunnel::decapsulate and
// SixToFour::check_decap, the engine's, decide the same.
static __always_inline int decap6to4(struct xdp_md *ctx, struct iphdr *ip, void *end,
				     struct tun6to4_cfg *t)
{
	struct ipv6hdr *ip6 = (void *)(ip + 1);
	__u32 bad = outer_ok(ip, ip6, end, C_PASS_6TO4);
	if (bad)
		return count(bad - 1, XDP_PASS);
	// RFC 3964 5.3.1: usable IPv4 addresses (the destination is ours, checked when configured)
	// and inner addresses that may be tunneled.
	if (!valid_v4(t, ip->saddr) || never_tunneled(&ip6->saddr) || never_tunneled(&ip6->daddr))
		return count(C_PASS_6TO4, XDP_PASS);
	__u32 e;
	if (embedded(&ip6->saddr, &e)) {
		// "if prefix of src_v6 == 2002::/16, the embedded IPv4 address must be src_v4"
		if (e != ip->saddr)
			return count(C_PASS_6TO4, XDP_PASS);
	} else if (!t->relay || ip->saddr != t->relay) {
		// RFC 3964 5.2: native sources come from our relay only.
		return count(C_PASS_6TO4, XDP_PASS);
	}
	if (embedded(&ip6->daddr, &e)) {
		// "if prefix of dst_v6 == 2002::/16, the embedded IPv4 address must be dst_v4"
		if (e != ip->daddr)
			return count(C_PASS_6TO4, XDP_PASS);
	} else if (!(t->flags & T_RELAY_ROUTER)) {
		// RFC 3056 5: only a relay router forwards to native IPv6.
		return count(C_PASS_6TO4, XDP_PASS);
	}
	if (!outer_to_tun(ctx, ip, t->tun_ifindex, t->mtu, t->flags))
		return count(C_PASS_6TO4, XDP_PASS);
	return strip_outer(ctx, ip, ip6, C_6TO4_DECAP);
}

// Is an IPv6 packet the tunnel's, as Tunnel::mech6 picks it: a 2002::/16 destination, or
// (T_ENCAP_RELAY) a native one, to the relay?
static __always_inline int for_6to4(struct ipv6hdr *ip6, struct tun6to4_cfg *t)
{
	const __u8 *d = ip6->daddr.s6_addr;
	return (d[0] == 0x20 && d[1] == 0x02) || (t->flags & T_ENCAP_RELAY);
}

// Encapsulation (RFC 3056 5.3, RFC 4213 3.5) of a packet for_6to4, checked as
// SixToFour::next_hop checks it. The caller checked the hop limit (> 1).
static __always_inline int encap6to4(struct xdp_md *ctx, struct ipv6hdr *ip6, void *end,
				     struct tun6to4_cfg *t)
{
	__u32 dst4, e;
	int to6to4 = embedded(&ip6->daddr, &dst4);
	__u16 len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
	// The packet exactly (link padding: the engine's), and no larger than the tunnel MTU
	// (RFC 4213 3.2: the engine answers with Packet Too Big).
	if ((void *)ip6 + len != end || len > t->mtu)
		return count(C_PASS_6TO4, XDP_PASS);
	if (never_tunneled(&ip6->saddr) || never_tunneled(&ip6->daddr))
		return count(C_PASS_6TO4, XDP_PASS);
	// RFC 3964 5.3.1: a 6to4 router sends only from its own 2002:V4ADDR::/48; a relay router
	// also forwards native sources toward 6to4 sites.
	if (embedded(&ip6->saddr, &e) ? e != t->v4 : !(t->flags & T_RELAY_ROUTER))
		return count(C_PASS_6TO4, XDP_PASS);
	if (to6to4) {
		// RFC 3964 5.3.1 refused ranges; our own prefix back into the tunnel would loop.
		if (!valid_v4(t, dst4) || dst4 == t->v4)
			return count(C_PASS_6TO4, XDP_PASS);
	} else {
		dst4 = t->relay; // T_ENCAP_RELAY is set only with a relay
	}
	struct outer4 o = {.src4 = t->v4, .dst4 = dst4, .tun = t->tun_ifindex, .ident = &t->ident,
			   .ttl = t->ttl, .pmtud = !!(t->flags & T_PMTUD)};
	return push_outer(ctx, ip6, len, &o, C_6TO4_ENCAP, C_PASS_6TO4);
}

// ISATAP (RFC 5214) in XDP (issue 25): the router's side. Like 6to4 its interface is stateless
// -- the router's IPv4 address, the /64 it advertises (8.2) and the tunnel parameters are the
// whole rewrite -- so the daemon writes them here once (`isatap`, keep in step with `IsatapCfg`
// in crates/xdp/src/lib.rs, filled from xlat_engine::tunnel::isatap::XdpIsatap) and the program
// applies Isatap::next_hop's and Isatap::decap's checks itself. Hosts stay with the engine
// (their router and prefix are learned from Router Advertisements, 8.3.3), and so does Neighbor
// Discovery, link-local traffic, and whatever fails a check or needs more than the rewrite: the
// kernel routes it into the TUN device as before, the engine answers or drops it, counted.
struct isatap_cfg {
	__u32 v4;          // the router's IPv4 address (network byte order); 0: off
	__u32 tun_ifindex; // the TUN device the kernel routes the tunnel's packets into
	__u8 prefix[8];    // the advertised /64 (RFC 5214 8.2)
	__u16 mtu;         // the tunnel MTU (RFC 4213 3.2)
	__u8 ttl;          // the outer TTL (RFC 4213 3.3)
	__u8 flags;        // T_PMTUD, T_ENCAP, T_OWN_ROUTE
	__u32 ident;       // the outer identification's counter (RFC 4213 3.5), atomic
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct isatap_cfg);
	__uint(max_entries, 1);
} isatap SEC(".maps");

// RFC 5214 6.1: the IPv4 address in an ISATAP interface identifier, 0000:5efe:V4ADDR or, with
// the u/l bit, 0200:5efe:V4ADDR (isatap::embedded; network byte order in *v4).
static __always_inline int isatap_v4(const struct in6_addr *a, __u32 *v4)
{
	__u32 w2 = a->s6_addr32[2];
	if (w2 != bpf_htonl(0x00005efe) && w2 != bpf_htonl(0x02005efe))
		return 0;
	*v4 = a->s6_addr32[3];
	return 1;
}

// RFC 1812 4.2.2.11, 5.3.7: a unicast IPv4 address (tunnel::unicast4): not 0/8, 127/8, 224/3.
static __always_inline int unicast4(__u32 a)
{
	__u8 first = bpf_ntohl(a) >> 24;
	return first != 0 && first != 127 && first < 224;
}

// ICMPv6 Router Solicitation .. Redirect (RFC 4861 4): Neighbor Discovery is the engine's (a
// router answers Router Solicitations, RFC 5214 8.2) or the kernel's.
static __always_inline int nd(struct ipv6hdr *ip6, void *end)
{
	if (ip6->nexthdr != 58)
		return 0;
	__u8 *ty = (void *)(ip6 + 1);
	if ((void *)(ty + 1) > end)
		return 1;
	return *ty >= 133 && *ty <= 137;
}

// Decapsulation at an ISATAP router (RFC 5214 7.3, RFC 4213 3.6): protocol 41 to the router's
// address, the outer header checked by the caller (20 bytes, unfragmented, TTL > 1).
// Tunnel::decapsulate and Isatap::decap decide the same for what is redirected here.
static __always_inline int decap_isatap(struct xdp_md *ctx, struct iphdr *ip, void *end,
					struct isatap_cfg *t)
{
	struct ipv6hdr *ip6 = (void *)(ip + 1);
	__u32 bad = outer_ok(ip, ip6, end, C_PASS_ISATAP);
	if (bad)
		return count(bad - 1, XDP_PASS);
	// RFC 5214 7.3 (and RFC 4213 3.6's source check): the IPv6 source embeds the outer IPv4
	// source, which is unicast; a router has no potential router list to accept others from.
	__u32 e;
	if (!unicast4(ip->saddr) || !isatap_v4(&ip6->saddr, &e) || e != ip->saddr)
		return count(C_PASS_ISATAP, XDP_PASS);
	// Neighbor Discovery (RFC 5214 8.2: Router Solicitations are answered by the engine) and
	// inner addresses the engine refuses (multicast, unspecified, loopback, IPv4-compatible or
	// -mapped) or does not forward (link-local: RFC 4291 2.5.6, only to the router itself),
	// and link-local sources, which the kernel never forwards beyond the link.
	if (nd(ip6, end) || never_tunneled(&ip6->saddr) || never_tunneled(&ip6->daddr))
		return count(C_PASS_ISATAP, XDP_PASS);
	if (!outer_to_tun(ctx, ip, t->tun_ifindex, t->mtu, t->flags))
		return count(C_PASS_ISATAP, XDP_PASS);
	return strip_outer(ctx, ip, ip6, C_ISATAP_DECAP);
}

// Is an IPv6 packet for the ISATAP link, as Tunnel::mech6 picks it for a router: the destination
// is in the advertised /64 (Isatap::on_link; fe80::/64 is never forwarded: the kernel's).
static __always_inline int for_isatap(struct ipv6hdr *ip6, struct isatap_cfg *t)
{
	const __u32 *p = (const __u32 *)t->prefix;
	return ip6->daddr.s6_addr32[0] == p[0] && ip6->daddr.s6_addr32[1] == p[1];
}

// Encapsulation at an ISATAP router (RFC 5214 7.1, RFC 4213 3.5) of a packet for_isatap: to the
// IPv4 address in the destination's interface identifier (6.1), checked as Isatap::next_hop
// checks it. The caller checked the hop limit (> 1).
static __always_inline int encap_isatap(struct xdp_md *ctx, struct ipv6hdr *ip6, void *end,
					struct isatap_cfg *t)
{
	__u16 len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
	// The packet exactly (link padding: the engine's), and no larger than the tunnel MTU
	// (RFC 4213 3.2: the engine answers with Packet Too Big).
	if ((void *)ip6 + len != end || len > t->mtu)
		return count(C_PASS_ISATAP, XDP_PASS);
	// RFC 5214 7.1: the link-layer (IPv4) address is in the identifier: none, the router's own
	// (a loop) or not unicast -- the engine drops it, counted.
	__u32 dst4;
	if (!isatap_v4(&ip6->daddr, &dst4) || dst4 == t->v4 || !unicast4(dst4))
		return count(C_PASS_ISATAP, XDP_PASS);
	// Sources the kernel would not forward (link-local, multicast, unspecified, loopback,
	// IPv4-compatible or -mapped) stay with it.
	if (never_tunneled(&ip6->saddr))
		return count(C_PASS_ISATAP, XDP_PASS);
	struct outer4 o = {.src4 = t->v4, .dst4 = dst4, .tun = t->tun_ifindex, .ident = &t->ident,
			   .ttl = t->ttl, .pmtud = !!(t->flags & T_PMTUD)};
	return push_outer(ctx, ip6, len, &o, C_ISATAP_ENCAP, C_PASS_ISATAP);
}

static __always_inline int ipv4(struct xdp_md *ctx, struct ethhdr *eth, void *end)
{
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		return count(C_PASS_TRUNCATED, XDP_PASS);
	if (ip->version != 4 || ip->ihl != 5)
		return count(C_PASS_OPTIONS, XDP_PASS);
	// MF set or a non-zero offset: fragments need the engine's reassembly-free tracking.
	if (ip->ttl <= 1)
		return count(C_PASS_TTL, XDP_PASS);
	if (ip->frag_off & bpf_htons(0x3fff))
		return engine4(ctx, ip, C_PASS_FRAGMENT);
	if (ip->protocol == 41) {
		__u32 zero = 0;
		struct tun6to4_cfg *t = bpf_map_lookup_elem(&tun6to4, &zero);
		if (t && t->v4 && ip->daddr == t->v4)
			return decap6to4(ctx, ip, end, t);
		struct isatap_cfg *i = bpf_map_lookup_elem(&isatap, &zero);
		if (i && i->v4 && ip->daddr == i->v4)
			return decap_isatap(ctx, ip, end, i);
	}

	struct flow_key key = {.src = ip->saddr, .dst = ip->daddr, .proto = ip->protocol};
	int udp = 0, control = 0;
	__u16 l4check;
	void *l4 = (void *)(ip + 1);
	if (ip->protocol == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > end)
			return count(C_PASS_TRUNCATED, XDP_PASS);
		control = th->syn || th->fin || th->rst;
		key.sport = th->source;
		key.dport = th->dest;
		l4check = th->check;
	} else if (ip->protocol == IPPROTO_UDP) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > end)
			return count(C_PASS_TRUNCATED, XDP_PASS);
		key.sport = uh->source;
		key.dport = uh->dest;
		l4check = uh->check;
		udp = 1;
	} else {
		return engine4(ctx, ip, C_PASS_PROTO);
	}

	struct recipe *r = 0;
	if (!control) {
		r = bpf_map_lookup_elem(&recipes, &key);
		if (!r) {
			struct recipe46 *r46 = bpf_map_lookup_elem(&recipes46, &key);
			if (r46)
				return xlat46(ctx, ip, r46, udp, l4check);
		}
	}
	if (!r) {
		// SIIT: stateless, so TCP control segments are its recipes' too.
		struct pair_key4 pk = {.src = ip->saddr, .dst = ip->daddr, .proto = ip->protocol};
		struct siit46 *s = bpf_map_lookup_elem(&siit46s, &pk);
		if (s)
			return siit46(ctx, ip, s, udp, key.sport, key.dport, l4check);
		return slow_path4(ctx, ip, control ? C_PASS_TCP_CONTROL : C_PASS_NO_RECIPE);
	}

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
	long out = route(ctx, &fib);
	if (out < 0)
		return count(-out, XDP_PASS);
	stamp(&r->last_seen);

	ip->saddr = r->src;
	ip->daddr = r->dst;
	ip->ttl -= 1;
	ip->check = csum_apply(ip->check, r->ip_delta);
	rewrite_l4(l4, udp, r->sport, r->dport, r->l4_delta);
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	count(C_REDIRECTED, 0);
	return bpf_redirect_map(&egress, out, 0);
}

// IPv6 -> IPv4 (RFC 7915 5.1): swaps the 40-byte header for a 20-byte one (TOS = traffic
// class, DF and identification as struct recipe64 says, TTL = hop limit - 1) with addresses
// (src, dst) and ports (sport, dport), and adds l4_delta to the transport checksum; the
// caller checked that the packet may be translated here. c: the counter of a translated
// packet.
static __always_inline int to4(struct xdp_md *ctx, struct ipv6hdr *ip6, __u32 src, __u32 dst,
			       __u16 sport, __u16 dport, __u32 l4_delta, __u16 id_base,
			       __u16 id_slot, __u64 *last_seen, int udp, __u32 c)
{
	__u16 payload = bpf_ntohs(ip6->payload_len);
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET;
	fib.l4_protocol = ip6->nexthdr;
	fib.sport = sport;
	fib.dport = dport;
	fib.tot_len = payload + 20;
	fib.ipv4_src = src;
	fib.ipv4_dst = dst;
	fib.ifindex = ctx->ingress_ifindex;
	long out = route(ctx, &fib);
	if (out < 0)
		return count(-out, XDP_PASS);

	__u8 tc = (bpf_ntohl(*(__u32 *)ip6) >> 20) & 0xff;
	__u8 hop = ip6->hop_limit, proto = ip6->nexthdr;
	stamp(last_seen);
	if (bpf_xdp_adjust_head(ctx, 20))
		return count(C_PASS_NO_ROOM, XDP_PASS);
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	void *l4 = (void *)(ip + 1);
	if (l4 + (udp ? sizeof(struct udphdr) : sizeof(struct tcphdr)) > end)
		return count(C_PASS_NO_ROOM, XDP_DROP); // cannot happen: checked before shrinking
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = tc;
	ip->tot_len = bpf_htons(payload + 20);
	// RFC 7915 5.1: DF clear and a generated identification up to 1260 bytes.
	ip->id = 0;
	ip->frag_off = bpf_htons(0x4000);
	if (payload + 20 <= 1260) {
		__u32 slot = id_slot & (ID_SLOTS - 1);
		__u32 *ctr = bpf_map_lookup_elem(&ipv4_ids, &slot);
		__u16 n = 0;
		if (ctr) {
			// An atomic add, then a read (this program is built for BPF v1, which has no
			// fetching add): two CPUs that add at the same instant may read the same
			// value, and then two packets of one destination share an identification.
			__sync_fetch_and_add(ctr, 1);
			n = (__u16)*ctr;
		}
		ip->id = bpf_htons((__u16)(id_base + n));
		ip->frag_off = 0;
	}
	ip->ttl = hop - 1;
	ip->protocol = proto;
	ip->check = 0;
	ip->saddr = src;
	ip->daddr = dst;
	ip->check = (__u16)~ip4_sum(ip);
	rewrite_l4(l4, udp, sport, dport, l4_delta);
	count(c, 0);
	count(C_REDIRECTED, 0);
	return bpf_redirect_map(&egress, out, 0);
}

// SIIT IPv6 -> IPv4 (RFC 7915 5.1, 5.5) by a pair's recipe, ports kept. Follows
// offload::apply_siit64, the engine's model of it.
static __always_inline int siit64(struct xdp_md *ctx, struct ipv6hdr *ip6, struct siit64 *r,
				  int udp, __u16 sport, __u16 dport)
{
	__u16 payload = bpf_ntohs(ip6->payload_len);
	void *end = (void *)(long)ctx->data_end;
	if (payload < (udp ? sizeof(struct udphdr) : sizeof(struct tcphdr)) ||
	    (void *)(ip6 + 1) + payload > end)
		return count(C_PASS_TRUNCATED, XDP_PASS);
	// RFC 7915 5.1: too big for the next hop as IPv4 (DF set): Packet Too Big (engine).
	if (payload + 20 > r->mtu_limit)
		return count(C_PASS_TOO_BIG, XDP_PASS);
	return to4(ctx, ip6, r->src, r->dst, sport, dport, r->l4_delta, r->id_base, r->id_slot,
		   &r->last_seen, udp, C_SIIT_6TO4);
}

// IPv6: NAT64 outbound (RFC 7915 5.1) by a session's recipe, or SIIT by a pair's.
static __always_inline int ipv6(struct xdp_md *ctx, struct ethhdr *eth, void *end)
{
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > end)
		return count(C_PASS_TRUNCATED, XDP_PASS);
	if (ip6->version != 6)
		return count(C_PASS_TRUNCATED, XDP_PASS);
	if (ip6->hop_limit <= 1)
		return count(C_PASS_TTL, XDP_PASS);
	__u32 zero = 0;
	struct tun6to4_cfg *t = bpf_map_lookup_elem(&tun6to4, &zero);
	if (t && t->v4 && (t->flags & T_ENCAP) && for_6to4(ip6, t))
		return encap6to4(ctx, ip6, end, t);
	// Tunnel::mech6's order: 2002::/16 first (6to4, above), then the ISATAP link.
	struct isatap_cfg *i = bpf_map_lookup_elem(&isatap, &zero);
	if (i && i->v4 && (i->flags & T_ENCAP) && for_isatap(ip6, i))
		return encap_isatap(ctx, ip6, end, i);
	// Extension headers (fragments among them), ICMPv6, ND: the engine's or the kernel's
	// (ND is addressed to the gateway or to multicast: the kernel's, never routed to the TUN).
	if (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP)
		return engine6(ctx, ip6, C_PASS_PROTO);
	struct flow_key6 key = {.proto = ip6->nexthdr};
	__builtin_memcpy(key.src, &ip6->saddr, 16);
	__builtin_memcpy(key.dst, &ip6->daddr, 16);
	int udp = ip6->nexthdr == IPPROTO_UDP, control = 0;
	void *l4 = (void *)(ip6 + 1);
	if (udp) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > end)
			return count(C_PASS_TRUNCATED, XDP_PASS);
		key.sport = uh->source;
		key.dport = uh->dest;
	} else {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > end)
			return count(C_PASS_TRUNCATED, XDP_PASS);
		control = th->syn || th->fin || th->rst;
		key.sport = th->source;
		key.dport = th->dest;
	}
	struct recipe64 *r = 0;
	if (!control)
		r = bpf_map_lookup_elem(&recipes64, &key);
	if (!r) {
		// SIIT: stateless, so TCP control segments are its recipes' too.
		struct pair_key6 pk = {.proto = ip6->nexthdr};
		__builtin_memcpy(pk.src, &ip6->saddr, 16);
		__builtin_memcpy(pk.dst, &ip6->daddr, 16);
		struct siit64 *s = bpf_map_lookup_elem(&siit64s, &pk);
		if (s)
			return siit64(ctx, ip6, s, udp, key.sport, key.dport);
		return slow_path6(ctx, ip6, control ? C_PASS_TCP_CONTROL : C_PASS_NO_RECIPE);
	}
	return to4(ctx, ip6, r->src, r->dst, r->sport, r->dport, r->l4_delta, r->id_base,
		   r->id_slot, &r->last_seen, udp, C_TRANSLATED_6TO4);
}

SEC("xdp")
int xlat_fast(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return count(C_PASS_TRUNCATED, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		return ipv4(ctx, eth, end);
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return ipv6(ctx, eth, end);
	return count(C_PASS_NOT_IP, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
