//! cpu: the DUT CPU at a fixed load by frame size and sessions (S5 table 4.4), and a device's
//! cost by difference ([`ByDifference`]) for devices whose work runs on the sender's CPU.

use super::*;

impl Lab {
    pub(super) fn cpu(&mut self) -> Result<()> {
        self.by_difference = true;
        let r = self.cpu_rows(Self::cpu_header(true));
        self.by_difference = false;
        r
    }

    /// The cpu table; `by_difference`: every device is also measured by difference.
    pub(super) fn cpu_header(by_difference: bool) -> Experiment {
        let also = if by_difference {
            " Also by difference, for every device: (tester CPU busy time + the device's DUT CPU \
             time) per packet, minus the tester's own busy time per packet sending the same frames \
             to itself (CA -> CD) at the same rate right after; for devices in veth's default \
             receive mode (-softirq) that difference is their DUT ns/pkt."
        } else {
            ""
        };
        Self::exp(
            "cpu",
            "DUT CPU at a fixed load",
            Some("sessions"),
            format!("{CPU_ABOUT} S5 table 4.4.{also}"),
        )
    }

    /// cpu from the tester's outside port to its inside port: what `cpu` cannot send, the
    /// return direction of the stateless devices (the tunnel endpoints' encapsulation); the
    /// devices were checked to have such flows when the options were resolved.
    /// Run by [`Lab::receiving_inside`].
    pub(super) fn cpu_return(&mut self) -> Result<()> {
        self.from_outside = true;
        let r = self.cpu_rows(Self::exp(
            "cpu-return",
            "DUT CPU at a fixed load, outside to inside",
            Some("sessions"),
            format!(
                "{CPU_ABOUT} The tester sends on its outside port and receives on its inside port: \
                 native IPv6 from 2001:2:0:2::/64 to the inside, which forward6 routes and the 6to4 \
                 and ISATAP endpoints encapsulate in IPv4 protocol 41 to 198.18.0.2 (RFC 4213 3.5). \
                 The inside port receives in threaded NAPI on the tester's CPUs for this experiment, as \
                 the outside port always does, so no receive work of the tester's runs on the DUT CPU."
            ),
        ));
        self.from_outside = false;
        r
    }

    pub(super) fn cpu_rows(&mut self, e: Experiment) -> Result<()> {
        let sessions = self.opts.sessions.clone();
        for d in self.opts.devices.clone() {
            for s in self.opts.sizes.clone() {
                let rows = self.with_device(&d, |lab, dev| {
                    let rate = lab.fixed_rate(&s, dev.v6_in())?;
                    let mut out = Vec::new();
                    for &n in &sessions {
                        let fl = if lab.from_outside {
                            dev.return_flows(n.max(1), 0)
                                .context("no return-direction flows")?
                        } else {
                            dev.flows(n.max(1), 0)
                        };
                        let fl = Arc::new(fl);
                        lab.warm(dev, fl.clone(), &s)?;
                        out.extend(lab.load_rows(dev, &s, fl, &[(f64::from(n), rate)], false)?);
                    }
                    Ok(out)
                })?;
                self.add(&e, rows);
            }
        }
        self.push(e);
        Ok(())
    }
}

/// What cpu and cpu-return measure.
const CPU_ABOUT: &str =
    "A fixed offered load (--rate, default 20,000 pps) for each frame size and \
     number of sessions: DUT core busy share (and its softirq part), busy nanoseconds per \
     forwarded packet, and the device processes' own CPU time per packet.";

/// A device's CPU cost by difference: the tester's CPU time (its sender and receiver threads,
/// its ports' NAPI threads, its CPU's ksoftirqd) plus the device's time on the DUT CPU, per
/// packet, minus the tester's own time per packet when it sends the same frames at the same
/// rate to itself. It counts the device's work wherever it ran -- on the
/// sender's CPU in veth's default receive mode -- and also what sending into a device costs
/// the tester beyond sending to itself (for threaded NAPI: waking the other CPU).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ByDifference {
    /// Tester CPU busy ns per packet plus the device's DUT CPU ns per packet.
    pub cores_ns: f64,
    /// The tester's own busy ns per packet, sending to itself.
    pub tester_alone_ns: f64,
    /// cores_ns - tester_alone_ns.
    pub device_ns: f64,
    /// device_ns as a share of one CPU at the device trial's receive rate.
    pub device_busy: f64,
}

impl ByDifference {
    pub fn of(device: &Trial, alone: &Trial) -> ByDifference {
        // The tester's own threads; runs from before tester_ns_per_pkt existed: its CPU's
        // busy share (which counts other processes too).
        let tester_ns = |t: &Trial| {
            if t.cpu.tester_ns_per_pkt > 0.0 {
                t.cpu.tester_ns_per_pkt
            } else {
                t.cpu.tester_busy * t.send_secs * 1e9 / t.received.max(1) as f64
            }
        };
        let cores_ns = tester_ns(device) + device.cpu.dut_ns_per_pkt;
        let tester_alone_ns = tester_ns(alone);
        let device_ns = cores_ns - tester_alone_ns;
        ByDifference {
            cores_ns,
            tester_alone_ns,
            device_ns,
            device_busy: (device_ns * device.received as f64 / (device.send_secs.max(1e-9) * 1e9))
                .max(0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tester::CpuUse;

    fn trial(received: u64, send_secs: f64, tester_busy: f64, dut_ns: f64) -> Trial {
        Trial {
            received,
            send_secs,
            cpu: CpuUse {
                tester_busy,
                dut_ns_per_pkt: dut_ns,
                ..CpuUse::default()
            },
            ..Trial::default()
        }
    }

    #[test]
    fn cost_by_difference() {
        // Softirq mode: 100,000 packets in 1 s, the tester CPU 60% busy and nothing on the
        // DUT CPU; the tester alone at the same rate was 25% busy. The device: 3.5 us per
        // packet, 35% of a CPU. (Results without the tester's own thread times.)
        let d = ByDifference::of(
            &trial(100_000, 1.0, 0.60, 0.0),
            &trial(100_000, 1.0, 0.25, 0.0),
        );
        assert!((d.cores_ns - 6000.0).abs() < 1e-6);
        assert!((d.tester_alone_ns - 2500.0).abs() < 1e-6);
        assert!((d.device_ns - 3500.0).abs() < 1e-6);
        assert!((d.device_busy - 0.35).abs() < 1e-9);
        // Threaded NAPI: the device's own time on the DUT CPU counts in full, and what the
        // tester paid beyond sending to itself is added (here 500 ns).
        let d = ByDifference::of(
            &trial(200_000, 2.0, 0.30, 2000.0),
            &trial(200_000, 2.0, 0.25, 0.0),
        );
        assert!((d.device_ns - 2500.0).abs() < 1e-6);
        // Nothing received: no division by zero, and a negative share is not reported.
        let d = ByDifference::of(&trial(0, 1.0, 0.1, 0.0), &trial(10, 1.0, 0.5, 0.0));
        assert!(d.device_ns.is_finite());
        assert_eq!(d.device_busy, 0.0);
        // The tester's own thread times win over its CPU's busy share (other processes).
        let mut dev = trial(100_000, 1.0, 1.0, 0.0);
        dev.cpu.tester_ns_per_pkt = 6000.0;
        let mut alone = trial(100_000, 1.0, 1.0, 0.0);
        alone.cpu.tester_ns_per_pkt = 2500.0;
        assert!((ByDifference::of(&dev, &alone).device_ns - 3500.0).abs() < 1e-6);
    }
}
