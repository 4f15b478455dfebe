//! The lab tester's receive counter: loads `bpf/lab_rx.bpf.c` onto a tester port for one
//! trial. The program counts the trial's distinct test frames (a sequence-number bitmap, so
//! duplicates stay duplicates) and drops them at the port's front door, passing one in
//! 2^`sample_shift` on to the kernel and the tester's packet ring for latency. Dropping the
//! [`LabRx`] detaches the program.

use anyhow::{bail, Context, Result};
use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::{Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader, Pod};

/// The compiled program (empty when clang was missing at build time).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lab_rx.o"));

/// The largest bitmap (sequence numbers tracked for duplicates): 2^30, as the ring receiver.
const MAX_BITS: u64 = 1 << 30;

/// `struct config` of the C program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Config {
    tag: u16,
    pad: u16,
    nflows: u32,
    sample_mask: u32,
    nbits: u32,
}

// SAFETY: plain integers, no implicit padding (16 bytes).
unsafe impl Pod for Config {}
const _: () = assert!(std::mem::size_of::<Config>() == 16);

/// What the program counted (summed over CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LabRxCounts {
    /// Distinct frames of the trial.
    pub received: u64,
    /// Their bytes, 4 bytes of FCS per frame included.
    pub bytes: u64,
    pub duplicates: u64,
    /// Frames passed on to the kernel (the latency sample).
    pub sampled: u64,
}

/// The program attached to one port for one trial.
pub struct LabRx {
    counters: PerCpuArray<MapData, u64>,
    // Owns the program and its link: declared last so the maps go first.
    _bpf: Ebpf,
}

/// True when this binary carries the receive counter.
pub fn built() -> bool {
    !OBJECT.is_empty()
}

impl LabRx {
    /// Attaches to `dev` in the calling thread's network namespace: frames tagged `tag` with a
    /// flow index below `nflows` are counted; sequence numbers below `max_seq` (at most 2^30)
    /// are checked for duplicates.
    pub fn attach(
        dev: &str,
        tag: u16,
        nflows: u32,
        sample_shift: u32,
        max_seq: u64,
    ) -> Result<LabRx> {
        if !built() {
            bail!(
                "this xlat was built without the lab's XDP receive counter (clang-14 was missing)"
            );
        }
        let nbits = max_seq.clamp(64, MAX_BITS);
        let words = u32::try_from(nbits.div_ceil(64)).context("bitmap size")?;
        let mut bpf = EbpfLoader::new()
            .map_max_entries("seen", words)
            .load(OBJECT)
            .context("loading the lab's XDP receive counter")?;
        let mut config: Array<MapData, Config> = bpf
            .take_map("config")
            .context("no `config` map")?
            .try_into()
            .context("the `config` map")?;
        let cfg = Config {
            tag,
            pad: 0,
            nflows,
            sample_mask: (1u32 << sample_shift.min(31)) - 1,
            nbits: u32::try_from(nbits).context("bitmap size")?,
        };
        config
            .set(0, cfg, 0)
            .context("writing the receive counter's config")?;
        let counters = bpf
            .take_map("counters")
            .context("no `counters` map")?
            .try_into()
            .context("the `counters` map")?;
        let prog: &mut Xdp = bpf
            .program_mut("lab_rx")
            .context("the object has no lab_rx program")?
            .try_into()
            .context("lab_rx is not an XDP program")?;
        prog.load()
            .context("the kernel refused the lab's receive counter (verifier)")?;
        prog.attach(dev, XdpMode::Default)
            .with_context(|| format!("attaching the receive counter to {dev}"))?;
        Ok(LabRx {
            counters,
            _bpf: bpf,
        })
    }

    /// The counts so far.
    pub fn counts(&self) -> LabRxCounts {
        let get = |i: u32| -> u64 {
            self.counters
                .get(&i, 0)
                .map(|v| v.iter().sum())
                .unwrap_or(0)
        };
        LabRxCounts {
            received: get(0),
            bytes: get(1),
            duplicates: get(2),
            sampled: get(3),
        }
    }
}
