//! Offline translation (`xlat translate`): a capture in, the translated capture out, with the
//! same engine code as the gateway.
//!
//! Each packet is given to the engine with `now` = its capture timestamp (held monotonic: a
//! timestamp earlier than the previous one counts as the previous one), and idle sessions are
//! expired every 100 ms of capture time, as the daemon does in real time. Translated packets,
//! and packets the engine releases afterwards ([`Engine::pop_ready`]), are written with the
//! timestamp of the packet that produced them. The output is link type RAW with the input's
//! timestamp resolution. With a fixed seed the output is identical on every run.

use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use xlat_engine::{ConfigError, Engine, EngineConfig, Stats, Time};
use xlat_io::pcap::{PcapError, PcapIn, PcapOut};

use crate::run::{EXPIRE_BUDGET, TICK};

/// Packet counts of the capture files (the engine does not see skipped frames).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcapCounters {
    /// IP packets read from the input and given to the engine.
    pub packets_read: u64,
    /// Packets written to the output.
    pub packets_written: u64,
    /// Ethernet frames in the input that carried neither IPv4 nor IPv6 (ARP, ...), not
    /// translated.
    pub frames_skipped: u64,
}

/// What `xlat translate --json` prints: the engine's [`Stats`] fields, plus `pcap`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranslateStats {
    #[serde(flatten)]
    pub engine: Stats,
    pub pcap: PcapCounters,
}

/// Why a translation run failed.
#[derive(Debug, thiserror::Error)]
pub enum TranslateError {
    #[error("engine configuration: {0}")]
    Config(ConfigError),
    #[error(transparent)]
    Pcap(#[from] PcapError),
}

/// Translates the capture `input` into `output`.
pub fn translate(
    cfg: EngineConfig,
    input: &Path,
    output: &Path,
) -> Result<TranslateStats, TranslateError> {
    let engine = Engine::new(cfg).map_err(TranslateError::Config)?;
    let reader = PcapIn::open(input)?;
    let writer = PcapOut::create(output, reader.resolution())?;
    translate_stream(engine, reader, writer).map(|(s, _)| s)
}

/// Translates from any pcap reader to any pcap writer; returns the stats and the writer.
pub fn translate_stream<R: Read, W: Write>(
    mut engine: Engine,
    mut reader: PcapIn<R>,
    mut writer: PcapOut<W>,
) -> Result<(TranslateStats, W), TranslateError> {
    let mut counters = PcapCounters::default();
    let mut now = Time(0);
    let mut last_expire: Option<Time> = None;
    while let Some(mut rec) = reader.next_record()? {
        counters.packets_read += 1;
        now = now.max(Time::from_nanos(rec.ts_ns));
        match last_expire {
            None => last_expire = Some(now),
            Some(t) if now.0.saturating_sub(t.0) >= TICK.as_nanos() as u64 => {
                engine.expire(now, EXPIRE_BUDGET);
                last_expire = Some(now);
            }
            Some(_) => {}
        }
        if engine.process_vec(now, &mut rec.data).transmit() {
            writer.write(rec.ts_ns, &rec.data)?;
            counters.packets_written += 1;
        }
        while let Some(p) = engine.pop_ready() {
            writer.write(rec.ts_ns, &p)?;
            counters.packets_written += 1;
        }
    }
    counters.frames_skipped = reader.skipped();
    let stats = engine.stats();
    let w = writer.finish()?;
    Ok((
        TranslateStats {
            engine: stats,
            pcap: counters,
        },
        w,
    ))
}

/// A test IPv4/UDP packet: header checksum computed, UDP checksum 0 (none, RFC 768).
#[cfg(test)]
pub(crate) fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let mut p = vec![0u8; 28];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&28u16.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    let mut sum = 0u32;
    for c in p[..20].chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&8u16.to_be_bytes());
    // UDP checksum 0: none (RFC 768).
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use xlat_engine::Nat44Config;
    use xlat_io::pcap::{Record, Resolution};

    fn config() -> EngineConfig {
        EngineConfig {
            nat44: Some(Nat44Config {
                inside: vec!["198.18.0.0/24"
                    .parse()
                    .unwrap_or(xlat_engine::Prefix4 { addr: 0, len: 0 })],
                pool: vec!["198.19.0.100/32"
                    .parse()
                    .unwrap_or(xlat_engine::Prefix4 { addr: 0, len: 0 })],
                ..Nat44Config::default()
            }),
            seed: 0,
            ..EngineConfig::default()
        }
    }

    fn capture(recs: &[Record]) -> Result<Vec<u8>, PcapError> {
        let mut w = PcapOut::new(Vec::new(), "in", Resolution::Nano)?;
        for r in recs {
            w.write(r.ts_ns, &r.data)?;
        }
        w.finish()
    }

    fn run(recs: &[Record]) -> Result<(TranslateStats, Vec<Record>), Box<dyn std::error::Error>> {
        let input = capture(recs)?;
        let engine = Engine::new(config())?;
        let reader = PcapIn::new(&input[..], "in")?;
        let writer = PcapOut::new(Vec::new(), "out", reader.resolution())?;
        let (stats, out) = translate_stream(engine, reader, writer)?;
        let back = PcapIn::new(&out[..], "out")?.collect::<Result<Vec<_>, _>>()?;
        Ok((stats, back))
    }

    #[test]
    fn outbound_udp_is_translated_and_keeps_its_timestamp() -> Result<(), Box<dyn std::error::Error>>
    {
        let recs = vec![
            Record {
                ts_ns: 1_000_000_007,
                data: udp([198, 18, 0, 10], [203, 0, 113, 5], 5000, 53),
            },
            // Not ours: dropped.
            Record {
                ts_ns: 2_000_000_000,
                data: udp([192, 0, 2, 1], [203, 0, 113, 5], 5000, 53),
            },
        ];
        let (stats, out) = run(&recs)?;
        assert_eq!(stats.pcap.packets_read, 2);
        assert_eq!(stats.pcap.packets_written, 1);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].ts_ns, 1_000_000_007);
        assert_eq!(out[0].data[12..16], [198, 19, 0, 100]);
        assert_eq!(stats.engine.get("not_ours"), 1);
        assert_eq!(stats.engine.get("packets_in"), 2);
        // Same input, same output.
        let (_, again) = run(&recs)?;
        assert_eq!(again, out);
        Ok(())
    }

    #[test]
    fn json_is_stats_plus_pcap() -> Result<(), Box<dyn std::error::Error>> {
        let (stats, _) = run(&[])?;
        let v = serde_json::to_value(&stats)?;
        assert!(v.get("sessions").is_some());
        assert!(v.get("drops").is_some());
        assert_eq!(v["pcap"]["packets_read"], 0);
        let plain: Stats = serde_json::from_value(v)?;
        assert_eq!(plain, stats.engine);
        Ok(())
    }
}
