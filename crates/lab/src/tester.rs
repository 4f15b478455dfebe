//! The software tester: one trial sends UDP frames out of one tester port at an offered load
//! and receives them on the other, in one process, so transmit and receive timestamps come from
//! one clock (CLOCK_REALTIME: the sender stamps the payload, the kernel stamps the receive ring).
//!
//! A trial runs two threads, each moved into the tester namespace and pinned to the tester
//! CPU: the sender (paced by a token count: packets due = rate x elapsed, written into a
//! TPACKET_V2 transmit ring and handed over with one sendto() per batch of up to 64) and the
//! receiver (TPACKET_V3 ring). The receiver counts frames carrying
//! this trial's tag, duplicates (a bitmap of sequence numbers), reordering (a sequence number
//! below the highest already seen in its flow, RFC 4737's "reordered"), and records one-way
//! latency in an HDR histogram. Loss = sent - distinct received. Every loop is bounded in time
//! (the trial's duration plus a drain limit) and in count.
//!
//! With `TrialSpec::rx_xdp` the receive port also gets the lab's XDP receive counter
//! (crates/xdp/bpf/lab_rx.bpf.c) for the trial: it counts the trial's distinct frames and
//! duplicates at the port's front door and drops them, passing a systematic sample (one frame
//! in 2^k by sequence number, about 16,000 a second) on to the ring for latency, reordering and
//! the first source. Receiving then costs the tester's core a fraction of what the ring costs,
//! which leaves the core to the sender: the tester offers a device more than the ring allowed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::afpacket::{RxRing, TxRing};
use crate::packet::{parse_tag, Flow, SizeMix, Tag, FCS_LEN, IMIX_PATTERN};
use crate::sys;
use crate::txframe::{ring_slots, Link, SlotFrame};
use xlat_xdp::lab_rx::LabRx;

/// Frames per sendto() on the transmit ring (at most): the largest burst the device gets.
/// Larger batches raise the tester's ceiling (measured with frames in the ring's pages and
/// RPS on the tester's ports; 64: 1.1 Mpps at 64 B, 32: 1.05, 16: 1.0) but also the device's
/// queueing (forward4's median latency at 300,000 pps: 125, 102 and 65 us); 32 is what the
/// sendmmsg sender used.
pub const BATCH: usize = 32;

/// With [`TrialSpec::smooth`], the most frames due at once the sender still sends: three
/// batches, well inside veth's receive ring of 256 frames.
pub const CATCH_UP: u64 = 3 * BATCH as u64;

/// Transmit ring slots (2 KB each): at least this many, so frames in flight through a device
/// (its queues, the ports' rings) never fill the ring...
const TX_SLOTS_MIN: usize = 4096;
/// ... and at most this many to make the ring's length a multiple of the sender's schedule.
const TX_SLOTS_MAX: usize = 16_384;
/// The largest sequence-number bitmap (packets per trial tracked for duplicates).
const MAX_TRACKED: u64 = 1 << 30;

/// Where a trial's frames go.
#[derive(Debug, Clone)]
pub struct PathSpec {
    pub ns: String,
    pub tx_dev: String,
    pub rx_dev: String,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub v6: bool,
}

/// What a trial sends.
#[derive(Debug, Clone)]
pub struct TrialSpec {
    pub path: PathSpec,
    pub flows: Arc<Vec<Flow>>,
    pub sizes: SizeMix,
    /// Offered load in packets per second; None sends as fast as the tester can.
    pub rate_pps: Option<f64>,
    pub duration: Duration,
    /// Stop after this many packets (a warm-up sends each flow once).
    pub max_packets: Option<u64>,
    pub tester_cpu: usize,
    /// The device's CPUs: its busy share is their mean, its kernel time their sum.
    pub dut_cpus: Vec<usize>,
    /// Leave the transmit queue to the kernel's flow hash (no qdisc bypass): with several
    /// queues on the tester's port, flows spread over the DUT's receive queues as RSS would
    /// spread them (the bypass picks the queue by the sending CPU: one sender, one queue).
    pub tx_spread: bool,
    /// Processes of the device, for their CPU time.
    pub dut_pids: Vec<i32>,
    /// Kernel threads doing the DUT ports' receive work (threaded NAPI).
    pub dut_kernel_pids: Vec<i32>,
    /// Kernel threads doing the tester's receive work (its ports' NAPI, its CPU's ksoftirqd).
    pub tester_kernel_pids: Vec<i32>,
    /// How long to wait for stragglers after the last frame is sent.
    pub drain: Duration,
    /// Longest time a due frame waits to be sent with others (0: every frame when due).
    pub coalesce: Duration,
    /// Count at the receive port with the XDP receive counter (the ring sees a sample).
    pub rx_xdp: bool,
    /// Never hand the port more than [`CATCH_UP`] frames at once: a sender further behind its
    /// schedule lets it slip (those frames are not sent; the trial's `sender_slipped` and
    /// achieved rate say so) instead of catching up in a burst. See [`Trial::sender_slipped`].
    pub smooth: bool,
    /// Churn: frame number s goes to flow `mix.flow_of(s)` (established flows and new ones,
    /// counted per group), instead of the flows in turn.
    pub mix: Option<crate::churn::Mix>,
    /// Lets another thread see the sender start and end the trial before `duration` (the
    /// reload experiment sends while it reloads the device, for as long as that takes).
    pub control: Option<Arc<TrialControl>>,
}

/// Shared with a trial's sender: it sets `started` just before its first frame and leaves
/// its loop as soon as `stop` is set (`duration` still bounds it).
#[derive(Debug, Default)]
pub struct TrialControl {
    pub started: AtomicBool,
    pub stop: AtomicBool,
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Latency {
    pub samples: u64,
    pub min_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Latency {
    /// The percentiles of a histogram of nanoseconds (all zero when it is empty).
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let us = |v: u64| v as f64 / 1000.0;
        Latency {
            samples: h.len(),
            min_us: us(h.min()),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

/// CPU use during a trial.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CpuUse {
    /// Busy (not idle, steal included) share of the tester CPU during the send window, 0..1,
    /// from the idle time and the wall clock (`other_share` in this module says why not the
    /// busy ticks).
    pub tester_busy: f64,
    /// Busy share of the DUT CPU during the send window, 0..1, as `tester_busy`.
    pub dut_busy: f64,
    /// Softirq share of the DUT CPU during the send window, 0..1.
    pub dut_softirq: f64,
    /// The device's CPU nanoseconds per packet received: the CPU time of the device's processes
    /// and of the DUT ports' NAPI threads, or with softirq receive (no NAPI threads) the DUT
    /// CPU's softirq and irq time in their place (send window plus drain; `device_ns` says
    /// why). Other processes that happen to run on the DUT CPU are not counted.
    pub dut_ns_per_pkt: f64,
    /// CPU nanoseconds of the device's own processes per packet received (0 for kernel devices).
    pub proc_ns_per_pkt: f64,
    /// The tester's CPU nanoseconds per packet received: its sender and receiver threads
    /// (softirq work run in their context included) and `tester_kernel_pids`.
    #[serde(default)]
    pub tester_ns_per_pkt: f64,
    /// Share of the DUT CPU used by anything else (other processes on the machine), 0..1.
    #[serde(default)]
    pub dut_other: f64,
    /// Share of the DUT CPU used by the device (its NAPI threads, softirq, processes), 0..1.
    #[serde(default)]
    pub device_busy: f64,
    /// Share of the send window the hypervisor ran something else on the DUT's vCPU (steal).
    #[serde(default)]
    pub dut_steal: f64,
    /// CPUs the sender and receiver threads ran on (sampled at their end).
    pub sender_cpu: i32,
    pub receiver_cpu: i32,
}

/// The result of one trial.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Trial {
    pub size: String,
    pub flows: u32,
    /// Offered load asked for (pps); 0 = as fast as possible.
    pub offered_pps: f64,
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub loss: f64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Frames the tester's receive ring had no room for (a tester limit, counted as loss).
    pub ring_drops: u64,
    /// Frames on the receive port without this trial's tag.
    pub foreign: u64,
    /// Frames the device's input queue refused (veth pushes back on the sender when the
    /// receiving side's ring is full). A wire cannot push back: these count as sent and lost,
    /// as a NIC dropping on a full ring.
    pub tx_refused: u64,
    /// The most frames that were due at once (the sender's largest backlog). Normally about
    /// a batch or the coalescing window's worth; far more means the sender fell behind its
    /// schedule, and unless it is smooth ([`TrialSpec::smooth`]) it caught up by handing them
    /// all to the port back to back, which a veth receive ring of 256 frames may not hold: a
    /// loss of the tester's pacing, not of the device.
    #[serde(default)]
    pub sender_max_burst: u64,
    /// Frames a smooth sender ([`TrialSpec::smooth`]) left out rather than send in a burst:
    /// behind its schedule by more than [`CATCH_UP`] frames, it moved the schedule on. With
    /// the budget of frames unchanged, they are sent later if the trial's time allows. A
    /// sender that catches up at once -- the default -- sent, after being held off its core
    /// for a millisecond, hundreds of frames back to back into a 256-frame veth ring, and the
    /// device was charged the frames the ring could not hold (PERFORMANCE-LOG step 48).
    #[serde(default)]
    pub sender_slipped: u64,
    pub send_secs: f64,
    /// Achieved transmit rate (pps).
    pub tx_pps: f64,
    /// Receive rate over the send window (pps).
    pub rx_pps: f64,
    /// Received bits per second at layer 2 (frames with FCS).
    pub rx_bps: f64,
    pub mean_frame: f64,
    pub latency: Latency,
    pub cpu: CpuUse,
    /// The sender fell short of the offered load by more than 3%.
    pub sender_short: bool,
    /// Source address:port of the first test frame received (shows what the device did).
    pub rx_first_src: String,
    /// A baseline stored with a device's trials: the tester sending to itself (CA -> CD)
    /// for the device's cost by difference, or (reload) a window without reloads.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub baseline: bool,
    /// Churn trials: loss and latency of the established and the new flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<crate::churn::Groups>,
}

struct RxState {
    tag: u16,
    nflows: usize,
    seen: Vec<u64>,
    last: Vec<i64>,
    received: u64,
    dup: u64,
    reordered: u64,
    foreign: u64,
    bytes: u64,
    first_src: String,
    hist: Histogram<u64>,
    groups: Option<crate::churn::RxGroups>,
}

impl RxState {
    fn on_frame(&mut self, data: &[u8], rx_ns: u64) {
        let Some(t) = parse_tag(data) else {
            self.foreign += 1;
            return;
        };
        if t.tag != self.tag || (t.flow as usize) >= self.nflows {
            self.foreign += 1;
            return;
        }
        let seq = u64::from(t.seq);
        if seq < MAX_TRACKED {
            let w = (seq / 64) as usize;
            if w >= self.seen.len() {
                let want = (w + 1).next_power_of_two().max(1024);
                self.seen.resize(want, 0);
            }
            let bit = 1u64 << (seq % 64);
            if self.seen[w] & bit != 0 {
                self.dup += 1;
                return;
            }
            self.seen[w] |= bit;
        }
        if self.received == 0 {
            self.first_src = src_of(data);
        }
        self.received += 1;
        self.bytes += (data.len() + FCS_LEN) as u64;
        let l = &mut self.last[t.flow as usize];
        if (t.seq as i64) < *l {
            self.reordered += 1;
        } else {
            *l = t.seq as i64;
        }
        let lat = rx_ns.saturating_sub(t.tx_ns).max(1);
        let _ = self.hist.record(lat.min(self.hist.high()));
        if let Some(g) = self.groups.as_mut() {
            g.record(t.flow, lat);
        }
    }
}

/// "address:port" of a frame's IP source and UDP source port; for IPv6 in IPv4 protocol 41
/// (RFC 4213 3.5) "outer address in 6in4 [inner address]:port".
fn src_of(f: &[u8]) -> String {
    let et = f.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
    match et {
        Some(0x0800) => {
            let ihl = f.get(14).map(|b| usize::from(b & 0x0f) * 4).unwrap_or(20);
            let Some(a) = f.get(26..30) else {
                return String::new();
            };
            let outer = std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            if f.get(23) == Some(&crate::packet::PROTO_IPV6_IN_IPV4) {
                return format!("{outer} in 6in4 {}", src6_of(f, 14 + ihl));
            }
            match f.get(14 + ihl..16 + ihl) {
                Some(p) => format!("{outer}:{}", u16::from_be_bytes([p[0], p[1]])),
                None => String::new(),
            }
        }
        Some(0x86dd) => src6_of(f, 14),
        _ => String::new(),
    }
}

/// "[address]:port" of the IPv6 header at `l3` and the UDP header after it.
fn src6_of(f: &[u8], l3: usize) -> String {
    match (f.get(l3 + 8..l3 + 24), f.get(l3 + 40..l3 + 42)) {
        (Some(a), Some(p)) => {
            let mut o = [0u8; 16];
            o.copy_from_slice(a);
            format!(
                "[{}]:{}",
                std::net::Ipv6Addr::from(o),
                u16::from_be_bytes([p[0], p[1]])
            )
        }
        _ => String::new(),
    }
}

fn tag_for_trial() -> u16 {
    // Different for every trial, so a straggler from the last trial is never counted.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (crate::packet::mix32((n as u32) ^ (sys::now_ns() as u32)) & 0xffff) as u16 | 1
}

/// Runs one trial. Fails when a thread cannot set itself up (namespace, sockets).
pub fn run_trial(spec: &TrialSpec) -> Result<Trial> {
    let tag = tag_for_trial();
    let nflows = spec.flows.len().max(1);
    let sent = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();

    // Receiver first: its ring must exist before the first frame leaves.
    let rx_spec = spec.clone();
    let (rx_sent, rx_done) = (sent.clone(), done.clone());
    let receiver = std::thread::Builder::new()
        .name("lab-rx".into())
        .spawn(move || -> Result<(RxState, u64, i32, u64)> {
            let setup = || -> Result<(RxRing, Option<LabRx>)> {
                sys::enter_netns(&rx_spec.path.ns)?;
                sys::pin_thread(rx_spec.tester_cpu);
                sys::set_fifo(0, sys::RT_PRIO);
                let ring = RxRing::open(&rx_spec.path.rx_dev, 1 << 20, 64)?;
                // Churn trials count per flow group: those need every frame in the ring.
                let xdp = if rx_spec.rx_xdp && rx_spec.mix.is_none() {
                    let max_seq = expected_frames(&rx_spec).saturating_mul(2);
                    let shift = sample_shift(rx_spec.rate_pps);
                    Some(LabRx::attach(
                        &rx_spec.path.rx_dev,
                        tag,
                        nflows as u32,
                        shift,
                        max_seq,
                    )?)
                } else {
                    None
                };
                Ok((ring, xdp))
            };
            let (mut ring, xdp) = match setup() {
                Ok(r) => {
                    let _ = ready_tx.send(Ok(()));
                    r
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow!("{e:#}")));
                    return Err(e);
                }
            };
            let _ = ring.drops(); // reset the kernel's counters
            let rx_cpu0 = sys::thread_cpu_ns();
            let hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
                .map_err(|e| anyhow!("histogram: {e}"))?;
            let mut st = RxState {
                tag,
                nflows,
                seen: Vec::new(),
                last: vec![-1; nflows],
                received: 0,
                dup: 0,
                reordered: 0,
                foreign: 0,
                bytes: 0,
                first_src: String::new(),
                hist,
                groups: rx_spec.mix.map(crate::churn::RxGroups::new).transpose()?,
            };
            let hard_limit = rx_spec.duration + rx_spec.drain + Duration::from_secs(10);
            let start = Instant::now();
            let mut done_at: Option<Instant> = None;
            // Bounded: each turn waits at most 5 ms, and the loop ends by `hard_limit`.
            let max_turns = hard_limit.as_millis() as u64 * 10 + 1000;
            for _ in 0..max_turns {
                ring.poll_block(5, |f| st.on_frame(f.data, f.rx_ns));
                if done_at.is_none() && rx_done.load(Ordering::Acquire) {
                    done_at = Some(Instant::now());
                }
                if let Some(t) = done_at {
                    let total = rx_sent.load(Ordering::Acquire);
                    let got = match &xdp {
                        Some(x) => {
                            let c = x.counts();
                            c.received + c.duplicates
                        }
                        None => st.received + st.dup,
                    };
                    if got >= total || t.elapsed() >= rx_spec.drain {
                        // Pick up blocks already retired before leaving.
                        while ring.poll_block(0, |f| st.on_frame(f.data, f.rx_ns)) > 0 {
                            if t.elapsed() >= rx_spec.drain + Duration::from_millis(100) {
                                break;
                            }
                        }
                        break;
                    }
                }
                if start.elapsed() >= hard_limit || (sys::stopped() && done_at.is_some()) {
                    break;
                }
            }
            let drops = ring.drops();
            if let Some(x) = xdp {
                // The ring saw the sample (and foreign frames): the counts are the counter's.
                let c = x.counts();
                st.received = c.received;
                st.dup += c.duplicates;
                st.bytes = c.bytes;
            }
            let rx_ns = sys::thread_cpu_ns().saturating_sub(rx_cpu0);
            Ok((st, drops, sys::current_cpu(), rx_ns))
        })
        .context("starting the receiver thread")?;
    match ready_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            done.store(true, Ordering::Release);
            let _ = receiver.join();
            return Err(e.context("receiver setup"));
        }
        Err(_) => {
            done.store(true, Ordering::Release);
            return Err(anyhow!("receiver did not start within 10 s"));
        }
    }

    let cpu0 = sys::cpu_times();
    let wall0 = Instant::now();
    let proc0: u64 = spec
        .dut_pids
        .iter()
        .filter_map(|&p| sys::proc_cpu_ns(p))
        .sum();
    let napi0: u64 = spec
        .dut_kernel_pids
        .iter()
        .filter_map(|&p| sys::proc_cpu_ns(p))
        .sum();
    let tk0: u64 = spec
        .tester_kernel_pids
        .iter()
        .filter_map(|&p| sys::proc_cpu_ns(p))
        .sum();
    let tx_spec = spec.clone();
    let tx_sent = sent.clone();
    let sender = std::thread::Builder::new()
        .name("lab-tx".into())
        .spawn(move || -> Result<(Sent, i32, u64)> {
            let c0 = sys::thread_cpu_ns();
            sys::enter_netns(&tx_spec.path.ns)?;
            sys::pin_thread(tx_spec.tester_cpu);
            sys::set_fifo(0, sys::RT_PRIO_SENDER);
            sys::tight_timer_slack();
            let pattern = match tx_spec.sizes {
                SizeMix::Imix => IMIX_PATTERN.len(),
                SizeMix::Fixed(_) => 1,
            };
            let slots = ring_slots(tx_spec.flows.len(), pattern, TX_SLOTS_MIN, TX_SLOTS_MAX);
            let mut tx = TxRing::open(&tx_spec.path.tx_dev, slots, !tx_spec.tx_spread)?;
            send_loop(&tx_spec, &mut tx, tag, &tx_sent)
                .map(|s| (s, sys::current_cpu(), sys::thread_cpu_ns() - c0))
        })
        .context("starting the sender thread")?;
    let send_res = sender.join().map_err(|_| anyhow!("sender thread panicked"));
    let cpu1 = sys::cpu_times();
    let send_wall_ns = wall0.elapsed().as_nanos() as f64;
    done.store(true, Ordering::Release);
    let rx_res = receiver
        .join()
        .map_err(|_| anyhow!("receiver thread panicked"))?;
    let cpu2 = sys::cpu_times();
    let wall_ns = wall0.elapsed().as_nanos() as f64;
    let proc2: u64 = spec
        .dut_pids
        .iter()
        .filter_map(|&p| sys::proc_cpu_ns(p))
        .sum();
    let napi2: u64 = spec
        .dut_kernel_pids
        .iter()
        .filter_map(|&p| sys::proc_cpu_ns(p))
        .sum();
    let tk2: u64 = spec
        .tester_kernel_pids
        .iter()
        .filter_map(|&p| sys::proc_cpu_ns(p))
        .sum();
    let (done_sending, sender_cpu, tx_ns) = send_res??;
    let Sent {
        secs: send_secs,
        refused: tx_refused,
        max_burst: sender_max_burst,
        slipped: sender_slipped,
    } = done_sending;
    let (st, ring_drops, receiver_cpu, rx_ns) = rx_res?;
    let tester_ns = (tx_ns + rx_ns + tk2.saturating_sub(tk0)) as f64;

    let total = sent.load(Ordering::Acquire);
    let lost = total.saturating_sub(st.received);
    let tick_ns = 1e9 / sys::clk_tck() as f64;
    // (softirq share, softirq+irq ticks) of one CPU between snapshots.
    let share = |a: &[sys::CpuTimes], b: &[sys::CpuTimes], cpu: usize| -> (f64, f64) {
        match (a.get(cpu), b.get(cpu)) {
            (Some(x), Some(y)) => {
                let d = y.delta(x);
                let t = d.total().max(1) as f64;
                (d.softirq as f64 / t, (d.softirq + d.irq) as f64)
            }
            _ => (0.0, 0.0),
        }
    };
    // Busy = not idle, on the wall clock: exact where the busy ticks are samples (other_share).
    let busy = |cpus: &[usize]| -> f64 {
        let (idle, _) = idle_steal(&cpu0, &cpu1, cpus);
        let wall = send_wall_ns * cpus.len().max(1) as f64;
        (1.0 - idle as f64 * tick_ns / wall.max(1.0)).clamp(0.0, 1.0)
    };
    let tester_busy = busy(&[spec.tester_cpu]);
    // Over the device's CPUs: the softirq share their mean, the ticks their sum.
    let shares = |a: &[sys::CpuTimes], b: &[sys::CpuTimes]| -> (f64, f64) {
        let n = spec.dut_cpus.len().max(1) as f64;
        let mut acc = (0.0, 0.0);
        for &c in &spec.dut_cpus {
            let (soft, kt) = share(a, b, c);
            acc = (acc.0 + soft / n, acc.1 + kt);
        }
        acc
    };
    let (dut_softirq, _) = shares(&cpu0, &cpu1);
    let dut_busy = busy(&spec.dut_cpus);
    let dut_steal = {
        let (mut steal, mut total) = (0u64, 0u64);
        for &c in &spec.dut_cpus {
            if let (Some(a), Some(b)) = (cpu0.get(c), cpu1.get(c)) {
                let d = b.delta(a);
                steal += d.steal;
                total += d.total();
            }
        }
        steal as f64 / total.max(1) as f64
    };
    // The window (send and drain) on the wall clock: one CPU's time.
    let (_, kernel_ticks) = shares(&cpu0, &cpu2);
    let proc_ns = proc2.saturating_sub(proc0) as f64;
    let device_ns = device_ns(
        proc_ns,
        napi2.saturating_sub(napi0) as f64,
        kernel_ticks * tick_ns,
        !spec.dut_kernel_pids.is_empty(),
    );
    // A share of one CPU, the mean over the device's CPUs.
    let ncpu = spec.dut_cpus.len().max(1) as f64;
    let (idle_ticks, steal_ticks) = idle_steal(&cpu0, &cpu2, &spec.dut_cpus);
    let dut_other = other_share(
        wall_ns * ncpu,
        idle_ticks as f64 * tick_ns,
        device_ns,
        steal_ticks as f64 * tick_ns,
    );
    let rcv = st.received.max(1) as f64;
    let latency = Latency::of(&st.hist);
    let offered = spec.rate_pps.unwrap_or(0.0);
    let tx_pps = total as f64 / send_secs.max(1e-9);
    Ok(Trial {
        size: spec.sizes.label(),
        flows: spec.flows.len() as u32,
        offered_pps: offered,
        sent: total,
        received: st.received,
        lost,
        loss: if total == 0 {
            0.0
        } else {
            lost as f64 / total as f64
        },
        duplicates: st.dup,
        reordered: st.reordered,
        ring_drops,
        foreign: st.foreign,
        tx_refused,
        sender_max_burst,
        sender_slipped,
        send_secs,
        tx_pps,
        rx_pps: st.received as f64 / send_secs.max(1e-9),
        rx_bps: st.bytes as f64 * 8.0 / send_secs.max(1e-9),
        mean_frame: spec.sizes.mean(spec.path.v6),
        latency,
        cpu: CpuUse {
            tester_busy,
            dut_busy,
            dut_softirq,
            dut_ns_per_pkt: device_ns / rcv,
            proc_ns_per_pkt: proc_ns / rcv,
            tester_ns_per_pkt: tester_ns / rcv,
            dut_other,
            device_busy: (device_ns / wall_ns.max(1.0)).min(1.0),
            dut_steal,
            sender_cpu,
            receiver_cpu,
        },
        sender_short: offered > 0.0
            && tx_pps < offered * 0.97
            && spec.max_packets.is_none_or(|m| total < m),
        rx_first_src: st.first_src,
        groups: st.groups.as_ref().map(|g| g.finish(total)),
        baseline: false,
    })
}

/// Frames a trial will send at most: its packet budget, else rate x duration (unpaced: at
/// the fastest any tester here sends, 3 Mpps), with 10% to spare.
fn expected_frames(spec: &TrialSpec) -> u64 {
    let rate = spec.rate_pps.filter(|r| *r > 0.0).unwrap_or(3e6);
    let by_time = (rate * spec.duration.as_secs_f64() * 1.1) as u64 + 1024;
    spec.max_packets.map_or(by_time, |m| m.min(by_time))
}

/// The XDP receive counter passes one frame in 2^k on to the ring: k so that the ring gets
/// about 16,000 frames a second (all of them below that rate), at most one in 256.
fn sample_shift(rate_pps: Option<f64>) -> u32 {
    let r = rate_pps.filter(|r| *r > 0.0).unwrap_or(3e6);
    let per_sample = (r / 16_384.0).max(1.0);
    (per_sample.log2().floor() as u32).min(8)
}

/// What the sender does next.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// Send this many frames now.
    Send(usize),
    /// Nothing to send for this long.
    Wait(Duration),
}

/// Frames due by `el` at `r` pps (the first at 0) and not yet sent, of a budget of `max`.
fn due_frames(el: Duration, r: f64, sent: u64, max: u64) -> u64 {
    ((el.as_secs_f64() * r) as u64 + 1)
        .min(max)
        .saturating_sub(sent)
}

/// Frames a sender `due` frames behind moves its schedule on by: with `smooth`, all beyond
/// [`CATCH_UP`]; else none (it catches up at once).
fn slip_by(due: u64, smooth: bool) -> u64 {
    if smooth {
        due.saturating_sub(CATCH_UP)
    } else {
        0
    }
}

/// The pacer: at `el` into the trial, with `sent` frames gone, how many are due at `rate`
/// pps (None: as fast as possible), at most `max` in all, in batches of up to `batch`.
/// Packets due by time t = rate x t, rounded down, plus the first one at t = 0. Below a full
/// batch, due frames wait until `coalesce` has passed since the last send (`last`), as a NIC
/// holds its interrupt (each hand-over to the device costs it a thread wakeup, which would
/// otherwise be paid per packet); they leave earlier if a full batch becomes due first.
fn pace(
    el: Duration,
    rate: Option<f64>,
    sent: u64,
    max: u64,
    batch: usize,
    last: Duration,
    coalesce: Duration,
) -> Step {
    let Some(r) = rate else {
        return Step::Send(max.saturating_sub(sent).min(batch as u64) as usize);
    };
    let at = |n: u64| Duration::from_secs_f64(n as f64 / r);
    let due = due_frames(el, r, sent, max);
    if due == 0 {
        return Step::Wait(at(sent).saturating_sub(el));
    }
    let full = (batch as u64).min(max.saturating_sub(sent));
    if due < full && el < last + coalesce {
        // A full batch is due when rate x t + 1 >= sent + full.
        let next = (last + coalesce).min(at(sent + full - 1));
        return Step::Wait(next.saturating_sub(el));
    }
    Step::Send(due.min(batch as u64) as usize)
}

/// What [`send_loop`] did.
#[derive(Debug, Default)]
struct Sent {
    /// Seconds it sent for.
    secs: f64,
    /// Frames the port refused.
    refused: u64,
    /// [`Trial::sender_max_burst`].
    max_burst: u64,
    /// [`Trial::sender_slipped`].
    slipped: u64,
}

/// Sends until the duration or the packet budget is used up.
///
/// Frame number p of the schedule (counting frames the port took) belongs to flow p mod
/// flows, with the size mix's size p, and goes into ring slot p mod slots; the ring's slot
/// count is a multiple of the schedule's period where it can be, so a slot is built once and
/// afterwards only gets a new tag ([`SlotFrame`]). Sequence numbers count every frame offered,
/// including those the port refused (lost); a refused frame's flow is offered again next.
/// The packet budget (`max_packets`) counts frames the port took: a trial of N flows once
/// each offers every one of them, however many frames were refused on the way (a budget of
/// frames offered cut the last flows off: 516 of a 10,000,000-flow fill never sent, in every
/// pass, 2026-11-28).
fn send_loop(spec: &TrialSpec, tx: &mut TxRing, tag: u16, sent_out: &AtomicU64) -> Result<Sent> {
    let flows = &spec.flows;
    if flows.is_empty() {
        return Ok(Sent::default());
    }
    let nflows = flows.len() as u64;
    let link = Link {
        v6: spec.path.v6,
        dst_mac: &spec.path.dst_mac,
        src_mac: &spec.path.src_mac,
    };
    let mut slots = vec![SlotFrame::default(); tx.frames()];
    let max = spec.max_packets.unwrap_or(u64::MAX).min(u32::MAX as u64);
    let rate = spec.rate_pps.filter(|r| *r > 0.0);
    // Sequence numbers used (frames taken or refused), frames refused, frames taken.
    let (mut sent, mut refused, mut pos) = (0u64, 0u64, 0u64);
    let mut last_send = Duration::ZERO;
    let mut max_burst = 0u64;
    // Frames the schedule moved on by (`spec.smooth`): the pacer sees `sent + slip` sent.
    let mut slip = 0u64;
    let t0 = Instant::now();
    let limit = spec.duration;
    if let Some(c) = &spec.control {
        c.started.store(true, Ordering::Release);
    }
    let stop = || {
        spec.control
            .as_ref()
            .is_some_and(|c| c.stop.load(Ordering::Relaxed))
    };
    // Bounded in time by `limit`; the turn count bounds it too (each turn sends or waits).
    let max_turns = (limit.as_secs_f64() * 50_000_000.0) as u64 + 1_000_000;
    for _ in 0..max_turns {
        let el = t0.elapsed();
        // `sent` = `pos` + `refused`: the budget is met when `pos` frames were taken.
        let budget = max.saturating_add(refused);
        if el >= limit || sent >= budget || sys::stopped() || stop() {
            break;
        }
        if let Some(r) = rate {
            let due = due_frames(el, r, sent + slip, budget.saturating_add(slip));
            max_burst = max_burst.max(due);
            slip += slip_by(due, spec.smooth);
        }
        let n = match pace(
            el,
            rate,
            sent + slip,
            budget.saturating_add(slip),
            BATCH,
            last_send,
            spec.coalesce,
        ) {
            Step::Send(n) => n,
            Step::Wait(w) => {
                if w > Duration::from_micros(60) {
                    std::thread::sleep(w - Duration::from_micros(40));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
        };
        // One timestamp for the batch: its frames leave in one sendto().
        let now = sys::now_ns();
        for k in 0..n as u64 {
            let Some((i, buf)) = tx.slot() else {
                break; // the ring is full of frames in flight
            };
            let p = pos + k;
            let fi = match spec.mix {
                Some(m) => m.flow_of(sent + k) % flows.len(),
                None => (p % nflows) as usize,
            };
            let frame = spec.sizes.frame(p, spec.path.v6);
            let t = Tag {
                tag,
                flow: fi as u32,
                seq: (sent + k) as u32,
                tx_ns: now,
            };
            let len = slots[i]
                .write(buf, fi, &flows[fi], frame, &link, t)
                .ok_or_else(|| anyhow!("cannot build a {frame}-byte frame"))?;
            tx.queue(len);
        }
        if tx.queued() == 0 {
            // Every slot is in flight: wait for the kernel to free some.
            std::thread::sleep(Duration::from_micros(20));
            continue;
        }
        let kick = tx.kick().context("sendto on the transmit ring")?;
        last_send = el;
        // What the port refused was offered and is lost: the sequence moves on.
        pos += kick.taken as u64;
        refused += kick.refused as u64;
        sent += (kick.taken + kick.refused) as u64;
        sent_out.store(sent, Ordering::Release);
    }
    Ok(Sent {
        secs: t0.elapsed().as_secs_f64(),
        refused,
        max_burst,
        slipped: slip,
    })
}

/// Idle and steal ticks of `cpus`, summed, between two /proc/stat snapshots.
fn idle_steal(a: &[sys::CpuTimes], b: &[sys::CpuTimes], cpus: &[usize]) -> (u64, u64) {
    cpus.iter()
        .filter_map(|&c| Some(b.get(c)?.delta(a.get(c)?)))
        .fold((0, 0), |(i, s), d| (i + d.idle, s + d.steal))
}

/// The share of the DUT CPUs' time (`wall_ns`: the window times the CPUs) that went to
/// anything but the device and idling, the hypervisor's steal taken out: other processes.
/// From the idle time, which a tickless kernel keeps exactly (/proc/stat's idle field comes
/// from the nohz idle clock, quantized to a tick: a percent of a 2 s trial), and the wall
/// clock -- not from the busy ticks, which are samples and alias with the tester's bursts (at
/// a steady load they read 15-44 % a second against 30-37 % of NAPI thread time,
/// docs/PERFORMANCE-LOG.md step 39), so that a quiet trial read as disturbed.
fn other_share(wall_ns: f64, idle_ns: f64, device_ns: f64, steal_ns: f64) -> f64 {
    ((wall_ns - idle_ns - device_ns - steal_ns) / wall_ns.max(1.0)).clamp(0.0, 1.0)
}

/// The device's CPU time in a trial, in ns: its processes' (`proc`) and its ports' NAPI
/// threads' (`napi`) run time, both in nanoseconds from schedstat; the DUT CPUs' softirq and
/// irq ticks (`softirq`) only when the device has no NAPI threads (softirq receive).
///
/// Not the ticks beside the threads: this kernel has no `CONFIG_IRQ_TIME_ACCOUNTING`, so
/// softirq work a threaded-NAPI kthread runs in its own context (`__local_bh_enable_ip` ->
/// `handle_softirqs`, the backlog and the forwarding behind it) is in the thread's run time
/// and in the CPU's softirq ticks both; until 2026-11-29 the lab added them and kernel NAT44
/// measured about twice its threads' time. Nor capped at the CPU's busy ticks: over a 1-2 s
/// trial those move 15-44 % from one second to the next at a steady load whose NAPI thread
/// time holds at 30-37 % (ticks alias with the tester's bursts), where schedstat is exact
/// (docs/PERFORMANCE-LOG.md step 39).
fn device_ns(proc: f64, napi: f64, softirq: f64, has_napi_threads: bool) -> f64 {
    if has_napi_threads {
        proc + napi
    } else {
        proc + softirq
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{build_frame, flows_6in4, flows_v4};

    /// A 6in4 frame's source names the outer address and the inner packet's source, not
    /// the inner header's first bytes as a port.
    #[test]
    fn source_of_a_6in4_frame_names_both_headers() {
        let f = flows_6in4(
            1,
            0,
            [0x20, 1, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2],
            [198, 18, 0, 1],
            crate::packet::Tunnel6in4::SixToFour,
        )[0];
        let mut b = vec![0u8; 256];
        let t = Tag {
            tag: 1,
            flow: 0,
            seq: 0,
            tx_ns: 0,
        };
        let n = build_frame(&mut b, 128, true, &[2; 6], &[4; 6], &f, t).unwrap();
        let src = src_of(&b[..n]);
        let (o, inner) = (
            std::net::Ipv4Addr::from(f.outer.unwrap().src),
            std::net::Ipv6Addr::from(f.src),
        );
        assert_eq!(src, format!("{o} in 6in4 [{inner}]:{}", f.sport));
        assert!(
            src.starts_with("198.18.1.1 in 6in4 [2002:c612:101::1]:"),
            "{src}"
        );
        // Cut inside the inner header: the outer address stays, the rest is empty.
        assert_eq!(src_of(&b[..14 + 20 + 20]), format!("{o} in 6in4 "));
    }

    #[test]
    fn other_load_is_what_neither_the_device_nor_idle_took() {
        // 2 s on one CPU: 1.2 s idle, 0.6 s the device, 0.1 s steal: 0.1 s of others, 5 %.
        let o = other_share(2e9, 1.2e9, 0.6e9, 0.1e9);
        assert!((o - 0.05).abs() < 1e-9, "{o}");
        // Counters read a little apart never make it negative or above the whole.
        assert_eq!(other_share(2e9, 1.5e9, 0.6e9, 0.0), 0.0);
        assert_eq!(other_share(0.0, 0.0, 0.0, 0.0), 0.0);
        assert_eq!(other_share(1e9, 0.0, 0.0, 0.0), 1.0);
    }

    #[test]
    fn softirq_inside_napi_threads_is_counted_once() {
        // Kernel NAT: the NAPI thread's 0.6 s of softirq work is in both counters: once.
        assert_eq!(device_ns(0.0, 0.6e9, 0.6e9, true), 0.6e9);
        // A daemon beside a NAPI thread: both count, the ticks do not.
        assert_eq!(device_ns(0.5e9, 0.3e9, 0.2e9, true), 0.8e9);
        // Softirq receive (no NAPI threads): the ticks are the kernel's work.
        assert_eq!(device_ns(0.1e9, 0.0, 0.3e9, false), 0.4e9);
    }

    fn frame(tag: u16, flow: u32, seq: u32, tx_ns: u64) -> Vec<u8> {
        let f = flows_v4(2, 0, [198, 19, 0, 2]);
        let mut b = vec![0u8; 128];
        let t = Tag {
            tag,
            flow,
            seq,
            tx_ns,
        };
        let n = build_frame(&mut b, 64, false, &[2; 6], &[4; 6], &f[flow as usize], t).unwrap();
        b.truncate(n);
        b
    }

    fn state() -> RxState {
        RxState {
            tag: 7,
            nflows: 2,
            seen: Vec::new(),
            last: vec![-1; 2],
            received: 0,
            dup: 0,
            reordered: 0,
            foreign: 0,
            bytes: 0,
            first_src: String::new(),
            hist: Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap(),
            groups: None,
        }
    }

    #[test]
    fn receiver_counts_duplicates_reordering_and_foreign_frames() {
        let mut st = state();
        // Flow 0 gets even sequence numbers, flow 1 odd ones, as the sender's round robin.
        for (flow, seq) in [(0, 0), (1, 1), (0, 4), (0, 2), (1, 3), (1, 3), (0, 6)] {
            st.on_frame(&frame(7, flow, seq, 1_000), 51_000);
        }
        assert_eq!(st.received, 6);
        assert_eq!(st.dup, 1);
        // seq 2 arrived after seq 4 in flow 0.
        assert_eq!(st.reordered, 1);
        assert_eq!(st.bytes, 6 * 64);
        assert_eq!(st.hist.len(), 6);
        assert_eq!(st.hist.max(), st.hist.highest_equivalent(50_000));
        assert!(st.first_src.starts_with("198.18.1.1:"));
        // Another trial's tag, an unknown flow, and garbage are foreign.
        st.on_frame(&frame(8, 0, 9, 0), 1);
        st.on_frame(&frame(7, 0, 9, 0)[..20], 1);
        let mut bad_flow = frame(7, 1, 11, 0);
        bad_flow[42 + 2..42 + 6].copy_from_slice(&5u32.to_be_bytes());
        st.on_frame(&bad_flow, 1);
        assert_eq!(st.foreign, 3);
        assert_eq!(st.received, 6);
    }

    #[test]
    fn receive_before_send_clamps_latency() {
        let mut st = state();
        st.on_frame(&frame(7, 0, 0, 5_000), 1_000);
        assert_eq!(st.received, 1);
        assert_eq!(st.hist.min(), 1);
    }

    #[test]
    fn source_of_frames() {
        let f = frame(7, 0, 0, 0);
        assert!(src_of(&f).starts_with("198.18.1.1:"));
        assert_eq!(src_of(&[0u8; 10]), "");
    }

    #[test]
    fn receive_counter_samples_about_16000_frames_a_second() {
        assert_eq!(sample_shift(Some(1_000.0)), 0);
        assert_eq!(sample_shift(Some(16_000.0)), 0);
        assert_eq!(sample_shift(Some(100_000.0)), 2); // 1 in 4: 25,000/s
        assert_eq!(sample_shift(Some(1_500_000.0)), 6); // 1 in 64: 23,400/s
        assert_eq!(sample_shift(None), 7); // unpaced: as if 3 Mpps
        assert_eq!(sample_shift(Some(1e9)), 8);
    }

    const US: Duration = Duration::from_micros(1);

    /// A wait in microseconds, to 0.01 us (the pacer's times come from floating point).
    fn wait_us(s: Step) -> f64 {
        match s {
            Step::Wait(w) => (w.as_secs_f64() * 1e8).round() / 100.0,
            Step::Send(n) => panic!("expected a wait, got Send({n})"),
        }
    }

    #[test]
    fn pacer_sends_what_is_due_at_the_rate() {
        let (ms, z) = (Duration::from_millis(1), Duration::ZERO);
        // 1 Mpps: at 100 us, 101 frames are due (the first at t = 0); batches of 64.
        let r = Some(1e6);
        // A smooth sender 1 ms behind at 1 Mpps moves its schedule on by all but CATCH_UP
        // frames, and then has CATCH_UP due; the default sends all of them.
        let behind = due_frames(ms, 1e6, 0, u64::MAX);
        let slip = slip_by(behind, true);
        assert_eq!(due_frames(ms, 1e6, slip, u64::MAX), CATCH_UP);
        assert_eq!(slip_by(behind, false), 0);
        assert_eq!(slip_by(CATCH_UP, true), 0);
        // The backlog the sender records as its burst: all that is due, not one batch of it.
        assert_eq!(due_frames(100 * US, 1e6, 0, u64::MAX), 101);
        assert_eq!(due_frames(100 * US, 1e6, 64, u64::MAX), 37);
        assert_eq!(due_frames(100 * US, 1e6, 0, 50), 50);
        assert_eq!(pace(100 * US, r, 0, u64::MAX, 64, z, z), Step::Send(64));
        assert_eq!(pace(100 * US, r, 64, u64::MAX, 64, z, z), Step::Send(37));
        // All due frames sent: wait until the next one is due (frame 101 at 101 us).
        assert_eq!(wait_us(pace(100 * US, r, 101, u64::MAX, 64, z, z)), 1.0);
        // The packet budget caps what is due.
        assert_eq!(pace(100 * US, r, 0, 10, 64, z, z), Step::Send(10));
        assert_eq!(wait_us(pace(100 * US, r, 10, 10, 64, z, z)), 0.0);
        // Unpaced: full batches until the budget is used up.
        assert_eq!(pace(ms, None, 0, u64::MAX, 64, ms, ms), Step::Send(64));
        assert_eq!(pace(ms, None, 100, 130, 64, ms, ms), Step::Send(30));
    }

    #[test]
    fn pacer_coalesces_below_a_batch() {
        let r = Some(100_000.0); // one frame every 10 us
        let hold = 200 * US;
        // 5 frames due 45 us after the last send: held until 200 us after it, or until a
        // full batch (64 frames: due at 1630 us) if that came first.
        let last = 1000 * US;
        let el = 1045 * US;
        let sent = 100; // frames 0..=104 are due at 1045 us
        assert_eq!(wait_us(pace(el, r, sent, u64::MAX, 64, last, hold)), 155.0);
        // After the hold they go.
        assert_eq!(
            pace(1205 * US, r, sent, u64::MAX, 64, last, hold),
            Step::Send(21)
        );
        // A fast rate fills a batch before the hold ends: wait only for that.
        let r = Some(1e6); // one frame per us
        assert_eq!(
            wait_us(pace(1010 * US, r, 1000, u64::MAX, 64, last, hold)),
            53.0
        );
        // No coalescing: every due frame leaves at once.
        assert_eq!(
            pace(
                el,
                Some(100_000.0),
                sent,
                u64::MAX,
                64,
                last,
                Duration::ZERO
            ),
            Step::Send(5)
        );
        // A budget smaller than a batch is not held for a batch that never comes.
        assert_eq!(
            pace(el, Some(100_000.0), sent, 105, 64, last, hold),
            Step::Send(5)
        );
    }

    #[test]
    fn pacer_rate_over_a_run_is_the_offered_rate() {
        // Simulate the loop with a clock that advances by what each step costs: the frames
        // sent by time t stay within a batch of rate x t, for slow and fast rates.
        for (rate, coalesce) in [(10_000.0, 200), (250_000.0, 200), (3e6, 200), (1e6, 0)] {
            let (mut el, mut sent, mut last) = (Duration::ZERO, 0u64, Duration::ZERO);
            let hold = Duration::from_micros(coalesce);
            let end = Duration::from_millis(100);
            while el < end {
                match pace(el, Some(rate), sent, u64::MAX, 64, last, hold) {
                    Step::Send(n) => {
                        sent += n as u64;
                        last = el;
                        el += Duration::from_nanos(200); // a send takes time
                    }
                    Step::Wait(w) => el += w.max(Duration::from_nanos(50)),
                }
                let ideal = el.as_secs_f64() * rate;
                assert!(
                    sent as f64 <= ideal + 1.0,
                    "{rate}: {sent} ahead of {ideal}"
                );
                let lag = hold.as_secs_f64() * rate + 64.0 + 1.0;
                assert!(sent as f64 >= ideal - lag, "{rate}: {sent} behind {ideal}");
            }
            let got = sent as f64 / el.as_secs_f64();
            assert!((got / rate - 1.0).abs() < 0.03, "{rate}: {got}");
        }
    }
}
