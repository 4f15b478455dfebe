//! Shared end-to-end test harness: network namespaces, veth links, background processes,
//! and the `xlat` daemon, all torn down by `Drop` (also when a test panics).
//!
//! `lab::Lab` is what every topology owns (namespaces, processes, scratch directory, the
//! helpers to run, wait for, capture and fetch); `Topo` (here, the NAT44 tests), `Topo64`
//! (NAT64, SIIT, DNS64) and the tunnel test's A-R-B build their links on it. `scripts` holds
//! the python3 probes; tcpdump lines parse into `Pkt`.
//!
//! The NAT44 topology (addresses from the benchmarking range 198.18.0.0/15, RFC 2544):
//!
//! ```text
//!   IN  198.18.0.20/24 --+                                  +-- OUT 198.19.0.2/24, 198.19.0.3/24
//!   IN2 198.18.0.10/24 --+-- br 198.18.0.1/24 [GW] 198.19.0.1/24 --+   (no route to 198.18.0.0/24)
//!                                    xlat run (TUN)
//! ```
//!
//! IN and IN2 hang off a bridge in GW (IN2 only when asked for). OUT has no route back to the
//! inside prefix, so only translated traffic can return. No namespace gets a route to the
//! host. Every wait is bounded in count and in time; every command runs under `timeout`.

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub mod lab;
pub mod scripts;
pub mod topo64;

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use lab::{assert_all_replies, assert_same_file, stats_at, xlat_cli, Lab, ProcId};
#[allow(unused_imports)]
pub use scripts::{ICMP_PROBE, UDP4_SEND, UDP_LISTENER};
#[allow(unused_imports)]
pub use topo64::Topo64;

pub const IN_ADDR: &str = "198.18.0.20";
pub const IN2_ADDR: &str = "198.18.0.10";
pub const GW_IN_ADDR: &str = "198.18.0.1";
pub const GW_OUT_ADDR: &str = "198.19.0.1";
pub const OUT_ADDR: &str = "198.19.0.2";
pub const OUT_ADDR2: &str = "198.19.0.3";
pub const POOL_ADDR: &str = "198.19.0.100";
pub const STATIC_OUTSIDE: &str = "198.19.0.10";

/// Tools the end-to-end tests call. `scripts/test.sh` and `.ci/run` install them.
pub const TOOLS: &[&str] = &[
    "ip",
    "ethtool",
    "ping",
    "curl",
    "socat",
    "iperf3",
    "tcpdump",
    "python3",
    "ss",
    "timeout",
    "sha256sum",
];

/// Panics unless the end-to-end tests can run here: root and the tools present. Every test
/// that calls it is `#[ignore = "needs root: scripts/test.sh"]`, so it runs only when asked
/// for (`--include-ignored`, as scripts/test.sh does), and then not being root is a failure,
/// never a silent pass.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "end-to-end tests need root (network namespaces); run `sudo bash scripts/test.sh`"
    );
    let missing = missing_tools(TOOLS);
    assert!(
        missing.is_empty(),
        "end-to-end tests need these tools, missing: {missing:?}; `sudo bash scripts/test.sh` installs them"
    );
}

/// The ones of `tools` that are not on PATH.
pub fn missing_tools<'a>(tools: &[&'a str]) -> Vec<&'a str> {
    tools
        .iter()
        .copied()
        .filter(|t| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {t} >/dev/null 2>&1")])
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
        })
        .collect()
}

/// `require_root`, and unbound and dig there too (for the tests with a DNS server); panics
/// naming what to install when they are missing. `who` names the tests for the message.
pub fn require_root_dns(who: &str) {
    require_root();
    let missing = missing_tools(&["unbound", "dig"]);
    assert!(
        missing.is_empty(),
        "{who} end-to-end tests need {missing:?}: apt-get install unbound bind9-dnsutils"
    );
}

/// Polls `f` every `every` until it returns true; panics naming `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, every: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    let max_tries = (limit.as_millis() / every.as_millis().max(1)) as usize + 1;
    for _ in 0..max_tries {
        if f() {
            return;
        }
        if start.elapsed() >= limit {
            break;
        }
        std::thread::sleep(every);
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

/// Like `wait_for` but returns false instead of panicking.
pub fn poll(limit: Duration, every: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let max_tries = (limit.as_millis() / every.as_millis().max(1)) as usize + 1;
    for _ in 0..max_tries {
        if f() {
            return true;
        }
        if start.elapsed() >= limit {
            break;
        }
        std::thread::sleep(every);
    }
    false
}

/// A finished command, with its output as text.
#[derive(Debug)]
pub struct Run {
    pub cmd: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(&self) -> bool {
        self.status.success()
    }
    /// Panics with the command and its output unless it succeeded.
    pub fn check(self) -> Run {
        assert!(
            self.status.success(),
            "command failed ({}): {}\n--- stdout\n{}\n--- stderr\n{}",
            self.status,
            self.cmd,
            self.stdout,
            self.stderr
        );
        self
    }
}

fn finish(cmd: String, out: std::io::Result<Output>) -> Run {
    let out = out.unwrap_or_else(|e| panic!("cannot start {cmd}: {e}"));
    Run {
        cmd,
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs a command (no namespace) under `timeout`, capturing output.
pub fn run_host(secs: u64, args: &[&str]) -> Run {
    let mut c = Command::new("timeout");
    c.args(["-k", "2", &secs.to_string()])
        .args(args)
        .stdin(Stdio::null());
    finish(args.join(" "), c.output())
}
/// Options for building a topology.
#[derive(Clone, Debug, Default)]
pub struct Opts {
    /// Also create IN2 (198.18.0.10), the static 1:1 host.
    pub second_inside_host: bool,
    /// Run xlat with the XDP fast path (`[dataplane] fast_path = "xdp"`); also on for every
    /// topology when `XLAT_E2E_FAST_PATH` is set, so a whole suite can run both ways.
    pub fast_path: bool,
    /// Run xlat with the AF_XDP slow path (`[dataplane] slow_path = "af_xdp"`); also on for
    /// every topology when `XLAT_E2E_AF_XDP` is set.
    pub af_xdp: bool,
    /// Leave the veths' offloads as Linux sets them (TSO, GSO, GRO, partial checksums), as
    /// real hosts have them, where the other tests turn them off; not with the fast or
    /// AF_XDP slow paths, whose hosts need theirs off.
    pub kernel_offloads: bool,
}

/// Packet workers asked for by `XLAT_E2E_WORKERS` (scripts/test.sh runs the NAT44 and NAT64
/// suites once more with 2), so a whole suite can run on several workers; `None`: the
/// default, one.
pub fn workers_wanted() -> Option<usize> {
    std::env::var("XLAT_E2E_WORKERS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n: &usize| n >= 1)
}

/// `workers = N` (a `[dataplane]` line) when `XLAT_E2E_WORKERS` asks for workers, else
/// nothing.
pub fn workers_line() -> String {
    workers_wanted()
        .map(|n| format!("workers = {n}\n"))
        .unwrap_or_default()
}

/// Is the AF_XDP slow path asked for (`XLAT_E2E_AF_XDP`, scripts/test.sh: `[dataplane]
/// slow_path = "af_xdp"`)? Its hosts are wired as for the XDP fast path.
pub fn afxdp_wanted() -> bool {
    std::env::var_os("XLAT_E2E_AF_XDP").is_some()
}

/// Is the XDP fast path asked for, by `opts` or by `XLAT_E2E_FAST_PATH`?
pub fn fast_path_wanted(opts: &Opts) -> bool {
    opts.fast_path || std::env::var_os("XLAT_E2E_FAST_PATH").is_some()
}

/// The three (or four) namespace NAT44 topology. Dropping it kills every process it started
/// and deletes its namespaces (see `Lab`, whose helpers it reaches through `Deref`).
pub struct Topo {
    lab: Lab,
    pub ns_in: String,
    pub ns_in2: Option<String>,
    pub ns_gw: String,
    pub ns_out: String,
    /// Device names.
    pub in_dev: String,
    pub in2_dev: String,
    pub gw_br: String,
    pub gw_in_dev: String,
    pub gw_in2_dev: String,
    pub gw_out_dev: String,
    pub out_dev: String,
    pub tun: String,
    pub config: PathBuf,
    /// xlat runs with the XDP fast path on GW's two veth devices.
    pub fast_path: bool,
    /// xlat runs with the AF_XDP slow path on them (`XLAT_E2E_AF_XDP`).
    pub af_xdp: bool,
    /// The veths keep Linux's offloads (`Opts::kernel_offloads`).
    pub kernel_offloads: bool,
    /// The inside segment is a bridge (two inside hosts); otherwise IN links to GW directly.
    pub bridged: bool,
}

impl std::ops::Deref for Topo {
    type Target = Lab;
    fn deref(&self) -> &Lab {
        &self.lab
    }
}

impl std::ops::DerefMut for Topo {
    fn deref_mut(&mut self) -> &mut Lab {
        &mut self.lab
    }
}

/// An unbound configuration for the tests' DNS server: listens on `interface` port 53 (IPv4
/// only), runs in the foreground from `dir`, and serves each `(zone name, zone file in dir)`
/// authoritatively.
pub fn unbound_conf(dir: &str, interface: &str, zones: &[(&str, &str)]) -> String {
    let mut conf = format!(
        r#"server:
  interface: {interface}
  port: 53
  do-ip6: no
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "{dir}"
  pidfile: "{dir}/unbound.pid"
  use-syslog: no
  logfile: ""
  verbosity: 1
  access-control: 0.0.0.0/0 allow
  module-config: "iterator"
  do-not-query-localhost: yes
"#
    );
    for (name, file) in zones {
        conf.push_str(&format!(
            r#"auth-zone:
  name: "{name}"
  zonefile: "{dir}/{file}"
  for-downstream: yes
  for-upstream: yes
"#
        ));
    }
    conf.push_str("remote-control:\n  control-enable: no\n");
    conf
}

/// Path of the xlat binary cargo built for these tests.
pub fn xlat_bin() -> &'static str {
    env!("CARGO_BIN_EXE_xlat")
}

impl Topo {
    /// Builds the topology. Panics (after cleaning up) if any step fails.
    pub fn new(opts: Opts) -> Topo {
        let lab = Lab::new('n');
        let id = lab.id.clone();
        let mut t = Topo {
            ns_in: format!("{id}-in"),
            ns_in2: opts.second_inside_host.then(|| format!("{id}-in2")),
            ns_gw: format!("{id}-gw"),
            ns_out: format!("{id}-out"),
            in_dev: format!("{id}i"),
            in2_dev: format!("{id}j"),
            gw_br: format!("{id}br"),
            gw_in_dev: format!("{id}gi"),
            gw_in2_dev: format!("{id}gj"),
            gw_out_dev: format!("{id}go"),
            out_dev: format!("{id}o"),
            tun: format!("{id}t"),
            config: lab.dir.join("xlat.toml"),
            fast_path: fast_path_wanted(&opts),
            af_xdp: opts.af_xdp || afxdp_wanted(),
            kernel_offloads: opts.kernel_offloads
                && !(fast_path_wanted(&opts) || opts.af_xdp || afxdp_wanted()),
            // A bridge for two inside hosts, and without the fast path (the historical
            // topology); XDP redirects need the host's veth peer to be GW's own port.
            bridged: opts.second_inside_host
                || !(fast_path_wanted(&opts) || opts.af_xdp || afxdp_wanted()),
            lab,
        };
        t.build();
        t
    }

    fn build(&mut self) {
        let mut nss = vec![self.ns_in.clone(), self.ns_gw.clone(), self.ns_out.clone()];
        if let Some(n2) = &self.ns_in2 {
            nss.push(n2.clone());
        }
        for ns in &nss {
            self.add_ns(ns);
        }
        let (gw, inn, out) = (self.ns_gw.clone(), self.ns_in.clone(), self.ns_out.clone());

        // GW: bridge for the inside segment, forwarding on.
        if self.bridged {
            self.ip(&gw, &["link", "add", "name", &self.gw_br, "type", "bridge"]);
            self.ip(
                &gw,
                &[
                    "addr",
                    "add",
                    &format!("{GW_IN_ADDR}/24"),
                    "dev",
                    &self.gw_br,
                ],
            );
            self.ip(&gw, &["link", "set", &self.gw_br, "up"]);
        }
        self.ns_ok(&gw, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);

        // IN <-> GW bridge.
        self.link_host(&inn, &self.in_dev, &self.gw_in_dev, IN_ADDR);
        if let Some(in2) = &self.ns_in2 {
            self.link_host(in2, &self.in2_dev, &self.gw_in2_dev, IN2_ADDR);
        }

        // GW <-> OUT.
        let (go, od) = (&self.gw_out_dev, &self.out_dev);
        self.veth(&gw, go, &out, od);
        self.ip(
            &gw,
            &["addr", "add", &format!("{GW_OUT_ADDR}/24"), "dev", go],
        );
        self.ip(&out, &["addr", "add", &format!("{OUT_ADDR}/24"), "dev", od]);
        self.ip(
            &out,
            &["addr", "add", &format!("{OUT_ADDR2}/24"), "dev", od],
        );
        if !self.kernel_offloads {
            self.offloads_off(&gw, go, false);
            self.offloads_off(&out, od, self.fast_path || self.af_xdp);
        }
        self.ip(&gw, &["link", "set", go, "up"]);
        self.ip(&out, &["link", "set", od, "up"]);
        // OUT deliberately has no route to 198.18.0.0/24 and no default route.
        if self.bridged && !self.kernel_offloads {
            self.offloads_off(&gw, &self.gw_br, false);
        }
    }

    /// A host namespace `ns` with device `dev` (address `addr`/24, default via GW) whose peer
    /// `gw_dev` is enslaved to the GW bridge.
    fn link_host(&self, ns: &str, dev: &str, gw_dev: &str, addr: &str) {
        let gw = &self.ns_gw;
        self.veth(gw, gw_dev, ns, dev);
        if self.bridged {
            self.ip(gw, &["link", "set", gw_dev, "master", &self.gw_br]);
        } else {
            self.ip(
                gw,
                &["addr", "add", &format!("{GW_IN_ADDR}/24"), "dev", gw_dev],
            );
        }
        self.ip(ns, &["addr", "add", &format!("{addr}/24"), "dev", dev]);
        if !self.kernel_offloads {
            self.offloads_off(gw, gw_dev, false);
            self.offloads_off(ns, dev, self.fast_path || self.af_xdp);
        }
        self.ip(gw, &["link", "set", gw_dev, "up"]);
        self.ip(ns, &["link", "set", dev, "up"]);
        self.ip(ns, &["route", "add", "default", "via", GW_IN_ADDR]);
    }

    /// The default NAT44 configuration for the tests: NAPT over 198.19.0.100, a static entry
    /// 198.18.0.10 <-> 198.19.0.10, address-dependent filtering.
    pub fn default_config(&self) -> String {
        format!(
            r#"# written by the xlat end-to-end tests
[tun]
name = "{tun}"
mtu = 1500
auto_routes = true

[nat44]
inside = ["198.18.0.0/24"]
pool = ["{POOL_ADDR}/32"]
mode = "napt"
static = [{{ inside = "{IN2_ADDR}", outside = "{STATIC_OUTSIDE}" }}]
filtering = "address-dependent"
ports = "1024-65535"

[control]
socket = "{sock}"
{dataplane}"#,
            tun = self.tun,
            sock = self.socket.display(),
            dataplane = self.dataplane_section(),
        )
    }

    /// Serves `len` random bytes over HTTP from OUT (python3 http.server on OUT_ADDR:8080),
    /// fetches them with curl from IN, and checks that the copy is whole (length and
    /// SHA-256). Returns the server's process, whose log names the client it saw.
    pub fn fetch_random_file(&mut self, len: u64) -> ProcId {
        let (inn, out) = (self.ns_in.clone(), self.ns_out.clone());
        let (srv, blob) = self.serve_random_file(&out, OUT_ADDR, 8080, len);
        let (_, got) = self.curl(&inn, &format!("http://{OUT_ADDR}:8080/blob.bin"));
        assert_same_file(&blob, &got);
        srv
    }

    /// `[dataplane]` for the XDP fast path on GW's inside and outside devices and for the
    /// workers `XLAT_E2E_WORKERS` asks for, or nothing.
    pub fn dataplane_section(&self) -> String {
        let workers = workers_line();
        if !self.fast_path && !self.af_xdp && workers.is_empty() {
            return String::new();
        }
        let mut s = String::from("\n[dataplane]\n");
        if self.fast_path {
            s += "fast_path = \"xdp\"\n";
        }
        if self.af_xdp {
            s += "slow_path = \"af_xdp\"\n";
        }
        if self.fast_path || self.af_xdp {
            s += &format!(
                "interfaces = [\"{}\", \"{}\"]\n",
                self.gw_in_dev, self.gw_out_dev
            );
        }
        s + &workers
    }

    /// Writes `config`, starts `xlat run -c` in GW and waits until it is ready: the TUN device
    /// is up, some route leads into it, and the control socket answers `show stats`.
    pub fn start_xlat(&mut self, config: &str) -> ProcId {
        let (gw, tun, path) = (self.ns_gw.clone(), self.tun.clone(), self.config.clone());
        let p = self.spawn_xlat(&gw, "xlat", &["run"], &path, config);
        self.wait_xlat_ready(
            p,
            &gw,
            &tun,
            &[&["-4", "route", "show", "table", "all"]],
            config,
        );
        p
    }

    /// What xlat may change in GW while it runs and must restore on exit: rules, routes of
    /// every table, proxy ARP entries, the sysctls auto_routes sets (docs/CONFIG.md), links.
    pub fn machine_state(&self) -> String {
        let gw = self.ns_gw.clone();
        let mut s = String::new();
        for args in [
            &["ip", "-4", "rule"][..],
            &["ip", "-6", "rule"][..],
            &["ip", "-4", "route", "show", "table", "all"][..],
            &["ip", "neigh", "show", "proxy"][..],
        ] {
            let r = self.ns_ok(&gw, args);
            s += &format!("$ {}\n{}", args.join(" "), r.stdout);
        }
        let proxy_delay = format!("net.ipv4.neigh.{}.proxy_delay", self.gw_out_dev);
        let rp_filter = "net.ipv4.conf.all.rp_filter";
        let r = self.ns_ok(
            &gw,
            &["sysctl", "net.ipv4.ip_forward", &proxy_delay, rp_filter],
        );
        s += &format!("$ sysctl\n{}", r.stdout);
        let links = self.ns_ok(&gw, &["ip", "-o", "link"]);
        let mut names: Vec<&str> = links
            .stdout
            .lines()
            .filter_map(|l| l.split(':').nth(1))
            .map(str::trim)
            .collect();
        names.sort();
        s += &format!("$ links\n{}\n", names.join("\n"));
        s
    }

    /// Value of an event counter in stats, panicking if it is not listed.
    pub fn event(stats: &serde_json::Value, name: &str) -> u64 {
        counter(stats, "events", name)
    }

    /// Value of a drop counter in stats, panicking if it is not listed.
    pub fn drops(stats: &serde_json::Value, name: &str) -> u64 {
        counter(stats, "drops", name)
    }
}

/// One side of a `show sessions --json` row as the table prints it: `addr:port`,
/// `[v6]:port`, or the address alone when the row has no port there (`side` is "inside",
/// "outside", "remote" or "remote6"; the remote's two forms share `remote_port`).
pub fn endpoint(row: &serde_json::Value, side: &str) -> String {
    let addr = row[side].as_str().unwrap_or("");
    let port = if side == "remote6" {
        "remote_port".to_string()
    } else {
        format!("{side}_port")
    };
    match row[port.as_str()].as_u64() {
        Some(p) if addr.contains(':') => format!("[{addr}]:{p}"),
        Some(p) => format!("{addr}:{p}"),
        None => addr.to_string(),
    }
}

/// Value of counter `name` in list `list` ("events", "drops") of `show stats --json`,
/// panicking if it is not listed.
pub fn counter(stats: &serde_json::Value, list: &str, name: &str) -> u64 {
    let arr = stats[list]
        .as_array()
        .unwrap_or_else(|| panic!("stats has no {list:?} array: {stats}"));
    arr.iter()
        .find(|e| e["name"].as_str() == Some(name))
        .and_then(|e| e["value"].as_u64())
        .unwrap_or_else(|| panic!("stats {list:?} has no counter {name:?}: {stats}"))
}

/// A packet-worker counter in `show stats --json`, summed over the workers.
pub fn worker_counter(stats: &serde_json::Value, name: &str) -> u64 {
    stats["workers"]
        .as_array()
        .unwrap_or_else(|| panic!("stats has no workers: {stats}"))
        .iter()
        .map(|w| counter(w, "counters", name))
        .sum()
}

/// A counter of the XDP fast path in `show stats --json` (`recipes`: the number installed).
pub fn xdp(stats: &serde_json::Value, name: &str) -> u64 {
    let fp = &stats["fast_path"];
    if name == "recipes" {
        return fp["recipes"]
            .as_u64()
            .unwrap_or_else(|| panic!("no fast_path.recipes: {stats}"));
    }
    fp["counters"]
        .as_array()
        .unwrap_or_else(|| panic!("stats has no fast_path counters: {stats}"))
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["value"].as_u64())
        .unwrap_or_else(|| panic!("no fast-path counter {name}: {stats}"))
}

/// Reads a whole file as text (empty if missing).
pub fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_default()
}

/// SHA-256 of a file, hex.
pub fn sha256(p: &Path) -> String {
    let r = run_host(30, &["sha256sum", &p.display().to_string()]).check();
    r.stdout
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Client addresses of the GETs of `path` in python's http.server access log
/// ("ADDR - - [date] \"GET ...\" 200 -").
pub fn http_clients(log: &str, path: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(&format!("\"GET {path} ")))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Panics unless python's http.server log `log` shows a GET of `path` from `client`.
pub fn assert_http_client(log: &str, path: &str, client: &str) {
    assert!(
        http_clients(log, path).iter().any(|c| c == client),
        "HTTP server did not see {client} as the client:\n{log}"
    );
}

/// One packet of tcpdump's text output: "12:00:00.000000 IP6 A.P > B.P: rest".
#[derive(Debug, Clone)]
pub struct Pkt {
    pub v6: bool,
    pub src: String,
    pub src_port: Option<u16>,
    pub dst: String,
    pub dst_port: Option<u16>,
    pub rest: String,
    pub line: String,
}

impl Pkt {
    pub fn parse(line: &str) -> Option<Pkt> {
        let mut w = line.splitn(6, ' ');
        let _ts = w.next()?;
        let v6 = match w.next()? {
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

    /// The lines of a capture that parse as packets.
    pub fn all(lines: &[String]) -> Vec<Pkt> {
        lines.iter().filter_map(|l| Pkt::parse(l)).collect()
    }

    pub fn is(&self, src: &str, dst: &str) -> bool {
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

/// The packets' tcpdump lines, one a line (for failure messages).
pub fn show(pkts: &[Pkt]) -> String {
    pkts.iter()
        .map(|p| p.line.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}
