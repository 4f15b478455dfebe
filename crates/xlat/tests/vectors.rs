//! The one runner of every golden vector: NAT44, SIIT and NAT64 (`tests/vectors`) and the 6in4
//! tunnels (`tests/vectors/tunnel`). Every `NAME.in.pcap` of a suite goes through
//! `xlat translate -c CFG --in NAME.in.pcap --out OUT.pcap --json`, and OUT.pcap must equal
//! `NAME.out.pcap` packet by packet. The expected pcaps come from independent oracles
//! (`tests/vectors/gen.py`, `tests/vectors/tunnel/gen_tunnel.py`: scapy computes every
//! checksum); each suite's `vectors.json` names the rule each vector checks, its config, and
//! the drop and event counters expected.
//!
//! On a mismatch the test prints a field-by-field diff (IPv4 or IPv6 header, fragment header,
//! ports, identifiers, checksums, the embedded packet of an ICMP error) and the bytes that differ, and keeps the
//! produced pcap under `target/tmp/vectors/SUITE/NAME/` for inspection (e.g. `tshark -r`).
//! All vectors run; the test fails at the end listing every failing one. `XLAT_VECTORS_BIN`
//! points the test at another binary with the same command line.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use pcap_file::pcap::PcapReader;
use pcap_file::DataLink;
use serde_json::Value;

/// The suites: a directory under tests/vectors ("" for tests/vectors itself) with its own
/// vectors.json and pcaps, and its name.
const SUITES: [(&str, &str); 2] = [("", "nat"), ("tunnel", "tunnel")];

fn vectors_dir(suite: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors")
        .join(suite)
}

fn manifest(suite: &str) -> Result<Vec<Value>, String> {
    let path = vectors_dir(suite).join("vectors.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    match serde_json::from_str::<Value>(&text).map_err(|e| format!("{}: {e}", path.display()))? {
        Value::Array(v) => Ok(v),
        _ => Err(format!("{}: not a JSON array", path.display())),
    }
}

/// One packet of a pcap: timestamp (for the diff only) and bytes.
struct Pkt {
    ts: std::time::Duration,
    data: Vec<u8>,
}

fn read_pcap(path: &Path) -> Result<Vec<Pkt>, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut r = PcapReader::new(f).map_err(|e| format!("{}: {e}", path.display()))?;
    let dl = r.header().datalink;
    if !matches!(dl, DataLink::RAW | DataLink::IPV4) {
        return Err(format!(
            "{}: link type {dl:?}, expected RAW (101) or IPV4 (228)",
            path.display()
        ));
    }
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.map_err(|e| format!("{}: packet {}: {e}", path.display(), out.len()))?;
        out.push(Pkt {
            ts: p.timestamp,
            data: p.data.into_owned(),
        });
    }
    Ok(out)
}

// --- packet fields, for diffs ---------------------------------------------------------------

fn be16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(off)?, *b.get(off + 1)?]))
}

fn ipv4(b: &[u8], off: usize) -> Option<String> {
    Some(format!(
        "{}.{}.{}.{}",
        b.get(off)?,
        b.get(off + 1)?,
        b.get(off + 2)?,
        b.get(off + 3)?
    ))
}

fn ipv6(b: &[u8], off: usize) -> Option<String> {
    let a: [u8; 16] = b.get(off..off + 16)?.try_into().ok()?;
    Some(std::net::Ipv6Addr::from(a).to_string())
}

/// Named fields of an IPv6 packet (fixed header, a Fragment header, TCP/UDP/ICMPv6 and the
/// packet inside an ICMPv6 error), in wire order.
fn fields6(b: &[u8], prefix: &str, out: &mut Vec<(String, String)>) {
    let mut f = |k: &str, v: Option<String>| {
        out.push((
            format!("{prefix}{k}"),
            v.unwrap_or_else(|| "<missing>".into()),
        ));
    };
    let w0 = be16(b, 0)
        .zip(be16(b, 2))
        .map(|(h, l)| u32::from(h) << 16 | u32::from(l));
    f("ip6.version", w0.map(|w| (w >> 28).to_string()));
    f(
        "ip6.traffic_class",
        w0.map(|w| format!("{:#04x}", (w >> 20) & 0xff)),
    );
    f(
        "ip6.flow_label",
        w0.map(|w| format!("{:#07x}", w & 0xfffff)),
    );
    f("ip6.payload_length", be16(b, 4).map(|x| x.to_string()));
    f("ip6.next_header", b.get(6).map(|x| x.to_string()));
    f("ip6.hop_limit", b.get(7).map(|x| x.to_string()));
    f("ip6.src", ipv6(b, 8));
    f("ip6.dst", ipv6(b, 24));
    let mut nh = b.get(6).copied();
    let mut at = 40;
    let mut first = true;
    if nh == Some(44) {
        f("frag.next_header", b.get(40).map(|x| x.to_string()));
        f("frag.offset", be16(b, 42).map(|x| (x >> 3).to_string()));
        f("frag.m", be16(b, 42).map(|x| (x & 1).to_string()));
        f(
            "frag.id",
            be16(b, 44)
                .zip(be16(b, 46))
                .map(|(h, l)| format!("{:#010x}", u32::from(h) << 16 | u32::from(l))),
        );
        first = be16(b, 42).is_some_and(|x| x >> 3 == 0);
        nh = b.get(40).copied();
        at = 48;
    }
    let Some(l4) = b.get(at..) else { return };
    if !first {
        f("payload", Some(hex(l4)));
        return;
    }
    match nh {
        Some(6) => {
            f("tcp.sport", be16(l4, 0).map(|x| x.to_string()));
            f("tcp.dport", be16(l4, 2).map(|x| x.to_string()));
            f("tcp.flags", l4.get(13).map(|x| format!("{x:#04x}")));
            f("tcp.checksum", be16(l4, 16).map(|x| format!("{x:#06x}")));
        }
        Some(17) => {
            f("udp.sport", be16(l4, 0).map(|x| x.to_string()));
            f("udp.dport", be16(l4, 2).map(|x| x.to_string()));
            f("udp.length", be16(l4, 4).map(|x| x.to_string()));
            f("udp.checksum", be16(l4, 6).map(|x| format!("{x:#06x}")));
        }
        Some(58) => {
            let ty = l4.first().copied();
            f("icmp6.type", ty.map(|x| x.to_string()));
            f("icmp6.code", l4.get(1).map(|x| x.to_string()));
            f("icmp6.checksum", be16(l4, 2).map(|x| format!("{x:#06x}")));
            match ty {
                Some(128 | 129) => f("icmp6.id", be16(l4, 4).map(|x| x.to_string())),
                Some(1..=4) if prefix.is_empty() => {
                    f(
                        "icmp6.mtu_or_pointer",
                        be16(l4, 4)
                            .zip(be16(l4, 6))
                            .map(|(h, l)| (u32::from(h) << 16 | u32::from(l)).to_string()),
                    );
                    if let Some(inner) = l4.get(8..) {
                        fields6(inner, "inner.", out);
                    }
                }
                _ => {}
            }
        }
        _ => {}
    }
}

/// Named fields of an IPv4 packet (and its L4 header, and the packet inside an ICMP error),
/// in wire order. `prefix` names the nesting ("" or "inner."). IPv6 goes to [`fields6`].
fn fields(b: &[u8], prefix: &str, out: &mut Vec<(String, String)>) {
    if b.first().is_some_and(|v| v >> 4 == 6) {
        return fields6(b, prefix, out);
    }
    let mut f = |k: &str, v: Option<String>| {
        out.push((
            format!("{prefix}{k}"),
            v.unwrap_or_else(|| "<missing>".into()),
        ));
    };
    let Some(&v0) = b.first() else {
        f("ip", None);
        return;
    };
    f("ip.version", Some((v0 >> 4).to_string()));
    f("ip.ihl", Some((v0 & 0xf).to_string()));
    f("ip.tos", b.get(1).map(|x| format!("{x:#04x}")));
    f("ip.total_length", be16(b, 2).map(|x| x.to_string()));
    f("ip.id", be16(b, 4).map(|x| format!("{x:#06x}")));
    f("ip.flags", b.get(6).map(|x| format!("{:#x}", x >> 5)));
    f(
        "ip.frag_offset",
        be16(b, 6).map(|x| (x & 0x1fff).to_string()),
    );
    f("ip.ttl", b.get(8).map(|x| x.to_string()));
    f("ip.protocol", b.get(9).map(|x| x.to_string()));
    f("ip.checksum", be16(b, 10).map(|x| format!("{x:#06x}")));
    f("ip.src", ipv4(b, 12));
    f("ip.dst", ipv4(b, 16));
    let ihl = usize::from(v0 & 0xf) * 4;
    if ihl > 20 {
        f("ip.options", b.get(20..ihl.min(b.len())).map(hex));
    }
    let first = be16(b, 6).is_some_and(|x| x & 0x1fff == 0);
    let Some(l4) = b.get(ihl..) else { return };
    if !first {
        f("payload", Some(hex(l4)));
        return;
    }
    match b.get(9) {
        Some(6) => {
            f("tcp.sport", be16(l4, 0).map(|x| x.to_string()));
            f("tcp.dport", be16(l4, 2).map(|x| x.to_string()));
            f("tcp.flags", l4.get(13).map(|x| format!("{x:#04x}")));
            f("tcp.checksum", be16(l4, 16).map(|x| format!("{x:#06x}")));
        }
        Some(17) => {
            f("udp.sport", be16(l4, 0).map(|x| x.to_string()));
            f("udp.dport", be16(l4, 2).map(|x| x.to_string()));
            f("udp.length", be16(l4, 4).map(|x| x.to_string()));
            f("udp.checksum", be16(l4, 6).map(|x| format!("{x:#06x}")));
        }
        Some(1) => {
            let ty = l4.first().copied();
            f("icmp.type", ty.map(|x| x.to_string()));
            f("icmp.code", l4.get(1).map(|x| x.to_string()));
            f("icmp.checksum", be16(l4, 2).map(|x| format!("{x:#06x}")));
            match ty {
                Some(0 | 8 | 13 | 14) => f("icmp.id", be16(l4, 4).map(|x| x.to_string())),
                Some(3 | 4 | 5 | 11 | 12) if prefix.is_empty() => {
                    f(
                        "icmp.rest",
                        be16(l4, 4)
                            .zip(be16(l4, 6))
                            .map(|(h, l)| format!("{h:#06x}{l:04x}")),
                    );
                    if let Some(inner) = l4.get(8..) {
                        fields(inner, "inner.", out);
                    }
                }
                _ => {}
            }
        }
        _ => {}
    }
}

/// One line naming a packet: its fields as `key=value`, nested ones included.
fn summary(b: &[u8]) -> String {
    let mut f = Vec::new();
    fields(b, "", &mut f);
    let keep = [
        "ip.src",
        "ip.dst",
        "ip6.src",
        "ip6.dst",
        "frag.offset",
        "icmp6.type",
        "icmp6.id",
        "ip.protocol",
        "ip.id",
        "ip.frag_offset",
        "tcp.sport",
        "tcp.dport",
        "tcp.flags",
        "udp.sport",
        "udp.dport",
        "icmp.type",
        "icmp.id",
    ];
    f.iter()
        .filter(|(k, _)| keep.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A field-by-field and byte-by-byte description of how `got` differs from `want`.
fn diff(want: &[u8], got: &[u8]) -> String {
    let mut s = String::new();
    let (mut fw, mut fg) = (Vec::new(), Vec::new());
    fields(want, "", &mut fw);
    fields(got, "", &mut fg);
    let gmap: BTreeMap<_, _> = fg.iter().cloned().collect();
    let wmap: BTreeMap<_, _> = fw.iter().cloned().collect();
    for (k, w) in &fw {
        match gmap.get(k) {
            Some(g) if g == w => {}
            Some(g) => {
                let _ = writeln!(s, "      {k:<18} want {w:<18} got {g}");
            }
            None => {
                let _ = writeln!(s, "      {k:<18} want {w:<18} got <absent>");
            }
        }
    }
    for (k, g) in &fg {
        if !wmap.contains_key(k) {
            let _ = writeln!(s, "      {k:<18} want <absent>           got {g}");
        }
    }
    if want.len() != got.len() {
        let _ = writeln!(
            s,
            "      length             want {:<18} got {}",
            want.len(),
            got.len()
        );
    }
    // Runs of differing bytes, as offset: want-hex / got-hex.
    let n = want.len().max(got.len());
    let mut i = 0;
    let mut runs = 0;
    while i < n && runs < 12 {
        if want.get(i) == got.get(i) {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && want.get(i) != got.get(i) {
            i += 1;
        }
        let w = want.get(start..i.min(want.len())).unwrap_or(&[]);
        let g = got.get(start..i.min(got.len())).unwrap_or(&[]);
        let _ = writeln!(
            s,
            "      bytes {start}..{i}: want {} got {}",
            hex(w),
            hex(g)
        );
        runs += 1;
    }
    s
}

// --- checksums (for packets whose port the engine chooses) ---------------------------------

fn ones_sum(mut acc: u32, b: &[u8]) -> u32 {
    let mut chunks = b.chunks_exact(2);
    for c in &mut chunks {
        if let [h, l] = c {
            acc += u32::from(u16::from_be_bytes([*h, *l]));
        }
    }
    if let [h] = chunks.remainder() {
        acc += u32::from(*h) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Whether the TCP/UDP (RFC 768, RFC 793 pseudo-header) or ICMP (RFC 792) checksum of an
/// unfragmented IPv4 packet verifies.
fn l4_checksum_ok(b: &[u8]) -> Result<bool, String> {
    let ihl = usize::from(b.first().ok_or("empty packet")? & 0xf) * 4;
    let total = usize::from(be16(b, 2).ok_or("short packet")?);
    let l4 = b.get(ihl..total).ok_or("total length beyond packet")?;
    let proto = *b.get(9).ok_or("short packet")?;
    let mut acc = 0;
    if proto != 1 {
        acc = ones_sum(acc, b.get(12..20).ok_or("short packet")?);
        acc += u32::from(proto) + l4.len() as u32;
    }
    acc = ones_sum(acc, l4);
    Ok(fold(acc) == 0xffff)
}

/// RFC 7915 5.1: an IPv4 packet the translator makes from an unfragmented IPv6 one of at most
/// 1260 bytes has DF clear and an identification of the translator's choosing (RFC 7739). The
/// oracle writes identification 0 there; this takes the engine's value into the expected
/// packet `want` -- for the packet and for the one an ICMPv4 error quotes (5.3) -- after
/// checking the engine's header checksums, and recomputes the expected checksums that cover
/// it, so every other byte still compares.
fn adopt_identification(want: &mut [u8], got: &[u8]) -> Result<(), String> {
    fn adopt(want: &mut [u8], got: &[u8], at: usize) -> Result<bool, String> {
        let (Some(w), Some(g)) = (want.get(at..at + 20), got.get(at..at + 20)) else {
            return Ok(false);
        };
        // Translator-made, unfragmented, DF clear: identification 0, flags and offset 0.
        if w.first().map(|b| b >> 4) != Some(4) || w[4..8] != [0, 0, 0, 0] {
            return Ok(false);
        }
        if g[6..8] != [0, 0] {
            return Ok(false); // the flags differ: the byte comparison reports it
        }
        let ihl = usize::from(w[0] & 0xf) * 4;
        let gh = got.get(at..at + ihl).ok_or("short header")?;
        if fold(ones_sum(0, gh)) != 0xffff {
            return Err("the IPv4 header checksum does not verify".into());
        }
        let id = [g[4], g[5]];
        want[at + 4..at + 6].copy_from_slice(&id);
        want[at + 10..at + 12].fill(0);
        let c = !fold(ones_sum(0, &want[at..at + ihl]));
        want[at + 10..at + 12].copy_from_slice(&c.to_be_bytes());
        Ok(true)
    }
    adopt(want, got, 0)?;
    let ihl = usize::from(want.first().copied().unwrap_or(0) & 0xf) * 4;
    let quoted = want.get(9) == Some(&1)
        && matches!(want.get(ihl), Some(3 | 11 | 12))
        && got.get(ihl) == want.get(ihl);
    if quoted && adopt(want, got, ihl + 8)? {
        let total = usize::from(be16(want, 2).unwrap_or(0)).min(want.len());
        if let Some(icmp) = want.get_mut(ihl..total) {
            icmp[2..4].fill(0);
            let c = !fold(ones_sum(0, icmp));
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
        }
    }
    Ok(())
}

// --- one vector ------------------------------------------------------------------------------

/// The binary under test: this crate's `xlat`, or `XLAT_VECTORS_BIN` to run the vectors against
/// another build with the same `translate` command line.
fn xlat_bin() -> std::ffi::OsString {
    std::env::var_os("XLAT_VECTORS_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_xlat").into())
}

fn tmp_dir(suite: &str, name: &str) -> Result<PathBuf, String> {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("vectors")
        .join(suite)
        .join(name);
    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    Ok(d)
}

/// Counter value from the stats JSON (`events` or `drops`: arrays of {name, value}); 0 if absent.
fn counter(stats: &Value, list: &str, name: &str) -> u64 {
    stats
        .get(list)
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
        })
        .and_then(|c| c.get("value"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// `name=value` for every non-zero event and drop counter.
fn nonzero_counters(stats: &Value) -> String {
    let mut out = Vec::new();
    for list in ["events", "drops"] {
        for c in stats
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(n), Some(v)) = (
                c.get("name").and_then(Value::as_str),
                c.get("value").and_then(Value::as_u64),
            ) {
                if v != 0 {
                    out.push(format!("{n}={v}"));
                }
            }
        }
    }
    out.join(" ")
}

/// Runs one vector; `Err` carries the whole report of what differed.
fn run_vector((dir, suite): (&str, &str), v: &Value) -> Result<(), String> {
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .ok_or("entry without a name")?;
    let config = v
        .get("config")
        .and_then(Value::as_str)
        .ok_or("entry without a config")?;
    let dir = vectors_dir(dir);
    let tmp = tmp_dir(suite, name)?;
    let cfg = tmp.join("config.toml");
    std::fs::write(&cfg, config).map_err(|e| format!("{}: {e}", cfg.display()))?;
    let input = dir.join(format!("{name}.in.pcap"));
    let expected = dir.join(format!("{name}.out.pcap"));
    let produced = tmp.join("out.pcap");
    let _ = std::fs::remove_file(&produced);

    let run = Command::new(xlat_bin())
        .arg("translate")
        .arg("-c")
        .arg(&cfg)
        .arg("--in")
        .arg(&input)
        .arg("--out")
        .arg(&produced)
        .arg("--json")
        .output()
        .map_err(|e| format!("cannot run xlat: {e}"))?;
    let stdout = String::from_utf8_lossy(&run.stdout);
    if !run.status.success() {
        return Err(format!(
            "xlat translate exited with {}\n  stderr: {}\n  stdout: {stdout}",
            run.status,
            String::from_utf8_lossy(&run.stderr).trim()
        ));
    }
    let stats: Value = serde_json::from_str(stdout.trim())
        .or_else(|_| {
            // Tolerate lines before the JSON: take the last line that parses.
            stdout
                .lines()
                .rev()
                .find_map(|l| serde_json::from_str::<Value>(l).ok())
                .ok_or(())
        })
        .map_err(|()| format!("stdout is not the stats JSON: {stdout}"))?;

    let mut report = String::new();

    // Counters: every listed drop and event equal; every unlisted drop reason zero.
    let want_drops = v
        .get("drops")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let want_events = v
        .get("events")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (k, w) in &want_drops {
        let g = counter(&stats, "drops", k);
        if Some(g) != w.as_u64() {
            let _ = writeln!(report, "  drop {k}: want {w}, got {g}");
        }
    }
    if let Some(drops) = stats.get("drops").and_then(Value::as_array) {
        for d in drops {
            let (Some(k), Some(g)) = (
                d.get("name").and_then(Value::as_str),
                d.get("value").and_then(Value::as_u64),
            ) else {
                continue;
            };
            if g != 0 && !want_drops.contains_key(k) {
                let _ = writeln!(report, "  drop {k}: want 0, got {g}");
            }
        }
    } else {
        let _ = writeln!(report, "  stats JSON has no \"drops\" array");
    }
    for (k, w) in &want_events {
        let g = counter(&stats, "events", k);
        if Some(g) != w.as_u64() {
            let _ = writeln!(report, "  event {k}: want {w}, got {g}");
        }
    }

    // Packets.
    let mut want = read_pcap(&expected)?;
    let got = match read_pcap(&produced) {
        Ok(g) => g,
        Err(e) => {
            let _ = writeln!(report, "  cannot read the produced pcap: {e}");
            Vec::new()
        }
    };
    // Packets whose source port (or echo identifier) the engine picks: check the value and the
    // checksum, then take both from the produced packet so the rest compares byte for byte.
    for m in v
        .get("random_port")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let i = m.get("packet").and_then(Value::as_u64).unwrap_or(0) as usize;
        let lo = m.pointer("/range/0").and_then(Value::as_u64).unwrap_or(0);
        let hi = m
            .pointer("/range/1")
            .and_then(Value::as_u64)
            .unwrap_or(65535);
        let not = m.get("not").and_then(Value::as_u64);
        let (Some(w), Some(g)) = (want.get_mut(i), got.get(i)) else {
            continue;
        };
        let ihl = usize::from(g.data.first().copied().unwrap_or(0) & 0xf) * 4;
        // (offset of the port / identifier, offset of the checksum) in the L4 header.
        let (port_at, ck_at) = match g.data.get(9) {
            Some(6) => (0, 16),
            Some(17) => (0, 6),
            Some(1) => (4, 2),
            _ => {
                let _ = writeln!(
                    report,
                    "  packet {i}: random_port on a packet that is not TCP/UDP/ICMP"
                );
                continue;
            }
        };
        let Some(port) = be16(&g.data, ihl + port_at) else {
            continue;
        };
        if u64::from(port) < lo || u64::from(port) > hi || Some(u64::from(port)) == not {
            let _ = writeln!(
                report,
                "  packet {i}: port/identifier {port} must lie in {lo}-{hi}{}",
                not.map(|n| format!(" and differ from {n}"))
                    .unwrap_or_default()
            );
        }
        match l4_checksum_ok(&g.data) {
            Ok(true) => {}
            Ok(false) => {
                let _ = writeln!(report, "  packet {i}: L4 checksum does not verify");
            }
            Err(e) => {
                let _ = writeln!(report, "  packet {i}: {e}");
            }
        }
        for off in [port_at, port_at + 1, ck_at, ck_at + 1] {
            if let (Some(d), Some(s)) = (w.data.get_mut(ihl + off), g.data.get(ihl + off)) {
                *d = *s;
            }
        }
    }
    if v.get("engine_ident").and_then(Value::as_bool) == Some(true) {
        for (i, (w, g)) in want.iter_mut().zip(&got).enumerate() {
            if let Err(e) = adopt_identification(&mut w.data, &g.data) {
                let _ = writeln!(report, "  packet {i}: {e}");
            }
        }
    }
    if want.len() != got.len() {
        let _ = writeln!(
            report,
            "  packet count: want {}, got {}",
            want.len(),
            got.len()
        );
    }
    for i in 0..want.len().max(got.len()) {
        match (want.get(i), got.get(i)) {
            (Some(w), Some(g)) if w.data == g.data => {}
            (Some(w), Some(g)) => {
                let _ = writeln!(
                    report,
                    "  packet {i} differs (want t={:?}, got t={:?}):",
                    w.ts, g.ts
                );
                report.push_str(&diff(&w.data, &g.data));
            }
            (Some(w), None) => {
                let _ = writeln!(
                    report,
                    "  packet {i} missing: want {}\n      {}",
                    summary(&w.data),
                    hex(&w.data)
                );
            }
            (None, Some(g)) => {
                let _ = writeln!(
                    report,
                    "  packet {i} unexpected: got {}\n      {}",
                    summary(&g.data),
                    hex(&g.data)
                );
            }
            (None, None) => {}
        }
    }
    if report.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{report}  produced pcap kept at {}\n  non-zero counters: {}",
            produced.display(),
            nonzero_counters(&stats)
        ))
    }
}

#[test]
fn golden_vectors() {
    let mut failed = Vec::new();
    let mut count = 0;
    for (dir, suite) in SUITES {
        let vectors = manifest(dir).unwrap_or_else(|e| panic!("{e}"));
        assert!(!vectors.is_empty(), "no vectors in suite {suite}");
        count += vectors.len();
        for v in &vectors {
            let name = v.get("name").and_then(Value::as_str).unwrap_or("?");
            let rule = v.get("rule").and_then(Value::as_str).unwrap_or("");
            match run_vector((dir, suite), v) {
                Ok(()) => println!("ok    {suite}/{name}"),
                Err(e) => {
                    println!("FAIL  {suite}/{name}\n  rule: {rule}\n{e}");
                    failed.push(format!("{suite}/{name}"));
                }
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {count} vectors failed (details above):\n  {}",
        failed.len(),
        failed.join("\n  ")
    );
}

/// Every suite's manifest lists each vector once, with an RFC rule and a config, and names
/// every pcap of its directory; no vector is listed without both pcaps.
#[test]
fn manifest_covers_every_pcap() {
    let mut total = 0;
    for (dir, suite) in SUITES {
        let vectors = manifest(dir).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !vectors.is_empty(),
            "suite {suite}: no vectors in the manifest"
        );
        total += vectors.len();
        let mut names = BTreeSet::new();
        for v in &vectors {
            let name = v
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            assert!(
                !name.is_empty(),
                "{suite}: manifest entry without a name: {v}"
            );
            assert!(
                v.get("rule")
                    .and_then(Value::as_str)
                    .is_some_and(|r| r.contains("RFC")),
                "{suite}/{name}: no RFC rule"
            );
            assert!(
                v.get("config").and_then(Value::as_str).is_some(),
                "{suite}/{name}: no config"
            );
            assert!(names.insert(name.clone()), "{suite}/{name} listed twice");
            for kind in ["in", "out"] {
                let p = vectors_dir(dir).join(format!("{name}.{kind}.pcap"));
                assert!(p.is_file(), "{} is missing", p.display());
            }
        }
        let entries = std::fs::read_dir(vectors_dir(dir))
            .unwrap_or_else(|e| panic!("{}: {e}", vectors_dir(dir).display()));
        for e in entries.flatten() {
            let f = e.file_name().to_string_lossy().into_owned();
            if let Some(stem) = f
                .strip_suffix(".in.pcap")
                .or_else(|| f.strip_suffix(".out.pcap"))
            {
                assert!(names.contains(stem), "{suite}: {f} is not in vectors.json");
            } else {
                assert!(
                    !f.ends_with(".pcap"),
                    "{suite}: {f}: pcaps are named NAME.in.pcap / NAME.out.pcap"
                );
            }
        }
    }
    assert!(total >= 20, "only {total} vectors in the manifests");
}
