//! End-to-end IPFIX export of NAT events ([logging] ipfix, issue 22), checked by decoders
//! that are not ours: tshark (Wireshark's cflow dissector) decodes what went over the wire,
//! nfcapd (nfdump's collector) receives and stores it and nfdump reads the records back.
//!
//! Topology (see `common`): IN 198.18.0.20 -- GW (xlat, pool 198.19.0.100) -- OUT 198.19.0.2,
//! where nfcapd listens on 198.19.0.2:4739 and tshark captures OUT's link. A UDP flow from
//! IN 198.18.0.20:555 to a UDP echo server at OUT 198.19.0.2:7000 makes a session; the
//! records must name it as the echo server saw it (RFC 8158 natEvent, addresses and ports),
//! and the sequence numbers must count the data records (RFC 7011 3.1). The NAT64 test does
//! the same on the NAT64 topology (`Topo64`: an IPv6-only client, SRV 198.19.0.2 collects),
//! and a third points xlat at a collector it has no route to: translation goes on and the
//! failed sends are counted. Needs root: `#[ignore]`d, run by scripts/test.sh
//! (`--include-ignored`), failing when run as another user or without tshark and nfdump.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::topo64::{GW6, SRV};
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

/// tshark and nfdump are installed (with root, which `require_root` checks).
fn require_ipfix_tools() {
    require_root();
    let missing = missing_tools(&["tshark", "nfcapd", "nfdump"]);
    assert!(
        missing.is_empty(),
        "the IPFIX end-to-end tests need {missing:?}: apt-get install tshark nfdump"
    );
}

/// Starts tshark capturing IPFIX's port on `dev` in `ns` into `dir/ipfix.pcap` and waits
/// until it captures. Returns the process and the file.
fn capture(lab: &mut Lab, ns: &str, dev: &str) -> (ProcId, String) {
    let pcap = lab.dir.join("ipfix.pcap").display().to_string();
    let filter = format!("udp port {IPFIX_PORT}");
    let cap = lab.spawn(
        ns,
        "tshark-capture",
        &["tshark", "-n", "-i", dev, "-f", &filter, "-w", &pcap],
    );
    wait_for(
        "tshark to capture",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || lab.proc(cap).stderr_text().contains("Capturing on"),
    );
    (cap, pcap)
}

/// The address and port a `udp_echo` server saw ("peer=A port=P").
fn echo_peer(r: &Run) -> (String, u16) {
    r.stdout
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            let a = w.next()?.strip_prefix("peer=")?.to_string();
            let p: u16 = w.next()?.strip_prefix("port=")?.parse().ok()?;
            Some((a, p))
        })
        .unwrap_or_else(|| panic!("no answer from the echo server: {}\n{}", r.stdout, r.stderr))
}

/// Waits until the log thread has sent at least `records` IPFIX records, none failed; then
/// until the capture at `pcap` holds every message sent, and stops the capture. Returns
/// the stats.
fn wait_sent(lab: &mut Lab, ns: &str, cap: ProcId, pcap: &str, records: u64) -> Value {
    let mut st = lab.stats();
    let ok = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        st = lab.stats();
        counter(&st, "log", "ipfix_records_sent") >= records
    });
    assert!(ok, "fewer than {records} IPFIX records sent: {st}");
    assert_eq!(counter(&st, "log", "ipfix_send_errors"), 0, "{st}");
    let messages = counter(&st, "log", "ipfix_messages_sent");
    let ok = poll(Duration::from_secs(10), Duration::from_millis(200), || {
        let r = lab.sh(
            ns,
            10,
            &format!("tshark -n -r {pcap} -Y cflow 2>/dev/null | wc -l"),
        );
        r.stdout.trim().parse::<u64>().unwrap_or(0) >= messages
    });
    assert!(ok, "the capture has fewer than {messages} IPFIX messages");
    lab.stop(cap);
    st
}

/// tshark's decoding of the capture: checks every message's header (version 10, observation
/// domain `domain`, sequence numbers counting the data records before it, RFC 7011 3.1, and
/// Wireshark's own sequence analysis silent) against the stats `st`, and returns the records.
fn decode(lab: &Lab, ns: &str, pcap: &str, domain: &str, st: &Value) -> Vec<Value> {
    let r = lab.sh(
        ns,
        60,
        &format!("tshark -n -r {pcap} -d udp.port=={IPFIX_PORT},cflow -T json --no-duplicate-keys"),
    );
    assert!(r.ok(), "tshark -r failed: {}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).expect("tshark JSON");
    let packets = doc.as_array().expect("a list of packets");
    let messages = counter(st, "log", "ipfix_messages_sent");
    assert_eq!(packets.len() as u64, messages, "one datagram a message");
    let mut expect_seq = 0u64;
    let mut records = Vec::new();
    for p in packets {
        let cflow = &p["_source"]["layers"]["cflow"];
        assert_eq!(field(cflow, "cflow.version"), "10", "{cflow}");
        assert_eq!(field(cflow, "cflow.od_id"), domain, "{cflow}");
        let seq: u64 = field(cflow, "cflow.sequence").parse().expect("sequence");
        assert_eq!(seq, expect_seq, "sequence number: {cflow}");
        let mut here = Vec::new();
        objects_with(cflow, "cflow.nat_event", &mut here);
        expect_seq = seq + here.len() as u64;
        records.extend(here.into_iter().cloned());
    }
    assert_eq!(
        expect_seq,
        counter(st, "log", "ipfix_records_sent"),
        "records decoded = records sent"
    );
    let r = lab.sh(
        ns,
        60,
        &format!(
            "tshark -n -r {pcap} -d udp.port=={IPFIX_PORT},cflow -Y cflow.unexpected_sequence_number"
        ),
    );
    assert!(
        r.ok() && r.stdout.trim().is_empty(),
        "tshark flags sequence numbers: {}\n{}",
        r.stdout,
        r.stderr
    );
    eprintln!(
        "tshark decoded {} records:\n{}",
        records.len(),
        show(&records)
    );
    records
}

fn show(records: &[Value]) -> String {
    records
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first record with natEvent `ev` for which `also` holds.
fn record<'a>(records: &'a [Value], ev: &str, also: impl Fn(&Value) -> bool) -> &'a Value {
    records
        .iter()
        .find(|r| field(r, "cflow.nat_event") == ev && also(r))
        .unwrap_or_else(|| panic!("no record with natEvent {ev}:\n{}", show(records)))
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat_events_decode_with_tshark_and_reach_nfcapd() {
    require_ipfix_tools();
    let mut t = Topo::new(Opts::default());
    let out = t.ns_out.clone();
    let inn = t.ns_in.clone();
    let flows = t.dir.join("nfcapd");
    std::fs::create_dir_all(&flows).unwrap();
    let flows_s = flows.display().to_string();

    // The wire, as tshark sees it (capture only; decoded after the run), and the collector.
    let dev = t.out_dev.clone();
    let (cap, pcap) = capture(&mut t, &out, &dev);
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
    let (peer, peer_port) = echo_peer(&r);
    assert_eq!(peer, POOL_ADDR);
    assert!(peer_port >= 1024, "outside port {peer_port}");
    // And its end: the operator clears it.
    t.xlat_cmd(&["clear", "sessions", "--all"]).check();

    // Session, mapping, binding: created and deleted. nfcapd writes its file when it stops.
    let st = wait_sent(&mut t, &out, cap, &pcap, 6);
    t.stop(col);
    let records = decode(&t, &out, &pcap, "4242", &st);

    // The session's create (natEvent 4) and delete (5) name it as the echo server saw it.
    for ev in ["4", "5"] {
        let rec = record(&records, ev, |r| field(r, "cflow.protocol") == "17");
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
        let rec = record(&records, ev, |r| field(r, "cflow.srcaddr") == IN_ADDR);
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

/// The wall clock now, RFC 3339 UTC with microseconds (what `xlat lookup --at` takes).
fn now_rfc3339() -> String {
    let r = run_host(5, &["date", "-u", "+%Y-%m-%dT%H:%M:%S.%6NZ"]);
    assert!(r.ok(), "date: {}", r.stderr);
    r.stdout.trim().to_string()
}

/// Starts a collector in `ns` that stores every IPFIX datagram as it came in `file` (socat
/// appending: RFC 5655's file of messages).
fn ipfix_store(t: &mut Topo, ns: &str, file: &str) -> ProcId {
    let col = t.spawn(
        ns,
        "ipfix-store",
        &[
            "socat",
            "-u",
            &format!("UDP4-RECV:{IPFIX_PORT},bind={OUT_ADDR}"),
            &format!("OPEN:{file},creat,append"),
        ],
    );
    t.wait_listening_on(ns, "udp", OUT_ADDR, IPFIX_PORT, Some(col));
    col
}

/// `xlat lookup --outside OUTSIDE --at AT --proto PROTO --log FILE`.
fn lookup(outside: &str, at: &str, proto: &str, file: &str) -> Run {
    run_host(
        15,
        &[
            xlat_bin(),
            "lookup",
            "--outside",
            outside,
            "--at",
            at,
            "--proto",
            proto,
            "--log",
            file,
        ],
    )
}

/// Polls `xlat lookup` (the records reach the file a moment after the log thread sends
/// them) until it names `want` in a record that ended; returns its answer.
fn lookup_until(outside: &str, at: &str, proto: &str, file: &str, want: &str) -> Run {
    let mut r = lookup(outside, at, proto, file);
    let ok = poll(Duration::from_secs(10), Duration::from_millis(200), || {
        r = lookup(outside, at, proto, file);
        r.ok() && r.stdout.contains(want) && r.stdout.contains("until 20")
    });
    assert!(
        ok,
        "xlat lookup {outside} at {at}: no ended {want}: {}\n{}",
        r.stdout, r.stderr
    );
    r
}

/// The operator's question answered from stored IPFIX: a collector keeps every datagram as
/// it came, and `xlat lookup --log FILE` names the subscriber that held the outside endpoint
/// at a time -- a UDP flow and a curl download through the gateway -- and nobody before.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn xlat_lookup_answers_from_stored_ipfix() {
    require_ipfix_tools();
    let mut t = Topo::new(Opts::default());
    let (out, inn) = (t.ns_out.clone(), t.ns_in.clone());
    let store = t.dir.join("ipfix.bin").display().to_string();
    ipfix_store(&mut t, &out, &store);
    let cfg = format!(
        "{}\n[logging]\nipfix = [\"{OUT_ADDR}:{IPFIX_PORT}\"]\nevents = \"sessions\"\n",
        t.default_config()
    );
    t.start_xlat(&cfg);
    let before = now_rfc3339();
    t.udp_echo(&out, OUT_ADDR, 7000);
    let r = t.sh(
        &inn,
        20,
        &format!("echo lookup-hi | socat -T 5 -t 3 - UDP4:{OUT_ADDR}:7000,bind={IN_ADDR}:556"),
    );
    let (_, peer_port) = echo_peer(&r);
    // A TCP download (curl) through the gateway; its session's outside port from the table.
    let (_, blob) = t.serve_random_file(&out, OUT_ADDR, 8080, 200_000);
    let (_, got) = t.curl(&inn, &format!("http://{OUT_ADDR}:8080/blob.bin"));
    assert_same_file(&blob, &got);
    let during = now_rfc3339();
    let rows = t.sessions();
    let tcp = rows
        .iter()
        .find(|s| s["proto"] == "tcp" && endpoint(s, "remote") == format!("{OUT_ADDR}:8080"))
        .unwrap_or_else(|| panic!("no TCP session to the server: {rows:?}"));
    let tcp_outside = endpoint(tcp, "outside");
    let tcp_inside_port = tcp["inside_port"].as_u64().unwrap();
    t.xlat_cmd(&["clear", "sessions", "--all"]).check();

    let udp_outside = format!("{POOL_ADDR}:{peer_port}");
    let r = lookup_until(&udp_outside, &during, "udp", &store, "NAT44_SESSION");
    // The session and its mapping, both naming IN:556.
    for what in ["NAT44_SESSION", "NAT44_BIB"] {
        let line = r
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(what))
            .unwrap_or_else(|| panic!("no {what} in: {}", r.stdout));
        assert!(
            line.contains(&format!(
                "inside={IN_ADDR} inside_port=556 outside={POOL_ADDR} outside_port={peer_port}"
            )),
            "{line}"
        );
    }
    let r = lookup_until(&tcp_outside, &during, "tcp", &store, "NAT44_SESSION");
    assert!(
        r.stdout.contains(&format!(
            "NAT44_SESSION proto=tcp inside={IN_ADDR} inside_port={tcp_inside_port} outside={tcp_outside_addr} outside_port={tcp_outside_port} remote={OUT_ADDR} remote_port=8080",
            tcp_outside_addr = POOL_ADDR,
            tcp_outside_port = tcp["outside_port"]
        )),
        "{}",
        r.stdout
    );
    // Before the flows nobody held them: exit status 1 and the files read, named.
    let r = lookup(&udp_outside, &before, "udp", &store);
    assert!(!r.ok(), "a holder before the flow: {}", r.stdout);
    assert!(
        r.stderr.contains("no session, mapping or port block held")
            && r.stderr.contains("IPFIX messages"),
        "{}",
        r.stderr
    );
}

/// A collector that disappears: translation goes on (every ping answered), and when it is
/// back the template refresh (RFC 7011 10.3.6, `ipfix_template_refresh = 1`) lets it decode
/// what comes after -- `xlat lookup` over the new collector's file alone names the next
/// session.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn a_collector_that_disappears_and_returns_decodes_again() {
    require_ipfix_tools();
    let mut t = Topo::new(Opts::default());
    let (out, inn) = (t.ns_out.clone(), t.ns_in.clone());
    let first = t.dir.join("ipfix-1.bin").display().to_string();
    let col = ipfix_store(&mut t, &out, &first);
    let cfg = format!(
        "{}\n[logging]\nipfix = [\"{OUT_ADDR}:{IPFIX_PORT}\"]\nipfix_template_refresh = 1\nevents = \"sessions\"\n",
        t.default_config()
    );
    t.start_xlat(&cfg);
    let r = t.ping_all(&inn, 2, &[], OUT_ADDR);
    assert_all_replies(&r, 2);
    t.stop(col);
    // Gone: the gateway goes on translating and logging into the void.
    let sent = counter(&t.stats(), "log", "ipfix_messages_sent");
    t.udp_echo(&out, OUT_ADDR, 7000);
    for port in [600u16, 601] {
        let r = t.sh(
            &inn,
            20,
            &format!("echo gone | socat -T 5 -t 3 - UDP4:{OUT_ADDR}:7000,bind={IN_ADDR}:{port}"),
        );
        echo_peer(&r);
    }
    let ok = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        counter(&t.stats(), "log", "ipfix_messages_sent") > sent
    });
    assert!(
        ok,
        "nothing sent while the collector was gone: {}",
        t.stats()
    );
    // Back, as a new process with an empty file: it has no templates until the refresh.
    let second = t.dir.join("ipfix-2.bin").display().to_string();
    ipfix_store(&mut t, &out, &second);
    std::thread::sleep(Duration::from_millis(1200));
    let r = t.sh(
        &inn,
        20,
        &format!("echo back | socat -T 5 -t 3 - UDP4:{OUT_ADDR}:7000,bind={IN_ADDR}:602"),
    );
    let (_, peer_port) = echo_peer(&r);
    let during = now_rfc3339();
    t.xlat_cmd(&["clear", "sessions", "--all"]).check();
    let r = lookup_until(
        &format!("{POOL_ADDR}:{peer_port}"),
        &during,
        "udp",
        &second,
        "NAT44_SESSION",
    );
    assert!(
        r.stdout
            .contains(&format!("inside={IN_ADDR} inside_port=602 ")),
        "{}",
        r.stdout
    );
}

/// NAT64: the session and mapping records name the IPv6 host (sourceIPv6Address) and the
/// IPv4 remote after translation (postNATDestinationIPv4Address and port).
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat64_events_name_the_ipv6_host() {
    require_ipfix_tools();
    const CLI: &str = "2001:2:0:1::10";
    const PREF64: &str = "2001:2:0:64::/96";
    const SRV_V6: &str = "2001:2:0:64::c613:2";
    const POOL4: &str = "198.19.0.101";
    let fast = std::env::var_os("XLAT_E2E_FAST_PATH").is_some();
    let mut lab = Topo64::new('p', CLI, fast);
    let (cli, srv, gw) = (lab.cli.clone(), lab.srv.clone(), lab.gw.clone());
    lab.ip(&cli, &["-6", "route", "add", "default", "via", GW6]);
    let dev = lab.srv_dev.clone();
    let (cap, pcap) = capture(&mut lab, &srv, &dev);
    // A sink for the messages (nothing answers "port unreachable").
    let port = IPFIX_PORT.to_string();
    let sink = lab.spawn(
        &srv,
        "ipfix-sink",
        &[
            "socat",
            "-u",
            &format!("UDP4-RECV:{port},bind={SRV}"),
            "/dev/null",
        ],
    );
    lab.wait_listening_on(&srv, "udp", SRV, IPFIX_PORT, Some(sink));

    let mut cfg = format!(
        "[tun]\nname = \"{tun}\"\nmtu = 1500\nauto_routes = true\n\n[nat64]\nprefix = \"{PREF64}\"\npool4 = [\"{POOL4}/32\"]\nports = \"1024-65535\"\n\n[control]\nsocket = \"{sock}\"\n\n[logging]\nipfix = [\"{SRV}:{IPFIX_PORT}\"]\n",
        tun = lab.tun,
        sock = lab.socket.display(),
    );
    if fast || workers_wanted().is_some() {
        cfg.push_str("\n[dataplane]\n");
    }
    if fast {
        cfg.push_str(&format!(
            "fast_path = \"xdp\"\ninterfaces = [\"{}\", \"{}\"]\n",
            lab.gw_cli_dev, lab.gw_srv_dev
        ));
    }
    cfg.push_str(&workers_line());
    let (tun, path) = (lab.tun.clone(), lab.dir.join("xlat.toml"));
    let k = lab.spawn_xlat(&gw, "xlat", &["run"], &path, &cfg);
    lab.wait_xlat_ready(
        k,
        &gw,
        &tun,
        &[&["-6", "route", "show"], &["-4", "route", "show"]],
        &cfg,
    );

    lab.udp_echo(&srv, SRV, 7000);
    let r = lab.sh(
        &cli,
        20,
        &format!("echo ipfix64-hi | socat -T 5 -t 3 - UDP6:[{SRV_V6}]:7000,bind=[{CLI}]:555"),
    );
    let (peer, peer_port) = echo_peer(&r);
    assert_eq!(peer, POOL4);

    // Session and mapping made (binding events too, at least 2 more).
    let st = wait_sent(&mut lab, &srv, cap, &pcap, 2);
    let records = decode(&lab, &srv, &pcap, "1", &st);
    // natEvent 6: NAT64 session create.
    let rec = record(&records, "6", |_| true);
    let want = [
        ("cflow.srcaddrv6", CLI.to_string()),
        ("cflow.srcport", "555".to_string()),
        ("cflow.post_natsource_ipv4_address", POOL4.to_string()),
        (
            "cflow.post_naptsource_transport_port",
            peer_port.to_string(),
        ),
        ("cflow.post_natdestination_ipv4_address", SRV.to_string()),
        (
            "cflow.post_naptdestination_transport_port",
            "7000".to_string(),
        ),
        ("cflow.protocol", "17".to_string()),
    ];
    for (k, v) in &want {
        assert_eq!(&field(rec, k), v, "{k}: {rec}");
    }
    // natEvent 10: NAT64 BIB create, the same inside and outside endpoints.
    let rec = record(&records, "10", |_| true);
    for (k, v) in &want[..4] {
        assert_eq!(&field(rec, k), v, "{k}: {rec}");
    }
}

/// A collector xlat has no route to: translation goes on, the failed sends are counted
/// (`ipfix_send_errors`), nothing counts as sent.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn an_unreachable_collector_is_counted_and_translation_goes_on() {
    require_root();
    let mut t = Topo::new(Opts::default());
    // 203.0.113.50 (TEST-NET-3): GW has no route there.
    let cfg = format!(
        "{}\n[logging]\nipfix = [\"203.0.113.50:{IPFIX_PORT}\"]\n",
        t.default_config()
    );
    t.start_xlat(&cfg);
    let inn = t.ns_in.clone();
    let r = t.ping_all(&inn, 3, &[], OUT_ADDR);
    assert_all_replies(&r, 3);
    let mut st = t.stats();
    let ok = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        st = t.stats();
        counter(&st, "log", "ipfix_send_errors") > 0
    });
    assert!(ok, "no failed IPFIX send counted: {st}");
    assert_eq!(counter(&st, "log", "ipfix_messages_sent"), 0, "{st}");
    assert_eq!(counter(&st, "log", "ipfix_records_sent"), 0, "{st}");
    // And `xlat show stats --explain` tells the operator what it means.
    let r = t.xlat_cmd(&["show", "stats", "--explain"]).check();
    assert!(
        r.stdout.contains("Event log") && r.stdout.contains("ipfix_send_errors"),
        "{}",
        r.stdout
    );
}

/// The default NAPT configuration with the port-block keys `blocks` and IPFIX logging of
/// port-block events to the collector address.
fn port_block_config(t: &Topo, blocks: &str) -> String {
    let cfg = t
        .default_config()
        .replace("mode = \"napt\"\n", &format!("mode = \"napt\"\n{blocks}"));
    assert!(cfg.contains(blocks), "{cfg}");
    format!("{cfg}\n[logging]\nipfix = [\"{OUT_ADDR}:{IPFIX_PORT}\"]\nevents = \"port-blocks\"\n")
}

/// A UDP echo server outside, and one echoed datagram from each inside port of `srcs`:
/// the outside port each flow was seen from.
fn echo_flows(t: &mut Topo, srcs: impl IntoIterator<Item = u16>) -> Vec<u16> {
    let (out, inn) = (t.ns_out.clone(), t.ns_in.clone());
    t.udp_echo(&out, OUT_ADDR, 7000);
    let mut seen = Vec::new();
    for src in srcs {
        let r = t.sh(
            &inn,
            20,
            &format!(
                "echo pba-{src} | socat -T 5 -t 3 - UDP4:{OUT_ADDR}:7000,bind={IN_ADDR}:{src}"
            ),
        );
        let (peer, peer_port) = echo_peer(&r);
        assert_eq!(peer, POOL_ADDR);
        seen.push(peer_port);
    }
    seen
}

/// Port-block allocation (`port_block_size`, RFC 7422) logged per block (`events =
/// "port-blocks"`): a UDP flow gives its host a block (natEvent 16) holding the port the
/// echo server saw, clearing the sessions frees it (natEvent 17), and no per-session or
/// per-mapping record is sent.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn port_blocks_are_logged_once_a_block() {
    require_ipfix_tools();
    let mut t = Topo::new(Opts::default());
    let out = t.ns_out.clone();
    let dev = t.out_dev.clone();
    let (cap, pcap) = capture(&mut t, &out, &dev);
    let flows = t.dir.join("nfcapd");
    std::fs::create_dir_all(&flows).unwrap();
    let flows_s = flows.display().to_string();
    let port = IPFIX_PORT.to_string();
    let col = t.spawn(
        &out,
        "nfcapd",
        &["nfcapd", "-w", &flows_s, "-b", OUT_ADDR, "-p", &port],
    );
    t.wait_listening_on(&out, "udp", OUT_ADDR, IPFIX_PORT, Some(col));
    t.start_xlat(&port_block_config(&t, "port_block_size = 64\n"));
    // Two flows from one host: one block holds both.
    let seen = echo_flows(&mut t, [555, 556]);
    t.xlat_cmd(&["clear", "sessions", "--all"]).check();

    let st = wait_sent(&mut t, &out, cap, &pcap, 2);
    t.stop(col);
    let records = decode(&t, &out, &pcap, "1", &st);
    let events: Vec<String> = records
        .iter()
        .map(|r| field(r, "cflow.nat_event"))
        .collect();
    assert!(
        events.iter().all(|e| e == "16" || e == "17"),
        "only port-block records: {events:?}\n{}",
        show(&records)
    );
    assert_eq!(
        events.len(),
        2,
        "one block given, one freed:\n{}",
        show(&records)
    );
    for ev in ["16", "17"] {
        let rec = record(&records, ev, |r| field(r, "cflow.protocol") == "17");
        assert_eq!(field(rec, "cflow.srcaddr"), IN_ADDR, "{rec}");
        assert_eq!(
            field(rec, "cflow.post_natsource_ipv4_address"),
            POOL_ADDR,
            "{rec}"
        );
        let num = |k: &str| -> u16 {
            field(rec, k)
                .parse()
                .unwrap_or_else(|_| panic!("{k} in {rec}"))
        };
        let (first, last) = (num("cflow.port_range_start"), num("cflow.port_range_end"));
        assert_eq!(num("cflow.port_range_num_ports"), 64, "{rec}");
        assert_eq!(last - first, 63, "{rec}");
        assert!(
            seen.iter().all(|p| (first..=last).contains(p)),
            "ports {seen:?} outside the block {first}-{last}: {rec}"
        );
    }

    // nfdump reads the block back.
    let r = t.sh(&out, 30, &format!("nfdump -R {flows_s} -o json"));
    assert!(r.ok(), "nfdump failed: {}\n{}", r.stdout, r.stderr);
    eprintln!("nfdump -o json:\n{}", r.stdout);
    let stored: Value = serde_json::from_str(&r.stdout).expect("nfdump JSON");
    let stored = stored.as_array().expect("a list of records");
    let mut ids: Vec<String> = stored.iter().map(|r| field(r, "nat_event_id")).collect();
    ids.sort();
    assert_eq!(ids, ["16", "17"], "{}", r.stdout);
}

/// A host at its port-block limit (`port_blocks_per_host = 1`, blocks of 8): eight UDP flows
/// fill its one block, the ninth gets no mapping -- dropped and counted (`port_quota`) and
/// logged as an RFC 8158 quota-exceeded record (natEvent 13, "maximum entries per user",
/// maxEntriesPerUser 8) that tshark decodes.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn a_host_at_its_port_block_limit_is_refused_and_logged() {
    require_ipfix_tools();
    let mut t = Topo::new(Opts::default());
    let out = t.ns_out.clone();
    let inn = t.ns_in.clone();
    let dev = t.out_dev.clone();
    let (cap, pcap) = capture(&mut t, &out, &dev);
    let blocks = "port_block_size = 8\nport_blocks_per_host = 1\n";
    t.start_xlat(&port_block_config(&t, blocks));
    let seen = echo_flows(&mut t, 555..563);
    let block: std::collections::BTreeSet<u16> = seen.iter().map(|p| p / 8).collect();
    assert_eq!(block.len(), 1, "eight flows in one block of 8: {seen:?}");
    // The ninth flow: no port left for this host.
    let r = t.sh(
        &inn,
        20,
        &format!("echo pba-over | socat -T 2 -t 2 - UDP4:{OUT_ADDR}:7000,bind={IN_ADDR}:563"),
    );
    assert!(
        !r.stdout.contains("pba-over"),
        "the ninth flow got through: {}",
        r.stdout
    );
    let st = t.stats();
    assert!(
        counter(&st, "drops", "port_quota") >= 1,
        "port_quota counted: {st}"
    );

    // One block given (16), then the refusal (13), before the sessions end.
    let st = wait_sent(&mut t, &out, cap, &pcap, 2);
    let records = decode(&t, &out, &pcap, "1", &st);
    let rec = record(&records, "13", |_| true);
    assert_eq!(field(rec, "cflow.srcaddr"), IN_ADDR, "{rec}");
    assert_eq!(field(rec, "cflow.nat_quota_exceeded_event"), "3", "{rec}");
    assert_eq!(field(rec, "cflow.max_entries_per_user"), "8", "{rec}");
}
