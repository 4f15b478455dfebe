//! End-to-end NAT64 (RFC 6146) with DNS64 (RFC 6147), and SIIT (RFC 7915) with EAM (RFC 7757):
//! an IPv6-only client, `xlat run` on a gateway, and an IPv4-only server network with real
//! servers (python3 http.server, unbound, socat, iperf3), all in network namespaces.
//!
//! ```text
//!   CLI 2001:2:0:1::10/64 ---- 2001:2:0:1::1 [GW] 198.19.0.1/24 ---- SRV 198.19.0.2/24, 198.19.0.3/24
//!   (IPv6 only, default          xlat run (TUN),                     (IPv4 only, no default route;
//!    via 2001:2:0:1::1)          DNS64 on 2001:2:0:1::1:53            unbound, HTTP, UDP echo, iperf3)
//! ```
//!
//! NAT64: pref64 2001:2:0:64::/96, pool4 198.19.0.101 (on SRV's subnet: xlat's proxy ARP makes
//! GW answer for it), so SRV 198.19.0.2 is 2001:2:0:64::c613:2 to the client. unbound is
//! authoritative for test.example., whose names have only A records; the client's resolver
//! (/etc/netns/NS/resolv.conf, which `ip netns exec` mounts over /etc/resolv.conf) points at
//! the DNS64.
//!
//! SIIT: the client is 2001:2:0:1::5, mapped to 198.19.1.5 by the EAM entry
//! 198.19.1.0/28 = 2001:2:0:1::/124 (SRV routes 198.19.1.0/28 via GW); SRV is reached through the
//! pref64 (2001:2:0:64::c613:2) or, in the second test, through a second EAM entry
//! 198.19.0.0/28 = 2001:2:0:6::/124 (2001:2:0:6::2).
//!
//! Every test asserts on what the far end saw (tcpdump on its link, the servers' logs), not
//! only on xlat's counters. Each test makes its own uniquely named namespaces and removes them
//! (and the resolv.conf) on drop, also on failure; every command runs under `timeout`, every
//! wait is bounded. Needs root, unbound and dig besides the tools of `common::TOOLS`:
//! `#[ignore]`d, run by scripts/test.sh (`--include-ignored`), failing when run without them.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use common::topo64::{GW4, GW6, SRV};
use common::{
    afxdp_wanted, assert_same_file, counter, endpoint, http_clients, poll, require_root_dns, show,
    workers_line, workers_wanted, xdp, Pkt, Topo64, ICMP_PROBE, UDP4_SEND,
};

/// The IPv6-only client (NAT64 tests).
const CLI: &str = "2001:2:0:1::10";
/// The second IPv4 server address.
const SRV2: &str = "198.19.0.3";
const PREF64: &str = "2001:2:0:64::/96";
/// SRV and SRV2 in the pref64 (RFC 6052 2.2, /96: the IPv4 address in the last 32 bits).
const SRV_V6: &str = "2001:2:0:64::c613:2";
const SRV2_V6: &str = "2001:2:0:64::c613:3";
const POOL4: &str = "198.19.0.101";
/// The name unbound serves with only an A record (198.19.0.2).
const NAME: &str = "www.test.example";

/// The SIIT client and its EAM form.
const SIIT_CLI: &str = "2001:2:0:1::5";
const SIIT_CLI_V4: &str = "198.19.1.5";
/// SRV through the second EAM entry (198.19.0.0/28 = 2001:2:0:6::/124).
const SRV_EAM_V6: &str = "2001:2:0:6::2";

const HTTP_PORT: u16 = 8080;
const BLOB_LEN: u64 = 4 * 1024 * 1024;

const ZONE: &str = "$ORIGIN test.example.
@        3600 IN SOA ns.test.example. hostmaster.test.example. 1 3600 600 86400 300
@        3600 IN NS  ns.test.example.
ns       3600 IN A   198.19.0.2
www      300  IN A   198.19.0.2
";

/// Runs the NAT64 tests with the XDP fast path (`XLAT_E2E_FAST_PATH`, see scripts/test.sh).
fn fast_path() -> bool {
    std::env::var_os("XLAT_E2E_FAST_PATH").is_some()
}

/// The CLI, GW and SRV namespaces with the client at `cli_addr`, and SRV2 on SRV's link.
fn build_lab(cli_addr: &str) -> Topo64 {
    let lab = Topo64::new('p', cli_addr, fast_path() || afxdp_wanted());
    lab.ip(
        &lab.srv,
        &["addr", "add", &format!("{SRV2}/24"), "dev", &lab.srv_dev],
    );
    lab.ip(&lab.cli, &["-6", "route", "add", "default", "via", GW6]);
    // SRV has no default route: only what xlat answers for (pool4 by proxy ARP, or the
    // routes a test adds) comes back.
    lab
}

/// Writes `config`, starts `xlat run -c` in GW and waits until it is ready: the TUN is up,
/// IPv6 and IPv4 routes lead into it, the control socket answers, and (with `dns`) the
/// DNS64 listens on GW6:53.
fn start_xlat(lab: &mut Topo64, config: &str, dns: bool) {
    let (gw, tun, path) = (lab.gw.clone(), lab.tun.clone(), lab.dir.join("xlat.toml"));
    let k = lab.spawn_xlat(&gw, "xlat", &["run"], &path, config);
    lab.wait_xlat_ready(
        k,
        &gw,
        &tun,
        &[&["-6", "route", "show"], &["-4", "route", "show"]],
        config,
    );
    if dns {
        lab.wait_listening_on(&gw, "udp", GW6, 53, Some(k));
        lab.wait_listening_on(&gw, "tcp", GW6, 53, Some(k));
    }
}

/// The NAT64 configuration, with the DNS64 in the same daemon when `dns64`.
fn nat64_config(lab: &Topo64, dns64: bool) -> String {
    let mut c = format!(
        r#"# written by the xlat NAT64 end-to-end tests
[tun]
name = "{tun}"
mtu = 1500
auto_routes = true

[nat64]
prefix = "{PREF64}"
pool4 = ["{POOL4}/32"]
ports = "1024-65535"
filtering = "address-dependent"

[control]
socket = "{sock}"
"#,
        tun = lab.tun,
        sock = lab.socket.display()
    );
    if dns64 {
        c.push_str(&format!(
            "\n[dns64]\nlisten = [\"[{GW6}]:53\"]\nupstream = [\"{SRV}:53\"]\nprefix = \"{PREF64}\"\n"
        ));
    }
    if fast_path() || afxdp_wanted() || workers_wanted().is_some() {
        c.push_str("\n[dataplane]\n");
    }
    if fast_path() {
        c.push_str("fast_path = \"xdp\"\n");
    }
    c + &slow_path_lines(lab) + &workers_line()
}

/// `slow_path = "af_xdp"` and the interfaces when `XLAT_E2E_AF_XDP` asks for it (the
/// interfaces also when the fast path does).
fn slow_path_lines(lab: &Topo64) -> String {
    let mut s = String::new();
    if afxdp_wanted() {
        s += "slow_path = \"af_xdp\"\n";
    }
    if afxdp_wanted() || fast_path() {
        s += &format!(
            "interfaces = [\"{}\", \"{}\"]\n",
            lab.gw_cli_dev, lab.gw_srv_dev
        );
    }
    s
}

/// The SIIT configuration: the client's /124 as EAM, and `extra_eam` entries.
fn siit_config(lab: &Topo64, extra_eam: &str) -> String {
    format!(
        r#"# written by the xlat SIIT end-to-end tests
[tun]
name = "{tun}"
mtu = 1500
auto_routes = true

[siit]
prefix = "{PREF64}"
eam = [{{ ipv4 = "198.19.1.0/28", ipv6 = "2001:2:0:1::/124" }}{extra_eam}]

[control]
socket = "{sock}"
{dataplane}"#,
        tun = lab.tun,
        sock = lab.socket.display(),
        // XLAT_E2E_WORKERS, XLAT_E2E_AF_XDP, XLAT_E2E_FAST_PATH: SIIT on several workers, on
        // AF_XDP and with its address-pair recipes in XDP too.
        dataplane = if workers_wanted().is_some() || afxdp_wanted() || fast_path() {
            let fast = if fast_path() {
                "fast_path = \"xdp\"\n"
            } else {
                ""
            };
            let slow = if afxdp_wanted() {
                "slow_path = \"af_xdp\"\n"
            } else {
                ""
            };
            let ifs = if afxdp_wanted() || fast_path() {
                format!(
                    "interfaces = [\"{}\", \"{}\"]\n",
                    lab.gw_cli_dev, lab.gw_srv_dev
                )
            } else {
                String::new()
            };
            format!("\n[dataplane]\n{fast}{slow}{ifs}{}", workers_line())
        } else {
            String::new()
        },
    )
}

/// A NAT64 lab with xlat running (and unbound in SRV with the DNS64 when `dns64`); `None`
/// when the tests cannot run here.
fn nat64_lab(dns64: bool) -> Topo64 {
    require_root_dns("NAT64");
    let mut lab = build_lab(CLI);
    if dns64 {
        let srv = lab.srv.clone();
        lab.start_unbound(&srv, SRV, &[("test.example.", "test.example.zone", ZONE)]);
    }
    let cfg = nat64_config(&lab, dns64);
    start_xlat(&mut lab, &cfg, dns64);
    lab
}

#[test]
fn pref64_addresses_of_the_tests_are_rfc6052() {
    // The constants the tests expect on the wire, computed independently (RFC 6052 2.2, /96).
    for (v4, v6) in [(SRV, SRV_V6), (SRV2, SRV2_V6)] {
        let a: Ipv4Addr = v4.parse().unwrap();
        let mut o = [0u8; 16];
        o[..12].copy_from_slice(&Ipv6Addr::new(0x2001, 2, 0, 0x64, 0, 0, 0, 0).octets()[..12]);
        o[12..].copy_from_slice(&a.octets());
        assert_eq!(Ipv6Addr::from(o), v6.parse::<Ipv6Addr>().unwrap());
    }
}

/// NAT64 + DNS64 in one `xlat run`: `dig AAAA` gets the synthesized address, and curl,
/// resolving the name with the client's own resolver config, fetches 4 MiB intact; the server
/// sees only the pool4 address; `show sessions` lists the NAT64 session with the tuples seen on
/// both wires.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat64_dns64_dig_and_curl_by_name() {
    let mut lab = nat64_lab(true);
    let (cli, srv, sd, cd) = (
        lab.cli.clone(),
        lab.srv.clone(),
        lab.srv_dev.clone(),
        lab.cli_dev.clone(),
    );
    let (http, blob) = lab.serve_random_file(&srv, SRV, HTTP_PORT, BLOB_LEN);

    // RFC 6147 5.1.6: the A-only name gets exactly one AAAA, 198.19.0.2 in the pref64.
    let gw = format!("@{GW6}");
    for transport in ["+notcp", "+tcp"] {
        let r = lab
            .ns(
                &cli,
                15,
                &[
                    "dig", "+time=5", "+tries=1", "+short", transport, &gw, "AAAA", NAME,
                ],
            )
            .check();
        let got: Vec<&str> = r.stdout.split_whitespace().collect();
        assert_eq!(got, vec![SRV_V6], "dig {transport} AAAA {NAME} @{GW6}");
    }

    // The client's resolver: the DNS64 only. curl resolves the name itself (getaddrinfo).
    lab.resolv_conf(&cli, GW6);
    let syn_cap = lab.tcpdump(
        &srv,
        &sd,
        &format!("tcp port {HTTP_PORT} and tcp[tcpflags] & tcp-syn != 0"),
    );
    let cli_cap = lab.tcpdump(
        &cli,
        &cd,
        &format!("tcp port {HTTP_PORT} and ip6[53] & 2 != 0"),
    );
    let url = format!("http://{NAME}:{HTTP_PORT}/blob.bin");
    let (remote_ip, got) = lab.curl(&cli, &url);
    assert_eq!(
        remote_ip, SRV_V6,
        "curl should have connected to the synthesized address"
    );
    assert_same_file(&blob, &got);

    // SRV saw the connection come from pool4, the client's SYN go to the pref64 address.
    let srv_syns = Pkt::all(&lab.tcpdump_lines(syn_cap));
    let cli_syns = Pkt::all(&lab.tcpdump_lines(cli_cap));
    let syn = srv_syns
        .iter()
        .find(|p| p.is(POOL4, SRV) && p.dst_port == Some(HTTP_PORT))
        .unwrap_or_else(|| {
            panic!(
                "SRV saw no SYN from {POOL4} to {SRV}:{HTTP_PORT}:\n{}",
                show(&srv_syns)
            )
        });
    assert!(
        srv_syns
            .iter()
            .all(|p| !p.v6 && (p.is(POOL4, SRV) || p.is(SRV, POOL4))),
        "SRV saw other addresses than {POOL4} <-> {SRV}:\n{}",
        show(&srv_syns)
    );
    let pool_port = syn.src_port.unwrap();
    let cli_syn = cli_syns
        .iter()
        .find(|p| p.v6 && p.is(CLI, SRV_V6) && p.dst_port == Some(HTTP_PORT))
        .unwrap_or_else(|| {
            panic!(
                "CLI sent no SYN to [{SRV_V6}]:{HTTP_PORT}:\n{}",
                show(&cli_syns)
            )
        });
    let cli_port = cli_syn.src_port.unwrap();

    let log = lab.proc(http).stderr_text();
    let clients = http_clients(&log, "/blob.bin");
    assert_eq!(
        clients,
        vec![POOL4.to_string()],
        "the HTTP server must see exactly one GET, from {POOL4}:\n{log}"
    );

    // show sessions: the NAT64 session with the IPv6 client tuple and the pool4 tuple, the
    // very ports seen on the two wires.
    let sessions = lab.sessions();
    let all = serde_json::to_string_pretty(&sessions).unwrap_or_default();
    let s = sessions
        .iter()
        .find(|s| {
            s["proto"].as_str().map(str::to_ascii_lowercase).as_deref() == Some("tcp")
                && endpoint(s, "inside") == format!("[{CLI}]:{cli_port}")
        })
        .unwrap_or_else(|| panic!("no tcp session for [{CLI}]:{cli_port} in:\n{all}"));
    assert_eq!(s["translator"], "nat64", "{s}");
    assert_eq!(
        endpoint(s, "outside"),
        format!("{POOL4}:{pool_port}"),
        "{s}"
    );
    assert_eq!(endpoint(s, "remote"), format!("{SRV}:{HTTP_PORT}"), "{s}");
    assert_eq!(
        endpoint(s, "remote6"),
        format!("[{SRV_V6}]:{HTTP_PORT}"),
        "{s}"
    );
    assert!(!s["state"].is_null() && !s["expires_in"].is_null(), "{s}");
    let text = lab.xlat_cmd(&["show", "sessions"]).check().stdout;
    assert!(
        text.contains(&format!("[{CLI}]:{cli_port}"))
            && text.contains(&format!("{POOL4}:{pool_port}"))
            && text.contains(&format!("[{SRV_V6}]:{HTTP_PORT}")),
        "`show sessions` lacks the NAT64 session:\n{text}"
    );

    let st = lab.stats();
    assert!(
        st["dns64"]["synthesized"].as_u64().unwrap_or(0) >= 3,
        "{st}"
    );
    assert!(counter(&st, "events", "ipv6_to_ipv4") > 0, "{st}");
    assert!(counter(&st, "events", "ipv4_to_ipv6") > 0, "{st}");
    if fast_path() {
        // The file's data segments (4 MiB, ~2,900 of them) crossed XDP, not the engine; the
        // client's ACKs too (fewer: its GRO coalesces what it acknowledges).
        assert!(xdp(&st, "xdp_translated_4to6") >= 2000, "{st}");
        assert!(xdp(&st, "xdp_translated_6to4") >= 10, "{st}");
    }
}

/// ping and `ping -s 4000` (fragments both ways) to the pref64 address of SRV.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat64_ping_and_fragmented_ping() {
    let mut lab = nat64_lab(false);
    let (cli, srv, sd, cd) = (
        lab.cli.clone(),
        lab.srv.clone(),
        lab.srv_dev.clone(),
        lab.cli_dev.clone(),
    );
    let srv_cap = lab.tcpdump(&srv, &sd, "ip");
    let cli_cap = lab.tcpdump(&cli, &cd, "ip6 and not (icmp6 and ip6[40] >= 133)");
    lab.ping_all(&cli, 3, &["-6"], SRV_V6);
    // 4000 bytes of payload: three fragments each way on 1500-byte links.
    lab.ping_all(&cli, 3, &["-6", "-s", "4000"], SRV_V6);
    let on_srv = Pkt::all(&lab.tcpdump_lines(srv_cap));
    let on_cli = Pkt::all(&lab.tcpdump_lines(cli_cap));

    let foreign: Vec<Pkt> = on_srv
        .iter()
        .filter(|p| !(p.is(POOL4, SRV) || p.is(SRV, POOL4)))
        .cloned()
        .collect();
    assert!(
        foreign.is_empty(),
        "SRV saw packets other than {POOL4} <-> {SRV}:\n{}",
        show(&foreign)
    );
    let requests = on_srv
        .iter()
        .filter(|p| p.is(POOL4, SRV) && p.rest.contains("ICMP echo request"))
        .count();
    assert_eq!(
        requests,
        6,
        "SRV should see 6 echo requests from {POOL4}:\n{}",
        show(&on_srv)
    );
    // The later fragments of the 4000-byte requests (tcpdump: "ip-proto-1" without ICMP).
    let frags = on_srv
        .iter()
        .filter(|p| p.is(POOL4, SRV) && !p.rest.contains("ICMP echo"))
        .count();
    assert!(
        frags >= 6,
        "SRV should see the non-first fragments from {POOL4}, saw {frags}:\n{}",
        show(&on_srv)
    );

    // The client saw its replies come from the pref64 address, the large ones fragmented.
    let replies = on_cli
        .iter()
        .filter(|p| p.is(SRV_V6, CLI) && p.rest.contains("echo reply"))
        .count();
    assert_eq!(
        replies,
        6,
        "CLI should see 6 echo replies from {SRV_V6}:\n{}",
        show(&on_cli)
    );
    let frag_replies = on_cli
        .iter()
        .filter(|p| p.is(SRV_V6, CLI) && p.rest.contains("frag ("))
        .count();
    assert!(
        frag_replies >= 9,
        "CLI should see the 3 large replies as IPv6 fragments (>= 3 each), saw {frag_replies}:\n{}",
        show(&on_cli)
    );
    let st = lab.stats();
    assert!(counter(&st, "events", "fragments") > 0, "{st}");

    // The ICMP sessions: IPv6 client with its identifier, pool4 with the mapped one.
    let sessions = lab.sessions();
    let all = serde_json::to_string_pretty(&sessions).unwrap_or_default();
    assert!(
        sessions.iter().any(|s| {
            s["translator"] == "nat64"
                && s["proto"].as_str().map(str::to_ascii_lowercase).as_deref() == Some("icmp")
                && endpoint(s, "inside").starts_with(&format!("[{CLI}]:"))
                && endpoint(s, "outside").starts_with(&format!("{POOL4}:"))
                && endpoint(s, "remote").starts_with(SRV)
        }),
        "no NAT64 icmp session [{CLI}]:* -> {POOL4}:* -> {SRV} in:\n{all}"
    );
}

/// UDP both ways: a socat request/reply, where SRV must see pool4 as the peer; then SRV sends
/// to the client's pool4 mapping from another port and the client gets it from the pref64
/// address. Unsolicited IPv4 packets to pool4 (UDP and a TCP SYN to a port without BIB entry;
/// UDP from a remote the filter does not admit) are dropped, counted, and never reach the
/// client's link.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat64_udp_both_ways_and_unsolicited_inbound_dropped() {
    let mut lab = nat64_lab(false);
    let (cli, srv, cd) = (lab.cli.clone(), lab.srv.clone(), lab.cli_dev.clone());
    lab.udp_echo(&srv, SRV, 7000);

    let r = lab.ns(
        &cli,
        20,
        &[
            "sh",
            "-c",
            &format!("echo hello-nat64 | socat -T 5 -t 3 - UDP6:[{SRV_V6}]:7000"),
        ],
    );
    assert!(
        r.ok() && r.stdout.contains("hello-nat64"),
        "no UDP echo came back through NAT64: {}\n{}",
        r.stdout,
        r.stderr
    );
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with(&format!("peer={POOL4} "))),
        "SRV must see {POOL4} as the UDP peer: {:?}",
        r.stdout
    );

    // Anything reaching CLI that is not for the listener's port 5555 is a leak.
    let cap = lab.tcpdump(&cli, &cd, "(udp and not port 5555) or tcp");
    let (lis, peer, mapped) = lab.udp_listener(&cli, "client-listener", CLI, SRV_V6);
    assert_eq!(peer, POOL4, "SRV saw peer {peer}:{mapped}");
    let sessions = lab.sessions();
    let all = serde_json::to_string_pretty(&sessions).unwrap_or_default();
    assert!(
        sessions.iter().any(|s| s["translator"] == "nat64"
            && s["proto"].as_str().map(str::to_ascii_lowercase).as_deref() == Some("udp")
            && endpoint(s, "inside") == format!("[{CLI}]:5555")
            && endpoint(s, "outside") == format!("{POOL4}:{mapped}")
            && endpoint(s, "remote") == format!("{SRV}:7000")
            && endpoint(s, "remote6") == format!("[{SRV_V6}]:7000")),
        "no NAT64 udp session [{CLI}]:5555 -> {POOL4}:{mapped} -> {SRV}:7000 in:\n{all}"
    );
    // A pool4 port no session uses, for TCP or UDP.
    let unmapped: u16 = (33333..34000)
        .find(|p| {
            !sessions
                .iter()
                .any(|s| endpoint(s, "outside") == format!("{POOL4}:{p}"))
        })
        .unwrap();

    let (m, u) = (mapped.to_string(), unmapped.to_string());
    let drops = |lab: &Topo64| {
        let st = lab.stats();
        (
            counter(&st, "drops", "no_mapping"),
            counter(&st, "drops", "filtered"),
        )
    };
    // Waits (5 s at most) until `which` of the two counters grew past `before`.
    let grew = |lab: &Topo64, before: (u64, u64), nomap: bool, what: &str| {
        let mut last = before;
        let ok = poll(Duration::from_secs(5), Duration::from_millis(100), || {
            last = drops(lab);
            if nomap {
                last.0 > before.0
            } else {
                last.1 > before.1
            }
        });
        assert!(
            ok,
            "{what}: drop counter did not grow: (no_mapping, filtered) {before:?} -> {last:?}"
        );
    };
    // 1. A UDP datagram to a pool4 port with no BIB entry.
    let d0 = drops(&lab);
    lab.ns(
        &srv,
        10,
        &["python3", "-c", UDP4_SEND, SRV, "0", POOL4, &u, "NOMAP"],
    )
    .check();
    grew(&lab, d0, true, "UDP to an unmapped pool4 port");
    // 2. A TCP SYN to a pool4 port with no BIB entry: no connection (RFC 6146 3.5.2.2).
    let d0 = drops(&lab);
    let r = lab.ns(&srv, 10, &["python3", "-c", TCP_PROBE, SRV, POOL4, &u]);
    assert!(
        r.ok() && !r.stdout.contains("CONNECTED"),
        "an unsolicited TCP connection to {POOL4}:{u} was accepted: {}\n{}",
        r.stdout,
        r.stderr
    );
    grew(&lab, d0, true, "TCP SYN to an unmapped pool4 port");
    // ... and the SYN is answered with ICMP port unreachable (RFC 6146 3.5.2.2, sent at once
    // as the SYN is not held; RFC 7915 4.4): the connect fails at once, refused, not timed out.
    assert!(
        r.stdout.contains("ERROR") && r.stdout.contains("refused"),
        "the unsolicited SYN should be refused by the translator's port unreachable: {}",
        r.stdout
    );
    // 3. To the mapped port from an address the client never sent to: address-dependent
    //    filtering (RFC 6146 3.5.1) drops it.
    let d0 = drops(&lab);
    lab.ns(
        &srv,
        10,
        &["python3", "-c", UDP4_SEND, SRV2, "0", POOL4, &m, "FILTERED"],
    )
    .check();
    grew(
        &lab,
        d0,
        false,
        "UDP from a remote the filter does not admit",
    );
    // 4. From the contacted address, another port: admitted, the other way round (IPv4 to
    //    IPv6), from the pref64 form of SRV.
    lab.ns(
        &srv,
        10,
        &["python3", "-c", UDP4_SEND, SRV, "7001", POOL4, &m, "DONE"],
    )
    .check();
    let st = lab.proc(lis).wait_exit(Duration::from_secs(12));
    let text = lab.proc(lis).stdout_text();
    assert!(
        st.map(|s| s.success()).unwrap_or(false),
        "the admitted datagram did not arrive: {text}"
    );
    assert!(
        text.lines()
            .any(|l| l == format!("from {SRV_V6} 7001 DONE")),
        "the client must get SRV's datagram from [{SRV_V6}]:7001: {text}"
    );
    assert!(
        !text.contains("FILTERED") && !text.contains("NOMAP"),
        "an unsolicited datagram reached the client:\n{text}"
    );
    let leaks = Pkt::all(&lab.tcpdump_lines(cap));
    assert!(
        leaks.is_empty(),
        "unsolicited packets reached the client's link:\n{}",
        show(&leaks)
    );
}

/// IPv4 TCP connect from argv1 to argv2:argv3 with a 1 s limit; prints the outcome.
const TCP_PROBE: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind((sys.argv[1], 0))
s.settimeout(1.0)
try:
    s.connect((sys.argv[2], int(sys.argv[3])))
    print("CONNECTED")
except socket.timeout:
    print("TIMEOUT")
except OSError as e:
    print("ERROR", e)
"#;

/// UDP to a closed port of SRV: SRV's ICMPv4 port unreachable (to pool4) reaches the client as
/// an ICMPv6 port unreachable from the pref64 address, and its connected socket gets
/// ECONNREFUSED.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat64_icmpv4_error_reaches_client_as_icmpv6() {
    let mut lab = nat64_lab(false);
    let (cli, srv, sd, cd) = (
        lab.cli.clone(),
        lab.srv.clone(),
        lab.srv_dev.clone(),
        lab.cli_dev.clone(),
    );
    let before = counter(&lab.stats(), "events", "icmp_errors_translated");
    let srv_cap = lab.tcpdump(&srv, &sd, "icmp");
    let cli_cap = lab.tcpdump(&cli, &cd, "icmp6 and ip6[40] == 1");
    // Nothing listens on UDP 9 in SRV.
    let r = lab.ns(&cli, 20, &["python3", "-c", ICMP_PROBE, SRV_V6, "9"]);
    assert!(
        r.ok() && r.stdout.contains("REFUSED"),
        "the ICMP port unreachable did not reach the client socket as ECONNREFUSED: {}\n{}",
        r.stdout,
        r.stderr
    );
    let on_srv = Pkt::all(&lab.tcpdump_lines(srv_cap));
    let on_cli = Pkt::all(&lab.tcpdump_lines(cli_cap));
    assert!(
        on_srv
            .iter()
            .any(|p| p.is(SRV, POOL4) && p.rest.contains(&format!("{SRV} udp port 9 unreachable"))),
        "SRV sent no ICMPv4 port unreachable to {POOL4}:\n{}",
        show(&on_srv)
    );
    assert!(
        on_cli.iter().any(|p| p.is(SRV_V6, CLI)
            && p.rest.contains("unreachable port")
            && p.rest.contains(&format!("{SRV_V6} udp port 9"))),
        "CLI got no ICMPv6 port unreachable from {SRV_V6} quoting its datagram:\n{}",
        show(&on_cli)
    );
    let after = counter(&lab.stats(), "events", "icmp_errors_translated");
    assert!(
        after > before,
        "icmp_errors_translated did not grow ({before} -> {after})"
    );
}

/// iperf3 TCP for 3 s from the client to SRV's pref64 address; SRV sees pool4 as the client.
/// On the TUN path the hosts keep Linux's offloads (TSO, GSO, GRO, partial checksums), so
/// TCP super-packets cross the engine whole (`[tun] offload`), IPv6 to IPv4.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat64_iperf3_tcp() {
    let mut lab = nat64_lab(false);
    let (cli, srv) = (lab.cli.clone(), lab.srv.clone());
    let tun_path = !fast_path() && !afxdp_wanted();
    if tun_path {
        let (gw, c, s) = (lab.gw.clone(), lab.cli_dev.clone(), lab.srv_dev.clone());
        let (gc, gs) = (lab.gw_cli_dev.clone(), lab.gw_srv_dev.clone());
        for (ns, dev) in [(&gw, &gc), (&cli, &c), (&gw, &gs), (&srv, &s)] {
            lab.offloads_on(ns, dev);
        }
    }
    let (j, sj) = lab.iperf3_tcp(&srv, SRV, &cli, SRV_V6);
    if tun_path {
        let st = lab.stats();
        assert!(
            counter(&st, "events", "super_packets") > 0,
            "no super-packet crossed whole: {st}"
        );
        assert_eq!(counter(&st, "drops", "unusable_offload"), 0, "{st}");
    }
    assert_eq!(
        j["start"]["connected"][0]["remote_host"].as_str(),
        Some(SRV_V6),
        "{}",
        j["start"]
    );
    assert_eq!(
        sj["start"]["connected"][0]["remote_host"].as_str(),
        Some(POOL4),
        "iperf3 server should see pool4 as the client: {}",
        sj["start"]
    );
    let srecv = sj["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    assert!(srecv > 0, "iperf3 server received nothing");
}

/// A SIIT lab (the client is SIIT_CLI, 198.19.1.5 by EAM; SRV routes 198.19.1.0/28 via GW).
fn siit_lab(extra_eam: &str) -> Topo64 {
    require_root_dns("NAT64");
    let mut lab = build_lab(SIIT_CLI);
    let srv = lab.srv.clone();
    lab.ip(&srv, &["route", "add", "198.19.1.0/28", "via", GW4]);
    let cfg = siit_config(&lab, extra_eam);
    start_xlat(&mut lab, &cfg, false);
    lab
}

/// RFC 7915 5.4: a ping from a client address SIIT cannot translate (CLI, on the client's /64
/// but outside its EAM /124 and the pref64) is answered by the translator with ICMPv6
/// Destination Unreachable, address unreachable, which ping reports; the drop is counted.
/// Then a reload gives it an EAM entry, and its pings go through.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn siit_untranslatable_source_gets_address_unreachable() {
    let lab = siit_lab("");
    let (cli, cd) = (lab.cli.clone(), lab.cli_dev.clone());
    lab.ip(
        &cli,
        &["addr", "add", &format!("{CLI}/64"), "dev", &cd, "nodad"],
    );
    let r = lab.ns(
        &cli,
        15,
        &["ping", "-6", "-n", "-c", "1", "-W", "3", "-I", CLI, SRV_V6],
    );
    assert!(
        r.stdout
            .contains("Destination unreachable: Address unreachable"),
        "ping from {CLI} should be told why:\n{}{}",
        r.stdout,
        r.stderr
    );
    let st = lab.stats();
    assert!(counter(&st, "drops", "untranslatable_address") >= 1, "{st}");
    assert!(counter(&st, "events", "icmp_errors_sent") >= 1, "{st}");

    // An EAM entry for it, added by a reload (all of [siit] changes live): the next ping is
    // translated (RFC 7757), and the entry's IPv4 side is routed into the tun.
    let srv = lab.srv.clone();
    lab.ip(&srv, &["route", "add", "198.19.1.16/32", "via", GW4]);
    let path = lab.dir.join("xlat.toml");
    let cfg = siit_config(
        &lab,
        r#", { ipv4 = "198.19.1.16/32", ipv6 = "2001:2:0:1::10/128" }"#,
    );
    std::fs::write(&path, cfg).unwrap();
    let r = lab.xlat_cmd(&["reload"]).check();
    assert!(r.stdout.contains("siit.eam"), "{}", r.stdout);
    let gw = lab.gw.clone();
    let routes = lab.ns_ok(&gw, &["ip", "-4", "route", "show"]).stdout;
    assert!(
        routes.lines().any(|l| l.starts_with("198.19.1.16 dev")),
        "{routes}"
    );
    lab.ping_all(&cli, 2, &["-6", "-I", CLI], SRV_V6);
}

/// SIIT with the pref64 for SRV and an EAM entry for the client: ping (and fragmented ping)
/// both ways, curl of 4 MiB from the IPv6 side, and an HTTP connection started from the IPv4
/// side. Each side sees the other's translated address on its wire and in its server log.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn siit_ping_both_ways_and_curl_from_each_side() {
    let mut lab = siit_lab("");
    let (cli, srv, sd, cd) = (
        lab.cli.clone(),
        lab.srv.clone(),
        lab.srv_dev.clone(),
        lab.cli_dev.clone(),
    );
    let (http4, blob4) = lab.serve_random_file(&srv, SRV, HTTP_PORT, BLOB_LEN);
    let (http6, blob6) = lab.serve_random_file(&cli, "::", 8081, BLOB_LEN);
    let srv_cap = lab.tcpdump(&srv, &sd, "icmp or (tcp and tcp[tcpflags] & tcp-syn != 0)");
    let cli_cap = lab.tcpdump(
        &cli,
        &cd,
        "(not tcp and not (icmp6 and ip6[40] >= 133)) or (tcp and ip6[53] & 2 != 0)",
    );

    // IPv6 -> IPv4.
    lab.ping_all(&cli, 2, &["-6"], SRV_V6);
    lab.ping_all(&cli, 2, &["-6", "-s", "4000"], SRV_V6);
    let (ip, got) = lab.curl(&cli, &format!("http://[{SRV_V6}]:{HTTP_PORT}/blob.bin"));
    assert_eq!(ip, SRV_V6);
    assert_same_file(&blob4, &got);
    // IPv4 -> IPv6: the connection starts on the IPv4 side.
    lab.ping_all(&srv, 2, &[], SIIT_CLI_V4);
    lab.ping_all(&srv, 2, &["-s", "4000"], SIIT_CLI_V4);
    let (ip, got) = lab.curl(&srv, &format!("http://{SIIT_CLI_V4}:8081/blob.bin"));
    assert_eq!(ip, SIIT_CLI_V4);
    assert_same_file(&blob6, &got);

    let on_srv = Pkt::all(&lab.tcpdump_lines(srv_cap));
    let on_cli = Pkt::all(&lab.tcpdump_lines(cli_cap));
    let count = |pkts: &[Pkt], src: &str, dst: &str, what: &str| {
        pkts.iter()
            .filter(|p| p.is(src, dst) && p.rest.contains(what))
            .count()
    };
    // SRV's wire: the client as 198.19.1.5 (EAM), both as source and as destination.
    assert_eq!(
        count(&on_srv, SIIT_CLI_V4, SRV, "ICMP echo request"),
        4,
        "SRV should see 4 echo requests from {SIIT_CLI_V4}:\n{}",
        show(&on_srv)
    );
    assert_eq!(
        count(&on_srv, SRV, SIIT_CLI_V4, "ICMP echo request"),
        4,
        "{}",
        show(&on_srv)
    );
    assert_eq!(
        count(&on_srv, SIIT_CLI_V4, SRV, "ICMP echo reply"),
        4,
        "SRV should get 4 echo replies from {SIIT_CLI_V4}:\n{}",
        show(&on_srv)
    );
    let foreign: Vec<Pkt> = on_srv
        .iter()
        .filter(|p| !(p.is(SIIT_CLI_V4, SRV) || p.is(SRV, SIIT_CLI_V4)))
        .cloned()
        .collect();
    assert!(
        foreign.is_empty(),
        "SRV saw other addresses than {SIIT_CLI_V4} <-> {SRV}:\n{}",
        show(&foreign)
    );
    // CLI's wire: SRV as its pref64 form, both ways.
    assert_eq!(
        count(&on_cli, SRV_V6, SIIT_CLI, "echo request"),
        4,
        "CLI should see 4 echo requests from {SRV_V6}:\n{}",
        show(&on_cli)
    );
    assert_eq!(
        count(&on_cli, SRV_V6, SIIT_CLI, "echo reply"),
        4,
        "{}",
        show(&on_cli)
    );
    assert!(
        on_cli
            .iter()
            .any(|p| p.is(SRV_V6, SIIT_CLI) && p.dst_port == Some(8081)),
        "CLI saw no SYN from {SRV_V6} to port 8081:\n{}",
        show(&on_cli)
    );
    assert!(
        on_srv
            .iter()
            .any(|p| p.is(SIIT_CLI_V4, SRV) && p.dst_port == Some(HTTP_PORT)),
        "SRV saw no SYN from {SIIT_CLI_V4} to port {HTTP_PORT}:\n{}",
        show(&on_srv)
    );

    // The servers' logs: each saw the other side's translated address.
    let log4 = lab.proc(http4).stderr_text();
    assert_eq!(
        http_clients(&log4, "/blob.bin"),
        vec![SIIT_CLI_V4.to_string()],
        "{log4}"
    );
    let log6 = lab.proc(http6).stderr_text();
    assert_eq!(
        http_clients(&log6, "/blob.bin"),
        vec![SRV_V6.to_string()],
        "{log6}"
    );
    // Stateless: no sessions.
    let st = lab.stats();
    assert!(counter(&st, "events", "ipv6_to_ipv4") > 0, "{st}");
    assert!(counter(&st, "events", "ipv4_to_ipv6") > 0, "{st}");
    assert_eq!(counter(&st, "events", "sessions_created"), 0, "{st}");
    if fast_path() {
        // Each file's data (4 MiB, ~2,900 segments) crossed XDP by its pair's recipe.
        assert!(xdp(&st, "xdp_siit_4to6") >= 2000, "{st}");
        assert!(xdp(&st, "xdp_siit_6to4") >= 2000, "{st}");
    }
}

/// SIIT with EAM entries for both sides (no pref64 address in use): SRV is 2001:2:0:6::2 to the
/// client, the client 198.19.1.5 to SRV. A TCP connection and pings started from each side.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn siit_eam_both_sides_connections_from_each_side() {
    let mut lab = siit_lab(r#", { ipv4 = "198.19.0.0/28", ipv6 = "2001:2:0:6::/124" }"#);
    let (cli, srv) = (lab.cli.clone(), lab.srv.clone());
    tcp_echo_servers(&mut lab);
    lab.ping_all(&cli, 2, &["-6"], SRV_EAM_V6);
    lab.ping_all(&srv, 2, &[], SIIT_CLI_V4);

    // From the IPv6 side: SRV's echo reports the EAM form of the client.
    tcp_echo_sees(
        &lab,
        &cli,
        &format!("TCP6:[{SRV_EAM_V6}]:7100"),
        "from-v6",
        SIIT_CLI_V4,
    );
    // From the IPv4 side: the client's echo reports the EAM form of SRV (EAM before pref64).
    tcp_echo_sees(
        &lab,
        &srv,
        &format!("TCP4:{SIIT_CLI_V4}:7100"),
        "from-v4",
        SRV_EAM_V6,
    );
}

/// Sends `msg` from `ns` over TCP to a `tcp_echo_servers` echo at socat address `to`; the echo
/// must come back and the server must have seen the connection come from `peer`.
fn tcp_echo_sees(lab: &Topo64, ns: &str, to: &str, msg: &str, peer: &str) {
    let r = lab.sh(ns, 15, &format!("echo {msg} | socat -T 5 -t 3 - {to}"));
    assert!(
        r.ok() && peer_addr(&r.stdout) == peer.parse().ok() && r.stdout.contains(msg),
        "TCP {msg} to {to}: {}\n{}",
        r.stdout,
        r.stderr
    );
}

/// The address of socat's "peer=ADDR" line (socat writes IPv6 ones in brackets, in full).
fn peer_addr(out: &str) -> Option<std::net::IpAddr> {
    let a = out.lines().find_map(|l| l.strip_prefix("peer="))?;
    a.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// TCP echo servers on port 7100 in SRV (IPv4) and CLI (IPv6) that first print the peer address.
fn tcp_echo_servers(lab: &mut Topo64) {
    let (cli, srv) = (lab.cli.clone(), lab.srv.clone());
    let p = lab.spawn(
        &srv,
        "tcp-echo-v4",
        &[
            "socat",
            &format!("TCP4-LISTEN:7100,bind={SRV},reuseaddr,fork"),
            "SYSTEM:echo peer=$SOCAT_PEERADDR; cat",
        ],
    );
    lab.wait_listening_on(&srv, "tcp", SRV, 7100, Some(p));
    let p = lab.spawn(
        &cli,
        "tcp-echo-v6",
        &[
            "socat",
            &format!("TCP6-LISTEN:7100,bind=[{SIIT_CLI}],reuseaddr,fork"),
            "SYSTEM:echo peer=$SOCAT_PEERADDR; cat",
        ],
    );
    lab.wait_listening_on(&cli, "tcp", SIIT_CLI, 7100, Some(p));
}

/// A static BIB entry (`[nat64] static_bib`, RFC 6146 1.2.2): an IPv4-only host opens a TCP
/// connection to pool4 port 7100 and reaches the IPv6-only server behind it, which sees the
/// IPv4 host's pref64 form; UDP to a port without an entry stays unanswered.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat64_static_bib_lets_ipv4_hosts_reach_an_ipv6_server() {
    require_root_dns("NAT64");
    let mut lab = build_lab(CLI);
    let cfg = nat64_config(&lab, false).replace(
        "filtering = \"address-dependent\"\n",
        &format!("filtering = \"address-dependent\"\nstatic_bib = [{{ proto = \"tcp\", ipv6 = \"[{CLI}]:7100\", ipv4 = \"{POOL4}:7100\" }}]\n"),
    );
    assert!(
        cfg.contains("static_bib"),
        "the config template changed:\n{cfg}"
    );
    start_xlat(&mut lab, &cfg, false);
    let (cli, srv) = (lab.cli.clone(), lab.srv.clone());
    let p = lab.spawn(
        &cli,
        "tcp-echo-v6",
        &[
            "socat",
            &format!("TCP6-LISTEN:7100,bind=[{CLI}],reuseaddr,fork"),
            "SYSTEM:echo peer=$SOCAT_PEERADDR; cat",
        ],
    );
    lab.wait_listening_on(&cli, "tcp", CLI, 7100, Some(p));
    tcp_echo_sees(&lab, &srv, &format!("TCP4:{POOL4}:7100"), "via-bib", SRV_V6);
    // The session it made is listed with the entry's endpoints.
    let listed = lab.sessions().iter().any(|s| {
        endpoint(s, "outside") == format!("{POOL4}:7100")
            && endpoint(s, "inside") == format!("[{CLI}]:7100")
    });
    assert!(
        listed,
        "no session of the static BIB entry in show sessions"
    );
    // Not forwarded: a connection to another port gets nothing.
    let r = lab.sh(
        &srv,
        10,
        &format!("echo x | socat -T 2 -t 2 - TCP4:{POOL4}:7101,connect-timeout=2"),
    );
    assert!(
        !r.ok() || !r.stdout.contains("peer="),
        "port 7101 answered: {}",
        r.stdout
    );
}

/// `xlat trace` on the NAT64: a ping from the IPv6 client traced by its IPv6 address -- the
/// request leaves translated to IPv4 from the pool4 address, and the reply comes back to the
/// client's IPv6 address from the server's pref64 form (RFC 6146 3.5.3, RFC 6052).
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat64_trace_shows_a_ping_translated_both_ways() {
    let mut lab = nat64_lab(false);
    let (cli, gw) = (lab.cli.clone(), lab.gw.clone());
    let json = lab.trace_while(
        &gw,
        &["--count", "2", "--inside", CLI, "--proto", "icmp", "--json"],
        |l| {
            let _ = l.ns(&cli, 5, &["ping", "-6", "-c", "1", "-W", "1", SRV_V6]);
        },
    );
    eprintln!("{json}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("trace JSON");
    let recs = v.as_array().expect("a list of records");
    assert_eq!(recs.len(), 2, "{json}");
    let addr =
        |r: &serde_json::Value, side: &str, f: &str| r[side][f].as_str().unwrap_or("").to_string();
    let req = recs
        .iter()
        .find(|r| r["direction"] == "outbound")
        .unwrap_or_else(|| panic!("no outbound record:\n{json}"));
    assert_eq!(req["translator"], "nat64", "{json}");
    assert_eq!(req["verdict"], "forwarded", "{json}");
    assert_eq!(
        (addr(req, "before", "src"), addr(req, "before", "dst")),
        (CLI.to_string(), SRV_V6.to_string()),
        "{json}"
    );
    assert_eq!(
        (addr(req, "after", "src"), addr(req, "after", "dst")),
        (POOL4.to_string(), SRV.to_string()),
        "{json}"
    );
    // The other record: the next request, or the reply on its way back.
    let other = recs
        .iter()
        .find(|r| !std::ptr::eq(*r, req))
        .expect("two records");
    assert_eq!(other["translator"], "nat64", "{json}");
    assert_eq!(other["verdict"], "forwarded", "{json}");
    if other["direction"] == "inbound" {
        assert_eq!(other["lookup"], "found", "{json}");
        assert_eq!(
            (addr(other, "before", "src"), addr(other, "before", "dst")),
            (SRV.to_string(), POOL4.to_string()),
            "{json}"
        );
        assert_eq!(
            (addr(other, "after", "src"), addr(other, "after", "dst")),
            (SRV_V6.to_string(), CLI.to_string()),
            "{json}"
        );
    }
}

/// The `peer=ADDR port=PORT` lines the UDP echo server answers with.
fn peers(out: &str) -> Vec<(String, u16)> {
    out.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let a = it.next()?.strip_prefix("peer=")?.to_string();
            let p = it.next()?.strip_prefix("port=")?.parse().ok()?;
            Some((a, p))
        })
        .collect()
}

/// Deterministic NAT64 (`nat64.deterministic`, RFC 7422 2's arithmetic over IPv6
/// subscribers): 2001:2:0:1::/120 is 256 subscribers on the one pool4 address, 252 ports
/// each, so CLI (2001:2:0:1::10, the 17th) owns 5056-5307. A UDP flow from a port in the
/// range keeps it, one from outside the range leaves from inside it, a source outside
/// nat64.inside is not translated (`not_ours`), and `xlat lookup -c` names CLI from the
/// outside endpoint SRV saw, with no log.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn deterministic_nat64_ports_come_from_the_subscribers_range_and_lookup_names_it() {
    require_root_dns("NAT64");
    let mut lab = build_lab(CLI);
    let cfg = nat64_config(&lab, false).replace(
        "ports = \"1024-65535\"\n",
        "ports = \"1024-65535\"\ndeterministic = true\ninside = [\"2001:2:0:1::/120\"]\n",
    );
    assert!(cfg.contains("deterministic = true"), "{cfg}");
    start_xlat(&mut lab, &cfg, false);
    let (cli, srv, cd) = (lab.cli.clone(), lab.srv.clone(), lab.cli_dev.clone());
    let (first, last) = (1024 + 16 * 252, 1024 + 17 * 252 - 1);
    lab.udp_echo(&srv, SRV, 7000);
    let r = lab.ns(
        &cli,
        30,
        &[
            "sh",
            "-c",
            &format!(
                "echo kept | socat -T 5 -t 3 - UDP6:[{SRV_V6}]:7000,bind=[{CLI}]:5100,reuseaddr && \
                 echo moved | socat -T 5 -t 3 - UDP6:[{SRV_V6}]:7000,bind=[{CLI}]:40000,reuseaddr"
            ),
        ],
    );
    assert!(r.ok(), "socat clients failed: {}\n{}", r.stdout, r.stderr);
    let seen = peers(&r.stdout);
    assert_eq!(seen.len(), 2, "expected two replies: {:?}", r.stdout);
    assert_eq!(
        seen[0],
        (POOL4.to_string(), 5100),
        "a port in the range is kept"
    );
    assert_eq!(seen[1].0, POOL4);
    let moved = seen[1].1;
    assert!(
        (first..=last).contains(&moved),
        "port 40000 must be mapped into CLI's range {first}-{last}, got {moved}"
    );

    // A source in CLI's /64 but outside nat64.inside: no range, not translated.
    let outsider = "2001:2:0:1::1:5";
    lab.ip(
        &cli,
        &[
            "addr",
            "add",
            &format!("{outsider}/64"),
            "dev",
            &cd,
            "nodad",
        ],
    );
    let before = counter(&lab.stats(), "drops", "not_ours");
    let r = lab.ns(
        &cli,
        20,
        &[
            "sh",
            "-c",
            &format!("echo stray | socat -T 2 -t 1 - UDP6:[{SRV_V6}]:7000,bind=[{outsider}]:5200"),
        ],
    );
    assert!(
        peers(&r.stdout).is_empty(),
        "a source outside nat64.inside was translated: {}",
        r.stdout
    );
    let mut after = before;
    let grew = poll(Duration::from_secs(5), Duration::from_millis(100), || {
        after = counter(&lab.stats(), "drops", "not_ours");
        after > before
    });
    assert!(grew, "not_ours did not grow: {before} -> {after}");

    // The answer from the configuration alone.
    let r = std::process::Command::new(common::xlat_bin())
        .args(["lookup", "-c"])
        .arg(lab.dir.join("xlat.toml"))
        .args(["--outside", &format!("{POOL4}:{moved}")])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&r.stdout);
    assert!(
        r.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(said.contains(&format!("is {CLI} ")), "{said}");
}
