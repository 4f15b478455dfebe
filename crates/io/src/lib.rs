//! xlat drivers: everything that moves packets between the operating system and the engine.
//!
//! - [`tun`]: a Linux TUN device (`/dev/net/tun`, `IFF_TUN | IFF_NO_PI`), non-blocking, with a
//!   batched receive helper; several queues (`IFF_MULTI_QUEUE`) for several workers.
//! - [`pcap`]: reading captures into `(timestamp_ns, bytes)` records and writing raw-IP captures,
//!   for offline translation (`xlat translate`) and golden vectors.
//! - [`ring`]: the lock-free single-producer single-consumer packet rings between packet
//!   workers, and the doorbell that wakes a sleeping worker.
//! - [`sys`]: the few other system calls the daemon needs (poll, an eventfd waker, stop signals).
//!
//! Most of xlat's `unsafe` code is here (system calls on devices, the rings' shared slots);
//! the rest is in `xlat-xdp` (BPF maps and programs), `xlat-lab` (AF_PACKET rings, namespaces,
//! signals) and the engine's `mem.rs` (large zeroed mappings and fixed-capacity tables). The
//! wire, DNS64, daemon and CLI crates have none. Every block says why it is sound.

pub mod pcap;
pub mod ring;
pub mod sys;
pub mod tun;
