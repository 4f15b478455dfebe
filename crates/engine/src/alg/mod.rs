//! Application-level gateways: the FTP ALG of NAT44 (RFC 959 / RFC 2428 as NATs do it,
//! RFC 3022 2.3 / RFC 2663 8.2 on payload changes and TCP sequence numbers) and NAT64
//! (RFC 6384). Off unless configured (`alg = ["ftp"]`); when off, the packet paths test one
//! boolean.
//!
//! The ALG works on the IPv4 side of a translator, where NAT44 and NAT64 look alike: an
//! outbound control segment after its translation (source = the outside endpoint), an
//! inbound one before (destination = the outside endpoint). A control connection is keyed by
//! (outside endpoint, remote endpoint) and holds the sequence offsets of both directions
//! ([`ftp::SeqAdj`]). Outbound lines it rewrites:
//! - NAT44, an inside client's `PORT h1,..,p2` and `EPRT |1|a.b.c.d|p|` (RFC 959 4.1.2,
//!   RFC 2428 2): the outside address and a port mapped for it, the mapping made (and the
//!   server's address admitted) before the server connects (`napt`'s expectations);
//! - NAT44, a port-forwarded inside server's `227 (h1,..,p2)` reply to PASV (RFC 959
//!   4.2.2): the same, for the client's connection to the passive port;
//! - NAT44 (and NAT64 with a static BIB entry), an inside server's `229 (|||p|)` reply to
//!   EPSV (RFC 2428 3): the address is the control connection's, but the passive port needs
//!   a mapping too, so it becomes the mapped one;
//! - NAT64, an IPv6 client's `EPRT |2|ipv6|p|`: RFC 6384 has it become `PORT` with the
//!   translator's IPv4 address and a mapped port (an IPv4-only server knows PORT; RFC 959
//!   makes it mandatory, EPRT is not).
//!
//! EPSV carries no address (RFC 2428 3) and passes unchanged, as a 229 to an inside client
//! does. NAT64 only
//! (RFC 6384's EPSV-to-PASV translation): when an IPv4 server answers an EPSV with 500-504
//! (it lacks the optional command), later EPSVs on that control connection go to it as PASV
//! and the 227 reply comes back to the IPv6 client as a 229 with the same port (an IPv6 client
//! cannot use the IPv4 address of a 227). The first rejection reaches the client (the ALG
//! would have to make up a PASV of its own to hide it); curl and most clients then send PASV
//! themselves, whose 227 passes.
//!
//! What the ALG does not do, and why:
//! - a line split across TCP segments is not reassembled (RFC 6384 accepts an ALG that
//!   handles whole commands in one segment; reassembly would mean holding data): counted
//!   ([`crate::counters::Event::AlgFtpSplit`]) and passed unmodified;
//! - the address in PORT / EPRT / 227 must be the control connection's own inside address;
//!   anything else (a bounce, RFC 2577) passes unmodified and is counted;
//! - TLS-protected control channels (RFC 4217) cannot be read and pass as they are.
//!
//! Acknowledgements and the edges of SACK blocks (RFC 2018) move back with the offsets of
//! the stream they acknowledge.
//!
//! Retransmission: a rewritten segment sent again (the same sequence number) is rewritten to
//! the same bytes -- the mapped port is remembered with the sequence number -- and adds no
//! second offset ([`ftp::SeqAdj::record`]).

pub mod ftp;

use hashbrown::HashMap;
use xlat_wire::field::{chunk_mut, set_u16, u16_at, u32_at, u8_at};
use xlat_wire::ipv4::{self, proto as ipproto};
use xlat_wire::l4::tcp;
use xlat_wire::{checksum, Delta, PacketBuf};

use crate::counters::{wrote, Counters, DropReason, Event};
use crate::flow::Endpoint;
use crate::Time;

use self::ftp::{Command, Reply, SeqAdj};

/// The FTP control port (RFC 959 3.2, L).
pub const FTP_PORT: u16 = 21;

/// Control connections tracked per translator (per worker); more pass untracked.
pub const MAX_CONTROLS: usize = 4096;

/// With the table full, control connections idle this long (s, RFC 6146's TCP transitory
/// time) are forgotten to make room.
pub const IDLE_AT_CAPACITY: u64 = 240;

/// Lines of one segment looked at.
const MAX_LINES: usize = 16;

/// A data endpoint a control line announced, in the inside host's address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announced {
    V4(u32, u16),
    V6(u128, u16),
    /// A port of the control connection's own inside host (a 229 reply names no address).
    Own(u16),
}

/// One tracked control connection.
#[derive(Clone, Copy, Debug, Default)]
struct Ctl {
    /// Offsets of the inside-to-outside stream (its seq, the remote's acks).
    out: SeqAdj,
    /// Offsets of the outside-to-inside stream.
    inb: SeqAdj,
    /// The last rewritten outbound segment's sequence number and mapped port, for its
    /// retransmission.
    last: Option<(u32, Endpoint)>,
    /// The sequence number of the last inbound segment whose 227 became a 229, for its
    /// retransmission.
    last_229: Option<u32>,
    /// NAT64: the client's EPSV is on its way; its reply tells whether the server has it.
    epsv_sent: bool,
    /// NAT64: the server answered EPSV with a 5xx (RFC 2428 3 is optional for servers):
    /// later EPSVs go to it as PASV (RFC 6384).
    epsv_rejected: bool,
    /// NAT64: a PASV the ALG made from an EPSV is on its way: its 227 becomes a 229.
    pasv_for_epsv: bool,
    /// Last packet seen (idle control connections are forgotten after the TCP established
    /// timeout).
    seen: Time,
}

impl Ctl {
    /// Does it hold anything a later segment needs (offsets, a mapped port to repeat,
    /// NAT64's EPSV state)?
    fn holds(&self) -> bool {
        self.out.changed()
            || self.inb.changed()
            || self.last.is_some()
            || self.last_229.is_some()
            || self.epsv_sent
            || self.epsv_rejected
            || self.pasv_for_epsv
    }
}

/// The FTP ALG's state for one translator.
#[derive(Default)]
pub struct FtpAlg {
    ctl: HashMap<(Endpoint, Endpoint), Ctl>,
    /// Rewritten payload under construction (grown once, reused).
    scratch: Vec<u8>,
    /// NAT64 (RFC 6384's EPSV fallback applies); NAT44 otherwise.
    nat64: bool,
}

/// Where the TCP segment of an IPv4 packet lies.
#[derive(Clone, Copy)]
struct Seg {
    l4: usize,
    data: usize,
    end: usize,
    flags: u8,
}

/// The TCP segment of an unfragmented IPv4 packet (`None`: not TCP, a fragment, malformed).
fn segment(pkt: &[u8]) -> Option<Seg> {
    let v = u8_at(pkt, 0)?;
    let ihl = usize::from(v & 0x0f) * 4;
    if v >> 4 != 4 || ihl < ipv4::MIN_HEADER || u8_at(pkt, ipv4::off::PROTO)? != ipproto::TCP {
        return None;
    }
    if u16_at(pkt, ipv4::off::FLAGS_FRAG)? & 0x3fff != 0 {
        return None;
    }
    let end = usize::from(u16_at(pkt, ipv4::off::TOTAL_LEN)?);
    let doff = usize::from(u8_at(pkt, ihl + 12)? >> 4) * 4;
    let data = ihl + doff;
    if doff < 20 || data > end || end > pkt.len() {
        return None;
    }
    Some(Seg {
        l4: ihl,
        data,
        end,
        flags: u8_at(pkt, ihl + tcp::FLAGS)?,
    })
}

/// Reads an endpoint pair at the IPv4 source and TCP source port (`src = true`) or the
/// destination's.
fn endpoint(pkt: &[u8], l4: usize, src: bool) -> Option<Endpoint> {
    let (a, p) = if src {
        (ipv4::off::SRC, 0)
    } else {
        (ipv4::off::DST, 2)
    };
    Some(Endpoint {
        addr: u32_at(pkt, a)?,
        port: u16_at(pkt, l4 + p)?,
    })
}

/// Is this TCP packet (IPv4 header) to or from the FTP control port? Cheap: for the
/// translators' ALG branch.
pub fn is_control4(pkt: &[u8]) -> bool {
    let Some(v) = u8_at(pkt, 0) else {
        return false;
    };
    let l4 = usize::from(v & 0x0f) * 4;
    u8_at(pkt, ipv4::off::PROTO) == Some(ipproto::TCP)
        && (u16_at(pkt, l4) == Some(FTP_PORT) || u16_at(pkt, l4 + 2) == Some(FTP_PORT))
}

/// The TCP checksum of the segment `pkt[l4..end]` verifies with the IPv4 pseudo-header.
fn tcp_verifies(pkt: &[u8], l4: usize, end: usize) -> bool {
    tcp_sum(pkt, l4, end) == Some(0)
}

/// The folded one's-complement sum of the IPv4 pseudo-header and `pkt[l4..end]`,
/// complemented (0 when a checksum in it verifies).
fn tcp_sum(pkt: &[u8], l4: usize, end: usize) -> Option<u16> {
    let seg = pkt.get(l4..end)?;
    let src = pkt.get(ipv4::off::SRC..ipv4::off::SRC + 8)?;
    let len = u32::try_from(seg.len()).ok()?;
    let pseudo = checksum::sum(src, u32::from(ipproto::TCP) + len);
    Some(checksum::finish(checksum::sum(seg, pseudo)))
}

/// Moves the 32-bit TCP field at `off` by `f` and returns the checksum delta (zero, and
/// nothing written, when the field is not in the packet).
fn move_word(pkt: &mut [u8], off: usize, f: impl FnOnce(u32) -> u32) -> Delta {
    let Some(w) = chunk_mut::<4>(pkt, off) else {
        return Delta::ZERO;
    };
    let old = u32::from_be_bytes(*w);
    let new = f(old);
    *w = new.to_be_bytes();
    Delta::ZERO.addr(old, new)
}

impl FtpAlg {
    /// The ALG of a NAT64 (`nat64`, RFC 6384) or of a NAT44.
    pub fn new(nat64: bool) -> FtpAlg {
        FtpAlg {
            nat64,
            ..FtpAlg::default()
        }
    }

    /// Control connections tracked.
    pub fn controls(&self) -> usize {
        self.ctl.len()
    }

    /// Forgets control connections idle for `idle_secs` (the TCP established timeout).
    pub fn expire(&mut self, now: Time, idle_secs: u64) {
        if self.ctl.is_empty() {
            return;
        }
        self.ctl.retain(|_, c| c.seen.plus_secs(idle_secs) > now);
    }

    /// The state of control connection `key` as of `now`: its entry, or a fresh one when
    /// there is room to keep it (`None`: the table is full even after forgetting the
    /// connections idle for [`IDLE_AT_CAPACITY`] s). A fresh one is kept only if it comes to
    /// hold something ([`Ctl::holds`]): plain control connections (EPSV and replies) take no
    /// entry, so a flood of port-21 packets cannot fill the table.
    fn state(&mut self, key: (Endpoint, Endpoint), now: Time, c: &mut Counters) -> Option<Ctl> {
        if let Some(e) = self.ctl.get_mut(&key) {
            e.seen = now;
            return Some(*e);
        }
        if self.ctl.len() >= MAX_CONTROLS {
            self.ctl
                .retain(|_, e| e.seen.plus_secs(IDLE_AT_CAPACITY) > now);
            if self.ctl.len() >= MAX_CONTROLS {
                c.event(Event::AlgFtpNoRoom);
                return None;
            }
        }
        Some(Ctl {
            seen: now,
            ..Ctl::default()
        })
    }

    /// Keeps `ctl` as the state of `key` if it holds anything.
    fn keep(&mut self, key: (Endpoint, Endpoint), ctl: Ctl) {
        if let Some(e) = self.ctl.get_mut(&key) {
            *e = ctl;
        } else if ctl.holds() {
            self.ctl.insert(key, ctl);
        }
    }

    /// An outbound control segment, translated (IPv4, source = the outside endpoint):
    /// rewrites the lines the module doc lists -- `map` turns an announced inside data
    /// endpoint into the outside one it made a mapping for (`None`: not the control
    /// connection's host, or no port) -- and moves sequence and acknowledgement numbers.
    /// `Err` ([`DropReason::Internal`]): a write missed a segment it had checked.
    pub fn outbound(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        map: &mut dyn FnMut(Announced, &mut Counters) -> Option<Endpoint>,
        c: &mut Counters,
    ) -> Result<(), DropReason> {
        let pkt = buf.data();
        let Some(seg) = segment(pkt) else {
            return Ok(());
        };
        let (Some(ext), Some(remote)) = (endpoint(pkt, seg.l4, true), endpoint(pkt, seg.l4, false))
        else {
            return Ok(());
        };
        let key = (ext, remote);
        if seg.flags & tcp::RST != 0 {
            self.ctl.remove(&key);
            return Ok(());
        }
        let Some(mut ctl) = self.state(key, now, c) else {
            return Ok(());
        };
        let seq = u32_at(pkt, seg.l4 + 4).unwrap_or(0);
        let nat64 = self.nat64;
        let mut scratch = std::mem::take(&mut self.scratch);
        let rewritten = if seg.data < seg.end {
            let mut line_fn =
                |line: &[u8], c: &mut Counters| outbound_line(line, seq, nat64, &mut ctl, map, c);
            rewrite_lines(&mut scratch, buf, &seg, wanted_out, &mut line_fn, c)
        } else {
            Ok(None)
        };
        self.scratch = scratch;
        let rewritten = rewritten?;
        let diff = rewritten.unwrap_or(0);
        ctl.out.record(seq, diff);
        self.keep(key, ctl);
        wrote(adjust(
            buf.data_mut(),
            &seg_after(&seg, diff),
            &ctl.out,
            &ctl.inb,
            rewritten.is_some(),
        ))
    }

    /// An inbound control segment before its translation (IPv4, destination = the outside
    /// endpoint): NAT64's 227 answering a PASV the ALG made from an EPSV becomes a 229
    /// (RFC 6384); its sequence number moves by what the ALG changed in this direction and
    /// its acknowledgement by what it changed in the other. `Err` as [`FtpAlg::outbound`].
    pub fn inbound(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        c: &mut Counters,
    ) -> Result<(), DropReason> {
        let pkt = buf.data();
        let Some(seg) = segment(pkt) else {
            return Ok(());
        };
        let (Some(remote), Some(ext)) = (endpoint(pkt, seg.l4, true), endpoint(pkt, seg.l4, false))
        else {
            return Ok(());
        };
        let key = (ext, remote);
        // (An inbound RST does not end the state: a spoofed one the endpoint ignores would
        // break the stream's numbering. Idle expiry does.)
        // Inbound segments never make state: until the ALG changed something going out,
        // there is nothing to do to them.
        let Some(e) = self.ctl.get_mut(&key) else {
            return Ok(());
        };
        e.seen = now;
        let mut ctl = *e;
        let seq = u32_at(pkt, seg.l4 + 4).unwrap_or(0);
        let mut rewritten = None;
        if self.nat64
            && seg.data < seg.end
            && (ctl.epsv_sent || ctl.pasv_for_epsv || ctl.last_229 == Some(seq))
        {
            let mut scratch = std::mem::take(&mut self.scratch);
            let mut line_fn = |line: &[u8], _: &mut Counters| inbound_line(line, seq, &mut ctl);
            let r = rewrite_lines(&mut scratch, buf, &seg, wanted_in, &mut line_fn, c);
            self.scratch = scratch;
            rewritten = r?;
        }
        let diff = rewritten.unwrap_or(0);
        ctl.inb.record(seq, diff);
        self.keep(key, ctl);
        wrote(adjust(
            buf.data_mut(),
            &seg_after(&seg, diff),
            &ctl.inb,
            &ctl.out,
            rewritten.is_some(),
        ))
    }
}

/// The segment bounds after its payload changed by `diff`.
fn seg_after(seg: &Seg, diff: i32) -> Seg {
    Seg {
        end: seg.end.saturating_add_signed(diff as isize),
        ..*seg
    }
}

/// Moves the segment's sequence number by `own` and its acknowledgement by `peer`, with an
/// incremental checksum update (RFC 1624) -- or a full one when the payload was rewritten
/// (`full`; the original checksum was verified before). False when the checksum could not be
/// written: [`segment`] checked the TCP header is there, so that is a broken invariant.
#[must_use = "false means the checksum was not written"]
fn adjust(pkt: &mut [u8], seg: &Seg, own: &SeqAdj, peer: &SeqAdj, full: bool) -> bool {
    if !full && !own.changed() && !peer.changed() {
        return true;
    }
    let mut d = Delta::ZERO;
    d = d.plus(move_word(pkt, seg.l4 + 4, |seq| own.seq(seq)));
    if seg.flags & tcp::ACK != 0 {
        d = d.plus(move_word(pkt, seg.l4 + 8, |ack| peer.ack(ack)));
        if peer.changed() {
            d = d.plus(adjust_sack(pkt, seg, peer));
        }
    }
    let ck = seg.l4 + tcp::CHECKSUM;
    if full {
        set_u16(pkt, ck, 0) & tcp_sum(pkt, seg.l4, seg.end).is_some_and(|sum| set_u16(pkt, ck, sum))
    } else {
        u16_at(pkt, ck).is_some_and(|old| set_u16(pkt, ck, d.apply(old)))
    }
}

/// Moves the edges of the SACK blocks (RFC 2018 3, option kind 5) of a segment, which
/// acknowledge the peer's stream, back as its acknowledgement number; returns the checksum
/// delta. Option lists are walked with bounds (at most 40 bytes); an edge at an odd offset
/// (no stack aligns them so) is left alone, as the incremental update needs 16-bit words.
fn adjust_sack(pkt: &mut [u8], seg: &Seg, peer: &SeqAdj) -> Delta {
    const SACK: u8 = 5;
    let mut d = Delta::ZERO;
    let mut at = seg.l4 + 20;
    let end = seg.data;
    while at < end {
        let Some(kind) = u8_at(pkt, at) else {
            break;
        };
        match kind {
            0 => break,
            1 => {
                at += 1;
                continue;
            }
            _ => {}
        }
        let Some(len) = u8_at(pkt, at + 1).map(usize::from) else {
            break;
        };
        if len < 2 || at + len > end {
            break;
        }
        if kind == SACK && (len - 2).is_multiple_of(8) && (at + 2 - seg.l4).is_multiple_of(2) {
            let mut e = at + 2;
            while e + 4 <= at + len {
                d = d.plus(move_word(pkt, e, |v| peer.ack(v)));
                e += 4;
            }
        }
        at += len;
    }
    d
}

/// What an outbound line becomes (`None`: unchanged).
fn outbound_line(
    line: &[u8],
    seq: u32,
    nat64: bool,
    ctl: &mut Ctl,
    map: &mut dyn FnMut(Announced, &mut Counters) -> Option<Endpoint>,
    c: &mut Counters,
) -> Option<ftp::Out> {
    match (ftp::parse_command(line), ftp::parse_reply(line)) {
        (Some(Command::Port { addr, port }), _) => {
            announce(ctl, seq, Announced::V4(addr, port), map, c)
                .map(|e| ftp::write_port(e.addr, e.port))
        }
        (Some(Command::Eprt4 { addr, port }), _) => {
            announce(ctl, seq, Announced::V4(addr, port), map, c)
                .map(|e| ftp::write_eprt4(e.addr, e.port))
        }
        // RFC 6384: EPRT with an IPv6 address becomes PORT with the IPv4 one.
        (Some(Command::Eprt6 { addr, port }), _) => {
            announce(ctl, seq, Announced::V6(addr, port), map, c)
                .map(|e| ftp::write_port(e.addr, e.port))
        }
        // RFC 6384: EPSV passes; once the server has rejected it, it goes as PASV and the
        // 227 comes back as a 229. RFC 2428 4: `EPSV ALL` asks for no passive port, so it
        // never becomes a PASV (the server would open a port and answer 227, not the
        // 200-class reply the client waits for); it passes as it is.
        (Some(Command::Epsv { all }), _) if nat64 => {
            if ctl.epsv_rejected && all {
                None
            } else if ctl.epsv_rejected {
                ctl.pasv_for_epsv = true;
                Some(ftp::write_pasv())
            } else {
                ctl.epsv_sent = true;
                None
            }
        }
        (_, Some(Reply::Pasv227 { addr, port })) => {
            announce(ctl, seq, Announced::V4(addr, port), map, c)
                .map(|e| ftp::write_227(e.addr, e.port))
        }
        // RFC 2428 3: a 229 going out comes from an inside server (port-forwarded, or a
        // static BIB entry): its passive port needs a mapping as a 227's does.
        (_, Some(Reply::Epsv229 { port })) => {
            announce(ctl, seq, Announced::Own(port), map, c).map(|e| ftp::write_229(e.port))
        }
        _ => {
            if wanted_out(line) {
                c.event(Event::AlgFtpMalformed);
            }
            None
        }
    }
}

/// What an inbound line becomes (NAT64 only; `None`: unchanged).
fn inbound_line(line: &[u8], seq: u32, ctl: &mut Ctl) -> Option<ftp::Out> {
    let reply = ftp::parse_reply(line)?;
    if ctl.epsv_sent {
        ctl.epsv_sent = false;
        // RFC 959 4.2.1: 500 / 501 / 502 / 504, the server has no EPSV.
        if let Reply::Other(500..=504) = reply {
            ctl.epsv_rejected = true;
        }
        return None;
    }
    match reply {
        Reply::Pasv227 { port, .. } if ctl.pasv_for_epsv || ctl.last_229 == Some(seq) => {
            ctl.pasv_for_epsv = false;
            ctl.last_229 = Some(seq);
            Some(ftp::write_229(port))
        }
        Reply::Other(_) if ctl.pasv_for_epsv => {
            // The PASV failed too: its error reaches the client as the EPSV's.
            ctl.pasv_for_epsv = false;
            None
        }
        _ => None,
    }
}

/// Rewrites the whole lines of a segment's payload that `line_fn` changes, in place (the
/// packet grows or shrinks at its tail); returns the change of length, `None` when nothing
/// was rewritten. A trailing part line
/// `wanted` would act on is counted as split. `Err` ([`DropReason::Internal`]): the new
/// payload or length did not land in the packet after its length was set for them.
fn rewrite_lines(
    scratch: &mut Vec<u8>,
    buf: &mut PacketBuf,
    seg: &Seg,
    wanted: fn(&[u8]) -> bool,
    line_fn: &mut dyn FnMut(&[u8], &mut Counters) -> Option<ftp::Out>,
    c: &mut Counters,
) -> Result<Option<i32>, DropReason> {
    let pkt = buf.data();
    let Some(payload) = pkt.get(seg.data..seg.end) else {
        return Ok(None);
    };
    scratch.clear();
    let mut rest = payload;
    let mut changed = false;
    for _ in 0..MAX_LINES {
        if rest.is_empty() {
            break;
        }
        let Some((line, n)) = ftp::first_line(rest) else {
            // Only whole lines are rewritten (no reassembly across segments).
            if wanted(rest) {
                c.event(Event::AlgFtpSplit);
            }
            break;
        };
        match line_fn(line, c) {
            Some(o) => {
                scratch.extend_from_slice(o.as_bytes());
                changed = true;
                c.event(Event::AlgFtpRewritten);
            }
            None => scratch.extend_from_slice(rest.get(..n).unwrap_or(&[])),
        }
        rest = rest.get(n..).unwrap_or(&[]);
    }
    if !changed {
        return Ok(None);
    }
    scratch.extend_from_slice(rest);
    // Never rewrite over a bad checksum: the receiver would accept what the sender's
    // corruption made (a bad checksum stays bad).
    if !tcp_verifies(pkt, seg.l4, seg.end) {
        c.event(Event::AlgFtpMalformed);
        return Ok(None);
    }
    let old_len = seg.end - seg.data;
    let new_total = seg.data + scratch.len();
    let Ok(total16) = u16::try_from(new_total) else {
        c.event(Event::AlgFtpNoRoom);
        return Ok(None);
    };
    if new_total > buf.len() && !buf.set_len(new_total) {
        c.event(Event::AlgFtpNoRoom);
        return Ok(None);
    }
    if new_total < buf.len() {
        buf.truncate(new_total);
    }
    let pkt = buf.data_mut();
    let copied = pkt
        .get_mut(seg.data..new_total)
        .map(|dst| dst.copy_from_slice(scratch))
        .is_some();
    wrote(copied & set_u16(pkt, ipv4::off::TOTAL_LEN, total16))?;
    ipv4::fill_checksum(pkt, seg.l4);
    Ok(Some(
        i32::try_from(scratch.len()).unwrap_or(0) - i32::try_from(old_len).unwrap_or(0),
    ))
}

/// Does an outbound line start like one the ALG rewrites (for the split and malformed
/// counters)?
fn wanted_out(line: &[u8]) -> bool {
    let head = line.get(..4).unwrap_or(line);
    head.eq_ignore_ascii_case(b"PORT")
        || head.eq_ignore_ascii_case(b"EPRT")
        || head.starts_with(b"227")
        || head.starts_with(b"229")
}

/// Does an inbound line start like one the ALG rewrites (a 227 it may make a 229)?
fn wanted_in(line: &[u8]) -> bool {
    line.starts_with(b"227")
}

/// The outside endpoint for an announced data endpoint: the one mapped for this segment
/// before if it is a retransmission, else a new one from `map`.
fn announce(
    ctl: &mut Ctl,
    seq: u32,
    a: Announced,
    map: &mut dyn FnMut(Announced, &mut Counters) -> Option<Endpoint>,
    c: &mut Counters,
) -> Option<Endpoint> {
    if let Some((s, e)) = ctl.last {
        if s == seq {
            return Some(e);
        }
    }
    match map(a, c) {
        Some(e) => {
            ctl.last = Some((seq, e));
            Some(e)
        }
        None => {
            c.event(Event::AlgFtpMalformed);
            None
        }
    }
}

/// Is a session-index key an FTP control connection's (TCP, port 21 at either end)? The
/// lanes send those to the full path when the ALG is on.
#[inline]
pub fn is_control_key<A>(key: &crate::flow::FlowKey<A>) -> bool {
    use crate::flow::{FlowKey, Proto};
    match key {
        FlowKey::Out(Proto::Tcp, a, b) => a.port == FTP_PORT || b.port == FTP_PORT,
        FlowKey::In(Proto::Tcp, a, b) => a.port == FTP_PORT || b.port == FTP_PORT,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 TCP segment with valid checksums.
    fn seg(src: Endpoint, dst: Endpoint, seq: u32, data: &[u8]) -> Vec<u8> {
        let total = 40 + data.len();
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0];
        p.extend_from_slice(&src.addr.to_be_bytes());
        p.extend_from_slice(&dst.addr.to_be_bytes());
        p.extend_from_slice(&src.port.to_be_bytes());
        p.extend_from_slice(&dst.port.to_be_bytes());
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(data);
        assert!(set_u16(&mut p, ipv4::off::TOTAL_LEN, total as u16));
        ipv4::fill_checksum(&mut p, 20);
        let s = tcp_sum(&p, 20, total).unwrap();
        assert!(set_u16(&mut p, 20 + tcp::CHECKSUM, s));
        p
    }

    #[test]
    fn rfc2018_sack_edges_move_with_the_acknowledgement() {
        // A peer stream that grew by 3 at 1000: the SACK block 1033-1063 of the rewritten
        // stream is 1030-1060 in the sender's numbering.
        let mut peer = SeqAdj::default();
        peer.record(1000, 3);
        let a = Endpoint {
            addr: 0xc613_0002,
            port: FTP_PORT,
        };
        let b = Endpoint {
            addr: 0xc613_0064,
            port: 5000,
        };
        let mut p = seg(a, b, 1, b"");
        // Data offset 8 words: NOP, NOP, SACK (10 bytes: one block), NOP, NOP.
        let opts = [
            &[1u8, 1, 5, 10][..],
            &1033u32.to_be_bytes(),
            &1063u32.to_be_bytes(),
            &[1, 1],
        ]
        .concat();
        p.splice(40..40, opts.iter().copied());
        p[32] = 0x80;
        let total = p.len();
        assert!(set_u16(&mut p, ipv4::off::TOTAL_LEN, total as u16));
        ipv4::fill_checksum(&mut p, 20);
        assert!(set_u16(&mut p, 20 + tcp::CHECKSUM, 0));
        let s = tcp_sum(&p, 20, total).unwrap();
        assert!(set_u16(&mut p, 20 + tcp::CHECKSUM, s));
        let sg = segment(&p).unwrap();
        assert!(adjust(&mut p, &sg, &SeqAdj::default(), &peer, false));
        assert_eq!(u32_at(&p, 44), Some(1030));
        assert_eq!(u32_at(&p, 48), Some(1060));
        assert!(tcp_verifies(&p, 20, total), "incremental checksum");
    }

    #[test]
    fn plain_control_connections_take_no_entry_and_a_full_table_refuses() {
        let mut alg = FtpAlg::new(false);
        let mut c = Counters::default();
        let server = Endpoint {
            addr: 0xc613_0002,
            port: FTP_PORT,
        };
        let mut none = |_: Announced, _: &mut Counters| None;
        for i in 0..(MAX_CONTROLS as u32 + 10) {
            let ext = Endpoint {
                addr: 0xc613_0064,
                port: 1024 + (i % 60000) as u16,
            };
            let mut b = seg(ext, server, i, b"EPSV\r\nRETR x\r\n");
            let mut room = vec![0u8; b.len() + 64];
            room[..b.len()].copy_from_slice(&b);
            let mut buf = PacketBuf::new(&mut room, 0, b.len()).unwrap();
            assert_eq!(
                alg.outbound(Time(u64::from(i)), &mut buf, &mut none, &mut c),
                Ok(())
            );
            b.copy_from_slice(buf.data());
        }
        assert_eq!(alg.controls(), 0, "EPSV and RETR need no state");
        // Fill the table with connections that hold a mapped port (a bounce refused by
        // `map` keeps nothing; a port it maps does).
        let mut map = |_: Announced, _: &mut Counters| {
            Some(Endpoint {
                addr: 0xc613_0064,
                port: 40000,
            })
        };
        let port_line = b"PORT 198,18,0,20,195,80\r\n";
        for i in 0..(MAX_CONTROLS as u32 + 1) {
            let ext = Endpoint {
                addr: 0xc613_0064 + (i >> 15),
                port: 1024 + (i & 0x7fff) as u16,
            };
            let b = seg(ext, server, 1, port_line);
            let mut room = vec![0u8; b.len() + 64];
            room[..b.len()].copy_from_slice(&b);
            let mut buf = PacketBuf::new(&mut room, 0, b.len()).unwrap();
            assert_eq!(alg.outbound(Time(1), &mut buf, &mut map, &mut c), Ok(()));
        }
        assert_eq!(alg.controls(), MAX_CONTROLS);
        assert_eq!(c.count(Event::AlgFtpNoRoom), 1);
        // Idle past IDLE_AT_CAPACITY, the old ones make room.
        let b = seg(
            Endpoint {
                addr: 0xc613_0070,
                port: 5000,
            },
            server,
            1,
            port_line,
        );
        let mut room = vec![0u8; b.len() + 64];
        room[..b.len()].copy_from_slice(&b);
        let mut buf = PacketBuf::new(&mut room, 0, b.len()).unwrap();
        assert_eq!(
            alg.outbound(
                Time::from_secs(IDLE_AT_CAPACITY + 2),
                &mut buf,
                &mut map,
                &mut c,
            ),
            Ok(())
        );
        assert_eq!(alg.controls(), 1);
        assert_eq!(c.count(Event::AlgFtpRewritten), MAX_CONTROLS as u64 + 1);
    }
}
