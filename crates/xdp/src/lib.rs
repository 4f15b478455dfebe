//! xlat's XDP fast path (issue 6): loads `bpf/xlat_fast.bpf.c` onto the gateway's inside and
//! outside interfaces and keeps its recipe table in step with the engine.
//!
//! The engine decides; this crate only carries its decisions into the kernel. The daemon
//! turns every fast-path event of the engine's state-event stream into an [`OffloadOp`]
//! (`Engine::offload_op`) and passes it to [`FastPath::apply`]: `Install` writes the
//! session's two recipes (NAT44 into `recipes`; NAT64 into `recipes64`, keyed by the IPv6
//! tuple, and `recipes46`; SIIT's one-direction address-pair recipes into `siit64s` and
//! `siit46s`), `Remove` deletes them, `Query` is answered by
//! [`FastPath::last_seen`] (when the XDP program last matched each recipe) so that the engine
//! can refresh or expire the session. What the program does, and what it leaves to the
//! kernel and the TUN path, is described at the top of the C source.
//!
//! veth: a frame redirected into a veth device is delivered only if the peer end has NAPI
//! running, which needs an XDP program or GRO on the peer (`ethtool -K <peer> gro on`).
//! Physical NICs need nothing.
//!
//! Batches (issue 25): [`FastPath::stage`] queues an op's map writes and
//! [`FastPath::flush`] applies everything queued with one `BPF_MAP_UPDATE_BATCH` or
//! `BPF_MAP_DELETE_BATCH` per map ([`batch`]), so the recipes of a whole batch of new
//! sessions cost one or two system calls, not two per session. Ops are applied in the order
//! staged (a removal and a later install of the same key stay in that order).
//!
//! The AF_XDP slow path (issue 25, `[dataplane] slow_path = "af_xdp"`): the same program
//! redirects what the kernel would route into the TUN device to AF_XDP sockets
//! ([`FastPath::enable_slow_path`]; the sockets and rings are [`xsk`], the egress table
//! [`nexthop`]).
//!
//! [`lab_rx`] is the second program here: the lab tester's receive counter.

pub mod batch;
pub mod lab_rx;
pub mod lab_tx;
pub mod nexthop;
pub mod xsk;

use std::ffi::CString;
use std::mem::size_of;

use anyhow::{bail, Context, Result};
use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{Array, DevMapHash, HashMap as BpfHashMap, IterableMap, MapData, PerCpuArray};
use aya::programs::{Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader, Pod};
use batch::{Batch, Flushed};
use xlat_engine::offload::{
    OffloadKind, OffloadOp, Pair4, Pair6, Recipe, Recipe46, Recipe64, Recipes, SiitRecipe46,
    SiitRecipe64, Tuple4, Tuple6,
};
use xlat_engine::tunnel::isatap::XdpIsatap;
use xlat_engine::tunnel::sixtofour::{self, XdpSixToFour};

/// The largest `slow_path_pps` (keeps the policer's token arithmetic inside 64 bits).
pub const MAX_SLOW_PATH_PPS: u32 = 100_000_000;

/// Who routes a 6in4 endpoint's protocol-41 packets into the TUN device, and so whether the
/// XDP program must ask the kernel before it decapsulates one (`T_OWN_ROUTE` in the C source).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelRoutes {
    /// `xlat run` with `tun.auto_routes`: its policy rule steers every protocol-41 packet to
    /// the endpoint address into the TUN, ahead of local delivery, so the program decapsulates
    /// without a routing lookup per packet.
    Daemon,
    /// The operator's routes: the program asks the kernel (`bpf_fib_lookup`) per packet.
    Operator,
}

/// `struct tun6to4_cfg` of the C program: 6to4 in XDP (`FastPath::set_6to4`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct SixToFourCfg {
    v4: u32,
    relay: u32,
    tun_ifindex: u32,
    mtu: u16,
    ttl: u8,
    flags: u8,
    ident: u32,
    refused_net: [u32; REFUSED_SLOTS],
    refused_mask: [u32; REFUSED_SLOTS],
}

/// `T_REFUSED`: room for RFC 3964 5.3.1's refused ranges.
const REFUSED_SLOTS: usize = 8;
const T_RELAY_ROUTER: u8 = 1;
const T_PMTUD: u8 = 2;
const T_ENCAP: u8 = 4;
const T_ENCAP_RELAY: u8 = 8;
const T_OWN_ROUTE: u8 = 16;

// SAFETY: plain integers without implicit padding (84 bytes, checked below).
unsafe impl Pod for SixToFourCfg {}

impl SixToFourCfg {
    /// The program's configuration for `x`, the TUN device being `tun_ifindex`.
    fn of(x: &XdpSixToFour, tun_ifindex: u32, routes: TunnelRoutes) -> Result<SixToFourCfg> {
        let mut c = SixToFourCfg {
            v4: x.ipv4.to_be(),
            relay: x.relay.unwrap_or(0).to_be(),
            tun_ifindex,
            mtu: x.params.mtu,
            ttl: x.params.ttl,
            flags: 0,
            ident: 0,
            refused_net: [0; REFUSED_SLOTS],
            refused_mask: [0; REFUSED_SLOTS],
        };
        for (on, bit) in [
            (x.relay_router, T_RELAY_ROUTER),
            (x.params.pmtud, T_PMTUD),
            (x.encap, T_ENCAP),
            (x.encap_relay && x.relay.is_some(), T_ENCAP_RELAY),
            (routes == TunnelRoutes::Daemon, T_OWN_ROUTE),
        ] {
            if on {
                c.flags |= bit;
            }
        }
        for (i, (net, mask)) in sixtofour::refused_masks().enumerate() {
            let (Some(cn), Some(cm)) = (c.refused_net.get_mut(i), c.refused_mask.get_mut(i)) else {
                bail!("RFC 3964's refused ranges outgrew the XDP program's {REFUSED_SLOTS}");
            };
            *cn = net.to_be();
            *cm = mask.to_be();
        }
        Ok(c)
    }
}

/// `struct isatap_cfg` of the C program: an ISATAP router in XDP (`FastPath::set_isatap`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct IsatapCfg {
    v4: u32,
    tun_ifindex: u32,
    prefix: [u8; 8],
    mtu: u16,
    ttl: u8,
    flags: u8,
    ident: u32,
}

// SAFETY: plain integers and bytes without implicit padding (24 bytes, checked below).
unsafe impl Pod for IsatapCfg {}

impl IsatapCfg {
    /// The program's configuration for `x`, the TUN device being `tun_ifindex`.
    fn of(x: &XdpIsatap, tun_ifindex: u32, routes: TunnelRoutes) -> IsatapCfg {
        let [p0, p1, p2, p3, p4, p5, p6, p7, ..] = x.prefix.to_be_bytes();
        let mut flags = 0;
        if x.params.pmtud {
            flags |= T_PMTUD;
        }
        if x.encap {
            flags |= T_ENCAP;
        }
        if routes == TunnelRoutes::Daemon {
            flags |= T_OWN_ROUTE;
        }
        IsatapCfg {
            v4: x.ipv4.to_be(),
            tun_ifindex,
            prefix: [p0, p1, p2, p3, p4, p5, p6, p7],
            mtu: x.params.mtu,
            ttl: x.params.ttl,
            flags,
            ident: 0,
        }
    }
}

/// `struct slow_cfg` of the C program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct SlowCfg {
    tun_ifindex: u32,
    pad: u32,
}

// SAFETY: two u32, no padding.
unsafe impl Pod for SlowCfg {}

/// Most receive queues per interface the AF_XDP slow path serves (the stride of `xsk_base`).
pub const MAX_QUEUES: u32 = 16;

/// `struct policer_cfg` of the C program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Policer {
    rate: u64,
    burst: u64,
}

// SAFETY: two u64, no padding.
unsafe impl Pod for Policer {}

impl Policer {
    /// `slow_path_pps` (capped at [`MAX_SLOW_PATH_PPS`]; 0 = no limit) with bursts of 10 ms at
    /// the rate, at least 32 packets (a batch).
    fn of(slow_path_pps: u32) -> Policer {
        let rate = u64::from(slow_path_pps.min(MAX_SLOW_PATH_PPS));
        Policer {
            rate,
            burst: (rate / 100).max(32),
        }
    }
}

/// The compiled program (empty when clang was missing at build time).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xlat_fast.o"));

/// True when this binary carries the XDP program.
pub fn built() -> bool {
    !OBJECT.is_empty()
}

/// `struct flow_key` of the C program: addresses and ports in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Key {
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    proto: u8,
    pad: [u8; 3],
}

// SAFETY: plain integers, no padding beyond the explicit `pad` (16 bytes, checked below).
unsafe impl Pod for Key {}

/// `struct recipe` of the C program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Value {
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    ip_delta: u32,
    l4_delta: u32,
    flags: u32,
    last_seen: u64,
}

// SAFETY: plain integers laid out without implicit padding (32 bytes, checked below).
unsafe impl Pod for Value {}

/// `struct flow_key6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Key6 {
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    proto: u8,
    pad: [u8; 3],
}

// SAFETY: plain bytes and integers without implicit padding (40 bytes, checked below).
unsafe impl Pod for Key6 {}

/// `struct recipe64`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Value64 {
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    l4_delta: u32,
    flags: u32,
    id_base: u16,
    id_slot: u16,
    last_seen: u64,
}

// SAFETY: plain integers without implicit padding (32 bytes, checked below).
unsafe impl Pod for Value64 {}

/// `struct recipe46`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Value46 {
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    l4_delta: u32,
    mtu_limit: u16,
    pad: u16,
    flags: u32,
    last_seen: u64,
}

// SAFETY: plain bytes and integers without implicit padding (56 bytes, checked below).
unsafe impl Pod for Value46 {}

/// `struct pair_key4`: a SIIT recipe's key (addresses in network byte order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PairKey4 {
    src: u32,
    dst: u32,
    proto: u8,
    pad: [u8; 3],
}

// SAFETY: plain integers without implicit padding (12 bytes, checked below).
unsafe impl Pod for PairKey4 {}

/// `struct pair_key6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PairKey6 {
    src: [u8; 16],
    dst: [u8; 16],
    proto: u8,
    pad: [u8; 3],
}

// SAFETY: plain bytes without implicit padding (36 bytes, checked below).
unsafe impl Pod for PairKey6 {}

/// `struct siit64`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct SiitValue64 {
    src: u32,
    dst: u32,
    l4_delta: u32,
    id_base: u16,
    id_slot: u16,
    mtu_limit: u16,
    pad: u16,
    flags: u32,
    last_seen: u64,
}

// SAFETY: plain integers without implicit padding (32 bytes, checked below).
unsafe impl Pod for SiitValue64 {}

/// `struct siit46`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct SiitValue46 {
    src: [u8; 16],
    dst: [u8; 16],
    l4_delta: u32,
    mtu_limit: u16,
    mtu_df: u16,
    last_seen: u64,
}

// SAFETY: plain bytes and integers without implicit padding (48 bytes, checked below).
unsafe impl Pod for SiitValue46 {}

const _: () = assert!(
    size_of::<Key>() == 16
        && size_of::<Value>() == 32
        && size_of::<Key6>() == 40
        && size_of::<Value64>() == 32
        && size_of::<Value46>() == 56
        && size_of::<PairKey4>() == 12
        && size_of::<PairKey6>() == 36
        && size_of::<SiitValue64>() == 32
        && size_of::<SiitValue46>() == 48
        && size_of::<SixToFourCfg>() == 84
);

impl PairKey4 {
    fn of(p: &Pair4) -> PairKey4 {
        PairKey4 {
            src: p.src.to_be(),
            dst: p.dst.to_be(),
            proto: p.proto,
            pad: [0; 3],
        }
    }
}

impl PairKey6 {
    fn of(p: &Pair6) -> PairKey6 {
        PairKey6 {
            src: p.src.to_be_bytes(),
            dst: p.dst.to_be_bytes(),
            proto: p.proto,
            pad: [0; 3],
        }
    }
}

impl SiitValue64 {
    fn of(r: &SiitRecipe64, now_ns: u64) -> SiitValue64 {
        SiitValue64 {
            src: r.new.src.to_be(),
            dst: r.new.dst.to_be(),
            l4_delta: u32::from(r.l4_delta),
            id_base: r.id_base,
            id_slot: r.id_slot,
            mtu_limit: r.mtu_limit,
            pad: 0,
            flags: 0,
            last_seen: now_ns,
        }
    }
}

impl SiitValue46 {
    fn of(r: &SiitRecipe46, now_ns: u64) -> SiitValue46 {
        SiitValue46 {
            src: r.new.src.to_be_bytes(),
            dst: r.new.dst.to_be_bytes(),
            l4_delta: u32::from(r.l4_delta),
            mtu_limit: r.mtu_limit,
            mtu_df: r.mtu_df,
            last_seen: now_ns,
        }
    }
}

impl Key6 {
    fn of(t: &Tuple6) -> Key6 {
        Key6 {
            src: t.src.to_be_bytes(),
            dst: t.dst.to_be_bytes(),
            sport: t.sport.to_be(),
            dport: t.dport.to_be(),
            proto: t.proto,
            pad: [0; 3],
        }
    }
}

impl Value64 {
    fn of(r: &Recipe64, now_ns: u64) -> Value64 {
        Value64 {
            src: r.new.src.to_be(),
            dst: r.new.dst.to_be(),
            sport: r.new.sport.to_be(),
            dport: r.new.dport.to_be(),
            l4_delta: u32::from(r.l4_delta),
            flags: 0,
            id_base: r.id_base,
            id_slot: r.id_slot,
            last_seen: now_ns,
        }
    }
}

impl Value46 {
    fn of(r: &Recipe46, now_ns: u64) -> Value46 {
        Value46 {
            src: r.new.src.to_be_bytes(),
            dst: r.new.dst.to_be_bytes(),
            sport: r.new.sport.to_be(),
            dport: r.new.dport.to_be(),
            l4_delta: u32::from(r.l4_delta),
            mtu_limit: r.mtu_limit,
            pad: 0,
            flags: 0,
            last_seen: now_ns,
        }
    }
}

impl Key {
    fn of(t: &Tuple4) -> Key {
        Key {
            src: t.src.to_be(),
            dst: t.dst.to_be(),
            sport: t.sport.to_be(),
            dport: t.dport.to_be(),
            proto: t.proto,
            pad: [0; 3],
        }
    }
}

impl Value {
    fn of(r: &Recipe, now_ns: u64) -> Value {
        Value {
            src: r.new.src.to_be(),
            dst: r.new.dst.to_be(),
            sport: r.new.sport.to_be(),
            dport: r.new.dport.to_be(),
            ip_delta: u32::from(r.ip_delta),
            l4_delta: u32::from(r.l4_delta),
            flags: 0,
            last_seen: now_ns,
        }
    }
}

/// The program's counters, in the order of its `enum counter`, with what each means.
pub const COUNTERS: &[(&str, &str)] = &[
    ("xdp_redirected", "Packets rewritten by a session recipe and redirected in the kernel; they never crossed the TUN device."),
    ("xdp_translated_6to4", "Of those, NAT64 packets translated from IPv6 to IPv4 (RFC 7915 5.1)."),
    ("xdp_translated_4to6", "Of those, NAT64 packets translated from IPv4 to IPv6 (RFC 7915 4.1)."),
    ("xdp_pass_not_ip", "Frames that are neither IPv4 nor IPv6 (ARP) passed to the kernel."),
    ("xdp_pass_truncated", "Frames too short for their headers passed to the kernel (which drops them)."),
    ("xdp_pass_options", "IPv4 packets with options passed to the kernel and the engine."),
    ("xdp_pass_fragment", "IPv4 fragments passed to the kernel and the engine (fragment handling is the engine's)."),
    ("xdp_pass_ttl", "Packets with TTL <= 1 passed to the kernel, which answers with ICMP Time Exceeded."),
    ("xdp_pass_proto", "Packets that are neither TCP nor UDP (ICMP among them) passed to the engine."),
    ("xdp_pass_tcp_control", "TCP segments with SYN, FIN or RST passed to the engine, which owns TCP state."),
    ("xdp_pass_no_recipe", "TCP/UDP packets without a recipe (new flows, flows the engine keeps) passed on."),
    ("xdp_pass_no_route", "Packets whose rewritten destination has no usable route passed to the kernel."),
    ("xdp_pass_no_neigh", "Packets whose next hop has no neighbour entry yet passed to the kernel, which resolves it."),
    ("xdp_pass_too_big", "Packets larger than the egress MTU passed to the kernel and the engine (fragmentation, RFC 1191)."),
    ("xdp_pass_egress", "Packets routed out of an interface the fast path is not attached to (the TUN device, another link) passed on."),
    ("xdp_pass_udp_zero", "NAT64: IPv4 UDP without a checksum passed to the engine, which computes one for IPv6 (RFC 7915 4.5)."),
    ("xdp_pass_bad_checksum", "NAT64: IPv4 packets whose header checksum does not verify passed to the engine, which drops and counts them."),
    ("xdp_pass_no_room", "NAT64: packets the driver had no headroom to grow (bpf_xdp_adjust_head) passed to the engine."),
    ("xdp_drop_policed", "Packets for the slow path (no recipe, TCP SYN/FIN/RST) dropped in XDP over [dataplane] slow_path_pps: a flood of new flows does not take the CPU from established ones."),
    ("xdp_to_afxdp", "Packets for the engine (the kernel would have routed them into the TUN device) redirected to the daemon's AF_XDP socket instead ([dataplane] slow_path = \"af_xdp\"); they cross neither the kernel's stack nor the TUN device. The afxdp_* counters say what became of them."),
    ("xdp_siit_6to4", "Of xdp_redirected, SIIT packets translated from IPv6 to IPv4 by an address pair's recipe (RFC 7915 5.1)."),
    ("xdp_siit_4to6", "Of xdp_redirected, SIIT packets translated from IPv4 to IPv6 by an address pair's recipe (RFC 7915 4.1)."),
    ("xdp_6to4_encap", "Of xdp_redirected, IPv6 packets encapsulated into 6to4's protocol 41 in XDP (RFC 3056 5.3, RFC 4213 3.5) with the engine's checks (RFC 3964 5.3.1)."),
    ("xdp_6to4_decap", "Of xdp_redirected, 6to4 protocol-41 packets decapsulated in XDP (RFC 4213 3.6) after the engine's checks (RFC 3964 5.3.1: the outer source matches the embedded 6to4 address, or is the relay)."),
    ("xdp_pass_6to4", "6to4 packets XDP leaves to the engine: a check of RFC 3964 5.3.1 failed (a spoofed or refused address: the engine drops and counts it), larger than the tunnel MTU, an outer CE mark, trailing bytes, or not routed into the TUN device."),
    ("xdp_isatap_encap", "Of xdp_redirected, IPv6 packets an ISATAP router encapsulated in XDP to the IPv4 address in the destination's interface identifier (RFC 5214 6.1, 7.1; RFC 4213 3.5)."),
    ("xdp_isatap_decap", "Of xdp_redirected, ISATAP protocol-41 packets decapsulated in XDP (RFC 4213 3.6) after the engine's check (RFC 5214 7.3: the IPv6 source's interface identifier embeds the outer IPv4 source)."),
    ("xdp_pass_isatap", "ISATAP packets XDP leaves to the engine: a check of RFC 5214 7.1 / 7.3 failed (a spoofed source, no IPv4 address in the identifier: the engine drops and counts it), Neighbor Discovery or link-local traffic (the engine's or the kernel's), larger than the tunnel MTU, an outer CE mark, trailing bytes, or not routed into the TUN device."),
];

/// A named counter value, as `xlat show stats` lists them.
#[derive(Clone, Debug)]
pub struct Count {
    pub name: &'static str,
    pub value: u64,
    pub explain: &'static str,
}

/// The daemon's own counters of its map writes, listed after the program's.
pub const WRITE_COUNTERS: &[(&str, &str)] = &[
    ("xdp_recipe_writes", "Recipes written to or removed from the XDP maps (two per offloaded session, each way)."),
    ("xdp_recipe_syscalls", "bpf(2) calls that carried them: batched per map (BPF_MAP_UPDATE_BATCH / DELETE_BATCH), so far fewer than the writes while sessions are created in bursts."),
];

/// Map writes waiting for [`FastPath::flush`]: updates and deletions per map.
struct Pending {
    up44: Batch<Key, Value>,
    del44: Batch<Key, ()>,
    up64: Batch<Key6, Value64>,
    del64: Batch<Key6, ()>,
    up46: Batch<Key, Value46>,
    del46: Batch<Key, ()>,
    up_s64: Batch<PairKey6, SiitValue64>,
    del_s64: Batch<PairKey6, ()>,
    up_s46: Batch<PairKey4, SiitValue46>,
    del_s46: Batch<PairKey4, ()>,
}

impl Pending {
    fn new() -> Pending {
        Pending {
            up44: Batch::new(false),
            del44: Batch::new(true),
            up64: Batch::new(false),
            del64: Batch::new(true),
            up46: Batch::new(false),
            del46: Batch::new(true),
            up_s64: Batch::new(false),
            del_s64: Batch::new(true),
            up_s46: Batch::new(false),
            del_s46: Batch::new(true),
        }
    }
    fn updates(&self) -> usize {
        self.up44.len() + self.up64.len() + self.up46.len() + self.up_s64.len() + self.up_s46.len()
    }
    fn deletes(&self) -> usize {
        self.del44.len()
            + self.del64.len()
            + self.del46.len()
            + self.del_s64.len()
            + self.del_s46.len()
    }
}

/// The loaded, attached program and its maps. Dropping it detaches the program.
pub struct FastPath {
    recipes: BpfHashMap<MapData, Key, Value>,
    recipes64: BpfHashMap<MapData, Key6, Value64>,
    recipes46: BpfHashMap<MapData, Key, Value46>,
    siit64s: BpfHashMap<MapData, PairKey6, SiitValue64>,
    siit46s: BpfHashMap<MapData, PairKey4, SiitValue46>,
    counters: PerCpuArray<MapData, u64>,
    _egress: DevMapHash<MapData>,
    slowcfg: Array<MapData, SlowCfg>,
    tun6to4: Array<MapData, SixToFourCfg>,
    isatap: Array<MapData, IsatapCfg>,
    /// ISATAP's configuration as written by [`FastPath::set_isatap`], for
    /// [`FastPath::hold_tunnels`] to put back.
    isatap_cfg: Option<IsatapCfg>,
    /// 6to4's configuration as written by [`FastPath::set_6to4`], for
    /// [`FastPath::hold_6to4`] to put back.
    six: Option<SixToFourCfg>,
    xsks: aya::maps::XskMap<MapData>,
    xsk_base: BpfHashMap<MapData, u32, u32>,
    policer: Array<MapData, Policer>,
    interfaces: Vec<String>,
    installed: u64,
    install_errors: u64,
    pending: Pending,
    /// Recipes written or removed, and the bpf(2) calls that did it.
    writes: u64,
    syscalls: u64,
    // Owns the program and its links: declared last so the maps go first.
    _bpf: Ebpf,
}

pub fn ifindex(name: &str) -> Result<u32> {
    let c = CString::new(name).context("interface name contains a NUL byte")?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        bail!("no interface {name:?} in this network namespace");
    }
    Ok(i)
}

/// CLOCK_MONOTONIC in nanoseconds: the clock `bpf_ktime_get_ns` reads.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// The translators a configuration runs, which decide the recipe tables that get room
/// ([`Translators::table_sizes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Translators {
    pub nat44: bool,
    pub nat64: bool,
    pub siit: bool,
}

impl Translators {
    /// Each recipe table's `max_entries`: `table_size` for the tables of the translators
    /// configured, 1 (the least a hash map may have) for the others. The kernel allocates a
    /// hash map's bucket array when the map is created (16 bytes a bucket, the entries
    /// rounded up to a power of two), and the program looks up a packet in the next table
    /// when the one before has no recipe for it: an unused table of full size costs a NAT44
    /// gateway two cache-missing lookups in its empty NAT64 and SIIT buckets for every packet
    /// of a new flow, and its memory. Translators cannot be added by a reload (restart), so
    /// the sizes hold for the daemon's life.
    pub fn table_sizes(self, table_size: u32) -> [(&'static str, u32); 5] {
        let size = |on: bool| if on { table_size.max(1) } else { 1 };
        [
            ("recipes", size(self.nat44)),
            ("recipes64", size(self.nat64)),
            ("recipes46", size(self.nat64)),
            ("siit64s", size(self.siit)),
            ("siit46s", size(self.siit)),
        ]
    }
}

impl FastPath {
    /// Loads the program with room for `table_size` recipes in each table `translators`
    /// use ([`Translators::table_sizes`]) and attaches it to each of `interfaces` (native
    /// mode where the driver has it), which also become the only interfaces it redirects
    /// to. `slow_path_pps` (per CPU, at most [`MAX_SLOW_PATH_PPS`]; 0 = no limit) polices
    /// what goes to the engine: see `policer` in the C source.
    pub fn attach(
        interfaces: &[String],
        table_size: u32,
        translators: Translators,
        slow_path_pps: u32,
    ) -> Result<FastPath> {
        if !built() {
            bail!(
                "this xlat was built without the XDP program (clang-14 was missing at build time)"
            );
        }
        let mut loader = EbpfLoader::new();
        for (map, size) in translators.table_sizes(table_size) {
            loader.map_max_entries(map, size);
        }
        let mut bpf = loader
            .load(OBJECT)
            .context("loading the XDP program and its maps")?;
        let mut policer: Array<MapData, Policer> = bpf
            .take_map("policer")
            .context("the program has no `policer` map")?
            .try_into()
            .context("the `policer` map")?;
        policer
            .set(0, Policer::of(slow_path_pps), 0)
            .context("configuring the slow-path policer")?;
        let mut egress: DevMapHash<MapData> = bpf
            .take_map("egress")
            .context("the program has no `egress` map")?
            .try_into()
            .context("the `egress` map")?;
        for name in interfaces {
            let i = ifindex(name)?;
            egress
                .insert(i, i, None, 0)
                .with_context(|| format!("adding {name} to the egress map"))?;
        }
        let prog: &mut Xdp = bpf
            .program_mut("xlat_fast")
            .context("the object has no xlat_fast program")?
            .try_into()
            .context("xlat_fast is not an XDP program")?;
        prog.load()
            .context("the kernel refused the XDP program (verifier)")?;
        for name in interfaces {
            prog.attach(name, XdpMode::Default)
                .with_context(|| format!("attaching the XDP program to {name}"))?;
        }
        let recipes = bpf
            .take_map("recipes")
            .context("the program has no `recipes` map")?
            .try_into()
            .context("the `recipes` map")?;
        let recipes64 = bpf
            .take_map("recipes64")
            .context("the program has no `recipes64` map")?
            .try_into()
            .context("the `recipes64` map")?;
        let recipes46 = bpf
            .take_map("recipes46")
            .context("the program has no `recipes46` map")?
            .try_into()
            .context("the `recipes46` map")?;
        let siit64s = bpf
            .take_map("siit64s")
            .context("the program has no `siit64s` map")?
            .try_into()
            .context("the `siit64s` map")?;
        let siit46s = bpf
            .take_map("siit46s")
            .context("the program has no `siit46s` map")?
            .try_into()
            .context("the `siit46s` map")?;
        let counters = bpf
            .take_map("counters")
            .context("the program has no `counters` map")?
            .try_into()
            .context("the `counters` map")?;
        let slowcfg = bpf
            .take_map("slowcfg")
            .context("the program has no `slowcfg` map")?
            .try_into()
            .context("the `slowcfg` map")?;
        let tun6to4 = bpf
            .take_map("tun6to4")
            .context("the program has no `tun6to4` map")?
            .try_into()
            .context("the `tun6to4` map")?;
        let isatap = bpf
            .take_map("isatap")
            .context("the program has no `isatap` map")?
            .try_into()
            .context("the `isatap` map")?;
        let xsks = bpf
            .take_map("xsks")
            .context("the program has no `xsks` map")?
            .try_into()
            .context("the `xsks` map")?;
        let xsk_base = bpf
            .take_map("xsk_base")
            .context("the program has no `xsk_base` map")?
            .try_into()
            .context("the `xsk_base` map")?;
        Ok(FastPath {
            policer,
            slowcfg,
            tun6to4,
            six: None,
            isatap,
            isatap_cfg: None,
            xsks,
            xsk_base,
            recipes,
            recipes64,
            recipes46,
            siit64s,
            siit46s,
            counters,
            _egress: egress,
            interfaces: interfaces.to_vec(),
            installed: 0,
            install_errors: 0,
            pending: Pending::new(),
            writes: 0,
            syscalls: 0,
            _bpf: bpf,
        })
    }

    /// The interfaces the program is attached to.
    pub fn interfaces(&self) -> &[String] {
        &self.interfaces
    }

    /// A new `slow_path_pps` (a reload): the program polices with it from its next packet
    /// (one map write; each CPU's bucket keeps the tokens it has, capped by the new burst).
    pub fn set_slow_path_pps(&mut self, slow_path_pps: u32) -> Result<()> {
        self.policer
            .set(0, Policer::of(slow_path_pps), 0)
            .context("configuring the slow-path policer")
    }

    /// Turns the AF_XDP slow path on: `sockets` (bound to one of [`FastPath::interfaces`]
    /// and a queue below [`MAX_QUEUES`] each) receive what the kernel would route into the
    /// TUN device `tun_ifindex` (see the C source). Sockets go in before the switch, so no
    /// packet is redirected to a queue without one (it would pass anyway: the redirect's
    /// fallback is XDP_PASS).
    pub fn enable_slow_path(&mut self, tun_ifindex: u32, sockets: &[&xsk::Xsk]) -> Result<()> {
        for (slot, name) in self.interfaces.iter().enumerate() {
            let i = ifindex(name)?;
            let base = u32::try_from(slot)
                .ok()
                .and_then(|s| s.checked_mul(MAX_QUEUES))
                .context("too many interfaces")?;
            self.xsk_base
                .insert(i, base, 0)
                .with_context(|| format!("adding {name} to the xsk_base map"))?;
            for s in sockets.iter().filter(|s| s.ifindex() == i) {
                if s.queue() >= MAX_QUEUES {
                    bail!(
                        "{name}: queue {} is past the {MAX_QUEUES} served",
                        s.queue()
                    );
                }
                self.xsks
                    .set(base + s.queue(), s.as_raw_fd(), 0)
                    .with_context(|| format!("adding {name}'s queue {} socket", s.queue()))?;
            }
        }
        let cfg = SlowCfg {
            tun_ifindex,
            pad: 0,
        };
        self.slowcfg
            .set(0, cfg, 0)
            .context("switching the AF_XDP slow path on")?;
        Ok(())
    }

    /// Turns 6to4 on in the program (issue 25): protocol 41 to `x.ipv4` is decapsulated and,
    /// as `x` says, IPv6 for the tunnel encapsulated in XDP with the engine's checks, when
    /// the kernel would route the packet into the TUN device `tun_ifindex` (see `tun6to4` in
    /// the C source; `routes` says whether it must be asked to decapsulate). One map write;
    /// stateless, so nothing follows per packet or flow.
    pub fn set_6to4(
        &mut self,
        x: &XdpSixToFour,
        tun_ifindex: u32,
        routes: TunnelRoutes,
    ) -> Result<()> {
        let c = SixToFourCfg::of(x, tun_ifindex, routes)?;
        self.tun6to4
            .set(0, c, 0)
            .context("writing 6to4's configuration into the XDP program")?;
        self.six = Some(c);
        Ok(())
    }

    /// Turns an ISATAP router on in the program (issue 25): protocol 41 to `x.ipv4` from ISATAP
    /// hosts is decapsulated and, as `x` says, IPv6 to the advertised /64 encapsulated to the
    /// IPv4 address in the destination's identifier, in XDP with the engine's checks, when the
    /// kernel would route the packet into the TUN device `tun_ifindex` (see `isatap` in the C
    /// source; `routes` as for [`FastPath::set_6to4`]). One map write; stateless, so nothing
    /// follows per packet or flow.
    pub fn set_isatap(
        &mut self,
        x: &XdpIsatap,
        tun_ifindex: u32,
        routes: TunnelRoutes,
    ) -> Result<()> {
        let c = IsatapCfg::of(x, tun_ifindex, routes);
        self.isatap
            .set(0, c, 0)
            .context("writing ISATAP's configuration into the XDP program")?;
        self.isatap_cfg = Some(c);
        Ok(())
    }

    /// `xlat trace`: with `held`, the tunnels (6to4, ISATAP) leave XDP (every tunnel packet
    /// reaches the engine, which traces it) until called again without; stateless, so
    /// nothing else changes. Nothing to do for a tunnel XDP does not carry.
    pub fn hold_tunnels(&mut self, held: bool) -> Result<()> {
        if let Some(c) = self.six {
            let c = if held { SixToFourCfg::default() } else { c };
            self.tun6to4
                .set(0, c, 0)
                .context("switching 6to4 in the XDP program")?;
        }
        if let Some(c) = self.isatap_cfg {
            let c = if held { IsatapCfg::default() } else { c };
            self.isatap
                .set(0, c, 0)
                .context("switching ISATAP in the XDP program")?;
        }
        Ok(())
    }

    /// Carries out an `Install` or `Remove` at once (one system call per map touched);
    /// `Query` is the caller's (see [`FastPath::last_seen`]). [`FastPath::stage`] and
    /// [`FastPath::flush`] do the same for many ops in a few calls.
    pub fn apply(&mut self, op: &OffloadOp, now_ns: u64) {
        self.stage(op, now_ns);
        self.flush();
    }

    /// Queues an `Install` or `Remove` for the next [`FastPath::flush`] (`Query` is the
    /// caller's: flush first, so that it reads what was staged before it). Installing after
    /// queued removals, or removing after queued installs, flushes those first, so the maps
    /// see the ops in their order.
    pub fn stage(&mut self, op: &OffloadOp, now_ns: u64) {
        let install = match op.kind {
            OffloadKind::Install => true,
            OffloadKind::Remove => false,
            OffloadKind::Query => return,
        };
        let p = &self.pending;
        if (install && p.deletes() > 0) || (!install && p.updates() > 0) {
            self.flush();
        }
        let p = &mut self.pending;
        match (&op.recipes, install) {
            (Recipes::Nat44 { out, inb }, true) => {
                for r in [out, inb] {
                    p.up44.update(Key::of(&r.key), Value::of(r, now_ns));
                }
            }
            (Recipes::Nat44 { out, inb }, false) => {
                for r in [out, inb] {
                    p.del44.delete(Key::of(&r.key));
                }
            }
            (Recipes::Nat64 { out, inb }, true) => {
                p.up64.update(Key6::of(&out.key), Value64::of(out, now_ns));
                p.up46.update(Key::of(&inb.key), Value46::of(inb, now_ns));
            }
            (Recipes::Nat64 { out, inb }, false) => {
                p.del64.delete(Key6::of(&out.key));
                p.del46.delete(Key::of(&inb.key));
            }
            (Recipes::Siit64(r), true) => {
                p.up_s64
                    .update(PairKey6::of(&r.key), SiitValue64::of(r, now_ns));
            }
            (Recipes::Siit64(r), false) => p.del_s64.delete(PairKey6::of(&r.key)),
            (Recipes::Siit46(r), true) => {
                p.up_s46
                    .update(PairKey4::of(&r.key), SiitValue46::of(r, now_ns));
            }
            (Recipes::Siit46(r), false) => p.del_s46.delete(PairKey4::of(&r.key)),
        }
    }

    /// Applies the staged writes: one bpf(2) call per map that has any (more only where
    /// the kernel refuses an element). A full table leaves a session with the engine: its
    /// packets keep crossing the TUN device, which is slower but correct.
    pub fn flush(&mut self) {
        let p = &mut self.pending;
        let mut ins = Flushed::default();
        let mut del = Flushed::default();
        let add = |acc: &mut Flushed, f: Flushed| {
            acc.done += f.done;
            acc.failed += f.failed;
            acc.calls += f.calls;
        };
        if !p.del44.is_empty() {
            add(&mut del, p.del44.flush(self.recipes.map().fd().as_fd()));
        }
        if !p.del64.is_empty() {
            add(&mut del, p.del64.flush(self.recipes64.map().fd().as_fd()));
        }
        if !p.del46.is_empty() {
            add(&mut del, p.del46.flush(self.recipes46.map().fd().as_fd()));
        }
        if !p.del_s64.is_empty() {
            add(&mut del, p.del_s64.flush(self.siit64s.map().fd().as_fd()));
        }
        if !p.del_s46.is_empty() {
            add(&mut del, p.del_s46.flush(self.siit46s.map().fd().as_fd()));
        }
        if !p.up44.is_empty() {
            add(&mut ins, p.up44.flush(self.recipes.map().fd().as_fd()));
        }
        if !p.up64.is_empty() {
            add(&mut ins, p.up64.flush(self.recipes64.map().fd().as_fd()));
        }
        if !p.up46.is_empty() {
            add(&mut ins, p.up46.flush(self.recipes46.map().fd().as_fd()));
        }
        if !p.up_s64.is_empty() {
            add(&mut ins, p.up_s64.flush(self.siit64s.map().fd().as_fd()));
        }
        if !p.up_s46.is_empty() {
            add(&mut ins, p.up_s46.flush(self.siit46s.map().fd().as_fd()));
        }
        self.installed = self.installed.saturating_add(ins.done);
        self.install_errors = self.install_errors.saturating_add(ins.failed);
        self.installed = self.installed.saturating_sub(del.done);
        self.writes = self.writes.saturating_add(ins.done + del.done);
        self.syscalls = self.syscalls.saturating_add(ins.calls + del.calls);
    }

    /// When the program last matched the session's outbound and inbound recipes
    /// (CLOCK_MONOTONIC ns; the install time if never).
    pub fn last_seen(&self, op: &OffloadOp) -> (Option<u64>, Option<u64>) {
        let v4 = |r: &Recipe| {
            self.recipes
                .get(&Key::of(&r.key), 0)
                .ok()
                .map(|v| v.last_seen)
        };
        match &op.recipes {
            Recipes::Nat44 { out, inb } => (v4(out), v4(inb)),
            Recipes::Nat64 { out, inb } => (
                self.recipes64
                    .get(&Key6::of(&out.key), 0)
                    .ok()
                    .map(|v| v.last_seen),
                self.recipes46
                    .get(&Key::of(&inb.key), 0)
                    .ok()
                    .map(|v| v.last_seen),
            ),
            // SIIT: one direction, answered as the outbound one.
            Recipes::Siit64(r) => (
                self.siit64s
                    .get(&PairKey6::of(&r.key), 0)
                    .ok()
                    .map(|v| v.last_seen),
                None,
            ),
            Recipes::Siit46(r) => (
                self.siit46s
                    .get(&PairKey4::of(&r.key), 0)
                    .ok()
                    .map(|v| v.last_seen),
                None,
            ),
        }
    }

    /// Recipes in the table.
    pub fn recipes(&self) -> u64 {
        self.installed
    }

    /// Recipes the kernel refused (table full).
    pub fn install_errors(&self) -> u64 {
        self.install_errors
    }

    /// The program's counters summed over CPUs, then the daemon's map writes
    /// ([`WRITE_COUNTERS`]).
    pub fn counters(&self) -> Vec<Count> {
        let mut all: Vec<Count> = COUNTERS
            .iter()
            .enumerate()
            .map(|(i, &(name, explain))| Count {
                name,
                value: u32::try_from(i)
                    .ok()
                    .and_then(|i| self.counters.get(&i, 0).ok())
                    .map(|v| v.iter().sum())
                    .unwrap_or(0),
                explain,
            })
            .collect();
        for (&(name, explain), value) in WRITE_COUNTERS.iter().zip([self.writes, self.syscalls]) {
            all.push(Count {
                name,
                value,
                explain,
            });
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xlat_engine::tunnel::TunnelParams;

    /// Only the configured translators' tables get room; every name is a map of the program.
    #[test]
    fn recipe_tables_get_room_only_for_the_translators_configured() {
        let nat44 = Translators {
            nat44: true,
            ..Translators::default()
        };
        assert_eq!(
            nat44.table_sizes(1 << 20),
            [
                ("recipes", 1 << 20),
                ("recipes64", 1),
                ("recipes46", 1),
                ("siit64s", 1),
                ("siit46s", 1)
            ]
        );
        let nat64_siit = Translators {
            nat64: true,
            siit: true,
            ..Translators::default()
        };
        let sizes: Vec<u32> = nat64_siit.table_sizes(4096).iter().map(|t| t.1).collect();
        assert_eq!(sizes, [1, 4096, 4096, 4096, 4096]);
        // A size of 0 (never accepted by the config) still makes a valid map.
        assert!(Translators::default()
            .table_sizes(0)
            .iter()
            .all(|t| t.1 == 1));
        if built() {
            for (map, _) in nat44.table_sizes(1) {
                assert!(
                    OBJECT
                        .windows(map.len() + 1)
                        .any(|w| w[..map.len()] == *map.as_bytes() && w[map.len()] == 0),
                    "{map} is not a map name in the XDP object"
                );
            }
        }
    }

    /// The C program reads the addresses in network byte order and the flags as `T_*`.
    #[test]
    fn sixtofour_config_layout() {
        let x = XdpSixToFour {
            ipv4: 0xc612_0001,
            relay: Some(0xc612_0909),
            relay_router: true,
            params: TunnelParams {
                mtu: 1480,
                ttl: 64,
                pmtud: true,
            },
            encap: true,
            encap_relay: true,
        };
        let c = SixToFourCfg::of(&x, 7, TunnelRoutes::Daemon).unwrap();
        assert_eq!(c.v4.to_ne_bytes(), [198, 18, 0, 1]);
        assert_eq!(c.relay.to_ne_bytes(), [198, 18, 9, 9]);
        assert_eq!((c.tun_ifindex, c.mtu, c.ttl), (7, 1480, 64));
        let all = T_RELAY_ROUTER | T_PMTUD | T_ENCAP | T_ENCAP_RELAY;
        assert_eq!(c.flags, all | T_OWN_ROUTE);
        let c = SixToFourCfg::of(&x, 7, TunnelRoutes::Operator).unwrap();
        assert_eq!(
            c.flags, all,
            "the operator routes: the program asks the kernel"
        );
        // 10.0.0.0/8 is refused, as bytes on the wire.
        assert!(c
            .refused_net
            .iter()
            .zip(c.refused_mask)
            .any(|(n, m)| n.to_ne_bytes() == [10, 0, 0, 0] && m.to_ne_bytes() == [255, 0, 0, 0]));
        let none = XdpSixToFour {
            relay: None,
            relay_router: false,
            encap: false,
            ..x
        };
        let c = SixToFourCfg::of(&none, 7, TunnelRoutes::Operator).unwrap();
        assert_eq!((c.relay, c.flags), (0, T_PMTUD));
    }

    /// The C program reads the address in network byte order, the prefix as its first eight
    /// bytes on the wire and the flags as `T_*`; its struct is 24 bytes without padding.
    #[test]
    fn isatap_config_layout() {
        assert_eq!(std::mem::size_of::<IsatapCfg>(), 24);
        let x = XdpIsatap {
            ipv4: 0xc612_0001,
            prefix: 0x2001_0002_0000_0005 << 64,
            params: TunnelParams {
                mtu: 1480,
                ttl: 64,
                pmtud: true,
            },
            encap: true,
        };
        let c = IsatapCfg::of(&x, 9, TunnelRoutes::Operator);
        assert_eq!(c.v4.to_ne_bytes(), [198, 18, 0, 1]);
        assert_eq!(c.prefix, [0x20, 0x01, 0, 2, 0, 0, 0, 5]);
        assert_eq!((c.tun_ifindex, c.mtu, c.ttl, c.ident), (9, 1480, 64, 0));
        assert_eq!(c.flags, T_PMTUD | T_ENCAP);
        let c = IsatapCfg::of(
            &XdpIsatap {
                params: TunnelParams {
                    mtu: 1400,
                    ttl: 9,
                    pmtud: false,
                },
                encap: false,
                ..x
            },
            9,
            TunnelRoutes::Daemon,
        );
        assert_eq!((c.mtu, c.ttl, c.flags), (1400, 9, T_OWN_ROUTE));
    }

    /// [`super::COUNTERS`] is read by index from the program's per-CPU array: its order must
    /// be the C `enum counter`'s, name for name (`C_PASS_NO_ROUTE` is `xdp_pass_no_route`).
    /// A counter added on one side only fails here, not as a shifted column in production.
    #[test]
    fn counter_names_follow_the_c_enum() {
        let src = include_str!("../bpf/xlat_fast.bpf.c");
        let body = src
            .split("enum counter {")
            .nth(1)
            .and_then(|s| s.split('}').next())
            .unwrap_or_default();
        let c_names: Vec<String> = body
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && *n != "C_MAX")
            .map(|n| format!("xdp_{}", n.trim_start_matches("C_").to_ascii_lowercase()))
            .collect();
        assert!(c_names.len() > 10, "enum counter not found: {c_names:?}");
        let rust: Vec<&str> = super::COUNTERS.iter().map(|(n, _)| *n).collect();
        assert_eq!(c_names, rust);
    }

    /// The tunnels' `T_*` flags are the C program's `#define`s, bit for bit.
    #[test]
    fn tunnel_flags_follow_the_c_defines() {
        let src = include_str!("../bpf/xlat_fast.bpf.c");
        let define = |name: &str| -> Option<u8> {
            src.lines()
                .find_map(|l| {
                    l.strip_prefix("#define ")?
                        .strip_prefix(name)?
                        .split_whitespace()
                        .next()
                })
                .and_then(|v| v.parse().ok())
        };
        for (name, v) in [
            ("T_RELAY_ROUTER", T_RELAY_ROUTER),
            ("T_PMTUD", T_PMTUD),
            ("T_ENCAP", T_ENCAP),
            ("T_ENCAP_RELAY", T_ENCAP_RELAY),
            ("T_OWN_ROUTE", T_OWN_ROUTE),
        ] {
            assert_eq!(define(name), Some(v), "{name}");
        }
    }
}
