//! End to end: two IPv6 hosts joined over an IPv4-only router by 6in4 tunnels, with `xlat run`
//! as the tunnel endpoint on both ends -- 6to4 (RFC 3056, both ends 6to4 routers, B also the
//! relay router for A's native destinations) and ISATAP (RFC 5214, A a host that learns its
//! prefix from B, the router). Real clients and servers: ping, ping with fragments, curl of a
//! 4 MiB file checked by SHA-256, iperf3.
//!
//! ```text
//!   A 198.18.0.2/24 ---- R 198.18.0.1/24, 198.18.1.1/24 ---- B 198.18.1.2/24
//!   xlat run (TUN)        IPv4 only (IPv6 disabled)           xlat run (TUN), 2001:2:0:6::1 on lo
//! ```
//!
//! Each test makes its own uniquely named namespaces and removes them, also on failure; every
//! wait is bounded; every command runs under `timeout`. At the end xlat is stopped with
//! SIGTERM and the test checks that the policy rules it added are gone and the kernel's
//! `lookup local` rule is back at pref 0.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{can_run, poll, run_host, xlat_bin, Proc, Run, Topo};

static COUNTER: AtomicU32 = AtomicU32::new(0);

const A4: &str = "198.18.0.2";
const B4: &str = "198.18.1.2";
const B_NATIVE: &str = "2001:2:0:6::1";
const FILE_BYTES: usize = 4 * 1024 * 1024;

/// Three namespaces A - R - B; dropped: processes killed (xlat first, gently), namespaces gone.
struct Net {
    id: String,
    a: String,
    r: String,
    b: String,
    tun_a: String,
    tun_b: String,
    dir: PathBuf,
    procs: Vec<Proc>,
    xlat: Vec<usize>,
}

fn ns_run(ns: &str, secs: u64, args: &[&str]) -> Run {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    run_host(secs, &v)
}

impl Net {
    fn new() -> Net {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let id = format!("x{:x}t{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("xlat-e2e-{id}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut net = Net {
            a: format!("{id}-a"),
            r: format!("{id}-r"),
            b: format!("{id}-b"),
            tun_a: format!("{id}ta"),
            tun_b: format!("{id}tb"),
            dir,
            procs: Vec::new(),
            xlat: Vec::new(),
            id,
        };
        net.build();
        net
    }

    fn ip(&self, ns: &str, args: &[&str]) {
        let mut v = vec!["ip", "-n", ns];
        v.extend_from_slice(args);
        run_host(10, &v).check();
    }

    fn build(&mut self) {
        let (a, r, b, id) = (
            self.a.clone(),
            self.r.clone(),
            self.b.clone(),
            self.id.clone(),
        );
        for ns in [&a, &r, &b] {
            let _ = run_host(10, &["ip", "netns", "del", ns]);
            run_host(10, &["ip", "netns", "add", ns]).check();
            self.ip(ns, &["link", "set", "lo", "up"]);
        }
        // R is an IPv4-only router.
        ns_run(
            &r,
            10,
            &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
        )
        .check();
        ns_run(&r, 10, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]).check();
        for (ns, side, mine, rtr) in [
            (&a, "a", "198.18.0.2/24", "198.18.0.1"),
            (&b, "b", "198.18.1.2/24", "198.18.1.1"),
        ] {
            let (dev, peer) = (format!("{id}{side}"), format!("{id}r{side}"));
            self.ip(
                ns,
                &[
                    "link", "add", &dev, "type", "veth", "peer", "name", &peer, "netns", &r,
                ],
            );
            self.ip(ns, &["addr", "add", mine, "dev", &dev]);
            self.ip(&r, &["addr", "add", &format!("{rtr}/24"), "dev", &peer]);
            for (n, d) in [(ns.as_str(), dev.as_str()), (r.as_str(), peer.as_str())] {
                let _ = ns_run(
                    n,
                    10,
                    &["ethtool", "-K", d, "tso", "off", "gso", "off", "gro", "off"],
                );
                self.ip(n, &["link", "set", d, "up"]);
            }
            self.ip(ns, &["route", "add", "default", "via", rtr]);
        }
        // B's native IPv6 address (6to4 relay target, ISATAP server).
        self.ip(
            &b,
            &["-6", "addr", "add", &format!("{B_NATIVE}/128"), "dev", "lo"],
        );
        // The IPv4 path works before any tunnel.
        ns_run(&a, 10, &["ping", "-c", "1", "-W", "2", B4]).check();
    }

    fn spawn(&mut self, ns: &str, name: &str, args: &[&str], env: &[(&str, &str)]) -> usize {
        let k = self.procs.len();
        let stdout = self.dir.join(format!("{k:02}-{name}.out"));
        let stderr = self.dir.join(format!("{k:02}-{name}.err"));
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout).expect("stdout file"))
            .stderr(fs::File::create(&stderr).expect("stderr file"));
        for (k, v) in env {
            c.env(k, v);
        }
        let child = c
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {args:?}: {e}"));
        self.procs.push(Proc {
            name: name.to_string(),
            child,
            stdout,
            stderr,
            status: None,
        });
        k
    }

    /// Starts `xlat run` in `ns` with `config` and waits until its rules and TUN are there.
    fn start_xlat(&mut self, ns: &str, side: &str, config: &str) -> PathBuf {
        let cfg = self.dir.join(format!("xlat-{side}.toml"));
        fs::write(&cfg, config).expect("write config");
        let sock = self.dir.join(format!("xlat-{side}.sock"));
        let cfg_s = cfg.display().to_string();
        let k = self.spawn(
            ns,
            &format!("xlat-{side}"),
            &[xlat_bin(), "run", "-c", &cfg_s],
            &[("RUST_LOG", "info")],
        );
        self.xlat.push(k);
        let ready = poll(Duration::from_secs(15), Duration::from_millis(100), || {
            let rules = ns_run(ns, 5, &["ip", "-4", "rule", "show", "pref", "10"]);
            let stats = run_host(
                5,
                &[
                    xlat_bin(),
                    "show",
                    "stats",
                    "--json",
                    "--socket",
                    &sock.display().to_string(),
                ],
            );
            rules.ok() && rules.stdout.contains("ipproto") && stats.ok()
        });
        if !ready {
            let p = &mut self.procs[k];
            panic!(
                "xlat in {ns} not ready ({:?}):\n{}",
                p.try_status(),
                p.stderr_text()
            );
        }
        sock
    }

    fn stats(&self, sock: &std::path::Path) -> serde_json::Value {
        let r = run_host(
            10,
            &[
                xlat_bin(),
                "show",
                "stats",
                "--json",
                "--socket",
                &sock.display().to_string(),
            ],
        )
        .check();
        serde_json::from_str(&r.stdout).expect("stats JSON")
    }

    /// Serves a random file over HTTP on [::]:8080 in B; returns its SHA-256.
    fn serve_file(&mut self) -> String {
        let www = self.dir.join("www");
        fs::create_dir_all(&www).expect("www dir");
        let mut data = vec![0u8; FILE_BYTES];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for b in data.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        fs::write(www.join("blob"), &data).expect("write blob");
        let sum = run_host(30, &["sha256sum", &www.join("blob").display().to_string()]).check();
        let b = self.b.clone();
        let www_s = www.display().to_string();
        self.spawn(
            &b,
            "http",
            &[
                "python3",
                "-m",
                "http.server",
                "8080",
                "--bind",
                "::",
                "--directory",
                &www_s,
            ],
            &[("PYTHONUNBUFFERED", "1")],
        );
        let up = poll(Duration::from_secs(10), Duration::from_millis(100), || {
            ns_run(&b, 5, &["ss", "-Hltn", "sport = :8080"])
                .stdout
                .contains("8080")
        });
        assert!(up, "http server in B did not listen");
        sum.stdout
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string()
    }

    /// ping, ping with fragments, curl + SHA-256, iperf3 from A to `dst` in B.
    fn traffic(&mut self, dst: &str, sha: &str) {
        let a = self.a.clone();
        let b = self.b.clone();
        ns_run(
            &a,
            20,
            &["ping", "-6", "-c", "3", "-i", "0.2", "-W", "3", dst],
        )
        .check();
        // 3000 bytes: IPv6 fragments of at most the tunnel MTU (1480), reassembled by B.
        ns_run(
            &a,
            20,
            &[
                "ping", "-6", "-c", "3", "-i", "0.2", "-W", "3", "-s", "3000", dst,
            ],
        )
        .check();
        let out = self.dir.join(format!("got-{}", dst.replace(':', "_")));
        let url = format!("http://[{dst}]:8080/blob");
        ns_run(
            &a,
            60,
            &[
                "curl",
                "-sS",
                "-g",
                "--max-time",
                "50",
                "-o",
                &out.display().to_string(),
                &url,
            ],
        )
        .check();
        let got = run_host(30, &["sha256sum", &out.display().to_string()]).check();
        assert_eq!(
            got.stdout.split_whitespace().next(),
            Some(sha),
            "downloaded file differs"
        );
        let k = self.spawn(&b, "iperf3-s", &["iperf3", "-s", "-1", "-p", "5201"], &[]);
        let up = poll(Duration::from_secs(10), Duration::from_millis(100), || {
            ns_run(&b, 5, &["ss", "-Hltn", "sport = :5201"])
                .stdout
                .contains("5201")
        });
        assert!(up, "iperf3 server did not listen");
        let r = ns_run(
            &a,
            40,
            &["iperf3", "-6", "-c", dst, "-p", "5201", "-t", "2", "-J"],
        )
        .check();
        let j: serde_json::Value = serde_json::from_str(&r.stdout).expect("iperf3 JSON");
        let bytes = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        assert!(
            bytes > 1_000_000,
            "iperf3 moved only {bytes} bytes: {}",
            r.stdout
        );
        self.procs[k].stop_with(libc::SIGKILL, Duration::from_secs(2));
    }

    /// Stops every xlat with SIGTERM and checks that the rules are back as they were.
    fn stop_xlat_and_check_cleanup(&mut self) {
        for &k in &self.xlat {
            let st = self.procs[k].stop_with(libc::SIGTERM, Duration::from_secs(5));
            assert!(st.is_some_and(|s| s.success()), "xlat exited with {st:?}");
        }
        for ns in [&self.a, &self.b] {
            let rules = ns_run(ns, 5, &["ip", "-4", "rule", "show"]).check().stdout;
            assert!(
                rules
                    .lines()
                    .next()
                    .is_some_and(|l| l.starts_with("0:") && l.contains("lookup local")),
                "lookup local not back at pref 0 in {ns}:\n{rules}"
            );
            assert!(
                !rules.contains("ipproto") && !rules.contains("iif"),
                "rules left in {ns}:\n{rules}"
            );
        }
    }

    fn dump_logs(&self) {
        eprintln!(
            "==== e2e tunnel topology {} failed; logs in {}",
            self.id,
            self.dir.display()
        );
        for p in &self.procs {
            for (kind, text) in [("stdout", p.stdout_text()), ("stderr", p.stderr_text())] {
                let lines: Vec<&str> = text.lines().collect();
                let from = lines.len().saturating_sub(30);
                if !lines.is_empty() {
                    eprintln!("---- {} {kind}", p.name);
                    for l in &lines[from..] {
                        eprintln!("{l}");
                    }
                }
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed {
            self.dump_logs();
        }
        for &k in &self.xlat {
            self.procs[k].stop_with(libc::SIGTERM, Duration::from_secs(3));
        }
        for p in self.procs.iter_mut().rev() {
            p.stop_with(libc::SIGKILL, Duration::from_secs(2));
        }
        for ns in [&self.b, &self.r, &self.a] {
            common::destroy_ns(ns);
        }
        if !failed {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn config(tun: &str, sock: &std::path::Path, body: &str) -> String {
    format!(
        "# written by the xlat tunnel end-to-end test\n[tun]\nname = \"{tun}\"\n\n{body}\n[control]\nsocket = \"{}\"\n",
        sock.display()
    )
}

#[test]
fn sixtofour_between_two_xlat_endpoints() {
    if !can_run() {
        return;
    }
    let mut net = Net::new();
    let (a, b) = (net.a.clone(), net.b.clone());
    let (ta, tb) = (net.tun_a.clone(), net.tun_b.clone());
    let sock_a = net.dir.join("xlat-a.sock");
    let sock_b = net.dir.join("xlat-b.sock");
    // B is also the relay router for A's native destinations (B's own 2001:2:0:6::1).
    let cfg_b = config(
        &tb,
        &sock_b,
        &format!("[tunnel.6to4]\nipv4 = \"{B4}\"\nrelay_router = true\n"),
    );
    let cfg_a = config(
        &ta,
        &sock_a,
        &format!("[tunnel.6to4]\nipv4 = \"{A4}\"\nrelay = \"{B4}\"\n"),
    );
    net.start_xlat(&b, "b", &cfg_b);
    net.start_xlat(&a, "a", &cfg_a);
    let addr = ns_run(&a, 5, &["ip", "-6", "addr", "show", "dev", &ta])
        .check()
        .stdout;
    assert!(
        addr.contains("2002:c612:2::1/48"),
        "A's TUN address: {addr}"
    );

    let sha = net.serve_file();
    net.traffic("2002:c612:102::1", &sha);
    // Through the relay: a native destination.
    ns_run(
        &a,
        20,
        &["ping", "-6", "-c", "2", "-i", "0.2", "-W", "3", B_NATIVE],
    )
    .check();
    // The endpoint address still answers IPv4 pings (ICMP not about the tunnel goes back to
    // the kernel).
    ns_run(&b, 10, &["ping", "-c", "1", "-W", "2", A4]).check();

    let sa = net.stats(&sock_a);
    let sb = net.stats(&sock_b);
    assert!(Topo::event(&sa, "tunnel_encapsulated") > 1000, "{sa}");
    assert!(Topo::event(&sa, "tunnel_decapsulated") > 1000, "{sa}");
    assert!(Topo::event(&sb, "tunnel_decapsulated") > 1000, "{sb}");
    for s in [&sa, &sb] {
        for d in [
            "tunnel_spoofed_source",
            "tunnel_wrong_destination",
            "tunnel_6to4_address_refused",
            "tunnel_loop",
            "too_big",
        ] {
            assert_eq!(Topo::drops(s, d), 0, "{d}: {s}");
        }
    }
    net.stop_xlat_and_check_cleanup();
}

#[test]
fn isatap_host_and_router() {
    if !can_run() {
        return;
    }
    let mut net = Net::new();
    let (a, b) = (net.a.clone(), net.b.clone());
    let (ta, tb) = (net.tun_a.clone(), net.tun_b.clone());
    let sock_a = net.dir.join("xlat-a.sock");
    let sock_b = net.dir.join("xlat-b.sock");
    let cfg_b = config(
        &tb,
        &sock_b,
        &format!(
            "[tunnel.isatap]\nrole = \"router\"\nipv4 = \"{B4}\"\nprefix = \"2001:2:0:5::/64\"\n"
        ),
    );
    let cfg_a = config(
        &ta,
        &sock_a,
        &format!("[tunnel.isatap]\nrole = \"host\"\nipv4 = \"{A4}\"\nrouters = [\"{B4}\"]\n"),
    );
    net.start_xlat(&b, "b", &cfg_b);
    net.start_xlat(&a, "a", &cfg_a);
    // The host solicits, the router advertises, the host's daemon configures the address.
    let mut last = String::new();
    let learned = poll(Duration::from_secs(15), Duration::from_millis(100), || {
        last = ns_run(&a, 5, &["ip", "-6", "addr", "show", "dev", &ta]).stdout;
        last.contains("2001:2:0:5:0:5efe:c612:2/64")
    });
    assert!(learned, "A did not configure its ISATAP address:\n{last}");
    let route = ns_run(&a, 5, &["ip", "-6", "route", "show", "default"])
        .check()
        .stdout;
    assert!(
        route.contains(&ta),
        "no default route via the ISATAP interface: {route}"
    );

    let sha = net.serve_file();
    // Off-link: through the router (native address behind it).
    net.traffic(B_NATIVE, &sha);
    // On-link: directly to the router's own ISATAP address.
    ns_run(
        &a,
        20,
        &[
            "ping",
            "-6",
            "-c",
            "2",
            "-i",
            "0.2",
            "-W",
            "3",
            "-s",
            "3000",
            "2001:2:0:5::5efe:c612:102",
        ],
    )
    .check();

    let sa = net.stats(&sock_a);
    let sb = net.stats(&sock_b);
    assert!(Topo::event(&sa, "isatap_rs_sent") >= 1, "{sa}");
    assert!(Topo::event(&sa, "isatap_ra_received") >= 1, "{sa}");
    assert!(Topo::event(&sb, "isatap_ra_sent") >= 1, "{sb}");
    assert!(Topo::event(&sa, "tunnel_encapsulated") > 1000, "{sa}");
    assert!(Topo::event(&sb, "tunnel_decapsulated") > 1000, "{sb}");
    for s in [&sa, &sb] {
        for d in [
            "tunnel_spoofed_source",
            "isatap_invalid_nd",
            "isatap_no_router",
            "tunnel_loop",
            "too_big",
        ] {
            assert_eq!(Topo::drops(s, d), 0, "{d}: {s}");
        }
    }
    net.stop_xlat_and_check_cleanup();
    // The learned address went with the daemon's TUN.
    let addr = ns_run(&a, 5, &["ip", "-6", "addr", "show"]).stdout;
    assert!(
        !addr.contains("5efe:c612:2"),
        "ISATAP address left behind:\n{addr}"
    );
}
