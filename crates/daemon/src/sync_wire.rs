//! The session-sync wire format (`[sync]`, docs/FAILOVER.md): what two xlat gateways send
//! each other over UDP so the standby holds the active's sessions.
//!
//! A datagram is a 20-byte header, records, and an HMAC-SHA256 tag (RFC 2104 / FIPS 180-4)
//! over everything before it, keyed with `[sync] key`: a datagram whose tag does not verify
//! is dropped and counted before a byte of it is believed.
//!
//! ```text
//!  0      2    3     4      5     6       8       12      16        20
//!  | "XS" | v1 | type| flags| rsv | count | epoch | seq   | aux     | records ... | HMAC (32) |
//! ```
//! - `type`: DATA (session records, `seq` numbers the datagram in the sender's `epoch`),
//!   ACK (`seq`: every DATA of epoch `aux` up to it arrived), HELLO (every second both ways:
//!   the sender's role, `count` its packet workers, flag WANT_RESYNC asks for a full table).
//! - `flags`: ACTIVE (the sender forwards), BULK_BEGIN / BULK_END (a full resync's first and
//!   last datagram), WANT_RESYNC.
//! - `epoch`: drawn at random when a sender starts (or starts over); a new epoch tells the
//!   receiver that sequence numbers restart.
//!
//! A record is one session event, its first byte `op << 6 | v6 << 5 | proto << 3 | reason`
//! (op 1 created, 2 deleted; proto 0 TCP, 1 UDP, 2 ICMP; reason as
//! [`xlat_engine::synced::reason_code`]), then the inside address (4 or 16 bytes) and port,
//! the remote address and port, and for a created session the outside address and port:
//! 19 bytes for a NAT44 session made, 13 for one ended, 31 and 25 for NAT64.
//! All numbers are big-endian.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ring::hmac;
use xlat_engine::events::{EventKind, StateEvent, Translator};
use xlat_engine::flow::Proto;
use xlat_engine::synced::{reason_code, reason_of};
use xlat_engine::Time;

pub const MAGIC: [u8; 2] = *b"XS";
pub const VERSION: u8 = 1;
pub const HEADER: usize = 20;
pub const TAG: usize = 32;
/// Datagrams stay below a 1,500-byte path MTU (IPv6 and UDP headers included).
pub const MAX_DATAGRAM: usize = 1400;

pub const T_DATA: u8 = 1;
pub const T_ACK: u8 = 2;
pub const T_HELLO: u8 = 3;

pub const F_ACTIVE: u8 = 1;
pub const F_BULK_BEGIN: u8 = 2;
pub const F_BULK_END: u8 = 4;
pub const F_WANT_RESYNC: u8 = 8;

/// A datagram's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: u8,
    pub flags: u8,
    pub count: u16,
    pub epoch: u32,
    pub seq: u32,
    pub aux: u32,
}

/// Why a datagram was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than a header and a tag, or not starting with "XS".
    Malformed,
    /// Another version of this format: the peers run different xlat releases.
    Version(u8),
    /// The tag does not verify: another key, or not from the peer.
    Auth,
    /// A record that cannot be read (truncated, unknown op or protocol).
    BadRecord,
}

/// The key both gateways share.
pub struct Key(hmac::Key);

impl Key {
    pub fn new(secret: &[u8]) -> Key {
        Key(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)") // never the secret
    }
}

/// Starts a datagram in `buf` (emptied) with header `h` (`count` is set by [`seal`]).
pub fn begin(buf: &mut Vec<u8>, h: &Header) {
    buf.clear();
    buf.extend_from_slice(&MAGIC);
    buf.push(VERSION);
    buf.push(h.kind);
    buf.push(h.flags);
    buf.push(0);
    buf.extend_from_slice(&h.count.to_be_bytes());
    buf.extend_from_slice(&h.epoch.to_be_bytes());
    buf.extend_from_slice(&h.seq.to_be_bytes());
    buf.extend_from_slice(&h.aux.to_be_bytes());
}

/// Sets the record count and flags and appends the tag: the datagram is ready to send.
pub fn seal(buf: &mut Vec<u8>, key: &Key, count: u16, flags: u8) {
    if let Some(b) = buf.get_mut(4) {
        *b = flags;
    }
    if let Some(b) = buf.get_mut(6..8) {
        b.copy_from_slice(&count.to_be_bytes());
    }
    let tag = hmac::sign(&key.0, buf);
    buf.extend_from_slice(tag.as_ref());
}

/// Room left for records in a datagram of `len` bytes so far.
pub fn room(len: usize) -> usize {
    MAX_DATAGRAM.saturating_sub(len + TAG)
}

/// Checks a received datagram (magic, version, tag) and returns its header and records.
pub fn open<'a>(d: &'a [u8], key: &Key) -> Result<(Header, &'a [u8]), WireError> {
    if d.len() < HEADER + TAG || d.get(..2) != Some(&MAGIC[..]) {
        return Err(WireError::Malformed);
    }
    let v = d.get(2).copied().unwrap_or(0);
    if v != VERSION {
        return Err(WireError::Version(v));
    }
    let (body, tag) = d.split_at(d.len() - TAG);
    hmac::verify(&key.0, body, tag).map_err(|_| WireError::Auth)?;
    let u16_at = |i: usize| u16::from_be_bytes([body[i], body[i + 1]]);
    let u32_at = |i: usize| u32::from_be_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
    let h = Header {
        kind: body[3],
        flags: body[4],
        count: u16_at(6),
        epoch: u32_at(8),
        seq: u32_at(12),
        aux: u32_at(16),
    };
    Ok((h, &body[HEADER..]))
}

fn proto_code(p: Proto) -> u8 {
    match p {
        Proto::Tcp => 0,
        Proto::Udp => 1,
        Proto::Icmp => 2,
    }
}

/// The encoded length of `ev` (0: not a synced kind).
pub fn record_len(ev: &StateEvent) -> usize {
    let inside = if ev.inside.is_ipv6() { 16 } else { 4 };
    match ev.kind {
        EventKind::SessionCreated => 1 + inside + 2 + 6 + 6,
        EventKind::SessionDeleted(_) => 1 + inside + 2 + 6,
        _ => 0,
    }
}

/// Appends `ev` as a record; false (nothing written) for a kind sync does not carry.
pub fn put_record(buf: &mut Vec<u8>, ev: &StateEvent) -> bool {
    let (op, reason) = match ev.kind {
        EventKind::SessionCreated => (1u8, 0),
        EventKind::SessionDeleted(r) => (2u8, reason_code(r)),
        _ => return false,
    };
    let v6 = u8::from(ev.inside.is_ipv6());
    buf.push(op << 6 | v6 << 5 | proto_code(ev.proto) << 3 | reason);
    match ev.inside {
        IpAddr::V4(a) => buf.extend_from_slice(&a.octets()),
        IpAddr::V6(a) => buf.extend_from_slice(&a.octets()),
    }
    buf.extend_from_slice(&ev.inside_port.to_be_bytes());
    buf.extend_from_slice(&ev.remote.octets());
    buf.extend_from_slice(&ev.remote_port.to_be_bytes());
    if op == 1 {
        buf.extend_from_slice(&ev.outside.octets());
        buf.extend_from_slice(&ev.outside_port.to_be_bytes());
    }
    true
}

/// Reads the records of a DATA datagram (`count` of them) into `out` as state events at
/// time `at`; a record that cannot be read ends it with an error (the ones before it are in
/// `out`).
pub fn records(
    mut b: &[u8],
    count: u16,
    at: Time,
    out: &mut Vec<StateEvent>,
) -> Result<(), WireError> {
    for _ in 0..count {
        let (&first, rest) = b.split_first().ok_or(WireError::BadRecord)?;
        let op = first >> 6;
        let v6 = first >> 5 & 1 == 1;
        let proto = match first >> 3 & 3 {
            0 => Proto::Tcp,
            1 => Proto::Udp,
            2 => Proto::Icmp,
            _ => return Err(WireError::BadRecord),
        };
        let kind = match op {
            1 => EventKind::SessionCreated,
            2 => EventKind::SessionDeleted(reason_of(first & 7).ok_or(WireError::BadRecord)?),
            _ => return Err(WireError::BadRecord),
        };
        let alen = if v6 { 16 } else { 4 };
        let need = alen + 2 + 6 + if op == 1 { 6 } else { 0 };
        let r = rest.get(..need).ok_or(WireError::BadRecord)?;
        let (inside, translator) = if v6 {
            let mut a = [0u8; 16];
            a.copy_from_slice(&r[..16]);
            (IpAddr::V6(Ipv6Addr::from(a)), Translator::Nat64)
        } else {
            (
                IpAddr::V4(Ipv4Addr::new(r[0], r[1], r[2], r[3])),
                Translator::Nat44,
            )
        };
        let p = &r[alen..];
        let port = |i: usize| u16::from_be_bytes([p[i], p[i + 1]]);
        let v4 = |i: usize| Ipv4Addr::new(p[i], p[i + 1], p[i + 2], p[i + 3]);
        let (outside, outside_port) = if op == 1 {
            (v4(8), port(12))
        } else {
            (Ipv4Addr::UNSPECIFIED, 0)
        };
        out.push(StateEvent {
            at,
            kind,
            translator,
            session: None,
            proto,
            inside,
            inside_port: port(0),
            outside,
            outside_port,
            remote: v4(2),
            remote_port: port(6),
            with_mapping: false,
        });
        b = rest.get(need..).unwrap_or(&[]);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use xlat_engine::events::EndReason;

    fn ev(kind: EventKind, inside: IpAddr, proto: Proto) -> StateEvent {
        let created = kind == EventKind::SessionCreated;
        StateEvent {
            at: Time(0),
            kind,
            translator: if inside.is_ipv6() {
                Translator::Nat64
            } else {
                Translator::Nat44
            },
            session: None,
            proto,
            inside,
            inside_port: 40312,
            outside: if created {
                Ipv4Addr::new(198, 19, 0, 100)
            } else {
                Ipv4Addr::UNSPECIFIED
            },
            outside_port: if created { 1025 } else { 0 },
            remote: Ipv4Addr::new(203, 0, 113, 9),
            with_mapping: false,
            remote_port: 443,
        }
    }

    fn datagram(key: &Key, evs: &[StateEvent]) -> Vec<u8> {
        let mut b = Vec::new();
        let h = Header {
            kind: T_DATA,
            flags: 0,
            count: 0,
            epoch: 7,
            seq: 42,
            aux: 0,
        };
        begin(&mut b, &h);
        for e in evs {
            assert!(put_record(&mut b, e));
        }
        seal(&mut b, key, evs.len() as u16, F_ACTIVE);
        b
    }

    #[test]
    fn records_round_trip_and_are_small() {
        let key = Key::new(b"secret");
        let v4: IpAddr = Ipv4Addr::new(198, 18, 0, 7).into();
        let v6: IpAddr = "2001:db8::7".parse::<Ipv6Addr>().unwrap().into();
        let evs = vec![
            ev(EventKind::SessionCreated, v4, Proto::Tcp),
            ev(
                EventKind::SessionDeleted(EndReason::Expired),
                v4,
                Proto::Udp,
            ),
            ev(EventKind::SessionCreated, v6, Proto::Icmp),
            ev(EventKind::SessionDeleted(EndReason::Reload), v6, Proto::Tcp),
        ];
        let lens: Vec<usize> = evs.iter().map(record_len).collect();
        assert_eq!(lens, [19, 13, 31, 25]);
        let d = datagram(&key, &evs);
        assert_eq!(d.len(), HEADER + lens.iter().sum::<usize>() + TAG);
        let (h, recs) = open(&d, &key).unwrap();
        assert_eq!(
            (h.kind, h.flags, h.count, h.epoch, h.seq),
            (T_DATA, F_ACTIVE, 4, 7, 42)
        );
        let mut out = Vec::new();
        records(recs, h.count, Time(0), &mut out).unwrap();
        assert_eq!(out, evs);
        // Other events are not records.
        let host = StateEvent {
            kind: EventKind::HostBound,
            ..evs[0]
        };
        assert_eq!(record_len(&host), 0);
        assert!(!put_record(&mut Vec::new(), &host));
    }

    #[test]
    fn a_datagram_with_another_key_or_version_or_bytes_is_refused() {
        let key = Key::new(b"secret");
        let v4: IpAddr = Ipv4Addr::new(198, 18, 0, 7).into();
        let d = datagram(&key, &[ev(EventKind::SessionCreated, v4, Proto::Udp)]);
        assert_eq!(open(&d, &Key::new(b"other")).err(), Some(WireError::Auth));
        let mut flipped = d.clone();
        flipped[HEADER + 3] ^= 1;
        assert_eq!(open(&flipped, &key).err(), Some(WireError::Auth));
        let mut v2 = d.clone();
        v2[2] = 2;
        assert_eq!(open(&v2, &key).err(), Some(WireError::Version(2)));
        assert_eq!(open(&d[..HEADER], &key).err(), Some(WireError::Malformed));
        assert_eq!(open(b"garbage", &key).err(), Some(WireError::Malformed));
        // Truncated records and unknown codes, under a valid tag: refused, no panic.
        let (h, recs) = open(&d, &key).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            records(&recs[..recs.len() - 1], h.count, Time(0), &mut out),
            Err(WireError::BadRecord)
        );
        assert_eq!(
            records(recs, h.count + 1, Time(0), &mut out),
            Err(WireError::BadRecord)
        );
        for first in [0u8, 0xc0, 0x58, 0x87] {
            let mut bad = recs.to_vec();
            bad[0] = first;
            assert_eq!(
                records(&bad, 1, Time(0), &mut Vec::new()),
                Err(WireError::BadRecord),
                "first byte {first:#x}"
            );
        }
        // Every prefix of a valid record list fails cleanly.
        for n in 0..recs.len() {
            let _ = records(&recs[..n], h.count, Time(0), &mut Vec::new());
        }
    }

    /// Random events round-trip; random bytes, and valid records with random bytes changed,
    /// decode or fail without a panic (the bytes after a valid tag are still the peer's, and
    /// a peer can be wrong). Deterministic: xorshift from a fixed seed.
    #[test]
    fn random_records_round_trip_and_random_bytes_never_panic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let reasons = [
            EndReason::Expired,
            EndReason::Evicted,
            EndReason::Cleared,
            EndReason::Reload,
            EndReason::Stopped,
        ];
        let protos = [Proto::Tcp, Proto::Udp, Proto::Icmp];
        for _ in 0..20_000 {
            let r = next();
            let inside: IpAddr = if r & 1 == 0 {
                Ipv4Addr::from(next() as u32).into()
            } else {
                Ipv6Addr::from(u128::from(next()) << 64 | u128::from(next())).into()
            };
            let kind = if r & 2 == 0 {
                EventKind::SessionCreated
            } else {
                EventKind::SessionDeleted(reasons[(r >> 2) as usize % 4])
            };
            let mut e = ev(kind, inside, protos[(r >> 4) as usize % 3]);
            e.inside_port = next() as u16;
            e.remote = Ipv4Addr::from(next() as u32);
            e.remote_port = next() as u16;
            if kind == EventKind::SessionCreated {
                e.outside = Ipv4Addr::from(next() as u32);
                e.outside_port = next() as u16;
            }
            let mut b = Vec::new();
            assert!(put_record(&mut b, &e));
            assert_eq!(b.len(), record_len(&e));
            let mut out = Vec::new();
            records(&b, 1, Time(0), &mut out).unwrap();
            assert_eq!(out, [e]);
            // Mutated: a byte changed, or cut short; any outcome but a panic.
            let i = next() as usize % b.len();
            b[i] ^= (next() as u8) | 1;
            let cut = next() as usize % (b.len() + 1);
            let _ = records(&b[..cut], (next() % 4) as u16, Time(0), &mut Vec::new());
            let noise: Vec<u8> = (0..(next() % 64)).map(|_| next() as u8).collect();
            let _ = records(&noise, (next() % 8) as u16, Time(0), &mut Vec::new());
            let _ = open(&noise, &Key::new(b"k"));
        }
    }
}
