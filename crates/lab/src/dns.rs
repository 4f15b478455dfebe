//! The DNS side of the lab's DNS64 experiment ([`crate::experiments`]'s `dns64`, S3's DNS64
//! path): the test zone and the names checked, the configurations of the authoritative server
//! and of the DNS64 resolvers (unbound's dns64 module, xlat's `[dns64]` table), the answers
//! RFC 6147 5.1-5.2 and RFC 6052 2.2 expect, what dnsperf and dig print, and the server
//! processes and the client namespace's resolv.conf, each stopped or removed on drop.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::addressing::{pref64, D_ADDR, PREF64, UA6_ADDR};
use crate::sys;

/// The test zone (RFC 2606 `example.`), served by the authoritative server on the D side.
pub const ZONE: &str = "s3.example";
/// The web server's name: one A record, the tester's D address.
pub const WEB_NAME: &str = "www.s3.example";
/// Never-asked names per repetition (one uncached dnsperf pass each): `rNhM.s3.example`,
/// only an A record each, the web server's address.
pub const UNCACHED_NAMES: usize = 50_000;
/// Names of the cached pass: the first of the repetition's uncached pass, asked again.
pub const CACHED_NAMES: usize = 1_000;
/// dnsperf's queries in flight (its default, `-q 100`).
pub const DNSPERF_OUTSTANDING: usize = 100;

/// A DNS64 resolver on the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// xlat's DNS64 proxy.
    Xlat,
    /// unbound's dns64 module.
    Unbound,
}

impl Resolver {
    pub fn name(self) -> &'static str {
        match self {
            Resolver::Xlat => "xlat-dns64",
            Resolver::Unbound => "unbound-dns64",
        }
    }
}

/// The NAT64 devices the client reaches the IPv4 side through with synthesized addresses.
pub fn is_nat64(device: &str) -> bool {
    device == "tayga-nat64" || device.starts_with("xlat-nat64")
}

/// The names whose answers are checked: (label, A records, AAAA records in the zone).
pub fn checked_names() -> Vec<(String, Vec<Ipv4Addr>, Vec<Ipv6Addr>)> {
    vec![
        ("www".into(), vec![D_ADDR], vec![]),
        (
            "two".into(),
            vec![
                Ipv4Addr::new(198, 51, 100, 20),
                Ipv4Addr::new(203, 0, 113, 10),
            ],
            vec![],
        ),
        (
            "dual".into(),
            vec![D_ADDR],
            vec![Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)],
        ),
    ]
}

/// The uncached pass's name `i` of repetition `rep` (without the zone).
pub fn bulk_name(rep: usize, i: usize) -> String {
    format!("r{rep}h{i}")
}

/// The zone file: SOA, NS, the checked names and `reps` x [`UNCACHED_NAMES`] names with only
/// an A record.
pub fn zone_text(reps: usize) -> String {
    let d = D_ADDR;
    let mut z = format!(
        "$ORIGIN {ZONE}.\n$TTL 3600\n@ IN SOA ns hostmaster 1 3600 600 86400 60\n@ IN NS ns\nns IN A {d}\n"
    );
    for (n, a4, a6) in checked_names() {
        for a in a4 {
            z.push_str(&format!("{n} IN A {a}\n"));
        }
        for a in a6 {
            z.push_str(&format!("{n} IN AAAA {a}\n"));
        }
    }
    for rep in 0..reps {
        for i in 0..UNCACHED_NAMES {
            z.push_str(&format!("{} IN A {d}\n", bulk_name(rep, i)));
        }
    }
    z
}

/// dnsperf's input: AAAA queries for names `first..first+n` of repetition `rep`.
pub fn query_file(rep: usize, n: usize) -> String {
    let mut s = String::with_capacity(n * 24);
    for i in 0..n {
        s.push_str(&format!("{}.{ZONE} AAAA\n", bulk_name(rep, i)));
    }
    s
}

/// The authoritative server's configuration: unbound answering `ZONE` from its zone file
/// (auth-zone) on the D address, IPv4 only.
pub fn auth_conf(dir: &str) -> String {
    format!(
        r#"server:
  interface: {D_ADDR}
  port: 53
  do-ip6: no
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "{dir}"
  pidfile: "{dir}/auth.pid"
  use-syslog: no
  logfile: ""
  verbosity: 1
  num-threads: 1
  access-control: 0.0.0.0/0 allow
  module-config: "iterator"
  do-not-query-localhost: yes
auth-zone:
  name: "{ZONE}."
  zonefile: "{dir}/{ZONE}.zone"
  for-downstream: yes
  for-upstream: no
remote-control:
  control-enable: no
"#
    )
}

/// The peer DNS64: unbound's dns64 module with the lab's pref64, forwarding everything to the
/// authoritative server (no DNSSEC validation, as xlat's DNS64 does none).
pub fn unbound_dns64_conf(dir: &str) -> String {
    format!(
        r#"server:
  interface: {UA6_ADDR}
  port: 53
  do-ip4: yes
  do-ip6: yes
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "{dir}"
  pidfile: "{dir}/dns64.pid"
  use-syslog: no
  logfile: ""
  verbosity: 1
  num-threads: 1
  access-control: ::/0 allow
  module-config: "dns64 iterator"
  dns64-prefix: {PREF64}
  qname-minimisation: no
remote-control:
  control-enable: no
forward-zone:
  name: "."
  forward-addr: {D_ADDR}
"#
    )
}

/// xlat's `[dns64]`: the client's resolver address, the authoritative server upstream, pref64.
pub fn xlat_dns64_section() -> String {
    format!(
        "\n[dns64]\nlisten = [\"[{UA6_ADDR}]:53\"]\nupstream = [\"{D_ADDR}:53\"]\nprefix = \"{PREF64}\"\n"
    )
}

/// What dnsperf printed about a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DnsperfResult {
    pub sent: f64,
    pub completed: f64,
    pub lost: f64,
    /// Responses with rcode NOERROR.
    pub noerror: f64,
    pub run_secs: f64,
    pub qps: f64,
    /// Latency (seconds): mean, min, max, standard deviation; None without completed queries.
    pub latency: Option<[f64; 4]>,
}

/// Parses dnsperf's statistics.
pub fn parse_dnsperf(text: &str) -> Result<DnsperfResult> {
    let line = |key: &str| {
        text.lines()
            .map(str::trim_start)
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let first = |key: &str| -> Option<f64> { line(key)?.split_whitespace().next()?.parse().ok() };
    let need = |key: &str| first(key).with_context(|| format!("dnsperf printed no {key:?}"));
    let noerror = line("Response codes")
        .and_then(|v| {
            let mut it = v.split_whitespace();
            while let Some(w) = it.next() {
                if w == "NOERROR" {
                    return it.next()?.parse().ok();
                }
            }
            None
        })
        .unwrap_or(0.0);
    // "0.000404 (min 0.000068, max 0.003226)"
    let latency = line("Average Latency").and_then(|v| {
        let mean: f64 = v.split_whitespace().next()?.parse().ok()?;
        let num_after = |k: &str| -> Option<f64> {
            let (_, rest) = v.split_once(k)?;
            rest.trim_start()
                .trim_end_matches(')')
                .split([',', ')'])
                .next()?
                .trim()
                .parse()
                .ok()
        };
        let sd = first("Latency StdDev").unwrap_or(f64::NAN);
        Some([mean, num_after("min")?, num_after("max")?, sd])
    });
    Ok(DnsperfResult {
        sent: need("Queries sent")?,
        completed: need("Queries completed")?,
        lost: need("Queries lost")?,
        noerror,
        run_secs: need("Run time (s)")?,
        qps: need("Queries per second")?,
        latency,
    })
}

/// The addresses in `dig +short` output; None when a line is not an address (an error).
pub fn parse_dig_short<T: std::str::FromStr + Ord>(text: &str) -> Option<Vec<T>> {
    let mut v = Vec::new();
    for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        v.push(l.parse().ok()?);
    }
    v.sort();
    Some(v)
}

/// The AAAA records a DNS64 must answer for a name with records `a4` / `a6` (RFC 6147 5.1.1:
/// real AAAA records are returned as they are; 5.1.6-5.1.7: none, so each A record is
/// synthesized in pref64, RFC 6052 2.2).
pub fn expected_aaaa(a4: &[Ipv4Addr], a6: &[Ipv6Addr]) -> Vec<Ipv6Addr> {
    let mut v: Vec<Ipv6Addr> = if a6.is_empty() {
        a4.iter().map(|a| pref64(*a)).collect()
    } else {
        a6.to_vec()
    };
    v.sort();
    v
}

/// A server process the experiment started (unbound, `xlat dns64`), in a namespace, pinned;
/// stopped on drop.
pub struct Server {
    child: Child,
    what: String,
    log: PathBuf,
}

impl Server {
    pub fn start(
        ns: &str,
        cpus: &str,
        rt_prio: Option<i32>,
        args: &[&str],
        log: &Path,
        what: &str,
    ) -> Result<Server> {
        let f =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let f2 = f.try_clone().context("server log")?;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]);
        if let Some(p) = rt_prio {
            c.args(["chrt", "-f"]).arg(p.to_string());
        }
        let child = c
            .args(["taskset", "-c", cpus])
            .args(args)
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(f2)
            .env("RUST_LOG", "warn")
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        Ok(Server {
            child,
            what: what.into(),
            log: log.to_path_buf(),
        })
    }

    /// Fails (with its log) if it has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Ok(Some(st)) = self.child.try_wait() {
            let t = std::fs::read_to_string(&self.log).unwrap_or_default();
            bail!("{} exited ({st}):\n{}", self.what, tail(&t));
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(30));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn tail(t: &str) -> String {
    let l: Vec<&str> = t.lines().collect();
    l[l.len().saturating_sub(15)..].join("\n")
}

/// Waits (at most `secs`) until something in `ns` listens on UDP `addr` (as `ss` prints it).
pub fn wait_udp_listening(
    ns: &str,
    addr: &str,
    server: Option<&mut Server>,
    secs: u64,
) -> Result<()> {
    let mut server = server;
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = server.as_deref_mut() {
            s.check_alive()?;
        }
        let o = sys::cmd(5, &["ip", "netns", "exec", ns, "ss", "-Hlun"])?;
        if o.stdout.contains(addr) {
            return Ok(());
        }
        if Instant::now() > deadline || sys::stopped() {
            bail!("nothing listens on UDP {addr} in {ns} after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The tester namespace's resolv.conf naming the DNS64 (`ip netns exec` bind-mounts
/// /etc/netns/NS/resolv.conf over /etc/resolv.conf); removed on drop (and with the testbed).
pub struct ResolvConf {
    dir: PathBuf,
    made_parent: bool,
}

impl ResolvConf {
    pub fn write(ns: &str, server: Ipv6Addr) -> Result<ResolvConf> {
        let parent = Path::new("/etc/netns");
        let made_parent = !parent.exists();
        let dir = parent.join(ns);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let r = ResolvConf { dir, made_parent };
        let f = r.dir.join("resolv.conf");
        std::fs::write(
            &f,
            format!("# xlat lab dns64\nnameserver {server}\noptions timeout:2 attempts:2\n"),
        )
        .with_context(|| format!("writing {}", f.display()))?;
        Ok(r)
    }
}

impl Drop for ResolvConf {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join("resolv.conf"));
        let _ = std::fs::remove_dir(&self.dir);
        if self.made_parent {
            let _ = std::fs::remove_dir("/etc/netns");
        }
    }
}

/// A tool's version line ("Version X" in its help or -V output).
pub fn tool_version(args: &[&str]) -> String {
    sys::cmd(5, args)
        .ok()
        .and_then(|o| {
            format!("{}\n{}", o.stdout, o.stderr)
                .lines()
                .find(|l| l.starts_with("Version"))
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dnsperf_statistics() {
        let t = "DNS Performance Testing Tool\nVersion 2.10.0\n\n[Status] Command line: dnsperf -s ::1\n\
            [Status] Testing complete (end of file)\n\nStatistics:\n\n\
              Queries sent:         5000\n  Queries completed:    4990 (99.80%)\n\
              Queries lost:         10 (0.20%)\n\n\
              Response codes:       NOERROR 4980 (99.80%), SERVFAIL 10 (0.20%)\n\
              Average packet size:  request 33, response 61\n  Run time (s):         0.512345\n\
              Queries per second:   9739.532\n\n\
              Average Latency (s):  0.010021 (min 0.000143, max 0.081234)\n\
              Latency StdDev (s):   0.004567\n\n";
        let r = parse_dnsperf(t).unwrap();
        assert_eq!((r.sent, r.completed, r.lost), (5000.0, 4990.0, 10.0));
        assert_eq!(r.noerror, 4980.0);
        assert_eq!(r.run_secs, 0.512345);
        assert_eq!(r.qps, 9739.532);
        assert_eq!(r.latency, Some([0.010021, 0.000143, 0.081234, 0.004567]));
        // Nothing answered: no latency lines.
        let r = parse_dnsperf(
            "Statistics:\n  Queries sent:         7\n  Queries completed:    0 (0.00%)\n\
             Queries lost:         7 (100.00%)\n  Run time (s):         1.0\n  Queries per second:   0.0\n",
        )
        .unwrap();
        assert_eq!(r.latency, None);
        assert_eq!(r.noerror, 0.0);
        assert!(parse_dnsperf("Error: invalid argument").is_err());
    }

    #[test]
    fn dig_short_answers() {
        let v: Vec<Ipv6Addr> =
            parse_dig_short("2001:2:0:64::c613:2\n2001:2:0:64::cb00:710a\n").unwrap();
        assert_eq!(v.len(), 2);
        let none: Vec<Ipv6Addr> = parse_dig_short("").unwrap();
        assert!(none.is_empty());
        assert!(parse_dig_short::<Ipv6Addr>(
            ";; connection timed out; no servers could be reached\n"
        )
        .is_none());
    }

    #[test]
    fn expected_answers_follow_rfc_6147_and_6052() {
        // RFC 6052 2.2: /96, the IPv4 address in bits 96..127.
        assert_eq!(
            expected_aaaa(&[D_ADDR], &[]),
            ["2001:2:0:64::c613:2".parse::<Ipv6Addr>().unwrap()]
        );
        let two = expected_aaaa(
            &[
                Ipv4Addr::new(203, 0, 113, 10),
                Ipv4Addr::new(198, 51, 100, 20),
            ],
            &[],
        );
        assert_eq!(
            two.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            ["2001:2:0:64::c633:6414", "2001:2:0:64::cb00:710a"]
        );
        // RFC 6147 5.1.1: a real AAAA is returned, nothing synthesized.
        let real = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
        assert_eq!(expected_aaaa(&[D_ADDR], &[real]), [real]);
    }

    #[test]
    fn zone_and_configs_carry_the_plan() {
        let z = zone_text(2);
        assert!(z.starts_with("$ORIGIN s3.example.\n"));
        assert!(z.contains("\nwww IN A 198.19.0.2\n"));
        assert!(z.contains("\ndual IN AAAA 2001:db8::1\n"));
        assert!(z.contains("\nr1h49999 IN A 198.19.0.2\n"));
        assert!(!z.contains("r2h0 "));
        assert_eq!(
            query_file(0, 2),
            "r0h0.s3.example AAAA\nr0h1.s3.example AAAA\n"
        );
        let u = unbound_dns64_conf("/x");
        assert!(u.contains("module-config: \"dns64 iterator\""));
        assert!(u.contains("dns64-prefix: 2001:2:0:64::/96"));
        assert!(u.contains("interface: 2001:2:0:1::1\n"));
        assert!(u.contains("forward-addr: 198.19.0.2\n"));
        assert!(auth_conf("/x").contains("zonefile: \"/x/s3.example.zone\""));
        let x = xlat_dns64_section();
        assert!(x.contains("listen = [\"[2001:2:0:1::1]:53\"]"));
        assert!(x.contains("upstream = [\"198.19.0.2:53\"]"));
        assert!(x.contains("prefix = \"2001:2:0:64::/96\""));
        assert!(is_nat64("xlat-nat64") && is_nat64("tayga-nat64") && is_nat64("xlat-nat64-xdp"));
        assert!(!is_nat64("xlat-nat44") && !is_nat64("xlat-siit"));
    }
}
