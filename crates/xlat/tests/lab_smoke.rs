//! Smoke test of `xlat lab`: the whole pipeline (testbed, devices, tester, results, reports)
//! with tiny durations over forward4, kernel-nat44 and xlat-nat44. The runs need root: they are
//! `#[ignore]`d, run by scripts/test.sh (`--include-ignored`), and fail when run as another
//! user. Asserts on counts and files, never on speed or wall time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Panics unless root. The tests that call it are `#[ignore = "needs root: scripts/test.sh"]`:
/// they run only when asked for (`--include-ignored`), and then not being root is a failure.
fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "the lab smoke test needs root (network namespaces, AF_PACKET): run `sudo bash scripts/test.sh`"
    );
}

fn xlat() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xlat"))
}

fn only_dir(base: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "expected one results directory in {base:?}: {dirs:?}"
    );
    dirs[0].clone()
}

/// Experiment `name` of a run's results.json; panics naming the experiments there when absent.
fn experiment(r: &serde_json::Value, name: &str) -> serde_json::Value {
    let all = r["experiments"]
        .as_array()
        .expect("results.json has no experiments");
    all.iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| {
            let names: Vec<&serde_json::Value> = all.iter().map(|e| &e["name"]).collect();
            panic!("no {name} experiment among {names:?}")
        })
        .clone()
}

/// One `xlat lab` run into its own scratch directory, finished and complete.
struct LabRun {
    base: PathBuf,
    /// The run's results directory (the only one under `base`).
    dir: PathBuf,
    stdout: String,
    /// The progress lines.
    stderr: String,
    /// results.json.
    r: serde_json::Value,
    /// The run's namespaces start with this.
    prefix: String,
}

/// Runs `xlat lab ARGS --out <scratch>` and checks it succeeded and wrote complete results.
fn lab_run(tag: &str, args: &[&str]) -> LabRun {
    let base = std::env::temp_dir().join(format!("xlat-lab-smoke-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let child = xlat()
        .arg("lab")
        .args(args)
        .arg("--out")
        .arg(&base)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The lab names its namespaces after its pid: l<pid hex><counter>-tester / -dut.
    let prefix = format!("l{:x}0-", child.id());
    let o = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "xlat lab failed:\n{stdout}\n{stderr}");
    let dir = only_dir(&base);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    assert!(
        r["incomplete"].is_null(),
        "run incomplete: {}",
        r["incomplete"]
    );
    LabRun {
        base,
        dir,
        stdout,
        stderr,
        r,
        prefix,
    }
}

impl LabRun {
    /// Checks that no namespace of the run is left behind, then removes the scratch directory.
    fn finish(self) {
        let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
        let list = String::from_utf8_lossy(&ns.stdout);
        assert!(
            !list.contains(&self.prefix),
            "namespaces {}* left behind:\n{list}",
            self.prefix
        );
        std::fs::remove_dir_all(&self.base).unwrap();
    }
}

#[test]
fn lab_list_names_experiments_and_devices() {
    let o = xlat().args(["lab", "list"]).output().unwrap();
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stdout);
    for w in [
        "quick",
        "throughput",
        "setup-rate",
        "teardown-rate",
        "throughput-established",
        "forward4",
        "kernel-nat44",
        "xlat-nat44",
        "reload",
        "s5",
    ] {
        assert!(s.contains(w), "lab list lacks {w}:\n{s}");
    }
}

#[test]
fn lab_rejects_bad_arguments() {
    let o = xlat()
        .args(["lab", "run", "throughput", "--sizes", "12"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--sizes"));
    let o = xlat().args(["lab", "run", "nonsense"]).output().unwrap();
    assert!(!o.status.success());
    let o = xlat()
        .args(["lab", "run", "throughput", "--count", "5"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--count"));
    // A device whose sessions start inside has no return-direction flows: refused by name
    // before any testbed is built.
    let o = xlat()
        .args([
            "lab",
            "run",
            "cpu-return",
            "--devices",
            "forward6,xlat-nat44",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("xlat-nat44 has no return-direction flows"),
        "{err}"
    );
    // The NIC-like ingress needs NAPI on the DUT's ports, which the -softirq devices turn off.
    let o = xlat()
        .args([
            "lab",
            "run",
            "cpu",
            "--ingress",
            "xdp",
            "--devices",
            "forward4-softirq",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--ingress xdp: forward4-softirq"), "{err}");
    // The tester's receive moderation is bounded by veth's ring.
    let o = xlat()
        .args(["lab", "run", "cpu", "--rx-coalesce-us", "500"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--rx-coalesce-us: 500 is outside"), "{err}");
    let o = xlat()
        .args(["lab", "run", "slow-path", "--rx-coalesce-us", "50"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("slow-path sets the tester's receive moderation"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn lab_smoke_throughput_over_four_devices() {
    require_root();
    let run = lab_run(
        "throughput",
        &[
            "run",
            "throughput",
            "--devices",
            "forward4,kernel-nat44,xlat-nat44,xlat-nat44-xdp,forward4-softirq,xlat-nat44-xdp-softirq",
            "--sizes",
            "64",
            "--duration",
            "0.2",
            "--repeats",
            "1",
            "--max-steps",
            "2",
            "--flows",
            "10",
        ],
    );
    let (dir, r, stdout) = (&run.dir, &run.r, &run.stdout);
    for f in [
        "results.json",
        "report.md",
        "report.html",
        "throughput-throughput_pps.svg",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing in {dir:?}");
    }
    assert!(r["command_line"].as_array().unwrap().len() > 3);
    // The tester counted with its XDP receive counter (the default where it is built).
    assert_eq!(r["settings"]["rx"], "xdp");
    // The tester's ceiling was measured and moved packets.
    let c = &r["ceilings"][0];
    assert!(c["pps"].as_f64().unwrap() > 0.0);
    let rows = r["experiments"][0]["rows"].as_array().unwrap();
    let devices: Vec<&str> = rows.iter().map(|x| x["device"].as_str().unwrap()).collect();
    assert_eq!(
        devices,
        [
            "forward4",
            "kernel-nat44",
            "xlat-nat44",
            "xlat-nat44-xdp",
            "forward4-softirq",
            "xlat-nat44-xdp-softirq"
        ]
    );
    for row in rows {
        let dev = row["device"].as_str().unwrap();
        let trials = row["trials"].as_array().unwrap();
        assert!(!trials.is_empty(), "{dev}: no trials");
        let mut any_received = false;
        for t in trials {
            let sent = t["sent"].as_u64().unwrap();
            let received = t["received"].as_u64().unwrap();
            let lost = t["lost"].as_u64().unwrap();
            assert!(sent > 0, "{dev}: nothing sent");
            assert!(received <= sent, "{dev}: received {received} > sent {sent}");
            assert_eq!(
                lost,
                sent - received,
                "{dev}: loss inconsistent with counters"
            );
            let loss = t["loss"].as_f64().unwrap();
            assert!((loss - lost as f64 / sent as f64).abs() < 1e-9);
            assert_eq!(t["duplicates"].as_u64().unwrap(), 0, "{dev}: duplicates");
            if received > 0 {
                any_received = true;
                // The ring got the counter's sample: latency exists, from fewer frames.
                let samples = t["latency"]["samples"].as_u64().unwrap();
                assert!(
                    samples > 0 && samples <= received,
                    "{dev}: {samples} latency samples of {received} frames"
                );
                let src = t["rx_first_src"].as_str().unwrap();
                // forward4 leaves inside sources; the NATs translate them to the pool; the
                // tester's own baseline trials (-softirq devices) never cross a device.
                if dev.starts_with("forward4") || t["baseline"] == true {
                    assert!(src.starts_with("198.18."), "{dev}: source {src}");
                } else {
                    // The lab's pool, 198.19.4.0/24 (crates/lab/src/addressing.rs).
                    assert!(
                        src.starts_with("198.19.4."),
                        "{dev}: untranslated source {src}"
                    );
                }
            }
        }
        assert!(any_received, "{dev}: no packet arrived on the outside port");
        assert!(row["metrics"]["throughput_pps"]["median"].as_f64().unwrap() >= 0.0);
    }
    assert!(stdout.contains("Throughput (RFC 2544)"), "{stdout}");
    // The report regenerates from results.json alone.
    std::fs::remove_file(dir.join("report.md")).unwrap();
    let o = xlat().args(["lab", "report"]).arg(dir).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dir.join("report.md").is_file());
    run.finish();
}

/// `xlat lab reproduce s3`, tiny: a small http grid and two repetitions, so the report runs
/// Welch's t-test of xlat-nat64 against xlat-nat44 in every cell and on ping's replies.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn lab_smoke_s3_grid_ping_and_t_test() {
    require_root();
    let run = lab_run(
        "s3",
        &[
            "reproduce",
            "s3",
            "--devices",
            "xlat-nat44,xlat-nat64",
            "--duration",
            "0.2",
            "--repeats",
            "2",
            "--max-steps",
            "2",
            "--flows",
            "10",
            "--sessions",
            "10",
            "--rate",
            "2000",
            "--requests",
            "20",
            "--concurrency",
            "2,5",
        ],
    );
    let r = &run.r;
    let exp = |name: &str| experiment(r, name);
    // One http row per device and cell, each with both repetitions' samples, every body whole.
    let http = exp("http");
    let rows = http["rows"].as_array().unwrap();
    let cells: Vec<(String, String, f64)> = rows
        .iter()
        .map(|x| {
            (
                x["device"].as_str().unwrap().to_string(),
                x["size"].as_str().unwrap().to_string(),
                x["x"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        cells,
        [
            ("xlat-nat44".to_string(), "20".to_string(), 2.0),
            ("xlat-nat44".to_string(), "20".to_string(), 5.0),
            ("xlat-nat64".to_string(), "20".to_string(), 2.0),
            ("xlat-nat64".to_string(), "20".to_string(), 5.0),
        ]
    );
    for row in rows {
        let s = row["samples"]["requests_per_s"].as_array().unwrap();
        assert_eq!(s.len(), 2, "{row}");
        assert!(s.iter().all(|v| v.as_f64().unwrap() > 0.0), "{row}");
        assert_eq!(row["metrics"]["failed_requests"]["max"].as_f64(), Some(0.0));
        let notes = row["notes"].to_string();
        assert!(
            notes.contains("every response body was 173225 bytes"),
            "{notes}"
        );
    }
    // ping: two runs of 21 echoes through each device, each reply kept.
    let rtt = exp("rtt");
    for row in rtt["rows"].as_array().unwrap() {
        let s = row["samples"]["rtt_ms"].as_array().unwrap();
        let lost = row["metrics"]["loss_pct"]["max"].as_f64().unwrap();
        assert!(!s.is_empty() && s.len() <= 42, "{row}");
        assert!(lost < 100.0, "{row}");
        assert!(s.iter().all(|v| v.as_f64().unwrap() > 0.0), "{row}");
    }
    // The t-test table: both cells and the RTT.
    for want in [
        "NAT64 vs NAT44: significance (Welch's t-test)",
        "20 requests, 2 at once",
        "20 requests, 5 at once",
        "RTT (ms)",
    ] {
        assert!(run.stdout.contains(want), "no {want:?} in:\n{}", run.stdout);
    }
    let md = std::fs::read_to_string(run.dir.join("report.md")).unwrap();
    assert!(md.contains("## NAT64 vs NAT44: significance (Welch's t-test)"));
    assert!(md.contains("## Beside the published figures (S3)"));
    // S3's DNS64 path over xlat-nat64 (xlat-nat44 is no NAT64: skipped), beside S3's statement.
    let dns64 = exp("dns64");
    let devices: std::collections::BTreeSet<&str> = dns64["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["device"].as_str().unwrap())
        .collect();
    assert_eq!(
        devices.into_iter().collect::<Vec<_>>(),
        ["xlat-nat64 + unbound-dns64", "xlat-nat64 + xlat-dns64"]
    );
    assert!(
        run.stdout
            .contains("s3-dns64-by-name: paper: S3 ran TAYGA with TOTD"),
        "{}",
        run.stdout
    );
    run.finish();
}

/// `xlat lab run dns64`, small: xlat-nat64 with xlat's DNS64 in the gateway, then with
/// unbound's dns64 module, over unbound as the authoritative server on the IPv4 side. Both
/// resolvers answered dnsperf, every answer dig checked is RFC 6147 / RFC 6052's (synthesized
/// AAAA = pref64 + A, a real AAAA kept), and ab fetched S3's page by name with no failure.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn lab_smoke_dns64_xlat_and_unbound() {
    require_root();
    let run = lab_run(
        "dns64",
        &[
            "run",
            "dns64",
            "--devices",
            "xlat-nat64",
            "--duration",
            "1",
            "--repeats",
            "1",
            "--requests",
            "20",
            "--concurrency",
            "2",
        ],
    );
    let e = experiment(&run.r, "dns64");
    let rows = e["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 10, "5 rows per resolver: {e}");
    let metric = |dev: &str, case: &str, m: &str, which: &str| -> f64 {
        let row = rows
            .iter()
            .find(|x| x["device"] == dev && x["size"] == case)
            .unwrap_or_else(|| panic!("no {case} row for {dev}"));
        row["metrics"][m][which]
            .as_f64()
            .unwrap_or_else(|| panic!("{dev} {case}: no {m}: {row}"))
    };
    for dev in ["xlat-nat64 + xlat-dns64", "xlat-nat64 + unbound-dns64"] {
        for case in ["AAAA uncached", "AAAA cached"] {
            assert!(metric(dev, case, "qps", "min") > 0.0, "{dev} {case}");
            assert!(metric(dev, case, "queries_sent", "min") > 0.0);
            assert!(
                metric(dev, case, "noerror_pct", "min") > 0.0,
                "{dev} {case}"
            );
            assert!(metric(dev, case, "latency_mean_ms", "min") > 0.0);
        }
        // www, two, dual and a name of the pass: A and AAAA each.
        assert_eq!(metric(dev, "answers", "answers_checked", "max"), 8.0);
        assert_eq!(metric(dev, "answers", "answers_wrong", "max"), 0.0, "{dev}");
        for case in ["HTTP by name", "HTTP by address"] {
            assert_eq!(
                metric(dev, case, "complete_requests", "min"),
                20.0,
                "{dev} {case}"
            );
            assert_eq!(
                metric(dev, case, "failed_requests", "max"),
                0.0,
                "{dev} {case}"
            );
            assert!(metric(dev, case, "requests_per_s", "min") > 0.0);
        }
    }
    assert!(
        run.stdout.contains("S3's DNS64 path"),
        "no dns64 table in:\n{}",
        run.stdout
    );
    // The client namespace's resolv.conf went with the run.
    let left: Vec<String> = std::fs::read_dir("/etc/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&run.prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "/etc/netns entries left behind: {left:?}");
    run.finish();
}

/// `xlat lab reproduce s2` over the tunnel devices, tiny: the tester sends IPv6 in IPv4
/// protocol 41 as 6to4 sites / ISATAP hosts, xlat on the DUT decapsulates, and the frames
/// counted on the outside port carry the tunnel hosts' inner sources; the bounce (owd) runs
/// through the tester's own tunnel endpoint and the DUT.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn lab_smoke_s2_over_the_tunnels() {
    require_root();
    let run = lab_run(
        "s2",
        &[
            "reproduce",
            "s2",
            "--devices",
            "xlat-6to4,xlat-isatap",
            "--sizes",
            "128",
            "--duration",
            "0.2",
            "--repeats",
            "1",
            "--max-steps",
            "2",
            "--flows",
            "10",
            "--payloads",
            "100,2000",
            "--bounces",
            "10",
        ],
    );
    let r = &run.r;
    let exp = |name: &str| experiment(r, name);
    let tp = exp("throughput");
    let rows = tp["rows"].as_array().unwrap();
    let devices: Vec<&str> = rows.iter().map(|x| x["device"].as_str().unwrap()).collect();
    assert_eq!(devices, ["xlat-6to4", "xlat-isatap"]);
    for row in rows {
        let dev = row["device"].as_str().unwrap();
        // The inner source of the first frame out of the DUT: the tunnel host behind
        // 198.18.1.1 (RFC 3056 2: 2002:c612:101::1; RFC 5214 6.1: ...:0:5efe:c612:101).
        let inner = if dev == "xlat-6to4" {
            "[2002:c612:101::1]:"
        } else {
            "[2001:2:0:5:0:5efe:c612:101]:"
        };
        let mut any_received = false;
        for t in row["trials"].as_array().unwrap() {
            let sent = t["sent"].as_u64().unwrap();
            let received = t["received"].as_u64().unwrap();
            assert!(sent > 0, "{dev}: nothing sent");
            assert!(received <= sent, "{dev}: received {received} > sent {sent}");
            assert_eq!(t["lost"].as_u64().unwrap(), sent - received, "{dev}");
            assert_eq!(t["duplicates"].as_u64().unwrap(), 0, "{dev}: duplicates");
            if received > 0 {
                any_received = true;
                let src = t["rx_first_src"].as_str().unwrap();
                assert!(src.starts_with(inner), "{dev}: first frame from {src}");
            }
        }
        assert!(
            any_received,
            "{dev}: nothing decapsulated reached the outside port"
        );
    }
    // The bounce crossed the DUT both ways for both payloads (2000 B fragments).
    let owd = exp("owd");
    let rows = owd["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{owd}");
    for row in rows {
        let us = row["metrics"]["owd_us"]["median"].as_f64();
        assert!(
            us.is_some_and(|x| x > 0.0),
            "{} {} B: no delay measured: {row}",
            row["device"],
            row["size"]
        );
    }
    run.finish();
}

/// `xlat lab run cpu-return`, tiny: the tester sends native IPv6 on its outside port; forward6
/// routes it to the inside port as it is, the 6to4 endpoints (XDP and TUN) and the ISATAP router
/// encapsulate it (RFC 4213 3.5): every frame that reaches the inside port is 20 bytes longer,
/// its inner source the outside host's.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn lab_smoke_cpu_return_encapsulates() {
    require_root();
    let run = lab_run(
        "cpu-return",
        &[
            "run",
            "cpu-return",
            "--devices",
            "forward6,xlat-6to4-xdp,xlat-6to4,xlat-isatap",
            "--sizes",
            "128",
            "--sessions",
            "10",
            "--rate",
            "5000",
            "--duration",
            "0.3",
            "--repeats",
            "1",
        ],
    );
    let e = experiment(&run.r, "cpu-return");
    let rows = e["rows"].as_array().unwrap();
    let devices: Vec<&str> = rows.iter().map(|x| x["device"].as_str().unwrap()).collect();
    assert_eq!(
        devices,
        ["forward6", "xlat-6to4-xdp", "xlat-6to4", "xlat-isatap"]
    );
    for row in rows {
        let dev = row["device"].as_str().unwrap();
        let want = if dev == "forward6" { 128.0 } else { 148.0 };
        let t = &row["trials"][0];
        let (sent, received) = (t["sent"].as_u64().unwrap(), t["received"].as_u64().unwrap());
        assert!(
            received > 0 && received <= sent,
            "{dev}: {received} of {sent}"
        );
        // The outside host's packet, in the endpoint's outer header where encapsulated.
        let src = t["rx_first_src"].as_str().unwrap();
        let from = if dev == "forward6" {
            "[2001:2:0:2:"
        } else {
            "198.18.0.1 in 6in4 [2001:2:0:2:"
        };
        assert!(src.starts_with(from), "{dev}: first frame from {src}");
        // Bytes a frame at the inside port (FCS included), from the trial's rates.
        let frame = t["rx_bps"].as_f64().unwrap() / 8.0 / t["rx_pps"].as_f64().unwrap();
        assert!(
            (frame - want).abs() < 0.5,
            "{dev}: {frame} bytes a frame at the inside port, not {want}"
        );
    }
    run.finish();
}

/// `--ingress xdp`: the tester sends into an injection pair whose XDP program redirects every
/// frame out of its port facing the DUT. Every frame arrives through forward4, kernel NAT and
/// xlat's XDP fast path (inside to outside) and through the 6to4 endpoint in XDP (outside to
/// inside): a redirect the DUT's port refused would be lost. With `--rx-coalesce-us` the
/// tester's receiving port polls from a timer instead of being woken per frame: a port that
/// never polled again would leave frames in its ring, counted lost.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn lab_smoke_nic_like_ingress() {
    require_root();
    for (exp, devices, size, n) in [
        ("cpu", "forward4,kernel-nat44,xlat-nat44-xdp", "64", 3),
        ("cpu-return", "forward6,xlat-6to4-xdp", "128", 2),
    ] {
        let run = lab_run(
            &format!("ingress-{exp}"),
            &[
                "run",
                exp,
                "--devices",
                devices,
                "--ingress",
                "xdp",
                "--sizes",
                size,
                "--sessions",
                "10",
                "--rate",
                "5000",
                "--duration",
                "0.3",
                "--repeats",
                "1",
                "--rx-coalesce-us",
                "50",
            ],
        );
        assert_eq!(run.r["settings"]["ingress"], "xdp");
        assert_eq!(run.r["settings"]["rx_coalesce_us"], 50.0);
        let placement = run.r["placement"].as_str().unwrap();
        assert!(placement.contains("--ingress xdp"), "{placement}");
        assert!(placement.contains("--rx-coalesce-us"), "{placement}");
        let e = experiment(&run.r, exp);
        let rows = e["rows"].as_array().unwrap();
        assert_eq!(rows.len(), n, "{exp}: {e}");
        for row in rows {
            let dev = &row["device"];
            // The device's trial (cpu adds the tester's own trial after it, as a baseline).
            let t = &row["trials"][0];
            let (sent, received) = (t["sent"].as_u64().unwrap(), t["received"].as_u64().unwrap());
            assert!(sent > 0, "{exp} {dev}: nothing sent");
            assert_eq!(received, sent, "{exp} {dev}: frames lost");
        }
        run.finish();
    }
}

/// `xlat lab run churn`, tiny: established flows plus never-seen flows through kernel NAT and
/// xlat's fast path. Every trial's frames are split into the two groups, and the groups add up
/// to the trial's own counts; new flows crossed each device's slow path.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn lab_smoke_churn() {
    require_root();
    let run = lab_run(
        "churn",
        &[
            "run",
            "churn",
            "--devices",
            "kernel-nat44,xlat-nat44-xdp",
            "--flows",
            "10",
            "--rate",
            "2000",
            "--new-rates",
            "0,1000",
            "--duration",
            "0.3",
        ],
    );
    let (r, stdout) = (&run.r, &run.stdout);
    let e = experiment(r, "churn");
    let rows = e["rows"].as_array().unwrap();
    let keys: Vec<(&str, f64)> = rows
        .iter()
        .map(|x| (x["device"].as_str().unwrap(), x["x"].as_f64().unwrap()))
        .collect();
    assert_eq!(
        keys,
        [
            ("kernel-nat44", 0.0),
            ("kernel-nat44", 1000.0),
            ("xlat-nat44-xdp", 0.0),
            ("xlat-nat44-xdp", 1000.0)
        ]
    );
    for row in rows {
        let (dev, new_rate) = (row["device"].as_str().unwrap(), row["x"].as_f64().unwrap());
        for t in row["trials"].as_array().unwrap() {
            let g = &t["groups"];
            let (es, er) = (
                g["established"]["sent"].as_u64().unwrap(),
                g["established"]["received"].as_u64().unwrap(),
            );
            let (ns, nr) = (
                g["new"]["sent"].as_u64().unwrap(),
                g["new"]["received"].as_u64().unwrap(),
            );
            assert_eq!(es + ns, t["sent"].as_u64().unwrap(), "{dev}: {t}");
            assert_eq!(er + nr, t["received"].as_u64().unwrap(), "{dev}: {t}");
            assert!(er <= es && nr <= ns, "{dev}: {g}");
            assert!(er > 0, "{dev}: no established frame arrived: {g}");
            if new_rate == 0.0 {
                assert_eq!(ns, 0, "{dev}: new flows at rate 0: {g}");
            } else {
                assert!(ns > 0 && nr > 0, "{dev}: no new flow crossed: {g}");
            }
        }
        assert!(row["metrics"]["new_rx_per_s"]["median"].as_f64().is_some());
        // Where frames were lost on the DUT: its ports' receive drops for every device, the
        // AF_XDP sockets' for xlat's (its workers list the counter even without sockets).
        let m = &row["metrics"];
        assert!(
            m["dut_rx_dropped"]["median"].as_f64().is_some(),
            "{dev}: {m}"
        );
        assert_eq!(
            m["afxdp_drops"]["median"].as_f64().is_some(),
            dev.starts_with("xlat"),
            "{dev}: {m}"
        );
    }
    assert!(stdout.contains("churn"), "{stdout}");
    // Each step empties the xlat daemon's table with `xlat clear sessions --all`; the lab
    // restarts the daemon only when that fails, and says so.
    assert!(
        !run.stderr.contains("restarting it"),
        "the table was not cleared:\n{}",
        run.stderr
    );
    run.finish();
}

/// `xlat lab run scale-cores`, short, with two DUT CPUs where the machine has two (the second
/// one the tester's: `--dut-cpus 1,0 --tester-cpus 0`, marked shared) or one. Each step must
/// have its queues and xlat's workers, and on two queues the flows must reach both (16 flows
/// hashed onto one queue of two would be 1 in 32,768).
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn lab_smoke_scale_cores() {
    require_root();
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let cpus: &[&str] = if two {
        &["--dut-cpus", "1,0", "--tester-cpus", "0"]
    } else {
        &["--dut-cpus", "0", "--tester-cpus", "0"]
    };
    let mut args = vec![
        "run",
        "scale-cores",
        "--devices",
        "forward4,xlat-nat44",
        "--flows",
        "16",
        "--duration",
        "0.3",
        "--repeats",
        "1",
        "--max-steps",
        "2",
    ];
    args.extend_from_slice(cpus);
    let run = lab_run("scale-cores", &args);
    let e = experiment(&run.r, "scale-cores");
    let rows = e["rows"].as_array().unwrap();
    let keys: Vec<(&str, f64)> = rows
        .iter()
        .map(|x| (x["device"].as_str().unwrap(), x["x"].as_f64().unwrap()))
        .collect();
    let mut want = vec![("forward4", 1.0), ("xlat-nat44", 1.0)];
    if two {
        want.extend([("forward4", 2.0), ("xlat-nat44", 2.0)]);
    }
    assert_eq!(keys, want);
    let metric = |row: &serde_json::Value, k: &str| row["metrics"][k]["median"].as_f64();
    for row in rows {
        let (dev, k) = (row["device"].as_str().unwrap(), row["x"].as_f64().unwrap());
        assert_eq!(metric(row, "queues"), Some(k), "{dev}: {row}");
        if dev.starts_with("xlat-") {
            assert_eq!(metric(row, "workers"), Some(k), "{dev}");
        }
        // A search result, whatever it is (a speed is not asserted), and frames crossed.
        assert!(metric(row, "throughput_pps").is_some(), "{dev}");
        let received: u64 = row["trials"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["received"].as_u64().unwrap())
            .sum();
        assert!(received > 0, "{dev}: nothing crossed");
        let busiest = metric(row, "busiest_queue_pct").expect("no queue counts");
        if k == 1.0 {
            assert_eq!(busiest, 100.0, "{dev}: one queue");
        } else {
            assert!(busiest < 100.0, "{dev}: every frame on one queue of {k}");
            let notes = row["notes"].to_string();
            assert!(notes.contains("SHARED CPU"), "{dev}: {notes}");
        }
    }
    run.finish();
}

/// `xlat lab run failover`, short: both devices, the active killed once. xlat must keep
/// every established flow and the download; the kernel + conntrackd pair is only checked for
/// having measured (what it loses is what the experiment is for).
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn lab_smoke_failover() {
    require_root();
    let mut run = lab_run(
        "failover",
        &[
            "run",
            "failover",
            "--devices",
            "xlat-nat44,kernel-nat44",
            "--variants",
            "kill",
            "--flows",
            "10",
            "--new-rates",
            "500",
            "--duration",
            "2",
        ],
    );
    // failover names its namespaces x<pid hex>f<counter>-...
    let pid = run
        .prefix
        .strip_prefix('l')
        .unwrap()
        .strip_suffix("0-")
        .unwrap();
    run.prefix = format!("x{pid}f");
    let exp = |name: &str| experiment(&run.r, name);
    let (fo, sync) = (exp("failover"), exp("failover-sync"));
    let row = |e: &serde_json::Value, dev: &str| {
        e["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["device"] == dev)
            .unwrap_or_else(|| panic!("no row {dev}: {e}"))
            .clone()
    };
    let m = |r: &serde_json::Value, k: &str| {
        r["metrics"][k]["median"]
            .as_f64()
            .unwrap_or_else(|| panic!("no {k}: {r}"))
    };
    let x = row(&fo, "xlat-nat44 (kill)");
    assert_eq!(m(&x, "established"), 10.0, "{x}");
    assert_eq!(m(&x, "established_lost"), 0.0, "{x}");
    assert_eq!(m(&x, "established_remapped"), 0.0, "{x}");
    assert_eq!(m(&x, "download_ok"), 1.0, "{x}");
    assert_eq!(m(&x, "tcp_resets"), 0.0, "{x}");
    assert!(
        m(&x, "standby_entries") >= 10.0,
        "the standby held the flows: {x}"
    );
    let (f, v, g) = (m(&x, "failover_ms"), m(&x, "vrrp_ms"), m(&x, "takeover_ms"));
    assert!(
        f > 0.0 && f < 5000.0 && v > 0.0 && v < 5000.0 && (0.0..5000.0).contains(&g),
        "{x}"
    );
    assert!(m(&x, "udp_lost_after") < m(&x, "udp_sent_after"), "{x}");
    // New sessions kept arriving, and the new active let them through.
    assert!(m(&x, "new_arrived_after") > 0.0, "{x}");
    assert!(m(&x, "new_arrived_after") <= m(&x, "new_sent_after"), "{x}");
    let k = row(&fo, "kernel-nat44 (kill)");
    assert_eq!(m(&k, "established"), 10.0, "{k}");
    assert!(m(&k, "established_lost") <= 10.0, "{k}");
    assert!([0.0, 1.0].contains(&m(&k, "download_ok")), "{k}");
    assert!(m(&k, "vrrp_ms") > 0.0 && m(&k, "takeover_ms") >= 0.0, "{k}");
    assert!(
        m(&k, "new_sent") > 0.0 && m(&k, "new_arrived") <= m(&k, "new_sent"),
        "{k}"
    );
    for dev in ["xlat-nat44", "kernel-nat44"] {
        let s = row(&sync, dev);
        assert_eq!(s["x"].as_f64(), Some(500.0), "{s}");
        assert!(m(&s, "new_per_s") > 100.0, "{s}");
        assert!(
            m(&s, "sync_pps") > 0.0,
            "{dev} sent nothing on the sync link: {s}"
        );
        let b = m(&s, "sync_bytes_per_event");
        assert!(b > 5.0 && b < 1500.0, "{s}");
        assert!(m(&s, "sync_cpu_pct") >= 0.0, "{s}");
    }
    assert_eq!(m(&row(&sync, "xlat-nat44"), "events_dropped"), 0.0);
    assert!(run.stdout.contains("established lost"), "{}", run.stdout);
    assert!(run.dir.join("outcome.json").is_file());
    run.finish();
}

/// `xlat lab run reload`, short: 20 reloads per variant through xlat-nat44 and its XDP fast
/// path at a fixed rate. Every reload is applied (the daemon answers `reloaded` naming the
/// changed key), none ends a session, frames cross in every window; what was lost and how
/// long a reload took are measured, not asserted.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn lab_smoke_reload() {
    require_root();
    let run = lab_run(
        "reload",
        &[
            "run",
            "reload",
            "--devices",
            "xlat-nat44,xlat-nat44-xdp",
            "--count",
            "20",
            "--rate",
            "20000",
        ],
    );
    let e = experiment(&run.r, "reload");
    let rows = e["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["device"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "xlat-nat44 (timeouts)",
            "xlat-nat44 (pool)",
            "xlat-nat44-xdp (timeouts)",
            "xlat-nat44-xdp (pool)"
        ]
    );
    let m = |r: &serde_json::Value, k: &str| {
        r["metrics"][k]["median"]
            .as_f64()
            .unwrap_or_else(|| panic!("no {k}: {r}"))
    };
    for r in rows {
        for k in ["reloads", "reloads_asked", "reloads_done"] {
            assert_eq!(m(r, k), 20.0, "{k}: {r}");
        }
        assert_eq!(m(r, "reloads_after_window"), 0.0, "{r}");
        assert_eq!(m(r, "sessions_ended"), 0.0, "{r}");
        assert_eq!(m(r, "offered_pps"), 20000.0, "{r}");
        let (sent, received) = (m(r, "sent"), m(r, "received"));
        assert!(received > 0.0 && received <= sent, "{r}");
        assert_eq!(m(r, "lost"), sent - received, "{r}");
        assert!(m(r, "baseline_sent") > 0.0, "{r}");
        assert!(m(r, "reload_p50_ms") > 0.0, "{r}");
        assert!(m(r, "reload_max_ms") >= m(r, "reload_p99_ms"), "{r}");
        assert!(m(r, "reload_p99_ms") >= m(r, "reload_p50_ms"), "{r}");
        // The reload window and the baselines before and after it.
        let trials = r["trials"].as_array().unwrap();
        assert_eq!(trials.len(), 3, "{r}");
        assert_ne!(trials[0]["baseline"], true, "{r}");
        assert!(trials[1..].iter().all(|t| t["baseline"] == true), "{r}");
    }
    assert!(run.stdout.contains("reload p50 (ms)"), "{}", run.stdout);
    run.finish();
}

/// The RFC 9693 experiments, tiny: 1000 connections, one repeat, short trials, over the kernel
/// and xlat with and without the fast path (and TAYGA, which has no table); then the
/// establishment rate (setup-rate-table) at 1000 connections. Each table size's
/// validation must pass (N entries after phase 1 and phase 2; none after the tear-down) and
/// every rate be positive: a device that loses or creates a connection fails here. Bounded:
/// phase 1 is 1000 frames at 50,000/s, the searches at most 7 steps of 0.2 s (down to
/// 1/64 of the tester's ceiling, with 1% loss allowed: the rate found is not the point).
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn lab_smoke_rfc9693_state_table() {
    require_root();
    for (exp, metric) in [
        ("teardown-rate", "teardown_rate_per_s"),
        ("throughput-established", "throughput_pps"),
    ] {
        let run = lab_run(
            exp,
            &[
                "run",
                exp,
                "--devices",
                "kernel-nat44,xlat-nat44,xlat-nat44-xdp,tayga-nat64",
                "--sessions",
                "1000",
                "--repeats",
                "1",
                "--duration",
                "0.2",
                "--max-steps",
                "7",
                "--loss",
                "1",
            ],
        );
        let e = experiment(&run.r, exp);
        assert!(e["method"].as_str().unwrap().contains("RFC 9693"));
        let rows = e["rows"].as_array().unwrap();
        let devices: Vec<&str> = rows.iter().map(|r| r["device"].as_str().unwrap()).collect();
        assert_eq!(
            devices,
            [
                "kernel-nat44",
                "xlat-nat44",
                "xlat-nat44-xdp",
                "tayga-nat64"
            ],
            "{exp}"
        );
        for row in rows {
            let dev = row["device"].as_str().unwrap();
            let m = &row["metrics"];
            if dev == "tayga-nat64" {
                // No connection table: nothing validated, no tear-down rate.
                assert!(m.get("validated").is_none(), "{exp} {dev}: {row}");
                assert!(m.get("teardown_rate_per_s").is_none(), "{exp} {dev}: {row}");
                continue;
            }
            assert_eq!(row["x"].as_f64(), Some(1000.0), "{exp} {dev}");
            assert_eq!(
                m["sessions_filled"]["median"].as_f64(),
                Some(1000.0),
                "{exp} {dev}: phase 1 did not fill the table: {row}"
            );
            assert!(
                m["validated"]["min"].as_f64().unwrap() >= 1.0,
                "{exp} {dev}: validation failed: {}",
                row["notes"]
            );
            let after = m["sessions_after"]["median"].as_f64().unwrap();
            let want = if exp == "teardown-rate" { 0.0 } else { 1000.0 };
            assert_eq!(after, want, "{exp} {dev}: table after: {row}");
            let rate = m[metric]["median"].as_f64().unwrap();
            assert!(rate > 0.0, "{exp} {dev}: {metric} {rate}");
        }
        run.finish();
    }
    // The establishment rate: every search must find a rate at which all 1000 new flows
    // arrived and the table then held exactly 1000 (a device that drops a first packet or
    // counts a connection twice never passes a trial, and its rate is 0).
    let run = lab_run(
        "setup-rate-table",
        &[
            "run",
            "setup-rate-table",
            "--devices",
            "kernel-nat44,xlat-nat44,xlat-nat44-xdp,tayga-nat64",
            "--sessions",
            "1000",
            "--repeats",
            "1",
            "--max-steps",
            "7",
        ],
    );
    let e = experiment(&run.r, "setup-rate-table");
    assert!(e["method"].as_str().unwrap().contains("RFC 9693"));
    let rows = e["rows"].as_array().unwrap();
    let devices: Vec<&str> = rows.iter().map(|r| r["device"].as_str().unwrap()).collect();
    assert_eq!(
        devices,
        [
            "kernel-nat44",
            "xlat-nat44",
            "xlat-nat44-xdp",
            "tayga-nat64"
        ]
    );
    for row in rows {
        let dev = row["device"].as_str().unwrap();
        let m = &row["metrics"];
        if dev == "tayga-nat64" {
            assert!(m.get("setup_rate_per_s").is_none(), "{dev}: {row}");
            assert!(row["notes"].to_string().contains("not applicable"), "{row}");
            continue;
        }
        assert_eq!(row["x"].as_f64(), Some(1000.0), "{dev}");
        let rate = m["setup_rate_per_s"]["median"].as_f64().unwrap();
        assert!(
            rate > 0.0,
            "{dev}: no rate established 1000 connections: {row}"
        );
        let fill = m["fill_s"]["median"].as_f64().unwrap();
        assert!(
            (fill * rate - 1000.0).abs() < 1.0,
            "{dev}: fill {fill} s at {rate}/s"
        );
    }
    run.finish();
}
