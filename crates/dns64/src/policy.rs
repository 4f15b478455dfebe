//! The RFC 6147 policy: what to do with one query, given an upstream to ask.
//!
//! No sockets here: [`Policy::handle`] takes the query bytes and an [`Upstream`], and returns
//! the answer bytes. Unit tests drive it with a scripted upstream; the service
//! ([`crate::server`]) with real sockets.
//!
//! - AAAA queries (class IN): the name's own AAAA records when it has usable ones (5.1.1,
//!   minus the exclusion set of 5.1.4); else AAAA records synthesized from its A records
//!   (5.1.5-5.1.7) with the CNAME/DNAME chain kept, assembled as 5.4 says; NXDOMAIN is
//!   returned as it came (5.1.2).
//! - PTR queries for names in the pref64 reverse zone: a CNAME to the embedded IPv4 address's
//!   in-addr.arpa name, followed by that name's PTR data (5.3.1, second option).
//! - DNSSEC: a query with both CD and DO set is passed through without synthesis (5.5 item 3);
//!   synthesized answers never carry AD (5.5 item 1: this DNS64 does not validate).
//! - Everything else is forwarded and its answer returned unchanged (5.3.3), ID and flags
//!   included.
//!
//! Queries are never parsed by hand: hickory-proto reads and writes every message.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{AAAA, CNAME};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};

use crate::pref64::{covers, embed, extract, Pref64, Prefix6, IPV4_MAPPED};
use crate::stats::{add, inc, Stats};

/// RFC 6147 5.1.7: the TTL cap for synthesized records when the negative AAAA answer carried
/// no SOA.
pub const NO_SOA_TTL: u32 = 600;
/// The EDNS UDP payload size this DNS64 advertises, to clients and upstream (the DNS Flag
/// Day 2020 value, which avoids IP fragmentation).
pub const EDNS_PAYLOAD: u16 = 1232;
/// The largest UDP answer sent to a client that advertised more.
pub const MAX_UDP_ANSWER: usize = 4096;
/// RFC 1035 4.2.1: the UDP limit without EDNS.
pub const CLASSIC_UDP: usize = 512;

/// How the client's query arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    /// RFC 7766: TCP, two-byte length prefix.
    Tcp,
}

/// How an upstream exchange is to be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// UDP; a truncated answer is returned as it is (pass-through: the client retries over TCP).
    Udp,
    /// TCP.
    Tcp,
    /// UDP, and TCP when the UDP answer was truncated: a complete answer to work with.
    Complete,
}

/// Why an upstream exchange gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    #[error("no upstream answered in time")]
    Timeout,
    #[error("upstream exchange failed: {0}")]
    Failed(String),
    #[error("the query to forward is not a DNS message")]
    BadQuery,
}

/// Something that answers DNS queries: the configured upstream servers, or a test script.
pub trait Upstream {
    /// Sends `query` (a whole DNS message) and returns the response, which carries the
    /// query's own ID. Implementations check that the response matches the query.
    fn exchange(&mut self, query: &[u8], how: Exchange) -> Result<Vec<u8>, UpstreamError>;
}

/// What goes back when there is nothing to synthesize (RFC 6147 5.4: "the answer the DNS64
/// received to the original (initiator's) query").
enum Fallback {
    /// The upstream answer, as it came.
    Raw(Vec<u8>),
    /// The upstream answer with excluded AAAA records removed (5.1.4).
    Edited(Box<Message>),
    /// No usable answer came (5.1.3: a timeout counts as server failure).
    ServFail,
}

/// The DNS64 decisions for one configuration.
#[derive(Debug, Clone)]
pub struct Policy {
    prefix: Pref64,
    /// RFC 6147 5.1.4: `::ffff:0:0/96` and the configured extra prefixes.
    exclude: Vec<Prefix6>,
    stats: Arc<Stats>,
}

impl Policy {
    /// `exclude` comes on top of `::ffff:0:0/96`, which is always excluded (5.1.4: "SHOULD
    /// include the ::ffff/96 network in that range by default").
    pub fn new(prefix: Pref64, exclude: &[Prefix6], stats: Arc<Stats>) -> Policy {
        let mut all = vec![IPV4_MAPPED];
        all.extend(exclude.iter().copied());
        Policy {
            prefix,
            exclude: all,
            stats,
        }
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Answers one query. `None`: nothing is sent back (the bytes were not a query).
    pub fn handle(
        &self,
        query: &[u8],
        transport: Transport,
        up: &mut dyn Upstream,
    ) -> Option<Vec<u8>> {
        let st = &self.stats;
        inc(&st.queries);
        if transport == Transport::Tcp {
            inc(&st.tcp_queries);
        }
        let msg = match Message::from_vec(query) {
            Ok(m) => m,
            Err(_) => {
                inc(&st.malformed);
                return formerr(query);
            }
        };
        if msg.message_type != MessageType::Query {
            // A response sent to us: never answer it (no reflection loops).
            inc(&st.malformed);
            return None;
        }
        let limit = answer_limit(&msg, transport);
        let [q] = msg.queries.as_slice() else {
            return self.passthrough(query, &msg, transport, limit, up);
        };
        // RFC 6147 5: DNS64 for classes other than IN is undefined; behave as if there were
        // no DNS64. Other opcodes and EDNS versions are the upstream's business.
        if msg.op_code != OpCode::Query
            || q.query_class != DNSClass::IN
            || msg.edns.as_ref().is_some_and(|e| e.version() != 0)
        {
            return self.passthrough(query, &msg, transport, limit, up);
        }
        let dnssec_ok = msg.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok);
        // RFC 6147 5.5 item 3: with CD and DO set the client validates (and synthesizes)
        // itself: MUST NOT synthesize, return the data as a plain recursive resolver would.
        let client_validates = dnssec_ok && msg.checking_disabled;
        match q.query_type {
            RecordType::AAAA if client_validates => {
                inc(&st.dnssec_passthrough);
                self.passthrough(query, &msg, transport, limit, up)
            }
            RecordType::AAAA => Some(self.aaaa(query, &msg, limit, up)),
            RecordType::PTR => match self.ptr_target(&q.name) {
                Some(_) if client_validates => {
                    inc(&st.dnssec_passthrough);
                    self.passthrough(query, &msg, transport, limit, up)
                }
                Some(v4) => Some(self.ptr(&msg, v4, limit, up)),
                // RFC 6147 5.3.1: not under the pref64: process it as any other query.
                None => self.passthrough(query, &msg, transport, limit, up),
            },
            // RFC 6147 5.3.3: all other RRs MUST be returned unchanged, A included.
            _ => self.passthrough(query, &msg, transport, limit, up),
        }
    }

    /// RFC 6147 5.3.3: forward the client's bytes, return the upstream's bytes.
    fn passthrough(
        &self,
        query: &[u8],
        msg: &Message,
        transport: Transport,
        limit: usize,
        up: &mut dyn Upstream,
    ) -> Option<Vec<u8>> {
        inc(&self.stats.passthrough);
        let how = match transport {
            Transport::Udp => Exchange::Udp,
            Transport::Tcp => Exchange::Tcp,
        };
        Some(match up.exchange(query, how) {
            Ok(answer) => self.fit_raw(answer, msg, limit),
            Err(_) => self.servfail(msg),
        })
    }

    /// RFC 6147 5.1: an AAAA query.
    fn aaaa(&self, query: &[u8], msg: &Message, limit: usize, up: &mut dyn Upstream) -> Vec<u8> {
        let st = &self.stats;
        // The client's own query goes upstream first (5.1.1); synthesis comes only after
        // its answer (5.1.8's parallel A query is not used).
        let mut soa_ttl = None;
        let fallback = match up.exchange(query, Exchange::Complete) {
            // RFC 6147 5.1.3: a timeout is treated as RCODE 2 (server failure), and 5.1.2
            // treats that like an empty answer: go on to the A query.
            Err(_) => Fallback::ServFail,
            Ok(raw) => match Message::from_vec(&raw) {
                Err(_) => {
                    inc(&st.upstream_bad_responses);
                    Fallback::ServFail
                }
                Ok(resp) => match resp.response_code {
                    // RFC 6147 5.1.2: Name Error is returned as normal DNS operation would.
                    ResponseCode::NXDomain => {
                        inc(&st.nxdomain);
                        return self.fit_raw(raw, msg, limit);
                    }
                    ResponseCode::NoError => {
                        let (usable, excluded) = self.count_aaaa(&resp);
                        add(&st.aaaa_excluded, excluded as u64);
                        if usable > 0 {
                            inc(&st.aaaa_real);
                            if excluded == 0 {
                                // RFC 6147 5.1.1: real AAAA records: return them, no synthesis.
                                return self.fit_raw(raw, msg, limit);
                            }
                            // RFC 6147 5.1.4: return only the AAAA records outside the
                            // exclusion set; never the excluded ones.
                            return self.encode(self.without_excluded(resp, msg), limit, msg);
                        }
                        // RFC 6147 5.1.6: NOERROR with no (usable) AAAA: query A. 5.1.7: the
                        // SOA of this negative answer bounds the synthesized TTL.
                        soa_ttl = negative_ttl(&resp);
                        if excluded > 0 {
                            // RFC 6147 5.1.4: only excluded addresses: an empty answer.
                            Fallback::Edited(Box::new(self.without_excluded(resp, msg)))
                        } else {
                            Fallback::Raw(raw)
                        }
                    }
                    // RFC 6147 5.5: a validating upstream that found the AAAA answer bogus
                    // says SERVFAIL; synthesizing then would hand the client the A data of
                    // a name whose AAAA records an attacker suppressed (the downgrade 5.5
                    // warns of). An Extended DNS Error (RFC 8914) tells that SERVFAIL apart
                    // from a broken server: it goes back to the client as it came.
                    ResponseCode::ServFail if dnssec_failure(&resp) => {
                        inc(&st.validation_failed);
                        return self.fit_raw(raw, msg, limit);
                    }
                    // RFC 6147 5.1.2: any other RCODE is treated as RCODE 0 with an empty
                    // answer section.
                    _ => Fallback::Raw(raw),
                },
            },
        };

        // RFC 6147 5.1.6 / 5.1.5: the A records of the same name (the upstream follows any
        // CNAME/DNAME chain again and returns it with the A records).
        let Some(q) = msg.queries.first() else {
            return self.servfail(msg);
        };
        let sub = sub_query(msg, q.name.clone(), RecordType::A);
        let a = match self.ask(&sub, up) {
            Some(a) => a,
            // RFC 6147 5.1.6: an error of the A query is the basis of the answer.
            None => return self.servfail(msg),
        };
        if a.response_code != ResponseCode::NoError {
            // RFC 6147 5.1.6: "If this new A RR query results in ... an error, then the ...
            // error is used as the basis for the answer returned to the querying client."
            let (out, _) = self.assemble(msg, a, soa_ttl);
            return self.encode(out, limit, msg);
        }
        let (out, n) = self.assemble(msg, a, soa_ttl);
        if n == 0 {
            // RFC 6147 5.4: an empty A answer: the client gets the answer to its own query.
            inc(&st.aaaa_no_a);
            return match fallback {
                Fallback::Raw(raw) => self.fit_raw(raw, msg, limit),
                Fallback::Edited(m) => self.encode(*m, limit, msg),
                Fallback::ServFail => self.servfail(msg),
            };
        }
        inc(&st.synthesized);
        add(&st.synthesized_records, n as u64);
        self.encode(out, limit, msg)
    }

    /// RFC 6147 5.4: the synthesized response. Header as a recursive server sets it, the
    /// client's question, the answer section of 5.1.7 (with the CNAME/DNAME chain, 5.1.5),
    /// authority and additional sections copied from the A answer (5.3.2: no synthesis in
    /// the additional section). Returns the message and the number of AAAA records made.
    fn assemble(&self, client: &Message, a: Message, soa_ttl: Option<u32>) -> (Message, usize) {
        // RFC 6147 5.1.7: TTL = min(A TTL, SOA TTL of the negative AAAA answer), or
        // min(A TTL, 600) without one.
        let cap = soa_ttl.unwrap_or(NO_SOA_TTL);
        let mut out = response_to(client, a.recursion_available, a.response_code);
        let mut n = 0;
        for r in a.answers {
            match &r.data {
                RData::A(v4) => {
                    let v4 = v4.0;
                    // RFC 6147 5.1.7: CLASS is the original class, IN; DNS64 for other
                    // classes is undefined. RFC 6052 3.1: the Well-Known Prefix MUST NOT
                    // carry non-global IPv4 addresses (unless `allow_non_global_wkp`).
                    if r.dns_class != DNSClass::IN || self.prefix.refuses(u32::from(v4)) {
                        continue;
                    }
                    // RFC 6147 5.1.7: NAME from the A record, TYPE AAAA, RDATA per 5.2.
                    let Some(v6) = embed(&self.prefix, v4) else {
                        continue;
                    };
                    let mut s =
                        Record::from_rdata(r.name.clone(), r.ttl.min(cap), RData::AAAA(AAAA(v6)));
                    s.dns_class = DNSClass::IN;
                    out.answers.push(s);
                    n += 1;
                }
                // RFC 6147 5.1.6: the A records that form the basis of the synthesis are
                // removed, and with them their signatures (they cover nothing sent).
                _ if rrsig_covers(&r, RecordType::A) => {}
                // RFC 6147 5.1.5: CNAME and DNAME chains stay in the answer.
                _ => out.answers.push(r),
            }
        }
        out.authorities = a.authorities;
        out.additionals = a.additionals;
        (out, n)
    }

    /// The IPv4 address whose reverse name answers a PTR query for `name`, when `name` is
    /// a complete address under the pref64 (RFC 6147 5.3.1).
    fn ptr_target(&self, name: &Name) -> Option<Ipv4Addr> {
        // RFC 6147 5.3.1: strip ip6.arpa, reverse the nibbles (RFC 3596 2.5) and see whether
        // the address is under the pref64.
        let net = name.parse_arpa_name().ok()?;
        if net.prefix_len() != 128 {
            return None;
        }
        match net.addr() {
            IpAddr::V6(a) => extract(&self.prefix, a),
            IpAddr::V4(_) => None,
        }
    }

    /// RFC 6147 5.3.1, second option: a CNAME from the ip6.arpa name to the in-addr.arpa
    /// name of the embedded IPv4 address, with that name's PTR data after it.
    fn ptr(&self, msg: &Message, v4: Ipv4Addr, limit: usize, up: &mut dyn Upstream) -> Vec<u8> {
        let Some(q) = msg.queries.first() else {
            return self.servfail(msg);
        };
        let target = Name::from(v4);
        let sub = sub_query(msg, target.clone(), RecordType::PTR);
        let Some(r) = self.ask(&sub, up) else {
            return self.servfail(msg);
        };
        let mut out = response_to(msg, r.recursion_available, r.response_code);
        // RFC 6147 5.3.1: the DNS64 "SHOULD ensure that there is RDATA at the PTR of the
        // corresponding IN-ADDR.ARPA name" before synthesizing the CNAME.
        let has_ptr = r.response_code == ResponseCode::NoError
            && r.answers
                .iter()
                .any(|x| matches!(x.data, RData::PTR(_)) && x.dns_class == DNSClass::IN);
        if has_ptr {
            let ttl = r.answers.iter().map(|x| x.ttl).min().unwrap_or(0);
            let mut cname = Record::from_rdata(q.name.clone(), ttl, RData::CNAME(CNAME(target)));
            cname.dns_class = DNSClass::IN;
            out.answers.push(cname);
            out.answers.extend(r.answers);
            inc(&self.stats.ptr_synthesized);
        } else {
            // No PTR data there (NXDOMAIN, NODATA, an error): no CNAME to nowhere; the
            // client gets the upstream's RCODE and authority section.
            inc(&self.stats.ptr_no_data);
        }
        out.authorities = r.authorities;
        out.additionals = r.additionals;
        self.encode(out, limit, msg)
    }

    /// One sub-query of our own, complete (TCP after truncation), parsed.
    fn ask(&self, sub: &Message, up: &mut dyn Upstream) -> Option<Message> {
        let bytes = match sub.to_vec() {
            Ok(b) => b,
            Err(_) => {
                inc(&self.stats.encode_errors);
                return None;
            }
        };
        let raw = up.exchange(&bytes, Exchange::Complete).ok()?;
        match Message::from_vec(&raw) {
            Ok(m) => Some(m),
            Err(_) => {
                inc(&self.stats.upstream_bad_responses);
                None
            }
        }
    }

    fn is_excluded(&self, a: Ipv6Addr) -> bool {
        self.exclude.iter().any(|p| covers(p, a))
    }

    /// AAAA records (class IN) in the answer section: (outside the exclusion set, inside).
    fn count_aaaa(&self, resp: &Message) -> (usize, usize) {
        let mut usable = 0;
        let mut excluded = 0;
        for r in &resp.answers {
            if let RData::AAAA(a) = &r.data {
                if self.is_excluded(a.0) {
                    excluded += 1;
                } else if r.dns_class == DNSClass::IN {
                    usable += 1;
                }
            }
        }
        (usable, excluded)
    }

    /// RFC 6147 5.1.4: the answer without AAAA records in the exclusion set. The DNS64 has
    /// changed data, so AD is cleared, and so is AA: an edited answer is the recursive
    /// server's own, not the authority's (5.4; RFC 1035 4.1.1: AA says the responding server
    /// is an authority for the name). The OPT record is this server's own.
    fn without_excluded(&self, mut resp: Message, client: &Message) -> Message {
        resp.answers
            .retain(|r| !matches!(&r.data, RData::AAAA(a) if self.is_excluded(a.0)));
        resp.metadata.authentic_data = false;
        resp.metadata.authoritative = false;
        resp.edns = our_edns(client);
        resp.signature = None;
        resp
    }

    /// The message as bytes, truncated (TC, RFC 1035 4.2.1) when it does not fit `limit`.
    fn encode(&self, m: Message, limit: usize, client: &Message) -> Vec<u8> {
        match m.to_vec() {
            Ok(b) if b.len() <= limit => b,
            Ok(_) => {
                inc(&self.stats.truncated);
                match m.truncate().to_vec() {
                    Ok(b) => b,
                    Err(_) => {
                        inc(&self.stats.encode_errors);
                        self.servfail(client)
                    }
                }
            }
            Err(_) => {
                inc(&self.stats.encode_errors);
                self.servfail(client)
            }
        }
    }

    /// An upstream answer as it came, unless it is too long for the client's UDP limit
    /// (it came over TCP): then the truncated form, so the client retries over TCP.
    fn fit_raw(&self, raw: Vec<u8>, client: &Message, limit: usize) -> Vec<u8> {
        if raw.len() <= limit {
            return raw;
        }
        match Message::from_vec(&raw) {
            Ok(m) => self.encode(m, limit, client),
            Err(_) => {
                inc(&self.stats.upstream_bad_responses);
                self.servfail(client)
            }
        }
    }

    /// SERVFAIL for `client`'s query (RFC 6147 5.1.3: upstream failure).
    fn servfail(&self, client: &Message) -> Vec<u8> {
        inc(&self.stats.servfail_sent);
        let out = response_to(client, true, ResponseCode::ServFail);
        out.to_vec()
            .unwrap_or_else(|_| header_only(client.id, ResponseCode::ServFail))
    }
}

/// The largest answer the client takes: RFC 1035 4.2.1 512 bytes over UDP, or what its
/// EDNS OPT says (RFC 6891 6.2.5), capped; TCP: the 16-bit length prefix.
fn answer_limit(msg: &Message, transport: Transport) -> usize {
    match transport {
        Transport::Tcp => usize::from(u16::MAX),
        Transport::Udp => match &msg.edns {
            Some(e) => usize::from(e.max_payload()).clamp(CLASSIC_UDP, MAX_UDP_ANSWER),
            None => CLASSIC_UDP,
        },
    }
}

/// RFC 2308 5: the negative-caching TTL of a NODATA answer: the SOA record's TTL, bounded by
/// its MINIMUM field. RFC 6147 5.1.7 caps synthesized TTLs with it.
fn negative_ttl(resp: &Message) -> Option<u32> {
    resp.authorities.iter().find_map(|r| match &r.data {
        RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
        _ => None,
    })
}

/// Whether `r` is an RRSIG over records of type `t` (the type covered is the first field of
/// the RRSIG RDATA, RFC 4034 3.1).
fn rrsig_covers(r: &Record, t: RecordType) -> bool {
    match &r.data {
        RData::Unknown { code, rdata } if *code == RecordType::RRSIG => {
            rdata.anything.get(..2) == Some(&u16::from(t).to_be_bytes()[..])
        }
        _ => false,
    }
}

/// The OPT record this server sends when the client sent one (RFC 6891 6.1.1), with the
/// client's DO bit (RFC 3225 3: DO is copied into the response).
fn our_edns(client: &Message) -> Option<Edns> {
    client.edns.as_ref().map(|ce| {
        let mut e = Edns::new();
        e.set_max_payload(EDNS_PAYLOAD);
        e.set_version(0);
        e.set_dnssec_ok(ce.flags().dnssec_ok);
        e
    })
}

/// RFC 8914 4: the Extended DNS Error (option code 15) info codes that say DNSSEC validation
/// failed -- 6 DNSSEC Bogus, 7 Signature Expired, 8 Signature Not Yet Valid, 9 DNSKEY Missing,
/// 10 RRSIGs Missing, 11 No Zone Key Bit Set, 12 NSEC Missing.
const EDE_OPTION: u16 = 15;
const EDE_DNSSEC_FAILURES: std::ops::RangeInclusive<u16> = 6..=12;

/// True when `resp` carries an Extended DNS Error saying DNSSEC validation failed.
fn dnssec_failure(resp: &Message) -> bool {
    use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
    let Some(e) = resp.edns.as_ref() else {
        return false;
    };
    e.options()
        .get_all(EdnsCode::Unknown(EDE_OPTION))
        .into_iter()
        .any(|o| match o {
            EdnsOption::Unknown(_, data) => data
                .first_chunk::<2>()
                .is_some_and(|c| EDE_DNSSEC_FAILURES.contains(&u16::from_be_bytes(*c))),
            _ => false,
        })
}

/// A response skeleton for `client`'s query: its ID, RD and CD, its question, our OPT. AA is
/// clear (synthesized data is not authoritative) and so is AD (RFC 6147 5.5 item 1: no AD
/// from a DNS64 that does not validate).
fn response_to(client: &Message, ra: bool, rcode: ResponseCode) -> Message {
    let mut out = Message::response(client.id, client.op_code);
    out.metadata.recursion_desired = client.recursion_desired;
    out.metadata.checking_disabled = client.checking_disabled;
    out.metadata.recursion_available = ra;
    out.metadata.authoritative = false;
    out.metadata.authentic_data = false;
    out.metadata.response_code = rcode;
    out.queries = client.queries.clone();
    out.edns = our_edns(client);
    out
}

/// A query of our own for `name`/`qtype`, class IN, with the client's RD and CD and DO bits,
/// and EDNS so that answers up to [`EDNS_PAYLOAD`] come over UDP.
fn sub_query(client: &Message, name: Name, qtype: RecordType) -> Message {
    let mut m = Message::new(0, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = client.recursion_desired;
    m.metadata.checking_disabled = client.checking_disabled;
    m.add_query(Query::query(name, qtype));
    let mut e = Edns::new();
    e.set_max_payload(EDNS_PAYLOAD);
    e.set_dnssec_ok(client.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok));
    m.set_edns(e);
    m
}

/// FORMERR for bytes that do not parse, when at least their header is there and says
/// "query" (RFC 1035 4.1.1). `None` otherwise.
fn formerr(query: &[u8]) -> Option<Vec<u8>> {
    let &[id0, id1, flags, ..] = query else {
        return None;
    };
    if query.len() < 12 || flags & 0x80 != 0 {
        return None;
    }
    let mut m = Message::error_msg(
        u16::from_be_bytes([id0, id1]),
        OpCode::from_u8((flags >> 3) & 0x0f),
        ResponseCode::FormErr,
    );
    m.metadata.recursion_desired = flags & 1 != 0;
    Some(
        m.to_vec()
            .unwrap_or_else(|_| header_only(m.id, ResponseCode::FormErr)),
    )
}

/// A bare 12-byte response header, for when even hickory cannot encode the message.
fn header_only(id: u16, rcode: ResponseCode) -> Vec<u8> {
    let [i0, i1] = id.to_be_bytes();
    vec![i0, i1, 0x80, rcode.low(), 0, 0, 0, 0, 0, 0, 0, 0]
}
