//! Packets that carry kernel offloads through the engine: a partial transport checksum and
//! TCP super-packets ([`xlat_wire::vnet`]), as a TUN device with `IFF_VNET_HDR` hands them
//! over (issue 25: a 64 KB TCP super-packet crosses the TUN device and the engine once,
//! not as 45 segments).
//!
//! **Kept** -- NAT44, and NAT64 and SIIT from IPv6, and from IPv4 with DF, of plain TCP or
//! UDP (no IPv4 fragment, no IPv6 extension header): the translator rewrites the headers as
//! for any packet; [`Engine::finish_offloads`] then writes the output's own pseudo-header
//! sum into the checksum field (a partial checksum holds nothing else, so the rewrite's
//! incremental update is replaced, not trusted), and a super-packet's segmentation follows
//! the new header's family. The translators make their MTU and DF decisions (RFC 7915 4.1,
//! 5.1) for the segments the super-packet becomes on the wire
//! ([`xlat_wire::vnet::Offload::l4_on_wire`]), as the kernel's router does: a segment too
//! big with DF gets one Fragmentation Needed / Packet Too Big for the whole super-packet.
//!
//! **Not kept** -- tunnels (an outer header the kernel cannot segment through a TUN
//! device), IPv4 without DF on its way to IPv6 (RFC 7915 4.1 may fragment it; fragments
//! carry neither offload), FTP control connections with the ALG on (it verifies their
//! checksum before it rewrites the payload), anything else: [`Engine::take_offloads`] completes a partial
//! checksum in software first (`checksums_completed`), or cuts a super-packet into complete
//! segments (`super_packets_cut`) and translates each; they leave through
//! [`Engine::pop_ready`]. This is the work the kernel did before it handed packets over
//! without offloads.

use std::collections::VecDeque;

use xlat_wire::vnet::{self, Gso, Offload};
use xlat_wire::PacketBuf;

use crate::counters::{DropReason, Event};
use crate::{Engine, Route, Time, Verdict};

/// Most segments one super-packet is cut into: 65,535 bytes of 32-byte segments (Linux's
/// smallest MSS is 48, `tcp_min_snd_mss`).
const MAX_SEGMENTS: usize = 2048;

const TCP: u8 = 6;

impl Engine {
    /// Before dispatch, for a packet with offloads: keeps them where its translator can
    /// (`None`: go on), else completes its checksum (`None`: go on, offloads cleared) or
    /// cuts it into segments and translates them (`Some(Held)`: the segments come out of
    /// [`Engine::pop_ready`]).
    pub(crate) fn take_offloads(&mut self, now: Time, pkt: &mut PacketBuf) -> Option<Verdict> {
        let off = pkt.offload();
        if self.keeps(pkt.data(), off) {
            return None;
        }
        if let Some(g) = off.gso {
            return Some(self.cut(now, pkt, g));
        }
        if let Some(p) = off.csum {
            if vnet::complete_checksum(pkt.data_mut(), p) {
                self.counters.event(Event::ChecksumsCompleted);
            }
        }
        pkt.set_offload(Offload::NONE);
        None
    }

    /// True when the translator of `data` keeps its offloads `off` (module docs).
    fn keeps(&self, data: &[u8], off: Offload) -> bool {
        let Some(p) = off.csum else {
            return false;
        };
        if !vnet::is_plain_partial(data, p) {
            return false;
        }
        let v4 = data.first().is_some_and(|b| b >> 4 == 4);
        if let Some(g) = off.gso {
            let tcp = vnet::plain_l4(data).is_some_and(|(_, proto, _)| proto == TCP);
            if g.v6 == v4 || !tcp {
                return false;
            }
        }
        let df = v4 && data.get(6).is_some_and(|f| f & 0x40 != 0);
        // The FTP ALG verifies a control segment's checksum before it rewrites the payload
        // (a bad checksum stays bad), so control connections go complete.
        let ftp = ftp_control(data);
        match self.route(data) {
            Route::Nat44 => !(ftp && self.nat44.as_ref().is_some_and(|n| n.ftp_alg())),
            Route::Nat64From6 => !(ftp && self.nat64.as_ref().is_some_and(|n| n.ftp_alg())),
            Route::SiitFrom6 => true,
            Route::Nat64From4 => df && !(ftp && self.nat64.as_ref().is_some_and(|n| n.ftp_alg())),
            Route::SiitFrom4 => df,
            _ => false,
        }
    }

    /// Cuts the super-packet in `pkt` into complete segments and translates each.
    fn cut(&mut self, now: Time, pkt: &mut PacketBuf, g: Gso) -> Verdict {
        let mut segs: VecDeque<Vec<u8>> = VecDeque::new();
        let fits = pkt.len() / usize::from(g.size).max(1) < MAX_SEGMENTS;
        let made = fits
            .then(|| vnet::segment(pkt.data(), g, |s| segs.push_back(s.to_vec())))
            .flatten();
        pkt.set_offload(Offload::NONE);
        if made.is_none() {
            self.counters.event(Event::PacketsIn);
            let v = Verdict::Drop(DropReason::UnusableOffload);
            self.count(v);
            return v;
        }
        self.counters.event(Event::SuperPacketsCut);
        for mut s in segs {
            if self.process_vec(now, &mut s).transmit() {
                self.segmented.push_back(s);
            }
        }
        Verdict::Held
    }

    /// After dispatch, for a packet whose offloads were kept: a translated packet gets its
    /// own pseudo-header sum and segmentation family; an ICMP error sent back, or a drop,
    /// carries none.
    pub(crate) fn finish_offloads(&mut self, pkt: &mut PacketBuf, v: Verdict) -> Verdict {
        let off = pkt.offload();
        pkt.set_offload(Offload::NONE);
        if v != Verdict::Forward {
            return v;
        }
        let Some(csum) = vnet::pseudo_finish(pkt.data_mut()) else {
            // Not plain TCP/UDP any more: nothing the kept translators make.
            return Verdict::Drop(DropReason::UnusableOffload);
        };
        let v6 = pkt.data().first().is_some_and(|b| b >> 4 == 6);
        if off.gso.is_some() {
            self.counters.event(Event::SuperPackets);
        }
        pkt.set_offload(Offload {
            csum: Some(csum),
            gso: off.gso.map(|g| Gso { v6, ..g }),
        });
        v
    }
}

/// A plain TCP segment to or from the FTP control port.
fn ftp_control(data: &[u8]) -> bool {
    use xlat_wire::field::u16_at;
    vnet::plain_l4(data).is_some_and(|(l4, proto, _)| {
        proto == TCP
            && [u16_at(data, l4), u16_at(data, l4 + 2)].contains(&Some(crate::alg::FTP_PORT))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lane_tests::{in_pref64, ip4, ip6, nat44_engine, nat64_engine, siit_engine};
    use crate::tunnel::{SixToFourConfig, TunnelConfig};
    use crate::{EngineConfig, Filtering, Nat44Config};
    use xlat_wire::vnet::Partial;
    use xlat_wire::HEADROOM;

    const ACK_PSH: u8 = 0x18;

    /// A TCP header (20 bytes) and `n` payload bytes from `sport` to `dport`.
    fn tcp_l4(sport: u16, dport: u16, flags: u8, n: usize) -> Vec<u8> {
        let mut l = vec![0u8; 20 + n];
        l[0..2].copy_from_slice(&sport.to_be_bytes());
        l[2..4].copy_from_slice(&dport.to_be_bytes());
        l[4..8].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        l[8..12].copy_from_slice(&0x0a0b_0c0du32.to_be_bytes());
        l[12] = 0x50;
        l[13] = flags;
        l[14..16].copy_from_slice(&512u16.to_be_bytes());
        for (i, b) in l.iter_mut().enumerate().skip(20) {
            *b = (i * 13 + 5) as u8;
        }
        l
    }

    /// `full` (checksums complete) as the kernel hands it over with a partial checksum,
    /// and as a super-packet of `mss` segments if `mss > 0`.
    fn offloaded(full: &[u8], mss: u16) -> (Vec<u8>, Offload) {
        let mut p = full.to_vec();
        let csum = vnet::pseudo_finish(&mut p).unwrap();
        let gso = (mss > 0).then(|| Gso {
            v6: p[0] >> 4 == 6,
            size: mss,
            ecn: false,
        });
        (
            p,
            Offload {
                csum: Some(csum),
                gso,
            },
        )
    }

    /// Runs `pkt` with `off` through `e`: the verdict, the packet as it leaves, its
    /// offloads, and what came out of `pop_ready`.
    fn run(e: &mut Engine, pkt: &[u8], off: Offload) -> (Verdict, Vec<u8>, Offload, Vec<Vec<u8>>) {
        let mut room = vec![0u8; HEADROOM + pkt.len() + 64];
        room[HEADROOM..HEADROOM + pkt.len()].copy_from_slice(pkt);
        let mut b = PacketBuf::new(&mut room, HEADROOM, pkt.len()).unwrap();
        b.set_offload(off);
        let v = e.process(Time::from_secs(1), &mut b);
        let (out, o) = (b.data().to_vec(), b.offload());
        let ready = std::iter::from_fn(|| e.pop_ready()).collect();
        (v, out, o, ready)
    }

    /// The packet as the wire sees it: segments (cut as the kernel cuts them) with complete
    /// checksums, IPv4 identification zeroed (the kernel numbers a super-packet's segments
    /// from its one identification; RFC 6864 4.1: atomic datagrams' is not used).
    fn on_wire(pkt: &[u8], off: Offload) -> Vec<Vec<u8>> {
        let mut segs = Vec::new();
        match off.gso {
            Some(g) => {
                vnet::segment(pkt, g, |s| segs.push(s.to_vec())).unwrap();
            }
            None => {
                let mut p = pkt.to_vec();
                if let Some(c) = off.csum {
                    assert!(vnet::complete_checksum(&mut p, c));
                }
                segs.push(p);
            }
        }
        for s in &mut segs {
            if s[0] >> 4 == 4 {
                s[4..6].fill(0);
                s[10..12].fill(0);
                let c = xlat_wire::checksum::checksum(&s[..20]);
                s[10..12].copy_from_slice(&c.to_be_bytes());
            }
        }
        segs
    }

    /// The heart of it: a super-packet translated once and cut afterwards is, byte for byte,
    /// its segments translated one by one (the path without offloads); for NAT44 out and
    /// back, NAT64 and SIIT both ways.
    #[test]
    fn super_packet_translated_once_equals_its_segments_translated() {
        const MSS: u16 = 1400;
        // Every segment longer than 1260 bytes as IPv4: RFC 7915 5.1 sets DF on those, as the
        // super-packet's segments all get it (a shorter last segment would leave with DF set).
        let n = 3 * usize::from(MSS) + 1300;
        let nat44_out = ip4(
            [198, 18, 0, 1],
            [203, 0, 113, 1],
            TCP,
            &tcp_l4(40000, 443, ACK_PSH, n),
            0x4000,
            false,
            64,
            0,
        );
        let v6_host: u128 = 0x2001_0db8_0001_0000_0000_0000_0000_0001;
        let nat64_out = ip6(
            v6_host,
            in_pref64([203, 0, 113, 1], false),
            TCP,
            &tcp_l4(40000, 443, ACK_PSH, n),
            64,
            false,
            false,
            0,
        );
        let siit_in = ip4(
            [203, 0, 113, 9],
            [192, 0, 2, 3],
            TCP,
            &tcp_l4(443, 40000, ACK_PSH, n),
            0x4000,
            false,
            64,
            0,
        );
        let siit_out = ip6(
            0x2001_0db8_0005_0000_0000_0000_0000_0003,
            in_pref64([203, 0, 113, 9], false),
            TCP,
            &tcp_l4(40000, 443, ACK_PSH, n),
            64,
            false,
            false,
            0,
        );
        type Make = fn() -> Engine;
        let cases: [(&str, Make, &Vec<u8>); 4] = [
            (
                "nat44",
                || nat44_engine(Filtering::EndpointIndependent, false, true),
                &nat44_out,
            ),
            (
                "nat64 6->4",
                || nat64_engine(Filtering::EndpointIndependent, false, true, false),
                &nat64_out,
            ),
            ("siit 4->6", || siit_engine(false, 1500), &siit_in),
            ("siit 6->4", || siit_engine(false, 1500), &siit_out),
        ];
        for (name, make, full) in cases {
            let (mut once, mut each) = (make(), make());
            // A SYN opens the session (NAPT; SIIT has none) in both.
            let mut syn = full.clone();
            let l4 = if syn[0] >> 4 == 4 { 20 } else { 40 };
            syn.truncate(l4 + 20);
            syn[l4 + 13] = 0x02;
            let syn = if l4 == 20 {
                ip4(
                    syn[12..16].try_into().unwrap(),
                    syn[16..20].try_into().unwrap(),
                    TCP,
                    &syn[20..],
                    0x4000,
                    false,
                    64,
                    0,
                )
            } else {
                let a = |o: usize| u128::from_be_bytes(syn[o..o + 16].try_into().unwrap());
                ip6(a(8), a(24), TCP, &syn[40..], 64, false, false, 0)
            };
            for e in [&mut once, &mut each] {
                assert!(run(e, &syn, Offload::NONE).0.transmit(), "{name}: SYN");
            }
            let (p, off) = offloaded(full, MSS);
            let (v, out, o, ready) = run(&mut once, &p, off);
            assert_eq!(v, Verdict::Forward, "{name}");
            assert!(ready.is_empty(), "{name}: kept whole");
            assert!(
                o.gso.is_some() && o.csum.is_some(),
                "{name}: offloads kept {o:?}"
            );
            assert_eq!(
                o.gso.unwrap().v6,
                out[0] >> 4 == 6,
                "{name}: family follows"
            );
            let mut want = Vec::new();
            for s in on_wire(full, off) {
                let (v, seg, so, _) = run(&mut each, &s, Offload::NONE);
                assert_eq!((v, so), (Verdict::Forward, Offload::NONE), "{name}");
                want.extend(on_wire(&seg, Offload::NONE));
            }
            assert_eq!(on_wire(&out, o), want, "{name}");
            // The field holds the output's pseudo-header sum: completed over the whole
            // super-packet it verifies, which is what the kernel's segmentation builds on.
            let mut whole = out.clone();
            assert!(vnet::complete_checksum(&mut whole, o.csum.unwrap()));
            let (l4, _, len) = vnet::plain_l4(&whole).unwrap();
            let mut check = whole.clone();
            check[l4 + 16..l4 + 18].fill(0);
            vnet::pseudo_finish(&mut check).unwrap();
            let ps = u16::from_be_bytes([check[l4 + 16], check[l4 + 17]]);
            let total = xlat_wire::checksum::sum(&whole[l4..l4 + len], u32::from(ps));
            assert_eq!(xlat_wire::checksum::fold(total), 0xffff, "{name}: verifies");
            assert_eq!(once.counters().count(Event::SuperPackets), 1, "{name}");
        }
    }

    /// A partial checksum alone (a local sender's UDP or TCP) is kept by NAT44 and NAT64
    /// and completes to what the complete packet translates to.
    #[test]
    fn partial_checksum_kept_and_completes_right() {
        let v6_host: u128 = 0x2001_0db8_0001_0000_0000_0000_0000_0001;
        let mut l4 = tcp_l4(40000, 53, 0, 100);
        l4.truncate(8 + 100);
        l4[4..6].copy_from_slice(&108u16.to_be_bytes());
        l4[6..8].fill(0); // the builders sum the field as it is
        let udp6 = ip6(
            v6_host,
            in_pref64([203, 0, 113, 1], false),
            17,
            &l4,
            64,
            false,
            false,
            0,
        );
        let udp4 = ip4(
            [198, 18, 0, 1],
            [203, 0, 113, 1],
            17,
            &l4,
            0x4000,
            false,
            64,
            0,
        );
        type Make = fn() -> Engine;
        let cases: [(Make, &Vec<u8>); 2] = [
            (
                || nat64_engine(Filtering::EndpointIndependent, false, true, false),
                &udp6,
            ),
            (
                || nat44_engine(Filtering::EndpointIndependent, false, true),
                &udp4,
            ),
        ];
        for (make, full) in cases {
            let (mut a, mut b) = (make(), make());
            let (p, off) = offloaded(full, 0);
            let (v, out, o, _) = run(&mut a, &p, off);
            assert_eq!(v, Verdict::Forward);
            assert!(o.csum.is_some() && o.gso.is_none());
            let (_, want, _, _) = run(&mut b, full, Offload::NONE);
            assert_eq!(on_wire(&out, o), on_wire(&want, Offload::NONE));
        }
    }

    /// MTU decisions are the segments': a 64 KB super-packet whose segments fit goes
    /// through; one whose segments do not fit once IPv6 (DF set) gets one Fragmentation
    /// Needed, without offloads; IPv4 without DF on its way to IPv6 is cut in software.
    #[test]
    fn mtu_is_the_segments_and_no_df_is_cut() {
        let big = ip4(
            [203, 0, 113, 9],
            [192, 0, 2, 3],
            TCP,
            &tcp_l4(443, 40000, ACK_PSH, 60000),
            0x4000,
            false,
            64,
            0,
        );
        let mut e = siit_engine(false, 1500);
        let (p, off) = offloaded(&big, 1440);
        let (v, out, o, _) = run(&mut e, &p, off);
        assert_eq!(v, Verdict::Forward, "1440 + 20 + 40 fits 1500");
        assert_eq!(out.len(), big.len() + 20);
        assert_eq!(o.gso.map(|g| (g.v6, g.size)), Some((true, 1440)));
        // Segments of 1441 bytes: 1501 as IPv6, over the MTU.
        let (p, off) = offloaded(&big, 1441);
        let (v, out, o, _) = run(&mut e, &p, off);
        assert_eq!(v, Verdict::Reply(DropReason::TooBig));
        assert_eq!(o, Offload::NONE);
        assert_eq!(u16::from_be_bytes([out[26], out[27]]), 1480, "MTU to use");
        // Without DF: cut, and each 1480-byte segment fragmented for the lowest IPv6 MTU.
        let mut nodf = big.clone();
        nodf[6] = 0;
        nodf[10..12].fill(0);
        let c = xlat_wire::checksum::checksum(&nodf[..20]);
        nodf[10..12].copy_from_slice(&c.to_be_bytes());
        let (p, off) = offloaded(&nodf, 1440);
        let (v, _, _, ready) = run(&mut e, &p, off);
        assert_eq!(v, Verdict::Held);
        let segs = 60000usize.div_ceil(1440);
        assert_eq!(
            ready.len(),
            2 * (segs - 1) + 1,
            "two fragments a segment, one for the short last"
        );
        assert!(ready.iter().all(|f| f[0] >> 4 == 6 && f.len() <= 1280));
        assert_eq!(e.counters().count(Event::SuperPacketsCut), 1);
    }

    /// A 6to4 endpoint cannot keep offloads: super-packets are cut and every segment
    /// encapsulated with a complete checksum; a partial checksum is completed.
    #[test]
    fn tunnels_cut_and_complete() {
        let mut e = Engine::new(EngineConfig {
            tunnel: Some(TunnelConfig {
                sixtofour: Some(SixToFourConfig {
                    ipv4: "192.0.2.1".parse().unwrap(),
                    relay: None,
                    relay_router: false,
                    params: Default::default(),
                }),
                isatap: None,
            }),
            seed: 3,
            ..EngineConfig::default()
        })
        .unwrap();
        let src: u128 = 0x2002_c000_0201_0001_0000_0000_0000_0001;
        let dst: u128 = 0x2002_cb00_7109_0001_0000_0000_0000_0002;
        let full = ip6(
            src,
            dst,
            TCP,
            &tcp_l4(40000, 443, ACK_PSH, 4000),
            64,
            false,
            false,
            0,
        );
        let (p, off) = offloaded(&full, 1400);
        let (v, _, _, ready) = run(&mut e, &p, off);
        assert_eq!(v, Verdict::Held);
        assert_eq!(ready.len(), 3);
        let want = on_wire(&full, off);
        for (outer, inner) in ready.iter().zip(&want) {
            assert_eq!((outer[0], outer[9]), (0x45, 41));
            // The inner segment, hop limit decremented by the endpoint's router.
            assert_eq!(&outer[20..27], &inner[..7]);
            assert_eq!(&outer[28..], &inner[8..]);
        }
        let small = ip6(
            src,
            dst,
            TCP,
            &tcp_l4(40000, 443, ACK_PSH, 1000),
            64,
            false,
            false,
            0,
        );
        let (p, off) = offloaded(&small, 0);
        let (v, out, o, _) = run(&mut e, &p, off);
        assert_eq!((v, o), (Verdict::Forward, Offload::NONE));
        assert_eq!(
            &out[20 + 8..],
            &small[8..],
            "checksum completed, as the kernel would"
        );
        assert_eq!(e.counters().count(Event::ChecksumsCompleted), 1);
    }

    /// With the FTP ALG on, control segments (port 21) go complete: the ALG verifies their
    /// checksum before it rewrites the payload; other TCP keeps its offloads.
    #[test]
    fn ftp_control_connections_go_complete() {
        let mut cfg = Nat44Config {
            inside: vec!["198.18.0.0/16".parse().unwrap()],
            pool: vec!["198.19.0.0/31".parse().unwrap()],
            alg_ftp: true,
            ..Nat44Config::default()
        };
        cfg.limits.max_sessions = 40;
        let mut e = Engine::new(EngineConfig {
            nat44: Some(cfg),
            seed: 7,
            ..EngineConfig::default()
        })
        .unwrap();
        for (dport, kept) in [(21u16, false), (443, true)] {
            let syn = ip4(
                [198, 18, 0, 1],
                [203, 0, 113, 1],
                TCP,
                &tcp_l4(40000 + dport, dport, 0x02, 0),
                0x4000,
                false,
                64,
                0,
            );
            assert!(run(&mut e, &syn, Offload::NONE).0.transmit());
            let full = ip4(
                [198, 18, 0, 1],
                [203, 0, 113, 1],
                TCP,
                &tcp_l4(40000 + dport, dport, ACK_PSH, 30),
                0x4000,
                false,
                64,
                0,
            );
            let (p, off) = offloaded(&full, 0);
            let (v, out, o, _) = run(&mut e, &p, off);
            assert_eq!(v, Verdict::Forward, "port {dport}");
            assert_eq!(o.csum.is_some(), kept, "port {dport}");
            if !kept {
                // Complete and valid as it leaves.
                let (l4, _, len) = vnet::plain_l4(&out).unwrap();
                let mut check = out.clone();
                check[l4 + 16..l4 + 18].fill(0);
                let p = vnet::pseudo_finish(&mut check).unwrap();
                assert!(vnet::complete_checksum(&mut check, p));
                assert_eq!(&check[l4..l4 + len], &out[l4..l4 + len], "port {dport}");
            }
        }
        assert_eq!(e.counters().count(Event::ChecksumsCompleted), 1);
    }

    /// Offloads that do not fit the packet are not trusted: a super-packet that is not
    /// TCP is dropped (counted), a partial checksum elsewhere than the transport header's
    /// is completed where the kernel said.
    #[test]
    fn odd_offloads_are_dropped_or_completed() {
        let mut e = nat44_engine(Filtering::EndpointIndependent, false, true);
        let udp = ip4(
            [198, 18, 0, 1],
            [203, 0, 113, 1],
            17,
            &[0u8; 40],
            0x4000,
            false,
            64,
            0,
        );
        let bad = Offload {
            csum: Some(Partial {
                start: 20,
                offset: 6,
            }),
            gso: Some(Gso {
                v6: false,
                size: 8,
                ecn: false,
            }),
        };
        let (v, _, o, ready) = run(&mut e, &udp, bad);
        assert_eq!(
            (v, o),
            (Verdict::Drop(DropReason::UnusableOffload), Offload::NONE)
        );
        assert!(ready.is_empty());
        let odd = Offload {
            csum: Some(Partial {
                start: 24,
                offset: 2,
            }),
            gso: None,
        };
        let (v, _, o, _) = run(&mut e, &udp, odd);
        assert_eq!((v, o), (Verdict::Forward, Offload::NONE));
    }
}
