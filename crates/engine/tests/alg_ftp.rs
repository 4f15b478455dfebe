//! The FTP ALG (`alg = ["ftp"]`) through the public engine API: RFC 959 PORT and 227, RFC
//! 2428 EPRT, RFC 6384 EPRT |2| -> PORT, the mapping made for the data connection, and the
//! TCP sequence / acknowledgement adjustment after a rewrite that changed the length. Every
//! packet leaving the engine is checked with a full TCP checksum computation.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, Ipv6Addr};

use xlat_engine::counters::Event;
use xlat_engine::flow::{Endpoint, Proto};
use xlat_engine::*;
use xlat_wire::checksum;

const CLIENT: [u8; 4] = [198, 18, 0, 20];
const SERVER_IN: [u8; 4] = [198, 18, 0, 30];
const POOL: [u8; 4] = [198, 19, 0, 100];
const SERVER: [u8; 4] = [198, 19, 0, 2];
const OTHER: [u8; 4] = [198, 18, 0, 99];

const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;
const SYN: u8 = 0x02;

fn nat44(alg: bool) -> Engine {
    Engine::new(EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["198.18.0.0/24".parse().unwrap()],
            pool: vec!["198.19.0.100/32".parse().unwrap()],
            filtering: Filtering::AddressAndPortDependent,
            forwards: vec![PortForward {
                proto: Proto::Tcp,
                inside: Endpoint {
                    addr: u32::from_be_bytes(SERVER_IN),
                    port: 21,
                },
                outside: Endpoint {
                    addr: u32::from_be_bytes(POOL),
                    port: 21,
                },
                count: 1,
            }],
            alg_ftp: alg,
            ..Nat44Config::default()
        }),
        seed: 5,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// A TCP segment in an IPv4 packet, checksums filled.
#[allow(clippy::too_many_arguments)]
fn tcp4(
    src: [u8; 4],
    sport: u16,
    dst: [u8; 4],
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    data: &[u8],
) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(data);
    let total = 20 + t.len();
    let mut p = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        1,
        0x40,
        0,
        64,
        6,
        0,
        0,
    ];
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = checksum::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let mut ph = Vec::new();
    ph.extend_from_slice(&src);
    ph.extend_from_slice(&dst);
    ph.extend_from_slice(&[0, 6, (t.len() >> 8) as u8, t.len() as u8]);
    let c = checksum::finish(checksum::sum(&t, checksum::sum(&ph, 0)));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&t);
    p
}

/// A TCP segment in an IPv6 packet, checksum filled.
#[allow(clippy::too_many_arguments)]
fn tcp6(
    src: Ipv6Addr,
    sport: u16,
    dst: Ipv6Addr,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    data: &[u8],
) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(data);
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(t.len() as u16).to_be_bytes());
    p.extend_from_slice(&[6, 64]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let mut ph = Vec::new();
    ph.extend_from_slice(&src.octets());
    ph.extend_from_slice(&dst.octets());
    ph.extend_from_slice(&(t.len() as u32).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 6]);
    let c = checksum::finish(checksum::sum(&t, checksum::sum(&ph, 0)));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&t);
    p
}

/// What an IPv4 TCP packet leaving the engine says, after checking both its checksums.
#[derive(Debug)]
struct Seg4 {
    src: [u8; 4],
    sport: u16,
    dst: [u8; 4],
    dport: u16,
    seq: u32,
    ack: u32,
    data: Vec<u8>,
}

fn seg4(p: &[u8]) -> Seg4 {
    assert_eq!(p[0], 0x45);
    let total = u16::from_be_bytes([p[2], p[3]]) as usize;
    assert_eq!(total, p.len(), "total length");
    assert!(checksum::verifies(&p[..20]), "IPv4 header checksum");
    let t = &p[20..];
    let mut ph = Vec::new();
    ph.extend_from_slice(&p[12..20]);
    ph.extend_from_slice(&[0, 6, (t.len() >> 8) as u8, t.len() as u8]);
    assert_eq!(
        checksum::finish(checksum::sum(t, checksum::sum(&ph, 0))),
        0,
        "TCP checksum"
    );
    let doff = usize::from(t[12] >> 4) * 4;
    Seg4 {
        src: p[12..16].try_into().unwrap(),
        sport: u16::from_be_bytes([t[0], t[1]]),
        dst: p[16..20].try_into().unwrap(),
        dport: u16::from_be_bytes([t[2], t[3]]),
        seq: u32::from_be_bytes(t[4..8].try_into().unwrap()),
        ack: u32::from_be_bytes(t[8..12].try_into().unwrap()),
        data: t[doff..].to_vec(),
    }
}

fn run(e: &mut Engine, now: u64, mut p: Vec<u8>) -> Result<Vec<u8>, Verdict> {
    match e.process_vec(Time(now), &mut p) {
        Verdict::Forward => Ok(p),
        v => Err(v),
    }
}

/// Opens the control connection CLIENT:40000 -> SERVER:21 and returns its outside port.
fn open44(e: &mut Engine) -> u16 {
    let s = seg4(&run(e, 1, tcp4(CLIENT, 40000, SERVER, 21, 100, 0, SYN, b"")).unwrap());
    let ext = s.sport;
    run(e, 2, tcp4(SERVER, 21, POOL, ext, 500, 101, SYN | ACK, b"")).unwrap();
    run(e, 3, tcp4(CLIENT, 40000, SERVER, 21, 101, 501, ACK, b"")).unwrap();
    ext
}

fn parse_port(line: &[u8]) -> ([u8; 4], u16) {
    let s = std::str::from_utf8(line).unwrap();
    let args = s
        .trim_end()
        .split_once(' ')
        .unwrap()
        .1
        .split(',')
        .map(|n| n.parse::<u8>().unwrap())
        .collect::<Vec<_>>();
    (
        [args[0], args[1], args[2], args[3]],
        u16::from_be_bytes([args[4], args[5]]),
    )
}

#[test]
fn rfc959_port_rewritten_mapped_and_seq_adjusted() {
    let mut e = nat44(true);
    let ext = open44(&mut e);
    // RFC 959 4.1.2: the client announces 198.18.0.20 port 50000 (195*256+80).
    let cmd = b"PORT 198,18,0,20,195,80\r\n";
    let out = seg4(
        &run(
            &mut e,
            4,
            tcp4(CLIENT, 40000, SERVER, 21, 101, 501, PSH_ACK, cmd),
        )
        .unwrap(),
    );
    assert_eq!(out.src, POOL);
    assert_eq!(out.seq, 101);
    let (addr, port) = parse_port(&out.data);
    assert_eq!(addr, POOL, "{}", String::from_utf8_lossy(&out.data));
    assert!(out.data.ends_with(b"\r\n"));
    let diff = out.data.len() as i64 - cmd.len() as i64;
    assert_ne!(diff, 0, "the test needs a rewrite that changes the length");
    assert_eq!(e.counters().count(Event::AlgFtpRewritten), 1);

    // The server acks the rewritten stream; the client sees its own numbering.
    let srv_ack = (101 + out.data.len()) as u32;
    let back = seg4(
        &run(
            &mut e,
            5,
            tcp4(
                SERVER,
                21,
                POOL,
                ext,
                501,
                srv_ack,
                PSH_ACK,
                b"200 PORT ok\r\n",
            ),
        )
        .unwrap(),
    );
    assert_eq!(back.dst, CLIENT);
    assert_eq!(back.ack, 101 + cmd.len() as u32);
    // The client's next segment moves by the difference.
    let next_seq = 101 + cmd.len() as u32;
    let nxt = seg4(
        &run(
            &mut e,
            6,
            tcp4(
                CLIENT,
                40000,
                SERVER,
                21,
                next_seq,
                514,
                PSH_ACK,
                b"RETR f\r\n",
            ),
        )
        .unwrap(),
    );
    assert_eq!(i64::from(nxt.seq), i64::from(next_seq) + diff);
    assert_eq!(nxt.data, b"RETR f\r\n");

    // A retransmission of the PORT segment gets the same bytes and no second offset.
    let again = seg4(
        &run(
            &mut e,
            7,
            tcp4(CLIENT, 40000, SERVER, 21, 101, 501, PSH_ACK, cmd),
        )
        .unwrap(),
    );
    assert_eq!(again.data, out.data);
    assert_eq!(again.seq, 101);
    let nxt2 = seg4(
        &run(
            &mut e,
            8,
            tcp4(
                CLIENT,
                40000,
                SERVER,
                21,
                next_seq,
                514,
                PSH_ACK,
                b"RETR f\r\n",
            ),
        )
        .unwrap(),
    );
    assert_eq!(nxt2.seq, nxt.seq);

    // The server's data connection (from port 20, RFC 959 3.2) reaches the announced
    // endpoint, although address-and-port-dependent filtering would refuse it.
    let data = seg4(&run(&mut e, 9, tcp4(SERVER, 20, POOL, port, 900, 0, SYN, b"")).unwrap());
    assert_eq!((data.dst, data.dport), (CLIENT, 50000));
    assert_eq!(e.counters().count(Event::AlgFtpDataOpened), 1);
    // Its answer leaves from the mapped port.
    let syn_ack = seg4(
        &run(
            &mut e,
            10,
            tcp4(CLIENT, 50000, SERVER, 20, 7000, 901, SYN | ACK, b""),
        )
        .unwrap(),
    );
    assert_eq!((syn_ack.src, syn_ack.sport), (POOL, port));
    // Another address may not use the expectation.
    assert!(run(
        &mut e,
        11,
        tcp4([198, 19, 0, 3], 20, POOL, port, 1, 0, SYN, b"")
    )
    .is_err());
}

#[test]
fn without_the_alg_port_passes_and_the_data_connection_is_filtered() {
    let mut e = nat44(false);
    let _ = open44(&mut e);
    let cmd = b"PORT 198,18,0,20,195,80\r\n";
    let out = seg4(
        &run(
            &mut e,
            4,
            tcp4(CLIENT, 40000, SERVER, 21, 101, 501, PSH_ACK, cmd),
        )
        .unwrap(),
    );
    assert_eq!(out.data, cmd);
    assert!(run(&mut e, 5, tcp4(SERVER, 20, POOL, 50000, 900, 0, SYN, b"")).is_err());
    assert_eq!(e.counters().count(Event::AlgFtpRewritten), 0);
}

#[test]
fn rfc2428_eprt1_rewritten() {
    let mut e = nat44(true);
    let _ = open44(&mut e);
    let cmd = b"EPRT |1|198.18.0.20|50001|\r\n";
    let out = seg4(
        &run(
            &mut e,
            4,
            tcp4(CLIENT, 40000, SERVER, 21, 101, 501, PSH_ACK, cmd),
        )
        .unwrap(),
    );
    let s = String::from_utf8(out.data).unwrap();
    assert!(s.starts_with("EPRT |1|198.19.0.100|"), "{s}");
    let port: u16 = s
        .trim_end()
        .trim_end_matches('|')
        .rsplit('|')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let data = seg4(&run(&mut e, 5, tcp4(SERVER, 20, POOL, port, 900, 0, SYN, b"")).unwrap());
    assert_eq!((data.dst, data.dport), (CLIENT, 50001));
}

#[test]
fn rfc2428_epsv_passes_and_bounce_split_malformed_are_counted() {
    let mut e = nat44(true);
    let _ = open44(&mut e);
    let mut seq = 101;
    for (cmd, ev) in [
        (&b"EPSV\r\n"[..], None),
        // RFC 2577: a PORT naming another host is not rewritten.
        (
            &b"PORT 198,18,0,99,195,80\r\n"[..],
            Some(Event::AlgFtpMalformed),
        ),
        (
            &b"PORT 198,18,0,20,195\r\n"[..],
            Some(Event::AlgFtpMalformed),
        ),
        // A command split across segments.
        (&b"PORT 198,18,0,2"[..], Some(Event::AlgFtpSplit)),
    ] {
        let before = ev.map(|ev| e.counters().count(ev));
        let out = seg4(
            &run(
                &mut e,
                4,
                tcp4(CLIENT, 40000, SERVER, 21, seq, 501, PSH_ACK, cmd),
            )
            .unwrap(),
        );
        assert_eq!(out.data, cmd);
        assert_eq!(out.seq, seq);
        if let (Some(ev), Some(b)) = (ev, before) {
            assert_eq!(
                e.counters().count(ev),
                b + 1,
                "{}",
                String::from_utf8_lossy(cmd)
            );
        }
        seq += cmd.len() as u32;
    }
    let _ = OTHER;
    assert_eq!(e.counters().count(Event::AlgFtpRewritten), 0);
}

#[test]
fn rfc959_227_of_a_forwarded_inside_server_rewritten() {
    let mut e = nat44(true);
    // An outside client opens the control connection to the forwarded port 21.
    let s = seg4(&run(&mut e, 1, tcp4(SERVER, 33000, POOL, 21, 10, 0, SYN, b"")).unwrap());
    assert_eq!((s.dst, s.dport), (SERVER_IN, 21));
    run(
        &mut e,
        2,
        tcp4(SERVER_IN, 21, SERVER, 33000, 70, 11, SYN | ACK, b""),
    )
    .unwrap();
    run(&mut e, 3, tcp4(SERVER, 33000, POOL, 21, 11, 71, ACK, b"")).unwrap();
    let reply = b"227 Entering Passive Mode (198,18,0,30,39,16).\r\n";
    let out = seg4(
        &run(
            &mut e,
            4,
            tcp4(SERVER_IN, 21, SERVER, 33000, 71, 17, PSH_ACK, reply),
        )
        .unwrap(),
    );
    let s = String::from_utf8(out.data.clone()).unwrap();
    assert!(
        s.starts_with("227 Entering Passive Mode (198,19,0,100,"),
        "{s}"
    );
    let nums: Vec<u8> = s[s.find('(').unwrap() + 1..s.find(')').unwrap()]
        .split(',')
        .map(|n| n.parse().unwrap())
        .collect();
    let port = u16::from_be_bytes([nums[4], nums[5]]);
    // The client connects to the passive port: it reaches 198.18.0.30:10000.
    let data = seg4(&run(&mut e, 5, tcp4(SERVER, 33001, POOL, port, 1, 0, SYN, b"")).unwrap());
    assert_eq!((data.dst, data.dport), (SERVER_IN, 10000));
    // The client's ack of the longer reply comes back in the server's numbering.
    let ack = 71 + out.data.len() as u32;
    let back = seg4(&run(&mut e, 6, tcp4(SERVER, 33000, POOL, 21, 17, ack, ACK, b"")).unwrap());
    assert_eq!(back.ack, 71 + reply.len() as u32);
}

#[test]
fn rfc6384_eprt2_becomes_port_with_the_pool4_address() {
    let mut e = Engine::new(EngineConfig {
        nat64: Some(Nat64Config {
            prefix: "2001:2:0:64::/96".parse().unwrap(),
            pool4: vec!["198.19.0.101/32".parse().unwrap()],
            alg_ftp: true,
            ..Nat64Config::default()
        }),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap();
    let client: Ipv6Addr = "2001:2::20".parse().unwrap();
    let server6: Ipv6Addr = "2001:2:0:64::c613:2".parse().unwrap();
    let pool4 = Ipv4Addr::new(198, 19, 0, 101).octets();
    let syn = seg4(
        &run(
            &mut e,
            1,
            tcp6(client, 40000, server6, 21, 100, 0, SYN, b""),
        )
        .unwrap(),
    );
    let ext = syn.sport;
    run(
        &mut e,
        2,
        tcp4(SERVER, 21, pool4, ext, 500, 101, SYN | ACK, b""),
    )
    .unwrap();
    run(
        &mut e,
        3,
        tcp6(client, 40000, server6, 21, 101, 501, ACK, b""),
    )
    .unwrap();
    let cmd = b"EPRT |2|2001:2::20|50000|\r\n";
    let out = seg4(
        &run(
            &mut e,
            4,
            tcp6(client, 40000, server6, 21, 101, 501, PSH_ACK, cmd),
        )
        .unwrap(),
    );
    let (addr, port) = parse_port(&out.data);
    assert!(
        out.data.starts_with(b"PORT "),
        "{}",
        String::from_utf8_lossy(&out.data)
    );
    assert_eq!(addr, pool4);
    // The IPv4 server's data connection reaches the IPv6 client's announced port.
    let mut p = tcp4(SERVER, 20, pool4, port, 900, 0, SYN, b"");
    assert_eq!(e.process_vec(Time(5), &mut p), Verdict::Forward);
    assert_eq!(p[0] >> 4, 6);
    assert_eq!(&p[24..40], &client.octets());
    assert_eq!(u16::from_be_bytes([p[42], p[43]]), 50000);
    // The server's ack of the rewritten (shorter or longer) PORT maps back.
    let ack = 101 + out.data.len() as u32;
    let mut p = tcp4(SERVER, 21, pool4, ext, 501, ack, ACK, b"");
    assert_eq!(e.process_vec(Time(6), &mut p), Verdict::Forward);
    assert_eq!(
        u32::from_be_bytes(p[48..52].try_into().unwrap()),
        101 + cmd.len() as u32
    );
    // EPSV passes unchanged (RFC 2428 3).
    let q = seg4(
        &run(
            &mut e,
            7,
            tcp6(
                client,
                40000,
                server6,
                21,
                101 + cmd.len() as u32,
                501,
                PSH_ACK,
                b"EPSV\r\n",
            ),
        )
        .unwrap(),
    );
    assert_eq!(q.data, b"EPSV\r\n");
}

fn nat64(alg: bool) -> Engine {
    Engine::new(EngineConfig {
        nat64: Some(Nat64Config {
            prefix: "2001:2:0:64::/96".parse().unwrap(),
            pool4: vec!["198.19.0.101/32".parse().unwrap()],
            alg_ftp: alg,
            ..Nat64Config::default()
        }),
        seed: 1,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// The TCP payload, sequence and acknowledgement numbers of an IPv6 packet (40-byte header).
fn seg6(p: &[u8]) -> (u32, u32, Vec<u8>) {
    assert_eq!(p[0] >> 4, 6);
    let t = &p[40..];
    let mut ph = Vec::new();
    ph.extend_from_slice(&p[8..40]);
    ph.extend_from_slice(&(t.len() as u32).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 6]);
    assert_eq!(
        checksum::finish(checksum::sum(t, checksum::sum(&ph, 0))),
        0,
        "TCP checksum"
    );
    assert_eq!(usize::from(u16::from_be_bytes([p[4], p[5]])), t.len());
    let doff = usize::from(t[12] >> 4) * 4;
    (
        u32::from_be_bytes(t[4..8].try_into().unwrap()),
        u32::from_be_bytes(t[8..12].try_into().unwrap()),
        t[doff..].to_vec(),
    )
}

#[test]
fn rfc6384_epsv_rejected_becomes_pasv_and_227_becomes_229() {
    let mut e = nat64(true);
    let client: Ipv6Addr = "2001:2::20".parse().unwrap();
    let server6: Ipv6Addr = "2001:2:0:64::c613:2".parse().unwrap();
    let pool4 = Ipv4Addr::new(198, 19, 0, 101).octets();
    let ext = seg4(
        &run(
            &mut e,
            1,
            tcp6(client, 40000, server6, 21, 100, 0, SYN, b""),
        )
        .unwrap(),
    )
    .sport;
    run(
        &mut e,
        2,
        tcp4(SERVER, 21, pool4, ext, 500, 101, SYN | ACK, b""),
    )
    .unwrap();
    // The first EPSV passes; the server does not know it (RFC 959 4.2.1: 500).
    let q = seg4(
        &run(
            &mut e,
            3,
            tcp6(client, 40000, server6, 21, 101, 501, PSH_ACK, b"EPSV\r\n"),
        )
        .unwrap(),
    );
    assert_eq!(q.data, b"EPSV\r\n");
    let no = b"500 Unknown command.\r\n";
    let (_, _, d) = seg6(
        &run(
            &mut e,
            4,
            tcp4(SERVER, 21, pool4, ext, 501, 107, PSH_ACK, no),
        )
        .unwrap(),
    );
    assert_eq!(d, no);
    // The next EPSV goes as PASV (same length here).
    let q = seg4(
        &run(
            &mut e,
            5,
            tcp6(
                client,
                40000,
                server6,
                21,
                107,
                501 + no.len() as u32,
                PSH_ACK,
                b"EPSV\r\n",
            ),
        )
        .unwrap(),
    );
    assert_eq!(q.data, b"PASV\r\n");
    // Its 227 reaches the client as a 229 with the same port (RFC 2428 3).
    // RFC 1123 4.1.2.6: the numbers need no parentheses.
    let s227 = b"227 Passive (198,19,0,2,156,64)\r\n";
    let srv_seq = 501 + no.len() as u32;
    let (seq, ack, d) = seg6(
        &run(
            &mut e,
            6,
            tcp4(SERVER, 21, pool4, ext, srv_seq, 113, PSH_ACK, s227),
        )
        .unwrap(),
    );
    assert_eq!(d, b"229 Entering Extended Passive Mode (|||40000|)\r\n");
    assert_eq!((seq, ack), (srv_seq, 113));
    // The server's next reply moves by the difference; the client's ack moves back.
    let diff = d.len() as i64 - s227.len() as i64;
    assert_ne!(diff, 0);
    let next = srv_seq + s227.len() as u32;
    let (seq, _, _) = seg6(
        &run(
            &mut e,
            7,
            tcp4(SERVER, 21, pool4, ext, next, 113, PSH_ACK, b"150 ok\r\n"),
        )
        .unwrap(),
    );
    assert_eq!(i64::from(seq), i64::from(next) + diff);
    let client_ack = (i64::from(next) + diff) as u32;
    let a = seg4(
        &run(
            &mut e,
            8,
            tcp6(client, 40000, server6, 21, 113, client_ack, ACK, b""),
        )
        .unwrap(),
    );
    assert_eq!(a.ack, next);
    // A retransmitted 227 becomes the same 229.
    let (_, _, d2) = seg6(
        &run(
            &mut e,
            9,
            tcp4(SERVER, 21, pool4, ext, srv_seq, 113, PSH_ACK, s227),
        )
        .unwrap(),
    );
    assert_eq!(d2, d);
    assert_eq!(e.counters().count(Event::AlgFtpRewritten), 3);
}

/// RFC 2428 4: `EPSV ALL` tells the server that only EPSV follows; it asks for no passive
/// port. After the server rejected EPSV, a plain EPSV goes as PASV (RFC 6384), but an
/// `EPSV ALL` must not: it passes as it is.
#[test]
fn rfc2428_4_epsv_all_is_never_sent_as_pasv() {
    let mut e = nat64(true);
    let client: Ipv6Addr = "2001:2::20".parse().unwrap();
    let server6: Ipv6Addr = "2001:2:0:64::c613:2".parse().unwrap();
    let pool4 = Ipv4Addr::new(198, 19, 0, 101).octets();
    let ext = seg4(
        &run(
            &mut e,
            1,
            tcp6(client, 40000, server6, 21, 100, 0, SYN, b""),
        )
        .unwrap(),
    )
    .sport;
    run(
        &mut e,
        2,
        tcp4(SERVER, 21, pool4, ext, 500, 101, SYN | ACK, b""),
    )
    .unwrap();
    let q = seg4(
        &run(
            &mut e,
            3,
            tcp6(client, 40000, server6, 21, 101, 501, PSH_ACK, b"EPSV\r\n"),
        )
        .unwrap(),
    );
    assert_eq!(q.data, b"EPSV\r\n");
    let no = b"500 Unknown command.\r\n";
    run(
        &mut e,
        4,
        tcp4(SERVER, 21, pool4, ext, 501, 107, PSH_ACK, no),
    )
    .unwrap();
    let q = seg4(
        &run(
            &mut e,
            5,
            tcp6(
                client,
                40000,
                server6,
                21,
                107,
                501 + no.len() as u32,
                PSH_ACK,
                b"EPSV ALL\r\n",
            ),
        )
        .unwrap(),
    );
    assert_eq!(q.data, b"EPSV ALL\r\n");
}

#[test]
fn control_sessions_stay_off_the_fast_path_with_the_alg() {
    for alg in [false, true] {
        let mut e = nat44(alg);
        e.set_offload(true);
        e.set_events(1024);
        let ext = open44(&mut e);
        // A data connection (not port 21) is offloaded either way.
        let d = seg4(&run(&mut e, 4, tcp4(CLIENT, 41000, SERVER, 8080, 1, 0, SYN, b"")).unwrap());
        run(
            &mut e,
            5,
            tcp4(SERVER, 8080, POOL, d.sport, 9, 2, SYN | ACK, b""),
        )
        .unwrap();
        let mut evs = Vec::new();
        e.drain_events(&mut evs);
        let installs: Vec<u16> = evs
            .iter()
            .filter_map(|ev| e.offload_op(ev).map(|op| (op, ev)))
            .filter(|(op, _)| op.kind == offload::OffloadKind::Install)
            .map(|(_, ev)| ev.outside_port)
            .collect();
        assert!(installs.contains(&d.sport), "alg={alg}: {installs:?}");
        assert_eq!(installs.contains(&ext), !alg, "alg={alg}: {installs:?}");
    }
}

#[test]
fn rfc2428_229_of_a_forwarded_inside_server_gets_a_mapped_port() {
    let mut e = nat44(true);
    run(&mut e, 1, tcp4(SERVER, 33000, POOL, 21, 10, 0, SYN, b"")).unwrap();
    run(
        &mut e,
        2,
        tcp4(SERVER_IN, 21, SERVER, 33000, 70, 11, SYN | ACK, b""),
    )
    .unwrap();
    let reply = b"229 Entering Extended Passive Mode (|||40000|)\r\n";
    let out = seg4(
        &run(
            &mut e,
            3,
            tcp4(SERVER_IN, 21, SERVER, 33000, 71, 11, PSH_ACK, reply),
        )
        .unwrap(),
    );
    let s = String::from_utf8(out.data).unwrap();
    let port: u16 = s[s.find("(|||").unwrap() + 4..s.find("|)").unwrap()]
        .parse()
        .unwrap();
    let data = seg4(&run(&mut e, 4, tcp4(SERVER, 33001, POOL, port, 1, 0, SYN, b"")).unwrap());
    assert_eq!((data.dst, data.dport), (SERVER_IN, 40000));
    // A 229 reaching an inside client is left alone.
    let ext = open44(&mut e);
    let back = seg4(
        &run(
            &mut e,
            5,
            tcp4(SERVER, 21, POOL, ext, 501, 101, PSH_ACK, reply),
        )
        .unwrap(),
    );
    assert_eq!(back.data, reply);
}

#[test]
fn rfc2663_static_host_port_keeps_its_port_and_gets_its_outside_address() {
    let mut e = Engine::new(EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["198.18.0.0/24".parse().unwrap()],
            pool: vec!["198.19.0.100/32".parse().unwrap()],
            statics: vec![StaticEntry {
                inside: Ipv4Addr::new(198, 18, 0, 10),
                outside: Ipv4Addr::new(198, 19, 0, 10),
            }],
            alg_ftp: true,
            ..Nat44Config::default()
        }),
        seed: 5,
        ..EngineConfig::default()
    })
    .unwrap();
    let host = [198, 18, 0, 10];
    run(&mut e, 1, tcp4(host, 40000, SERVER, 21, 100, 0, SYN, b"")).unwrap();
    let cmd = b"PORT 198,18,0,10,195,80\r\n";
    let out = seg4(
        &run(
            &mut e,
            2,
            tcp4(host, 40000, SERVER, 21, 101, 501, PSH_ACK, cmd),
        )
        .unwrap(),
    );
    assert_eq!(out.src, [198, 19, 0, 10]);
    assert_eq!(parse_port(&out.data), ([198, 19, 0, 10], 50000));
    // The server's connection reaches the host by the static entry.
    let data = seg4(
        &run(
            &mut e,
            3,
            tcp4(SERVER, 20, [198, 19, 0, 10], 50000, 1, 0, SYN, b""),
        )
        .unwrap(),
    );
    assert_eq!((data.dst, data.dport), (host, 50000));
}

#[test]
fn rfc7422_port_blocks_taken_for_expectations_are_logged_and_given_back() {
    use xlat_engine::events::EventKind;
    let mut e = Engine::new(EngineConfig {
        nat44: Some(Nat44Config {
            inside: vec!["198.18.0.0/24".parse().unwrap()],
            pool: vec!["198.19.0.100/32".parse().unwrap()],
            limits: Limits {
                port_block_size: 8,
                ..Limits::default()
            },
            alg_ftp: true,
            ..Nat44Config::default()
        }),
        seed: 5,
        ..EngineConfig::default()
    })
    .unwrap();
    e.set_events(4096);
    let ext = open44(&mut e);
    let _ = ext;
    // Ten PORT commands (a new data port each): more ports than one block of 8 holds.
    let mut seq = 101u32;
    for i in 0..10u16 {
        let cmd = format!("PORT 198,18,0,20,200,{i}\r\n");
        let out = seg4(
            &run(
                &mut e,
                4,
                tcp4(CLIENT, 40000, SERVER, 21, seq, 501, PSH_ACK, cmd.as_bytes()),
            )
            .unwrap(),
        );
        assert!(out.data.starts_with(b"PORT 198,19,0,100,"));
        seq += cmd.len() as u32;
    }
    let count = |e: &mut Engine, k: fn(&EventKind) -> bool| {
        let mut evs = Vec::new();
        e.drain_events(&mut evs);
        evs.iter().filter(|ev| k(&ev.kind)).count()
    };
    let allocated = count(&mut e, |k| matches!(k, EventKind::PortBlockAllocated));
    assert!(
        allocated >= 2,
        "the expectations needed a second block: {allocated}"
    );
    // Unused, they expire with the transitory timeout and give their ports back.
    e.expire(Time::from_secs(400), 100_000);
    let released = count(&mut e, |k| matches!(k, EventKind::PortBlockReleased));
    assert!(released >= 1, "no block given back");
}
