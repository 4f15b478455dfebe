//! pcap capture files in and out, for offline translation (`xlat translate`) and golden vectors.
//!
//! [`PcapIn`] reads a classic pcap file (either byte order, micro- or nanosecond timestamps)
//! into [`Record`]s of `(timestamp_ns, IP packet bytes)`. Link types: RAW (101, and the
//! platform DLT_RAW values 12 and 14; IPv4 and IPv6), IPV4 (228), IPV6 (229), and ETHERNET
//! (1), whose 14-byte header (18 with one 802.1Q tag) is stripped when the EtherType is IPv4
//! (0x0800) or IPv6 (0x86DD); other Ethernet frames (ARP, ...) are skipped and counted
//! ([`PcapIn::skipped`]), and Ethernet padding after the IP packet's length is trimmed.
//! [`PcapOut`] writes link type RAW (101), which carries IPv4 and IPv6 alike.
//! pcapng is not supported (convert with `editcap -F pcap`).

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};

/// LINKTYPE_RAW: each record is an IPv4 or IPv6 packet.
pub const LINKTYPE_RAW: u32 = 101;
/// LINKTYPE_IPV4: each record is an IPv4 packet.
pub const LINKTYPE_IPV4: u32 = 228;
/// LINKTYPE_IPV6: each record is an IPv6 packet.
pub const LINKTYPE_IPV6: u32 = 229;
/// LINKTYPE_ETHERNET: each record is an Ethernet II frame.
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Snap length written into output headers (larger than any IP packet).
const SNAPLEN: u32 = 262_144;

/// One captured packet: when, and its IP bytes (link header removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Capture time in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    pub data: Vec<u8>,
}

/// Timestamp precision of a pcap file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    Micro,
    Nano,
}

impl From<TsResolution> for Resolution {
    fn from(r: TsResolution) -> Self {
        match r {
            TsResolution::MicroSecond => Resolution::Micro,
            TsResolution::NanoSecond => Resolution::Nano,
        }
    }
}

impl From<Resolution> for TsResolution {
    fn from(r: Resolution) -> Self {
        match r {
            Resolution::Micro => TsResolution::MicroSecond,
            Resolution::Nano => TsResolution::NanoSecond,
        }
    }
}

/// A capture that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("{path}: {error}")]
    Io { path: String, error: io::Error },
    #[error("{path}: not a pcap file: {detail}")]
    Format { path: String, detail: String },
    #[error(
        "{path}: link type {link} is not supported; expected RAW (101), IPV4 (228), IPV6 (229) or ETHERNET (1)"
    )]
    LinkType { path: String, link: u32 },
    #[error("{path}: record {index}: {detail}")]
    Record {
        path: String,
        index: u64,
        detail: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    Ip,
    Ethernet,
}

/// Reads IP packets from a pcap file.
pub struct PcapIn<R: Read = BufReader<File>> {
    reader: PcapReader<R>,
    path: String,
    link: Link,
    resolution: Resolution,
    index: u64,
    skipped: u64,
}

impl PcapIn<BufReader<File>> {
    /// Opens `path` and reads its file header.
    pub fn open(path: &Path) -> Result<Self, PcapError> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|source| PcapError::Io {
            path: name.clone(),
            error: source,
        })?;
        PcapIn::new(BufReader::new(file), &name)
    }
}

impl<R: Read> PcapIn<R> {
    /// Reads the file header from `reader`; `name` labels errors.
    pub fn new(reader: R, name: &str) -> Result<Self, PcapError> {
        let reader = PcapReader::new(reader).map_err(|e| format_error(name, e))?;
        let header = reader.header();
        let link = match u32::from(header.datalink) {
            LINKTYPE_RAW | LINKTYPE_IPV4 | LINKTYPE_IPV6 | 12 | 14 => Link::Ip,
            LINKTYPE_ETHERNET => Link::Ethernet,
            link => {
                return Err(PcapError::LinkType {
                    path: name.to_string(),
                    link,
                })
            }
        };
        Ok(PcapIn {
            reader,
            path: name.to_string(),
            link,
            resolution: header.ts_resolution.into(),
            index: 0,
            skipped: 0,
        })
    }

    /// Timestamp resolution of the file (write the output with the same to keep timestamps).
    pub fn resolution(&self) -> Resolution {
        self.resolution
    }

    /// Ethernet frames skipped so far because they carry neither IPv4 nor IPv6.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The next IP packet, `Ok(None)` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record>, PcapError> {
        loop {
            let Some(raw) = self.reader.next_raw_packet() else {
                return Ok(None);
            };
            let index = self.index;
            self.index += 1;
            let raw = raw.map_err(|e| PcapError::Record {
                path: self.path.clone(),
                index,
                detail: match e {
                    pcap_file::PcapError::IncompleteBuffer => {
                        "the file ends inside this record (truncated capture)".to_string()
                    }
                    e => e.to_string(),
                },
            })?;
            let frac_ns = match self.resolution {
                Resolution::Micro => u64::from(raw.ts_frac).saturating_mul(1000),
                Resolution::Nano => u64::from(raw.ts_frac),
            };
            let ts_ns = u64::from(raw.ts_sec)
                .saturating_mul(1_000_000_000)
                .saturating_add(frac_ns);
            let data = match self.link {
                Link::Ip => raw.data.into_owned(),
                Link::Ethernet => match ip_in_ethernet(&raw.data) {
                    Some(ip) => ip.to_vec(),
                    None => {
                        self.skipped += 1;
                        continue;
                    }
                },
            };
            return Ok(Some(Record { ts_ns, data }));
        }
    }
}

impl<R: Read> Iterator for PcapIn<R> {
    type Item = Result<Record, PcapError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// The IPv4 or IPv6 packet inside an Ethernet II frame (one optional 802.1Q tag), without
/// padding.
fn ip_in_ethernet(frame: &[u8]) -> Option<&[u8]> {
    let ethertype = |at: usize| -> Option<u16> {
        match frame.get(at..at + 2)? {
            &[hi, lo] => Some(u16::from_be_bytes([hi, lo])),
            _ => None,
        }
    };
    let is_ip = |t: u16| t == 0x0800 || t == 0x86dd;
    let start = match ethertype(12)? {
        t if is_ip(t) => 14,
        0x8100 if is_ip(ethertype(16)?) => 18,
        _ => return None,
    };
    let ip = frame.get(start..)?;
    let be16 = |at: usize| match ip.get(at..at + 2) {
        Some(&[hi, lo]) => Some(usize::from(u16::from_be_bytes([hi, lo]))),
        _ => None,
    };
    // Trim Ethernet padding: keep the IP packet's length when it is sane and fits (IPv4 total
    // length; IPv6 header plus payload length).
    let total = match ip.first().map(|b| b >> 4) {
        Some(4) => be16(2).filter(|&t| t >= 20),
        Some(6) => be16(4).map(|p| 40 + p),
        _ => None,
    };
    match total {
        Some(t) if t <= ip.len() => ip.get(..t),
        _ => Some(ip),
    }
}

fn format_error(path: &str, e: pcap_file::PcapError) -> PcapError {
    match e {
        pcap_file::PcapError::IoError(source) => PcapError::Io {
            path: path.to_string(),
            error: source,
        },
        pcap_file::PcapError::IncompleteBuffer => PcapError::Format {
            path: path.to_string(),
            detail: "shorter than the 24-byte file header".to_string(),
        },
        pcap_file::PcapError::InvalidField(f) if f.contains("magic") => PcapError::Format {
            path: path.to_string(),
            detail: "unknown magic number (pcapng is not supported: convert with `editcap -F pcap IN OUT`)".to_string(),
        },
        e => PcapError::Format {
            path: path.to_string(),
            detail: e.to_string(),
        },
    }
}

/// Reads every IP packet of a capture.
pub fn read_file(path: &Path) -> Result<Vec<Record>, PcapError> {
    PcapIn::open(path)?.collect()
}

/// Writes IP packets to a pcap file with link type RAW (101).
pub struct PcapOut<W: Write = BufWriter<File>> {
    writer: Option<PcapWriter<W>>,
    path: String,
    index: u64,
}

impl PcapOut<BufWriter<File>> {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path, resolution: Resolution) -> Result<Self, PcapError> {
        let name = path.display().to_string();
        let file = File::create(path).map_err(|source| PcapError::Io {
            path: name.clone(),
            error: source,
        })?;
        PcapOut::new(BufWriter::new(file), &name, resolution)
    }
}

impl<W: Write> PcapOut<W> {
    /// Writes the file header to `writer`; `name` labels errors.
    pub fn new(writer: W, name: &str, resolution: Resolution) -> Result<Self, PcapError> {
        let header = PcapHeader {
            snaplen: SNAPLEN,
            datalink: DataLink::RAW,
            ts_resolution: resolution.into(),
            endianness: Endianness::Little,
            ..PcapHeader::default()
        };
        let writer = PcapWriter::with_header(writer, header).map_err(|e| write_error(name, e))?;
        Ok(PcapOut {
            writer: Some(writer),
            path: name.to_string(),
            index: 0,
        })
    }

    /// Appends one packet captured at `ts_ns` (nanoseconds since the Unix epoch).
    pub fn write(&mut self, ts_ns: u64, data: &[u8]) -> Result<(), PcapError> {
        let index = self.index;
        self.index += 1;
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let pkt = PcapPacket {
            timestamp: Duration::from_nanos(ts_ns),
            orig_len: len,
            data: Cow::Borrowed(data),
        };
        let Some(w) = self.writer.as_mut() else {
            return Err(PcapError::Record {
                path: self.path.clone(),
                index,
                detail: "written after finish".to_string(),
            });
        };
        w.write_packet(&pkt).map_err(|e| match e {
            pcap_file::PcapError::IoError(source) => PcapError::Io {
                path: self.path.clone(),
                error: source,
            },
            e => PcapError::Record {
                path: self.path.clone(),
                index,
                detail: e.to_string(),
            },
        })?;
        Ok(())
    }

    /// Packets written so far.
    pub fn written(&self) -> u64 {
        self.index
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> Result<W, PcapError> {
        let Some(w) = self.writer.take() else {
            return Err(PcapError::Format {
                path: self.path.clone(),
                detail: "finished twice".to_string(),
            });
        };
        let mut inner = w.into_writer();
        inner.flush().map_err(|source| PcapError::Io {
            path: self.path.clone(),
            error: source,
        })?;
        Ok(inner)
    }
}

fn write_error(path: &str, e: pcap_file::PcapError) -> PcapError {
    match e {
        pcap_file::PcapError::IoError(source) => PcapError::Io {
            path: path.to_string(),
            error: source,
        },
        e => PcapError::Format {
            path: path.to_string(),
            detail: e.to_string(),
        },
    }
}

/// Writes `records` to `path` (link type RAW).
pub fn write_file(
    path: &Path,
    records: &[Record],
    resolution: Resolution,
) -> Result<(), PcapError> {
    let mut out = PcapOut::create(path, resolution)?;
    for r in records {
        out.write(r.ts_ns, &r.data)?;
    }
    out.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(total: u16) -> Vec<u8> {
        let mut p = vec![0u8; usize::from(total)];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[9] = 17;
        p
    }

    #[test]
    fn round_trip_raw_nanoseconds() -> Result<(), PcapError> {
        let recs = vec![
            Record {
                ts_ns: 1_700_000_000_123_456_789,
                data: ipv4(28),
            },
            Record {
                ts_ns: 1_700_000_001_000_000_001,
                data: ipv4(1500),
            },
        ];
        let mut out = PcapOut::new(Vec::new(), "mem", Resolution::Nano)?;
        for r in &recs {
            out.write(r.ts_ns, &r.data)?;
        }
        assert_eq!(out.written(), 2);
        let bytes = out.finish()?;
        // Link type RAW in the file header.
        assert_eq!(bytes[20..24], 101u32.to_le_bytes());
        let back: Vec<Record> = PcapIn::new(&bytes[..], "mem")?.collect::<Result<_, _>>()?;
        assert_eq!(back, recs);
        Ok(())
    }

    #[test]
    fn round_trip_file_microseconds() -> Result<(), PcapError> {
        let dir = std::env::temp_dir().join(format!("xlat-io-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| PcapError::Io {
            path: dir.display().to_string(),
            error: source,
        })?;
        let path = dir.join("rt.pcap");
        let recs = vec![Record {
            ts_ns: 5_000_123_000,
            data: ipv4(40),
        }];
        write_file(&path, &recs, Resolution::Micro)?;
        let mut input = PcapIn::open(&path)?;
        assert_eq!(input.resolution(), Resolution::Micro);
        let back: Vec<Record> = input.by_ref().collect::<Result<_, _>>()?;
        assert_eq!(back, recs);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    #[test]
    fn ethernet_frames_are_stripped_and_filtered() -> Result<(), PcapError> {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            endianness: Endianness::Big,
            ..PcapHeader::default()
        };
        let mut w =
            PcapWriter::with_header(Vec::new(), header).map_err(|e| write_error("mem", e))?;
        let ip = ipv4(28);
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&ip);
        eth.extend_from_slice(&[0u8; 18]); // padding to 60 bytes
        let mut vlan = vec![0u8; 12];
        vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
        vlan.extend_from_slice(&ip);
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        let mut v6 = vec![0x60, 0, 0, 0, 0, 4, 59, 64];
        v6.extend_from_slice(&[0u8; 32]);
        v6.extend_from_slice(&[1, 2, 3, 4]);
        let mut eth6 = vec![0u8; 12];
        eth6.extend_from_slice(&[0x86, 0xdd]);
        eth6.extend_from_slice(&v6);
        eth6.extend_from_slice(&[0u8; 14]); // padding
        for (i, f) in [eth, arp, vlan, eth6].iter().enumerate() {
            let p = PcapPacket::new(Duration::from_micros(i as u64), f.len() as u32, f);
            w.write_packet(&p).map_err(|e| write_error("mem", e))?;
        }
        let bytes = w.into_writer();
        let mut input = PcapIn::new(&bytes[..], "mem")?;
        let back: Vec<Record> = input.by_ref().collect::<Result<_, _>>()?;
        assert_eq!(back.len(), 3);
        assert_eq!(back[0].data, ip);
        assert_eq!(back[1].data, ip);
        assert_eq!(back[2].data, v6);
        assert_eq!(back[1].ts_ns, 2000);
        assert_eq!(input.skipped(), 1);
        Ok(())
    }

    #[test]
    fn ipv6_link_type_is_read() -> Result<(), PcapError> {
        let header = PcapHeader {
            datalink: DataLink::IPV6,
            ..PcapHeader::default()
        };
        let mut w =
            PcapWriter::with_header(Vec::new(), header).map_err(|e| write_error("mem", e))?;
        let mut v6 = vec![0x60, 0, 0, 0, 0, 0, 59, 64];
        v6.extend_from_slice(&[0u8; 32]);
        let p = PcapPacket::new(Duration::from_micros(1), v6.len() as u32, &v6);
        w.write_packet(&p).map_err(|e| write_error("mem", e))?;
        let bytes = w.into_writer();
        let back: Vec<Record> = PcapIn::new(&bytes[..], "mem")?.collect::<Result<_, _>>()?;
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].data, v6);
        Ok(())
    }

    #[test]
    fn bad_files_are_named() {
        let e = PcapIn::new(&b"\x0a\x0d\x0d\x0a0123456789abcdefghijklmn"[..], "x.pcapng")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("x.pcapng: not a pcap file"), "{e}");
        assert!(e.contains("pcapng"), "{e}");

        let header = PcapHeader {
            datalink: DataLink::from(113),
            ..PcapHeader::default()
        };
        let mut buf = Vec::new();
        let _ = header.write_to(&mut buf);
        let e = PcapIn::new(&buf[..], "sll.pcap")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("link type 113 is not supported"), "{e}");
    }

    #[test]
    fn truncated_record_is_an_error() -> Result<(), PcapError> {
        let mut out = PcapOut::new(Vec::new(), "mem", Resolution::Micro)?;
        out.write(0, &ipv4(40))?;
        let mut bytes = out.finish()?;
        bytes.truncate(bytes.len() - 5);
        let r: Result<Vec<Record>, PcapError> = PcapIn::new(&bytes[..], "t.pcap")?.collect();
        let e = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.starts_with("t.pcap: record 0:"), "{e}");
        Ok(())
    }
}
