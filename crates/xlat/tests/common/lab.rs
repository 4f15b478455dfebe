//! What every end-to-end topology owns, whatever its shape: a scratch directory, the network
//! namespaces it made, and the background processes it started (xlat among them). Dropping a
//! `Lab` (also when a test panics) dumps the logs of a failed test, stops xlat gently and kills
//! the rest, deletes the namespaces and any /etc/netns files it wrote, and removes the scratch
//! directory unless the test failed or `XLAT_E2E_KEEP` is set.
//!
//! The topologies (`Topo`, `Topo64`, the tunnel test's) add their own links and addresses on
//! top and reach these helpers through `Deref`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::{finish, poll, run_host, sha256, wait_for, xlat_bin, Run, UDP_LISTENER};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A background process started by a lab.
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

/// Handle to a process in `Lab::procs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcId(usize);

/// Namespaces, processes and a scratch directory; torn down on drop.
pub struct Lab {
    /// "x" + pid (hex) + the kind's letter + a counter: the prefix of every namespace and
    /// device name, unique per test.
    pub id: String,
    /// Scratch directory for configs, logs, files.
    pub dir: PathBuf,
    pub procs: Vec<Proc>,
    /// The xlat daemons in `procs`: stopped first, with SIGTERM, so they remove what they
    /// installed.
    pub xlat: Vec<ProcId>,
    /// The control socket of the lab's xlat (its stats go into a failed test's log dump).
    pub socket: PathBuf,
    namespaces: Vec<String>,
    /// /etc/netns/NS directories written by `resolv_conf`.
    netns_etc: Vec<PathBuf>,
    /// Whether this lab created /etc/netns itself (removed again if left empty).
    created_etc_netns: bool,
}

impl Lab {
    /// A lab with no namespaces yet. `kind` is one letter naming the topology (n, p, d, t:
    /// scripts/test.sh looks for leftover namespaces by it).
    pub fn new(kind: char) -> Lab {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        // Interface names are limited to 15 bytes: "x" + pid (hex, <= 6) + kind + counter +
        // suffix (<= 3).
        let id = format!("x{:x}{kind}{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("xlat-e2e-{id}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        Lab {
            id,
            socket: dir.join("xlat.sock"),
            dir,
            procs: Vec::new(),
            xlat: Vec::new(),
            namespaces: Vec::new(),
            netns_etc: Vec::new(),
            created_etc_netns: false,
        }
    }

    /// Creates namespace `ns` (removing a leftover of a killed run with the same pid first)
    /// with `lo` up; it is deleted on drop.
    pub fn add_ns(&mut self, ns: &str) {
        let _ = run_host(10, &["ip", "netns", "del", ns]);
        run_host(10, &["ip", "netns", "add", ns]).check();
        self.namespaces.push(ns.to_string());
        self.ip(ns, &["link", "set", "lo", "up"]);
    }

    /// The namespace names, in the order they were made.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// `ip -n NS ARGS...`, must succeed.
    pub fn ip(&self, ns: &str, args: &[&str]) -> Run {
        let mut v = vec!["ip", "-n", ns];
        v.extend_from_slice(args);
        run_host(10, &v).check()
    }

    /// A veth pair: `dev_a` in `ns_a`, its peer `dev_b` in `ns_b`. With several packet workers
    /// asked for (`XLAT_E2E_WORKERS`), each end gets as many queues, as a real multi-queue NIC
    /// has one per core: the XDP program then sees packets on every queue and the AF_XDP slow
    /// path has a socket for every worker.
    pub fn veth(&self, ns_a: &str, dev_a: &str, ns_b: &str, dev_b: &str) {
        let q = super::workers_wanted().unwrap_or(1).to_string();
        let mut args = vec!["link", "add", "name", dev_a];
        if q != "1" {
            args.extend(["numtxqueues", &q, "numrxqueues", &q]);
        }
        args.extend(["type", "veth", "peer", "name", dev_b]);
        if q != "1" {
            args.extend(["numtxqueues", &q, "numrxqueues", &q]);
        }
        args.extend(["netns", ns_b]);
        self.ip(ns_a, &args);
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

    /// Turns off segmentation and receive offloads so every packet on the wire is a real one;
    /// best effort (some features are fixed on some devices). A `fast_path_host` (a host
    /// beside a gateway running the XDP fast path) also computes its checksums (a veth
    /// otherwise hands on partial ones, which no physical wire carries and XDP cannot finish)
    /// and keeps GRO on: a veth delivers XDP-redirected frames only to a peer with NAPI running.
    pub fn offloads_off(&self, ns: &str, dev: &str, fast_path_host: bool) {
        let mut args = vec!["ethtool", "-K", dev, "tso", "off", "gso", "off"];
        if fast_path_host {
            args.extend(["gro", "on", "tx", "off"]);
        } else {
            args.extend(["gro", "off"]);
        }
        let _ = self.ns(ns, 10, &args);
    }

    /// Turns `dev`'s offloads in `ns` back on as Linux sets them for a veth (TSO, GSO, GRO,
    /// checksum offload), as real hosts have them.
    pub fn offloads_on(&self, ns: &str, dev: &str) {
        let args = [
            "ethtool", "-K", dev, "tso", "on", "gso", "on", "gro", "on", "tx", "on",
        ];
        self.ns(ns, 10, &args).check();
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

    /// `curl -sS --fail` of `url` from namespace `ns` (10 s at most): its body on success.
    pub fn http_get(&self, ns: &str, url: &str) -> Run {
        self.ns(ns, 20, &["curl", "-sS", "--fail", "--max-time", "10", url])
    }

    /// Runs `xlat trace ARGS` (12 s timeout) against the lab's control socket in `gw` while
    /// `send` makes traffic -- every 300 ms, 50 times at most, until the trace ends -- and
    /// returns what the trace printed; fails the test if the trace failed.
    pub fn trace_while(&mut self, gw: &str, args: &[&str], mut send: impl FnMut(&Lab)) -> String {
        let sock = self.socket.display().to_string();
        let mut argv = vec![xlat_bin(), "trace", "--socket", &sock, "--timeout", "12"];
        argv.extend_from_slice(args);
        let p = self.spawn(gw, "trace", &argv);
        for _ in 0..50 {
            if self.proc(p).try_status().is_some() {
                break;
            }
            send(self);
            std::thread::sleep(Duration::from_millis(300));
        }
        let st = self.proc(p).wait_exit(Duration::from_secs(15));
        let (out, err) = (self.proc(p).stdout_text(), self.proc(p).stderr_text());
        assert!(
            st.is_some_and(|s| s.success()),
            "xlat trace failed ({st:?}):\n{out}\n{err}"
        );
        out
    }

    /// Stops a process: SIGTERM, up to 2 s grace, then SIGKILL.
    pub fn stop(&mut self, p: ProcId) -> Option<ExitStatus> {
        self.procs[p.0].stop_with(libc::SIGTERM, Duration::from_secs(2))
    }

    /// Writes `config` to `path` and starts `xlat ARGS -c PATH` (`RUST_LOG=info`) in `ns` as
    /// `name`; it is stopped first, with SIGTERM, on drop. Does not wait for it.
    pub fn spawn_xlat(
        &mut self,
        ns: &str,
        name: &str,
        args: &[&str],
        path: &Path,
        config: &str,
    ) -> ProcId {
        fs::write(path, config).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        let cfg = path.display().to_string();
        eprintln!("e2e mode: {name} in {ns}: {}", dataplane_mode(config));
        let mut v = vec![xlat_bin()];
        v.extend_from_slice(args);
        v.extend_from_slice(&["-c", &cfg]);
        let p = self.spawn_env(ns, name, &v, &[("RUST_LOG", "info")]);
        self.xlat.push(p);
        p
    }

    /// Waits (15 s at most) until the xlat `p` in `ns` is ready: its TUN device `tun` is up,
    /// every `ip ROUTE... dev TUN` in `routes` lists a route, and the control socket answers
    /// `show stats`. Panics with its output (and `config`) if it exits first or is not ready.
    pub fn wait_xlat_ready(
        &mut self,
        p: ProcId,
        ns: &str,
        tun: &str,
        routes: &[&[&str]],
        config: &str,
    ) {
        let limit = Duration::from_secs(15);
        let mut stage = "TUN device up";
        let ready = poll(limit, Duration::from_millis(50), || {
            if self.procs[p.0].try_status().is_some() {
                return true;
            }
            let link = self.ns(ns, 5, &["ip", "-o", "link", "show", "dev", tun]);
            if !(link.ok() && link.stdout.contains(",UP")) {
                stage = "TUN device up";
                return false;
            }
            for route in routes {
                let mut args = vec!["ip"];
                args.extend_from_slice(route);
                args.extend(["dev", tun]);
                let r = self.ns(ns, 5, &args);
                if !r.ok() || r.stdout.trim().is_empty() {
                    stage = "routes into the TUN device";
                    return false;
                }
            }
            if !self.socket.exists() {
                stage = "control socket";
                return false;
            }
            stage = "control socket to answer";
            self.xlat_cmd(&["show", "stats", "--json"]).ok()
        });
        if let Some(st) = self.procs[p.0].try_status() {
            panic!(
                "xlat run exited ({st}) while starting (waiting for {stage}); config:\n{config}\n--- stderr\n{}\n--- stdout\n{}",
                self.procs[p.0].stderr_text(),
                self.procs[p.0].stdout_text()
            );
        }
        assert!(
            ready,
            "xlat run not ready after {limit:?} (waiting for {stage});\n--- stderr\n{}",
            self.procs[p.0].stderr_text()
        );
    }

    /// Waits (10 s at most) until a TCP or UDP socket listens on `port` in `ns`; panics with
    /// the owner's output if it exits first.
    pub fn wait_listening(&mut self, ns: &str, proto: &str, port: u16, owner: Option<ProcId>) {
        self.wait_listening_on(ns, proto, "", port, owner);
    }

    /// Like `wait_listening`, for a socket whose local address (as `ss` shows it) contains
    /// `addr`.
    pub fn wait_listening_on(
        &mut self,
        ns: &str,
        proto: &str,
        addr: &str,
        port: u16,
        owner: Option<ProcId>,
    ) {
        let flag = if proto == "udp" { "-Hlun" } else { "-Hltn" };
        let filter = format!("sport = :{port}");
        let limit = Duration::from_secs(10);
        let ready = poll(limit, Duration::from_millis(50), || {
            if owner.is_some_and(|p| self.procs[p.0].try_status().is_some()) {
                return true;
            }
            let r = self.ns(ns, 5, &["ss", flag, &filter]);
            r.ok() && !r.stdout.trim().is_empty() && r.stdout.contains(addr)
        });
        if let Some(p) = owner {
            let pr = &mut self.procs[p.0];
            if let Some(st) = pr.try_status() {
                panic!(
                    "{} exited ({st}) before listening on {proto} {addr} port {port} in {ns}:\n{}\n{}",
                    pr.name,
                    pr.stdout_text(),
                    pr.stderr_text()
                );
            }
        }
        assert!(
            ready,
            "timed out after {limit:?} waiting for {proto} {addr} port {port} listening in {ns}"
        );
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
        let ok = poll(Duration::from_secs(10), Duration::from_millis(50), || {
            self.procs[p.0].stderr_text().contains("listening on")
                || self.procs[p.0].try_status().is_some()
        });
        let pr = &mut self.procs[p.0];
        let st = pr.try_status();
        assert!(
            ok && st.is_none(),
            "tcpdump on {dev} in {ns} not ready ({st:?}): {}",
            pr.stderr_text()
        );
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

    /// Runs the xlat CLI against this lab's control socket (`--socket` appended).
    pub fn xlat_cmd(&self, args: &[&str]) -> Run {
        xlat_cli(&self.socket, args)
    }

    /// `xlat show stats --json`, parsed.
    pub fn stats(&self) -> serde_json::Value {
        stats_at(&self.socket)
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

    /// A UDP server in `ns` on `bind`:`port` (socat) answering every datagram with the peer
    /// it saw ("peer=A port=P"), then the data; waits until it listens.
    pub fn udp_echo(&mut self, ns: &str, bind: &str, port: u16) -> ProcId {
        let p = self.spawn(
            ns,
            &format!("udp-echo-{bind}-{port}"),
            &[
                "socat",
                &format!("UDP4-RECVFROM:{port},bind={bind},reuseaddr,fork"),
                "SYSTEM:echo peer=$SOCAT_PEERADDR port=$SOCAT_PEERPORT; cat",
            ],
        );
        self.wait_listening_on(ns, "udp", bind, port, Some(p));
        p
    }

    /// Starts `scripts::UDP_LISTENER` in `ns` as `name`, bound to `bind`:5555 and talking to a
    /// `udp_echo` server at `dst`:7000, and waits (10 s at most) for its "PEER A P" line.
    /// Returns the listener and the address and port the echo server saw it come from;
    /// panics if no reply came back.
    pub fn udp_listener(
        &mut self,
        ns: &str,
        name: &str,
        bind: &str,
        dst: &str,
    ) -> (ProcId, String, u16) {
        let lis = self.spawn(ns, name, &["python3", "-c", UDP_LISTENER, bind, dst]);
        let mut peer = (String::new(), 0u16);
        wait_for(
            &format!("{name}'s reply from {dst}"),
            Duration::from_secs(10),
            Duration::from_millis(50),
            || {
                let text = self.procs[lis.0].stdout_text();
                if let Some(l) = text.lines().find(|l| l.starts_with("PEER ")) {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    peer.0 = w.get(1).copied().unwrap_or_default().to_string();
                    peer.1 = w.get(2).and_then(|p| p.parse().ok()).unwrap_or(0);
                    return true;
                }
                text.contains("NO-REPLY") || self.procs[lis.0].try_status().is_some()
            },
        );
        assert!(
            peer.1 != 0,
            "{name} got no reply through xlat: {}",
            self.procs[lis.0].stdout_text()
        );
        (lis, peer.0, peer.1)
    }

    /// Writes `len` random bytes to `dir/www-PORT/blob.bin` and serves that directory over
    /// HTTP in `ns` on `bind`:`port`. Returns the server and the file.
    pub fn serve_random_file(
        &mut self,
        ns: &str,
        bind: &str,
        port: u16,
        len: u64,
    ) -> (ProcId, PathBuf) {
        let www = self.dir.join(format!("www-{port}"));
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
        (self.http_server(ns, bind, port, &www), blob)
    }

    /// Serves `www` over HTTP (python3 http.server, which logs each client to stderr) in `ns`
    /// on `bind`:`port` and waits until it listens.
    pub fn http_server(&mut self, ns: &str, bind: &str, port: u16, www: &Path) -> ProcId {
        let (www_s, port_s) = (www.display().to_string(), port.to_string());
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
        self.wait_listening_on(ns, "tcp", shown, port, Some(p));
        p
    }

    /// Fetches `url` with curl in `ns` into a new file; returns curl's `remote_ip` and the file.
    pub fn curl(&self, ns: &str, url: &str) -> (String, PathBuf) {
        static FETCHES: AtomicU32 = AtomicU32::new(0);
        let k = FETCHES.fetch_add(1, Ordering::SeqCst);
        let got = self.dir.join(format!("got-{k}.bin"));
        let got_s = got.display().to_string();
        let r = self.ns(
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

    /// `ping -n` in `ns` with `n` packets and extra `args`; all must be answered.
    pub fn ping_all(&self, ns: &str, n: u32, args: &[&str], dst: &str) -> Run {
        let count = n.to_string();
        let mut v = vec![
            "ping", "-n", "-c", &count, "-i", "0.2", "-W", "2", "-w", "15",
        ];
        v.extend_from_slice(args);
        v.push(dst);
        let r = self.ns(ns, 20, &v);
        assert_all_replies(&r, n);
        r
    }

    /// iperf3 TCP for 3 s: a one-shot server in `srv_ns` bound to `bind`:5201, the client in
    /// `cli_ns` connecting to `dst` (over IPv6 when `dst` is an IPv6 address). Checks that the
    /// client's report shows data moved, prints the rate, and waits (10 s at most) for the
    /// server to finish. Returns the client's and the server's reports (`-J`).
    pub fn iperf3_tcp(
        &mut self,
        srv_ns: &str,
        bind: &str,
        cli_ns: &str,
        dst: &str,
    ) -> (serde_json::Value, serde_json::Value) {
        let srv = self.spawn(
            srv_ns,
            "iperf3-server",
            &["iperf3", "-s", "-1", "-J", "-B", bind, "-p", "5201"],
        );
        self.wait_listening_on(srv_ns, "tcp", bind, 5201, Some(srv));
        let mut args = vec!["iperf3"];
        if dst.contains(':') {
            args.push("-6");
        }
        args.extend([
            "-c",
            dst,
            "-p",
            "5201",
            "-t",
            "3",
            "-J",
            "--connect-timeout",
            "5000",
        ]);
        let r = self.ns(cli_ns, 30, &args);
        assert!(r.ok(), "iperf3 client failed: {}\n{}", r.stdout, r.stderr);
        let j: serde_json::Value =
            serde_json::from_str(&r.stdout).expect("iperf3 -J output is JSON");
        let sent = j["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
        let recv = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        let bps = j["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or(0.0);
        assert!(
            sent > 0 && recv > 0,
            "iperf3 moved no data: sent {sent} received {recv}"
        );
        eprintln!(
            "iperf3 through xlat to {dst}: {:.1} Mbit/s ({recv} bytes)",
            bps / 1e6
        );
        let st = self.proc(srv).wait_exit(Duration::from_secs(10));
        assert!(st.is_some(), "iperf3 server did not finish");
        let sj: serde_json::Value =
            serde_json::from_str(&self.proc(srv).stdout_text()).expect("iperf3 server JSON");
        (j, sj)
    }

    /// Starts unbound in `ns` on `addr`:53, authoritative for each `(zone name, zone file
    /// name, zone text)`, and waits until it listens on UDP and TCP.
    pub fn start_unbound(&mut self, ns: &str, addr: &str, zones: &[(&str, &str, &str)]) -> ProcId {
        let d = self.dir.display().to_string();
        for (_, file, text) in zones {
            let path = self.dir.join(file);
            fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        }
        let names: Vec<(&str, &str)> = zones.iter().map(|(n, f, _)| (*n, *f)).collect();
        let conf = super::unbound_conf(&d, addr, &names);
        let path = self.dir.join("unbound.conf");
        fs::write(&path, conf).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        let p = self.spawn(
            ns,
            "unbound",
            &["unbound", "-d", "-c", &path.display().to_string()],
        );
        self.wait_listening_on(ns, "udp", addr, 53, Some(p));
        self.wait_listening_on(ns, "tcp", addr, 53, Some(p));
        p
    }

    /// Writes namespace `ns`'s resolv.conf (`ip netns exec` bind-mounts /etc/netns/NS/resolv.conf
    /// over /etc/resolv.conf). Removed on drop.
    pub fn resolv_conf(&mut self, ns: &str, nameserver: &str) {
        let base = PathBuf::from("/etc/netns");
        if !base.exists() {
            fs::create_dir_all(&base).unwrap_or_else(|e| panic!("create /etc/netns: {e}"));
            self.created_etc_netns = true;
        }
        let d = base.join(ns);
        fs::create_dir_all(&d).unwrap_or_else(|e| panic!("create {}: {e}", d.display()));
        self.netns_etc.push(d.clone());
        fs::write(
            d.join("resolv.conf"),
            format!("nameserver {nameserver}\noptions timeout:2 attempts:2\n"),
        )
        .unwrap_or_else(|e| panic!("write {}/resolv.conf: {e}", d.display()));
    }

    /// Writes the tails of every log (stderr to stderr) for a failed test.
    fn dump_logs(&self) {
        eprintln!(
            "==== e2e lab {} failed; logs in {}",
            self.id,
            self.dir.display()
        );
        for p in &self.procs {
            for (kind, text) in [("stdout", p.stdout_text()), ("stderr", p.stderr_text())] {
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
        if !self.xlat.is_empty() && self.socket.exists() {
            let s = self.xlat_cmd(&["show", "stats", "--json"]);
            eprintln!("---- xlat show stats --json\n{}{}", s.stdout, s.stderr);
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed {
            self.dump_logs();
        }
        // xlat first and gently, so it can remove what it installed; then the rest.
        for x in &self.xlat {
            self.procs[x.0].stop_with(libc::SIGTERM, Duration::from_secs(3));
        }
        for p in self.procs.iter_mut().rev() {
            p.stop_with(libc::SIGKILL, Duration::from_secs(2));
        }
        for ns in self.namespaces.iter().rev() {
            destroy_ns(ns);
        }
        for d in &self.netns_etc {
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

/// Runs the xlat CLI against control socket `sock` (`--socket` appended).
pub fn xlat_cli(sock: &Path, args: &[&str]) -> Run {
    let sock = sock.display().to_string();
    let mut v: Vec<&str> = vec![xlat_bin()];
    v.extend_from_slice(args);
    v.extend_from_slice(&["--socket", &sock]);
    run_host(15, &v)
}

/// `xlat show stats --json` against `sock`, parsed.
pub fn stats_at(sock: &Path) -> serde_json::Value {
    let r = xlat_cli(sock, &["show", "stats", "--json"]).check();
    serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("show stats --json is not JSON ({e}):\n{}", r.stdout))
}

/// Checks a ping's summary: `n` sent, `n` received.
pub fn assert_all_replies(r: &Run, n: u32) {
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

/// The fetched file is the served one: same length, same SHA-256.
pub fn assert_same_file(served: &Path, got: &Path) {
    let len = |p: &Path| fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    assert_eq!(
        len(got),
        len(served),
        "fetched file {} has the wrong size",
        got.display()
    );
    assert_eq!(
        sha256(served),
        sha256(got),
        "the file fetched through xlat differs from the original"
    );
}

/// The data path a configuration asks for, as the e2e output's "e2e mode" line says it:
/// `tun` or `xdp` (`[dataplane] fast_path = "xdp"`) and the packet workers (`workers = N`,
/// 1 when absent), so a failure names the mode it ran in (scripts/test.sh runs suites in
/// several: `XLAT_E2E_FAST_PATH`, `XLAT_E2E_WORKERS`).
pub fn dataplane_mode(config: &str) -> String {
    let value = |key: &str| {
        config.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
        })
    };
    let path = match (value("fast_path").as_deref(), value("slow_path").as_deref()) {
        (Some("xdp"), Some("af_xdp")) => "xdp+af_xdp",
        (Some("xdp"), _) => "xdp",
        (_, Some("af_xdp")) => "af_xdp",
        _ => "tun",
    };
    let workers = value("workers").unwrap_or_else(|| "1".to_string());
    format!("{path}, workers={workers}")
}
