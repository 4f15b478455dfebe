//! End-to-end tests of live reload (`xlat reload`, SIGHUP): what changes live changes
//! without losing a session, a bad or restart-only file changes nothing and exits 2, and a
//! download crossing the gateway survives a hundred reloads intact (docs/OPERATIONS.md).
//!
//! Topology (see `common`): IN 198.18.0.20 -- GW (xlat NAPT over 198.19.0.100) -- OUT
//! 198.19.0.2. Needs root: `#[ignore]`d, run by scripts/test.sh
//! (`--include-ignored`), failing when run as another user.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use std::time::Duration;

/// The ICMP sessions' `expires_in` values listed now.
fn icmp_expiries(t: &Topo) -> Vec<u64> {
    t.sessions()
        .iter()
        .filter(|s| s["proto"] == "icmp")
        .filter_map(|s| s["expires_in"].as_u64())
        .collect()
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn reload_applies_live_changes_and_refuses_the_rest() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let cfg = t.default_config();
    let x = t.start_xlat(&cfg);
    let inn = t.ns_in.clone();
    let path = t.config.clone();
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    assert!(
        icmp_expiries(&t).iter().all(|&e| e > 40),
        "{:?}",
        icmp_expiries(&t)
    );

    // A live change: the ICMP timeout (60 s by default) to 33 s.
    std::fs::write(&path, format!("{cfg}\n[timeouts]\nicmp = 33\n")).unwrap();
    let r = t.xlat_cmd(&["reload"]).check();
    assert!(
        r.stdout.contains("timeouts.icmp"),
        "reload did not report the change: {}",
        r.stdout
    );
    // The session survived; a new ping's session gets the new timeout.
    assert!(!icmp_expiries(&t).is_empty(), "the ICMP session was lost");
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    assert!(
        icmp_expiries(&t).iter().any(|&e| e <= 33),
        "no session with the new timeout: {:?}",
        icmp_expiries(&t)
    );

    // A file that does not parse: exit 2, the running configuration stays, traffic flows.
    std::fs::write(&path, "[nat44\nbroken").unwrap();
    let bad = t.xlat_cmd(&["reload"]);
    assert_eq!(bad.status.code(), Some(2), "{}\n{}", bad.stdout, bad.stderr);
    assert!(
        bad.stderr.contains(&path.display().to_string()),
        "the error does not name the file: {}",
        bad.stderr
    );
    t.ping_all(&inn, 2, &[], OUT_ADDR);

    // A change that needs a restart: refused with the key, exit 2, nothing applied.
    let moved = cfg.replace(POOL_ADDR, "198.19.0.101");
    assert_ne!(moved, cfg);
    std::fs::write(&path, format!("{moved}\n[timeouts]\nicmp = 20\n")).unwrap();
    let pool = t.xlat_cmd(&["reload"]);
    assert_eq!(
        pool.status.code(),
        Some(2),
        "{}\n{}",
        pool.stdout,
        pool.stderr
    );
    assert!(
        pool.stderr.contains("nat44.pool") && pool.stderr.contains("restart"),
        "{}",
        pool.stderr
    );
    t.ping_all(&inn, 1, &[], OUT_ADDR);
    assert!(
        icmp_expiries(&t).iter().all(|&e| e > 20),
        "the refused file was applied in part: {:?}",
        icmp_expiries(&t)
    );

    // SIGHUP reloads the same way.
    std::fs::write(&path, format!("{cfg}\n[timeouts]\nicmp = 44\n")).unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(t.proc(x).pid(), libc::SIGHUP);
    }
    let logged = poll(Duration::from_secs(5), Duration::from_millis(50), || {
        t.proc(x)
            .stderr_text()
            .contains("SIGHUP: configuration reloaded")
    });
    assert!(
        logged,
        "no reload after SIGHUP:\n{}",
        t.proc(x).stderr_text()
    );
    assert!(t.proc(x).try_status().is_none(), "xlat exited on SIGHUP");
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn a_download_survives_a_hundred_reloads() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let cfg = t.default_config();
    t.start_xlat(&cfg);
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    let path = t.config.clone();
    let (_srv, blob) = t.serve_random_file(&out, OUT_ADDR, 8080, 8 << 20);
    let got = t.dir.join("got.bin");
    let url = format!("http://{OUT_ADDR}:8080/blob.bin");
    let got_s = got.display().to_string();
    // About four seconds at 2 MB/s: the reloads below happen while it runs.
    let curl = t.spawn(
        &inn,
        "curl-through-reloads",
        &[
            "curl",
            "-sS",
            "--max-time",
            "60",
            "--limit-rate",
            "2M",
            "-o",
            &got_s,
            &url,
        ],
    );
    let mut changed = 0;
    for i in 0..100 {
        let udp = 120 + (i % 2) * 60;
        std::fs::write(&path, format!("{cfg}\n[timeouts]\nudp = {udp}\n")).unwrap();
        let r = t.xlat_cmd(&["reload"]).check();
        changed += usize::from(r.stdout.contains("timeouts.udp"));
    }
    assert_eq!(changed, 100, "every reload changed the UDP timeout");
    let st = t.proc(curl).wait_exit(Duration::from_secs(60));
    assert_eq!(
        st.and_then(|s| s.code()),
        Some(0),
        "curl through the reloads: {}",
        t.proc(curl).stderr_text()
    );
    assert_same_file(&blob, &got);
}
