//! Session recipes for a fast path (issue 6: XDP applies them in the kernel).
//!
//! The engine stays the only authority over sessions. When the daemon enables offload
//! ([`crate::Engine::set_offload`]), a session simple enough to be rewritten without the engine
//! -- NAT44 or NAT64, UDP, or TCP in the established state (RFC 6146 3.5.2.2), not
//! hairpinned -- yields one recipe per direction: the tuple its packets carry on arrival, the
//! tuple (NAT64: the other family's header) to write, and the RFC 1624 checksum adjustment of
//! the transport header, which is constant per session because the rewrite is (RFC 7915 4.5,
//! 5.5: the pseudo-header change is the addresses' alone; its length and protocol words are
//! the same in both families). A UDP session is promoted once it has proven itself: at its
//! Nth packet, or its first reply ([`crate::Engine::set_offload_after`]; 1, the engine's
//! default, is at once; the daemon's default is 2), as a flow-offload table takes only flows
//! conntrack has seen both ways -- a one-packet flow costs no install and no withdrawal.
//! The daemon drains [`OffloadOp`]s after each batch and installs or withdraws the
//! recipes; a fast path applies them to established packets only and hands everything else
//! (TCP SYN/FIN/RST, fragments, options, ICMP, misses) to the engine as before.
//!
//! Expiry: a fast path stamps when a recipe last matched. A session the engine would expire
//! is not removed at once: the engine emits [`OffloadKind::Query`] and the daemon answers
//! with the stamps ([`crate::Engine::offload_seen`]); the engine then refreshes the session
//! (RFC 4787 REQ-6 / RFC 6146 3.5.2.2 refresh rules: outbound always, inbound where they
//! allow) or removes it and withdraws its recipes. Timeouts are minimums (RFC 4787 REQ-5):
//! a session may outlive its timeout by the time the sweep takes to reach it, never less.
//!
//! SIIT (issue 25) has no sessions: its recipes ([`SiitRecipe64`], [`SiitRecipe46`]) are
//! keyed by a packet's addresses and protocol, ports kept, one direction each, installed
//! when SIIT's lane translates a pair's packet and expired like sessions' (`siit/fastpath.rs`
//! says how); they come out of [`crate::Engine::drain_offload`], not the event stream.
//!
//! [`apply`] is the reference model of what a fast path does with a recipe ([`apply64`],
//! [`apply46`] for NAT64, [`apply_siit64`], [`apply_siit46`] for SIIT); the tests check it
//! against the engine's own translation, and the XDP program (crates/xdp) follows it.

use xlat_wire::field::{set_u16, set_u32, set_u8, u16_at, u32_at, u8_at};
use xlat_wire::ipv4::{off as ip4off, proto as ipproto};
use xlat_wire::l4::{tcp, udp};
use xlat_wire::Delta;

use crate::flow::{Endpoint, Proto};
use crate::rewrite::{
    delta46, delta64, ip_proto, l4_csum, l4_csum_off, write_ipv4_header, write_ipv6_header,
};
pub use crate::rewrite::{Tuple4, Tuple6};

/// What a fast path does to a packet whose tuple is `key`: write `new`, decrement the TTL,
/// add `ip_delta` and `l4_delta` to the checksums (RFC 1624 eqn. 3: `~(~HC + delta)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recipe {
    pub key: Tuple4,
    pub new: Tuple4,
    /// Adjustment of the IPv4 header checksum: addresses and the TTL decrement.
    pub ip_delta: u16,
    /// Adjustment of the TCP/UDP checksum: pseudo-header addresses and ports.
    pub l4_delta: u16,
}

/// What the daemon must do with a session's recipes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OffloadKind {
    /// Install both recipes (replacing any with the same keys).
    Install,
    /// Withdraw both recipes.
    Remove,
    /// Read when each recipe last matched and answer with [`crate::Engine::offload_seen`].
    Query,
}

/// NAT64 outbound (RFC 7915 5.1): an IPv6 packet with tuple `key` becomes an IPv4 packet
/// with tuple `new` -- TOS = traffic class, TTL = hop limit - 1, protocol = next header, a
/// fresh header checksum; up to 1260 bytes DF clear and identification `id_base` plus the
/// fast path's counter `id_slot` (RFC 7739 5.3, see `ipv4_id`), above it DF set and
/// identification 0 -- and `l4_delta` added to its TCP/UDP checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recipe64 {
    pub key: Tuple6,
    pub new: Tuple4,
    pub l4_delta: u16,
    pub id_base: u16,
    pub id_slot: u16,
}

/// NAT64 inbound (RFC 7915 4.1): an IPv4 packet with tuple `key` becomes an IPv6 packet with
/// tuple `new` -- traffic class = TOS, flow label 0, hop limit = TTL - 1, next header =
/// protocol -- and `l4_delta` added to its TCP/UDP checksum. Packets without DF longer than
/// `mtu_limit` once translated (they must be fragmented), and UDP without a checksum (one
/// must be computed, RFC 7915 4.5), stay with the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recipe46 {
    pub key: Tuple4,
    pub new: Tuple6,
    pub l4_delta: u16,
    /// The lowest IPv6 MTU (or the link MTU if lower): RFC 7915 4.1's fragmentation limit.
    pub mtu_limit: u16,
}

/// The addresses and protocol of an IPv4 packet: a SIIT recipe's key (its ports are kept,
/// whatever they are).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pair4 {
    /// IP protocol number (TCP 6, UDP 17).
    pub proto: u8,
    pub src: u32,
    pub dst: u32,
}

/// [`Pair4`] for IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pair6 {
    /// Next header (TCP 6, UDP 17), with no extension headers before it.
    pub proto: u8,
    pub src: u128,
    pub dst: u128,
}

/// SIIT IPv6 -> IPv4 (RFC 7915 5.1, 5.5), stateless: every TCP/UDP packet of `key` (no
/// extension headers, hop limit above 1, the transport header whole) becomes an IPv4 packet
/// from `new.src` to `new.dst` (the addresses SIIT's mapping gives: EAM, RFC 7757 3.2, else
/// the pref64, RFC 6052 2.3), ports kept, the header written as for [`Recipe64`] (TOS,
/// TTL = hop limit - 1, DF and identification by RFC 7915 5.1 from `id_base` and the counter
/// `id_slot`), `l4_delta` added to the transport checksum -- the addresses' change alone,
/// the same for every port and for TCP and UDP. Packets longer than `mtu_limit` as IPv4
/// stay with the engine (5.1: Packet Too Big).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiitRecipe64 {
    pub key: Pair6,
    pub new: Pair4,
    pub l4_delta: u16,
    pub id_base: u16,
    pub id_slot: u16,
    /// The next hop's MTU (`tun.mtu`, at most 65535): the longest IPv4 packet made here.
    pub mtu_limit: u16,
}

/// SIIT IPv4 -> IPv6 (RFC 7915 4.1, 4.5): every TCP/UDP packet of `key` (no options, not a
/// fragment, TTL above 1, a good header checksum, a UDP checksum present) becomes an IPv6
/// packet from `new.src` to `new.dst` (EAM, else the pref64: RFC 7757 3.2, RFC 6052 2.2),
/// ports kept, the header written as for [`Recipe46`]. Packets longer as IPv6 than
/// `mtu_limit` without DF (4.1: fragmented) or than `mtu_df` with it (4.1: Fragmentation
/// Needed) stay with the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiitRecipe46 {
    pub key: Pair4,
    pub new: Pair6,
    pub l4_delta: u16,
    /// The lowest IPv6 MTU or the next hop's, whichever is lower.
    pub mtu_limit: u16,
    /// The next hop's MTU (`tun.mtu`, at most 65535).
    pub mtu_df: u16,
}

/// What an op carries: a session's two recipes (inside to outside `out`, outside to inside
/// `inb`), or one SIIT recipe (one direction of an address pair; SIIT has no sessions, each
/// direction is offloaded when the engine translates it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipes {
    Nat44 { out: Recipe, inb: Recipe },
    Nat64 { out: Recipe64, inb: Recipe46 },
    Siit64(SiitRecipe64),
    Siit46(SiitRecipe46),
}

/// One instruction for the fast path: a session's two recipes and what to do with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffloadOp {
    pub kind: OffloadKind,
    /// Names the session in [`crate::Engine::offload_seen`].
    pub token: u64,
    pub recipes: Recipes,
}

impl OffloadOp {
    /// The NAT44 recipes (out, in), if this is a NAT44 session.
    pub fn nat44(&self) -> Option<(&Recipe, &Recipe)> {
        match &self.recipes {
            Recipes::Nat44 { out, inb } => Some((out, inb)),
            _ => None,
        }
    }
    /// The NAT64 recipes (out, in), if this is a NAT64 session.
    pub fn nat64(&self) -> Option<(&Recipe64, &Recipe46)> {
        match &self.recipes {
            Recipes::Nat64 { out, inb } => Some((out, inb)),
            _ => None,
        }
    }
    /// The SIIT IPv6 -> IPv4 recipe, if this is one.
    pub fn siit64(&self) -> Option<&SiitRecipe64> {
        match &self.recipes {
            Recipes::Siit64(r) => Some(r),
            _ => None,
        }
    }
    /// The SIIT IPv4 -> IPv6 recipe, if this is one.
    pub fn siit46(&self) -> Option<&SiitRecipe46> {
        match &self.recipes {
            Recipes::Siit46(r) => Some(r),
            _ => None,
        }
    }
}

/// Token bit that marks a NAT64 session (the low 32 bits are the session id).
pub const TOKEN_NAT64: u64 = 1 << 32;

/// Token bit that marks a SIIT recipe (the low 32 bits are its slot in the engine's table).
pub const TOKEN_SIIT: u64 = 1 << 33;

/// The SIIT recipe of IPv6 -> IPv4 for `key` -> `new` (RFC 7915 5.5): the checksum delta
/// is `delta64`'s (NAT64's) with the ports unchanged, whose words add ~p + p = 0xffff each whatever
/// p is, so one value serves every port pair and the lane's own computation gives it too.
pub fn siit64_recipe(
    key: Pair6,
    new: Pair4,
    (id_base, id_slot): (u16, u16),
    mtu_limit: u16,
) -> SiitRecipe64 {
    let k = Tuple6 {
        proto: key.proto,
        src: key.src,
        dst: key.dst,
        sport: 0,
        dport: 0,
    };
    let n = Tuple4 {
        proto: key.proto,
        src: new.src,
        dst: new.dst,
        sport: 0,
        dport: 0,
    };
    SiitRecipe64 {
        key,
        new,
        l4_delta: delta64(&k, &n).folded(),
        id_base,
        id_slot,
        mtu_limit,
    }
}

/// [`siit64_recipe`]'s twin, IPv4 -> IPv6 (RFC 7915 4.5).
pub fn siit46_recipe(key: Pair4, new: Pair6, (mtu_limit, mtu_df): (u16, u16)) -> SiitRecipe46 {
    let k = Tuple4 {
        proto: key.proto,
        src: key.src,
        dst: key.dst,
        sport: 0,
        dport: 0,
    };
    let n = Tuple6 {
        proto: key.proto,
        src: new.src,
        dst: new.dst,
        sport: 0,
        dport: 0,
    };
    SiitRecipe46 {
        key,
        new,
        l4_delta: delta46(&k, &n).folded(),
        mtu_limit,
        mtu_df,
    }
}

/// The TTL/protocol word drops by 0x0100 at a router hop (RFC 1812 5.3.1): ~m + m' with
/// m' = m - 0x0100 is the same whatever m is.
fn ttl_decrement() -> Delta {
    Delta::ZERO.word(0x0100, 0)
}

fn recipe(proto: u8, key: Tuple4, new: Tuple4) -> Recipe {
    let addrs = Delta::ZERO.addr(key.src, new.src).addr(key.dst, new.dst);
    Recipe {
        key,
        new,
        ip_delta: addrs.plus(ttl_decrement()).folded(),
        l4_delta: addrs
            .word(key.sport, new.sport)
            .word(key.dport, new.dport)
            .folded(),
    }
    .with_proto(proto)
}

impl Recipe {
    fn with_proto(mut self, proto: u8) -> Recipe {
        self.key.proto = proto;
        self.new.proto = proto;
        self
    }
}

/// The two recipes of a NAT44 NAPT session: `int` <-> `ext` towards `remote` (RFC 3022 4.1:
/// outbound rewrites the source, inbound the destination, with their checksums).
pub fn nat44_recipes(
    proto: Proto,
    int: Endpoint,
    ext: Endpoint,
    remote: Endpoint,
) -> (Recipe, Recipe) {
    let p = ip_proto(proto);
    let t = |src: Endpoint, dst: Endpoint| Tuple4 {
        proto: p,
        src: src.addr,
        dst: dst.addr,
        sport: src.port,
        dport: dst.port,
    };
    (
        recipe(p, t(int, remote), t(ext, remote)),
        recipe(p, t(remote, ext), t(remote, int)),
    )
}

/// The two recipes of a NAT64 session (RFC 6146): the IPv6 host `int` reaches the IPv4 host
/// `remote` through `ext`; `remote6` is the remote's pref64 form (RFC 6052). The checksum
/// deltas are those of RFC 7915 4.5 / 5.5, computed as the engine's header translation does.
pub fn nat64_recipes(
    proto: Proto,
    int: Endpoint<u128>,
    ext: Endpoint,
    remote: Endpoint,
    remote6: u128,
    mtu_limit: u16,
    (id_base, id_slot): (u16, u16),
) -> (Recipe64, Recipe46) {
    let p = ip_proto(proto);
    let out_key = Tuple6 {
        proto: p,
        src: int.addr,
        dst: remote6,
        sport: int.port,
        dport: remote.port,
    };
    let out_new = Tuple4 {
        proto: p,
        src: ext.addr,
        dst: remote.addr,
        sport: ext.port,
        dport: remote.port,
    };
    let in_key = Tuple4 {
        proto: p,
        src: remote.addr,
        dst: ext.addr,
        sport: remote.port,
        dport: ext.port,
    };
    let in_new = Tuple6 {
        proto: p,
        src: remote6,
        dst: int.addr,
        sport: remote.port,
        dport: int.port,
    };
    (
        Recipe64 {
            key: out_key,
            new: out_new,
            l4_delta: delta64(&out_key, &out_new).folded(),
            id_base,
            id_slot,
        },
        Recipe46 {
            key: in_key,
            new: in_new,
            l4_delta: delta46(&in_key, &in_new).folded(),
            mtu_limit,
        },
    )
}

/// The tuple of an IPv4 TCP/UDP packet a fast path would consider: no options, not a
/// fragment, TTL above 1, TCP without SYN/FIN/RST. `None` for anything else.
pub fn fast_tuple(pkt: &[u8]) -> Option<Tuple4> {
    tuple4(pkt, true)
}

/// [`fast_tuple`] with TCP's SYN/FIN/RST allowed (`control` false: SIIT keeps no TCP state).
fn tuple4(pkt: &[u8], control: bool) -> Option<Tuple4> {
    let vihl = u8_at(pkt, 0)?;
    if vihl != 0x45 {
        return None;
    }
    if u16_at(pkt, ip4off::FLAGS_FRAG)? & 0x3fff != 0 || u8_at(pkt, ip4off::TTL)? <= 1 {
        return None;
    }
    let proto = u8_at(pkt, ip4off::PROTO)?;
    let l4 = 20;
    match proto {
        ipproto::TCP => {
            let flags = u8_at(pkt, l4 + tcp::FLAGS)?;
            if control && flags & (tcp::SYN | tcp::FIN | tcp::RST) != 0 {
                return None;
            }
            u16_at(pkt, l4 + tcp::CHECKSUM)?;
        }
        ipproto::UDP => {
            u16_at(pkt, l4 + udp::CHECKSUM)?;
        }
        _ => return None,
    }
    Some(Tuple4 {
        proto,
        src: u32_at(pkt, ip4off::SRC)?,
        dst: u32_at(pkt, ip4off::DST)?,
        sport: u16_at(pkt, l4)?,
        dport: u16_at(pkt, l4 + 2)?,
    })
}

/// Applies `r` to an IPv4 packet (no link header) the way the XDP program does; false (and
/// the packet untouched) when the packet is not one a fast path handles or not `r`'s.
pub fn apply(r: &Recipe, pkt: &mut [u8]) -> bool {
    if fast_tuple(pkt) != Some(r.key) {
        return false;
    }
    let (Some(ttl), Some(ipck)) = (u8_at(pkt, ip4off::TTL), u16_at(pkt, ip4off::CHECKSUM)) else {
        return false;
    };
    let ck_off = 20
        + match r.key.proto {
            ipproto::TCP => tcp::CHECKSUM,
            _ => udp::CHECKSUM,
        };
    let Some(l4ck) = u16_at(pkt, ck_off) else {
        return false;
    };
    #[expect(
        clippy::cast_possible_truncation,
        reason = "two folds leave at most 0xffff"
    )]
    let fold = |ck: u16, d: u16| -> u16 {
        let s = u32::from(!ck) + u32::from(d);
        let s = (s & 0xffff) + (s >> 16);
        let s = (s & 0xffff) + (s >> 16);
        !(s as u16)
    };
    let new_l4 = if r.key.proto == ipproto::UDP && l4ck == 0 {
        0
    } else {
        match fold(l4ck, r.l4_delta) {
            0 if r.key.proto == ipproto::UDP => 0xffff,
            c => c,
        }
    };
    // Every field was read above, so every write lands.
    set_u32(pkt, ip4off::SRC, r.new.src)
        & set_u32(pkt, ip4off::DST, r.new.dst)
        & set_u8(pkt, ip4off::TTL, ttl.saturating_sub(1))
        & set_u16(pkt, ip4off::CHECKSUM, fold(ipck, r.ip_delta))
        & set_u16(pkt, 20, r.new.sport)
        & set_u16(pkt, 22, r.new.dport)
        & set_u16(pkt, ck_off, new_l4)
}

/// The tuple of an IPv6 TCP/UDP packet a fast path would consider: no extension headers,
/// hop limit above 1, TCP without SYN/FIN/RST, the whole payload present.
pub fn fast_tuple6(pkt: &[u8]) -> Option<Tuple6> {
    tuple6(pkt, true)
}

/// [`fast_tuple6`] with TCP's SYN/FIN/RST allowed when `control` is false.
fn tuple6(pkt: &[u8], control: bool) -> Option<Tuple6> {
    if u8_at(pkt, 0)? >> 4 != 6 || u8_at(pkt, 7)? <= 1 {
        return None;
    }
    let plen = usize::from(u16_at(pkt, 4)?);
    if pkt.len() < 40 + plen {
        return None;
    }
    let proto = u8_at(pkt, 6)?;
    match proto {
        ipproto::TCP => {
            if control && u8_at(pkt, 40 + tcp::FLAGS)? & (tcp::SYN | tcp::FIN | tcp::RST) != 0 {
                return None;
            }
        }
        ipproto::UDP => {
            u16_at(pkt, 40 + udp::CHECKSUM)?;
        }
        _ => return None,
    }
    let a = |at: usize| -> Option<u128> {
        let b: [u8; 16] = pkt.get(at..at + 16)?.try_into().ok()?;
        Some(u128::from_be_bytes(b))
    };
    Some(Tuple6 {
        proto,
        src: a(8)?,
        dst: a(24)?,
        sport: u16_at(pkt, 40)?,
        dport: u16_at(pkt, 42)?,
    })
}

/// The transport header's length as the fast path checks it is there (TCP 20, UDP 8).
fn l4_header(proto: u8) -> usize {
    if proto == ipproto::TCP {
        20
    } else {
        8
    }
}

/// Applies a NAT64 outbound recipe to an IPv6 packet the way the XDP program does, returning
/// the IPv4 packet (`None`: not a packet the fast path handles, or not this recipe's).
/// `count` is the value of the fast path's identification counter `r.id_slot`.
pub fn apply64(r: &Recipe64, pkt: &[u8], count: u16) -> Option<Vec<u8>> {
    if fast_tuple6(pkt)? != r.key {
        return None;
    }
    emit64(r, pkt, count)
}

/// [`apply64`] after its checks: the IPv4 packet `r` makes of `pkt`.
fn emit64(r: &Recipe64, pkt: &[u8], count: u16) -> Option<Vec<u8>> {
    let plen = usize::from(u16_at(pkt, 4)?);
    let tc = ((u8_at(pkt, 0)? & 0x0f) << 4) | (u8_at(pkt, 1)? >> 4);
    let hop = u8_at(pkt, 7)?;
    let total = u16::try_from(20 + plen).ok()?;
    let id = if usize::from(total) <= crate::ipv4_id::DF_LIMIT {
        (r.id_base.wrapping_add(count), false)
    } else {
        (0, true)
    };
    let mut h = [0u8; 20];
    write_ipv4_header(&mut h, tc, total, id, hop.saturating_sub(1), &r.new);
    let mut out = h.to_vec();
    out.extend_from_slice(pkt.get(40..40 + plen)?);
    let at = 20 + l4_csum_off(r.key.proto);
    let c = u16_at(&out, at)?;
    let wrote = set_u16(&mut out, 20, r.new.sport)
        & set_u16(&mut out, 22, r.new.dport)
        & set_u16(&mut out, at, l4_csum(r.key.proto, c, r.l4_delta));
    wrote.then_some(out)
}

/// Applies a NAT64 inbound recipe to an IPv4 packet the way the XDP program does, returning
/// the IPv6 packet (`None`: not a packet the fast path handles, or not this recipe's).
pub fn apply46(r: &Recipe46, pkt: &[u8]) -> Option<Vec<u8>> {
    if fast_tuple(pkt)? != r.key {
        return None;
    }
    // The IPv4 header disappears here, so its checksum is checked (RFC 1812 5.2.2) rather
    // than carried: a bad one goes to the engine, which counts and drops it.
    if !xlat_wire::checksum::verifies(pkt.get(..20)?) {
        return None;
    }
    let total = usize::from(u16_at(pkt, ip4off::TOTAL_LEN)?);
    let payload = total.checked_sub(20)?;
    let df = u16_at(pkt, ip4off::FLAGS_FRAG)? & 0x4000 != 0;
    if !df && 40 + payload > usize::from(r.mtu_limit) {
        return None;
    }
    let at = 20 + l4_csum_off(r.key.proto);
    let c = u16_at(pkt, at)?;
    if r.key.proto == ipproto::UDP && c == 0 {
        return None;
    }
    emit46(r, pkt, total, c)
}

/// [`apply46`] after its checks: the IPv6 packet `r` makes of `pkt` (`total` bytes long,
/// transport checksum `c`).
fn emit46(r: &Recipe46, pkt: &[u8], total: usize, c: u16) -> Option<Vec<u8>> {
    let payload = total.checked_sub(20)?;
    let tos = u8_at(pkt, ip4off::TOS)?;
    let ttl = u8_at(pkt, ip4off::TTL)?;
    let plen = u16::try_from(payload).ok()?;
    let mut h = [0u8; 40];
    write_ipv6_header(&mut h, tos, plen, ttl.saturating_sub(1), &r.new);
    let mut out = h.to_vec();
    out.extend_from_slice(pkt.get(20..total)?);
    let at6 = 40 + l4_csum_off(r.key.proto);
    let wrote = set_u16(&mut out, 40, r.new.sport)
        & set_u16(&mut out, 42, r.new.dport)
        & set_u16(&mut out, at6, l4_csum(r.key.proto, c, r.l4_delta));
    wrote.then_some(out)
}

/// Applies a SIIT IPv6 -> IPv4 recipe the way the XDP program does, returning the IPv4
/// packet (`None`: not a packet the fast path handles, or not this recipe's). `count` is the
/// value of the fast path's identification counter `r.id_slot`.
pub fn apply_siit64(r: &SiitRecipe64, pkt: &[u8], count: u16) -> Option<Vec<u8>> {
    let t = tuple6(pkt, false)?;
    if (Pair6 {
        proto: t.proto,
        src: t.src,
        dst: t.dst,
    }) != r.key
    {
        return None;
    }
    let plen = usize::from(u16_at(pkt, 4)?);
    // RFC 7915 5.1: longer than the next hop takes as IPv4 (DF set): Packet Too Big (engine).
    if plen < l4_header(t.proto) || 20 + plen > usize::from(r.mtu_limit) {
        return None;
    }
    let r64 = Recipe64 {
        key: t,
        new: Tuple4 {
            proto: t.proto,
            src: r.new.src,
            dst: r.new.dst,
            sport: t.sport,
            dport: t.dport,
        },
        l4_delta: r.l4_delta,
        id_base: r.id_base,
        id_slot: r.id_slot,
    };
    emit64(&r64, pkt, count)
}

/// Applies a SIIT IPv4 -> IPv6 recipe the way the XDP program does, returning the IPv6
/// packet (`None`: not a packet the fast path handles, or not this recipe's).
pub fn apply_siit46(r: &SiitRecipe46, pkt: &[u8]) -> Option<Vec<u8>> {
    let t = tuple4(pkt, false)?;
    if (Pair4 {
        proto: t.proto,
        src: t.src,
        dst: t.dst,
    }) != r.key
    {
        return None;
    }
    // RFC 1812 5.2.2: the header disappears, so its checksum is checked, not carried.
    if !xlat_wire::checksum::verifies(pkt.get(..20)?) {
        return None;
    }
    let total = usize::from(u16_at(pkt, ip4off::TOTAL_LEN)?);
    let payload = total.checked_sub(20)?;
    // RFC 7915 4.1: without DF, longer than the lowest IPv6 MTU: fragmented; with DF, longer
    // than the next hop's: Fragmentation Needed -- the engine's either way.
    let df = u16_at(pkt, ip4off::FLAGS_FRAG)? & 0x4000 != 0;
    let limit = if df { r.mtu_df } else { r.mtu_limit };
    if total > pkt.len() || payload < l4_header(t.proto) || 40 + payload > usize::from(limit) {
        return None;
    }
    let c = u16_at(pkt, 20 + l4_csum_off(t.proto))?;
    // RFC 7915 4.5: a UDP datagram without a checksum gets one computed (engine).
    if t.proto == ipproto::UDP && c == 0 {
        return None;
    }
    let r46 = Recipe46 {
        key: t,
        new: Tuple6 {
            proto: t.proto,
            src: r.new.src,
            dst: r.new.dst,
            sport: t.sport,
            dport: t.dport,
        },
        l4_delta: r.l4_delta,
        mtu_limit: r.mtu_limit,
    };
    emit46(&r46, pkt, total, c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xlat_wire::checksum;

    fn ep(a: [u8; 4], port: u16) -> Endpoint {
        Endpoint {
            addr: u32::from_be_bytes(a),
            port,
        }
    }

    /// A UDP or TCP packet with correct checksums.
    fn packet(proto: u8, src: Endpoint, dst: Endpoint, ttl: u8, payload: &[u8]) -> Vec<u8> {
        let l4len = if proto == ipproto::TCP { 20 } else { 8 };
        let total = 20 + l4len + payload.len();
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = ttl;
        p[9] = proto;
        p[12..16].copy_from_slice(&src.addr.to_be_bytes());
        p[16..20].copy_from_slice(&dst.addr.to_be_bytes());
        let ck = checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&ck.to_be_bytes());
        p[20..22].copy_from_slice(&src.port.to_be_bytes());
        p[22..24].copy_from_slice(&dst.port.to_be_bytes());
        if proto == ipproto::TCP {
            p[32] = 0x50;
            p[33] = 0x10; // ACK
        } else {
            p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        }
        p[20 + l4len..].copy_from_slice(payload);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p[12..20]);
        pseudo.extend_from_slice(&[0, proto]);
        pseudo.extend_from_slice(&((l4len + payload.len()) as u16).to_be_bytes());
        let s = checksum::sum(&pseudo, 0);
        let s = checksum::sum(&p[20..], s);
        let ck = checksum::finish(s);
        let off = if proto == ipproto::TCP { 36 } else { 26 };
        p[off..off + 2].copy_from_slice(&ck.to_be_bytes());
        p
    }

    fn verifies(p: &[u8]) -> bool {
        let l4len = p.len() - 20;
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p[12..20]);
        pseudo.extend_from_slice(&[0, p[9]]);
        pseudo.extend_from_slice(&(l4len as u16).to_be_bytes());
        let s = checksum::sum(&pseudo, 0);
        checksum::verifies(&p[..20]) && checksum::finish(checksum::sum(&p[20..], s)) == 0
    }

    #[test]
    fn recipes_rewrite_both_directions_with_valid_checksums() {
        let int = ep([198, 18, 0, 2], 40000);
        let ext = ep([198, 19, 0, 200], 1234);
        let remote = ep([198, 19, 0, 2], 53);
        for proto in [Proto::Udp, Proto::Tcp] {
            let p = if proto == Proto::Tcp { 6 } else { 17 };
            let (out, inb) = nat44_recipes(proto, int, ext, remote);
            let mut o = packet(p, int, remote, 64, b"hello, fast path");
            assert!(apply(&out, &mut o));
            assert_eq!(o, {
                let mut want = packet(p, ext, remote, 63, b"hello, fast path");
                want.truncate(o.len());
                want
            });
            assert!(verifies(&o));
            let mut i = packet(p, remote, ext, 9, b"reply");
            assert!(apply(&inb, &mut i));
            assert_eq!(i, packet(p, remote, int, 8, b"reply"));
            // Not this recipe's packet: untouched.
            let mut other = packet(p, remote, int, 9, b"x");
            let before = other.clone();
            assert!(!apply(&out, &mut other));
            assert_eq!(other, before);
        }
    }

    #[test]
    fn bad_checksums_stay_bad_and_zero_udp_checksum_stays_zero() {
        let int = ep([198, 18, 0, 2], 40000);
        let ext = ep([198, 19, 0, 200], 1234);
        let remote = ep([198, 19, 0, 2], 53);
        let (out, _) = nat44_recipes(Proto::Udp, int, ext, remote);
        let mut p = packet(17, int, remote, 64, b"abc");
        p[26] ^= 0x55;
        assert!(apply(&out, &mut p));
        assert!(!verifies(&p));
        let mut z = packet(17, int, remote, 64, b"abc");
        z[26] = 0;
        z[27] = 0;
        assert!(apply(&out, &mut z));
        assert_eq!(&z[26..28], &[0, 0]);
    }

    #[test]
    fn control_segments_fragments_options_and_low_ttl_are_not_fast() {
        let a = ep([198, 18, 0, 2], 1);
        let b = ep([198, 19, 0, 2], 2);
        let base = packet(6, a, b, 64, b"");
        assert!(fast_tuple(&base).is_some());
        for flag in [0x02u8, 0x01, 0x04] {
            let mut p = base.clone();
            p[33] = flag | 0x10;
            assert_eq!(fast_tuple(&p), None, "flag {flag:#x}");
        }
        let mut frag = base.clone();
        frag[6] = 0x20; // MF
        assert_eq!(fast_tuple(&frag), None);
        let mut opts = base.clone();
        opts[0] = 0x46;
        assert_eq!(fast_tuple(&opts), None);
        let mut ttl = base.clone();
        ttl[8] = 1;
        assert_eq!(fast_tuple(&ttl), None);
        assert_eq!(fast_tuple(&base[..30]), None);
    }
}
