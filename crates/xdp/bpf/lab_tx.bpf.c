// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// The lab tester's NIC-like ingress (`xlat lab run ... --ingress xdp`): loaded on the far end
// of an injection veth pair inside the tester, it redirects every frame the tester sends into
// that pair out of the tester's port facing the DUT (the devmap's one entry). veth hands a
// redirected frame to the DUT's port as an XDP frame, as a NIC's driver builds it from its own
// receive buffer: the DUT's XDP program runs on it in place, and the kernel builds an skb around
// it for devices without one. Sent straight from the tester's AF_PACKET socket, a frame reaches
// the DUT as an skb of page fragments with 16 bytes of headroom, which veth copies into a new
// linear buffer before any XDP program may run (skb_pp_cow_data) -- on the DUT's CPU. Here that
// copy happens once, on this pair, on the tester's CPU.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} out SEC(".maps");

SEC("xdp")
int lab_tx(struct xdp_md *ctx)
{
	return bpf_redirect_map(&out, 0, XDP_DROP);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
