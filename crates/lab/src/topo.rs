//! The testbed: a tester namespace with two ports, A (inside side) and D (outside side), a
//! device-under-test (DUT) namespace between them, and a third veth pair CA <-> CD inside the
//! tester that wires the tester straight to itself (the tester's own ceiling).
//!
//! ```text
//!   tester ns                          DUT ns
//!   A  198.18.0.2/16  ---- veth ----  UA 198.18.0.1/16   (inside;  flows come from 198.18.1.0+)
//!   D  198.19.0.2/24  ---- veth ----  UD 198.19.0.1/24   (outside; pool 198.19.4.0/24 routed)
//!   CA ---- veth ---- CD                                   (no DUT: the tester's ceiling)
//! ```
//!
//! IPv6 (RFC 5180 range 2001:2::/48): A 2001:2:0:1::2/64, UA ::1; D 2001:2:0:2::2/64, UD ::1.
//! The tester writes whole Ethernet frames with AF_PACKET and reads them with a receive ring,
//! so its own IP stack never sees test traffic: a netdev ingress rule drops IP on the tester
//! ports after the ring has copied it (packet taps run before the ingress hook). Segmentation
//! offloads are off on every veth. veth runs the receiver's work on the sender's CPU and RPS
//! did not change that here, so the receiving ports use threaded NAPI with the poll threads
//! pinned: the DUT's to the DUT CPU, the tester's to the tester CPU, SCHED_FIFO. With several
//! DUT CPUs the DUT's pairs get a queue per CPU and a poll thread per queue, each on its own
//! CPU ([`Topo::set_dut_cores`], [`crate::cpus`]). Namespaces
//! are removed on drop, which also runs on Ctrl-C (the lab's loops stop and unwind).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context, Result};

use crate::addressing::{
    A6_ADDR, A_ADDR, D6_ADDR, D_ADDR, INSIDE4, NET6_LEN, OUTSIDE4_LEN, PREF64, SIIT_CLIENT6,
    SIIT_EAM4, TAYGA_POOL, UA6_ADDR, UA_ADDR, UD6_ADDR, UD_ADDR,
};
use crate::cpus::{self, CorePlan};
use crate::sys;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// One tester port: where frames leave or arrive.
#[derive(Debug, Clone)]
pub struct Port {
    pub ns: String,
    pub dev: String,
    pub mac: [u8; 6],
}

/// The NIC-like ingress: a veth pair inside the tester per port facing the DUT; the tester
/// sends into `ia` (`id`), and an XDP program on the pair's far end redirects each frame out
/// of A (D), so the DUT's port receives XDP frames as from a NIC's driver, without veth's copy
/// of an AF_PACKET skb before XDP ([`xlat_xdp::lab_tx`]).
pub struct Injection {
    pub ia: Port,
    pub id: Port,
    /// The programs on the far ends, detached when dropped.
    _progs: Vec<xlat_xdp::lab_tx::LabTx>,
}

/// The namespaces and links of one lab run.
pub struct Topo {
    pub id: String,
    pub ns_tester: String,
    pub ns_dut: String,
    pub a: Port,
    pub d: Port,
    pub ua: Port,
    pub ud: Port,
    pub ca: Port,
    pub cd: Port,
    /// The first of `tester_cpus`: the tester's sender and receiver threads.
    pub tester_cpu: usize,
    /// The first of `dut_cpus`.
    pub dut_cpu: usize,
    /// The tester's CPUs (`--tester-cpus`): its ports' receive threads, round robin.
    pub tester_cpus: Vec<usize>,
    /// The DUT's CPUs (`--dut-cpus`): the most the device may use.
    pub dut_cpus: Vec<usize>,
    /// The device's layout now (see [`Topo::set_dut_cores`]): all of `dut_cpus` unless an
    /// experiment (scale-cores) steps through fewer.
    pub cores: std::cell::RefCell<CorePlan>,
    /// Threaded-NAPI poll threads (device, pid), pinned to the CPU of their side.
    pub napi_threads: std::cell::RefCell<Vec<(String, i32)>>,
    /// Scratch directory (configs, logs) removed on drop.
    pub dir: PathBuf,
    /// xlat devices set up while this is true keep their tables lazy (`prefault = false`):
    /// memory-per-session measures the growth of the resident set.
    pub lazy_tables: std::cell::Cell<bool>,
    /// Sessions the xlat devices set up now hold (`[limits] max_sessions`; XDP recipe
    /// tables twice that): [`crate::device::LAB_MAX_SESSIONS`] unless an experiment asks
    /// for larger tables (RFC 9693's 10,000,000 connections).
    pub session_capacity: std::cell::Cell<u64>,
    /// Tables appended to the configuration of xlat devices set up while this is not empty
    /// (the dns64 experiment's `[dns64]`: the DNS64 proxy in the NAT64 gateway).
    pub xlat_extra: std::cell::RefCell<String>,
    namespaces: Vec<String>,
    /// The NIC-like ingress (`--ingress xdp`, [`Topo::add_injection`]), when on.
    pub inject: Option<Injection>,
    /// The tester's receive moderation in nanoseconds (`--rx-coalesce-us`,
    /// [`Topo::moderate_tester_rx`]); 0: off.
    rx_coalesce_ns: std::cell::Cell<u64>,
}

/// [`Topo::moderate_tester_rx`]: empty polls before a tester port's NAPI re-arms.
const RX_DEFER_POLLS: u32 = 10;

fn mask(cpu: usize) -> String {
    cpus::mask(&[cpu])
}

impl Topo {
    /// Builds the testbed; on any failure removes what it made and returns the error. The
    /// DUT's ports and the tester's ports facing them get one receive and transmit queue per
    /// DUT CPU (at most; [`Topo::set_dut_cores`] uses fewer).
    pub fn new(tester_cpus: &[usize], dut_cpus: &[usize]) -> Result<Topo> {
        if tester_cpus.is_empty() || dut_cpus.is_empty() {
            bail!("the testbed needs at least one tester CPU and one DUT CPU");
        }
        let (tester_cpu, dut_cpu) = (tester_cpus[0], dut_cpus[0]);
        for t in ["ip", "nft", "ethtool"] {
            if !sys::have(t) {
                bail!("the lab needs `{t}` (apt-get install iproute2 nftables ethtool)");
            }
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("the lab needs root (network namespaces, AF_PACKET): run it with sudo");
        }
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        // Interface names are at most 15 bytes: "l" + pid hex (<= 7) + counter + suffix (<= 2).
        let id = format!("l{:x}{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("xlat-lab-{id}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = |ns: &str, suffix: &str| Port {
            ns: ns.to_string(),
            dev: format!("{id}{suffix}"),
            mac: [0; 6],
        };
        let ns_tester = format!("{id}-tester");
        let ns_dut = format!("{id}-dut");
        let mut t = Topo {
            a: port(&ns_tester, "a"),
            d: port(&ns_tester, "d"),
            ca: port(&ns_tester, "ca"),
            cd: port(&ns_tester, "cd"),
            ua: port(&ns_dut, "ua"),
            ud: port(&ns_dut, "ud"),
            ns_tester,
            ns_dut,
            tester_cpu,
            dut_cpu,
            tester_cpus: tester_cpus.to_vec(),
            dut_cpus: dut_cpus.to_vec(),
            cores: std::cell::RefCell::new(cpus::plan(dut_cpus, dut_cpus.len())),
            napi_threads: std::cell::RefCell::new(Vec::new()),
            lazy_tables: std::cell::Cell::new(false),
            session_capacity: std::cell::Cell::new(crate::device::LAB_MAX_SESSIONS),
            xlat_extra: std::cell::RefCell::new(String::new()),
            dir,
            namespaces: Vec::new(),
            inject: None,
            rx_coalesce_ns: std::cell::Cell::new(0),
            id,
        };
        // On error `t` is dropped here, which removes the namespaces made so far.
        t.build()?;
        Ok(t)
    }

    fn ip(&self, ns: &str, args: &[&str]) -> Result<String> {
        let mut v = vec!["ip", "-n", ns];
        v.extend_from_slice(args);
        sys::cmd_ok(&v)
    }

    fn build(&mut self) -> Result<()> {
        for ns in [self.ns_tester.clone(), self.ns_dut.clone()] {
            let _ = sys::cmd(10, &["ip", "netns", "del", &ns]);
            sys::cmd_ok(&["ip", "netns", "add", &ns])?;
            self.namespaces.push(ns.clone());
            self.ip(&ns, &["link", "set", "lo", "up"])?;
        }
        let (t, u) = (self.ns_tester.clone(), self.ns_dut.clone());
        // The DUT's pairs get a queue per DUT CPU; the tester's loop (its ceiling) one.
        let nq = self.dut_cpus.len().to_string();
        let pairs = [
            (self.a.clone(), self.ua.clone(), nq.as_str()),
            (self.d.clone(), self.ud.clone(), nq.as_str()),
            (self.ca.clone(), self.cd.clone(), "1"),
        ];
        for (x, y, q) in &pairs {
            self.ip(
                &x.ns,
                &[
                    "link",
                    "add",
                    "name",
                    &x.dev,
                    "numtxqueues",
                    q,
                    "numrxqueues",
                    q,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &y.dev,
                    "numtxqueues",
                    q,
                    "numrxqueues",
                    q,
                    "netns",
                    &y.ns,
                ],
            )?;
        }
        // Sysctls before addresses: no IPv6 autoconf noise, forwarding in the DUT.
        sys::ns_sh(
            &u,
            "sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 \
             net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
             net.ipv6.conf.all.accept_ra=0 net.ipv6.conf.default.accept_ra=0",
        )?;
        sys::ns_sh(
            &t,
            "sysctl -qw net.ipv6.conf.all.accept_ra=0 net.ipv6.conf.default.accept_ra=0 \
             net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0",
        )?;
        let addrs: [(&Port, String, &str); 8] = [
            (&self.a, format!("{A_ADDR}/{}", INSIDE4.len), "-4"),
            (&self.ua, format!("{UA_ADDR}/{}", INSIDE4.len), "-4"),
            (&self.d, format!("{D_ADDR}/{OUTSIDE4_LEN}"), "-4"),
            (&self.ud, format!("{UD_ADDR}/{OUTSIDE4_LEN}"), "-4"),
            (&self.a, format!("{A6_ADDR}/{NET6_LEN}"), "-6"),
            (&self.ua, format!("{UA6_ADDR}/{NET6_LEN}"), "-6"),
            (&self.d, format!("{D6_ADDR}/{NET6_LEN}"), "-6"),
            (&self.ud, format!("{UD6_ADDR}/{NET6_LEN}"), "-6"),
        ];
        for (p, a, fam) in addrs {
            let extra: &[&str] = if fam == "-6" { &["nodad"] } else { &[] };
            let mut v = vec![fam, "addr", "add", a.as_str(), "dev", p.dev.as_str()];
            v.extend_from_slice(extra);
            self.ip(&p.ns, &v)?;
        }
        let all = [
            self.a.clone(),
            self.d.clone(),
            self.ca.clone(),
            self.cd.clone(),
            self.ua.clone(),
            self.ud.clone(),
        ];
        for p in &all {
            // Some features are fixed on some kernels; ethtool then fails. Best effort.
            let _ = sys::cmd(
                10,
                &[
                    "ip", "netns", "exec", &p.ns, "ethtool", "-K", &p.dev, "tso", "off", "gso",
                    "off", "gro", "off", "tx", "off", "rx", "off",
                ],
            );
            self.ip(&p.ns, &["link", "set", &p.dev, "up"])?;
        }
        // MACs after the links exist.
        self.a.mac = read_mac(&t, &self.a.dev)?;
        self.d.mac = read_mac(&t, &self.d.dev)?;
        self.ca.mac = read_mac(&t, &self.ca.dev)?;
        self.cd.mac = read_mac(&t, &self.cd.dev)?;
        self.ua.mac = read_mac(&u, &self.ua.dev)?;
        self.ud.mac = read_mac(&u, &self.ud.dev)?;
        // The DUT knows the tester's outside port without ARP/ND (no resolution delays).
        let dmac = fmt_mac(&self.d.mac);
        self.ip(
            &u,
            &[
                "neigh",
                "replace",
                &D_ADDR.to_string(),
                "lladdr",
                &dmac,
                "dev",
                &self.ud.dev,
                "nud",
                "permanent",
            ],
        )?;
        self.ip(
            &u,
            &[
                "-6",
                "neigh",
                "replace",
                &D6_ADDR.to_string(),
                "lladdr",
                &dmac,
                "dev",
                &self.ud.dev,
                "nud",
                "permanent",
            ],
        )?;
        // And the inside port (cpu-return sends to it; the tunnel endpoints encapsulate to
        // its IPv4 address).
        let amac = fmt_mac(&self.a.mac);
        for (family, addr) in [("-4", A_ADDR.to_string()), ("-6", A6_ADDR.to_string())] {
            self.ip(
                &u,
                &[
                    family,
                    "neigh",
                    "replace",
                    &addr,
                    "lladdr",
                    &amac,
                    "dev",
                    &self.ua.dev,
                    "nud",
                    "permanent",
                ],
            )?;
        }
        // Receive work: DUT ingress on the DUT core. The tester's ports get no RPS: their
        // NAPI threads are pinned to the tester core already, and RPS to the same core only
        // adds a flow hash and a trip through the backlog queue per frame (measured: the
        // ceiling at 64 B went from 1.05 to 1.16 Mpps without it).
        let qc = self.cores.borrow().queue_cpus.clone();
        self.set_rps(&u, &self.ua.dev.clone(), &qc)?;
        self.set_rps(&u, &self.ud.dev.clone(), &qc)?;
        // veth ignores RPS on this kernel (measured: all receive work stayed on the sender's
        // CPU), so receive work runs in threaded NAPI instead: GRO on makes veth use NAPI,
        // `threaded` moves the poll into a kernel thread (one per receive queue), which is
        // pinned: queue i's to the i-th CPU of its side.
        let tq = cpus::queue_cpus(&self.tester_cpus, self.dut_cpus.len());
        for (ns, p, cpus) in [
            (&u, self.ua.dev.clone(), qc.clone()),
            (&u, self.ud.dev.clone(), qc.clone()),
            (&t, self.d.dev.clone(), tq),
            (&t, self.cd.dev.clone(), vec![self.tester_cpu]),
        ] {
            self.threaded_napi(ns, &p, &cpus)?;
        }
        // The tester's stack never handles test traffic (no ICMP port unreachable back).
        let ruleset = self.tester_ruleset();
        sys::nft_load(&t, &ruleset, &self.dir)?;
        Ok(())
    }

    /// veth's default receive mode on the DUT's two ports: threaded NAPI off, GRO off (veth
    /// then has no NAPI and queues each frame to the backlog of the CPU that sent it), no RPS.
    /// Their NAPI threads end with their NAPI instances.
    pub fn dut_rx_softirq(&self) -> Result<()> {
        let u = &self.ns_dut;
        for dev in [&self.ua.dev, &self.ud.dev] {
            sys::ns_sh(
                u,
                &format!(
                    "echo 0 > /sys/class/net/{dev}/threaded && ethtool -K {dev} gro off && \
                     for q in /sys/class/net/{dev}/queues/rx-*/rps_cpus; do echo 0 > $q || exit 1; done"
                ),
            )
            .with_context(|| format!("default receive mode on {dev}"))?;
        }
        self.napi_threads
            .borrow_mut()
            .retain(|(d, _)| *d != self.ua.dev && *d != self.ud.dev);
        Ok(())
    }

    /// Back to the lab's receive mode on the DUT's ports (RPS and threaded NAPI, the poll
    /// threads pinned to the DUT CPU), after [`Topo::dut_rx_softirq`].
    pub fn dut_rx_threaded(&self) -> Result<()> {
        let u = self.ns_dut.clone();
        let qc = self.cores.borrow().queue_cpus.clone();
        for dev in [self.ua.dev.clone(), self.ud.dev.clone()] {
            self.set_rps(&u, &dev, &qc)?;
            self.napi_threads.borrow_mut().retain(|(d, _)| *d != dev);
            self.threaded_napi(&u, &dev, &qc)?;
        }
        Ok(())
    }

    /// Builds the NIC-like ingress ([`Injection`]): pairs `ia`-`ja` and `id`-`jd` in the
    /// tester, the redirecting program on `ja` (to A) and `jd` (to D), their receive work in
    /// threaded NAPI on the tester's CPUs (the copy of each AF_PACKET frame now happens there).
    /// The DUT's ports must run NAPI (threaded, the lab's default) to take redirected frames.
    pub fn add_injection(&mut self) -> Result<()> {
        if !xlat_xdp::lab_tx::built() {
            bail!("--ingress xdp: this xlat was built without the lab's XDP injector (clang-14 was missing)");
        }
        // A redirected frame leaves A on the queue of the CPU that redirected it: one DUT
        // queue, so one DUT CPU.
        if self.dut_cpus.len() > 1 {
            bail!(
                "--ingress xdp: the injection pairs feed one DUT receive queue; use one DUT CPU \
                 (--dut-cpus N) or --ingress skb"
            );
        }
        let t = self.ns_tester.clone();
        let port = |suffix: &str| Port {
            ns: t.clone(),
            dev: format!("{}{suffix}", self.id),
            mac: [0; 6],
        };
        let (ia, ja, id, jd) = (port("ia"), port("ja"), port("id"), port("jd"));
        let mut progs = Vec::new();
        for (i, j, to) in [
            (&ia, &ja, self.a.dev.clone()),
            (&id, &jd, self.d.dev.clone()),
        ] {
            self.ip(
                &t,
                &[
                    "link", "add", "name", &i.dev, "type", "veth", "peer", "name", &j.dev,
                ],
            )?;
            for p in [i, j] {
                let _ = sys::cmd(
                    10,
                    &[
                        "ip", "netns", "exec", &t, "ethtool", "-K", &p.dev, "tso", "off", "gso",
                        "off", "gro", "off", "tx", "off", "rx", "off",
                    ],
                );
                self.ip(&t, &["link", "set", &p.dev, "up"])?;
            }
            let (ns, jdev) = (t.clone(), j.dev.clone());
            let prog = std::thread::scope(|s| {
                s.spawn(move || -> Result<xlat_xdp::lab_tx::LabTx> {
                    sys::enter_netns(&ns)?;
                    let c = std::ffi::CString::new(to.as_str()).context("interface name")?;
                    // SAFETY: a valid NUL-terminated name; the call only reads it.
                    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
                    if idx == 0 {
                        bail!("no interface {to} in {ns}");
                    }
                    xlat_xdp::lab_tx::LabTx::attach(&jdev, idx)
                })
                .join()
                .map_err(|_| anyhow::anyhow!("the injector's thread panicked"))?
            })?;
            progs.push(prog);
            let tq = vec![self.tester_cpu];
            self.threaded_napi(&t, &j.dev, &tq)?;
        }
        let mut ia = ia;
        let mut id = id;
        ia.mac = self.a.mac;
        id.mac = self.d.mac;
        self.inject = Some(Injection {
            ia,
            id,
            _progs: progs,
        });
        Ok(())
    }

    /// The tester's inside port as a receiving port (cpu-return): threaded NAPI on it, the poll
    /// threads pinned to the tester's CPUs as D's are, so the receive work for frames coming back
    /// through the DUT (the XDP counter, and veth's copy of each frame before it) runs on the
    /// tester's cores and not in softirq on the DUT CPU that sent them. `false` turns it back
    /// off: the other experiments receive on A only what their stack traffic brings back.
    pub fn tester_inside_rx_threaded(&self, on: bool) -> Result<()> {
        let (t, a) = (self.ns_tester.clone(), self.a.dev.clone());
        self.napi_threads.borrow_mut().retain(|(d, _)| *d != a);
        if on {
            let tq = cpus::queue_cpus(&self.tester_cpus, self.queues());
            self.threaded_napi(&t, &a, &tq)
        } else {
            sys::ns_sh(
                &t,
                // Threaded NAPI can be turned off only while the port has NAPI (GRO on).
                &format!(
                    "ethtool -K {a} gro on && echo 0 > /sys/class/net/{a}/threaded && \
                     ethtool -K {a} gro off"
                ),
            )
            .with_context(|| format!("default receive mode on {a}"))?;
            Ok(())
        }
    }

    /// Gives the device the first `k` DUT CPUs ([`cpus::plan`]): `k` receive and transmit
    /// queues on the DUT's ports and on the tester's ports facing them (`ethtool -L`), each
    /// DUT queue's receive thread pinned to its own core, the tester's round robin on the
    /// tester CPUs. Devices set up afterwards get those CPUs (and xlat one worker per core).
    pub fn set_dut_cores(&self, k: usize) -> Result<CorePlan> {
        let p = cpus::plan(&self.dut_cpus, k);
        let q = p.queues.to_string();
        let (t, u) = (self.ns_tester.clone(), self.ns_dut.clone());
        // Receive queues first where they shrink... veth checks only each side's own counts.
        for (ns, dev) in [
            (&t, &self.a.dev),
            (&u, &self.ua.dev),
            (&t, &self.d.dev),
            (&u, &self.ud.dev),
        ] {
            sys::ns_ok(ns, &["ethtool", "-L", dev, "rx", &q, "tx", &q])
                .with_context(|| format!("{q} queues on {dev}"))?;
        }
        *self.cores.borrow_mut() = p.clone();
        let tq = cpus::queue_cpus(&self.tester_cpus, p.queues);
        for (ns, dev, cpus) in [
            (&u, self.ua.dev.clone(), p.queue_cpus.clone()),
            (&u, self.ud.dev.clone(), p.queue_cpus.clone()),
            (&t, self.d.dev.clone(), tq),
        ] {
            if ns == &u {
                self.set_rps(ns, &dev, &cpus)?;
            }
            self.napi_threads.borrow_mut().retain(|(d, _)| *d != dev);
            self.threaded_napi(ns, &dev, &cpus)?;
        }
        Ok(p)
    }

    /// Frames the DUT's two ports dropped on receive so far (`rx_dropped`: for veth, frames
    /// its receive ring had no room for, redirected ones included -- `peer_tq_xdp_xmit_err`;
    /// an skb the tester's port could not hand over is the tester's `tx_refused` instead),
    /// summed; None when the kernel does not say.
    pub fn dut_rx_dropped(&self) -> Option<u64> {
        let (ua, ud) = (&self.ua.dev, &self.ud.dev);
        let out = sys::ns_sh(
            &self.ns_dut,
            &format!(
                "cat /sys/class/net/{ua}/statistics/rx_dropped /sys/class/net/{ud}/statistics/rx_dropped"
            ),
        )
        .ok()?;
        let v: Vec<u64> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
        (v.len() == 2).then(|| v.iter().sum())
    }

    /// Receive and transmit queues of the DUT's ports now.
    pub fn queues(&self) -> usize {
        self.cores.borrow().queues
    }

    /// The CPUs the device may use now.
    pub fn device_cpus(&self) -> Vec<usize> {
        self.cores.borrow().cpus.clone()
    }

    /// Packets each receive queue of `dev` (in `ns`) has taken so far, from veth's
    /// `rx_queue_N_xdp_packets` counters (every frame its NAPI poll handled, XDP or not).
    pub fn rx_queue_packets(&self, ns: &str, dev: &str) -> Vec<u64> {
        let text = sys::ns_ok(ns, &["ethtool", "-S", dev]).unwrap_or_default();
        let mut v: Vec<(usize, u64)> = Vec::new();
        for line in text.lines() {
            let Some((k, val)) = line.trim().split_once(':') else {
                continue;
            };
            let Some(rest) = k.strip_prefix("rx_queue_") else {
                continue;
            };
            let Some(idx) = rest.strip_suffix("_xdp_packets") else {
                continue;
            };
            if let (Ok(i), Ok(n)) = (idx.parse::<usize>(), val.trim().parse::<u64>()) {
                v.push((i, n));
            }
        }
        v.sort_unstable();
        v.into_iter().map(|(_, n)| n).collect()
    }

    /// Turns threaded NAPI on for `dev` and pins its poll threads, one per receive queue,
    /// queue i's to `cpus[i % len]` (the threads are taken in pid order, the order the
    /// kernel made them: queue order).
    fn threaded_napi(&self, ns: &str, dev: &str, cpus: &[usize]) -> Result<()> {
        sys::ns_ok(ns, &["ethtool", "-K", dev, "gro", "on"])
            .with_context(|| format!("turning GRO on for {dev}"))?;
        sys::ns_sh(ns, &format!("echo 1 > /sys/class/net/{dev}/threaded"))
            .with_context(|| format!("threaded NAPI on {dev}"))?;
        // The poll threads are named napi/DEV-ID (cut to 15 characters).
        let want = format!("napi/{dev}");
        let want = &want[..want.len().min(15)];
        let mut found: Vec<(i32, String)> = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        for _ in 0..100 {
            found.clear();
            for e in std::fs::read_dir("/proc")
                .context("reading /proc")?
                .flatten()
                .take(100_000)
            {
                let Some(pid) = e.file_name().to_str().and_then(|x| x.parse::<i32>().ok()) else {
                    continue;
                };
                let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
                let comm = comm.trim();
                let rest = comm.strip_prefix(want).unwrap_or("-");
                if comm.starts_with(want) && (rest.is_empty() || rest.starts_with('-')) {
                    found.push((pid, comm.to_string()));
                }
            }
            let want_n = self.rx_queues_of(ns, dev);
            if found.len() >= want_n || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
        if found.is_empty() {
            bail!("no NAPI thread for {dev} after turning threaded NAPI on");
        }
        found.sort_unstable();
        let at = cpus::queue_cpus(cpus, found.len());
        for ((pid, comm), cpu) in found.into_iter().zip(at) {
            if !sys::pin_pid(pid, cpu) {
                // A thread of a queue just removed (ethtool -L) may be ending.
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    continue;
                }
                bail!("cannot pin {comm} (pid {pid}) to CPU {cpu}");
            }
            sys::set_fifo(pid, sys::RT_PRIO);
            self.napi_threads.borrow_mut().push((dev.to_string(), pid));
        }
        if self.rx_coalesce_ns.get() > 0
            && ns == self.ns_tester
            && (dev == self.a.dev || dev == self.d.dev)
        {
            self.apply_rx_moderation(dev)?;
        }
        Ok(())
    }

    /// Interrupt moderation on the tester's two ports facing the DUT, as a NIC's receive side
    /// has it (`--rx-coalesce-us`; 0 turns it off). On veth the sender's transmit schedules
    /// the receiver's NAPI (veth_xdp_xmit / veth_xmit -> __napi_schedule): with the tester's
    /// receive thread on another CPU, every DUT poll that transmits wakes that thread with an
    /// inter-processor interrupt -- in this VM an exit to the hypervisor -- and all of it runs
    /// on the DUT's CPU, charged to the device (measured: 62 % of xlat-siit-xdp's DUT time,
    /// PERFORMANCE-LOG step 48). Across a wire that wake-up is the receiving host's interrupt
    /// and never the router's work. Here the tester's NAPI does not re-arm its "interrupt"
    /// after a poll (napi_defer_hard_irqs) and polls again from a timer on its own CPU after
    /// `us` (gro_flush_timeout, Documentation/networking/napi.rst "Software IRQ
    /// coalescing"), so the DUT's transmit finds it scheduled and only queues the frame. The
    /// same for every device; it delays each frame's receipt by up to `us`, so latency
    /// experiments keep it off.
    pub fn moderate_tester_rx(&self, us: f64) -> Result<()> {
        self.rx_coalesce_ns.set((us * 1_000.0).round() as u64);
        for dev in [self.a.dev.clone(), self.d.dev.clone()] {
            self.apply_rx_moderation(&dev)?;
        }
        Ok(())
    }

    /// Writes the tester's receive moderation ([`Topo::moderate_tester_rx`]) to `dev` and
    /// reads it back: a kernel that did not take it fails the run rather than measure
    /// without it.
    fn apply_rx_moderation(&self, dev: &str) -> Result<()> {
        let ns = self.rx_coalesce_ns.get();
        // Empty polls before the NAPI re-arms: with frames every poll it never does; after
        // the last frame it keeps polling for this many periods.
        let defer = if ns > 0 { RX_DEFER_POLLS } else { 0 };
        let sysfs = format!("/sys/class/net/{dev}");
        sys::ns_sh(
            &self.ns_tester,
            &format!(
                "echo {defer} > {sysfs}/napi_defer_hard_irqs && echo {ns} > {sysfs}/gro_flush_timeout"
            ),
        )
        .with_context(|| format!("receive moderation on {dev}"))?;
        let got = sys::ns_sh(
            &self.ns_tester,
            &format!("cat {sysfs}/napi_defer_hard_irqs {sysfs}/gro_flush_timeout"),
        )
        .unwrap_or_default();
        let want = format!("{defer}\n{ns}");
        if got.trim() != want {
            bail!(
                "receive moderation on {dev}: the kernel reads back {:?}, not {want:?}",
                got.trim()
            );
        }
        Ok(())
    }

    /// Receive queues `dev` uses now (1 when sysfs does not say).
    fn rx_queues_of(&self, ns: &str, dev: &str) -> usize {
        sys::ns_sh(
            ns,
            &format!("ls -d /sys/class/net/{dev}/queues/rx-* | wc -l"),
        )
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1)
    }

    fn set_rps(&self, ns: &str, dev: &str, cpus: &[usize]) -> Result<()> {
        // Every receive queue, queue i to the CPU of its receive thread (`cpus` by queue,
        // round robin). `ip netns exec` remounts /sys, so the namespace's devices are there.
        let n = self.rx_queues_of(ns, dev);
        let script: String = cpus::queue_cpus(cpus, n)
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                format!(
                    "echo {} > /sys/class/net/{dev}/queues/rx-{i}/rps_cpus || exit 1\n",
                    mask(c)
                )
            })
            .collect();
        sys::ns_sh(ns, &script).with_context(|| format!("setting RPS on {dev}"))?;
        Ok(())
    }

    /// NAPI threads of the DUT's ports (their CPU time is the device's).
    /// The netdev ingress rules that keep test traffic away from the tester's own stack.
    fn tester_ruleset(&self) -> String {
        format!(
            "table netdev labtester {{\n\
             \tchain d {{\n\t\ttype filter hook ingress device \"{d}\" priority 0; policy accept;\n\t\tmeta protocol {{ ip, ip6 }} drop\n\t}}\n\
             \tchain cd {{\n\t\ttype filter hook ingress device \"{cd}\" priority 0; policy accept;\n\t\tmeta protocol {{ ip, ip6 }} drop\n\t}}\n\
             \tchain a {{\n\t\ttype filter hook ingress device \"{a}\" priority 0; policy accept;\n\t\tmeta protocol {{ ip, ip6 }} drop\n\t}}\n\
             }}\n",
            d = self.d.dev,
            cd = self.cd.dev,
            a = self.a.dev
        )
    }

    /// Lets the tester's own stack carry socket traffic through the DUT (tcp, http, owd):
    /// removes the ingress drop, and moves the local table behind policy rules so that
    /// locally sent packets from an A-side address leave by A towards the DUT, and those from
    /// D's address leave by D (to the tester's inside range, the NAT pools and the SIIT EAM).
    pub fn stack_on(&self) -> Result<()> {
        let (a, d) = (&self.a.dev, &self.d.dev);
        let script = format!(
            "set -e\n\
             nft delete table netdev labtester\n\
             sysctl -qw net.ipv4.conf.all.accept_local=1 net.ipv4.conf.{a}.accept_local=1 \
               net.ipv4.conf.{d}.accept_local=1 net.ipv4.conf.all.rp_filter=0 \
               net.ipv4.conf.{a}.rp_filter=0 net.ipv4.conf.{d}.rp_filter=0\n\
             ip -6 addr add {siit}/128 dev {a} nodad\n\
             ip route add 198.19.0.0/24 via {ua} dev {a} table 100\n\
             ip route add {inside4} via {ud} dev {d} table 101\n\
             ip route add {pool} via {ud} dev {d} table 101\n\
             ip route add {tayga_pool} via {ud} dev {d} table 101\n\
             ip route add {eam4} via {ud} dev {d} table 101\n\
             ip -6 route add 2001:2:0:2::/64 via {ua6} dev {a} table 100\n\
             ip -6 route add {pref64} via {ua6} dev {a} table 100\n\
             ip -6 route add 2001:2:0:1::/64 via {ud6} dev {d} table 101\n\
             ip rule add pref 10 iif lo from {inside4} lookup 100\n\
             ip rule add pref 11 iif lo from {d4} lookup 101\n\
             ip -6 rule add pref 10 iif lo from 2001:2:0:1::/64 lookup 100\n\
             ip -6 rule add pref 11 iif lo from {d6} lookup 101\n\
             ip rule add pref 20 lookup local\n\
             ip rule del pref 0\n\
             ip -6 rule add pref 20 lookup local\n\
             ip -6 rule del pref 0\n",
            siit = SIIT_CLIENT6,
            ua = UA_ADDR,
            ud = UD_ADDR,
            ua6 = UA6_ADDR,
            ud6 = UD6_ADDR,
            d4 = D_ADDR,
            d6 = D6_ADDR,
            inside4 = INSIDE4,
            pool = crate::addressing::POOL,
            tayga_pool = TAYGA_POOL,
            eam4 = SIIT_EAM4,
            pref64 = PREF64,
        );
        sys::ns_sh(&self.ns_tester, &script).context("switching the tester's stack on")?;
        Ok(())
    }

    /// Undoes [`Topo::stack_on`] (best effort: every step is tried).
    pub fn stack_off(&self) -> Result<()> {
        let a = &self.a.dev;
        let script = format!(
            "ip rule add pref 0 lookup local; ip rule del pref 20; ip rule del pref 10; ip rule del pref 11; \
             ip -6 rule add pref 0 lookup local; ip -6 rule del pref 20; ip -6 rule del pref 10; ip -6 rule del pref 11; \
             ip route flush table 100; ip route flush table 101; ip -6 route flush table 100; ip -6 route flush table 101; \
             ip -6 addr del {siit}/128 dev {a}; true",
            siit = SIIT_CLIENT6,
        );
        let _ = sys::ns_sh(&self.ns_tester, &script);
        sys::nft_load(&self.ns_tester, &self.tester_ruleset(), &self.dir)
    }

    /// Kernel threads doing the tester's receive work: its ports' NAPI threads and the
    /// tester CPU's ksoftirqd (softirq work the kernel deferred).
    pub fn tester_kernel_pids(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self
            .napi_threads
            .borrow()
            .iter()
            .filter(|(d, _)| {
                *d == self.d.dev
                    || *d == self.cd.dev
                    || *d == self.a.dev
                    || *d == format!("{}ja", self.id)
                    || *d == format!("{}jd", self.id)
            })
            .map(|(_, p)| *p)
            .collect();
        for c in &self.tester_cpus {
            v.extend(sys::kthread_pid(&format!("ksoftirqd/{c}")));
        }
        v
    }

    pub fn dut_napi_pids(&self) -> Vec<i32> {
        self.napi_threads
            .borrow()
            .iter()
            .filter(|(d, _)| *d == self.ua.dev || *d == self.ud.dev)
            .map(|(_, p)| *p)
            .collect()
    }

    /// Runs a command in the DUT namespace; must succeed.
    pub fn dut(&self, args: &[&str]) -> Result<String> {
        sys::ns_ok(&self.ns_dut, args)
    }

    /// Reads a file inside the DUT namespace (for per-namespace /proc/sys values).
    pub fn dut_read(&self, path: &str) -> Option<String> {
        sys::ns_ok(&self.ns_dut, &["cat", path]).ok()
    }

    /// Where the work runs, in words, for reports.
    pub fn placement(&self) -> String {
        let p = self.cores.borrow();
        format!(
            "tester threads on CPU {} and the tester ports' receive work (threaded NAPI) on CPU {}; the DUT ports' receive work (threaded NAPI, {} queue(s) a port, one thread each) and DUT processes on CPU {}; all of them SCHED_FIFO (receive work priority {}, the devices' daemons {}, the sender {})",
            self.tester_cpu,
            cpus::format_list(&self.tester_cpus),
            p.queues,
            cpus::format_list(&p.cpus),
            sys::RT_PRIO,
            sys::RT_PRIO_SLOW_PATH,
            sys::RT_PRIO_SENDER
        )
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            destroy_ns(ns);
            // A namespace's resolver files (`ip netns exec` bind-mounts /etc/netns/NS/*; the
            // dns64 experiment writes resolv.conf there): gone with the namespace.
            let _ = std::fs::remove_dir_all(format!("/etc/netns/{ns}"));
        }
        if std::env::var_os("XLAT_LAB_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Kills what runs in `ns` and deletes it (bounded retries).
pub fn destroy_ns(ns: &str) {
    if let Ok(o) = sys::cmd(5, &["ip", "netns", "pids", ns]) {
        for pid in o
            .stdout
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: kill(2) on processes inside a namespace this run created.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    for _ in 0..40 {
        if sys::cmd(10, &["ip", "netns", "del", ns])
            .map(|o| o.ok)
            .unwrap_or(false)
        {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    eprintln!("warning: could not delete namespace {ns}");
}

pub fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut it = text.trim().split(':');
    for b in m.iter_mut() {
        *b = u8::from_str_radix(it.next()?, 16).ok()?;
    }
    if it.next().is_some() {
        return None;
    }
    Some(m)
}

fn read_mac(ns: &str, dev: &str) -> Result<[u8; 6]> {
    let path = format!("/sys/class/net/{dev}/address");
    let text = sys::ns_ok(ns, &["cat", &path])?;
    parse_mac(&text).with_context(|| format!("{path} in {ns}: not a MAC address: {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_round_trip() {
        let m = [0x02, 0xab, 0, 1, 0xff, 0x10];
        assert_eq!(parse_mac(&fmt_mac(&m)), Some(m));
        assert_eq!(parse_mac("02:ab:00:01:ff"), None);
        assert_eq!(parse_mac("zz:ab:00:01:ff:00"), None);
    }

    #[test]
    fn rps_masks() {
        assert_eq!(mask(0), "1");
        assert_eq!(mask(1), "2");
        assert_eq!(mask(33), "2,0");
    }
}
