//! End-to-end DNS64 (RFC 6147): a real authoritative DNS server (unbound) on an IPv4-only
//! network, the xlat DNS64 between it and an IPv6-only client, and `dig` as the client.
//!
//! ```text
//!   CLI 2001:2:0:1::10/64 ---- [GW] 2001:2:0:1::1 (DNS64, :53)   198.19.0.1/24 ---- SRV 198.19.0.2 (unbound)
//! ```
//!
//! unbound serves test.example. and 19.198.in-addr.arpa. from zone files (auth-zone):
//! v4only (A 198.19.0.5, TTL 3600), dual (A and AAAA 2001:db8::6), alias -> mid -> v4only
//! (a CNAME chain), and nothing else (NXDOMAIN). SOA MINIMUM 300.
//!
//! Every test makes its own uniquely named namespaces and removes them on drop, also on
//! failure; every command runs under `timeout`, every wait is bounded. Needs root, unbound and
//! dig (Debian: unbound bind9-dnsutils): `#[ignore]`d, run by scripts/test.sh
//! (`--include-ignored`), failing when run without them.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::topo64::{GW6, SRV};
use common::{require_root_dns, run_host, xlat_bin, ProcId, Run, Topo64};

const CLI_ADDR: &str = "2001:2:0:1::10";
/// The DNS64 listens on the gateway's address on the client's link.
const DNS64_ADDR: &str = GW6;
const SRV_V4: &str = SRV;
const PREFIX: &str = "2001:2:0:64::/96";

const ZONE: &str = "$ORIGIN test.example.
@        3600 IN SOA ns.test.example. hostmaster.test.example. 1 3600 600 86400 300
@        3600 IN NS  ns.test.example.
ns       3600 IN A   198.19.0.2
v4only   3600 IN A   198.19.0.5
dual     300  IN A   198.19.0.6
dual     300  IN AAAA 2001:db8::6
alias    300  IN CNAME mid
mid      300  IN CNAME v4only
";

const REVERSE_ZONE: &str = "$ORIGIN 19.198.in-addr.arpa.
@        3600 IN SOA ns.test.example. hostmaster.test.example. 1 3600 600 86400 300
@        3600 IN NS  ns.test.example.
5.0      600  IN PTR v4only.test.example.
";

/// The CLI, GW and SRV namespaces with unbound in SRV; `None` when the tests cannot run here.
fn dns_lab() -> Topo64 {
    require_root_dns("DNS64");
    let mut lab = Topo64::new('d', CLI_ADDR, false);
    let srv = lab.srv.clone();
    lab.start_unbound(
        &srv,
        SRV_V4,
        &[
            ("test.example.", "test.example.zone", ZONE),
            ("19.198.in-addr.arpa.", "rev.zone", REVERSE_ZONE),
        ],
    );
    lab
}

/// Writes `config` and starts `xlat ARGS -c FILE` in GW, waiting until :53 answers.
fn start_xlat(lab: &mut Topo64, config: &str, args: &[&str]) -> ProcId {
    let (gw, path) = (lab.gw.clone(), lab.dir.join("xlat.toml"));
    let k = lab.spawn_xlat(&gw, "xlat", args, &path, config);
    lab.wait_listening_on(&gw, "udp", DNS64_ADDR, 53, Some(k));
    lab.wait_listening_on(&gw, "tcp", DNS64_ADDR, 53, Some(k));
    k
}

fn config() -> String {
    format!(
        "[dns64]\nlisten = [\"[{DNS64_ADDR}]:53\"]\nupstream = [\"{SRV_V4}:53\"]\nprefix = \"{PREFIX}\"\n"
    )
}

/// `dig @DNS64 ARGS` from the IPv6-only client.
fn dig(lab: &Topo64, args: &[&str]) -> Dig {
    let server = format!("@{DNS64_ADDR}");
    let mut v = vec!["dig", "+time=5", "+tries=1", &server];
    v.extend_from_slice(args);
    Dig::parse(lab.ns(&lab.cli, 15, &v))
}

/// The parts of dig's output the tests look at.
#[derive(Debug)]
struct Dig {
    status: String,
    flags: Vec<String>,
    /// (name, ttl, type, data) of each answer record.
    answers: Vec<(String, u32, String, String)>,
    raw: String,
}

impl Dig {
    fn parse(r: Run) -> Dig {
        assert!(r.ok(), "dig failed: {}\n{}\n{}", r.cmd, r.stdout, r.stderr);
        let out = r.stdout;
        let status = out
            .lines()
            .find_map(|l| l.split_once("status: "))
            .map(|(_, s)| s.split(',').next().unwrap_or("").to_string())
            .unwrap_or_default();
        let flags = out
            .lines()
            .find_map(|l| l.strip_prefix(";; flags: "))
            .map(|l| {
                l.split(';')
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let mut answers = Vec::new();
        let mut in_answer = false;
        for l in out.lines() {
            if l.starts_with(";; ANSWER SECTION:") {
                in_answer = true;
                continue;
            }
            if in_answer {
                if l.trim().is_empty() {
                    break;
                }
                let w: Vec<&str> = l.split_whitespace().collect();
                assert!(w.len() >= 5, "odd answer line {l:?} in\n{out}");
                answers.push((
                    w[0].to_string(),
                    w[1].parse().unwrap(),
                    w[3].to_string(),
                    w[4..].join(" "),
                ));
            }
        }
        Dig {
            status,
            flags,
            answers,
            raw: out,
        }
    }

    fn of_type(&self, t: &str) -> Vec<(String, u32, String)> {
        self.answers
            .iter()
            .filter(|a| a.2 == t)
            .map(|a| (a.0.clone(), a.1, a.3.clone()))
            .collect()
    }
}

fn rr(name: &str, ttl: u32, data: &str) -> (String, u32, String) {
    (name.to_string(), ttl, data.to_string())
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn dns64_against_unbound_over_udp_and_tcp() {
    let mut lab = dns_lab();
    let x = start_xlat(&mut lab, &config(), &["dns64"]);

    for transport in ["+notcp", "+tcp"] {
        // RFC 6147 5.1.6/5.1.7: an A-only name gets a synthesized AAAA in the pref64, with
        // TTL min(A TTL 3600, SOA of the negative answer: 300).
        let d = dig(&lab, &[transport, "AAAA", "v4only.test.example."]);
        assert_eq!(d.status, "NOERROR", "{}", d.raw);
        assert_eq!(
            d.of_type("AAAA"),
            vec![rr("v4only.test.example.", 300, "2001:2:0:64::c613:5")],
            "{transport}: {}",
            d.raw
        );
        assert!(!d.flags.contains(&"aa".to_string()), "{}", d.raw);
        assert!(!d.flags.contains(&"ad".to_string()), "{}", d.raw);

        // RFC 6147 5.1.1: a name with AAAA records gets them, not a synthesized one.
        let d = dig(&lab, &[transport, "AAAA", "dual.test.example."]);
        assert_eq!(
            d.of_type("AAAA"),
            vec![rr("dual.test.example.", 300, "2001:db8::6")],
            "{}",
            d.raw
        );

        // RFC 6147 5.1.5: the CNAME chain stays; the AAAA is made at its end. unbound puts
        // no SOA in this NODATA-after-CNAME answer, so the cap is 600 s (5.1.7).
        let d = dig(&lab, &[transport, "AAAA", "alias.test.example."]);
        assert_eq!(
            d.of_type("CNAME"),
            vec![
                rr("alias.test.example.", 300, "mid.test.example."),
                rr("mid.test.example.", 300, "v4only.test.example.")
            ],
            "{}",
            d.raw
        );
        assert_eq!(
            d.of_type("AAAA"),
            vec![rr("v4only.test.example.", 600, "2001:2:0:64::c613:5")],
            "{}",
            d.raw
        );

        // RFC 6147 5.3.3: A queries pass through unchanged (authoritative answer, AA set).
        let d = dig(&lab, &[transport, "A", "v4only.test.example."]);
        assert_eq!(
            d.of_type("A"),
            vec![rr("v4only.test.example.", 3600, "198.19.0.5")],
            "{}",
            d.raw
        );
        assert!(d.flags.contains(&"aa".to_string()), "{}", d.raw);

        // RFC 6147 5.1.2: NXDOMAIN passes.
        let d = dig(&lab, &[transport, "AAAA", "nx.test.example."]);
        assert_eq!(d.status, "NXDOMAIN", "{}", d.raw);
        assert!(d.answers.is_empty(), "{}", d.raw);

        // RFC 6147 5.3.1: the PTR of a synthesized address: a CNAME to the in-addr.arpa
        // name, then its PTR.
        let d = dig(&lab, &[transport, "-x", "2001:2:0:64::c613:5"]);
        assert_eq!(d.status, "NOERROR", "{}", d.raw);
        assert_eq!(
            d.of_type("CNAME"),
            vec![rr(
                "5.0.0.0.3.1.6.c.0.0.0.0.0.0.0.0.4.6.0.0.0.0.0.0.2.0.0.0.1.0.0.2.ip6.arpa.",
                600,
                "5.0.19.198.in-addr.arpa."
            )],
            "{}",
            d.raw
        );
        assert_eq!(
            d.of_type("PTR"),
            vec![rr("5.0.19.198.in-addr.arpa.", 600, "v4only.test.example.")],
            "{}",
            d.raw
        );

        // RFC 6147 5.5 item 3: CD and DO set: no synthesis, the data as it is.
        let d = dig(
            &lab,
            &[transport, "+cd", "+dnssec", "AAAA", "v4only.test.example."],
        );
        assert_eq!(d.status, "NOERROR", "{}", d.raw);
        assert!(d.of_type("AAAA").is_empty(), "{}", d.raw);
    }

    // SIGHUP reads [dns64] again: a new prefix answers at once.
    let path = lab.dir.join("xlat.toml");
    std::fs::write(&path, config().replace(PREFIX, "2001:2:0:65::/96")).unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(lab.proc(x).pid(), libc::SIGHUP);
    }
    let reloaded = common::poll(Duration::from_secs(5), Duration::from_millis(50), || {
        lab.proc(x)
            .stderr_text()
            .contains("SIGHUP: configuration reloaded")
    });
    assert!(reloaded, "{}", lab.proc(x).stderr_text());
    let d = dig(&lab, &["AAAA", "v4only.test.example."]);
    assert_eq!(
        d.of_type("AAAA").first().map(|r| r.2.clone()),
        Some("2001:2:0:65::c613:5".to_string()),
        "{}",
        d.raw
    );

    // SIGTERM: the proxy stops and exits 0.
    let st = lab.proc(x).stop_with(libc::SIGTERM, Duration::from_secs(5));
    assert!(
        st.is_some_and(|s| s.success()),
        "xlat dns64 did not exit cleanly: {st:?}\n{}",
        lab.proc(x).stderr_text()
    );
    assert!(
        lab.proc(x).stderr_text().contains("dns64 stopped"),
        "{}",
        lab.proc(x).stderr_text()
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn xlat_run_serves_dns64_and_reports_its_counters() {
    let mut lab = dns_lab();
    let sock = lab.socket.display().to_string();
    let cfg = format!(
        "[tun]\nname = \"{id}t\"\nauto_routes = false\n\n[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100/32\"]\n\n[control]\nsocket = \"{sock}\"\n\n[metrics]\nlisten = \"127.0.0.1:9641\"\n\n{dns64}",
        id = lab.id,
        dns64 = config()
    );
    start_xlat(&mut lab, &cfg, &["run"]);

    let d = dig(&lab, &["AAAA", "v4only.test.example."]);
    assert_eq!(
        d.of_type("AAAA"),
        vec![rr("v4only.test.example.", 300, "2001:2:0:64::c613:5")],
        "{}",
        d.raw
    );
    let d = dig(&lab, &["+tcp", "MX", "v4only.test.example."]);
    assert_eq!(d.status, "NOERROR", "{}", d.raw);

    let r = run_host(
        15,
        &[xlat_bin(), "show", "stats", "--json", "--socket", &sock],
    )
    .check();
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let c = &v["dns64"];
    assert_eq!(c["queries"], 2, "{}", r.stdout);
    assert_eq!(c["tcp_queries"], 1, "{}", r.stdout);
    assert_eq!(c["synthesized"], 1, "{}", r.stdout);
    assert_eq!(c["passthrough"], 1, "{}", r.stdout);
    assert_eq!(c["upstream_errors"], 0, "{}", r.stdout);
    assert_eq!(c["malformed"], 0, "{}", r.stdout);
    // And so does Prometheus (docs/METRICS.md: xlat_dns64_*_total).
    let m = lab.http_get(&lab.gw, "http://127.0.0.1:9641/metrics");
    assert!(m.ok(), "GET /metrics: {}", m.stderr);
    for (series, want) in [
        ("xlat_dns64_queries_total", 2),
        ("xlat_dns64_tcp_queries_total", 1),
        ("xlat_dns64_synthesized_total", 1),
        ("xlat_dns64_upstream_errors_total", 0),
    ] {
        assert!(
            m.stdout.lines().any(|l| l == format!("{series} {want}")),
            "{series} is not {want}:\n{}",
            m.stdout
        );
    }
    // The text form ends with the same counters.
    let r = run_host(15, &[xlat_bin(), "show", "stats", "--socket", &sock]).check();
    let tail = r.stdout.split_once("DNS64\n").map(|(_, t)| t).unwrap_or("");
    assert!(
        tail.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["synthesized", "1"]),
        "{}",
        r.stdout
    );
}

/// The zone of the second upstream: the same names, v4only at another address, so an
/// answer tells which upstream gave it.
const ZONE2: &str = "$ORIGIN test.example.
@        3600 IN SOA ns.test.example. hostmaster.test.example. 1 3600 600 86400 300
@        3600 IN NS  ns.test.example.
ns       3600 IN A   198.19.0.2
v4only   3600 IN A   198.19.0.7
";

/// `xlat reload` changes `[dns64]` in `xlat run` live: the upstream (answers come from the
/// new resolver), the listen addresses (an added port answers, a removed one does not); a
/// listen address the host does not have refuses the reload (exit 2, naming
/// `dns64.listen[i]`) and the running DNS64 keeps answering.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn xlat_run_reload_changes_the_dns64_upstream_and_listen_addresses() {
    let mut lab = dns_lab();
    // A second resolver: unbound on SRV port 5353 with ZONE2.
    let srv = lab.srv.clone();
    let d = lab.dir.display().to_string();
    std::fs::write(lab.dir.join("test2.zone"), ZONE2).unwrap();
    let conf = common::unbound_conf(&d, SRV_V4, &[("test.example.", "test2.zone")])
        .replace("port: 53\n", "port: 5353\n")
        .replace("unbound.pid", "unbound2.pid");
    let conf_path = lab.dir.join("unbound2.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let u2 = lab.spawn(
        &srv,
        "unbound2",
        &["unbound", "-d", "-c", &conf_path.display().to_string()],
    );
    lab.wait_listening_on(&srv, "udp", SRV_V4, 5353, Some(u2));

    let sock = lab.socket.display().to_string();
    let id = lab.id.clone();
    let cfg = |listen: &str, upstream: &str| {
        format!(
            "[tun]\nname = \"{id}t\"\nauto_routes = false\n\n[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100/32\"]\n\n[control]\nsocket = \"{sock}\"\n\n[dns64]\nlisten = [{listen}]\nupstream = [\"{upstream}\"]\nprefix = \"{PREFIX}\"\n",
        )
    };
    let on53 = format!("\"[{DNS64_ADDR}]:53\"");
    let both = format!("\"[{DNS64_ADDR}]:53\", \"[{DNS64_ADDR}]:5300\"");
    let first = cfg(&on53, &format!("{SRV_V4}:53"));
    start_xlat(&mut lab, &first, &["run"]);
    let path = lab.dir.join("xlat.toml");
    let reload = || run_host(20, &[xlat_bin(), "reload", "--socket", &sock]);
    let v4only = |lab: &Topo64, port: &str| {
        let d = dig(lab, &["-p", port, "AAAA", "v4only.test.example."]);
        assert_eq!(d.status, "NOERROR", "{}", d.raw);
        d.of_type("AAAA")
            .into_iter()
            .map(|(_, _, a)| a)
            .collect::<Vec<_>>()
    };
    assert_eq!(v4only(&lab, "53"), vec!["2001:2:0:64::c613:5"]);

    // The upstream moves to the second resolver and a listen port is added.
    std::fs::write(&path, cfg(&both, &format!("{SRV_V4}:5353"))).unwrap();
    let r = reload().check();
    assert!(
        r.stdout.contains("dns64.upstream") && r.stdout.contains("dns64.listen"),
        "{}",
        r.stdout
    );
    assert_eq!(v4only(&lab, "53"), vec!["2001:2:0:64::c613:7"]);
    assert_eq!(v4only(&lab, "5300"), vec!["2001:2:0:64::c613:7"]);
    let d = dig(
        &lab,
        &["+tcp", "-p", "5300", "AAAA", "v4only.test.example."],
    );
    assert_eq!(d.of_type("AAAA").len(), 1, "{}", d.raw);

    // An address GW does not have: refused, nothing changes.
    let missing = format!("\"[{DNS64_ADDR}]:53\", \"[2001:2:0:1::99]:53\"");
    std::fs::write(&path, cfg(&missing, &format!("{SRV_V4}:53"))).unwrap();
    let bad = reload();
    assert_eq!(bad.status.code(), Some(2), "{}\n{}", bad.stdout, bad.stderr);
    assert!(
        bad.stderr.contains("dns64.listen[1]") && bad.stderr.contains("2001:2:0:1::99"),
        "{}",
        bad.stderr
    );
    assert_eq!(v4only(&lab, "53"), vec!["2001:2:0:64::c613:7"]);
    assert_eq!(v4only(&lab, "5300"), vec!["2001:2:0:64::c613:7"]);

    // Back to the first resolver on port 53 alone: 5300 stops answering.
    std::fs::write(&path, &first).unwrap();
    reload().check();
    assert_eq!(v4only(&lab, "53"), vec!["2001:2:0:64::c613:5"]);
    let server = format!("@{DNS64_ADDR}");
    let gone = lab.ns(
        &lab.cli,
        15,
        &[
            "dig",
            "+time=1",
            "+tries=1",
            &server,
            "-p",
            "5300",
            "AAAA",
            "v4only.test.example.",
        ],
    );
    assert!(
        !gone.stdout.contains("ANSWER SECTION"),
        "the removed port still answers: {}",
        gone.stdout
    );
}
