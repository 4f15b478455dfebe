//! Shared end-to-end test topology: network namespaces, veth links, background processes,
//! and the `xlat` daemon, all torn down by `Drop` (also when a test panics).
//!
//! The topology (addresses from the benchmarking range 198.18.0.0/15, RFC 2544):
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
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

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

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// True when the tests can run: root and the tools present. When not root, the tests are
/// skipped with a message, unless `CI` or `XLAT_E2E_REQUIRED` is set, in which case they fail.
pub fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let required =
        std::env::var_os("CI").is_some() || std::env::var_os("XLAT_E2E_REQUIRED").is_some();
    if !root {
        if required {
            panic!("end-to-end tests need root (CI or XLAT_E2E_REQUIRED is set); run `sudo bash scripts/test.sh`");
        }
        eprintln!("SKIPPED: end-to-end tests need root (network namespaces); run `sudo bash scripts/test.sh`");
        return false;
    }
    let missing: Vec<&str> = TOOLS
        .iter()
        .copied()
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
        "end-to-end tests need these tools, missing: {missing:?}; `sudo bash scripts/test.sh` installs them"
    );
    true
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

/// A background process started by the topology.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    pub status: Option<ExitStatus>,
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
    pub fn stdout_text(&self) -> String {
        fs::read_to_string(&self.stdout).unwrap_or_default()
    }
    pub fn stderr_text(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }
    /// Exit status if it has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.status = Some(s);
            }
        }
        self.status
    }
    /// Sends `sig`, waits up to `grace` for exit, then SIGKILLs. Returns the exit status.
    pub fn stop_with(&mut self, sig: i32, grace: Duration) -> Option<ExitStatus> {
        if self.try_status().is_some() {
            return self.status;
        }
        // SAFETY: kill(2) on a pid we own (our child, not yet reaped).
        unsafe {
            libc::kill(self.pid(), sig);
        }
        if poll(grace, Duration::from_millis(20), || {
            self.try_status().is_some()
        }) {
            return self.status;
        }
        let _ = self.child.kill();
        let _ = poll(Duration::from_secs(3), Duration::from_millis(20), || {
            self.try_status().is_some()
        });
        self.status
    }
    /// Waits up to `limit` for the process to exit by itself.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        poll(limit, Duration::from_millis(20), || {
            self.try_status().is_some()
        });
        self.status
    }
}

/// Handle to a process in `Topo::procs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcId(usize);

/// Options for building a topology.
#[derive(Clone, Debug, Default)]
pub struct Opts {
    /// Also create IN2 (198.18.0.10), the static 1:1 host.
    pub second_inside_host: bool,
    /// Run xlat with the XDP fast path (`[dataplane] fast_path = "xdp"`); also on for every
    /// topology when `XLAT_E2E_FAST_PATH` is set, so a whole suite can run both ways.
    pub fast_path: bool,
}

/// Is the XDP fast path asked for, by `opts` or by `XLAT_E2E_FAST_PATH`?
pub fn fast_path_wanted(opts: &Opts) -> bool {
    opts.fast_path || std::env::var_os("XLAT_E2E_FAST_PATH").is_some()
}

/// The three (or four) namespace topology. Dropping it kills every process it started and
/// deletes its namespaces.
pub struct Topo {
    pub id: String,
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
    /// Scratch directory for configs, logs, files.
    pub dir: PathBuf,
    pub procs: Vec<Proc>,
    /// Index of the xlat daemon in `procs`.
    pub xlat: Option<ProcId>,
    pub socket: PathBuf,
    pub config: PathBuf,
    /// xlat runs with the XDP fast path on GW's two veth devices.
    pub fast_path: bool,
    /// The inside segment is a bridge (two inside hosts); otherwise IN links to GW directly.
    pub bridged: bool,
    namespaces: Vec<String>,
}

/// Path of the xlat binary cargo built for these tests.
/// An unbound configuration for the tests' DNS server: listens on `interface` port 53 (IPv4
/// only), runs in the foreground from `dir`, and serves each `(zone name, zone file in dir)`
/// authoritatively.
#[allow(dead_code)] // not every test binary runs a DNS server
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

pub fn xlat_bin() -> &'static str {
    env!("CARGO_BIN_EXE_xlat")
}

impl Topo {
    /// Builds the topology. Panics (after cleaning up) if any step fails.
    pub fn new(opts: Opts) -> Topo {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        // Interface names are limited to 15 bytes: "x" + pid (hex, <= 6) + counter + suffix (<= 3).
        let id = format!("x{:x}n{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("xlat-e2e-{id}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
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
            socket: dir.join("xlat.sock"),
            config: dir.join("xlat.toml"),
            dir,
            procs: Vec::new(),
            xlat: None,
            fast_path: fast_path_wanted(&opts),
            // A bridge for two inside hosts, and without the fast path (the historical
            // topology); XDP redirects need the host's veth peer to be GW's own port.
            bridged: opts.second_inside_host || !fast_path_wanted(&opts),
            namespaces: Vec::new(),
            id,
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
            // A leftover from a killed run with the same pid: remove it first.
            let _ = run_host(10, &["ip", "netns", "del", ns]);
            run_host(10, &["ip", "netns", "add", ns]).check();
            self.namespaces.push(ns.clone());
            self.ip(ns, &["link", "set", "lo", "up"]);
        }
        let (gw, inn, out) = (self.ns_gw.clone(), self.ns_in.clone(), self.ns_out.clone());

        // GW: bridge for the inside segment, forwarding on.
        if self.bridged {
            self.ip(
                &gw,
                &["link", "add", "name", &self.gw_br.clone(), "type", "bridge"],
            );
            self.ip(
                &gw,
                &[
                    "addr",
                    "add",
                    &format!("{GW_IN_ADDR}/24"),
                    "dev",
                    &self.gw_br.clone(),
                ],
            );
            self.ip(&gw, &["link", "set", &self.gw_br.clone(), "up"]);
        }
        self.ns_ok(&gw, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);

        // IN <-> GW bridge.
        self.link_host(&inn, &self.in_dev.clone(), &self.gw_in_dev.clone(), IN_ADDR);
        if let Some(in2) = self.ns_in2.clone() {
            self.link_host(
                &in2,
                &self.in2_dev.clone(),
                &self.gw_in2_dev.clone(),
                IN2_ADDR,
            );
        }

        // GW <-> OUT.
        let (go, od) = (self.gw_out_dev.clone(), self.out_dev.clone());
        self.ip(
            &gw,
            &[
                "link", "add", "name", &go, "type", "veth", "peer", "name", &od, "netns", &out,
            ],
        );
        self.ip(
            &gw,
            &["addr", "add", &format!("{GW_OUT_ADDR}/24"), "dev", &go],
        );
        self.ip(
            &out,
            &["addr", "add", &format!("{OUT_ADDR}/24"), "dev", &od],
        );
        self.ip(
            &out,
            &["addr", "add", &format!("{OUT_ADDR2}/24"), "dev", &od],
        );
        self.offloads_off(&gw, &go);
        self.offloads_off(&out, &od);
        self.ip(&gw, &["link", "set", &go, "up"]);
        self.ip(&out, &["link", "set", &od, "up"]);
        // OUT deliberately has no route to 198.18.0.0/24 and no default route.
        if self.bridged {
            self.offloads_off(&gw, &self.gw_br.clone());
        }
    }

    /// A host namespace `ns` with device `dev` (address `addr`/24, default via GW) whose peer
    /// `gw_dev` is enslaved to the GW bridge.
    fn link_host(&mut self, ns: &str, dev: &str, gw_dev: &str, addr: &str) {
        let gw = self.ns_gw.clone();
        self.ip(
            &gw,
            &[
                "link", "add", "name", gw_dev, "type", "veth", "peer", "name", dev, "netns", ns,
            ],
        );
        if self.bridged {
            self.ip(&gw, &["link", "set", gw_dev, "master", &self.gw_br.clone()]);
        } else {
            self.ip(
                &gw,
                &["addr", "add", &format!("{GW_IN_ADDR}/24"), "dev", gw_dev],
            );
        }
        self.ip(ns, &["addr", "add", &format!("{addr}/24"), "dev", dev]);
        self.offloads_off(&gw, gw_dev);
        self.offloads_off(ns, dev);
        self.ip(&gw, &["link", "set", gw_dev, "up"]);
        self.ip(ns, &["link", "set", dev, "up"]);
        self.ip(ns, &["route", "add", "default", "via", GW_IN_ADDR]);
    }

    /// Turns off segmentation and receive offloads so every packet on the wire is a real one.
    /// With the fast path, hosts also compute their checksums (a veth otherwise hands on
    /// partial ones, which no physical wire carries and XDP cannot finish) and keep GRO on:
    /// a veth delivers XDP-redirected frames only to a peer with NAPI running.
    fn offloads_off(&self, ns: &str, dev: &str) {
        let mut args = vec!["ethtool", "-K", dev, "tso", "off", "gso", "off"];
        if self.fast_path && ns != self.ns_gw {
            args.extend(["gro", "on", "tx", "off"]);
        } else {
            args.extend(["gro", "off"]);
        }
        // Some features may be fixed on some devices; ethtool then exits nonzero. Best effort.
        let _ = self.ns(ns, 10, &args);
    }

    /// `ip -n NS ARGS...`, must succeed.
    pub fn ip(&self, ns: &str, args: &[&str]) -> Run {
        let mut v = vec!["ip", "-n", ns];
        v.extend_from_slice(args);
        run_host(10, &v).check()
    }

    /// Runs `args` inside namespace `ns` with a time limit, capturing output.
    pub fn ns(&self, ns: &str, secs: u64, args: &[&str]) -> Run {
        let mut c = Command::new("timeout");
        c.args(["-k", "2", &secs.to_string(), "ip", "netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .env("PYTHONUNBUFFERED", "1");
        finish(format!("[{ns}] {}", args.join(" ")), c.output())
    }

    /// Like `ns` but must succeed.
    pub fn ns_ok(&self, ns: &str, args: &[&str]) -> Run {
        self.ns(ns, 30, args).check()
    }

    /// Runs a shell script inside `ns` with a time limit.
    pub fn sh(&self, ns: &str, secs: u64, script: &str) -> Run {
        self.ns(ns, secs, &["sh", "-c", script])
    }

    /// Starts a background process in `ns`; its output goes to files in `dir`.
    pub fn spawn(&mut self, ns: &str, name: &str, args: &[&str]) -> ProcId {
        self.spawn_env(ns, name, args, &[])
    }

    pub fn spawn_env(
        &mut self,
        ns: &str,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> ProcId {
        let k = self.procs.len();
        let stdout = self.dir.join(format!("{k:02}-{name}.out"));
        let stderr = self.dir.join(format!("{k:02}-{name}.err"));
        let o = fs::File::create(&stdout)
            .unwrap_or_else(|e| panic!("create {}: {e}", stdout.display()));
        let e = fs::File::create(&stderr)
            .unwrap_or_else(|e| panic!("create {}: {e}", stderr.display()));
        let mut c = Command::new("ip");
        // `ip netns exec` execs the program, so the child's pid is the program's pid.
        c.args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(o)
            .stderr(e)
            .env("PYTHONUNBUFFERED", "1");
        for (k, v) in env {
            c.env(k, v);
        }
        let child = c
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {args:?} in {ns}: {e}"));
        self.procs.push(Proc {
            name: name.to_string(),
            child,
            stdout,
            stderr,
            status: None,
        });
        ProcId(k)
    }

    pub fn proc(&mut self, p: ProcId) -> &mut Proc {
        &mut self.procs[p.0]
    }

    /// Stops a process: SIGTERM, up to 2 s grace, then SIGKILL.
    pub fn stop(&mut self, p: ProcId) -> Option<ExitStatus> {
        self.procs[p.0].stop_with(libc::SIGTERM, Duration::from_secs(2))
    }

    /// Waits until a TCP or UDP socket listens on `port` in `ns`.
    pub fn wait_listening(&mut self, ns: &str, proto: &str, port: u16, owner: Option<ProcId>) {
        let flag = if proto == "udp" { "-Hlun" } else { "-Hltn" };
        let filter = format!("sport = :{port}");
        let what = format!("{proto} port {port} listening in {ns}");
        let limit = Duration::from_secs(10);
        let start = Instant::now();
        for _ in 0..200 {
            let r = self.ns(ns, 5, &["ss", flag, &filter]);
            if r.ok() && !r.stdout.trim().is_empty() {
                return;
            }
            if let Some(p) = owner {
                if let Some(st) = self.procs[p.0].try_status() {
                    let pr = &self.procs[p.0];
                    panic!(
                        "{} exited ({st}) before {what}:\n{}\n{}",
                        pr.name,
                        pr.stdout_text(),
                        pr.stderr_text()
                    );
                }
            }
            if start.elapsed() > limit {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("timed out waiting for {what}");
    }

    /// Starts tcpdump in `ns` on `dev` with `filter`, text output, and waits until it listens.
    pub fn tcpdump(&mut self, ns: &str, dev: &str, filter: &str) -> ProcId {
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
        let limit = Duration::from_secs(10);
        let ok = poll(limit, Duration::from_millis(50), || {
            self.procs[p.0].stderr_text().contains("listening on")
        });
        if !ok {
            let pr = &mut self.procs[p.0];
            let st = pr.try_status();
            panic!(
                "tcpdump on {dev} in {ns} not ready ({st:?}): {}",
                pr.stderr_text()
            );
        }
        p
    }

    /// Stops a tcpdump started by `tcpdump` (after a short settle time) and returns its lines.
    pub fn tcpdump_lines(&mut self, p: ProcId) -> Vec<String> {
        std::thread::sleep(Duration::from_millis(300));
        self.procs[p.0].stop_with(libc::SIGINT, Duration::from_secs(3));
        self.procs[p.0]
            .stdout_text()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
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
    #[allow(dead_code)] // not every test binary fetches a file
    pub fn fetch_random_file(&mut self, len: u64) -> ProcId {
        let (inn, out) = (self.ns_in.clone(), self.ns_out.clone());
        let www = self.dir.join("www");
        fs::create_dir_all(&www).unwrap_or_else(|e| panic!("create {}: {e}", www.display()));
        let blob = www.join("blob.bin");
        run_host(
            30,
            &[
                "sh",
                "-c",
                &format!("head -c {len} /dev/urandom > {}", blob.display()),
            ],
        )
        .check();
        let www_s = www.display().to_string();
        let srv = self.spawn(
            &out,
            "http",
            &[
                "python3",
                "-m",
                "http.server",
                "8080",
                "--bind",
                OUT_ADDR,
                "--directory",
                &www_s,
            ],
        );
        self.wait_listening(&out, "tcp", 8080, Some(srv));
        let got = self.dir.join("got.bin");
        let got_s = got.display().to_string();
        let r = self.ns(
            &inn,
            60,
            &[
                "curl",
                "-sS",
                "--max-time",
                "45",
                "-o",
                &got_s,
                &format!("http://{OUT_ADDR}:8080/blob.bin"),
            ],
        );
        assert!(r.ok(), "curl failed: {}\n{}", r.stdout, r.stderr);
        let sums = run_host(30, &["sha256sum", &blob.display().to_string(), &got_s]).check();
        let hashes: Vec<&str> = sums
            .stdout
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(hashes.len(), 2, "sha256sum output: {}", sums.stdout);
        assert_eq!(
            hashes[0], hashes[1],
            "the file fetched through xlat differs from the original"
        );
        let got_len = fs::metadata(&got).map(|m| m.len()).unwrap_or(0);
        assert_eq!(got_len, len);
        srv
    }

    /// `[dataplane]` for the XDP fast path on GW's inside and outside devices, or nothing.
    pub fn dataplane_section(&self) -> String {
        if !self.fast_path {
            return String::new();
        }
        format!(
            "\n[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"{}\", \"{}\"]\n",
            self.gw_in_dev, self.gw_out_dev
        )
    }

    /// Writes `config`, starts `xlat run -c` in GW and waits until it is ready: the TUN device
    /// is up, some route leads into it, and the control socket answers `show stats`.
    pub fn start_xlat(&mut self, config: &str) -> ProcId {
        fs::write(&self.config, config)
            .unwrap_or_else(|e| panic!("write {}: {e}", self.config.display()));
        let cfg = self.config.display().to_string();
        let gw = self.ns_gw.clone();
        let p = self.spawn_env(
            &gw,
            "xlat",
            &[xlat_bin(), "run", "-c", &cfg],
            &[("RUST_LOG", "info")],
        );
        self.xlat = Some(p);
        let tun = self.tun.clone();
        let start = Instant::now();
        let limit = Duration::from_secs(15);
        let mut stage = "TUN device up";
        for _ in 0..300 {
            if let Some(st) = self.procs[p.0].try_status() {
                panic!(
                    "xlat run exited ({st}) while starting (waiting for {stage}); config:\n{config}\n--- stderr\n{}\n--- stdout\n{}",
                    self.procs[p.0].stderr_text(),
                    self.procs[p.0].stdout_text()
                );
            }
            let link = self.ns(&gw, 5, &["ip", "-o", "link", "show", "dev", &tun]);
            let up = link.ok() && link.stdout.contains(",UP");
            let routes = self.ns(
                &gw,
                5,
                &["ip", "-4", "route", "show", "table", "all", "dev", &tun],
            );
            let routed = routes.ok() && !routes.stdout.trim().is_empty();
            stage = if !up {
                "TUN device up"
            } else if !routed {
                "a route into the TUN device"
            } else if !self.socket.exists() {
                "control socket"
            } else {
                "control socket to answer"
            };
            if up
                && routed
                && self.socket.exists()
                && self.xlat_cmd(&["show", "stats", "--json"]).ok()
            {
                return p;
            }
            if start.elapsed() > limit {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "xlat run not ready after {limit:?} (waiting for {stage});\n--- stderr\n{}",
            self.procs[p.0].stderr_text()
        );
    }

    /// Runs the xlat CLI against this topology's control socket (`--socket` appended).
    pub fn xlat_cmd(&self, args: &[&str]) -> Run {
        let sock = self.socket.display().to_string();
        let mut v: Vec<&str> = vec![xlat_bin()];
        v.extend_from_slice(args);
        v.extend_from_slice(&["--socket", &sock]);
        run_host(15, &v)
    }

    /// `xlat show stats --json`, parsed.
    pub fn stats(&self) -> serde_json::Value {
        let r = self.xlat_cmd(&["show", "stats", "--json"]).check();
        serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("show stats --json is not JSON ({e}):\n{}", r.stdout))
    }

    /// `xlat show sessions --json`, parsed.
    pub fn sessions(&self) -> Vec<serde_json::Value> {
        let r = self.xlat_cmd(&["show", "sessions", "--json"]).check();
        let v: serde_json::Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("show sessions --json is not JSON ({e}):\n{}", r.stdout));
        v.as_array()
            .cloned()
            .unwrap_or_else(|| panic!("show sessions --json is not an array:\n{}", r.stdout))
    }

    /// Value of an event counter in stats, panicking if it is not listed.
    pub fn event(stats: &serde_json::Value, name: &str) -> u64 {
        counter(stats, "events", name)
    }

    /// Value of a drop counter in stats, panicking if it is not listed.
    pub fn drops(stats: &serde_json::Value, name: &str) -> u64 {
        counter(stats, "drops", name)
    }

    /// The namespace names (for tests that need them all).
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// Writes the tails of every log (stderr to stderr) for a failed test.
    fn dump_logs(&mut self) {
        eprintln!(
            "==== e2e topology {} failed; logs in {}",
            self.id,
            self.dir.display()
        );
        for p in &self.procs {
            for (kind, path) in [("stdout", &p.stdout), ("stderr", &p.stderr)] {
                let text = fs::read_to_string(path).unwrap_or_default();
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
}

fn counter(stats: &serde_json::Value, list: &str, name: &str) -> u64 {
    let arr = stats[list]
        .as_array()
        .unwrap_or_else(|| panic!("stats has no {list:?} array: {stats}"));
    arr.iter()
        .find(|e| e["name"].as_str() == Some(name))
        .and_then(|e| e["value"].as_u64())
        .unwrap_or_else(|| panic!("stats {list:?} has no counter {name:?}: {stats}"))
}

/// Removes all processes in `ns` and the namespace itself (bounded; warns if it cannot).
pub fn destroy_ns(ns: &str) {
    let pids = run_host(5, &["ip", "netns", "pids", ns]);
    for pid in pids
        .stdout
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        // SAFETY: kill(2); these pids live in a namespace this test created.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    for _ in 0..20 {
        if run_host(10, &["ip", "netns", "del", ns]).ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("warning: could not delete namespace {ns}");
}

impl Drop for Topo {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed {
            self.dump_logs();
        }
        // xlat first and gently, so it can remove what it installed; then the rest.
        if let Some(x) = self.xlat {
            self.procs[x.0].stop_with(libc::SIGTERM, Duration::from_secs(3));
        }
        for p in self.procs.iter_mut().rev() {
            p.stop_with(libc::SIGKILL, Duration::from_secs(2));
        }
        for ns in self.namespaces.iter().rev() {
            destroy_ns(ns);
        }
        if !failed && std::env::var_os("XLAT_E2E_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Reads a whole file as text (empty if missing).
pub fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_default()
}
