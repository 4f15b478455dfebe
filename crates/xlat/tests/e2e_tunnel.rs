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
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{poll, require_root, sha256, stats_at, xlat_cli, Lab, Topo};

const A4: &str = "198.18.0.2";
const B4: &str = "198.18.1.2";
const B_NATIVE: &str = "2001:2:0:6::1";
const FILE_BYTES: usize = 4 * 1024 * 1024;

/// Three namespaces A - R - B; dropped: processes killed (xlat first, gently), namespaces gone.
struct Net {
    lab: Lab,
    a: String,
    r: String,
    b: String,
    tun_a: String,
    tun_b: String,
}

impl Deref for Net {
    type Target = Lab;
    fn deref(&self) -> &Lab {
        &self.lab
    }
}

impl DerefMut for Net {
    fn deref_mut(&mut self) -> &mut Lab {
        &mut self.lab
    }
}

impl Net {
    fn new() -> Net {
        let lab = Lab::new('t');
        let id = lab.id.clone();
        let mut net = Net {
            a: format!("{id}-a"),
            r: format!("{id}-r"),
            b: format!("{id}-b"),
            tun_a: format!("{id}ta"),
            tun_b: format!("{id}tb"),
            lab,
        };
        net.build();
        net
    }

    fn build(&mut self) {
        let (a, r, b, id) = (
            self.a.clone(),
            self.r.clone(),
            self.b.clone(),
            self.id.clone(),
        );
        for ns in [&a, &r, &b] {
            self.add_ns(ns);
        }
        // R is an IPv4-only router.
        self.ns_ok(&r, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
        self.ns_ok(&r, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        for (ns, side, mine, rtr) in [
            (&a, "a", "198.18.0.2/24", "198.18.0.1"),
            (&b, "b", "198.18.1.2/24", "198.18.1.1"),
        ] {
            let (dev, peer) = (format!("{id}{side}"), format!("{id}r{side}"));
            self.veth(ns, &dev, &r, &peer);
            self.ip(ns, &["addr", "add", mine, "dev", &dev]);
            self.ip(&r, &["addr", "add", &format!("{rtr}/24"), "dev", &peer]);
            for (n, d) in [(ns.as_str(), dev.as_str()), (r.as_str(), peer.as_str())] {
                self.offloads_off(n, d, false);
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
        self.ns(&a, 10, &["ping", "-c", "1", "-W", "2", B4]).check();
    }

    /// Starts `xlat run` in A or B (`side` "a" or "b") with the tunnel configuration `body`
    /// and waits until its rules and TUN are there. Returns its control socket.
    fn start_xlat(&mut self, side: &str, body: &str) -> PathBuf {
        let (ns, tun) = match side {
            "a" => (self.a.clone(), &self.tun_a),
            _ => (self.b.clone(), &self.tun_b),
        };
        let cfg = self.dir.join(format!("xlat-{side}.toml"));
        let sock = self.dir.join(format!("xlat-{side}.sock"));
        let config = config(tun, &sock, body);
        let ns = ns.as_str();
        let k = self.spawn_xlat(ns, &format!("xlat-{side}"), &["run"], &cfg, &config);
        let ready = poll(Duration::from_secs(15), Duration::from_millis(100), || {
            let rules = self.ns(ns, 5, &["ip", "-4", "rule", "show", "pref", "10"]);
            let stats = xlat_cli(&sock, &["show", "stats", "--json"]);
            rules.ok() && rules.stdout.contains("ipproto") && stats.ok()
        });
        if !ready {
            let p = self.proc(k);
            panic!(
                "xlat in {ns} not ready ({:?}):\n{}",
                p.try_status(),
                p.stderr_text()
            );
        }
        sock
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
        let b = self.b.clone();
        self.http_server(&b, "::", 8080, &www);
        sha256(&www.join("blob"))
    }

    /// ping, ping with fragments, curl + SHA-256, iperf3 from A to `dst` in B.
    fn traffic(&mut self, dst: &str, sha: &str) {
        let a = self.a.clone();
        let b = self.b.clone();
        self.ns(
            &a,
            20,
            &["ping", "-6", "-c", "3", "-i", "0.2", "-W", "3", dst],
        )
        .check();
        // 3000 bytes: IPv6 fragments of at most the tunnel MTU (1480), reassembled by B.
        self.ns(
            &a,
            20,
            &[
                "ping", "-6", "-c", "3", "-i", "0.2", "-W", "3", "-s", "3000", dst,
            ],
        )
        .check();
        let (_, got) = self.curl(&a, &format!("http://[{dst}]:8080/blob"));
        assert_eq!(sha256(&got), sha, "downloaded file differs");
        let k = self.spawn(&b, "iperf3-s", &["iperf3", "-s", "-1", "-p", "5201"]);
        self.wait_listening(&b, "tcp", 5201, Some(k));
        let r = self
            .ns(
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
        self.proc(k)
            .stop_with(libc::SIGKILL, Duration::from_secs(2));
    }

    /// Stops every xlat with SIGTERM and checks that the rules are back as they were.
    fn stop_xlat_and_check_cleanup(&mut self) {
        for k in self.xlat.clone() {
            let st = self
                .proc(k)
                .stop_with(libc::SIGTERM, Duration::from_secs(5));
            assert!(st.is_some_and(|s| s.success()), "xlat exited with {st:?}");
        }
        for ns in [&self.a, &self.b] {
            let rules = self.ns(ns, 5, &["ip", "-4", "rule", "show"]).check().stdout;
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
}

fn config(tun: &str, sock: &Path, body: &str) -> String {
    format!(
        "# written by the xlat tunnel end-to-end test\n[tun]\nname = \"{tun}\"\n\n{body}\n[control]\nsocket = \"{}\"\n",
        sock.display()
    )
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn sixtofour_between_two_xlat_endpoints() {
    require_root();
    let mut net = Net::new();
    let (a, b) = (net.a.clone(), net.b.clone());
    let ta = net.tun_a.clone();
    // B is also the relay router for A's native destinations (B's own 2001:2:0:6::1).
    let sock_b = net.start_xlat(
        "b",
        &format!("[tunnel.6to4]\nipv4 = \"{B4}\"\nrelay_router = true\n"),
    );
    let sock_a = net.start_xlat(
        "a",
        &format!("[tunnel.6to4]\nipv4 = \"{A4}\"\nrelay = \"{B4}\"\n"),
    );
    let addr = net
        .ns(&a, 5, &["ip", "-6", "addr", "show", "dev", &ta])
        .check()
        .stdout;
    assert!(
        addr.contains("2002:c612:2::1/48"),
        "A's TUN address: {addr}"
    );

    let sha = net.serve_file();
    net.traffic("2002:c612:102::1", &sha);
    // Through the relay: a native destination.
    net.ns(
        &a,
        20,
        &["ping", "-6", "-c", "2", "-i", "0.2", "-W", "3", B_NATIVE],
    )
    .check();
    // The endpoint address still answers IPv4 pings (ICMP not about the tunnel goes back to
    // the kernel).
    net.ns(&b, 10, &["ping", "-c", "1", "-W", "2", A4]).check();

    let sa = stats_at(&sock_a);
    let sb = stats_at(&sock_b);
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
#[ignore = "needs root: scripts/test.sh"]
fn isatap_host_and_router() {
    require_root();
    let mut net = Net::new();
    let a = net.a.clone();
    let ta = net.tun_a.clone();
    let sock_b = net.start_xlat(
        "b",
        &format!(
            "[tunnel.isatap]\nrole = \"router\"\nipv4 = \"{B4}\"\nprefix = \"2001:2:0:5::/64\"\n"
        ),
    );
    let sock_a = net.start_xlat(
        "a",
        &format!("[tunnel.isatap]\nrole = \"host\"\nipv4 = \"{A4}\"\nrouters = [\"{B4}\"]\n"),
    );
    // The host solicits, the router advertises, the host's daemon configures the address.
    let mut last = String::new();
    let learned = poll(Duration::from_secs(15), Duration::from_millis(100), || {
        last = net
            .ns(&a, 5, &["ip", "-6", "addr", "show", "dev", &ta])
            .stdout;
        last.contains("2001:2:0:5:0:5efe:c612:2/64")
    });
    assert!(learned, "A did not configure its ISATAP address:\n{last}");
    let route = net
        .ns(&a, 5, &["ip", "-6", "route", "show", "default"])
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
    net.ns(
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

    let sa = stats_at(&sock_a);
    let sb = stats_at(&sock_b);
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
    let addr = net.ns(&a, 5, &["ip", "-6", "addr", "show"]).stdout;
    assert!(
        !addr.contains("5efe:c612:2"),
        "ISATAP address left behind:\n{addr}"
    );
}
