//! End-to-end IPFIX export of NAT events ([logging] ipfix, issue 22), checked by decoders
//! that are not ours: tshark (Wireshark's cflow dissector) decodes what went over the wire,
//! nfcapd (nfdump's collector) receives and stores it and nfdump reads the records back.
//!
//! Topology (see `common`): IN 198.18.0.20 -- GW (xlat, pool 198.19.0.100) -- OUT 198.19.0.2,
//! where nfcapd listens on 198.19.0.2:4739 and tshark captures OUT's link. A UDP flow from
//! IN 198.18.0.20:555 to a UDP echo server at OUT 198.19.0.2:7000 makes a session; the
//! records must name it as the echo server saw it (RFC 8158 natEvent, addresses and ports),
//! and the sequence numbers must count the data records (RFC 7011 3.1). Needs root:
//! `#[ignore]`d, run by scripts/test.sh (`--include-ignored`), failing when run as another
//! user or without tshark and nfdump.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const IPFIX_PORT: u16 = 4739;

/// Every object under `v` that has `key` (the IPFIX records in tshark's JSON: one object
/// per record, holding its `cflow.*` fields).
fn objects_with<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            if m.contains_key(key) {
                out.push(v);
            }
            for x in m.values() {
                objects_with(x, key, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                objects_with(x, key, out);
            }
        }
        _ => {}
    }
}

/// A record field as text ("" when absent).
fn field(r: &Value, k: &str) -> String {
    match &r[k] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat_events_decode_with_tshark_and_reach_nfcapd() {
    require_root();
    let missing = missing_tools(&["tshark", "nfcapd", "nfdump"]);
    assert!(
        missing.is_empty(),
        "the IPFIX end-to-end test needs {missing:?}: apt-get install tshark nfdump"
    );
    let mut t = Topo::new(Opts::default());
    let out = t.ns_out.clone();
    let inn = t.ns_in.clone();
    let pcap = t.dir.join("ipfix.pcap");
    let flows = t.dir.join("nfcapd");
    std::fs::create_dir_all(&flows).unwrap();
    let pcap_s = pcap.display().to_string();
    let flows_s = flows.display().to_string();

    // The wire, as tshark sees it (capture only; decoded after the run).
    let dev = t.out_dev.clone();
    let cap = t.spawn(
        &out,
        "tshark-capture",
        &[
            "tshark",
            "-n",
            "-i",
            &dev,
            "-f",
            &format!("udp port {IPFIX_PORT}"),
            "-w",
            &pcap_s,
        ],
    );
    wait_for(
        "tshark to capture",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || t.proc(cap).stderr_text().contains("Capturing on"),
    );
    // The collector.
    let port = IPFIX_PORT.to_string();
    let col = t.spawn(
        &out,
        "nfcapd",
        &["nfcapd", "-w", &flows_s, "-b", OUT_ADDR, "-p", &port],
    );
    t.wait_listening_on(&out, "udp", OUT_ADDR, IPFIX_PORT, Some(col));

    let cfg = format!(
        "{}\n[logging]\nipfix = [\"{OUT_ADDR}:{IPFIX_PORT}\"]\nipfix_domain_id = 4242\nevents = \"sessions\"\n",
        t.default_config()
    );
    t.start_xlat(&cfg);

    // A UDP session: IN:555 -> OUT:7000. Port 555 is outside the pool's ports
    // (1024-65535), so the outside port differs from the inside one; the echo server says
    // which it saw.
    t.udp_echo(&out, OUT_ADDR, 7000);
    let r = t.sh(
        &inn,
        20,
        &format!("echo ipfix-hi | socat -T 5 -t 3 - UDP4:{OUT_ADDR}:7000,bind={IN_ADDR}:555"),
    );
    let (peer, peer_port) = r
        .stdout
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            let a = w.next()?.strip_prefix("peer=")?.to_string();
            let p: u16 = w.next()?.strip_prefix("port=")?.parse().ok()?;
            Some((a, p))
        })
        .unwrap_or_else(|| panic!("no answer from the echo server: {}\n{}", r.stdout, r.stderr));
    assert_eq!(peer, POOL_ADDR);
    assert!(peer_port >= 1024, "outside port {peer_port}");
    // And its end: the operator clears it.
    t.xlat_cmd(&["clear", "sessions", "--all"]).check();

    // Every event is sent: the log thread counts the records it handed to the socket.
    let mut st = t.stats();
    let sent = |st: &Value| counter(st, "log", "ipfix_records_sent");
    let ok = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        st = t.stats();
        // Session, mapping, binding: created and deleted.
        sent(&st) >= 6
    });
    assert!(ok, "fewer than 6 IPFIX records sent: {st}");
    assert_eq!(counter(&st, "log", "ipfix_send_errors"), 0, "{st}");
    let messages = counter(&st, "log", "ipfix_messages_sent");
    // Let the last datagrams reach the capture and the collector, then stop both (nfcapd
    // writes its file when it stops).
    let ok = poll(Duration::from_secs(10), Duration::from_millis(200), || {
        let r = t.sh(
            &out,
            10,
            &format!("tshark -n -r {pcap_s} -Y cflow 2>/dev/null | wc -l"),
        );
        r.stdout.trim().parse::<u64>().unwrap_or(0) >= messages
    });
    assert!(ok, "the capture has fewer than {messages} IPFIX messages");
    t.stop(cap);
    t.stop(col);

    // tshark decodes the messages: header, templates, records.
    let r = t.sh(
        &out,
        60,
        &format!(
            "tshark -n -r {pcap_s} -d udp.port=={IPFIX_PORT},cflow -T json --no-duplicate-keys"
        ),
    );
    assert!(r.ok(), "tshark -r failed: {}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).expect("tshark JSON");
    let packets = doc.as_array().expect("a list of packets");
    assert_eq!(packets.len() as u64, messages, "one datagram a message");
    let mut expect_seq: Option<u64> = None;
    let mut records = Vec::new();
    for p in packets {
        let cflow = &p["_source"]["layers"]["cflow"];
        assert_eq!(field(cflow, "cflow.version"), "10", "{cflow}");
        assert_eq!(field(cflow, "cflow.od_id"), "4242", "{cflow}");
        let seq: u64 = field(cflow, "cflow.sequence").parse().expect("sequence");
        // RFC 7011 3.1: the data records sent before this message.
        if let Some(e) = expect_seq {
            assert_eq!(seq, e, "sequence number: {cflow}");
        } else {
            assert_eq!(seq, 0, "the first message's sequence number");
        }
        let mut here = Vec::new();
        objects_with(cflow, "cflow.nat_event", &mut here);
        expect_seq = Some(seq + here.len() as u64);
        records.extend(here.into_iter().cloned());
    }
    assert_eq!(
        expect_seq,
        Some(sent(&st)),
        "records decoded = records sent"
    );
    let show = || {
        records
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    eprintln!("tshark decoded {} records:\n{}", records.len(), show());
    // The session's create (natEvent 4) and delete (5) name it as the echo server saw it.
    for ev in ["4", "5"] {
        let rec = records
            .iter()
            .find(|r| field(r, "cflow.nat_event") == ev && field(r, "cflow.protocol") == "17")
            .unwrap_or_else(|| panic!("no UDP record with natEvent {ev}:\n{}", show()));
        assert_eq!(field(rec, "cflow.srcaddr"), IN_ADDR, "{rec}");
        assert_eq!(field(rec, "cflow.srcport"), "555", "{rec}");
        assert_eq!(
            field(rec, "cflow.post_natsource_ipv4_address"),
            POOL_ADDR,
            "{rec}"
        );
        assert_eq!(
            field(rec, "cflow.post_naptsource_transport_port"),
            peer_port.to_string(),
            "{rec}"
        );
        assert_eq!(field(rec, "cflow.dstaddr"), OUT_ADDR, "{rec}");
        assert_eq!(field(rec, "cflow.dstport"), "7000", "{rec}");
        // dateTimeMilliseconds: the wall clock's time of the event, not 1970's.
        let at = field(rec, "cflow.observation_time_milliseconds");
        assert!(at.contains(" 20") && !at.contains("1970"), "{rec}");
    }
    // The mapping (BIB create 8 / delete 9) and the address binding (14 / 15).
    for ev in ["8", "9", "14", "15"] {
        let rec = records
            .iter()
            .find(|r| field(r, "cflow.nat_event") == ev && field(r, "cflow.srcaddr") == IN_ADDR)
            .unwrap_or_else(|| panic!("no record with natEvent {ev}:\n{}", show()));
        assert_eq!(
            field(rec, "cflow.post_natsource_ipv4_address"),
            POOL_ADDR,
            "{rec}"
        );
    }

    // nfcapd stored them; nfdump reads the NAT fields back.
    let r = t.sh(&out, 30, &format!("nfdump -R {flows_s} -o json"));
    assert!(r.ok(), "nfdump failed: {}\n{}", r.stdout, r.stderr);
    eprintln!("nfdump -o json:\n{}", r.stdout);
    let stored: Value = serde_json::from_str(&r.stdout).expect("nfdump JSON");
    let stored = stored.as_array().expect("a list of records");
    let create = stored
        .iter()
        .find(|r| field(r, "nat_event_id") == "4")
        .unwrap_or_else(|| panic!("nfdump shows no NAT44 session create: {}", r.stdout));
    let want = [
        ("src4_addr", IN_ADDR.to_string()),
        ("src_port", "555".to_string()),
        ("src4_xlt_ip", POOL_ADDR.to_string()),
        ("src_xlt_port", peer_port.to_string()),
        ("dst4_addr", OUT_ADDR.to_string()),
        ("dst_port", "7000".to_string()),
        ("proto", "17".to_string()),
    ];
    for (k, v) in want {
        assert_eq!(field(create, k), v, "nfdump's {k}: {create}");
    }
    for ev in ["5", "8", "9", "14", "15"] {
        assert!(
            stored.iter().any(|r| field(r, "nat_event_id") == ev),
            "nfdump shows no natEvent {ev}: {}",
            r.stdout
        );
    }
    // The operator's question, "who had POOL:PORT", as an nfdump filter: the session and
    // mapping records of that outside endpoint, all naming IN:555.
    let r = t.sh(
        &out,
        30,
        &format!("nfdump -R {flows_s} -o json 'src nip {POOL_ADDR} and src nport {peer_port}'"),
    );
    assert!(r.ok(), "nfdump filter failed: {}\n{}", r.stdout, r.stderr);
    let found: Value = serde_json::from_str(&r.stdout).expect("nfdump JSON");
    let found = found.as_array().expect("a list of records");
    let mut events: Vec<String> = found.iter().map(|r| field(r, "nat_event_id")).collect();
    events.sort();
    assert_eq!(events, ["4", "5", "8", "9"], "{}", r.stdout);
    assert!(
        found
            .iter()
            .all(|r| field(r, "src4_addr") == IN_ADDR && field(r, "src_port") == "555"),
        "{}",
        r.stdout
    );
}
