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
//! wait is bounded. Needs root, unbound and dig besides the tools of `common::TOOLS`; skipped
//! when not root unless CI or XLAT_E2E_REQUIRED is set.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::fs;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{can_run, poll, run_host, wait_for, xlat_bin, Proc, Run};

/// The IPv6-only client (NAT64 tests).
const CLI: &str = "2001:2:0:1::10";
/// The gateway on the client's link; the DNS64 listens here.
const GW6: &str = "2001:2:0:1::1";
const GW4: &str = "198.19.0.1";
/// The IPv4 servers.
const SRV: &str = "198.19.0.2";
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

static COUNTER: AtomicU32 = AtomicU32::new(0);
static FETCHES: AtomicU32 = AtomicU32::new(0);

const ZONE: &str = "$ORIGIN test.example.
@        3600 IN SOA ns.test.example. hostmaster.test.example. 1 3600 600 86400 300
@        3600 IN NS  ns.test.example.
ns       3600 IN A   198.19.0.2
www      300  IN A   198.19.0.2
";

/// True when the tests can run (root and tools); panics naming what to install when root but
/// unbound or dig is missing.
fn tools() -> bool {
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
        "NAT64 end-to-end tests need {missing:?}: apt-get install unbound bind9-dnsutils"
    );
    true
}

/// CLI, GW and SRV namespaces; torn down on drop.
struct Lab {
    id: String,
    cli: String,
    gw: String,
    srv: String,
    cli_dev: String,
    srv_dev: String,
    tun: String,
    /// The client's address (CLI for NAT64, SIIT_CLI for SIIT).
    cli_addr: &'static str,
    dir: PathBuf,
    socket: PathBuf,
    procs: Vec<Proc>,
    xlat: Option<usize>,
    namespaces: Vec<String>,
    /// /etc/netns/CLI, when the test wrote a resolv.conf there.
    netns_etc: Option<PathBuf>,
    /// Whether this test created /etc/netns itself (removed again if left empty).
    created_etc_netns: bool,
}

impl Lab {
    fn new(cli_addr: &'static str) -> Lab {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        // Interface names are limited to 15 bytes: "x" + pid (hex, <= 6) + "p" + n + 1.
        let id = format!("x{:x}p{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("xlat-e2e-{id}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let mut lab = Lab {
            cli: format!("{id}-cli"),
            gw: format!("{id}-gw"),
            srv: format!("{id}-srv"),
            cli_dev: format!("{id}c"),
            srv_dev: format!("{id}s"),
            tun: format!("{id}t"),
            cli_addr,
            socket: dir.join("xlat.sock"),
            dir,
            procs: Vec::new(),
            xlat: None,
            namespaces: Vec::new(),
            netns_etc: None,
            created_etc_netns: false,
            id,
        };
        lab.build();
        lab
    }

    fn ip(&self, ns: &str, args: &[&str]) {
        let mut v = vec!["ip", "-n", ns];
        v.extend_from_slice(args);
        run_host(10, &v).check();
    }

    fn build(&mut self) {
        for ns in [self.cli.clone(), self.gw.clone(), self.srv.clone()] {
            // A leftover from a killed run with the same pid: remove it first.
            let _ = run_host(10, &["ip", "netns", "del", &ns]);
            run_host(10, &["ip", "netns", "add", &ns]).check();
            self.namespaces.push(ns.clone());
            self.ip(&ns, &["link", "set", "lo", "up"]);
        }
        let (cli, gw, srv) = (self.cli.clone(), self.gw.clone(), self.srv.clone());
        let (c, s) = (self.cli_dev.clone(), self.srv_dev.clone());
        let (gc, gs) = (format!("{}g", self.id), format!("{}h", self.id));
        // CLI <-> GW: IPv6 only (nodad: usable at once). CLI gets no IPv4 address at all.
        self.ip(
            &gw,
            &[
                "link", "add", "name", &gc, "type", "veth", "peer", "name", &c, "netns", &cli,
            ],
        );
        self.ip(
            &gw,
            &["addr", "add", &format!("{GW6}/64"), "dev", &gc, "nodad"],
        );
        self.ip(
            &cli,
            &[
                "addr",
                "add",
                &format!("{}/64", self.cli_addr),
                "dev",
                &c,
                "nodad",
            ],
        );
        // GW <-> SRV: IPv4 only.
        self.ip(
            &gw,
            &[
                "link", "add", "name", &gs, "type", "veth", "peer", "name", &s, "netns", &srv,
            ],
        );
        self.ip(&gw, &["addr", "add", &format!("{GW4}/24"), "dev", &gs]);
        self.ip(&srv, &["addr", "add", &format!("{SRV}/24"), "dev", &s]);
        self.ip(&srv, &["addr", "add", &format!("{SRV2}/24"), "dev", &s]);
        for (ns, dev) in [(&gw, &gc), (&cli, &c), (&gw, &gs), (&srv, &s)] {
            // Real packets on the wire (no GSO/GRO super-packets); best effort. With the XDP
            // fast path the hosts keep GRO on (a veth delivers redirected frames only to a
            // peer running NAPI) and send full checksums (veth's partial ones cannot be
            // finished by XDP, and no wire carries them).
            let mut args = vec!["ethtool", "-K", dev, "tso", "off", "gso", "off"];
            if fast_path() && *ns != gw {
                args.extend(["gro", "on", "tx", "off"]);
            } else {
                args.extend(["gro", "off"]);
            }
            let _ = ns_run(ns, 10, &args);
            self.ip(ns, &["link", "set", dev, "up"]);
        }
        if fast_path() {
            // The peer's GRO must be switched on while both ends are up for the kernel to
            // mark GW's device a redirect target (otherwise XDP_REDIRECT into it fails with
            // EOPNOTSUPP, seen on 6.18 when GW's end came up first): toggle it.
            for (ns, dev) in [(&cli, &c), (&srv, &s)] {
                let _ = ns_run(ns, 10, &["ethtool", "-K", dev, "gro", "off"]);
                let _ = ns_run(ns, 10, &["ethtool", "-K", dev, "gro", "on"]);
            }
        }
        self.ip(&cli, &["-6", "route", "add", "default", "via", GW6]);
        // SRV has no default route: only what xlat answers for (pool4 by proxy ARP, or the
        // routes a test adds) comes back.
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
            .env("PYTHONUNBUFFERED", "1")
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

    /// Waits (10 s at most) until `ns` has a `proto` socket on port `port` whose local address
    /// contains `addr`; panics with the owner's output if it exits first.
    fn wait_listening(&mut self, ns: &str, proto: &str, addr: &str, port: u16, owner: usize) {
        let flag = if proto == "udp" { "-Hlun" } else { "-Hltn" };
        let filter = format!("sport = :{port}");
        let ns_s = ns.to_string();
        let ready = poll(Duration::from_secs(10), Duration::from_millis(50), || {
            if self.procs[owner].try_status().is_some() {
                return true;
            }
            let r = ns_run(&ns_s, 5, &["ss", flag, &filter]);
            r.ok() && r.stdout.contains(addr)
        });
        let p = &mut self.procs[owner];
        if let Some(st) = p.try_status() {
            panic!(
                "{} exited ({st}) before listening on {proto} {addr} {port}:\n{}\n{}",
                p.name,
                p.stdout_text(),
                p.stderr_text()
            );
        }
        assert!(
            ready,
            "{} not listening on {proto} {addr} port {port} after 10 s",
            p.name
        );
    }

    /// Starts unbound in SRV, authoritative for test.example.
    fn start_unbound(&mut self) {
        let d = self.dir.display().to_string();
        fs::write(self.dir.join("test.example.zone"), ZONE).unwrap();
        let conf = common::unbound_conf(&d, SRV, &[("test.example.", "test.example.zone")]);
        let path = self.dir.join("unbound.conf");
        fs::write(&path, conf).unwrap();
        let srv = self.srv.clone();
        let p = self.spawn(
            &srv,
            "unbound",
            &["unbound", "-d", "-c", &path.display().to_string()],
        );
        self.wait_listening(&srv, "udp", SRV, 53, p);
        self.wait_listening(&srv, "tcp", SRV, 53, p);
    }

    /// Writes a 4 MiB random file into `dir/www` and serves that directory over HTTP in `ns`,
    /// bound to `bind`. Returns the process and the file.
    fn start_http(&mut self, ns: &str, bind: &str, port: u16) -> (usize, PathBuf) {
        let www = self.dir.join(format!("www-{port}"));
        fs::create_dir_all(&www).unwrap();
        let blob = www.join("blob.bin");
        run_host(
            30,
            &[
                "sh",
                "-c",
                &format!("head -c {BLOB_LEN} /dev/urandom > {}", blob.display()),
            ],
        )
        .check();
        let www_s = www.display().to_string();
        let port_s = port.to_string();
        let p = self.spawn(
            ns,
            &format!("http-{port}"),
            &[
                "python3",
                "-m",
                "http.server",
                &port_s,
                "--bind",
                bind,
                "--directory",
                &www_s,
            ],
        );
        // ss shows the IPv6 wildcard as "[::]" or "*": accept any address on the port.
        let shown = if bind == "::" { ":" } else { bind };
        self.wait_listening(ns, "tcp", shown, port, p);
        (p, blob)
    }

    /// Writes `config`, starts `xlat run -c` in GW and waits until it is ready: the TUN is up,
    /// IPv6 and IPv4 routes lead into it, the control socket answers, and (with `dns`) the
    /// DNS64 listens on GW6:53.
    fn start_xlat(&mut self, config: &str, dns: bool) {
        let path = self.dir.join("xlat.toml");
        fs::write(&path, config).unwrap();
        let cfg = path.display().to_string();
        let gw = self.gw.clone();
        let k = self.spawn(&gw, "xlat", &[xlat_bin(), "run", "-c", &cfg]);
        self.xlat = Some(k);
        let tun = self.tun.clone();
        let mut stage = "TUN device up";
        let ready = poll(Duration::from_secs(15), Duration::from_millis(50), || {
            if self.procs[k].try_status().is_some() {
                return true;
            }
            let link = ns_run(&gw, 5, &["ip", "-o", "link", "show", "dev", &tun]);
            if !(link.ok() && link.stdout.contains(",UP")) {
                stage = "TUN device up";
                return false;
            }
            for fam in ["-6", "-4"] {
                let r = ns_run(&gw, 5, &["ip", fam, "route", "show", "dev", &tun]);
                if !r.ok() || r.stdout.trim().is_empty() {
                    stage = "routes into the TUN";
                    return false;
                }
            }
            stage = "control socket to answer";
            self.socket.exists() && self.xlat_cmd(&["show", "stats", "--json"]).ok()
        });
        if let Some(st) = self.procs[k].try_status() {
            panic!(
                "xlat run exited ({st}) while starting (waiting for {stage}); config:\n{config}\n--- stderr\n{}",
                self.procs[k].stderr_text()
            );
        }
        assert!(
            ready,
            "xlat run not ready after 15 s (waiting for {stage});\n--- stderr\n{}",
            self.procs[k].stderr_text()
        );
        if dns {
            self.wait_listening(&gw, "udp", GW6, 53, k);
            self.wait_listening(&gw, "tcp", GW6, 53, k);
        }
    }

    /// The NAT64 configuration, with the DNS64 in the same daemon when `dns64`.
    fn nat64_config(&self, dns64: bool) -> String {
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
            tun = self.tun,
            sock = self.socket.display()
        );
        if dns64 {
            c.push_str(&format!(
                "\n[dns64]\nlisten = [\"[{GW6}]:53\"]\nupstream = [\"{SRV}:53\"]\nprefix = \"{PREF64}\"\n"
            ));
        }
        if fast_path() {
            c.push_str(&format!(
                "\n[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"{id}g\", \"{id}h\"]\n",
                id = self.id
            ));
        }
        c
    }

    /// The SIIT configuration: the client's /124 as EAM, and `extra_eam` entries.
    fn siit_config(&self, extra_eam: &str) -> String {
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
"#,
            tun = self.tun,
            sock = self.socket.display()
        )
    }

    /// Runs the xlat CLI against this lab's control socket.
    fn xlat_cmd(&self, args: &[&str]) -> Run {
        let sock = self.socket.display().to_string();
        let mut v: Vec<&str> = vec![xlat_bin()];
        v.extend_from_slice(args);
        v.extend_from_slice(&["--socket", &sock]);
        run_host(15, &v)
    }

    fn stats(&self) -> serde_json::Value {
        let r = self.xlat_cmd(&["show", "stats", "--json"]).check();
        serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("show stats --json is not JSON ({e}):\n{}", r.stdout))
    }

    fn sessions(&self) -> Vec<serde_json::Value> {
        let r = self.xlat_cmd(&["show", "sessions", "--json"]).check();
        let v: serde_json::Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("show sessions --json is not JSON ({e}):\n{}", r.stdout));
        v.as_array()
            .cloned()
            .unwrap_or_else(|| panic!("show sessions --json is not an array:\n{}", r.stdout))
    }

    /// Writes the client namespace's resolv.conf: `ip netns exec` bind-mounts
    /// /etc/netns/NS/resolv.conf over /etc/resolv.conf. Removed on drop.
    fn client_resolver(&mut self, nameserver: &str) {
        let base = PathBuf::from("/etc/netns");
        if !base.exists() {
            fs::create_dir_all(&base).unwrap();
            self.created_etc_netns = true;
        }
        let d = base.join(&self.cli);
        fs::create_dir_all(&d).unwrap_or_else(|e| panic!("create {}: {e}", d.display()));
        self.netns_etc = Some(d.clone());
        fs::write(
            d.join("resolv.conf"),
            format!("nameserver {nameserver}\noptions timeout:2 attempts:2\n"),
        )
        .unwrap();
    }

    /// Starts tcpdump in `ns` on `dev` with `filter` and waits until it listens.
    fn tcpdump(&mut self, ns: &str, dev: &str, filter: &str) -> usize {
        let p = self.spawn(
            ns,
            &format!("tcpdump-{dev}"),
            &[
                "tcpdump",
                "-i",
                dev,
                "-n",
                "-l",
                "--immediate-mode",
                "-p",
                filter,
            ],
        );
        let ok = poll(Duration::from_secs(10), Duration::from_millis(50), || {
            self.procs[p].stderr_text().contains("listening on")
                || self.procs[p].try_status().is_some()
        });
        let pr = &mut self.procs[p];
        assert!(
            ok && pr.try_status().is_none(),
            "tcpdump on {dev} in {ns} not ready: {}",
            pr.stderr_text()
        );
        p
    }

    /// Stops a tcpdump (after a short settle time) and returns its packets.
    fn tcpdump_packets(&mut self, p: usize) -> Vec<Pkt> {
        std::thread::sleep(Duration::from_millis(300));
        self.procs[p].stop_with(libc::SIGINT, Duration::from_secs(3));
        self.procs[p]
            .stdout_text()
            .lines()
            .filter_map(Pkt::parse)
            .collect()
    }

    /// `ping -n` in `ns` with `n` packets and extra `args`; all must be answered.
    fn ping_all(&self, ns: &str, n: u32, args: &[&str], dst: &str) {
        let count = n.to_string();
        let mut v = vec![
            "ping", "-n", "-c", &count, "-i", "0.2", "-W", "2", "-w", "15",
        ];
        v.extend_from_slice(args);
        v.push(dst);
        let r = ns_run(ns, 20, &v);
        assert!(
            r.ok()
                && r.stdout
                    .contains(&format!("{n} packets transmitted, {n} received")),
            "expected {n}/{n} ping replies: {}\n{}\n{}",
            r.cmd,
            r.stdout,
            r.stderr
        );
    }

    /// Fetches `url` with curl in `ns` into a file; returns curl's `remote_ip` and the file.
    fn curl(&self, ns: &str, url: &str) -> (String, PathBuf) {
        let k = FETCHES.fetch_add(1, Ordering::SeqCst);
        let got = self.dir.join(format!("got-{k}.bin"));
        let got_s = got.display().to_string();
        let r = ns_run(
            ns,
            60,
            &[
                "curl",
                "-sS",
                "--fail",
                "--max-time",
                "45",
                "-o",
                &got_s,
                "-w",
                "%{remote_ip}",
                url,
            ],
        );
        assert!(r.ok(), "curl failed: {}\n{}\n{}", r.cmd, r.stdout, r.stderr);
        (r.stdout.trim().to_string(), got)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed {
            eprintln!(
                "==== nat64 e2e {} failed; logs in {}",
                self.id,
                self.dir.display()
            );
            for p in &self.procs {
                for (kind, text) in [("stderr", p.stderr_text()), ("stdout", p.stdout_text())] {
                    if text.trim().is_empty() {
                        continue;
                    }
                    let lines: Vec<&str> = text.lines().collect();
                    let from = lines.len().saturating_sub(40);
                    eprintln!("---- {} {kind} (last {} lines)", p.name, lines.len() - from);
                    for l in &lines[from..] {
                        eprintln!("{l}");
                    }
                }
            }
            if self.xlat.is_some() && self.socket.exists() {
                let s = self.xlat_cmd(&["show", "stats", "--json"]);
                eprintln!("---- xlat show stats --json\n{}{}", s.stdout, s.stderr);
            }
        }
        // xlat first and gently, so it removes what it installed; then the rest.
        if let Some(x) = self.xlat {
            self.procs[x].stop_with(libc::SIGTERM, Duration::from_secs(3));
        }
        for p in self.procs.iter_mut().rev() {
            p.stop_with(libc::SIGKILL, Duration::from_secs(2));
        }
        for ns in self.namespaces.iter().rev() {
            common::destroy_ns(ns);
        }
        if let Some(d) = &self.netns_etc {
            if let Err(e) = fs::remove_dir_all(d) {
                eprintln!("warning: could not remove {}: {e}", d.display());
            }
        }
        if self.created_etc_netns {
            // Only if empty: someone else may have put their namespace's files there since.
            let _ = fs::remove_dir("/etc/netns");
        }
        if !failed && std::env::var_os("XLAT_E2E_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn ns_run(ns: &str, secs: u64, args: &[&str]) -> Run {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    run_host(secs, &v)
}

/// One packet of tcpdump's text output: "12:00:00.000000 IP6 A.P > B.P: rest".
#[derive(Debug, Clone)]
struct Pkt {
    v6: bool,
    src: String,
    src_port: Option<u16>,
    dst: String,
    dst_port: Option<u16>,
    rest: String,
    line: String,
}

impl Pkt {
    fn parse(line: &str) -> Option<Pkt> {
        let mut w = line.splitn(6, ' ');
        let _ts = w.next()?;
        let fam = w.next()?;
        let v6 = match fam {
            "IP" => false,
            "IP6" => true,
            _ => return None,
        };
        let (src, src_port) = split_port(w.next()?, v6);
        if w.next()? != ">" {
            return None;
        }
        let (dst, dst_port) = split_port(w.next()?.trim_end_matches(':'), v6);
        Some(Pkt {
            v6,
            src,
            src_port,
            dst,
            dst_port,
            rest: w.next().unwrap_or("").to_string(),
            line: line.to_string(),
        })
    }
    fn is(&self, src: &str, dst: &str) -> bool {
        self.src == src && self.dst == dst
    }
}

/// "198.19.0.2.7000" -> ("198.19.0.2", Some(7000)); "2001:2::1.53" -> ("2001:2::1", Some(53)).
/// tcpdump writes IPv6 addresses without dots, so a dot in one starts the port.
fn split_port(s: &str, v6: bool) -> (String, Option<u16>) {
    let has_port = if v6 {
        s.contains('.')
    } else {
        s.matches('.').count() == 4
    };
    match s.rsplit_once('.') {
        Some((h, p)) if has_port => (h.to_string(), p.parse().ok()),
        _ => (s.to_string(), None),
    }
}

fn show(pkts: &[Pkt]) -> String {
    pkts.iter()
        .map(|p| p.line.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn sha256(p: &std::path::Path) -> String {
    let r = run_host(30, &["sha256sum", &p.display().to_string()]).check();
    r.stdout
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The fetched file is the served one: same length, same sha256.
fn assert_same_file(served: &std::path::Path, got: &std::path::Path) {
    let len = fs::metadata(got).map(|m| m.len()).unwrap_or(0);
    assert_eq!(
        len,
        BLOB_LEN,
        "fetched file {} has the wrong size",
        got.display()
    );
    assert_eq!(
        sha256(served),
        sha256(got),
        "the file fetched through xlat differs from the original"
    );
}

/// Value of an event or drop counter in `show stats --json`.
fn counter(stats: &serde_json::Value, list: &str, name: &str) -> u64 {
    stats[list]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"].as_str() == Some(name)))
        .and_then(|e| e["value"].as_u64())
        .unwrap_or_else(|| panic!("stats {list:?} has no counter {name:?}: {stats}"))
}

/// Client lines of python's http.server access log ("ADDR - - [date] \"GET ...\" 200 -").
fn http_clients(log: &str, path: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(&format!("\"GET {path} ")))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// A NAT64 lab with xlat running; `None` when the tests cannot run here.
/// Runs the NAT64 tests with the XDP fast path (`XLAT_E2E_FAST_PATH`, see scripts/test.sh).
fn fast_path() -> bool {
    std::env::var_os("XLAT_E2E_FAST_PATH").is_some()
}

fn nat64_lab(dns64: bool) -> Option<Lab> {
    if !tools() {
        return None;
    }
    let mut lab = Lab::new(CLI);
    if dns64 {
        lab.start_unbound();
    }
    let cfg = lab.nat64_config(dns64);
    lab.start_xlat(&cfg, dns64);
    Some(lab)
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
fn nat64_dns64_dig_and_curl_by_name() {
    let Some(mut lab) = nat64_lab(true) else {
        return;
    };
    let (cli, srv, sd, cd) = (
        lab.cli.clone(),
        lab.srv.clone(),
        lab.srv_dev.clone(),
        lab.cli_dev.clone(),
    );
    let (http, blob) = lab.start_http(&srv, SRV, HTTP_PORT);

    // RFC 6147 5.1.6: the A-only name gets exactly one AAAA, 198.19.0.2 in the pref64.
    let gw = format!("@{GW6}");
    for transport in ["+notcp", "+tcp"] {
        let r = ns_run(
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
    lab.client_resolver(GW6);
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
    let srv_syns = lab.tcpdump_packets(syn_cap);
    let cli_syns = lab.tcpdump_packets(cli_cap);
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

    let log = lab.procs[http].stderr_text();
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
                && s["inside"].as_str() == Some(&format!("[{CLI}]:{cli_port}"))
        })
        .unwrap_or_else(|| panic!("no tcp session for [{CLI}]:{cli_port} in:\n{all}"));
    assert_eq!(s["translator"], "nat64", "{s}");
    assert_eq!(s["outside"], format!("{POOL4}:{pool_port}"), "{s}");
    assert_eq!(s["remote"], format!("{SRV}:{HTTP_PORT}"), "{s}");
    assert_eq!(s["remote6"], format!("[{SRV_V6}]:{HTTP_PORT}"), "{s}");
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
        let xdp = |name: &str| {
            st["fast_path"]["counters"]
                .as_array()
                .and_then(|a| a.iter().find(|c| c["name"] == name))
                .and_then(|c| c["value"].as_u64())
                .unwrap_or_else(|| panic!("no fast-path counter {name}: {st}"))
        };
        assert!(xdp("xdp_translated_4to6") >= 2000, "{st}");
        assert!(xdp("xdp_translated_6to4") >= 10, "{st}");
    }
}

/// ping and `ping -s 4000` (fragments both ways) to the pref64 address of SRV.
#[test]
fn nat64_ping_and_fragmented_ping() {
    let Some(mut lab) = nat64_lab(false) else {
        return;
    };
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
    let on_srv = lab.tcpdump_packets(srv_cap);
    let on_cli = lab.tcpdump_packets(cli_cap);

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
                && s["inside"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with(&format!("[{CLI}]:"))
                && s["outside"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with(&format!("{POOL4}:"))
                && s["remote"].as_str().unwrap_or("").starts_with(SRV)
        }),
        "no NAT64 icmp session [{CLI}]:* -> {POOL4}:* -> {SRV} in:\n{all}"
    );
}

/// A UDP server in SRV (socat) answering every datagram with the peer it saw, then the data.
fn udp_echo(lab: &mut Lab, port: u16) -> usize {
    let srv = lab.srv.clone();
    let p = lab.spawn(
        &srv,
        &format!("udp-echo-{port}"),
        &[
            "socat",
            &format!("UDP4-RECVFROM:{port},bind={SRV},reuseaddr,fork"),
            "SYSTEM:echo peer=$SOCAT_PEERADDR port=$SOCAT_PEERPORT; cat",
        ],
    );
    lab.wait_listening(&srv, "udp", SRV, port, p);
    p
}

/// Client UDP socket: binds [argv1]:5555, sends to [argv2]:7000, prints the mapped port from
/// the echo's reply, then prints every datagram that arrives ("from A P data") until "DONE" or
/// 10 s.
const CLIENT_LISTENER: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 5555))
s.settimeout(0.5)
reply = None
for i in range(10):
    s.sendto(b"hello", (sys.argv[2], 7000))
    try:
        data, a = s.recvfrom(2000)
        reply = data.decode(errors="replace")
        break
    except socket.timeout:
        pass
if reply is None:
    print("NO-REPLY"); sys.exit(1)
for l in reply.splitlines():
    if l.startswith("peer="):
        w = l.split()
        print("PEER", w[0].split("=")[1], w[1].split("=")[1], flush=True)
end = time.time() + 10
while time.time() < end:
    try:
        data, a = s.recvfrom(2000)
    except socket.timeout:
        continue
    d = data.decode(errors="replace").strip()
    print("from %s %d %s" % (a[0], a[1], d), flush=True)
    if d == "DONE":
        sys.exit(0)
print("NO-DONE"); sys.exit(3)
"#;

/// IPv4 sender: sends argv5 from argv1:argv2 (port 0 = any) to argv3:argv4.
const V4_SEND: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.sendto(sys.argv[5].encode(), (sys.argv[3], int(sys.argv[4])))
"#;

/// UDP both ways: a socat request/reply, where SRV must see pool4 as the peer; then SRV sends
/// to the client's pool4 mapping from another port and the client gets it from the pref64
/// address. Unsolicited IPv4 packets to pool4 (UDP and a TCP SYN to a port without BIB entry;
/// UDP from a remote the filter does not admit) are dropped, counted, and never reach the
/// client's link.
#[test]
fn nat64_udp_both_ways_and_unsolicited_inbound_dropped() {
    let Some(mut lab) = nat64_lab(false) else {
        return;
    };
    let (cli, srv, cd) = (lab.cli.clone(), lab.srv.clone(), lab.cli_dev.clone());
    udp_echo(&mut lab, 7000);

    let r = ns_run(
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
    let lis = lab.spawn(
        &cli,
        "client-listener",
        &["python3", "-c", CLIENT_LISTENER, CLI, SRV_V6],
    );
    let mut mapped: u16 = 0;
    wait_for(
        "the client's reply from SRV",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let text = lab.procs[lis].stdout_text();
            if let Some(l) = text.lines().find(|l| l.starts_with("PEER ")) {
                let w: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(w.get(1).copied(), Some(POOL4), "SRV saw peer {l:?}");
                mapped = w.get(2).and_then(|p| p.parse().ok()).unwrap_or(0);
                return true;
            }
            text.contains("NO-REPLY") || lab.procs[lis].try_status().is_some()
        },
    );
    assert!(
        mapped != 0,
        "client got no reply through NAT64: {}",
        lab.procs[lis].stdout_text()
    );
    let sessions = lab.sessions();
    let all = serde_json::to_string_pretty(&sessions).unwrap_or_default();
    assert!(
        sessions.iter().any(|s| s["translator"] == "nat64"
            && s["proto"].as_str().map(str::to_ascii_lowercase).as_deref() == Some("udp")
            && s["inside"].as_str() == Some(&format!("[{CLI}]:5555"))
            && s["outside"].as_str() == Some(&format!("{POOL4}:{mapped}"))
            && s["remote"].as_str() == Some(&format!("{SRV}:7000"))
            && s["remote6"].as_str() == Some(&format!("[{SRV_V6}]:7000"))),
        "no NAT64 udp session [{CLI}]:5555 -> {POOL4}:{mapped} -> {SRV}:7000 in:\n{all}"
    );
    // A pool4 port no session uses, for TCP or UDP.
    let unmapped: u16 = (33333..34000)
        .find(|p| {
            !sessions
                .iter()
                .any(|s| s["outside"].as_str() == Some(&format!("{POOL4}:{p}")))
        })
        .unwrap();

    let (m, u) = (mapped.to_string(), unmapped.to_string());
    let drops = |lab: &Lab| {
        let st = lab.stats();
        (
            counter(&st, "drops", "no_mapping"),
            counter(&st, "drops", "filtered"),
        )
    };
    // Waits (5 s at most) until `which` of the two counters grew past `before`.
    let grew = |lab: &Lab, before: (u64, u64), nomap: bool, what: &str| {
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
    ns_run(
        &srv,
        10,
        &["python3", "-c", V4_SEND, SRV, "0", POOL4, &u, "NOMAP"],
    )
    .check();
    grew(&lab, d0, true, "UDP to an unmapped pool4 port");
    // 2. A TCP SYN to a pool4 port with no BIB entry: no connection (RFC 6146 3.5.2.2).
    let d0 = drops(&lab);
    let r = ns_run(&srv, 10, &["python3", "-c", TCP_PROBE, SRV, POOL4, &u]);
    assert!(
        r.ok() && !r.stdout.contains("CONNECTED"),
        "an unsolicited TCP connection to {POOL4}:{u} was accepted: {}\n{}",
        r.stdout,
        r.stderr
    );
    grew(&lab, d0, true, "TCP SYN to an unmapped pool4 port");
    // 3. To the mapped port from an address the client never sent to: address-dependent
    //    filtering (RFC 6146 3.5.1) drops it.
    let d0 = drops(&lab);
    ns_run(
        &srv,
        10,
        &["python3", "-c", V4_SEND, SRV2, "0", POOL4, &m, "FILTERED"],
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
    ns_run(
        &srv,
        10,
        &["python3", "-c", V4_SEND, SRV, "7001", POOL4, &m, "DONE"],
    )
    .check();
    let st = lab.procs[lis].wait_exit(Duration::from_secs(12));
    let text = lab.procs[lis].stdout_text();
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
    let leaks = lab.tcpdump_packets(cap);
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

const ICMP_PROBE: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.connect((sys.argv[1], int(sys.argv[2])))
s.settimeout(1.0)
for i in range(8):
    try:
        s.send(b"probe")
        s.recv(100)
        print("GOT-REPLY")
        sys.exit(2)
    except ConnectionRefusedError:
        print("REFUSED")
        sys.exit(0)
    except socket.timeout:
        pass
print("TIMEOUT")
sys.exit(1)
"#;

/// UDP to a closed port of SRV: SRV's ICMPv4 port unreachable (to pool4) reaches the client as
/// an ICMPv6 port unreachable from the pref64 address, and its connected socket gets
/// ECONNREFUSED.
#[test]
fn nat64_icmpv4_error_reaches_client_as_icmpv6() {
    let Some(mut lab) = nat64_lab(false) else {
        return;
    };
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
    let r = ns_run(&cli, 20, &["python3", "-c", ICMP_PROBE, SRV_V6, "9"]);
    assert!(
        r.ok() && r.stdout.contains("REFUSED"),
        "the ICMP port unreachable did not reach the client socket as ECONNREFUSED: {}\n{}",
        r.stdout,
        r.stderr
    );
    let on_srv = lab.tcpdump_packets(srv_cap);
    let on_cli = lab.tcpdump_packets(cli_cap);
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
#[test]
fn nat64_iperf3_tcp() {
    let Some(mut lab) = nat64_lab(false) else {
        return;
    };
    let (cli, srv) = (lab.cli.clone(), lab.srv.clone());
    let s = lab.spawn(
        &srv,
        "iperf3-server",
        &["iperf3", "-s", "-1", "-J", "-B", SRV, "-p", "5201"],
    );
    lab.wait_listening(&srv, "tcp", SRV, 5201, s);
    let r = ns_run(
        &cli,
        30,
        &[
            "iperf3",
            "-6",
            "-c",
            SRV_V6,
            "-p",
            "5201",
            "-t",
            "3",
            "-J",
            "--connect-timeout",
            "5000",
        ],
    );
    assert!(r.ok(), "iperf3 client failed: {}\n{}", r.stdout, r.stderr);
    let j: serde_json::Value = serde_json::from_str(&r.stdout).expect("iperf3 -J output is JSON");
    let sent = j["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
    let recv = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    let bps = j["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(
        sent > 0 && recv > 0,
        "iperf3 moved no data: sent {sent} received {recv}"
    );
    assert_eq!(
        j["start"]["connected"][0]["remote_host"].as_str(),
        Some(SRV_V6),
        "{}",
        j["start"]
    );
    eprintln!(
        "iperf3 through NAT64: {:.1} Mbit/s ({recv} bytes)",
        bps / 1e6
    );

    let st = lab.procs[s].wait_exit(Duration::from_secs(10));
    assert!(st.is_some(), "iperf3 server did not finish");
    let sj: serde_json::Value =
        serde_json::from_str(&lab.procs[s].stdout_text()).expect("iperf3 server JSON");
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
fn siit_lab(extra_eam: &str) -> Option<Lab> {
    if !tools() {
        return None;
    }
    let mut lab = Lab::new(SIIT_CLI);
    let srv = lab.srv.clone();
    lab.ip(&srv, &["route", "add", "198.19.1.0/28", "via", GW4]);
    let cfg = lab.siit_config(extra_eam);
    lab.start_xlat(&cfg, false);
    Some(lab)
}

/// SIIT with the pref64 for SRV and an EAM entry for the client: ping (and fragmented ping)
/// both ways, curl of 4 MiB from the IPv6 side, and an HTTP connection started from the IPv4
/// side. Each side sees the other's translated address on its wire and in its server log.
#[test]
fn siit_ping_both_ways_and_curl_from_each_side() {
    let Some(mut lab) = siit_lab("") else {
        return;
    };
    let (cli, srv, sd, cd) = (
        lab.cli.clone(),
        lab.srv.clone(),
        lab.srv_dev.clone(),
        lab.cli_dev.clone(),
    );
    let (http4, blob4) = lab.start_http(&srv, SRV, HTTP_PORT);
    let (http6, blob6) = lab.start_http(&cli, "::", 8081);
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

    let on_srv = lab.tcpdump_packets(srv_cap);
    let on_cli = lab.tcpdump_packets(cli_cap);
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
    let log4 = lab.procs[http4].stderr_text();
    assert_eq!(
        http_clients(&log4, "/blob.bin"),
        vec![SIIT_CLI_V4.to_string()],
        "{log4}"
    );
    let log6 = lab.procs[http6].stderr_text();
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
}

/// SIIT with EAM entries for both sides (no pref64 address in use): SRV is 2001:2:0:6::2 to the
/// client, the client 198.19.1.5 to SRV. A TCP connection and pings started from each side.
#[test]
fn siit_eam_both_sides_connections_from_each_side() {
    let Some(mut lab) = siit_lab(r#", { ipv4 = "198.19.0.0/28", ipv6 = "2001:2:0:6::/124" }"#)
    else {
        return;
    };
    let (cli, srv) = (lab.cli.clone(), lab.srv.clone());
    tcp_echo_servers(&mut lab);
    lab.ping_all(&cli, 2, &["-6"], SRV_EAM_V6);
    lab.ping_all(&srv, 2, &[], SIIT_CLI_V4);

    // From the IPv6 side: SRV's echo reports the EAM form of the client.
    let r = ns_run(
        &cli,
        15,
        &[
            "sh",
            "-c",
            &format!("echo from-v6 | socat -T 5 -t 3 - TCP6:[{SRV_EAM_V6}]:7100"),
        ],
    );
    assert!(
        r.ok() && peer_addr(&r.stdout) == SIIT_CLI_V4.parse().ok() && r.stdout.contains("from-v6"),
        "TCP from the IPv6 side: {}\n{}",
        r.stdout,
        r.stderr
    );
    // From the IPv4 side: the client's echo reports the EAM form of SRV (EAM before pref64).
    let r = ns_run(
        &srv,
        15,
        &[
            "sh",
            "-c",
            &format!("echo from-v4 | socat -T 5 -t 3 - TCP4:{SIIT_CLI_V4}:7100"),
        ],
    );
    assert!(
        r.ok() && peer_addr(&r.stdout) == SRV_EAM_V6.parse().ok() && r.stdout.contains("from-v4"),
        "TCP from the IPv4 side: {}\n{}",
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
fn tcp_echo_servers(lab: &mut Lab) {
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
    lab.wait_listening(&srv, "tcp", SRV, 7100, p);
    let p = lab.spawn(
        &cli,
        "tcp-echo-v6",
        &[
            "socat",
            &format!("TCP6-LISTEN:7100,bind=[{SIIT_CLI}],reuseaddr,fork"),
            "SYSTEM:echo peer=$SOCAT_PEERADDR; cat",
        ],
    );
    lab.wait_listening(&cli, "tcp", SIIT_CLI, 7100, p);
}
