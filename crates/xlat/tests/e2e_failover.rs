//! End-to-end test of stateful failover (`[sync]`, docs/FAILOVER.md): two xlat NAT44
//! gateways, A and B, between one inside and one outside LAN, with keepalived (VRRP) in both
//! owning the inside gateway address and the address the outside routes the pool to; A is
//! master. B holds A's sessions through session sync. A TCP download and a UDP stream run
//! through A; then A dies -- xlat and keepalived SIGKILLed, its links down, as a box that
//! loses power -- and keepalived makes B master, whose notify hook runs `xlat sync role
//! active`. The download must complete intact and the UDP stream go on from the same
//! outside address and port: no established session lost.
//!
//! ```text
//!  CLI 198.18.0.7 ---[SWI bridge]--- A 198.18.0.2 / B 198.18.0.3   (VIP 198.18.0.1)
//!                                    A 198.18.1.2 / B 198.18.1.3   (VIP 198.18.1.1)
//!  SRV 198.18.1.10 --[SWO bridge]---/          pool 198.19.0.100 routed via 198.18.1.1
//! ```
//! Needs root, keepalived, curl, python3 and promtool: `#[ignore]`d, run by scripts/test.sh.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const CLI: &str = "198.18.0.7";
const VIP_IN: &str = "198.18.0.1";
const VIP_OUT: &str = "198.18.1.1";
const SRV: &str = "198.18.1.10";
const POOL: &str = "198.19.0.100";
const KEY: &str = "e2e-failover-shared-key-0123456789";

/// The UDP stream's server: answers each datagram, and prints each new peer it sees.
const UDP_ECHO: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
seen = set()
while True:
    d, peer = s.recvfrom(2048)
    if peer not in seen:
        seen.add(peer)
        print("PEER %s %d" % peer, flush=True)
    s.sendto(d, peer)
"#;

/// The UDP stream's client: a numbered datagram every 10 ms from port 999 for `secs` (a port
/// the NAT does not preserve, so only a synced mapping keeps its outside port);
/// prints how many came back, and the longest silence between two replies.
const UDP_STREAM: &str = r#"
import socket, sys, time
dst, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 999))  # below [nat44] ports: the NAT picks the outside port at random
s.setblocking(False)
sent = got = 0
last = None
gap = 0.0
end = time.time() + secs
while time.time() < end:
    s.sendto(str(sent).encode(), (dst, port))
    sent += 1
    t = time.time() + 0.01
    while time.time() < t:
        try:
            s.recv(2048)
            now = time.time()
            if last is not None:
                gap = max(gap, now - last)
            last = now
            got += 1
        except BlockingIOError:
            time.sleep(0.001)
print("SENT %d GOT %d MAXGAP_MS %d" % (sent, got, gap * 1000), flush=True)
"#;

struct Pair {
    lab: Lab,
    cli: String,
    srv: String,
    gw: [String; 2],
    sock: [PathBuf; 2],
    xlat: Vec<ProcId>,
    keepalived: Vec<ProcId>,
    links: [[String; 2]; 2],
}

fn build() -> Pair {
    require_root();
    let missing = missing_tools(&["keepalived", "curl", "python3", "promtool"]);
    assert!(
        missing.is_empty(),
        "the failover test needs {missing:?}: apt-get install keepalived curl python3 prometheus"
    );
    let mut lab = Lab::new('f');
    let id = lab.id.clone();
    let (cli, srv) = (format!("{id}-cli"), format!("{id}-srv"));
    let gw = [format!("{id}-a"), format!("{id}-b")];
    let (swi, swo) = (format!("{id}-swi"), format!("{id}-swo"));
    for ns in [&cli, &srv, &gw[0], &gw[1], &swi, &swo] {
        lab.add_ns(ns);
    }
    // The two LANs: a bridge in a switch namespace each.
    for (sw, br) in [(&swi, format!("{id}B1")), (&swo, format!("{id}B2"))] {
        lab.ip(sw, &["link", "add", "name", &br, "type", "bridge"]);
        lab.ip(sw, &["link", "set", &br, "up"]);
    }
    let port = |lab: &Lab, sw: &str, br: &str, p: &str, ns: &str, dev: &str, addr: &str| {
        lab.veth(sw, p, ns, dev);
        lab.ip(sw, &["link", "set", p, "master", br]);
        lab.ip(sw, &["link", "set", p, "up"]);
        lab.ip(ns, &["addr", "add", addr, "dev", dev]);
        lab.offloads_off(ns, dev, false);
        lab.ip(ns, &["link", "set", dev, "up"]);
    };
    let (b1, b2) = (format!("{id}B1"), format!("{id}B2"));
    port(
        &lab,
        &swi,
        &b1,
        &format!("{id}p1"),
        &cli,
        &format!("{id}c"),
        "198.18.0.7/24",
    );
    port(
        &lab,
        &swo,
        &b2,
        &format!("{id}q1"),
        &srv,
        &format!("{id}s"),
        "198.18.1.10/24",
    );
    let links = [
        [format!("{id}ai"), format!("{id}ao")],
        [format!("{id}bi"), format!("{id}bo")],
    ];
    for (k, g) in gw.iter().enumerate() {
        let n = k + 2;
        port(
            &lab,
            &swi,
            &b1,
            &format!("{id}p{n}"),
            g,
            &links[k][0],
            &format!("198.18.0.{n}/24"),
        );
        port(
            &lab,
            &swo,
            &b2,
            &format!("{id}q{n}"),
            g,
            &links[k][1],
            &format!("198.18.1.{n}/24"),
        );
        lab.ns_ok(g, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    }
    lab.ip(&cli, &["route", "add", "default", "via", VIP_IN]);
    lab.ip(
        &srv,
        &["route", "add", &format!("{POOL}/32"), "via", VIP_OUT],
    );
    let sock = [lab.dir.join("a.sock"), lab.dir.join("b.sock")];
    Pair {
        lab,
        cli,
        srv,
        gw,
        sock,
        xlat: Vec::new(),
        keepalived: Vec::new(),
        links,
    }
}

impl Pair {
    /// xlat with [sync] in gateway `k` (role auto: keepalived decides).
    fn start_xlat(&mut self, k: usize) {
        let me = format!("198.18.0.{}", k + 2);
        let peer = format!("198.18.0.{}", 3 - k);
        let tun = format!("{}t{k}", self.lab.id);
        let cfg = format!(
            "[tun]\nname = \"{tun}\"\nmtu = 1500\nauto_routes = true\n\n[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"{POOL}/32\"]\nmode = \"napt\"\n\n[control]\nsocket = \"{sock}\"\n\n[metrics]\nlisten = \"127.0.0.1:9641\"\n\n[sync]\nlisten = \"{me}:4790\"\npeer = \"{peer}:4790\"\nrole = \"auto\"\nkey = \"{KEY}\"\n",
            sock = self.sock[k].display(),
        );
        let path = self.lab.dir.join(format!("xlat-{k}.toml"));
        let g = self.gw[k].clone();
        let p = self
            .lab
            .spawn_xlat(&g, &format!("xlat-{k}"), &["run"], &path, &cfg);
        self.lab.socket = self.sock[k].clone();
        self.lab.wait_xlat_ready(
            p,
            &g,
            &tun,
            &[&["-4", "route", "show", "table", "4400"]],
            &cfg,
        );
        self.xlat.push(p);
    }

    /// keepalived in gateway `k`: VRRP over the inside LAN (unicast), A preferred, the two
    /// virtual addresses, the notify hooks telling xlat its role.
    fn start_keepalived(&mut self, k: usize) {
        let me = format!("198.18.0.{}", k + 2);
        let peer = format!("198.18.0.{}", 3 - k);
        let xlat = xlat_bin();
        let sock = self.sock[k].display().to_string();
        let [lin, lout] = &self.links[k];
        let conf = format!(
            r#"global_defs {{
    router_id xlat-{k}
    vrrp_version 3
    enable_script_security
    script_user root
    vrrp_garp_master_delay 0
    vrrp_garp_master_repeat 3
}}
vrrp_instance XLAT {{
    state BACKUP
    interface {lin}
    virtual_router_id 51
    priority {prio}
    advert_int 0.1
    nopreempt
    unicast_src_ip {me}
    unicast_peer {{
        {peer}
    }}
    virtual_ipaddress {{
        {VIP_IN}/24 dev {lin}
        {VIP_OUT}/24 dev {lout}
    }}
    notify_master "{xlat} sync role active --socket {sock}"
    notify_backup "{xlat} sync role standby --socket {sock}"
    notify_fault "{xlat} sync role standby --socket {sock}"
}}
"#,
            prio = if k == 0 { 150 } else { 100 },
        );
        let dir = &self.lab.dir;
        let path = dir.join(format!("keepalived-{k}.conf"));
        std::fs::write(&path, conf).unwrap();
        let pid = |n: &str| {
            dir.join(format!("keepalived-{k}-{n}.pid"))
                .display()
                .to_string()
        };
        let g = self.gw[k].clone();
        let p = self.lab.spawn(
            &g,
            &format!("keepalived-{k}"),
            &[
                "keepalived",
                "--dont-fork",
                "--log-console",
                "--log-detail",
                "--vrrp",
                "--use-file",
                &path.display().to_string(),
                "--pid",
                &pid("main"),
                "--vrrp_pid",
                &pid("vrrp"),
            ],
        );
        self.keepalived.push(p);
    }

    fn sync_status(&self, k: usize) -> serde_json::Value {
        let r = xlat_cli(&self.sock[k], &["show", "sync", "--json"]).check();
        serde_json::from_str(&r.stdout).unwrap()
    }

    fn sessions(&self, k: usize) -> Vec<serde_json::Value> {
        let r = xlat_cli(&self.sock[k], &["show", "sessions", "--json"]).check();
        serde_json::from_str::<serde_json::Value>(&r.stdout)
            .unwrap()
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn dump(&mut self) -> String {
        let mut s = String::new();
        for k in 0..2 {
            let r = xlat_cli(&self.sock[k], &["show", "sync"]);
            s += &format!("--- xlat-{k} show sync\n{}{}\n", r.stdout, r.stderr);
        }
        for p in self.keepalived.clone() {
            let t = self.lab.proc(p).stdout_text() + &self.lab.proc(p).stderr_text();
            let tail: Vec<&str> = t.lines().rev().take(15).collect();
            s += &format!(
                "--- keepalived\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        s
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn tcp_download_and_udp_stream_survive_the_death_of_the_active_gateway() {
    let mut t = build();
    t.start_xlat(0);
    t.start_xlat(1);
    t.start_keepalived(0);
    // A becomes master first (B, started later, finds a master and stays backup).
    wait_for(
        "A to be active",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || t.sync_status(0)["role"] == "active",
    );
    t.start_keepalived(1);
    wait_for(
        "B to hold A's table (in sync)",
        Duration::from_secs(15),
        Duration::from_millis(100),
        || {
            let s = t.sync_status(1);
            s["role"] == "standby" && s["in_sync"] == true
        },
    );

    // Established flows through A: a rate-limited download (~8 s) and a UDP stream (12 s).
    let (cli, srv) = (t.cli.clone(), t.srv.clone());
    t.lab.resolv_conf(&srv, "127.0.0.1");
    let (_http, blob) = t.lab.serve_random_file(&srv, SRV, 8080, 3_000_000);
    let echo = t
        .lab
        .spawn(&srv, "udp-echo", &["python3", "-c", UDP_ECHO, SRV, "7000"]);
    t.lab.wait_listening_on(&srv, "udp", SRV, 7000, Some(echo));
    let got = t.lab.dir.join("download.bin");
    let curl = t.lab.spawn(
        &cli,
        "curl",
        &[
            "curl",
            "-sS",
            "--fail",
            "--limit-rate",
            "400k",
            "--max-time",
            "40",
            "-o",
            &got.display().to_string(),
            &format!("http://{SRV}:8080/blob.bin"),
        ],
    );
    let stream = t.lab.spawn(
        &cli,
        "udp-stream",
        &["python3", "-c", UDP_STREAM, SRV, "7000", "12"],
    );
    std::thread::sleep(Duration::from_secs(2));

    // B holds copies of A's sessions: the same outside endpoints.
    let outside = |rows: &[serde_json::Value]| {
        let mut v: Vec<String> = rows
            .iter()
            .filter(|r| r["inside"] == CLI)
            .map(|r| {
                format!(
                    "{} {}:{} {}",
                    r["proto"], r["outside"], r["outside_port"], r["remote_port"]
                )
            })
            .collect();
        v.sort();
        v
    };
    let on_a = outside(&t.sessions(0));
    assert!(
        on_a.len() >= 2,
        "A has the download's and the stream's sessions: {on_a:?}"
    );
    wait_for(
        "B to hold A's sessions",
        Duration::from_secs(5),
        Duration::from_millis(50),
        || {
            let on_b = outside(&t.sessions(1));
            on_a.iter().all(|s| on_b.contains(s))
        },
    );

    // A dies: xlat and keepalived killed, its links down.
    let killed = Instant::now();
    let (xa, ka) = (t.xlat[0], t.keepalived[0]);
    t.lab
        .proc(xa)
        .stop_with(libc::SIGKILL, Duration::from_secs(2));
    t.lab
        .proc(ka)
        .stop_with(libc::SIGKILL, Duration::from_secs(2));
    let (ga, links_a) = (t.gw[0].clone(), t.links[0].clone());
    for l in &links_a {
        t.lab.ip(&ga, &["link", "set", l, "down"]);
    }
    wait_for(
        "B to take over",
        Duration::from_secs(5),
        Duration::from_millis(20),
        || t.sync_status(1)["role"] == "active",
    );
    let takeover = killed.elapsed();
    eprintln!("B active {} ms after A died", takeover.as_millis());

    // The download completes intact; the stream kept its mapping and went on.
    let st = t.lab.proc(curl).wait_exit(Duration::from_secs(45));
    let dump = t.dump();
    assert!(
        st.is_some_and(|s| s.success()),
        "the download did not survive the takeover ({st:?}): {}\n{dump}",
        t.lab.proc(curl).stderr_text()
    );
    assert_same_file(&blob, &got);
    let st = t.lab.proc(stream).wait_exit(Duration::from_secs(20));
    assert!(st.is_some(), "the UDP stream client did not finish");
    let out = t.lab.proc(stream).stdout_text();
    eprintln!("udp stream: {out}");
    let nums: Vec<u64> = out
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (sent, got_n, gap_ms) = (nums[0], nums[1], nums[2]);
    assert!(sent > 500 && got_n > 0, "{out}\n{dump}");
    // Lost only while VRRP noticed (3 adverts of 100 ms and a skew) and B took over.
    assert!(
        gap_ms < 3000,
        "the stream stopped for {gap_ms} ms: {out}\n{dump}"
    );
    assert!(
        got_n * 10 >= sent * 8,
        "fewer than 80% of the datagrams came back: {out}\n{dump}"
    );
    let peers: Vec<String> = t
        .lab
        .proc(echo)
        .stdout_text()
        .lines()
        .filter(|l| l.starts_with("PEER "))
        .map(str::to_string)
        .collect();
    assert_eq!(
        peers.len(),
        1,
        "the server saw the stream from more than one outside endpoint (the mapping did not survive): {peers:?}\n{dump}"
    );
    assert!(peers[0].starts_with(&format!("PEER {POOL} ")), "{peers:?}");
    // What Prometheus scrapes from B says the same, and promtool accepts it.
    let gb = t.gw[1].clone();
    let m = t.lab.ns(
        &gb,
        10,
        &[
            "curl",
            "-sS",
            "--max-time",
            "5",
            "http://127.0.0.1:9641/metrics",
        ],
    );
    assert!(m.ok(), "scraping B: {}", m.stderr);
    let sample = |name: &str| {
        m.stdout
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in B's /metrics"))
    };
    assert_eq!(sample("xlat_sync_active"), 1);
    assert!(sample("xlat_sync_installed_total") >= 2);
    assert_eq!(sample("xlat_sync_auth_failures_total"), 0);
    let file = t.lab.dir.join("b.metrics");
    std::fs::write(&file, &m.stdout).unwrap();
    let check = t.lab.sh(
        &gb,
        30,
        &format!("promtool check metrics < {}", file.display()),
    );
    assert!(check.ok(), "promtool: {}{}", check.stdout, check.stderr);
    let b = t.sync_status(1);
    assert!(b["counters"]["installed"].as_u64().unwrap_or(0) >= 2, "{b}");
    assert_eq!(b["counters"]["auth_failures"], 0, "{b}");
    assert!(
        b["counters"]["standby_dropped"].as_u64().unwrap_or(0) < 50,
        "B dropped traffic while standby: {b}"
    );
    // Keep the lab alive until here (its Drop stops everything).
    drop(t);
}
