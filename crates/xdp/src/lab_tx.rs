//! The lab tester's NIC-like ingress: loads `bpf/lab_tx.bpf.c` on the far end of an injection
//! veth pair so that every frame sent into the pair leaves through the tester's port facing the
//! DUT as an XDP frame (redirected), which veth hands to the DUT without the copy it makes of an
//! AF_PACKET skb before XDP (see the C source). Dropping the [`LabTx`] detaches the program.

use anyhow::{bail, Context, Result};
use aya::maps::DevMap;
use aya::programs::{Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};

/// The compiled program (empty when clang was missing at build time).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lab_tx.o"));

/// The program attached to one injection port.
pub struct LabTx {
    _bpf: Ebpf,
}

/// True when this binary carries the injector.
pub fn built() -> bool {
    !OBJECT.is_empty()
}

impl LabTx {
    /// Attaches to `dev` in the calling thread's network namespace, redirecting every frame
    /// that arrives there out of the interface `to_ifindex` (same namespace).
    pub fn attach(dev: &str, to_ifindex: u32) -> Result<LabTx> {
        if !built() {
            bail!("this xlat was built without the lab's XDP injector (clang-14 was missing)");
        }
        let mut bpf = EbpfLoader::new()
            .load(OBJECT)
            .context("loading the lab's XDP injector")?;
        let mut out: DevMap<_> = bpf
            .map_mut("out")
            .context("no `out` map")?
            .try_into()
            .context("the `out` map")?;
        out.set(0, to_ifindex, None, 0)
            .context("setting the injector's egress")?;
        let prog: &mut Xdp = bpf
            .program_mut("lab_tx")
            .context("the object has no lab_tx program")?
            .try_into()
            .context("lab_tx is not an XDP program")?;
        prog.load()
            .context("the kernel refused the lab's injector (verifier)")?;
        prog.attach(dev, XdpMode::Default)
            .with_context(|| format!("attaching the injector to {dev}"))?;
        Ok(LabTx { _bpf: bpf })
    }
}
