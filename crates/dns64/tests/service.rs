//! The service over real sockets on loopback (no root needed): a scripted upstream server
//! (UDP and TCP), the DNS64 in front of it, queries over UDP and TCP, truncation retried
//! over TCP, timeouts bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use xlat_dns64::{Dns64Config, Dns64Service};

/// Answers: AAAA -> NODATA; A for big.test. -> TC over UDP, 60 records over TCP; other A ->
/// 198.19.0.5; names under slow.test. -> never.
fn answer(q: &Message, tcp: bool) -> Option<Message> {
    let qq = &q.queries[0];
    if qq.name.to_ascii().ends_with("slow.test.") {
        return None;
    }
    let mut r = Message::response(q.id, OpCode::Query);
    r.metadata.recursion_available = true;
    r.queries = q.queries.clone();
    if qq.query_type == RecordType::A {
        let n = if qq.name.to_ascii() == "big.test." {
            60
        } else {
            1
        };
        if n > 1 && !tcp {
            r.metadata.truncation = true;
        } else {
            for i in 0..n {
                r.answers.push(Record::from_rdata(
                    qq.name.clone(),
                    300,
                    RData::A(A(Ipv4Addr::new(198, 19, 0, 5 + i))),
                ));
            }
        }
    }
    r.metadata.response_code = ResponseCode::NoError;
    Some(r)
}

struct FakeServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl FakeServer {
    fn start() -> FakeServer {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = udp.local_addr().unwrap();
        let tcp = TcpListener::bind(addr).unwrap();
        tcp.set_nonblocking(true).unwrap();
        udp.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s1 = stop.clone();
        let t1 = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !s1.load(Ordering::Relaxed) {
                if let Ok((n, peer)) = udp.recv_from(&mut buf) {
                    let q = Message::from_vec(&buf[..n]).unwrap();
                    if let Some(r) = answer(&q, false) {
                        udp.send_to(&r.to_vec().unwrap(), peer).unwrap();
                    }
                }
            }
        });
        let s2 = stop.clone();
        let t2 = std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                let Ok((mut c, _)) = tcp.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut len = [0u8; 2];
                if c.read_exact(&mut len).is_err() {
                    continue;
                }
                let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
                c.read_exact(&mut q).unwrap();
                let q = Message::from_vec(&q).unwrap();
                if let Some(r) = answer(&q, true) {
                    let b = r.to_vec().unwrap();
                    c.write_all(&(b.len() as u16).to_be_bytes()).unwrap();
                    c.write_all(&b).unwrap();
                }
            }
        });
        FakeServer {
            addr,
            stop,
            threads: vec![t1, t2],
        }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn query(name: &str, t: RecordType) -> Vec<u8> {
    let mut m = Message::new(0x1111, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
    let mut e = Edns::new();
    e.set_max_payload(1232);
    m.set_edns(e);
    m.to_vec().unwrap()
}

fn ask_udp(dns64: SocketAddr, q: &[u8]) -> Message {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.send_to(q, dns64).unwrap();
    let mut buf = [0u8; 65535];
    let n = s.recv(&mut buf).expect("an answer within 10 s");
    Message::from_vec(&buf[..n]).unwrap()
}

fn ask_tcp(dns64: SocketAddr, queries: &[Vec<u8>]) -> Vec<Message> {
    let mut s = TcpStream::connect_timeout(&dns64, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // RFC 7766 6.2.1.1: pipelined queries on one connection.
    for q in queries {
        s.write_all(&(q.len() as u16).to_be_bytes()).unwrap();
        s.write_all(q).unwrap();
    }
    queries
        .iter()
        .map(|_| {
            let mut len = [0u8; 2];
            s.read_exact(&mut len).unwrap();
            let mut b = vec![0u8; usize::from(u16::from_be_bytes(len))];
            s.read_exact(&mut b).unwrap();
            Message::from_vec(&b).unwrap()
        })
        .collect()
}

fn service(upstream: SocketAddr) -> Dns64Service {
    let mut cfg = Dns64Config::new(
        vec!["127.0.0.1:0".parse().unwrap()],
        vec![upstream],
        "2001:2:0:64::/96".parse().unwrap(),
        vec![],
    );
    cfg.timeout = Duration::from_millis(300);
    Dns64Service::start(&cfg).unwrap()
}

fn aaaa(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::AAAA(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn udp_and_tcp_synthesis_and_truncation_retry() {
    let up = FakeServer::start();
    let svc = service(up.addr);
    let at = svc.local_addrs()[0];

    let r = ask_udp(at, &query("v4only.test.", RecordType::AAAA));
    assert_eq!(r.id, 0x1111);
    assert_eq!(aaaa(&r), vec!["2001:2:0:64::c613:5"]);

    // A passes through.
    let r = ask_udp(at, &query("v4only.test.", RecordType::A));
    assert_eq!(r.answers.len(), 1);

    // big.test.: the upstream truncates A over UDP; the DNS64 retries over TCP. The
    // synthesized answer (60 AAAA records) does not fit the client's 1232 bytes: TC to the
    // client, which then asks over TCP.
    let r = ask_udp(at, &query("big.test.", RecordType::AAAA));
    assert!(r.truncation);
    let rs = ask_tcp(
        at,
        &[
            query("big.test.", RecordType::AAAA),
            query("v4only.test.", RecordType::AAAA),
        ],
    );
    assert_eq!(aaaa(&rs[0]).len(), 60);
    assert_eq!(aaaa(&rs[1]), vec!["2001:2:0:64::c613:5"]);

    let c = svc.counters();
    assert_eq!(c.queries, 5);
    assert_eq!(c.tcp_queries, 2);
    assert_eq!(c.synthesized, 4, "the truncated one counts too");
    assert_eq!(c.passthrough, 1);
    assert!(c.upstream_tcp_retries >= 2, "{c:?}");
    assert_eq!(c.truncated, 1);
}

#[test]
fn unanswered_upstream_gives_servfail_in_bounded_time() {
    let up = FakeServer::start();
    let svc = service(up.addr);
    let at = svc.local_addrs()[0];
    let r = ask_udp(at, &query("x.slow.test.", RecordType::AAAA));
    assert_eq!(r.response_code, ResponseCode::ServFail);
    // Two upstream exchanges (AAAA, then A) of one 300 ms attempt each, well inside the
    // client's 10 s.
    let r = ask_udp(at, &query("x.slow.test.", RecordType::MX));
    assert_eq!(r.response_code, ResponseCode::ServFail);
    let c = svc.counters();
    assert_eq!(c.upstream_errors, 3);
    assert_eq!(c.upstream_timeouts, 3);
    assert_eq!(c.servfail_sent, 2);
    drop(svc); // stops and joins every thread
}

/// A reload: the prefix and the upstream change for the next query, a removed listen
/// address stops answering, an added one answers, a kept one stays the same socket; an
/// address that cannot be bound refuses the update and changes nothing.
#[test]
fn a_reload_changes_prefix_upstream_and_listen_addresses() {
    let up = FakeServer::start();
    let up2 = FakeServer::start();
    let mut svc = service(up.addr);
    let first = svc.local_addrs()[0];
    let r = ask_udp(first, &query("v4only.test.", RecordType::AAAA));
    assert_eq!(aaaa(&r), vec!["2001:2:0:64::c613:5"]);

    // A taken address: refused, naming the key; the service answers as before.
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut cfg = Dns64Config::new(
        vec![taken.local_addr().unwrap()],
        vec![up2.addr],
        "2001:2:0:65::/96".parse().unwrap(),
        vec![],
    );
    cfg.timeout = Duration::from_millis(300);
    let e = svc.prepare(&cfg).err().expect("a taken address is refused");
    assert_eq!(e.key().as_deref(), Some("listen[0]"), "{e}");
    let r = ask_udp(first, &query("v4only.test.", RecordType::AAAA));
    assert_eq!(aaaa(&r), vec!["2001:2:0:64::c613:5"]);

    // Keep 127.0.0.1:0 (the running listener), add 127.0.0.2:0, new prefix and upstream.
    cfg.listen = vec![
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.2:0".parse().unwrap(),
    ];
    let u = svc.prepare(&cfg).unwrap();
    assert!(svc.apply(u).is_empty());
    let now = svc.local_addrs().to_vec();
    assert_eq!(now.len(), 2);
    assert_eq!(now[0], first, "a kept address keeps its socket");
    for at in &now {
        let r = ask_udp(*at, &query("v4only.test.", RecordType::AAAA));
        assert_eq!(aaaa(&r), vec!["2001:2:0:65::c613:5"], "{at}");
        let r = ask_tcp(*at, &[query("v4only.test.", RecordType::AAAA)]);
        assert_eq!(aaaa(&r[0]), vec!["2001:2:0:65::c613:5"], "{at}");
    }
    // The first upstream goes away: the new one answers.
    drop(up);
    let r = ask_udp(now[1], &query("v4only.test.", RecordType::AAAA));
    assert_eq!(aaaa(&r), vec!["2001:2:0:65::c613:5"]);

    // Remove the first address: TCP to it is refused, the second still answers.
    cfg.listen = vec!["127.0.0.2:0".parse().unwrap()];
    let u = svc.prepare(&cfg).unwrap();
    assert!(svc.apply(u).is_empty());
    assert_eq!(svc.local_addrs(), &now[1..]);
    let mut refused = false;
    for _ in 0..50 {
        if TcpStream::connect_timeout(&first, Duration::from_millis(200)).is_err() {
            refused = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(refused, "the removed address stops listening");
    let r = ask_udp(now[1], &query("v4only.test.", RecordType::AAAA));
    assert_eq!(aaaa(&r), vec!["2001:2:0:65::c613:5"]);
}
