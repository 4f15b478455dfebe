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
//! This is the only xlat crate with `unsafe` code; every block says why it is sound.

pub mod pcap;
pub mod ring;
pub mod sys;
pub mod tun;
