//! Experiments through the tester's own IP stack (tcp, http, rtt, owd): real sockets in the tester
//! namespace, the client bound to an A-side address and the server to a D-side one.
//!
//! A and D live in one namespace, so while these run the tester's stack is switched on
//! ([`Topo::stack_on`]): the ingress drop goes, the local routing table moves behind policy
//! rules that send traffic from A-side addresses out of A (and from D out of D) through the
//! device, and `accept_local` lets a port receive packets from an address of the other port.
//!
//! For the tunnel devices (xlat-6to4, xlat-isatap) the tester's stack needs a tunnel endpoint of
//! its own on the A side, and this kernel has no sit devices: [`TunnelPeer`] runs a second
//! `xlat run` in the tester namespace (a 6to4 router on 198.18.0.2 with the DUT as its relay,
//! or an ISATAP host that learns its prefix from the DUT), off the DUT CPU. Its work, like the
//! client's, is the tester's; the delays include it, as S2's did (its client was the tunnel host).

use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::addressing::{
    pref64, A6_ADDR, A_ADDR, D6_ADDR, D_ADDR, ISATAP_PREFIX, SIIT_CLIENT6, TUNNEL_ENDPOINT,
    UD6_ADDR,
};
use crate::sys;
use crate::topo::Topo;

/// Where a device's socket traffic goes: the client's source, the server's bind address and
/// the address the client connects to (translated for NAT64 and SIIT).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Endpoints {
    pub client: IpAddr,
    pub server: IpAddr,
    pub target: IpAddr,
}

/// The endpoints for a device, as the device adapters address it.
pub fn endpoints(device: &str) -> Result<Endpoints> {
    let a4 = IpAddr::V4(A_ADDR);
    let d4 = IpAddr::V4(D_ADDR);
    let a6 = IpAddr::V6(A6_ADDR);
    let d6 = IpAddr::V6(D6_ADDR);
    Ok(match device {
        "forward4"
        | "kernel-nat44"
        | "kernel-nat44-heavy"
        | "xlat-nat44"
        | "xlat-nat44-segments"
        | "xlat-nat44-2w"
        | "xlat-nat44-xdp"
        | "xlat-nat44-afxdp"
        | "xlat-nat44-xdp-afxdp" => Endpoints {
            client: a4,
            server: d4,
            target: d4,
        },
        "forward6" => Endpoints {
            client: a6,
            server: d6,
            target: d6,
        },
        "xlat-nat64"
        | "xlat-nat64-segments"
        | "tayga-nat64"
        | "xlat-nat64-xdp"
        | "xlat-nat64-afxdp" => Endpoints {
            client: a6,
            server: d4,
            target: IpAddr::V6(pref64(D_ADDR)),
        },
        "xlat-siit" | "xlat-siit-afxdp" | "xlat-siit-xdp" => Endpoints {
            client: IpAddr::V6(SIIT_CLIENT6),
            server: d4,
            target: IpAddr::V6(pref64(D_ADDR)),
        },
        "xlat-6to4" | "xlat-6to4-xdp" | "xlat-isatap" | "xlat-isatap-xdp" => Endpoints {
            client: IpAddr::V6(Ipv6Addr::from(tunnel_client(device)?)),
            server: d6,
            target: d6,
        },
        other => bail!("no socket endpoints for device {other:?}"),
    })
}

/// The tester's own tunnel address for a tunnel device: A's 6to4 host 2002:c612:2::1, or its
/// ISATAP address 2001:2:0:5:0:5efe:c612:2 (the prefix the DUT's router advertises).
pub fn tunnel_client(device: &str) -> Result<[u8; 16]> {
    match crate::device::tunnel_of(device) {
        Some(t) => Ok(t.host(A_ADDR.octets())),
        None => bail!("{device} is not a tunnel device"),
    }
}

/// The tester's own tunnel endpoint for the socket experiments through a tunnel device: `xlat
/// run` in the tester namespace on A's address 198.18.0.2 -- a 6to4 router whose relay is the
/// DUT, or an ISATAP host whose potential router is the DUT -- and the policy routes that send
/// the client's traffic into it (and the server's replies to it out of D). Stopped, and its
/// routes removed, on drop.
pub struct TunnelPeer {
    child: std::process::Child,
    ns: String,
    undo: String,
}

impl TunnelPeer {
    /// Starts the peer for `device`; None for devices that are not tunnels.
    pub fn start(topo: &Topo, device: &str) -> Result<Option<TunnelPeer>> {
        let Some(tunnel) = crate::device::tunnel_of(device) else {
            return Ok(None);
        };
        let client = Ipv6Addr::from(tunnel.host(A_ADDR.octets()));
        let tun = format!("{}p", topo.id);
        let sock = topo.dir.join("peer.sock");
        let cfg = topo.dir.join("peer.toml");
        let log = topo.dir.join("peer.log");
        let [e0, e1, e2, e3] = TUNNEL_ENDPOINT.octets();
        let endpoint = format!("{e0}.{e1}.{e2}.{e3}");
        let [a0, a1, a2, a3] = A_ADDR.octets();
        let section = match tunnel {
            crate::packet::Tunnel6in4::SixToFour => format!(
                "[tunnel.6to4]\nipv4 = \"{a0}.{a1}.{a2}.{a3}\"\nrelay = \"{endpoint}\"\n"
            ),
            crate::packet::Tunnel6in4::Isatap { .. } => format!(
                "[tunnel.isatap]\nrole = \"host\"\nipv4 = \"{a0}.{a1}.{a2}.{a3}\"\nrouters = [\"{endpoint}\"]\n"
            ),
        };
        let text = format!(
            "# written by xlat lab: the tester's own tunnel endpoint\n[tun]\nname = \"{tun}\"\nmtu = 1500\nauto_routes = true\n\n{section}\n[control]\nsocket = \"{}\"\n",
            sock.display()
        );
        std::fs::write(&cfg, text).with_context(|| format!("writing {}", cfg.display()))?;
        let f =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let f2 = f.try_clone().context("peer log")?;
        let bin = crate::device::xlat_bin()?;
        let cpus = non_dut_cpus(topo.dut_cpu);
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", &topo.ns_tester, "taskset", "-c", &cpus])
            .arg(&bin)
            .args(["run", "-c"])
            .arg(&cfg)
            .stdin(std::process::Stdio::null())
            .stdout(f)
            .stderr(f2)
            .env("RUST_LOG", "info")
            .spawn()
            .context("starting the tester's tunnel endpoint (xlat run)")?;
        let ns = topo.ns_tester.clone();
        let mut peer = TunnelPeer {
            child,
            ns: ns.clone(),
            undo: String::new(),
        };
        // Ready when it answers on its socket (its routes are up by then) and, for ISATAP,
        // when it has learned its address from the DUT's Router Advertisement.
        let b = bin.display().to_string();
        let s = sock.display().to_string();
        let want = client.to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(st)) = peer.child.try_wait() {
                let t = std::fs::read_to_string(&log).unwrap_or_default();
                bail!("the tester's tunnel endpoint exited ({st}):\n{t}");
            }
            let answers = sys::cmd(5, &[&b, "show", "stats", "--json", "--socket", &s])
                .map(|o| o.ok)
                .unwrap_or(false);
            let addr = answers
                && sys::ns_ok(&ns, &["ip", "-6", "addr", "show", "dev", &tun])
                    .map(|o| o.contains(&want))
                    .unwrap_or(false);
            if addr {
                break;
            }
            if Instant::now() > deadline || sys::stopped() {
                let t = std::fs::read_to_string(&log).unwrap_or_default();
                bail!("the tester's tunnel endpoint has no address {want} on {tun} after 20 s; log:\n{t}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // The client's traffic into the peer's TUN; the server's replies out of D to the DUT.
        let net = match tunnel {
            crate::packet::Tunnel6in4::SixToFour => format!("{client}/48"),
            crate::packet::Tunnel6in4::Isatap { .. } => ISATAP_PREFIX.to_string(),
        };
        let d = &topo.d.dev;
        let ud6 = UD6_ADDR;
        peer.undo = format!(
            "ip -6 rule del pref 12 from {client} lookup 102; ip -6 route flush table 102; \
             ip -6 route del {net} via {ud6} dev {d} table 101; true"
        );
        let on = format!(
            "set -e\n\
             ip -6 route add 2001:2:0:2::/64 dev {tun} table 102\n\
             ip -6 rule add pref 12 iif lo from {client} lookup 102\n\
             ip -6 route add {net} via {ud6} dev {d} table 101\n"
        );
        sys::ns_sh(&ns, &on).context("routing the tester's client through its tunnel endpoint")?;
        Ok(Some(peer))
    }
}

impl Drop for TunnelPeer {
    fn drop(&mut self) {
        let _ = sys::ns_sh(&self.ns, &self.undo);
        // SAFETY: kill(2) on our own child; xlat removes its routes on SIGTERM.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(30));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPUs other than the DUT's, as a taskset list (the tools run there).
pub fn non_dut_cpus(dut_cpu: usize) -> String {
    let n = sys::ncpus().max(1);
    let v: Vec<String> = (0..n)
        .filter(|&c| c != dut_cpu || n == 1)
        .map(|c| c.to_string())
        .collect();
    v.join(",")
}

/// Busy share of one CPU between two /proc/stat samples, and its busy nanoseconds.
pub fn cpu_busy(before: &[sys::CpuTimes], after: &[sys::CpuTimes], cpu: usize) -> (f64, f64) {
    match (before.get(cpu), after.get(cpu)) {
        (Some(b), Some(a)) => {
            let d = a.delta(b);
            let share = if d.total() > 0 {
                d.busy() as f64 / d.total() as f64
            } else {
                0.0
            };
            (share, d.busy() as f64 * 1e9 / sys::clk_tck() as f64)
        }
        _ => (0.0, 0.0),
    }
}

/// What iperf3's JSON (client side) says about a TCP test.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IperfClient {
    pub received_bps: f64,
    pub sent_bps: f64,
    pub bytes: f64,
    pub retransmits: f64,
    pub secs: f64,
    pub error: Option<String>,
}

/// Parses `iperf3 -c ... -J` output.
pub fn parse_iperf_client(json: &str) -> Result<IperfClient> {
    let v: serde_json::Value = serde_json::from_str(json).context("iperf3 JSON")?;
    let end = &v["end"];
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
    Ok(IperfClient {
        received_bps: f(&end["sum_received"]["bits_per_second"]),
        sent_bps: f(&end["sum_sent"]["bits_per_second"]),
        bytes: f(&end["sum_received"]["bytes"]),
        retransmits: f(&end["sum_sent"]["retransmits"]),
        secs: f(&end["sum_received"]["seconds"]),
        error: v["error"].as_str().map(String::from),
    })
}

/// The client address the iperf3 server saw (`start.connected[0].remote_host`).
pub fn parse_iperf_server_peer(json: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v["start"]["connected"][0]["remote_host"]
        .as_str()
        .map(String::from)
}

/// One iperf3 TCP test: server on the D side (one test, JSON), client on the A side.
/// Returns the client's numbers and the source address the server saw.
pub fn iperf_tcp(
    topo: &Topo,
    ep: &Endpoints,
    secs: f64,
    port: u16,
) -> Result<(IperfClient, Option<String>)> {
    let cpus = non_dut_cpus(topo.dut_cpu);
    let server = ep.server.to_string();
    let p = port.to_string();
    let mut srv = std::process::Command::new("ip")
        .args(["netns", "exec", &topo.ns_tester, "taskset", "-c", &cpus])
        .args(["iperf3", "-s", "-1", "-J", "-B", &server, "-p", &p])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting iperf3 -s")?;
    // Wait until the server listens.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let o = sys::cmd(5, &["ip", "netns", "exec", &topo.ns_tester, "ss", "-Htln"])?;
        if o.stdout.contains(&format!(":{port}")) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let client = ep.client.to_string();
    let target = ep.target.to_string();
    let t = format!("{secs}");
    let timeout = (secs + 20.0).ceil() as u64;
    let o = sys::cmd(
        timeout,
        &[
            "ip",
            "netns",
            "exec",
            &topo.ns_tester,
            "taskset",
            "-c",
            &cpus,
            "iperf3",
            "-c",
            &target,
            "-B",
            &client,
            "-p",
            &p,
            "-t",
            &t,
            "-J",
            "--connect-timeout",
            "3000",
        ],
    )?;
    let c = parse_iperf_client(&o.stdout);
    // The server ends after one test; if the client never connected, stop it.
    let deadline = Instant::now() + Duration::from_secs(3);
    while srv.try_wait()?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if srv.try_wait()?.is_none() {
        let _ = srv.kill();
    }
    let out = srv.wait_with_output()?;
    let peer = parse_iperf_server_peer(&String::from_utf8_lossy(&out.stdout));
    let c = c.with_context(|| format!("iperf3 client: {}", o.stderr.trim()))?;
    if let Some(e) = &c.error {
        bail!("iperf3: {e}");
    }
    Ok((c, peer))
}

/// S2's bounce: `bounces` round trips of one payload between a client on the A side and an
/// echo socket on the D side, timed on one clock. Returns the one-way delay in microseconds
/// (elapsed / (2 * bounces)), or None when a packet was lost (1 s timeout).
pub fn owd_bounce(
    ns: &str,
    ep: &Endpoints,
    port: u16,
    payload: usize,
    bounces: usize,
) -> Result<Option<f64>> {
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
    let ns_s = ns.to_string();
    let srv_addr = SocketAddr::new(ep.server, port);
    let stop2 = stop.clone();
    let echo = std::thread::spawn(move || -> Result<()> {
        let r = (|| -> Result<UdpSocket> {
            sys::enter_netns(&ns_s)?;
            let s = UdpSocket::bind(srv_addr).with_context(|| format!("binding {srv_addr}"))?;
            s.set_read_timeout(Some(Duration::from_millis(100)))?;
            Ok(s)
        })();
        let s = match r {
            Ok(s) => {
                let _ = ready_tx.send(Ok(()));
                s
            }
            Err(e) => {
                let _ = ready_tx.send(Err(anyhow::anyhow!("{e:#}")));
                return Err(e);
            }
        };
        let mut buf = vec![0u8; 65536];
        while !stop2.load(Ordering::Relaxed) {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                let _ = s.send_to(&buf[..n], from);
            }
        }
        Ok(())
    });
    ready_rx
        .recv()
        .map_err(|_| anyhow::anyhow!("echo thread ended"))??;
    let ns_c = ns.to_string();
    let ep = *ep;
    let client = std::thread::spawn(move || -> Result<Option<f64>> {
        sys::enter_netns(&ns_c)?;
        let s = UdpSocket::bind(SocketAddr::new(ep.client, 0))?;
        s.connect(SocketAddr::new(ep.target, port))?;
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        let msg = vec![0x5au8; payload];
        let mut buf = vec![0u8; 65536];
        // A warm-up round trip (ARP/ND, NAT session, a daemon's first packet), not timed;
        // up to three tries.
        let mut warm = false;
        for _ in 0..3 {
            s.send(&msg)?;
            if s.recv(&mut buf).is_ok() {
                warm = true;
                break;
            }
        }
        if !warm {
            return Ok(None);
        }
        let t0 = Instant::now();
        for _ in 0..bounces {
            s.send(&msg)?;
            match s.recv(&mut buf) {
                Ok(n) if n == payload => {}
                Ok(n) => bail!("echo returned {n} bytes for {payload}"),
                Err(_) => return Ok(None),
            }
        }
        let el = t0.elapsed().as_secs_f64();
        Ok(Some(el * 1e6 / (2.0 * bounces.max(1) as f64)))
    });
    let r = client
        .join()
        .map_err(|_| anyhow::anyhow!("owd client panicked"))?;
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_by_device() {
        let e = endpoints("kernel-nat44").unwrap();
        assert_eq!(e.client.to_string(), "198.18.0.2");
        assert_eq!(e.target.to_string(), "198.19.0.2");
        let e = endpoints("tayga-nat64").unwrap();
        assert_eq!(e.client.to_string(), "2001:2:0:1::2");
        assert_eq!(e.server.to_string(), "198.19.0.2");
        assert_eq!(e.target.to_string(), "2001:2:0:64::c613:2");
        let e = endpoints("xlat-6to4").unwrap();
        assert_eq!(e.client.to_string(), "2002:c612:2::1");
        assert_eq!(e.target.to_string(), "2001:2:0:2::2");
        let e = endpoints("xlat-isatap").unwrap();
        assert_eq!(e.client.to_string(), "2001:2:0:5:0:5efe:c612:2");
        assert_eq!(e.server.to_string(), "2001:2:0:2::2");
        assert!(endpoints("nope").is_err());
        assert!(tunnel_client("forward6").is_err());
        // The XDP devices are addressed as their TUN twins.
        assert_eq!(
            endpoints("xlat-nat44-xdp").unwrap(),
            endpoints("xlat-nat44").unwrap()
        );
        assert_eq!(
            endpoints("xlat-nat64-xdp").unwrap(),
            endpoints("xlat-nat64").unwrap()
        );
    }

    #[test]
    fn iperf_client_json() {
        let j = r#"{"start":{"connected":[{"local_host":"198.18.0.2","remote_host":"198.19.0.2"}]},
            "end":{"sum_sent":{"seconds":1.0,"bytes":1000,"bits_per_second":8200.5,"retransmits":3},
                   "sum_received":{"seconds":1.01,"bytes":990,"bits_per_second":8000.0}}}"#;
        let c = parse_iperf_client(j).unwrap();
        assert_eq!(c.received_bps, 8000.0);
        assert_eq!(c.sent_bps, 8200.5);
        assert_eq!(c.retransmits, 3.0);
        assert_eq!(c.bytes, 990.0);
        assert_eq!(c.error, None);
        let e = parse_iperf_client(r#"{"start":{},"end":{},"error":"unable to connect"}"#).unwrap();
        assert_eq!(e.error.as_deref(), Some("unable to connect"));
        assert!(parse_iperf_client("not json").is_err());
    }

    #[test]
    fn iperf_server_peer() {
        let j = r#"{"start":{"connected":[{"socket":5,"local_host":"198.19.0.2","remote_host":"198.19.0.130"}]}}"#;
        assert_eq!(parse_iperf_server_peer(j).as_deref(), Some("198.19.0.130"));
        assert_eq!(parse_iperf_server_peer("{}"), None);
    }
}

/// What apachebench (`ab`) printed about a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AbResult {
    pub document_length: f64,
    pub complete: f64,
    pub failed: f64,
    pub html_transferred: f64,
    pub requests_per_s: f64,
    /// Mean time per request (ms), as seen by one of the concurrent clients.
    pub time_per_request_ms: f64,
    pub transfer_kbytes_s: f64,
    /// The slowest TCP connect (ms; ab's "Connect:" max): 1,000 and more is a lost SYN that
    /// the client resent after its retransmission timeout.
    pub connect_max_ms: Option<f64>,
    /// Half the requests were served within this time (ms; ab's percentile table).
    pub p50_ms: Option<f64>,
    /// 99 % of the requests were served within this time (ms).
    pub p99_ms: Option<f64>,
    /// The longest request (ms; ab's "100%" line).
    pub longest_ms: Option<f64>,
}

/// Parses `ab` output.
pub fn parse_ab(text: &str) -> Result<AbResult> {
    let field = |key: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.trim_start().starts_with(key))
            .and_then(|l| l.split_once(':'))
            .and_then(|(_, v)| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    let need = |key: &str| field(key).with_context(|| format!("ab output has no {key:?}"));
    // "  99%    412" and " 100%   1040 (longest request)".
    let percentile = |key: &str| -> Option<f64> {
        text.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(key)).then(|| w.next()?.parse().ok())?
        })
    };
    Ok(AbResult {
        document_length: need("Document Length")?,
        complete: need("Complete requests")?,
        failed: need("Failed requests")?,
        html_transferred: field("HTML transferred").unwrap_or(0.0),
        requests_per_s: need("Requests per second")?,
        time_per_request_ms: need("Time per request")?,
        transfer_kbytes_s: need("Transfer rate")?,
        // "Connect:  min mean [+/-sd] median max": the fifth number.
        connect_max_ms: text
            .lines()
            .find(|l| l.trim_start().starts_with("Connect:"))
            .and_then(|l| l.split_whitespace().nth(5))
            .and_then(|v| v.parse().ok()),
        p50_ms: percentile("50%"),
        p99_ms: percentile("99%"),
        longest_ms: percentile("100%"),
    })
}

/// S3's file size for the HTTP test.
pub const HTTP_FILE_BYTES: usize = 173_225;

/// The http server's listen backlog: `python3 -m http.server` listens with 5, and at S3's
/// concurrency of 100..300 a full accept queue drops SYNs that ab then resends a second later.
pub const HTTP_BACKLOG: usize = 1024;

/// python3's threading http.server with [`HTTP_BACKLOG`]: argv host, port, directory.
const HTTP_SERVER_PY: &str = r#"import functools, http.server, socket, sys
class S(http.server.ThreadingHTTPServer):
    request_queue_size = int(sys.argv[4])
    daemon_threads = True
    address_family = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[3])
S((sys.argv[1], int(sys.argv[2])), h).serve_forever()
"#;

/// A python3 http.server on the D side serving `dir`, stopped on drop.
pub struct HttpServer {
    child: std::process::Child,
}

impl HttpServer {
    pub fn start(
        topo: &Topo,
        ep: &Endpoints,
        port: u16,
        dir: &std::path::Path,
    ) -> Result<HttpServer> {
        let cpus = non_dut_cpus(topo.dut_cpu);
        let py = if std::path::Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", &topo.ns_tester, "taskset", "-c", &cpus, py])
            .args(["-c", HTTP_SERVER_PY])
            .arg(ep.server.to_string())
            .arg(port.to_string())
            .arg(dir)
            .arg(HTTP_BACKLOG.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("starting python3 http.server")?;
        let s = HttpServer { child };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let o = sys::cmd(5, &["ip", "netns", "exec", &topo.ns_tester, "ss", "-Htln"])?;
            if o.stdout.contains(&format!(":{port} ")) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!("python3 http.server did not start listening on port {port}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `ab` run from the A side: `requests` GETs of `path` at `concurrency`.
pub fn ab_run(
    topo: &Topo,
    ep: &Endpoints,
    port: u16,
    path: &str,
    requests: usize,
    concurrency: usize,
) -> Result<AbResult> {
    let host = match ep.target {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    let url = format!("http://{host}:{port}/{path}");
    ab_url(topo, ep.client, &url, requests, concurrency)
}

/// One `ab` run from the A side's `client` address: `requests` GETs of `url` at
/// `concurrency`. With a name in the URL, ab resolves it once (getaddrinfo, in the family of
/// `client`: an IPv6 client asks for AAAA only).
pub fn ab_url(
    topo: &Topo,
    client: IpAddr,
    url: &str,
    requests: usize,
    concurrency: usize,
) -> Result<AbResult> {
    let cpus = non_dut_cpus(topo.dut_cpu);
    let client = client.to_string();
    let (n, c) = (requests.to_string(), concurrency.to_string());
    let o = sys::cmd(
        600,
        &[
            "ip",
            "netns",
            "exec",
            &topo.ns_tester,
            "taskset",
            "-c",
            &cpus,
            "ab",
            "-q",
            "-s",
            "10",
            "-B",
            &client,
            "-n",
            &n,
            "-c",
            &c,
            url,
        ],
    )?;
    parse_ab(&o.stdout).with_context(|| format!("ab {url}: {}", o.stderr.trim()))
}

/// S3's ping: echo requests per run.
pub const PING_COUNT: usize = 21;
/// Seconds between echo requests (ping's default is 1 s; 0.2 s keeps a device to ~4 s).
pub const PING_INTERVAL: &str = "0.2";

/// What `ping` (iputils) printed about a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PingResult {
    pub transmitted: f64,
    pub received: f64,
    /// Each reply's round-trip time (ms), in the order they came.
    pub rtts_ms: Vec<f64>,
}

impl PingResult {
    /// Lost requests, percent of those sent.
    pub fn loss_pct(&self) -> f64 {
        if self.transmitted > 0.0 {
            (self.transmitted - self.received) / self.transmitted * 100.0
        } else {
            0.0
        }
    }
}

/// Parses iputils `ping -n` output: every "time=X ms" reply and the "N packets transmitted,
/// M received" summary.
pub fn parse_ping(text: &str) -> Result<PingResult> {
    let mut r = PingResult::default();
    for l in text.lines() {
        if let Some((_, t)) = l.split_once(" time=") {
            // Duplicates (DUP!) are not replies of their own.
            if l.contains("DUP!") {
                continue;
            }
            let v = t.split_whitespace().next().unwrap_or("");
            r.rtts_ms.push(
                v.parse()
                    .with_context(|| format!("ping reply time {v:?}"))?,
            );
        }
        if l.contains(" packets transmitted, ") {
            let mut it = l.split(", ");
            let first =
                |s: Option<&str>| -> Option<f64> { s?.split_whitespace().next()?.parse().ok() };
            r.transmitted = first(it.next()).context("ping summary: transmitted")?;
            r.received = first(it.next()).context("ping summary: received")?;
        }
    }
    if r.transmitted == 0.0 {
        bail!("ping printed no summary");
    }
    Ok(r)
}

/// One `ping` run from the A side to the device's target: `count` echo requests
/// [`PING_INTERVAL`] apart, off the DUT CPU.
pub fn ping_run(topo: &Topo, ep: &Endpoints, count: usize) -> Result<PingResult> {
    let cpus = non_dut_cpus(topo.dut_cpu);
    let (client, target, n) = (
        ep.client.to_string(),
        ep.target.to_string(),
        count.to_string(),
    );
    // Bounded: every request sent by then, and one second for the last reply.
    let deadline = (count as f64 * 0.2 + 2.0).ceil().to_string();
    let o = sys::cmd(
        120,
        &[
            "ip",
            "netns",
            "exec",
            &topo.ns_tester,
            "taskset",
            "-c",
            &cpus,
            "ping",
            "-n",
            "-c",
            &n,
            "-i",
            PING_INTERVAL,
            "-w",
            &deadline,
            "-I",
            &client,
            &target,
        ],
    )?;
    parse_ping(&o.stdout).with_context(|| format!("ping {client} -> {target}: {}", o.stderr.trim()))
}

#[cfg(test)]
mod ping_tests {
    use super::*;

    #[test]
    fn ping_output() {
        let t =
            "PING 2001:2:0:64::c613:2(2001:2:0:64::c613:2) from 2001:2:0:1::2 : 56 data bytes\n\
            64 bytes from 2001:2:0:64::c613:2: icmp_seq=1 ttl=63 time=0.412 ms\n\
            64 bytes from 2001:2:0:64::c613:2: icmp_seq=2 ttl=63 time=0.2 ms\n\
            64 bytes from 2001:2:0:64::c613:2: icmp_seq=2 ttl=63 time=0.3 ms (DUP!)\n\
            64 bytes from 2001:2:0:64::c613:2: icmp_seq=4 ttl=63 time=1.05 ms\n\n\
            --- 2001:2:0:64::c613:2 ping statistics ---\n\
            4 packets transmitted, 3 received, +1 duplicates, 25% packet loss, time 603ms\n\
            rtt min/avg/max/mdev = 0.200/0.554/1.050/0.362 ms\n";
        let r = parse_ping(t).unwrap();
        assert_eq!(r.rtts_ms, [0.412, 0.2, 1.05]);
        assert_eq!((r.transmitted, r.received), (4.0, 3.0));
        assert_eq!(r.loss_pct(), 25.0);
        // Everything lost: no replies, the summary still counts.
        let r = parse_ping(
            "PING 198.19.0.2 (198.19.0.2) from 198.18.0.2 : 56(84) bytes of data.\n\n\
             --- 198.19.0.2 ping statistics ---\n\
             21 packets transmitted, 0 received, 100% packet loss, time 4033ms\n",
        )
        .unwrap();
        assert!(r.rtts_ms.is_empty());
        assert_eq!(r.loss_pct(), 100.0);
        assert!(parse_ping("ping: connect: Network is unreachable").is_err());
    }
}

#[cfg(test)]
mod ab_tests {
    use super::*;

    #[test]
    fn ab_output() {
        let t = "Server Software:        SimpleHTTP/0.6\nServer Hostname:        198.19.0.2\n\
            Document Path:          /f.bin\nDocument Length:        173225 bytes\n\n\
            Concurrency Level:      5\nTime taken for tests:   0.041 seconds\nComplete requests:      50\n\
            Failed requests:        0\nTotal transferred:      8671450 bytes\nHTML transferred:       8661250 bytes\n\
            Requests per second:    1222.37 [#/sec] (mean)\nTime per request:       4.090 [ms] (mean)\n\
            Time per request:       0.818 [ms] (mean, across all concurrent requests)\n\
            Transfer rate:          207026.52 [Kbytes/sec] received\n\n\
            Connection Times (ms)\n              min  mean[+/-sd] median   max\n\
            Connect:        0  105 302.0      1    1032\n\
            Processing:     2    3   0.5      3       4\n\n\
            Percentage of the requests served within a certain time (ms)\n\
              50%      4\n  66%      4\n  99%   1036\n 100%   1036 (longest request)\n";
        let r = parse_ab(t).unwrap();
        assert_eq!(r.connect_max_ms, Some(1032.0));
        assert_eq!(
            (r.p50_ms, r.p99_ms, r.longest_ms),
            (Some(4.0), Some(1036.0), Some(1036.0))
        );
        assert_eq!(r.document_length, 173225.0);
        assert_eq!(r.complete, 50.0);
        assert_eq!(r.failed, 0.0);
        assert_eq!(r.html_transferred, 8661250.0);
        assert_eq!(r.requests_per_s, 1222.37);
        assert_eq!(r.time_per_request_ms, 4.090);
        assert_eq!(r.transfer_kbytes_s, 207026.52);
        assert!(parse_ab("apr_socket_recv: Connection refused (111)").is_err());
    }
}
