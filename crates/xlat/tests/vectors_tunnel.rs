//! Golden 6in4 tunnel vectors (6to4, ISATAP, RFC 4213 3): every
//! `tests/vectors/tunnel/NAME.in.pcap` goes through
//! `xlat translate -c CFG --in NAME.in.pcap --out OUT.pcap --json`; OUT.pcap must equal
//! `NAME.out.pcap` byte for byte, the drop counters must be exactly those listed in
//! `tests/vectors/tunnel/vectors.json` (all others 0) and the listed events must match. The
//! expected pcaps come from an independent oracle, `tests/vectors/tunnel/gen_tunnel.py` (scapy
//! builds every packet and computes every checksum).
//!
//! On a mismatch the test prints each differing packet as a one-line summary (version,
//! addresses, protocol, ICMP type) for both sides and the first differing byte, keeps the
//! produced pcap under `target/tmp/vectors-tunnel/NAME/`, runs every vector and fails at the
//! end listing the failing ones. `XLAT_VECTORS_BIN` points at another binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fmt::Write as _;
use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;

use pcap_file::pcap::PcapReader;
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/tunnel")
}

fn xlat_bin() -> std::ffi::OsString {
    std::env::var_os("XLAT_VECTORS_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_xlat").into())
}

fn read_pcap(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut r = PcapReader::new(f).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.map_err(|e| format!("{}: {e}", path.display()))?;
        out.push(p.data.into_owned());
    }
    Ok(out)
}

/// One line naming a packet: version, addresses, protocol, ICMP type/code, inner packet.
fn summary(b: &[u8]) -> String {
    let at = |o: usize| b.get(o).copied().unwrap_or(0);
    match b.first().map(|v| v >> 4) {
        Some(4) => {
            let ihl = usize::from(at(0) & 0xf) * 4;
            let a = |o: usize| Ipv4Addr::new(at(o), at(o + 1), at(o + 2), at(o + 3));
            let mut s = format!(
                "IPv4 {} > {} proto {} ttl {} tos {:#04x} id {:#06x} flags/off {:#06x} len {}",
                a(12),
                a(16),
                at(9),
                at(8),
                at(1),
                u16::from_be_bytes([at(4), at(5)]),
                u16::from_be_bytes([at(6), at(7)]),
                b.len()
            );
            match at(9) {
                41 => {
                    let _ = write!(s, " [{}]", summary(b.get(ihl..).unwrap_or(&[])));
                }
                1 => {
                    let _ = write!(s, " icmp {}/{}", at(ihl), at(ihl + 1));
                }
                _ => {}
            }
            s
        }
        Some(6) => {
            let a = |o: usize| {
                let mut x = [0u8; 16];
                for (i, v) in x.iter_mut().enumerate() {
                    *v = at(o + i);
                }
                Ipv6Addr::from(x)
            };
            let mut s = format!(
                "IPv6 {} > {} nh {} hlim {} tc {:#04x} len {}",
                a(8),
                a(24),
                at(6),
                at(7),
                (u16::from_be_bytes([at(0), at(1)]) >> 4) as u8,
                b.len()
            );
            if at(6) == 58 {
                let _ = write!(s, " icmpv6 {}/{}", at(40), at(41));
            }
            s
        }
        _ => format!("{} bytes, not IP", b.len()),
    }
}

fn counter(stats: &Value, list: &str, name: &str) -> u64 {
    stats[list]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"].as_str() == Some(name)))
        .and_then(|c| c["value"].as_u64())
        .unwrap_or(0)
}

fn run_vector(v: &Value) -> Result<(), String> {
    let name = v["name"].as_str().ok_or("entry without a name")?;
    let config = v["config"].as_str().ok_or("entry without a config")?;
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("vectors-tunnel")
        .join(name);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let cfg = tmp.join("config.toml");
    std::fs::write(&cfg, config).map_err(|e| e.to_string())?;
    let produced = tmp.join("out.pcap");
    let _ = std::fs::remove_file(&produced);
    let run = Command::new(xlat_bin())
        .arg("translate")
        .arg("-c")
        .arg(&cfg)
        .arg("--in")
        .arg(dir().join(format!("{name}.in.pcap")))
        .arg("--out")
        .arg(&produced)
        .arg("--json")
        .output()
        .map_err(|e| format!("cannot run xlat: {e}"))?;
    let stdout = String::from_utf8_lossy(&run.stdout);
    if !run.status.success() {
        return Err(format!(
            "xlat translate exited with {}: {}",
            run.status,
            String::from_utf8_lossy(&run.stderr).trim()
        ));
    }
    let stats: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .or_else(|| serde_json::from_str(stdout.trim()).ok())
        .ok_or_else(|| format!("stdout is not the stats JSON: {stdout}"))?;
    let want = read_pcap(&dir().join(format!("{name}.out.pcap")))?;
    let got = read_pcap(&produced)?;
    let mut report = String::new();
    for i in 0..want.len().max(got.len()) {
        match (want.get(i), got.get(i)) {
            (Some(w), Some(g)) if w == g => {}
            (w, g) => {
                let _ = writeln!(report, "  packet {i}:");
                let _ = writeln!(
                    report,
                    "    expected {}",
                    w.map_or("<none>".into(), |w| summary(w))
                );
                let _ = writeln!(
                    report,
                    "    produced {}",
                    g.map_or("<none>".into(), |g| summary(g))
                );
                if let (Some(w), Some(g)) = (w, g) {
                    let at = w
                        .iter()
                        .zip(g.iter())
                        .position(|(a, b)| a != b)
                        .unwrap_or(w.len().min(g.len()));
                    let _ = writeln!(
                        report,
                        "    first difference at byte {at}: expected {:02x?} produced {:02x?}",
                        w.get(at..(at + 8).min(w.len())).unwrap_or(&[]),
                        g.get(at..(at + 8).min(g.len())).unwrap_or(&[])
                    );
                }
            }
        }
    }
    let want_drops = v["drops"].as_object().cloned().unwrap_or_default();
    for d in stats["drops"].as_array().into_iter().flatten() {
        let n = d["name"].as_str().unwrap_or("");
        let got = d["value"].as_u64().unwrap_or(0);
        let w = want_drops.get(n).and_then(Value::as_u64).unwrap_or(0);
        if got != w {
            let _ = writeln!(report, "  drop {n}: expected {w}, counted {got}");
        }
    }
    for (k, w) in want_drops.iter() {
        if stats["drops"]
            .as_array()
            .is_none_or(|a| !a.iter().any(|d| d["name"].as_str() == Some(k)))
        {
            let _ = writeln!(report, "  drop {k} (expected {w}) is not a counter");
        }
    }
    for (k, w) in v["events"].as_object().into_iter().flatten() {
        let got = counter(&stats, "events", k);
        if Some(got) != w.as_u64() {
            let _ = writeln!(report, "  event {k}: expected {w}, counted {got}");
        }
    }
    if report.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{report}  rule: {}\n  produced pcap: {}",
            v["rule"].as_str().unwrap_or(""),
            produced.display()
        ))
    }
}

#[test]
fn tunnel_vectors() {
    let path = dir().join("vectors.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let list: Vec<Value> = serde_json::from_str(&text).expect("vectors.json is a JSON array");
    assert!(!list.is_empty(), "no tunnel vectors");
    let mut failed = Vec::new();
    for v in &list {
        let name = v["name"].as_str().unwrap_or("?");
        match run_vector(v) {
            Ok(()) => eprintln!("ok   {name}"),
            Err(e) => {
                eprintln!("FAIL {name}\n{e}");
                failed.push(name.to_string());
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} tunnel vectors failed: {failed:?}",
        failed.len(),
        list.len()
    );
}
