//! The daemon as a systemd service (packaging/, docs/OPERATIONS.md): it notifies READY=1
//! only once its TUN device and routes are up, sends WATCHDOG=1 keep-alives and STOPPING=1
//! (sd_notify protocol, spoken to a socket the test binds, as systemd's would be); and the
//! .deb that scripts/deb.sh builds holds the binary, a default configuration that `xlat
//! check` accepts, completions, the man page and a unit that `systemd-analyze verify` passes
//! without a warning (systemd does not run as PID 1 here, so the package is not started).
//!
//! The notification test needs root (namespaces): `#[ignore]`d, run by scripts/test.sh
//! (`--include-ignored`). The package test needs dpkg-deb and systemd-analyze, and fails
//! without them.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

/// The notifications received within `limit`, until `until` holds for one (bounded).
fn notifications(
    sock: &UnixDatagram,
    limit: Duration,
    mut until: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    for _ in 0..1000 {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        sock.set_read_timeout(Some(left)).unwrap();
        let Ok(n) = sock.recv(&mut buf) else { break };
        let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
        let done = until(&msg);
        got.push(msg);
        if done {
            break;
        }
    }
    got
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn daemon_notifies_ready_after_the_tun_then_watchdog_then_stopping() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let cfg = t.default_config();
    let path = t.config.clone();
    std::fs::write(&path, &cfg).unwrap();
    // The socket systemd would listen on (a path: the daemon runs in another network
    // namespace, where an abstract name would not reach us).
    let notify = t.dir.join("notify.sock");
    let sock = UnixDatagram::bind(&notify).unwrap();
    let (gw, inn, tun) = (t.ns_gw.clone(), t.ns_in.clone(), t.tun.clone());
    let notify_s = notify.display().to_string();
    let cfg_s = path.display().to_string();
    let p = t.spawn_env(
        &gw,
        "xlat",
        &[xlat_bin(), "run", "-c", &cfg_s],
        &[
            ("RUST_LOG", "info"),
            ("NOTIFY_SOCKET", &notify_s),
            ("WATCHDOG_USEC", "600000"),
        ],
    );
    t.xlat.push(p);

    let first = notifications(&sock, Duration::from_secs(20), |m| m.contains("READY=1"));
    let ready = first.last().cloned().unwrap_or_default();
    assert!(
        ready.starts_with("READY=1\n"),
        "no READY=1 within 20 s: {first:?}\n--- xlat stderr\n{}",
        t.proc(p).stderr_text()
    );
    // Ready means ready: the TUN device is up and routed, the control socket answers.
    let link = t.ns_ok(&gw, &["ip", "-o", "link", "show", "dev", &tun]);
    assert!(
        link.stdout.contains(",UP"),
        "READY=1 before the TUN was up: {}",
        link.stdout
    );
    let routes = t.ns_ok(
        &gw,
        &["ip", "-4", "route", "show", "table", "all", "dev", &tun],
    );
    assert!(
        !routes.stdout.trim().is_empty(),
        "READY=1 before the routes"
    );
    assert!(
        ready.contains(&format!("MAINPID={}", t.proc(p).pid())),
        "{ready}"
    );
    t.xlat_cmd(&["show", "stats"]).check();

    // Keep-alives every 0.3 s while the worker answers; traffic flows meanwhile.
    let mut dogs = 0;
    let got = notifications(&sock, Duration::from_secs(10), |m| {
        dogs += usize::from(m == "WATCHDOG=1");
        dogs >= 3
    });
    assert!(dogs >= 3, "fewer than 3 keep-alives in 10 s: {got:?}");
    t.ping_all(&inn, 2, &[], OUT_ADDR);

    let status = t.stop(p);
    assert!(
        status.is_some_and(|s| s.success()),
        "xlat exited {status:?}"
    );
    let last = notifications(&sock, Duration::from_secs(5), |m| m == "STOPPING=1");
    assert!(
        last.iter().any(|m| m == "STOPPING=1"),
        "no STOPPING=1 at exit: {last:?}"
    );
}

/// Panics unless the package test can run: dpkg-deb, systemd-analyze and gzip present.
fn require_package_tools() {
    let missing = missing_tools(&["dpkg-deb", "systemd-analyze", "gzip"]);
    assert!(
        missing.is_empty(),
        "the package test needs {missing:?}: apt-get install dpkg systemd gzip"
    );
}

/// `systemd-analyze verify` of `unit` inside `root` (with the host's own units beside it, as
/// on an installed system); its output (empty when clean) and success.
fn verify(root: &Path, unit: &str) -> Run {
    run_host(
        60,
        &[
            "systemd-analyze",
            "--man=no",
            &format!("--root={}", root.display()),
            "verify",
            unit,
        ],
    )
}

#[test]
fn the_deb_holds_a_unit_systemd_verifies_and_a_config_xlat_accepts() {
    require_package_tools();
    let dir = std::env::temp_dir().join(format!("xlat-deb-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = dir.join("out");
    let r = run_host(
        120,
        &[
            "bash",
            &repo.join("scripts/deb.sh").display().to_string(),
            "--binary",
            xlat_bin(),
            "--out",
            &out.display().to_string(),
        ],
    )
    .check();
    let deb = r.stdout.lines().last().unwrap_or_default().to_string();
    assert!(deb.ends_with(".deb") && Path::new(&deb).exists(), "{r:?}");

    let info = run_host(30, &["dpkg-deb", "--info", &deb]).check();
    for field in ["Package: xlat", "Depends: libc6", "conffiles"] {
        assert!(info.stdout.contains(field), "no {field}: {}", info.stdout);
    }
    let list = run_host(30, &["dpkg-deb", "--contents", &deb]).check();
    for file in [
        "./usr/bin/xlat",
        "./lib/systemd/system/xlat.service",
        "./etc/xlat/xlat.toml",
        "./usr/share/doc/xlat/METRICS.md",
        "./usr/share/bash-completion/completions/xlat",
        "./usr/share/man/man1/xlat.1.gz",
    ] {
        assert!(
            list.stdout.contains(file),
            "no {file} in the package:\n{}",
            list.stdout
        );
    }

    // Installed into a root of its own (this machine's files untouched).
    let root = dir.join("root");
    run_host(60, &["dpkg-deb", "-x", &deb, &root.display().to_string()]).check();
    let bin = root.join("usr/bin/xlat").display().to_string();
    let conf = root.join("etc/xlat/xlat.toml").display().to_string();
    let check = run_host(30, &[&bin, "check", "-c", &conf]).check();
    // "ok", no warnings; a note on speed (the packaged config runs over TUN) is advice.
    assert!(
        check
            .stdout
            .lines()
            .next()
            .is_some_and(|l| l.ends_with("xlat.toml: ok"))
            && !check.stdout.contains(": warning: "),
        "{check:?}"
    );
    let comp =
        std::fs::read_to_string(root.join("usr/share/bash-completion/completions/xlat")).unwrap();
    assert!(
        comp.contains("complete -F _xlat") && comp.contains("completions"),
        "{comp}"
    );
    let man = run_host(
        30,
        &[
            "sh",
            "-c",
            &format!(
                "gzip -dc {}",
                root.join("usr/share/man/man1/xlat.1.gz").display()
            ),
        ],
    )
    .check();
    assert!(man.stdout.contains(".TH xlat 1"), "{}", man.stdout);

    // The unit, beside the host's own units as on an installed system: no error, no warning.
    let units = root.join("lib/systemd/system");
    run_host(
        60,
        &[
            "sh",
            "-c",
            &format!("cp -a /usr/lib/systemd/system/. {}/", units.display()),
        ],
    )
    .check();
    // systemd-analyze can fail: a misspelt key is reported (a copy of the unit with one).
    let unit = std::fs::read_to_string(units.join("xlat.service")).unwrap();
    assert!(unit.contains("\nType=notify\n") && unit.contains("\nWatchdogSec="));
    std::fs::write(
        units.join("xlat-typo.service"),
        unit.replace("WatchdogSec=", "WatchdogSecs="),
    )
    .unwrap();
    let bad = verify(&root, "xlat-typo.service");
    assert!(
        bad.stderr.contains("WatchdogSecs"),
        "systemd-analyze did not report a misspelt key: {bad:?}"
    );
    let good = verify(&root, "xlat.service");
    assert!(
        good.ok() && good.stdout.trim().is_empty() && good.stderr.trim().is_empty(),
        "systemd-analyze verify xlat.service:\n{}\n{}",
        good.stdout,
        good.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}
