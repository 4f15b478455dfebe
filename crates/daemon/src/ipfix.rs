//! IPFIX export of NAT events: the engine's state events encoded as IPFIX messages
//! (RFC 7011, over UDP, section 10.3) with the information elements RFC 8158 defines for
//! logging NAT events (natEvent 230 and its templates, section 4), for a collector that
//! stores them (nfcapd, pmacct, a SIEM) and notices what UDP lost by the sequence numbers.
//!
//! Pure encoding: [`Exporter::encode`] turns a batch of events into messages; the log
//! thread ([`crate::eventlog`]) sends them, after each drain of the workers' queues, never
//! on a packet worker. One template per event shape ([`Template`], IDs 256..), all of them
//! at the head of the first message and again at the head of the first message after each
//! `refresh` (RFC 7011 10.3.6: over UDP templates are resent periodically, since a
//! collector may have missed them or restarted). Messages stay within `max_len` octets,
//! below the path MTU (RFC 7011 10.3.3), each packed with as many records as fit; the
//! sequence number of a message counts the data records sent before it (RFC 7011 3.1).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use xlat_engine::events::{EventKind, StateEvent, Translator};
use xlat_engine::flow::Proto;

/// RFC 7011 3.1: the version number of IPFIX messages.
pub const VERSION: u16 = 10;
/// RFC 7011 3.3.2: the Set ID of a template set.
pub const TEMPLATE_SET: u16 = 2;
/// Message size by default: below a 1500-octet path MTU with IPv6 and UDP headers
/// (1500 - 40 - 8 = 1452), RFC 7011 10.3.3.
pub const DEFAULT_MAX_LEN: usize = 1400;
/// Templates resent by default every minute (RFC 7011 10.3.6 leaves the interval to the
/// configuration).
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(60);

/// RFC 7011 3.1: the message header's length.
const HEADER_LEN: usize = 16;
/// RFC 7011 3.3.2: a set header's length.
const SET_HEADER_LEN: usize = 4;

/// Information elements (IANA IPFIX registry; RFC 7012 section 5 and RFC 8158 section 4.2):
/// element ID, and the length exported here in octets.
pub mod ie {
    /// protocolIdentifier (RFC 7012 5.4.1), unsigned8.
    pub const PROTOCOL_IDENTIFIER: (u16, u16) = (4, 1);
    /// sourceTransportPort (5.4.2), unsigned16.
    pub const SOURCE_TRANSPORT_PORT: (u16, u16) = (7, 2);
    /// sourceIPv4Address (5.4.4), ipv4Address.
    pub const SOURCE_IPV4_ADDRESS: (u16, u16) = (8, 4);
    /// destinationTransportPort (5.4.3), unsigned16.
    pub const DESTINATION_TRANSPORT_PORT: (u16, u16) = (11, 2);
    /// destinationIPv4Address (5.4.5), ipv4Address.
    pub const DESTINATION_IPV4_ADDRESS: (u16, u16) = (12, 4);
    /// sourceIPv6Address (5.4.6), ipv6Address.
    pub const SOURCE_IPV6_ADDRESS: (u16, u16) = (27, 16);
    /// postNATSourceIPv4Address, ipv4Address.
    pub const POST_NAT_SOURCE_IPV4_ADDRESS: (u16, u16) = (225, 4);
    /// postNATDestinationIPv4Address, ipv4Address.
    pub const POST_NAT_DESTINATION_IPV4_ADDRESS: (u16, u16) = (226, 4);
    /// postNAPTSourceTransportPort, unsigned16.
    pub const POST_NAPT_SOURCE_TRANSPORT_PORT: (u16, u16) = (227, 2);
    /// postNAPTDestinationTransportPort, unsigned16.
    pub const POST_NAPT_DESTINATION_TRANSPORT_PORT: (u16, u16) = (228, 2);
    /// natEvent (RFC 8158 4.1 values), unsigned8.
    pub const NAT_EVENT: (u16, u16) = (230, 1);
    /// natPoolId, unsigned32.
    pub const NAT_POOL_ID: (u16, u16) = (283, 4);
    /// observationTimeMilliseconds (RFC 8158 4.2's timeStamp), dateTimeMilliseconds.
    pub const OBSERVATION_TIME_MILLISECONDS: (u16, u16) = (323, 8);
    /// natQuotaExceededEvent (RFC 8158 5.1), unsigned32.
    pub const NAT_QUOTA_EXCEEDED_EVENT: (u16, u16) = (466, 4);
    /// maxEntriesPerUser (RFC 8158 5.1), unsigned32.
    pub const MAX_ENTRIES_PER_USER: (u16, u16) = (473, 4);
    /// portRangeStart, unsigned16.
    pub const PORT_RANGE_START: (u16, u16) = (361, 2);
    /// portRangeEnd, unsigned16.
    pub const PORT_RANGE_END: (u16, u16) = (362, 2);
    /// portRangeStepSize, unsigned16 (1: every port of the range).
    pub const PORT_RANGE_STEP_SIZE: (u16, u16) = (363, 2);
    /// portRangeNumPorts, unsigned16.
    pub const PORT_RANGE_NUM_PORTS: (u16, u16) = (364, 2);
}

/// RFC 8158 4.1 natEvent values (IANA "natEvent" registry).
pub mod nat_event {
    pub const ADDRESSES_EXHAUSTED: u8 = 3;
    pub const NAT44_SESSION_CREATE: u8 = 4;
    pub const NAT44_SESSION_DELETE: u8 = 5;
    pub const NAT64_SESSION_CREATE: u8 = 6;
    pub const NAT64_SESSION_DELETE: u8 = 7;
    pub const NAT44_BIB_CREATE: u8 = 8;
    pub const NAT44_BIB_DELETE: u8 = 9;
    pub const NAT64_BIB_CREATE: u8 = 10;
    pub const NAT64_BIB_DELETE: u8 = 11;
    pub const PORTS_EXHAUSTED: u8 = 12;
    pub const QUOTA_EXCEEDED: u8 = 13;
    pub const ADDRESS_BINDING_CREATE: u8 = 14;
    pub const ADDRESS_BINDING_DELETE: u8 = 15;
    pub const PORT_BLOCK_ALLOCATION: u8 = 16;
    pub const PORT_BLOCK_DEALLOCATION: u8 = 17;
}

/// RFC 8158 5.1 natQuotaExceededEvent 3: "Maximum entries per user".
const QUOTA_ENTRIES_PER_USER: u32 = 3;

/// natPoolId of the pools (RFC 8158 4.4.9 names the pool that ran out): `[nat44] pool`
/// is 1, `[nat64] pool4` is 2.
pub fn pool_id(t: Translator) -> u32 {
    match t {
        Translator::Nat44 => 1,
        Translator::Nat64 => 2,
    }
}

/// One template per event shape (RFC 8158 4.4's templates, with the fields this NAT has).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Template {
    /// RFC 8158 4.4.1 NAT44 session create/delete.
    Nat44Session,
    /// RFC 8158 4.4.2 NAT64 session create/delete.
    Nat64Session,
    /// RFC 8158 4.4.3 NAT44 BIB create/delete.
    Nat44Bib,
    /// RFC 8158 4.4.4 NAT64 BIB create/delete.
    Nat64Bib,
    /// RFC 8158 4.4.5 address binding create/delete (an IPv4 host paired with a pool address).
    Nat44Binding,
    /// The same for an IPv6 host (NAT64).
    Nat64Binding,
    /// RFC 8158 4.4.9 addresses exhausted.
    AddressesExhausted,
    /// RFC 8158 4.4.10 ports exhausted.
    PortsExhausted,
    /// RFC 8158 4.4.12 quota exceeded, maximum entries per user (an IPv4 host).
    Nat44Quota,
    /// The same for an IPv6 host.
    Nat64Quota,
    /// RFC 8158 4.4.6 port block allocation/de-allocation (an IPv4 host's block; with the
    /// protocol, since blocks are per protocol here).
    Nat44PortBlock,
    /// The same for an IPv6 host.
    Nat64PortBlock,
}

impl Template {
    pub const ALL: [Template; 12] = [
        Template::Nat44Session,
        Template::Nat64Session,
        Template::Nat44Bib,
        Template::Nat64Bib,
        Template::Nat44Binding,
        Template::Nat64Binding,
        Template::AddressesExhausted,
        Template::PortsExhausted,
        Template::Nat44Quota,
        Template::Nat64Quota,
        Template::Nat44PortBlock,
        Template::Nat64PortBlock,
    ];

    /// The template ID (RFC 7011 3.4.1: 256 and up), also the Set ID of its data sets.
    pub fn id(self) -> u16 {
        256 + self as u16
    }

    /// The field specifiers in order: (information element, length).
    pub fn fields(self) -> &'static [(u16, u16)] {
        use ie::*;
        match self {
            Template::Nat44Session => &[
                OBSERVATION_TIME_MILLISECONDS,
                SOURCE_IPV4_ADDRESS,
                POST_NAT_SOURCE_IPV4_ADDRESS,
                PROTOCOL_IDENTIFIER,
                SOURCE_TRANSPORT_PORT,
                POST_NAPT_SOURCE_TRANSPORT_PORT,
                DESTINATION_IPV4_ADDRESS,
                DESTINATION_TRANSPORT_PORT,
                NAT_EVENT,
            ],
            // The remote is named by its IPv4 address (after translation): the event
            // holds that, not the pref64 address the IPv6 host used.
            Template::Nat64Session => &[
                OBSERVATION_TIME_MILLISECONDS,
                SOURCE_IPV6_ADDRESS,
                POST_NAT_SOURCE_IPV4_ADDRESS,
                PROTOCOL_IDENTIFIER,
                SOURCE_TRANSPORT_PORT,
                POST_NAPT_SOURCE_TRANSPORT_PORT,
                POST_NAT_DESTINATION_IPV4_ADDRESS,
                POST_NAPT_DESTINATION_TRANSPORT_PORT,
                NAT_EVENT,
            ],
            Template::Nat44Bib => &[
                OBSERVATION_TIME_MILLISECONDS,
                SOURCE_IPV4_ADDRESS,
                POST_NAT_SOURCE_IPV4_ADDRESS,
                PROTOCOL_IDENTIFIER,
                SOURCE_TRANSPORT_PORT,
                POST_NAPT_SOURCE_TRANSPORT_PORT,
                NAT_EVENT,
            ],
            Template::Nat64Bib => &[
                OBSERVATION_TIME_MILLISECONDS,
                SOURCE_IPV6_ADDRESS,
                POST_NAT_SOURCE_IPV4_ADDRESS,
                PROTOCOL_IDENTIFIER,
                SOURCE_TRANSPORT_PORT,
                POST_NAPT_SOURCE_TRANSPORT_PORT,
                NAT_EVENT,
            ],
            Template::Nat44Binding => &[
                OBSERVATION_TIME_MILLISECONDS,
                SOURCE_IPV4_ADDRESS,
                POST_NAT_SOURCE_IPV4_ADDRESS,
                NAT_EVENT,
            ],
            Template::Nat64Binding => &[
                OBSERVATION_TIME_MILLISECONDS,
                SOURCE_IPV6_ADDRESS,
                POST_NAT_SOURCE_IPV4_ADDRESS,
                NAT_EVENT,
            ],
            Template::AddressesExhausted => {
                &[OBSERVATION_TIME_MILLISECONDS, NAT_EVENT, NAT_POOL_ID]
            }
            Template::PortsExhausted => &[
                OBSERVATION_TIME_MILLISECONDS,
                NAT_EVENT,
                POST_NAT_SOURCE_IPV4_ADDRESS,
            ],
            Template::Nat44Quota => &[
                OBSERVATION_TIME_MILLISECONDS,
                NAT_EVENT,
                NAT_QUOTA_EXCEEDED_EVENT,
                MAX_ENTRIES_PER_USER,
                SOURCE_IPV4_ADDRESS,
            ],
            Template::Nat64Quota => &[
                OBSERVATION_TIME_MILLISECONDS,
                NAT_EVENT,
                NAT_QUOTA_EXCEEDED_EVENT,
                MAX_ENTRIES_PER_USER,
                SOURCE_IPV6_ADDRESS,
            ],
            Template::Nat44PortBlock => &[
                OBSERVATION_TIME_MILLISECONDS,
                SOURCE_IPV4_ADDRESS,
                POST_NAT_SOURCE_IPV4_ADDRESS,
                PROTOCOL_IDENTIFIER,
                PORT_RANGE_START,
                PORT_RANGE_END,
                PORT_RANGE_STEP_SIZE,
                PORT_RANGE_NUM_PORTS,
                NAT_EVENT,
            ],
            Template::Nat64PortBlock => &[
                OBSERVATION_TIME_MILLISECONDS,
                SOURCE_IPV6_ADDRESS,
                POST_NAT_SOURCE_IPV4_ADDRESS,
                PROTOCOL_IDENTIFIER,
                PORT_RANGE_START,
                PORT_RANGE_END,
                PORT_RANGE_STEP_SIZE,
                PORT_RANGE_NUM_PORTS,
                NAT_EVENT,
            ],
        }
    }

    /// Octets of one data record.
    pub fn record_len(self) -> usize {
        self.fields().iter().map(|&(_, l)| usize::from(l)).sum()
    }
}

/// The template and natEvent value of an event; `None` for what is not a NAT event (the
/// fast path's instructions).
pub fn classify(ev: &StateEvent) -> Option<(Template, u8)> {
    use nat_event::*;
    let v6 = ev.translator == Translator::Nat64;
    fn pick<T>(v6: bool, v4: T, v6v: T) -> T {
        if v6 {
            v6v
        } else {
            v4
        }
    }
    Some(match ev.kind {
        EventKind::SessionCreated => (
            pick(v6, Template::Nat44Session, Template::Nat64Session),
            pick(v6, NAT44_SESSION_CREATE, NAT64_SESSION_CREATE),
        ),
        EventKind::SessionDeleted(_) => (
            pick(v6, Template::Nat44Session, Template::Nat64Session),
            pick(v6, NAT44_SESSION_DELETE, NAT64_SESSION_DELETE),
        ),
        EventKind::MappingCreated => (
            pick(v6, Template::Nat44Bib, Template::Nat64Bib),
            pick(v6, NAT44_BIB_CREATE, NAT64_BIB_CREATE),
        ),
        EventKind::MappingDeleted => (
            pick(v6, Template::Nat44Bib, Template::Nat64Bib),
            pick(v6, NAT44_BIB_DELETE, NAT64_BIB_DELETE),
        ),
        EventKind::HostBound => (
            pick(v6, Template::Nat44Binding, Template::Nat64Binding),
            ADDRESS_BINDING_CREATE,
        ),
        EventKind::HostUnbound => (
            pick(v6, Template::Nat44Binding, Template::Nat64Binding),
            ADDRESS_BINDING_DELETE,
        ),
        EventKind::AddressesExhausted => (Template::AddressesExhausted, ADDRESSES_EXHAUSTED),
        EventKind::PortsExhausted => (Template::PortsExhausted, PORTS_EXHAUSTED),
        EventKind::QuotaExceeded => (
            pick(v6, Template::Nat44Quota, Template::Nat64Quota),
            QUOTA_EXCEEDED,
        ),
        EventKind::PortBlockAllocated => (
            pick(v6, Template::Nat44PortBlock, Template::Nat64PortBlock),
            PORT_BLOCK_ALLOCATION,
        ),
        EventKind::PortBlockReleased => (
            pick(v6, Template::Nat44PortBlock, Template::Nat64PortBlock),
            PORT_BLOCK_DEALLOCATION,
        ),
        EventKind::FastPath(_) => return None,
    })
}

/// The IP protocol number of an event's inside packets (RFC 7012 5.4.1: the value of the
/// protocol field; an IPv6 host's ICMP is ICMPv6, 58).
fn protocol(ev: &StateEvent) -> u8 {
    match (ev.proto, ev.translator) {
        (Proto::Tcp, _) => 6,
        (Proto::Udp, _) => 17,
        (Proto::Icmp, Translator::Nat44) => 1,
        (Proto::Icmp, Translator::Nat64) => 58,
    }
}

/// Appends the record of `ev` (template `t`, natEvent `code`) at `at_ms` (milliseconds
/// since the Unix epoch), its fields in the template's order, network byte order
/// (RFC 7011 6.1). An ICMP event's identifier is its port, as in the NAT's tables.
fn put_record(out: &mut Vec<u8>, t: Template, code: u8, ev: &StateEvent, at_ms: u64, quota: u32) {
    let v4 = |a: IpAddr| match a {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
    };
    for &f in t.fields() {
        match f {
            ie::OBSERVATION_TIME_MILLISECONDS => out.extend_from_slice(&at_ms.to_be_bytes()),
            ie::SOURCE_IPV4_ADDRESS => out.extend_from_slice(&v4(ev.inside).octets()),
            ie::SOURCE_IPV6_ADDRESS => {
                let a = match ev.inside {
                    IpAddr::V6(a) => a,
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                };
                out.extend_from_slice(&a.octets());
            }
            ie::POST_NAT_SOURCE_IPV4_ADDRESS => out.extend_from_slice(&ev.outside.octets()),
            ie::PROTOCOL_IDENTIFIER => out.push(protocol(ev)),
            ie::SOURCE_TRANSPORT_PORT => out.extend_from_slice(&ev.inside_port.to_be_bytes()),
            ie::POST_NAPT_SOURCE_TRANSPORT_PORT => {
                out.extend_from_slice(&ev.outside_port.to_be_bytes())
            }
            ie::DESTINATION_IPV4_ADDRESS | ie::POST_NAT_DESTINATION_IPV4_ADDRESS => {
                out.extend_from_slice(&ev.remote.octets())
            }
            ie::DESTINATION_TRANSPORT_PORT | ie::POST_NAPT_DESTINATION_TRANSPORT_PORT => {
                out.extend_from_slice(&ev.remote_port.to_be_bytes())
            }
            ie::NAT_EVENT => out.push(code),
            ie::NAT_POOL_ID => out.extend_from_slice(&pool_id(ev.translator).to_be_bytes()),
            ie::NAT_QUOTA_EXCEEDED_EVENT => {
                out.extend_from_slice(&QUOTA_ENTRIES_PER_USER.to_be_bytes())
            }
            ie::MAX_ENTRIES_PER_USER => out.extend_from_slice(&quota.to_be_bytes()),
            // A port block's first and last port ride in `outside_port` and `remote_port`
            // (xlat_engine::events::EventKind::PortBlockAllocated).
            ie::PORT_RANGE_START => out.extend_from_slice(&ev.outside_port.to_be_bytes()),
            ie::PORT_RANGE_END => out.extend_from_slice(&ev.remote_port.to_be_bytes()),
            ie::PORT_RANGE_STEP_SIZE => out.extend_from_slice(&1u16.to_be_bytes()),
            ie::PORT_RANGE_NUM_PORTS => {
                let n = ev
                    .remote_port
                    .saturating_sub(ev.outside_port)
                    .saturating_add(1);
                out.extend_from_slice(&n.to_be_bytes())
            }
            // Every template's fields are listed above (a test checks the lengths).
            (_, len) => out.extend(std::iter::repeat_n(0, usize::from(len))),
        }
    }
}

/// Writes a big-endian u16 at `at` (within `out`, which the encoder sized).
fn set_u16(out: &mut [u8], at: usize, v: u16) {
    if let Some(s) = out.get_mut(at..at + 2) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// The exporting process's state for one observation domain: the sequence number and when
/// the templates were last sent.
#[derive(Debug)]
pub struct Exporter {
    domain: u32,
    max_len: usize,
    refresh: Duration,
    /// `maxEntriesPerUser` of quota records: `[limits] max_sessions_per_host`.
    quota: u32,
    /// ... or `nat44.ports_per_host` for a host whose deterministic range is full (RFC 7422;
    /// its event names the outside address, a session-limit one does not); 0: off.
    port_quota: u32,
    /// Data records sent so far (mod 2^32): the next message's sequence number.
    seq: u32,
    /// Wall time the templates were last sent; `None` before the first message.
    templates_at: Option<Duration>,
}

/// One IPFIX message, ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub bytes: Vec<u8>,
    /// Data records in it.
    pub records: u32,
}

/// A message being filled.
struct Msg {
    buf: Vec<u8>,
    records: u32,
    /// The open data set: its template ID and where its header starts.
    set: Option<(u16, usize)>,
}

impl Exporter {
    /// An exporter for observation domain `domain`, messages of at most `max_len` octets
    /// (at least one template set and one record: 512 and up), templates resent every
    /// `refresh`.
    pub fn new(domain: u32, max_len: usize, refresh: Duration, quota: u32) -> Exporter {
        Exporter {
            domain,
            max_len: max_len.clamp(512, usize::from(u16::MAX)),
            refresh,
            quota,
            port_quota: 0,
            seq: 0,
            templates_at: None,
        }
    }

    /// Quota records of hosts whose deterministic port range (`nat44.ports_per_host`) is
    /// full say `ports` entries per user; 0 leaves every quota record at the session limit.
    pub fn with_port_quota(mut self, ports: u32) -> Exporter {
        self.port_quota = ports;
        self
    }

    /// The sequence number the next message will carry.
    pub fn sequence(&self) -> u32 {
        self.seq
    }

    /// The observation domain ID (RFC 7011 3.1).
    pub fn domain(&self) -> u32 {
        self.domain
    }

    /// A reload's new keys: the template refresh interval and the quota records' values;
    /// the sequence number and the templates' schedule go on.
    pub fn set_keys(&mut self, refresh: Duration, quota: u32, port_quota: u32) {
        self.refresh = refresh;
        self.quota = quota;
        self.port_quota = port_quota;
    }

    /// A message with the template set and no data record, exported at `now`: what a
    /// collector added while running gets first (RFC 7011 8.1: a collector needs the
    /// template before the data records that use it). Its sequence number is the next
    /// message's (no record counted); the periodic resend's schedule is not touched.
    pub fn templates(&mut self, now: Duration) -> Message {
        let at = self.templates_at;
        let m = self.start_with(now, true);
        self.templates_at = at;
        self.finish(m)
    }

    /// Encodes `events` into messages appended to `out`; returns the data records written.
    /// `epoch` is the wall time of the engines' clock zero and `now` the wall time (both
    /// since the Unix epoch): `now` is each message's export time (RFC 7011 3.1) and decides
    /// when the templates are due again.
    pub fn encode(
        &mut self,
        events: &[StateEvent],
        epoch: Duration,
        now: Duration,
        out: &mut Vec<Message>,
    ) -> u64 {
        let mut msg: Option<Msg> = None;
        let mut total = 0u64;
        for ev in events {
            let Some((t, code)) = classify(ev) else {
                continue;
            };
            let at = epoch + Duration::from_nanos(ev.at.0);
            let at_ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX);
            // A new message when this record (and a set header) does not fit.
            let fits = |m: &Msg| {
                let set = if m.set.map(|s| s.0) == Some(t.id()) {
                    0
                } else {
                    SET_HEADER_LEN
                };
                m.buf.len() + set + t.record_len() <= self.max_len
            };
            if msg.as_ref().is_some_and(|m| !fits(m)) {
                if let Some(m) = msg.take() {
                    out.push(self.finish(m));
                }
            }
            let m = match msg.as_mut() {
                Some(m) => m,
                None => msg.insert(self.start(now)),
            };
            if m.set.map(|s| s.0) != Some(t.id()) {
                close_set(m);
                m.set = Some((t.id(), m.buf.len()));
                // RFC 7011 3.3.2: a data set's Set ID is its template's ID.
                m.buf.extend_from_slice(&t.id().to_be_bytes());
                m.buf.extend_from_slice(&[0, 0]);
            }
            let quota = match (self.port_quota, ev.outside.is_unspecified()) {
                (p, false) if p > 0 => p,
                _ => self.quota,
            };
            put_record(&mut m.buf, t, code, ev, at_ms, quota);
            m.records += 1;
            total += 1;
        }
        if let Some(m) = msg {
            out.push(self.finish(m));
        }
        total
    }

    /// Opens a message: header (RFC 7011 3.1; length and sequence number written by
    /// [`Self::finish`]), then the template set when the templates are due.
    fn start(&mut self, now: Duration) -> Msg {
        self.start_with(now, false)
    }

    /// [`Self::start`], with the template set also when not due (`templates`).
    fn start_with(&mut self, now: Duration, templates: bool) -> Msg {
        let mut buf = Vec::with_capacity(self.max_len);
        buf.extend_from_slice(&VERSION.to_be_bytes());
        buf.extend_from_slice(&[0, 0]);
        let secs = u32::try_from(now.as_secs()).unwrap_or(u32::MAX);
        buf.extend_from_slice(&secs.to_be_bytes());
        buf.extend_from_slice(&[0, 0, 0, 0]);
        buf.extend_from_slice(&self.domain.to_be_bytes());
        debug_assert_eq!(buf.len(), HEADER_LEN);
        // RFC 7011 10.3.6: resent periodically over UDP (and a clock stepped back counts
        // as due).
        let due = match self.templates_at {
            None => true,
            Some(at) => now < at || now - at >= self.refresh,
        };
        if due || templates {
            template_set(&mut buf);
            self.templates_at = Some(now);
        }
        Msg {
            buf,
            records: 0,
            set: None,
        }
    }

    /// Closes the open set, writes the length and the sequence number: the count of data
    /// records sent before this message (RFC 7011 3.1), then counts this one's.
    fn finish(&mut self, mut m: Msg) -> Message {
        close_set(&mut m);
        let len = u16::try_from(m.buf.len()).unwrap_or(u16::MAX);
        set_u16(&mut m.buf, 2, len);
        if let Some(s) = m.buf.get_mut(8..12) {
            s.copy_from_slice(&self.seq.to_be_bytes());
        }
        self.seq = self.seq.wrapping_add(m.records);
        Message {
            bytes: m.buf,
            records: m.records,
        }
    }
}

/// Writes the open data set's length (RFC 7011 3.3.2: header included, no padding here).
fn close_set(m: &mut Msg) {
    if let Some((_, at)) = m.set.take() {
        let len = u16::try_from(m.buf.len() - at).unwrap_or(u16::MAX);
        set_u16(&mut m.buf, at + 2, len);
    }
}

/// Appends the template set with every template (RFC 7011 3.4.1: Set ID 2; each record a
/// template ID, a field count, then per field its element ID and length; enterprise bit 0).
fn template_set(buf: &mut Vec<u8>) {
    let at = buf.len();
    buf.extend_from_slice(&TEMPLATE_SET.to_be_bytes());
    buf.extend_from_slice(&[0, 0]);
    for t in Template::ALL {
        buf.extend_from_slice(&t.id().to_be_bytes());
        let n = u16::try_from(t.fields().len()).unwrap_or(0);
        buf.extend_from_slice(&n.to_be_bytes());
        for &(id, len) in t.fields() {
            buf.extend_from_slice(&id.to_be_bytes());
            buf.extend_from_slice(&len.to_be_bytes());
        }
    }
    let len = u16::try_from(buf.len() - at).unwrap_or(u16::MAX);
    set_u16(buf, at + 2, len);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use xlat_engine::events::EndReason;
    use xlat_engine::Time;

    fn session(kind: EventKind) -> StateEvent {
        StateEvent {
            at: Time::from_secs(1),
            kind,
            translator: Translator::Nat44,
            session: Some(3),
            proto: Proto::Tcp,
            inside: "198.18.0.7".parse().unwrap(),
            inside_port: 40312,
            outside: Ipv4Addr::new(198, 19, 0, 100),
            outside_port: 1025,
            remote: Ipv4Addr::new(198, 19, 0, 2),
            remote_port: 80,
            with_mapping: false,
        }
    }

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    /// The template set's length: 4 + per template 4 + 4 per field.
    fn templates_len() -> usize {
        4 + Template::ALL
            .iter()
            .map(|t| 4 + 4 * t.fields().len())
            .sum::<usize>()
    }

    #[test]
    fn first_message_is_header_templates_then_a_data_set() {
        let mut x = Exporter::new(7, DEFAULT_MAX_LEN, DEFAULT_REFRESH, 100);
        let mut out = Vec::new();
        let epoch = Duration::from_secs(1_795_701_730); // 2026-11-26T14:02:10Z
        let now = epoch + Duration::from_secs(2);
        let n = x.encode(&[session(EventKind::SessionCreated)], epoch, now, &mut out);
        assert_eq!((n, out.len()), (1, 1));
        let m = &out[0].bytes;
        assert_eq!(out[0].records, 1);
        // RFC 7011 3.1 header: version 10, length, export time, sequence 0, domain.
        assert_eq!(u16_at(m, 0), 10);
        assert_eq!(usize::from(u16_at(m, 2)), m.len());
        assert_eq!(u32_at(m, 4), 1_795_701_732);
        assert_eq!(u32_at(m, 8), 0);
        assert_eq!(u32_at(m, 12), 7);
        // RFC 7011 3.4.1 template set: ID 2, then the first template (256, 9 fields,
        // observationTimeMilliseconds 323 length 8 first).
        assert_eq!(u16_at(m, 16), 2);
        assert_eq!(usize::from(u16_at(m, 18)), templates_len());
        assert_eq!((u16_at(m, 20), u16_at(m, 22)), (256, 9));
        assert_eq!((u16_at(m, 24), u16_at(m, 26)), (323, 8));
        assert_eq!((u16_at(m, 28), u16_at(m, 30)), (8, 4));
        // The data set: ID 256, one record of 28 octets.
        let d = 16 + templates_len();
        assert_eq!(u16_at(m, d), 256);
        assert_eq!(usize::from(u16_at(m, d + 2)), 4 + 28);
        assert_eq!(m.len(), d + 4 + 28);
        let r = &m[d + 4..];
        assert_eq!(
            u64::from_be_bytes(r[..8].try_into().unwrap()),
            1_795_701_731_000
        );
        assert_eq!(&r[8..12], &[198, 18, 0, 7]); // sourceIPv4Address
        assert_eq!(&r[12..16], &[198, 19, 0, 100]); // postNATSourceIPv4Address
        assert_eq!(r[16], 6); // protocolIdentifier: TCP
        assert_eq!(u16_at(r, 17), 40312); // sourceTransportPort
        assert_eq!(u16_at(r, 19), 1025); // postNAPTSourceTransportPort
        assert_eq!(&r[21..25], &[198, 19, 0, 2]); // destinationIPv4Address
        assert_eq!(u16_at(r, 25), 80); // destinationTransportPort
        assert_eq!(r[27], nat_event::NAT44_SESSION_CREATE); // natEvent 4
        assert_eq!(r.len(), 28);
    }

    #[test]
    fn record_lengths_match_the_templates() {
        for t in Template::ALL {
            let mut ev = session(EventKind::SessionCreated);
            ev.inside = "2001:db8::7".parse().unwrap();
            let mut b = Vec::new();
            put_record(&mut b, t, 1, &ev, 0, 0);
            assert_eq!(b.len(), t.record_len(), "{t:?}");
            assert!(t.fields().contains(&ie::NAT_EVENT), "{t:?}");
            assert_eq!(t.fields()[0], ie::OBSERVATION_TIME_MILLISECONDS, "{t:?}");
        }
        assert_eq!(Template::Nat44Session.record_len(), 28);
        assert_eq!(Template::Nat64Session.record_len(), 40);
    }

    #[test]
    fn sequence_numbers_count_the_records_before_each_message() {
        // Small messages: 512 octets hold the templates and a few records, then 18 each.
        let mut x = Exporter::new(1, 512, DEFAULT_REFRESH, 100);
        let evs = vec![session(EventKind::SessionCreated); 60];
        let mut out = Vec::new();
        let epoch = Duration::from_secs(1_000);
        assert_eq!(x.encode(&evs, epoch, epoch, &mut out), 60);
        assert!(out.len() >= 3, "{} messages", out.len());
        let mut seen = 0u32;
        for msg in &out {
            let m = &msg.bytes;
            assert!(m.len() <= 512);
            assert_eq!(usize::from(u16_at(m, 2)), m.len());
            assert_eq!(u32_at(m, 8), seen, "sequence = records sent before");
            // Walk the sets: the records in this message.
            let mut at = 16;
            while at < m.len() {
                let (id, len) = (u16_at(m, at), usize::from(u16_at(m, at + 2)));
                assert!(len >= 4 && at + len <= m.len());
                if id == 256 {
                    seen += u32::try_from((len - 4) / 28).unwrap();
                    assert_eq!((len - 4) % 28, 0);
                }
                at += len;
            }
            assert_eq!(at, m.len());
            assert_eq!(seen - u32_at(m, 8), msg.records);
        }
        assert_eq!(seen, 60);
        assert_eq!(x.sequence(), 60);
        // Only the first message carries templates.
        assert_eq!(u16_at(&out[0].bytes, 16), 2);
        assert_eq!(u16_at(&out[1].bytes, 16), 256);
    }

    #[test]
    fn a_templates_message_has_no_record_and_keeps_the_schedule() {
        let mut x = Exporter::new(7, 1400, Duration::from_secs(60), 100);
        let mut out = Vec::new();
        x.encode(
            &[session(EventKind::SessionCreated)],
            Duration::ZERO,
            Duration::from_secs(1000),
            &mut out,
        );
        let t = x.templates(Duration::from_secs(1010));
        let m = &t.bytes;
        assert_eq!(t.records, 0);
        assert_eq!(usize::from(u16_at(m, 2)), m.len());
        assert_eq!(u32_at(m, 8), 1, "the next message's sequence number");
        assert_eq!(u32_at(m, 12), 7, "the domain");
        assert_eq!(u16_at(m, 16), TEMPLATE_SET);
        assert_eq!(m.len(), 16 + templates_len());
        // The periodic resend is still due at 1060, not earlier.
        out.clear();
        x.encode(
            &[session(EventKind::SessionCreated)],
            Duration::ZERO,
            Duration::from_secs(1030),
            &mut out,
        );
        assert_ne!(u16_at(&out[0].bytes, 16), TEMPLATE_SET);
        x.set_keys(Duration::from_secs(10), 5, 0);
        out.clear();
        x.encode(
            &[session(EventKind::SessionCreated)],
            Duration::ZERO,
            Duration::from_secs(1011),
            &mut out,
        );
        assert_eq!(u16_at(&out[0].bytes, 16), TEMPLATE_SET, "refresh now 10 s");
        assert_eq!(x.domain(), 7);
    }

    #[test]
    fn templates_are_resent_after_the_refresh_interval() {
        let mut x = Exporter::new(1, DEFAULT_MAX_LEN, Duration::from_secs(60), 100);
        let ev = [session(EventKind::SessionCreated)];
        let has_templates = |x: &mut Exporter, now: u64| {
            let mut out = Vec::new();
            x.encode(&ev, Duration::ZERO, Duration::from_secs(now), &mut out);
            u16_at(&out[0].bytes, 16) == TEMPLATE_SET
        };
        assert!(has_templates(&mut x, 1000));
        assert!(!has_templates(&mut x, 1030));
        assert!(!has_templates(&mut x, 1059));
        assert!(has_templates(&mut x, 1060));
        assert!(!has_templates(&mut x, 1061));
        // A clock stepped back: sent again.
        assert!(has_templates(&mut x, 900));
    }

    #[test]
    fn each_event_has_its_template_and_nat_event_value() {
        use nat_event::*;
        let cases = [
            (
                EventKind::SessionCreated,
                Translator::Nat44,
                Template::Nat44Session,
                4,
            ),
            (
                EventKind::SessionDeleted(EndReason::Expired),
                Translator::Nat44,
                Template::Nat44Session,
                5,
            ),
            (
                EventKind::SessionCreated,
                Translator::Nat64,
                Template::Nat64Session,
                6,
            ),
            (
                EventKind::SessionDeleted(EndReason::Cleared),
                Translator::Nat64,
                Template::Nat64Session,
                7,
            ),
            (
                EventKind::MappingCreated,
                Translator::Nat44,
                Template::Nat44Bib,
                8,
            ),
            (
                EventKind::MappingDeleted,
                Translator::Nat44,
                Template::Nat44Bib,
                9,
            ),
            (
                EventKind::MappingCreated,
                Translator::Nat64,
                Template::Nat64Bib,
                10,
            ),
            (
                EventKind::MappingDeleted,
                Translator::Nat64,
                Template::Nat64Bib,
                11,
            ),
            (
                EventKind::AddressesExhausted,
                Translator::Nat44,
                Template::AddressesExhausted,
                3,
            ),
            (
                EventKind::PortsExhausted,
                Translator::Nat64,
                Template::PortsExhausted,
                12,
            ),
            (
                EventKind::QuotaExceeded,
                Translator::Nat44,
                Template::Nat44Quota,
                13,
            ),
            (
                EventKind::QuotaExceeded,
                Translator::Nat64,
                Template::Nat64Quota,
                13,
            ),
            (
                EventKind::HostBound,
                Translator::Nat44,
                Template::Nat44Binding,
                14,
            ),
            (
                EventKind::HostUnbound,
                Translator::Nat64,
                Template::Nat64Binding,
                15,
            ),
        ];
        for (kind, tr, t, v) in cases {
            let mut e = session(kind);
            e.translator = tr;
            assert_eq!(classify(&e), Some((t, v)), "{kind:?} {tr:?}");
        }
        assert_eq!(NAT64_SESSION_CREATE, 6);
        let e = session(EventKind::FastPath(
            xlat_engine::offload::OffloadKind::Install,
        ));
        assert_eq!(classify(&e), None);
        // Template IDs are distinct and 256 and up (RFC 7011 3.4.1).
        let mut ids: Vec<u16> = Template::ALL.iter().map(|t| t.id()).collect();
        ids.dedup();
        assert_eq!(ids.len(), Template::ALL.len());
        assert!(ids.iter().all(|&i| i >= 256));
    }

    #[test]
    fn a_nat64_session_names_the_ipv6_host_and_icmpv6() {
        let mut e = session(EventKind::SessionCreated);
        e.translator = Translator::Nat64;
        e.proto = Proto::Icmp;
        e.inside = "2001:db8::7".parse().unwrap();
        let mut b = Vec::new();
        put_record(&mut b, Template::Nat64Session, 6, &e, 5, 0);
        assert_eq!(b.len(), 40);
        assert_eq!(
            &b[8..24],
            &"2001:db8::7"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
        );
        assert_eq!(&b[24..28], &[198, 19, 0, 100]);
        assert_eq!(b[28], 58);
        assert_eq!(b[39], 6);
    }

    /// How fast the log thread encodes: 1M NAT44 session events into messages
    /// (`cargo test --release -p xlat-daemon -- --ignored ipfix_encode_rate --nocapture`;
    /// docs/LOGGING.md has the number). Prints, asserts only the counts.
    #[test]
    #[ignore = "measurement: run with --release --nocapture"]
    fn ipfix_encode_rate() {
        let evs: Vec<StateEvent> = (0..1_000_000u32)
            .map(|i| {
                let mut e = session(EventKind::SessionCreated);
                e.inside_port = (i % 60_000) as u16;
                e.outside_port = (i % 50_000) as u16;
                e
            })
            .collect();
        let mut x = Exporter::new(1, DEFAULT_MAX_LEN, DEFAULT_REFRESH, 100);
        let mut out = Vec::with_capacity(30_000);
        let t = std::time::Instant::now();
        // As the log thread does: batches of at most 64 x 64 events.
        for chunk in evs.chunks(4096) {
            x.encode(chunk, Duration::ZERO, Duration::from_secs(1), &mut out);
        }
        let took = t.elapsed();
        let records: u64 = out.iter().map(|m| u64::from(m.records)).sum();
        assert_eq!(records, 1_000_000);
        let bytes: usize = out.iter().map(|m| m.bytes.len()).sum();
        println!(
            "ipfix: 1M NAT44 session records in {took:?} ({:.1} M records/s), {} messages, {:.1} records and {} octets a message",
            1.0 / took.as_secs_f64(),
            out.len(),
            1e6 / out.len() as f64,
            bytes / out.len()
        );
    }

    #[test]
    fn a_port_block_record_has_its_range() {
        let mut e = session(EventKind::PortBlockAllocated);
        e.proto = Proto::Udp;
        e.outside_port = 1536;
        e.remote_port = 2047;
        let mut b = Vec::new();
        put_record(&mut b, Template::Nat44PortBlock, 16, &e, 0, 0);
        assert_eq!(b.len(), Template::Nat44PortBlock.record_len());
        assert_eq!(&b[8..12], &[198, 18, 0, 7]); // sourceIPv4Address
        assert_eq!(&b[12..16], &[198, 19, 0, 100]); // postNATSourceIPv4Address
        assert_eq!(b[16], 17); // protocolIdentifier
        assert_eq!(u16_at(&b, 17), 1536); // portRangeStart
        assert_eq!(u16_at(&b, 19), 2047); // portRangeEnd
        assert_eq!(u16_at(&b, 21), 1); // portRangeStepSize
        assert_eq!(u16_at(&b, 23), 512); // portRangeNumPorts
        assert_eq!(b[25], 16); // natEvent: port block allocation
    }

    #[test]
    fn a_quota_record_says_entries_per_user_and_the_limit() {
        let e = session(EventKind::QuotaExceeded);
        let mut b = Vec::new();
        put_record(&mut b, Template::Nat44Quota, 13, &e, 0, 2000);
        assert_eq!(b[8], 13);
        assert_eq!(u32_at(&b, 9), 3); // natQuotaExceededEvent 3: max entries per user
        assert_eq!(u32_at(&b, 13), 2000); // maxEntriesPerUser
        assert_eq!(&b[17..21], &[198, 18, 0, 7]);
    }

    /// With deterministic NAT (RFC 7422) a quota event that names the outside address is a
    /// full port range: its maxEntriesPerUser is `nat44.ports_per_host`; the session limit's
    /// (no outside address) keeps `max_sessions_per_host`.
    #[test]
    fn a_full_deterministic_range_is_a_quota_of_its_ports() {
        let mut x = Exporter::new(1, DEFAULT_MAX_LEN, DEFAULT_REFRESH, 2000).with_port_quota(252);
        let range_full = session(EventKind::QuotaExceeded);
        let mut session_limit = session(EventKind::QuotaExceeded);
        session_limit.outside = Ipv4Addr::UNSPECIFIED;
        let mut out = Vec::new();
        x.encode(
            &[range_full, session_limit],
            Duration::ZERO,
            Duration::from_secs(1),
            &mut out,
        );
        let bytes: Vec<u8> = out.iter().flat_map(|m| m.bytes.clone()).collect();
        // natQuotaExceededEvent 3, then maxEntriesPerUser.
        let has = |quota: u32| {
            let want = [3u32.to_be_bytes(), quota.to_be_bytes()].concat();
            bytes.windows(8).filter(|w| *w == want.as_slice()).count()
        };
        assert_eq!((has(252), has(2000)), (1, 1), "{bytes:?}");
    }
}
