//! Stored IPFIX read back as NAT events, for `xlat lookup`: a file of IPFIX messages one
//! after another -- RFC 5655's file format, and what a collector writes when it stores each
//! datagram as it came (`socat -u UDP-RECV:4739 OPEN:ipfix.bin,creat,append`) -- decoded
//! by the templates it carries (RFC 7011 3 and 8), its NAT records named by their natEvent
//! (RFC 8158 4.1) and their fields given the names of xlat's syslog lines, so the search in
//! [`crate::lookup`] treats both logs alike.
//!
//! Nothing in a file is trusted: every length is checked against what is left, a set or
//! record that does not fit ends its message (counted in [`Summary::bad`]), a message whose
//! header is not IPFIX's ends the file (the reader has lost its place), records of unknown
//! templates are counted and skipped. Templates are kept per observation domain and
//! replaced or withdrawn as the file says (RFC 7011 8.1). Only the information elements of
//! RFC 8158's NAT templates are read; any other exporter's NAT records that use them
//! (with reduced-size integers, RFC 7011 6.2, or enterprise fields beside them) read the
//! same.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

use xlat_daemon::ipfix::{ie, nat_event, TEMPLATE_SET, VERSION};

use crate::lookup::Event;

/// RFC 7011 3.3.2: the Set ID of an options template set.
const OPTIONS_TEMPLATE_SET: u16 = 3;
/// RFC 7011 3.1: the message header's length.
const HEADER_LEN: usize = 16;
/// RFC 7011 7: a field of this length is variable-length.
const VARIABLE: u16 = 65_535;

/// How much of a file was read, for the command's summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub messages: u64,
    /// Data records decoded (of templates seen).
    pub records: u64,
    /// Data sets of a template the file did not define before them: skipped.
    pub without_template: u64,
    /// Messages with a set or record that did not fit, cut there.
    pub bad: u64,
    /// Why reading stopped early, with the offset: a header that is not IPFIX's, a
    /// message cut short by the end of the file.
    pub stopped: Option<String>,
}

/// One field specifier of a template (RFC 7011 3.2): the element (0 for an
/// enterprise-specific one, which is skipped) and its length.
#[derive(Clone, Copy, Debug)]
struct Spec {
    id: u16,
    len: u16,
}

/// The templates seen so far, by (observation domain, template ID).
#[derive(Default)]
pub struct Reader {
    templates: HashMap<(u32, u16), Vec<Spec>>,
    pub read: Summary,
}

/// Big-endian bytes as an unsigned number (RFC 7011 6.2: an unsigned value may be sent in
/// fewer octets than its type has); `None` over 8 octets.
fn unsigned(b: &[u8]) -> Option<u64> {
    (b.len() <= 8).then(|| b.iter().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The syslog MSGID of an RFC 8158 natEvent value (the names `xlat_daemon::eventlog`
/// gives them); `None` for events that open or close nothing.
fn event_name(v: u64) -> Option<&'static str> {
    use nat_event::*;
    let v = u8::try_from(v).ok()?;
    Some(match v {
        NAT44_SESSION_CREATE => "NAT44_SESSION_CREATE",
        NAT44_SESSION_DELETE => "NAT44_SESSION_DELETE",
        NAT64_SESSION_CREATE => "NAT64_SESSION_CREATE",
        NAT64_SESSION_DELETE => "NAT64_SESSION_DELETE",
        NAT44_BIB_CREATE => "NAT44_BIB_CREATE",
        NAT44_BIB_DELETE => "NAT44_BIB_DELETE",
        NAT64_BIB_CREATE => "NAT64_BIB_CREATE",
        NAT64_BIB_DELETE => "NAT64_BIB_DELETE",
        PORT_BLOCK_ALLOCATION => "PORT_BLOCK_ALLOC",
        PORT_BLOCK_DEALLOCATION => "PORT_BLOCK_DEALLOC",
        _ => return None,
    })
}

/// protocolIdentifier as the syslog lines name it (ICMP and ICMPv6 alike: `icmp`).
fn proto_name(p: u64) -> String {
    match p {
        6 => "tcp".into(),
        17 => "udp".into(),
        1 | 58 => "icmp".into(),
        other => other.to_string(),
    }
}

/// The values of one data record that a lookup uses.
#[derive(Default)]
struct Record {
    event: Option<u64>,
    at_ms: Option<u64>,
    proto: Option<u64>,
    inside: Option<String>,
    inside_port: Option<u64>,
    outside: Option<Ipv4Addr>,
    outside_port: Option<u64>,
    remote: Option<Ipv4Addr>,
    remote_port: Option<u64>,
    range: (Option<u64>, Option<u64>),
}

impl Record {
    fn set(&mut self, id: u16, v: &[u8]) {
        let v4 = || <[u8; 4]>::try_from(v).ok().map(Ipv4Addr::from);
        match id {
            _ if id == ie::NAT_EVENT.0 => self.event = unsigned(v),
            _ if id == ie::OBSERVATION_TIME_MILLISECONDS.0 => self.at_ms = unsigned(v),
            _ if id == ie::PROTOCOL_IDENTIFIER.0 => self.proto = unsigned(v),
            _ if id == ie::SOURCE_IPV4_ADDRESS.0 => {
                self.inside = v4().filter(|a| !a.is_unspecified()).map(|a| a.to_string())
            }
            _ if id == ie::SOURCE_IPV6_ADDRESS.0 => {
                self.inside = <[u8; 16]>::try_from(v)
                    .ok()
                    .map(Ipv6Addr::from)
                    .filter(|a| !a.is_unspecified())
                    .map(|a| a.to_string())
            }
            _ if id == ie::SOURCE_TRANSPORT_PORT.0 => self.inside_port = unsigned(v),
            _ if id == ie::POST_NAT_SOURCE_IPV4_ADDRESS.0 => self.outside = v4(),
            _ if id == ie::POST_NAPT_SOURCE_TRANSPORT_PORT.0 => self.outside_port = unsigned(v),
            _ if id == ie::DESTINATION_IPV4_ADDRESS.0
                || id == ie::POST_NAT_DESTINATION_IPV4_ADDRESS.0 =>
            {
                self.remote = v4()
            }
            _ if id == ie::DESTINATION_TRANSPORT_PORT.0
                || id == ie::POST_NAPT_DESTINATION_TRANSPORT_PORT.0 =>
            {
                self.remote_port = unsigned(v)
            }
            _ if id == ie::PORT_RANGE_START.0 => self.range.0 = unsigned(v),
            _ if id == ie::PORT_RANGE_END.0 => self.range.1 = unsigned(v),
            _ => {}
        }
    }

    /// The event, with the syslog line's keys; `None` without a natEvent that opens or
    /// closes something. A record without its own time has its message's export time.
    fn event(self, export_secs: u32) -> Option<Event> {
        let name = event_name(self.event?)?;
        let at_ms = self.at_ms.unwrap_or(u64::from(export_secs) * 1000);
        let at = i64::try_from(at_ms).ok()?.checked_mul(1000)?;
        let mut fields = Vec::new();
        let mut put = |k: &str, v: String| fields.push((k.to_string(), v));
        if let Some(p) = self.proto {
            put("proto", proto_name(p));
        }
        if let Some(a) = self.inside {
            put("inside", a);
        }
        if let Some(p) = self.inside_port {
            put("inside_port", p.to_string());
        }
        if let Some(a) = self.outside {
            put("outside", a.to_string());
        }
        if let (Some(a), Some(b)) = self.range {
            put("ports", format!("{a}-{b}"));
        } else if let Some(p) = self.outside_port {
            put("outside_port", p.to_string());
        }
        if let Some(a) = self.remote {
            put("remote", a.to_string());
        }
        if let Some(p) = self
            .remote_port
            .filter(|_| self.proto.is_none_or(|p| p != 1 && p != 58))
        {
            put("remote_port", p.to_string());
        }
        Some(Event { at, name, fields })
    }
}

impl Reader {
    /// Reads one message (its header included), handing each NAT event to `out`.
    pub fn message(&mut self, m: &[u8], out: &mut impl FnMut(Event)) {
        self.read.messages += 1;
        let (Some(export), Some(domain)) = (u32_at(m, 4), u32_at(m, 12)) else {
            self.read.bad += 1;
            return;
        };
        let mut at = HEADER_LEN;
        while at < m.len() {
            // RFC 7011 3.3.2: a set's length covers its header; it must fit the message.
            let (Some(id), Some(len)) = (u16_at(m, at), u16_at(m, at + 2)) else {
                self.read.bad += 1;
                return;
            };
            let len = usize::from(len);
            let Some(body) = m.get(at + 4..at + len).filter(|_| len >= 4) else {
                self.read.bad += 1;
                return;
            };
            let fits = match id {
                TEMPLATE_SET => self.templates(domain, body),
                OPTIONS_TEMPLATE_SET => true, // options data is not a NAT event
                0..=255 => true,              // reserved Set IDs: skipped (RFC 7011 3.3.2)
                _ => self.data(domain, id, export, body, out),
            };
            if !fits {
                self.read.bad += 1;
                return;
            }
            at += len;
        }
    }

    /// A template set's records (RFC 7011 3.4.1): each replaces the template of its ID; a
    /// field count of 0 withdraws it (8.1). Returns false when a record does not fit.
    fn templates(&mut self, domain: u32, mut b: &[u8]) -> bool {
        // Padding (RFC 7011 3.3.1) is shorter than a record: fewer than 4 octets, or zeros.
        while b.len() >= 4 {
            let (Some(tid), Some(count)) = (u16_at(b, 0), u16_at(b, 2)) else {
                return false;
            };
            if tid == 0 {
                return true;
            }
            b = &b[4..];
            if count == 0 {
                self.templates.remove(&(domain, tid));
                continue;
            }
            let mut specs = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                let (Some(raw), Some(len)) = (u16_at(b, 0), u16_at(b, 2)) else {
                    return false;
                };
                // The enterprise bit (RFC 7011 3.2): an enterprise number follows.
                let (id, n) = if raw & 0x8000 != 0 { (0, 8) } else { (raw, 4) };
                let Some(rest) = b.get(n..) else {
                    return false;
                };
                b = rest;
                specs.push(Spec { id, len });
            }
            if tid >= 256 {
                self.templates.insert((domain, tid), specs);
            }
        }
        true
    }

    /// A data set's records by their template; the octets after the last whole record are
    /// padding (RFC 7011 3.3.1). Returns false only for a malformed variable-length field.
    fn data(
        &mut self,
        domain: u32,
        tid: u16,
        export: u32,
        mut b: &[u8],
        out: &mut impl FnMut(Event),
    ) -> bool {
        let Some(specs) = self.templates.get(&(domain, tid)) else {
            self.read.without_template += 1;
            return true;
        };
        'records: while !b.is_empty() {
            let mut r = Record::default();
            let mut used = 0usize;
            for s in specs {
                let rest = &b[used..];
                // RFC 7011 7: a variable-length field's own length comes first, in one
                // octet, or in three when the first is 255.
                let (skip, len) = if s.len == VARIABLE {
                    match rest.first() {
                        Some(255) => match u16_at(rest, 1) {
                            Some(l) => (3, usize::from(l)),
                            None => break 'records,
                        },
                        Some(&l) => (1, usize::from(l)),
                        None => break 'records,
                    }
                } else {
                    (0, usize::from(s.len))
                };
                let Some(v) = rest.get(skip..skip + len) else {
                    break 'records; // padding, or a cut record
                };
                if s.id != 0 {
                    r.set(s.id, v);
                }
                used += skip + len;
            }
            if used == 0 {
                return false; // a template of empty fields would never end
            }
            b = &b[used..];
            self.read.records += 1;
            if let Some(e) = r.event(export) {
                out(e);
            }
        }
        true
    }
}

/// Reads a stream of IPFIX messages to its end, handing each NAT event to `out`.
pub fn read(mut r: impl io::Read, out: &mut impl FnMut(Event)) -> io::Result<Summary> {
    let mut reader = Reader::default();
    let mut offset = 0u64;
    let mut buf = vec![0u8; usize::from(u16::MAX)];
    loop {
        let got = fill(&mut r, &mut buf[..HEADER_LEN])?;
        if got == 0 {
            break;
        }
        let version = u16_at(&buf, 0);
        let len = u16_at(&buf, 2).map_or(0, usize::from);
        if got < HEADER_LEN || version != Some(VERSION) || len < HEADER_LEN {
            reader.read.stopped = Some(format!(
                "at octet {offset}: not an IPFIX message header (version {version:?}, length {len}); the rest is not read"
            ));
            break;
        }
        let body = fill(&mut r, &mut buf[HEADER_LEN..len])?;
        if body < len - HEADER_LEN {
            reader.read.stopped = Some(format!(
                "at octet {offset}: a message of {len} octets cut short by the end of the file"
            ));
            break;
        }
        reader.message(&buf[..len], out);
        offset += len as u64;
    }
    Ok(reader.read)
}

/// Reads until `buf` is full or the stream ends; returns the octets read.
fn fill(r: &mut impl io::Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Reads a whole in-memory stream.
#[cfg(test)]
pub fn read_bytes(b: &[u8], out: &mut impl FnMut(Event)) -> Summary {
    // Reading from a slice cannot fail.
    read(io::Cursor::new(b), out).unwrap_or_default()
}

/// True when `head` (a file's first octets) starts an IPFIX message.
pub fn looks_like_ipfix(head: &[u8]) -> bool {
    head.get(..2) == Some(&VERSION.to_be_bytes()[..])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::lookup::{lookup, parse_line, parse_time, Query};
    use std::net::IpAddr;
    use std::time::Duration;
    use xlat_daemon::eventlog::syslog_line;
    use xlat_daemon::ipfix::Exporter;
    use xlat_engine::events::{EndReason, EventKind, StateEvent, Translator};
    use xlat_engine::flow::Proto;
    use xlat_engine::Time;

    /// 2026-11-26T14:00:00Z, the engines' clock zero in these tests.
    const EPOCH: Duration = Duration::from_secs(1_795_701_600);

    fn ev(secs: u64, kind: EventKind, t: Translator, proto: Proto, inside: &str) -> StateEvent {
        let session = matches!(
            kind,
            EventKind::SessionCreated | EventKind::SessionDeleted(_)
        );
        let block = matches!(
            kind,
            EventKind::PortBlockAllocated | EventKind::PortBlockReleased
        );
        StateEvent {
            at: Time(secs * 1_000_000_000 + 250_000_000),
            kind,
            translator: t,
            session: session.then_some(7),
            proto,
            inside: inside.parse().unwrap(),
            inside_port: if block { 0 } else { 40312 },
            outside: Ipv4Addr::new(198, 19, 0, 100),
            outside_port: if block { 40256 } else { 1025 },
            remote: Ipv4Addr::new(198, 19, 0, 2),
            remote_port: if block { 40767 } else { 80 },
            with_mapping: false,
        }
    }

    /// A day's events of every kind a lookup reads, NAT44 and NAT64.
    fn events() -> Vec<StateEvent> {
        use EventKind::*;
        use Translator::*;
        let mut v = Vec::new();
        for (i, (t, inside)) in [(Nat44, "198.18.0.7"), (Nat64, "2001:db8:100::7")]
            .into_iter()
            .enumerate()
        {
            let s = 100 * i as u64;
            for proto in [Proto::Tcp, Proto::Udp, Proto::Icmp] {
                v.push(ev(s + 1, MappingCreated, t, proto, inside));
                v.push(ev(s + 2, SessionCreated, t, proto, inside));
                v.push(ev(
                    s + 3,
                    SessionDeleted(EndReason::Expired),
                    t,
                    proto,
                    inside,
                ));
                v.push(ev(s + 4, MappingDeleted, t, proto, inside));
            }
            v.push(ev(s + 5, PortBlockAllocated, t, Proto::Udp, inside));
            v.push(ev(s + 6, PortBlockReleased, t, Proto::Udp, inside));
        }
        v
    }

    /// The messages the daemon's exporter sends for `evs`, one after another as a collector
    /// stores them; `per` events a message batch.
    fn stored(evs: &[StateEvent], per: usize) -> Vec<u8> {
        let mut x = Exporter::new(9, 512, Duration::from_secs(60), 0);
        let mut msgs = Vec::new();
        for (i, chunk) in evs.chunks(per).enumerate() {
            x.encode(
                chunk,
                EPOCH,
                EPOCH + Duration::from_secs(i as u64),
                &mut msgs,
            );
        }
        msgs.into_iter().flat_map(|m| m.bytes).collect()
    }

    fn decoded(b: &[u8]) -> (Vec<Event>, Summary) {
        let mut out = Vec::new();
        let s = read_bytes(b, &mut |e| out.push(e));
        (out, s)
    }

    /// Each IPFIX record reads as the daemon's syslog line for the same event reads (its
    /// time to the millisecond, no reason: RFC 8158 has no field for it).
    #[test]
    fn ipfix_records_read_as_the_syslog_lines_of_the_same_events() {
        let evs = events();
        let (got, s) = decoded(&stored(&evs, 5));
        assert_eq!((s.bad, s.without_template, &s.stopped), (0, 0, &None));
        assert_eq!(s.records, evs.len() as u64);
        assert_eq!(got.len(), evs.len());
        for (e, x) in evs.iter().zip(&got) {
            let mut line = String::new();
            syslog_line(&mut line, e, EPOCH + Duration::from_nanos(e.at.0), "gw", 1);
            let mut want = parse_line(&line).unwrap();
            want.fields.retain(|(k, _)| k != "reason");
            want.at = want.at / 1000 * 1000;
            assert_eq!(x, &want, "{line}");
        }
    }

    /// RFC 6888 REQ-12 over IPFIX: the session, mapping and block that held the endpoint.
    #[test]
    fn lookup_answers_from_ipfix() {
        let (got, _) = decoded(&stored(&events(), 3));
        let q = |secs: u64, port: u16, proto: &str| Query {
            addr: Ipv4Addr::new(198, 19, 0, 100),
            port,
            at: parse_time("2026-11-26T14:00:00Z").unwrap() + secs as i64 * 1_000_000 + 500_000,
            proto: Some(proto.into()),
        };
        let h = lookup(got.clone(), &q(2, 1025, "tcp"));
        let what: Vec<&str> = h.iter().map(|h| h.what.as_str()).collect();
        assert_eq!(what, ["NAT44_BIB", "NAT44_SESSION"], "{h:?}");
        let h = lookup(got.clone(), &q(105, 40300, "udp"));
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[0].what, "PORT_BLOCK");
        let inside = &h[0].fields.iter().find(|(k, _)| k == "inside").unwrap().1;
        assert_eq!(
            inside.parse::<IpAddr>().unwrap(),
            "2001:db8:100::7".parse::<IpAddr>().unwrap()
        );
        assert!(lookup(got, &q(50, 1025, "tcp")).is_empty());
    }

    /// A file cut anywhere, or with any octet changed, reads without a panic, and what was
    /// read before the damage is kept.
    #[test]
    fn damaged_files_read_without_panic() {
        let b = stored(&events(), 4);
        let whole = decoded(&b).0.len();
        for cut in 0..b.len() {
            let (got, s) = decoded(&b[..cut]);
            assert!(got.len() <= whole);
            if cut > 0 && cut < b.len() {
                assert!(
                    s.stopped.is_some() || s.bad > 0 || got.len() < whole,
                    "cut {cut}"
                );
            }
        }
        // Every octet set to each of a few values (a cheap deterministic fuzz).
        for i in 0..b.len() {
            for v in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut d = b.clone();
                d[i] = v;
                let _ = decoded(&d);
            }
        }
        // Not IPFIX at all: stops at once, says where.
        let (got, s) = decoded(b"<134>1 2026-11-26T14:02:11Z gw xlat 1 NAT44_SESSION_CREATE");
        assert!(got.is_empty());
        assert!(s.stopped.unwrap().starts_with("at octet 0"));
    }

    /// Messages of other exporters: reduced-size integers (RFC 7011 6.2), enterprise and
    /// variable-length fields (3.2, 7), padding (3.3.1), a withdrawn template (8.1), data
    /// before its template.
    #[test]
    fn other_exporters_shapes() {
        fn msg(sets: &[Vec<u8>]) -> Vec<u8> {
            let body: Vec<u8> = sets.concat();
            let mut m = Vec::new();
            m.extend_from_slice(&10u16.to_be_bytes());
            m.extend_from_slice(&((16 + body.len()) as u16).to_be_bytes());
            m.extend_from_slice(&1_795_701_600u32.to_be_bytes()); // export time
            m.extend_from_slice(&0u32.to_be_bytes());
            m.extend_from_slice(&5u32.to_be_bytes()); // domain
            m.extend(body);
            m
        }
        fn set(id: u16, body: &[u8]) -> Vec<u8> {
            let mut s = id.to_be_bytes().to_vec();
            s.extend_from_slice(&((4 + body.len()) as u16).to_be_bytes());
            s.extend_from_slice(body);
            s
        }
        let be = |v: u16| v.to_be_bytes();
        // Template 300: natEvent(1), an enterprise field (4 octets + PEN), protocol(1),
        // postNATSourceIPv4Address(4), postNAPTSourceTransportPort(2), a variable-length
        // field (interfaceName 82), sourceIPv4Address(4). No time: the export time is used.
        let mut t = [be(300), be(7)].concat();
        for (id, len) in [
            (230u16, 1u16),
            (0x8000 | 12, 4),
            (4, 1),
            (225, 4),
            (227, 2),
            (82, 65535),
            (8, 4),
        ] {
            t.extend_from_slice(&be(id));
            t.extend_from_slice(&be(len));
            if id & 0x8000 != 0 {
                t.extend_from_slice(&9u32.to_be_bytes());
            }
        }
        let rec = |ev: u8, name: &[u8]| {
            let mut r = vec![ev, 0xde, 0xad, 0xbe, 0xef, 17, 198, 19, 0, 100, 0x9d, 0x78];
            r.push(name.len() as u8);
            r.extend_from_slice(name);
            r.extend_from_slice(&[198, 18, 0, 9]);
            r
        };
        let data = [rec(4, b"eth0"), rec(5, b""), vec![0, 0, 0]].concat(); // 3 octets of padding
        let file = [
            msg(&[set(300, &data)]), // before its template: skipped
            msg(&[set(2, &t), set(300, &data)]),
            msg(&[set(2, &[be(300), be(0)].concat()), set(300, &data)]), // withdrawn
        ]
        .concat();
        let (got, s) = decoded(&file);
        assert_eq!((s.messages, s.without_template, s.bad), (3, 2, 0), "{s:?}");
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].name, "NAT44_SESSION_CREATE");
        assert_eq!(got[1].name, "NAT44_SESSION_DELETE");
        assert_eq!(got[0].at, 1_795_701_600 * 1_000_000);
        let f: Vec<(&str, &str)> = got[0]
            .fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            f,
            [
                ("proto", "udp"),
                ("inside", "198.18.0.9"),
                ("outside", "198.19.0.100"),
                ("outside_port", "40312")
            ]
        );
    }
}
