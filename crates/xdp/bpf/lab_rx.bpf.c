// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// The lab tester's receive counter: counts this trial's test frames at the receiving port's
// front door and drops them, so the tester's core no longer builds an skb, runs GRO, copies
// the frame into a packet ring and parses it in user space for every frame that comes back
// (about half of its work per frame into a device). The trial's numbers stay exact:
//   - a frame is this trial's when it is Ethernet + IPv4 (no options needed, any IHL) or IPv6
//     (UDP as the first next header) + UDP, and its payload starts with the trial's tag and a
//     flow index below the trial's flow count (crates/lab/src/packet.rs, `Tag`);
//   - distinct frames are counted with a bitmap of sequence numbers (one bit each, atomic OR),
//     so a duplicate is counted as a duplicate, not as a second delivery; sequence numbers
//     beyond the bitmap are counted without the duplicate check (as the ring receiver does
//     beyond its own bitmap);
//   - one frame in 2^sample_shift (by sequence number) still goes on to the kernel and the
//     packet ring, where the user-space receiver takes latency, reordering and the first
//     source address from it: a systematic sample of the same trial;
//   - IPv6 in IPv4 protocol 41 (RFC 4213 3.5: an unfragmented outer header, then IPv6 +
//     UDP) is looked through, as the user-space parser does: the frames a tunnel endpoint
//     encapsulates (cpu-return) count like any other;
//   - everything else (other trials' stragglers, ARP, neighbour discovery) passes to the
//     kernel untouched and is judged there as before.
// The program is loaded for one trial and detached after it; its maps start zeroed.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

// Keep in step with crates/xdp/src/lab_rx.rs (`Config`, counter indexes).
struct config {
	__u16 tag;
	__u16 pad;
	__u32 nflows;
	__u32 sample_mask; // pass a frame on when (seq & sample_mask) == 0
	__u32 nbits;       // sequence numbers the bitmap covers
};

enum {
	C_RECEIVED = 0, // distinct test frames of this trial
	C_BYTES,        // their bytes, FCS included (4 per frame)
	C_DUPLICATES,
	C_SAMPLED,      // passed on to the packet ring
	C_COUNT,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

// One bit per sequence number; max_entries set by the loader (words of 64 bits).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

#define TAG_LEN 10 // tag (2), flow (4), seq (4); the transmit stamp after them is not read
#define FCS_LEN 4

static __always_inline void count(__u32 i, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &i);
	if (c)
		*c += n;
}

SEC("xdp")
int lab_rx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	struct ipv6hdr *ip6;
	void *l4;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return XDP_PASS;
		if (ip->protocol == IPPROTO_UDP) {
			l4 = (void *)ip + ip->ihl * 4;
			goto tagged;
		}
		if (ip->protocol != IPPROTO_IPV6 || (ip->frag_off & bpf_htons(0x3fff)))
			return XDP_PASS;
		ip6 = (void *)ip + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		ip6 = (void *)(eth + 1);
	} else {
		return XDP_PASS;
	}
	if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
		return XDP_PASS;
	l4 = ip6 + 1;
tagged:;
	__u8 *tag = (__u8 *)l4 + sizeof(struct udphdr);
	if ((void *)(tag + TAG_LEN) > end)
		return XDP_PASS;
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return XDP_PASS;
	__u16 t = ((__u16)tag[0] << 8) | tag[1];
	__u32 flow = ((__u32)tag[2] << 24) | ((__u32)tag[3] << 16) | ((__u32)tag[4] << 8) | tag[5];
	__u32 seq = ((__u32)tag[6] << 24) | ((__u32)tag[7] << 16) | ((__u32)tag[8] << 8) | tag[9];
	if (t != cfg->tag || flow >= cfg->nflows)
		return XDP_PASS;
	if (seq < cfg->nbits) {
		__u32 w = seq / 64;
		__u64 bit = 1ULL << (seq % 64);
		__u64 *word = bpf_map_lookup_elem(&seen, &w);
		if (word) {
			__u64 old = __sync_fetch_and_or(word, bit);
			if (old & bit) {
				count(C_DUPLICATES, 1);
				return XDP_DROP;
			}
		}
	}
	count(C_RECEIVED, 1);
	count(C_BYTES, (__u64)(end - data) + FCS_LEN);
	if ((seq & cfg->sample_mask) == 0) {
		count(C_SAMPLED, 1);
		return XDP_PASS;
	}
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
