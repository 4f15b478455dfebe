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
//! dig (Debian: unbound bind9-dnsutils); skipped when not root unless CI or
//! XLAT_E2E_REQUIRED is set.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{can_run, poll, run_host, xlat_bin, Proc, Run};

const CLI_ADDR: &str = "2001:2:0:1::10";
const DNS64_ADDR: &str = "2001:2:0:1::1";
const GW_V4: &str = "198.19.0.1";
const SRV_V4: &str = "198.19.0.2";
const PREFIX: &str = "2001:2:0:64::/96";

static COUNTER: AtomicU32 = AtomicU32::new(0);

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

/// True when the DNS tools are there too; panics with what to install when root but missing.
fn dns_tools() -> bool {
    if !can_run() {
        return false;
    }
    let missing: Vec<&str> = ["unbound", "dig"]
        .into_iter()
        .filter(|t| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {t} >/dev/null 2>&1")])
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "DNS64 end-to-end tests need {missing:?}: apt-get install unbound bind9-dnsutils"
    );
    true
}

/// Three namespaces, unbound in SRV; torn down on drop.
struct Lab {
    id: String,
    cli: String,
    gw: String,
    srv: String,
    dir: PathBuf,
    procs: Vec<Proc>,
    namespaces: Vec<String>,
}

impl Lab {
    fn new() -> Lab {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let id = format!("x{:x}d{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("xlat-e2e-{id}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let mut lab = Lab {
            cli: format!("{id}-cli"),
            gw: format!("{id}-gw"),
            srv: format!("{id}-srv"),
            id,
            dir,
            procs: Vec::new(),
            namespaces: Vec::new(),
        };
        lab.build();
        lab.start_unbound();
        lab
    }

    fn ip(&self, ns: &str, args: &[&str]) {
        let mut v = vec!["ip", "-n", ns];
        v.extend_from_slice(args);
        run_host(10, &v).check();
    }

    fn build(&mut self) {
        for ns in [self.cli.clone(), self.gw.clone(), self.srv.clone()] {
            let _ = run_host(10, &["ip", "netns", "del", &ns]);
            run_host(10, &["ip", "netns", "add", &ns]).check();
            self.namespaces.push(ns.clone());
            self.ip(&ns, &["link", "set", "lo", "up"]);
        }
        let (c, gc, gs, s) = (
            format!("{}c", self.id),
            format!("{}g", self.id),
            format!("{}h", self.id),
            format!("{}s", self.id),
        );
        // CLI <-> GW: IPv6 only. nodad: the addresses are usable at once.
        self.ip(
            &self.gw,
            &[
                "link", "add", "name", &gc, "type", "veth", "peer", "name", &c, "netns", &self.cli,
            ],
        );
        self.ip(
            &self.gw,
            &[
                "addr",
                "add",
                &format!("{DNS64_ADDR}/64"),
                "dev",
                &gc,
                "nodad",
            ],
        );
        self.ip(
            &self.cli,
            &["addr", "add", &format!("{CLI_ADDR}/64"), "dev", &c, "nodad"],
        );
        // GW <-> SRV: IPv4 only.
        self.ip(
            &self.gw,
            &[
                "link", "add", "name", &gs, "type", "veth", "peer", "name", &s, "netns", &self.srv,
            ],
        );
        self.ip(
            &self.gw,
            &["addr", "add", &format!("{GW_V4}/24"), "dev", &gs],
        );
        self.ip(
            &self.srv,
            &["addr", "add", &format!("{SRV_V4}/24"), "dev", &s],
        );
        for (ns, dev) in [
            (self.gw.clone(), gc),
            (self.cli.clone(), c),
            (self.gw.clone(), gs),
            (self.srv.clone(), s),
        ] {
            self.ip(&ns, &["link", "set", &dev, "up"]);
        }
    }

    fn spawn(&mut self, ns: &str, name: &str, args: &[&str]) -> usize {
        let k = self.procs.len();
        let stdout = self.dir.join(format!("{k:02}-{name}.out"));
        let stderr = self.dir.join(format!("{k:02}-{name}.err"));
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout).unwrap())
            .stderr(fs::File::create(&stderr).unwrap())
            .env("RUST_LOG", "info")
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {args:?} in {ns}: {e}"));
        self.procs.push(Proc {
            name: name.to_string(),
            child,
            stdout,
            stderr,
            status: None,
        });
        k
    }

    /// Waits (10 s at most) until `ns` has a `proto` socket on `addr`:53; panics with the
    /// owner's output if it exits first.
    fn wait_port53(&mut self, ns: &str, proto: &str, addr: &str, owner: usize) {
        let flag = if proto == "udp" { "-Hlun" } else { "-Hltn" };
        let ns = ns.to_string();
        let ready = poll(Duration::from_secs(10), Duration::from_millis(50), || {
            if self.procs[owner].try_status().is_some() {
                return true;
            }
            let r = ns_run(&ns, 5, &["ss", flag, "sport = :53"]);
            r.ok() && r.stdout.contains(addr)
        });
        let p = &mut self.procs[owner];
        if let Some(st) = p.try_status() {
            panic!(
                "{} exited ({st}) before listening:\n{}\n{}",
                p.name,
                p.stdout_text(),
                p.stderr_text()
            );
        }
        assert!(
            ready,
            "{} not listening on {proto} {addr}:53 after 10 s",
            p.name
        );
    }

    fn start_unbound(&mut self) {
        let d = self.dir.display().to_string();
        fs::write(self.dir.join("test.example.zone"), ZONE).unwrap();
        fs::write(self.dir.join("rev.zone"), REVERSE_ZONE).unwrap();
        let conf = common::unbound_conf(
            &d,
            SRV_V4,
            &[
                ("test.example.", "test.example.zone"),
                ("19.198.in-addr.arpa.", "rev.zone"),
            ],
        );
        let path = self.dir.join("unbound.conf");
        fs::write(&path, conf).unwrap();
        let srv = self.srv.clone();
        let p = self.spawn(
            &srv,
            "unbound",
            &["unbound", "-d", "-c", &path.display().to_string()],
        );
        self.wait_port53(&srv, "udp", SRV_V4, p);
        self.wait_port53(&srv, "tcp", SRV_V4, p);
    }

    /// Writes `config` and starts `xlat ARGS -c FILE` in GW, waiting until :53 answers.
    fn start_xlat(&mut self, config: &str, args: &[&str]) -> usize {
        let path = self.dir.join("xlat.toml");
        fs::write(&path, config).unwrap();
        let p = path.display().to_string();
        let mut v = vec![xlat_bin()];
        v.extend_from_slice(args);
        v.extend_from_slice(&["-c", &p]);
        let gw = self.gw.clone();
        let k = self.spawn(&gw, "xlat", &v);
        self.wait_port53(&gw, "udp", DNS64_ADDR, k);
        self.wait_port53(&gw, "tcp", DNS64_ADDR, k);
        k
    }

    fn config(&self) -> String {
        format!(
            "[dns64]\nlisten = [\"[{DNS64_ADDR}]:53\"]\nupstream = [\"{SRV_V4}:53\"]\nprefix = \"{PREFIX}\"\n"
        )
    }

    /// `dig @DNS64 ARGS` from the IPv6-only client.
    fn dig(&self, args: &[&str]) -> Dig {
        let server = format!("@{DNS64_ADDR}");
        let mut v = vec!["dig", "+time=5", "+tries=1", &server];
        v.extend_from_slice(args);
        let r = ns_run(&self.cli, 15, &v);
        Dig::parse(r)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed {
            eprintln!(
                "==== dns64 e2e {} failed; logs in {}",
                self.id,
                self.dir.display()
            );
            for p in &self.procs {
                eprintln!("---- {} stderr\n{}", p.name, p.stderr_text());
                eprintln!("---- {} stdout\n{}", p.name, p.stdout_text());
            }
        }
        for p in self.procs.iter_mut().rev() {
            p.stop_with(libc::SIGTERM, Duration::from_secs(3));
        }
        for ns in self.namespaces.iter().rev() {
            common::destroy_ns(ns);
        }
        if !failed {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn ns_run(ns: &str, secs: u64, args: &[&str]) -> Run {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    run_host(secs, &v)
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
fn dns64_against_unbound_over_udp_and_tcp() {
    if !dns_tools() {
        return;
    }
    let mut lab = Lab::new();
    let cfg = lab.config();
    let x = lab.start_xlat(&cfg, &["dns64"]);

    for transport in ["+notcp", "+tcp"] {
        // RFC 6147 5.1.6/5.1.7: an A-only name gets a synthesized AAAA in the pref64, with
        // TTL min(A TTL 3600, SOA of the negative answer: 300).
        let d = lab.dig(&[transport, "AAAA", "v4only.test.example."]);
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
        let d = lab.dig(&[transport, "AAAA", "dual.test.example."]);
        assert_eq!(
            d.of_type("AAAA"),
            vec![rr("dual.test.example.", 300, "2001:db8::6")],
            "{}",
            d.raw
        );

        // RFC 6147 5.1.5: the CNAME chain stays; the AAAA is made at its end. unbound puts
        // no SOA in this NODATA-after-CNAME answer, so the cap is 600 s (5.1.7).
        let d = lab.dig(&[transport, "AAAA", "alias.test.example."]);
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
        let d = lab.dig(&[transport, "A", "v4only.test.example."]);
        assert_eq!(
            d.of_type("A"),
            vec![rr("v4only.test.example.", 3600, "198.19.0.5")],
            "{}",
            d.raw
        );
        assert!(d.flags.contains(&"aa".to_string()), "{}", d.raw);

        // RFC 6147 5.1.2: NXDOMAIN passes.
        let d = lab.dig(&[transport, "AAAA", "nx.test.example."]);
        assert_eq!(d.status, "NXDOMAIN", "{}", d.raw);
        assert!(d.answers.is_empty(), "{}", d.raw);

        // RFC 6147 5.3.1: the PTR of a synthesized address: a CNAME to the in-addr.arpa
        // name, then its PTR.
        let d = lab.dig(&[transport, "-x", "2001:2:0:64::c613:5"]);
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
        let d = lab.dig(&[transport, "+cd", "+dnssec", "AAAA", "v4only.test.example."]);
        assert_eq!(d.status, "NOERROR", "{}", d.raw);
        assert!(d.of_type("AAAA").is_empty(), "{}", d.raw);
    }

    // SIGTERM: the proxy stops and exits 0.
    let st = lab.procs[x].stop_with(libc::SIGTERM, Duration::from_secs(5));
    assert!(
        st.is_some_and(|s| s.success()),
        "xlat dns64 did not exit cleanly: {st:?}\n{}",
        lab.procs[x].stderr_text()
    );
    assert!(
        lab.procs[x].stderr_text().contains("dns64 stopped"),
        "{}",
        lab.procs[x].stderr_text()
    );
}

#[test]
fn xlat_run_serves_dns64_and_reports_its_counters() {
    if !dns_tools() {
        return;
    }
    let mut lab = Lab::new();
    let sock = lab.dir.join("xlat.sock").display().to_string();
    let cfg = format!(
        "[tun]\nname = \"{id}t\"\nauto_routes = false\n\n[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"198.19.0.100/32\"]\n\n[control]\nsocket = \"{sock}\"\n\n{dns64}",
        id = lab.id,
        dns64 = lab.config()
    );
    lab.start_xlat(&cfg, &["run"]);

    let d = lab.dig(&["AAAA", "v4only.test.example."]);
    assert_eq!(
        d.of_type("AAAA"),
        vec![rr("v4only.test.example.", 300, "2001:2:0:64::c613:5")],
        "{}",
        d.raw
    );
    let d = lab.dig(&["+tcp", "MX", "v4only.test.example."]);
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
