//! The nodes' and routers' configurations: xlat's per-node file and BIRD's (nodes announce
//! their pool by BGP; the routers learn them).

use super::*;

/// The per-node xlat configuration (one template for every node).
pub fn node_config(tun: &str, pool: &str, socket: &str) -> String {
    format!(
        r#"# written by xlat lab scale-out: one node of N, its own pool
[tun]
name = "{tun}"
mtu = 1500
auto_routes = true

[nat44]
inside = ["{INSIDE}"]
pool = ["{pool}"]
mode = "napt"
filtering = "endpoint-independent"
ports = "1024-65535"

[control]
socket = "{socket}"
"#
    )
}

/// BIRD for a node: learn xlat's inbound pool route from the kernel and announce it by eBGP
/// while it exists. The same text is docs/scale-out/bird-node.conf with placeholders filled.
pub fn bird_node_config(
    router_id: Ipv4Addr,
    asn: u32,
    peer: Ipv4Addr,
    peer_asn: u32,
    inside_peer: Ipv4Addr,
    pool: &str,
    tun: &str,
) -> String {
    format!(
        r#"# BIRD 2 on an xlat node: announce the node's pool while xlat runs.
router id {router_id};

# Interfaces (the kernel protocol needs them to read routes through the TUN device).
protocol device {{ scan time 10; }}

# xlat adds "<pool> dev <tun>" to the main table while it runs; after a crash only its
# fail-closed "unreachable <pool>" twin stays. Learn routes made by other programs, keep
# only the unicast one through the TUN device, never write to the kernel.
protocol kernel xlat_pool {{
    learn;
    scan time 5;
    ipv4 {{
        import filter {{
            if net ~ [ {pool} ] && dest = RTD_UNICAST && ifname = "{tun}" then accept;
            reject;
        }};
        export none;
    }};
}}

protocol bgp upstream {{
    local as {asn};
    neighbor {peer} as {peer_asn};
    connect delay time 1;
    connect retry time 2;
    error wait time 1, 4;
    ipv4 {{
        import none;
        export where proto = "xlat_pool";
    }};
}}

# The same announcement to the inside router, whose health check (xlat-ecmp-health.sh) keeps
# this node in its nexthop group only while the pool is announced.
protocol bgp inside {{
    local as {asn};
    neighbor {inside_peer} as {IR_ASN};
    connect delay time 1;
    connect retry time 2;
    error wait time 1, 4;
    ipv4 {{
        import none;
        export where proto = "xlat_pool";
    }};
}}
"#
    )
}

/// BIRD for the outside router: one eBGP session per node, pools into the kernel. The device
/// scan every second also wakes BIRD's loop: without it a new session's first UPDATE waited
/// up to 3 s in about half the runs (the packets show no loss; BIRD sent it at its next
/// wake-up). Several sessions could announce the same prefix only if pools overlapped, which
/// `xlat check` rules out per node and the cluster plan must rule out between nodes.
pub fn bird_outside_config(router_id: Ipv4Addr, peers: &[(Ipv4Addr, u32)]) -> String {
    bird_router_config(
        &format!(
            r#"# BIRD 2 on the outside (upstream) router: learn each xlat node's pool by eBGP.
router id {router_id};
protocol device {{ scan time 1; }}
protocol kernel {{
    ipv4 {{ import none; export all; }};
}}
"#
        ),
        OR_ASN,
        peers,
    )
}

/// BIRD for the inside router: one eBGP session per node, the pools they announce into
/// kernel table `NODES_TABLE` only (no rule uses it), which the health check
/// ([`HEALTH_SCRIPT`]) turns into the nexthop group's members. docs/scale-out/bird-inside.conf.
pub fn bird_inside_config(router_id: Ipv4Addr, peers: &[(Ipv4Addr, u32)]) -> String {
    bird_router_config(
        &format!(
            r#"# BIRD 2 on the inside router: which nodes announce their pool (the health signal).
router id {router_id};
protocol device {{ scan time 1; }}
protocol kernel node_pools {{
    kernel table {NODES_TABLE};
    ipv4 {{ import none; export all; }};
}}
"#
        ),
        IR_ASN,
        peers,
    )
}

pub(super) fn bird_router_config(head: &str, local_asn: u32, peers: &[(Ipv4Addr, u32)]) -> String {
    let mut s = head.to_string();
    for (i, (peer, asn)) in peers.iter().enumerate() {
        s.push_str(&format!(
            r#"protocol bgp node{i} {{
    local as {local_asn};
    neighbor {peer} as {asn};
    passive on;
    connect delay time 1;
    connect retry time 2;
    error wait time 1, 4;
    ipv4 {{ import all; export none; }};
}}
"#
        ));
    }
    s
}
