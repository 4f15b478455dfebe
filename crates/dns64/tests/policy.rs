//! RFC 6147 rules, one test each, against a scripted upstream. Messages are built and read
//! with hickory-proto.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NULL, PTR, SOA};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use xlat_dns64::{Exchange, Policy, Pref64, Prefix6, Stats, Transport, Upstream, UpstreamError};

const PREFIX: &str = "2001:2:0:64::/96";

fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn rec(owner: &str, ttl: u32, data: RData) -> Record {
    Record::from_rdata(name(owner), ttl, data)
}

fn a(owner: &str, ip: [u8; 4], ttl: u32) -> Record {
    rec(owner, ttl, RData::A(A(Ipv4Addr::from(ip))))
}

fn aaaa(owner: &str, ip: &str, ttl: u32) -> Record {
    rec(owner, ttl, RData::AAAA(AAAA(v6(ip))))
}

fn cname(owner: &str, target: &str, ttl: u32) -> Record {
    rec(owner, ttl, RData::CNAME(CNAME(name(target))))
}

/// SOA of test.example. with the given record TTL and MINIMUM.
fn soa(ttl: u32, minimum: u32) -> Record {
    rec(
        "test.example.",
        ttl,
        RData::SOA(SOA::new(
            name("ns.test.example."),
            name("hostmaster.test.example."),
            1,
            3600,
            600,
            86400,
            minimum,
        )),
    )
}

/// An RRSIG-shaped record (type covered first) that hickory keeps as unknown data.
fn rrsig(owner: &str, covered: RecordType) -> Record {
    let mut data = u16::from(covered).to_be_bytes().to_vec();
    data.extend_from_slice(&[8, 3, 0, 0, 14, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1]);
    rec(
        owner,
        300,
        RData::Unknown {
            code: RecordType::RRSIG,
            rdata: NULL::with(data),
        },
    )
}

/// A client query: ID 0x4242, RD, optional EDNS (payload, DO), optional CD.
fn query(qname: &str, qtype: RecordType, edns: Option<(u16, bool)>, cd: bool) -> Message {
    let mut m = Message::new(0x4242, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.metadata.checking_disabled = cd;
    m.add_query(Query::query(name(qname), qtype));
    if let Some((payload, dnssec_ok)) = edns {
        let mut e = Edns::new();
        e.set_max_payload(payload);
        e.set_dnssec_ok(dnssec_ok);
        m.set_edns(e);
    }
    m
}

/// An upstream response to `q`.
fn reply(q: &Message, rcode: ResponseCode, answers: Vec<Record>, auth: Vec<Record>) -> Message {
    let mut r = Message::response(q.id, OpCode::Query);
    r.metadata.recursion_desired = q.recursion_desired;
    r.metadata.recursion_available = true;
    r.metadata.response_code = rcode;
    r.queries = q.queries.clone();
    r.answers = answers;
    r.authorities = auth;
    r
}

type Script = Box<dyn FnMut(&Message) -> Result<Message, UpstreamError>>;

/// An upstream that answers from a script and records what it was asked.
struct Fake {
    script: Script,
    asked: Vec<(Message, Exchange)>,
    /// Bytes of every response given, in order.
    given: Vec<Vec<u8>>,
}

impl Fake {
    fn new(script: impl FnMut(&Message) -> Result<Message, UpstreamError> + 'static) -> Fake {
        Fake {
            script: Box::new(script),
            asked: Vec::new(),
            given: Vec::new(),
        }
    }

    fn asked_types(&self) -> Vec<RecordType> {
        self.asked
            .iter()
            .map(|(m, _)| m.queries[0].query_type)
            .collect()
    }
}

impl Upstream for Fake {
    fn exchange(&mut self, query: &[u8], how: Exchange) -> Result<Vec<u8>, UpstreamError> {
        let q = Message::from_vec(query).map_err(|_| UpstreamError::BadQuery)?;
        self.asked.push((q.clone(), how));
        let mut r = (self.script)(&q)?;
        r.metadata.id = q.id;
        let b = r.to_vec().unwrap();
        self.given.push(b.clone());
        Ok(b)
    }
}

fn policy_with(prefix: &str, exclude: &[&str]) -> (Policy, Arc<Stats>) {
    let stats = Arc::new(Stats::default());
    let ex: Vec<Prefix6> = exclude.iter().map(|s| s.parse().unwrap()).collect();
    let p: Pref64 = prefix.parse().unwrap();
    (Policy::new(p, &ex, stats.clone()), stats)
}

fn policy() -> (Policy, Arc<Stats>) {
    policy_with(PREFIX, &[])
}

fn run(p: &Policy, q: &Message, t: Transport, up: &mut Fake) -> Message {
    let bytes = p.handle(&q.to_vec().unwrap(), t, up).expect("an answer");
    Message::from_vec(&bytes).unwrap()
}

fn addrs(m: &Message) -> Vec<Ipv6Addr> {
    m.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::AAAA(x) => Some(x.0),
            _ => None,
        })
        .collect()
}

/// The usual script: AAAA -> NODATA with SOA(ttl 300, minimum 60); A -> the given records.
fn nodata_then(a_records: Vec<Record>) -> impl FnMut(&Message) -> Result<Message, UpstreamError> {
    move |q| {
        Ok(match q.queries[0].query_type {
            RecordType::AAAA => reply(q, ResponseCode::NoError, vec![], vec![soa(300, 60)]),
            RecordType::A => reply(q, ResponseCode::NoError, a_records.clone(), vec![]),
            t => panic!("unexpected {t}"),
        })
    }
}

#[test]
fn rfc6147_5_1_6_and_5_1_7_a_only_name_is_synthesized() {
    let (p, st) = policy();
    let mut up = Fake::new(nodata_then(vec![
        a("v4only.test.example.", [198, 19, 0, 5], 3600),
        a("v4only.test.example.", [198, 19, 0, 6], 30),
    ]));
    let q = query(
        "v4only.test.example.",
        RecordType::AAAA,
        Some((1232, false)),
        false,
    );
    let r = run(&p, &q, Transport::Udp, &mut up);
    assert_eq!(up.asked_types(), vec![RecordType::AAAA, RecordType::A]);
    // 5.4: header as a recursive server sets it, the client's ID and question.
    assert_eq!(r.id, 0x4242);
    assert_eq!(r.message_type, MessageType::Response);
    assert_eq!(r.response_code, ResponseCode::NoError);
    assert!(r.recursion_desired && r.recursion_available);
    assert!(!r.authoritative && !r.authentic_data && !r.truncation);
    assert_eq!(r.queries, q.queries);
    // 5.1.7: NAME from the A record, class IN, RDATA per RFC 6052, TTL min(A, SOA).
    assert_eq!(
        addrs(&r),
        vec![v6("2001:2:0:64::c613:5"), v6("2001:2:0:64::c613:6")]
    );
    assert_eq!(r.answers[0].name, name("v4only.test.example."));
    assert_eq!(r.answers[0].dns_class, DNSClass::IN);
    // SOA TTL 300 with MINIMUM 60: the RFC 2308 negative TTL is 60.
    assert_eq!(r.answers[0].ttl, 60);
    assert_eq!(r.answers[1].ttl, 30);
    // 5.1.6: the A records are not in the answer.
    assert!(r
        .answers
        .iter()
        .all(|x| x.record_type() == RecordType::AAAA));
    assert!(r.edns.is_some(), "the client sent EDNS, the answer has OPT");
    let s = st.snapshot();
    assert_eq!((s.queries, s.synthesized, s.synthesized_records), (1, 1, 2));
    // Our own A query carries EDNS and the client's RD.
    let (aq, how) = &up.asked[1];
    assert_eq!(*how, Exchange::Complete);
    assert!(aq.recursion_desired);
    assert!(aq.edns.is_some());
}

#[test]
fn rfc6147_5_1_7_ttl_without_soa_is_capped_at_600() {
    let (p, _) = policy();
    let mut up = Fake::new(|q: &Message| {
        Ok(match q.queries[0].query_type {
            RecordType::AAAA => reply(q, ResponseCode::NoError, vec![], vec![]),
            _ => reply(
                q,
                ResponseCode::NoError,
                vec![
                    a("x.test.example.", [198, 19, 0, 1], 86400),
                    a("x.test.example.", [198, 19, 0, 2], 20),
                ],
                vec![],
            ),
        })
    });
    let r = run(
        &p,
        &query("x.test.example.", RecordType::AAAA, None, false),
        Transport::Udp,
        &mut up,
    );
    let ttls: Vec<u32> = r.answers.iter().map(|x| x.ttl).collect();
    assert_eq!(ttls, vec![600, 20]);
    assert!(r.edns.is_none(), "no OPT to a client that sent none");
}

#[test]
fn rfc6147_5_1_1_real_aaaa_returned_unchanged() {
    let (p, st) = policy();
    let mut up = Fake::new(|q: &Message| {
        let mut r = reply(
            q,
            ResponseCode::NoError,
            vec![aaaa("dual.test.example.", "2001:db8::10", 300)],
            vec![],
        );
        r.metadata.authentic_data = true; // the upstream's flags pass through untouched
        Ok(r)
    });
    let q = query("dual.test.example.", RecordType::AAAA, None, false);
    let out = p
        .handle(&q.to_vec().unwrap(), Transport::Udp, &mut up)
        .unwrap();
    assert_eq!(out, up.given[0], "byte for byte the upstream's answer");
    assert_eq!(up.asked_types(), vec![RecordType::AAAA], "no A query");
    assert_eq!(st.snapshot().aaaa_real, 1);
    assert_eq!(st.snapshot().synthesized, 0);
}

#[test]
fn rfc6147_5_1_4_mapped_addresses_are_excluded() {
    let (p, st) = policy();
    let mut up = Fake::new(|q: &Message| {
        Ok(match q.queries[0].query_type {
            RecordType::AAAA => reply(
                q,
                ResponseCode::NoError,
                vec![aaaa("m.test.example.", "::ffff:198.19.0.9", 300)],
                vec![soa(300, 300)],
            ),
            _ => reply(
                q,
                ResponseCode::NoError,
                vec![a("m.test.example.", [198, 19, 0, 9], 100)],
                vec![],
            ),
        })
    });
    let r = run(
        &p,
        &query("m.test.example.", RecordType::AAAA, None, false),
        Transport::Udp,
        &mut up,
    );
    assert_eq!(addrs(&r), vec![v6("2001:2:0:64::c613:9")]);
    assert_eq!(st.snapshot().aaaa_excluded, 1);
    assert_eq!(st.snapshot().synthesized, 1);
}

#[test]
fn rfc6147_5_1_4_mixed_answer_keeps_only_usable_records() {
    let (p, st) = policy_with(PREFIX, &["2001:db8:dead::/48"]);
    let mut up = Fake::new(|q: &Message| {
        let mut r = reply(
            q,
            ResponseCode::NoError,
            vec![
                aaaa("mix.test.example.", "::ffff:198.19.0.9", 300),
                aaaa("mix.test.example.", "2001:db8:dead::1", 300),
                aaaa("mix.test.example.", "2001:db8::1", 300),
            ],
            vec![],
        );
        r.metadata.authentic_data = true;
        r.metadata.authoritative = true;
        Ok(r)
    });
    let r = run(
        &p,
        &query("mix.test.example.", RecordType::AAAA, None, false),
        Transport::Udp,
        &mut up,
    );
    assert_eq!(addrs(&r), vec![v6("2001:db8::1")]);
    assert!(!r.authentic_data, "edited data is not authenticated");
    // RFC 6147 5.4 / RFC 1035 4.1.1: the edited answer is the DNS64's, not the authority's.
    assert!(!r.authoritative, "edited data is not authoritative");
    assert_eq!(up.asked_types(), vec![RecordType::AAAA]);
    assert_eq!(st.snapshot().aaaa_excluded, 2);
}

#[test]
fn rfc6147_5_1_4_configured_exclusion_leads_to_synthesis() {
    let (p, _) = policy_with(PREFIX, &["2001:db8:dead::/48"]);
    let mut up = Fake::new(|q: &Message| {
        Ok(match q.queries[0].query_type {
            RecordType::AAAA => reply(
                q,
                ResponseCode::NoError,
                vec![aaaa("e.test.example.", "2001:db8:dead::1", 300)],
                vec![],
            ),
            _ => reply(q, ResponseCode::NoError, vec![], vec![soa(300, 300)]),
        })
    });
    // The A query is empty too: 5.4 returns the AAAA answer, minus the excluded records.
    let r = run(
        &p,
        &query("e.test.example.", RecordType::AAAA, None, false),
        Transport::Udp,
        &mut up,
    );
    assert_eq!(up.asked_types(), vec![RecordType::AAAA, RecordType::A]);
    assert!(r.answers.is_empty(), "{:?}", r.answers);
    assert_eq!(r.response_code, ResponseCode::NoError);
}

#[test]
fn rfc6147_5_1_2_nxdomain_passes_through() {
    let (p, st) = policy();
    let mut up =
        Fake::new(|q: &Message| Ok(reply(q, ResponseCode::NXDomain, vec![], vec![soa(300, 60)])));
    let q = query(
        "nx.test.example.",
        RecordType::AAAA,
        Some((1232, false)),
        false,
    );
    let out = p
        .handle(&q.to_vec().unwrap(), Transport::Udp, &mut up)
        .unwrap();
    assert_eq!(out, up.given[0]);
    assert_eq!(
        up.asked_types(),
        vec![RecordType::AAAA],
        "no A query after NXDOMAIN"
    );
    assert_eq!(st.snapshot().nxdomain, 1);
}

#[test]
fn rfc6147_5_1_2_other_rcodes_are_an_empty_answer() {
    let (p, _) = policy();
    let mut up = Fake::new(|q: &Message| {
        Ok(match q.queries[0].query_type {
            RecordType::AAAA => reply(q, ResponseCode::ServFail, vec![], vec![]),
            _ => reply(
                q,
                ResponseCode::NoError,
                vec![a("s.test.example.", [198, 19, 0, 3], 100)],
                vec![],
            ),
        })
    });
    let r = run(
        &p,
        &query("s.test.example.", RecordType::AAAA, None, false),
        Transport::Udp,
        &mut up,
    );
    assert_eq!(addrs(&r), vec![v6("2001:2:0:64::c613:3")]);
    assert_eq!(r.answers[0].ttl, 100);
}

/// RFC 6147 5.5: a SERVFAIL whose Extended DNS Error (RFC 8914) says the AAAA answer was
/// DNSSEC-bogus is not turned into synthesis from the A records (the downgrade 5.5 warns
/// of): it goes back as it came, and the A query is never asked. An EDE that is not about
/// validation (3, Stale Answer) leaves 5.1.2's behaviour.
#[test]
fn rfc6147_5_5_bogus_aaaa_is_not_synthesized() {
    use hickory_proto::rr::rdata::opt::EdnsOption;
    for (info, synthesized) in [(6u16, false), (7, false), (12, false), (3, true)] {
        let (p, st) = policy();
        let mut up = Fake::new(move |q: &Message| {
            Ok(match q.queries[0].query_type {
                RecordType::AAAA => {
                    let mut r = reply(q, ResponseCode::ServFail, vec![], vec![]);
                    let mut e = Edns::new();
                    e.options_mut().insert(EdnsOption::Unknown(
                        15,
                        [&info.to_be_bytes()[..], b"bogus"].concat(),
                    ));
                    r.edns = Some(e);
                    r
                }
                _ => reply(
                    q,
                    ResponseCode::NoError,
                    vec![a("b.test.example.", [198, 19, 0, 3], 100)],
                    vec![],
                ),
            })
        });
        let q = query("b.test.example.", RecordType::AAAA, None, false);
        let out = p
            .handle(&q.to_vec().unwrap(), Transport::Udp, &mut up)
            .unwrap();
        let r = Message::from_vec(&out).unwrap();
        if synthesized {
            assert_eq!(addrs(&r), vec![v6("2001:2:0:64::c613:3")], "EDE {info}");
        } else {
            assert_eq!(out, up.given[0], "EDE {info}: the SERVFAIL as it came");
            assert_eq!(r.response_code, ResponseCode::ServFail);
            assert_eq!(up.asked_types(), vec![RecordType::AAAA], "no A query");
            assert_eq!(st.snapshot().validation_failed, 1);
        }
    }
}

#[test]
fn rfc6147_5_4_error_on_both_queries_returns_the_first_answer() {
    let (p, _) = policy();
    let mut up = Fake::new(|q: &Message| {
        Ok(match q.queries[0].query_type {
            RecordType::AAAA => reply(q, ResponseCode::ServFail, vec![], vec![]),
            _ => reply(q, ResponseCode::NoError, vec![], vec![]),
        })
    });
    let q = query("s.test.example.", RecordType::AAAA, None, false);
    let out = p
        .handle(&q.to_vec().unwrap(), Transport::Udp, &mut up)
        .unwrap();
    assert_eq!(out, up.given[0]);
}

#[test]
fn rfc6147_5_1_3_timeouts_give_servfail() {
    let (p, st) = policy();
    let mut up = Fake::new(|_: &Message| Err(UpstreamError::Timeout));
    let q = query(
        "t.test.example.",
        RecordType::AAAA,
        Some((1232, false)),
        false,
    );
    let r = run(&p, &q, Transport::Udp, &mut up);
    assert_eq!(r.response_code, ResponseCode::ServFail);
    assert_eq!(r.id, 0x4242);
    assert_eq!(r.queries, q.queries);
    assert_eq!(up.asked_types(), vec![RecordType::AAAA, RecordType::A]);
    assert_eq!(st.snapshot().servfail_sent, 1);
}

#[test]
fn rfc6147_5_1_6_error_of_the_a_query_is_the_answer() {
    let (p, _) = policy();
    let mut up = Fake::new(|q: &Message| {
        Ok(match q.queries[0].query_type {
            RecordType::AAAA => reply(q, ResponseCode::NoError, vec![], vec![soa(300, 60)]),
            _ => reply(q, ResponseCode::NXDomain, vec![], vec![soa(300, 60)]),
        })
    });
    let q = query("gone.test.example.", RecordType::AAAA, None, false);
    let r = run(&p, &q, Transport::Udp, &mut up);
    assert_eq!(r.response_code, ResponseCode::NXDomain);
    assert_eq!(r.queries, q.queries, "the client's AAAA question");
    assert_eq!(r.authorities.len(), 1);
}

#[test]
fn rfc6147_5_1_5_cname_chain_is_kept() {
    let (p, _) = policy();
    let mut up = Fake::new(|q: &Message| {
        Ok(match q.queries[0].query_type {
            RecordType::AAAA => reply(
                q,
                ResponseCode::NoError,
                vec![
                    cname("alias.test.example.", "mid.test.example.", 500),
                    cname("mid.test.example.", "v4only.test.example.", 500),
                ],
                vec![soa(300, 120)],
            ),
            _ => reply(
                q,
                ResponseCode::NoError,
                vec![
                    cname("alias.test.example.", "mid.test.example.", 500),
                    cname("mid.test.example.", "v4only.test.example.", 500),
                    a("v4only.test.example.", [198, 19, 0, 5], 3600),
                ],
                vec![],
            ),
        })
    });
    let r = run(
        &p,
        &query("alias.test.example.", RecordType::AAAA, None, false),
        Transport::Udp,
        &mut up,
    );
    let types: Vec<RecordType> = r.answers.iter().map(|x| x.record_type()).collect();
    assert_eq!(
        types,
        vec![RecordType::CNAME, RecordType::CNAME, RecordType::AAAA]
    );
    // 5.1.7: NAME is the A record's, at the end of the chain.
    assert_eq!(r.answers[2].name, name("v4only.test.example."));
    assert_eq!(r.answers[2].ttl, 120);
    assert_eq!(r.answers[0].ttl, 500, "CNAMEs as they came");
}

#[test]
fn rfc6147_5_4_empty_a_answer_returns_the_aaaa_answer() {
    let (p, st) = policy();
    let mut up =
        Fake::new(|q: &Message| Ok(reply(q, ResponseCode::NoError, vec![], vec![soa(300, 60)])));
    let q = query("empty.test.example.", RecordType::AAAA, None, false);
    let out = p
        .handle(&q.to_vec().unwrap(), Transport::Udp, &mut up)
        .unwrap();
    assert_eq!(up.asked_types(), vec![RecordType::AAAA, RecordType::A]);
    assert_eq!(out, up.given[0], "the answer to the client's own query");
    assert_eq!(st.snapshot().aaaa_no_a, 1);
}

#[test]
fn rfc6147_5_5_cd_and_do_pass_through_without_synthesis() {
    let (p, st) = policy();
    let mut up =
        Fake::new(|q: &Message| Ok(reply(q, ResponseCode::NoError, vec![], vec![soa(300, 60)])));
    let q = query(
        "v4only.test.example.",
        RecordType::AAAA,
        Some((1232, true)),
        true,
    );
    let out = p
        .handle(&q.to_vec().unwrap(), Transport::Udp, &mut up)
        .unwrap();
    assert_eq!(out, up.given[0]);
    assert_eq!(
        up.asked_types(),
        vec![RecordType::AAAA],
        "no A query, no synthesis"
    );
    assert_eq!(up.asked[0].1, Exchange::Udp);
    assert_eq!(st.snapshot().dnssec_passthrough, 1);
    assert_eq!(st.snapshot().synthesized, 0);
}

#[test]
fn rfc6147_5_5_cd_alone_or_do_alone_still_synthesize_without_ad() {
    for (dnssec_ok, cd) in [(false, true), (true, false)] {
        let (p, _) = policy();
        let mut up = Fake::new(|q: &Message| {
            Ok(match q.queries[0].query_type {
                RecordType::AAAA => reply(q, ResponseCode::NoError, vec![], vec![soa(300, 60)]),
                _ => {
                    let mut r = reply(
                        q,
                        ResponseCode::NoError,
                        vec![
                            cname("c.test.example.", "v4only.test.example.", 300),
                            rrsig("c.test.example.", RecordType::CNAME),
                            a("v4only.test.example.", [198, 19, 0, 5], 300),
                            rrsig("v4only.test.example.", RecordType::A),
                        ],
                        vec![],
                    );
                    r.metadata.authentic_data = true;
                    Ok::<_, UpstreamError>(r)
                }?,
            })
        });
        let q = query(
            "c.test.example.",
            RecordType::AAAA,
            Some((1232, dnssec_ok)),
            cd,
        );
        let r = run(&p, &q, Transport::Udp, &mut up);
        // 5.5 item 1: a DNS64 that does not validate sets no AD on synthesized data.
        assert!(!r.authentic_data);
        assert_eq!(r.checking_disabled, cd);
        let types: Vec<RecordType> = r.answers.iter().map(|x| x.record_type()).collect();
        // The RRSIG over the A records goes with them; the CNAME's stays.
        assert_eq!(
            types,
            vec![RecordType::CNAME, RecordType::RRSIG, RecordType::AAAA],
            "DO={dnssec_ok} CD={cd}"
        );
        // The A query repeats the client's CD and DO.
        let aq = &up.asked[1].0;
        assert_eq!(aq.checking_disabled, cd);
        assert_eq!(aq.edns.as_ref().unwrap().flags().dnssec_ok, dnssec_ok);
        assert_eq!(r.edns.as_ref().unwrap().flags().dnssec_ok, dnssec_ok);
    }
}

#[test]
fn rfc6147_5_3_3_other_queries_pass_through_unchanged() {
    for (t, how) in [
        (Transport::Udp, Exchange::Udp),
        (Transport::Tcp, Exchange::Tcp),
    ] {
        let (p, st) = policy();
        let mut up = Fake::new(|q: &Message| {
            let mut r = reply(
                q,
                ResponseCode::NoError,
                vec![a("v4only.test.example.", [198, 19, 0, 5], 77)],
                vec![],
            );
            r.metadata.authoritative = true;
            r.metadata.authentic_data = true;
            Ok(r)
        });
        let q = query("v4only.test.example.", RecordType::A, None, false);
        let qb = q.to_vec().unwrap();
        let out = p.handle(&qb, t, &mut up).unwrap();
        assert_eq!(out, up.given[0]);
        assert_eq!(up.asked[0].1, how);
        assert_eq!(
            up.asked[0].0.to_vec().unwrap(),
            qb,
            "the client's query, unchanged"
        );
        assert_eq!(st.snapshot().passthrough, 1);
    }
}

#[test]
fn rfc6147_5_other_classes_pass_through() {
    let (p, st) = policy();
    let mut up = Fake::new(|q: &Message| Ok(reply(q, ResponseCode::Refused, vec![], vec![])));
    let mut q = query("v4only.test.example.", RecordType::AAAA, None, false);
    q.queries[0].query_class = DNSClass::CH;
    let out = p
        .handle(&q.to_vec().unwrap(), Transport::Udp, &mut up)
        .unwrap();
    assert_eq!(out, up.given[0]);
    assert_eq!(st.snapshot().passthrough, 1);
}

fn reverse(ip: &str) -> String {
    Name::from(v6(ip)).to_ascii()
}

#[test]
fn rfc6147_5_3_1_ptr_in_pref64_gets_a_cname_to_in_addr_arpa() {
    let (p, st) = policy();
    let mut up = Fake::new(|q: &Message| {
        assert_eq!(q.queries[0].name, name("5.0.19.198.in-addr.arpa."));
        Ok(reply(
            q,
            ResponseCode::NoError,
            vec![rec(
                "5.0.19.198.in-addr.arpa.",
                900,
                RData::PTR(PTR(name("v4only.test.example."))),
            )],
            vec![],
        ))
    });
    let qname = reverse("2001:2:0:64::c613:5");
    let q = query(&qname, RecordType::PTR, None, false);
    let r = run(&p, &q, Transport::Udp, &mut up);
    assert_eq!(r.queries, q.queries);
    assert_eq!(r.response_code, ResponseCode::NoError);
    assert_eq!(r.answers.len(), 2);
    assert_eq!(r.answers[0].name, name(&qname));
    assert_eq!(
        r.answers[0].data,
        RData::CNAME(CNAME(name("5.0.19.198.in-addr.arpa.")))
    );
    assert_eq!(r.answers[0].ttl, 900);
    assert_eq!(
        r.answers[1].data,
        RData::PTR(PTR(name("v4only.test.example.")))
    );
    assert_eq!(st.snapshot().ptr_synthesized, 1);
}

#[test]
fn rfc6147_5_3_1_ptr_without_data_gets_no_cname() {
    let (p, st) = policy();
    let mut up =
        Fake::new(|q: &Message| Ok(reply(q, ResponseCode::NXDomain, vec![], vec![soa(300, 60)])));
    let q = query(
        &reverse("2001:2:0:64::c613:99"),
        RecordType::PTR,
        None,
        false,
    );
    let r = run(&p, &q, Transport::Udp, &mut up);
    assert_eq!(r.response_code, ResponseCode::NXDomain);
    assert!(r.answers.is_empty());
    assert_eq!(r.authorities.len(), 1);
    assert_eq!(st.snapshot().ptr_no_data, 1);
}

#[test]
fn rfc6147_5_3_1_other_ptrs_pass_through() {
    for qname in [
        reverse("2001:db8::1"),
        "5.0.19.198.in-addr.arpa.".to_string(),
        // The pref64 zone itself, not a complete address.
        "4.6.0.0.0.0.0.0.2.0.0.0.1.0.0.2.ip6.arpa.".to_string(),
    ] {
        let (p, st) = policy();
        let mut up = Fake::new(|q: &Message| Ok(reply(q, ResponseCode::NoError, vec![], vec![])));
        let q = query(&qname, RecordType::PTR, None, false);
        let out = p
            .handle(&q.to_vec().unwrap(), Transport::Udp, &mut up)
            .unwrap();
        assert_eq!(out, up.given[0], "{qname}");
        assert_eq!(up.asked[0].0.queries, q.queries);
        assert_eq!(st.snapshot().passthrough, 1);
    }
}

#[test]
fn rfc6147_5_5_ptr_with_cd_and_do_passes_through() {
    let (p, st) = policy();
    let mut up = Fake::new(|q: &Message| Ok(reply(q, ResponseCode::NXDomain, vec![], vec![])));
    let q = query(
        &reverse("2001:2:0:64::c613:5"),
        RecordType::PTR,
        Some((1232, true)),
        true,
    );
    let out = p
        .handle(&q.to_vec().unwrap(), Transport::Udp, &mut up)
        .unwrap();
    assert_eq!(out, up.given[0]);
    assert_eq!(st.snapshot().dnssec_passthrough, 1);
}

#[test]
fn malformed_queries_get_formerr_or_nothing() {
    let (p, st) = policy();
    let mut up = Fake::new(|_: &Message| panic!("nothing goes upstream"));
    assert_eq!(p.handle(&[1, 2, 3], Transport::Udp, &mut up), None);
    // A header that promises a question that is not there.
    let hdr = [0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xff];
    let r = Message::from_vec(&p.handle(&hdr, Transport::Udp, &mut up).unwrap()).unwrap();
    assert_eq!(r.id, 0xabcd);
    assert_eq!(r.response_code, ResponseCode::FormErr);
    assert!(r.recursion_desired);
    // A response sent to us is not answered.
    let mut resp = query("x.test.example.", RecordType::A, None, false);
    resp.metadata.message_type = MessageType::Response;
    assert_eq!(
        p.handle(&resp.to_vec().unwrap(), Transport::Udp, &mut up),
        None
    );
    assert_eq!(st.snapshot().malformed, 3);
}

#[test]
fn rfc1035_4_2_1_big_synthesized_answers_are_truncated_over_udp() {
    let many: Vec<Record> = (1..=60)
        .map(|i| a("big.test.example.", [198, 19, 1, i], 300))
        .collect();
    let (p, st) = policy();
    let mut up = Fake::new(nodata_then(many.clone()));
    let q = query("big.test.example.", RecordType::AAAA, None, false);
    let r = run(&p, &q, Transport::Udp, &mut up);
    assert!(r.truncation);
    assert!(r.answers.is_empty());
    assert_eq!(r.queries, q.queries);
    assert_eq!(st.snapshot().truncated, 1);
    // Over TCP the whole answer.
    let mut up = Fake::new(nodata_then(many));
    let r = run(&p, &q, Transport::Tcp, &mut up);
    assert!(!r.truncation);
    assert_eq!(addrs(&r).len(), 60);
    // With EDNS 4096 over UDP it fits too (60 x 40 bytes).
    let mut up = Fake::new(nodata_then(
        (1..=60)
            .map(|i| a("big.test.example.", [198, 19, 1, i], 300))
            .collect(),
    ));
    let q = query(
        "big.test.example.",
        RecordType::AAAA,
        Some((4096, false)),
        false,
    );
    assert_eq!(addrs(&run(&p, &q, Transport::Udp, &mut up)).len(), 60);
}

#[test]
fn rfc6052_3_1_well_known_prefix_skips_non_global_ipv4() {
    let (p, st) = policy_with("64:ff9b::/96", &[]);
    let mut up = Fake::new(nodata_then(vec![
        a("w.test.example.", [198, 19, 0, 5], 300),
        a("w.test.example.", [192, 0, 2, 1], 300),
        a("w.test.example.", [8, 8, 8, 8], 300),
    ]));
    let r = run(
        &p,
        &query("w.test.example.", RecordType::AAAA, None, false),
        Transport::Udp,
        &mut up,
    );
    assert_eq!(addrs(&r), vec![v6("64:ff9b::808:808")]);
    // Only non-global addresses: nothing to synthesize, the AAAA answer goes back.
    let mut up = Fake::new(nodata_then(vec![a("w.test.example.", [10, 0, 0, 1], 300)]));
    let r = run(
        &p,
        &query("w.test.example.", RecordType::AAAA, None, false),
        Transport::Udp,
        &mut up,
    );
    assert!(r.answers.is_empty());
    assert_eq!(st.snapshot().aaaa_no_a, 1);
}

/// RFC 6052 3.1 relaxed on purpose (`dns64.allow_non_global_wkp = true`): the Well-Known
/// Prefix then carries private addresses too.
#[test]
fn rfc6052_3_1_relaxed_well_known_prefix_carries_non_global_ipv4() {
    let stats = Arc::new(Stats::default());
    let wkp: Pref64 = "64:ff9b::/96".parse().unwrap();
    let p = Policy::new(wkp.allowing_non_global(true), &[], stats);
    let mut up = Fake::new(nodata_then(vec![a("w.test.example.", [10, 0, 0, 1], 300)]));
    let r = run(
        &p,
        &query("w.test.example.", RecordType::AAAA, None, false),
        Transport::Udp,
        &mut up,
    );
    assert_eq!(addrs(&r), vec![v6("64:ff9b::a00:1")]);
}

#[test]
fn other_prefix_lengths_synthesize_per_rfc6052() {
    let (p, _) = policy_with("2001:db8:122::/48", &[]);
    let mut up = Fake::new(nodata_then(vec![a(
        "l.test.example.",
        [192, 0, 2, 33],
        300,
    )]));
    let r = run(
        &p,
        &query("l.test.example.", RecordType::AAAA, None, false),
        Transport::Udp,
        &mut up,
    );
    assert_eq!(addrs(&r), vec![v6("2001:db8:122:c000:2:2100::")]);
    // And the PTR of that address maps back to 33.2.0.192.in-addr.arpa.
    let mut up = Fake::new(|q: &Message| {
        assert_eq!(q.queries[0].name, name("33.2.0.192.in-addr.arpa."));
        Ok(reply(
            q,
            ResponseCode::NoError,
            vec![rec(
                "33.2.0.192.in-addr.arpa.",
                60,
                RData::PTR(PTR(name("l.test.example."))),
            )],
            vec![],
        ))
    });
    let q = query(
        &reverse("2001:db8:122:c000:2:2100::"),
        RecordType::PTR,
        None,
        false,
    );
    let r = run(&p, &q, Transport::Udp, &mut up);
    assert_eq!(r.answers.len(), 2);
}

#[test]
fn real_aaaa_too_big_for_udp_is_truncated() {
    let (p, _) = policy();
    let mut up = Fake::new(|q: &Message| {
        let recs = (1..=40)
            .map(|i| aaaa("many.test.example.", &format!("2001:db8::{i:x}"), 300))
            .collect();
        Ok(reply(q, ResponseCode::NoError, recs, vec![]))
    });
    let q = query("many.test.example.", RecordType::AAAA, None, false);
    let r = run(&p, &q, Transport::Udp, &mut up);
    assert!(r.truncation, "the client should retry over TCP");
}
