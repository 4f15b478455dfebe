//! End-to-end tests of how the daemon dies: it must fail closed. A daemon that is killed
//! (SIGKILL, an OOM kill, a crash) or hung up on (SIGHUP) must never leave the gateway
//! forwarding inside traffic untranslated, and the next start must recognise what the dead run
//! left behind and, at its own exit, leave the machine as it was before the first start
//! (docs/OPERATIONS.md, "Signals and crashes").
//!
//! Topology (see `common`): IN 198.18.0.20 -- GW (xlat NAPT over 198.19.0.100) -- OUT
//! 198.19.0.2, with no route back to the inside prefix. Needs root: `#[ignore]`d, run by
//! scripts/test.sh (`--include-ignored`), failing when run as another user.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use std::time::Duration;

/// Kills xlat with SIGKILL while IN pings OUT, and checks that no packet with an inside
/// source reaches OUT afterwards (pings after the kill get no reply), then restarts xlat over
/// the leftovers, checks that it translates again, stops it with SIGTERM and checks that GW
/// is as it was before the first start (sysctls at their true originals, not the values the
/// killed run left).
fn sigkill_fails_closed(fast_path: bool) {
    require_root();
    let mut t = Topo::new(Opts {
        fast_path,
        ..Opts::default()
    });
    eprintln!("mode: {}", if t.fast_path { "xdp" } else { "tun" });
    let before = t.machine_state();
    let cfg = t.default_config();
    let x = t.start_xlat(&cfg);
    let (inn, out_ns, out_dev) = (t.ns_in.clone(), t.ns_out.clone(), t.out_dev.clone());
    t.ping_all(&inn, 2, &[], OUT_ADDR);

    let cap = t.tcpdump(&out_ns, &out_dev, "ip");
    // A ping every 50 ms for 6 s, through the kill.
    let pinger = t.spawn(
        &inn,
        "ping-through-kill",
        &[
            "timeout", "10", "ping", "-n", "-i", "0.05", "-c", "120", "-W", "1", OUT_ADDR,
        ],
    );
    std::thread::sleep(Duration::from_millis(1500));
    t.proc(x).stop_with(libc::SIGKILL, Duration::from_secs(5));
    assert!(
        t.proc(x).try_status().is_some(),
        "xlat did not die of SIGKILL"
    );
    // Pings after the kill must find nothing: no reply, and (below) nothing on the wire.
    let after_kill = t.ns(&inn, 10, &["ping", "-n", "-c", "3", "-W", "1", OUT_ADDR]);
    assert!(
        !after_kill.stdout.contains("bytes from"),
        "a ping crossed the gateway after xlat was killed:\n{}",
        after_kill.stdout
    );
    t.proc(pinger).wait_exit(Duration::from_secs(12));
    let lines = t.tcpdump_lines(cap);
    let pkts = Pkt::all(&lines);
    let leaked: Vec<Pkt> = pkts.iter().filter(|p| p.src == IN_ADDR).cloned().collect();
    assert!(
        leaked.is_empty(),
        "packets with the inside source {IN_ADDR} reached OUT after xlat was killed (fail open):\n{}",
        show(&leaked)
    );
    // The capture worked: it saw the translated pings of before the kill.
    assert!(
        pkts.iter().any(|p| p.is(POOL_ADDR, OUT_ADDR)),
        "the capture on OUT saw no translated ping before the kill (is the capture working?):\n{}",
        lines.join("\n")
    );
    // What keeps it closed: the fail-closed route is still there, the TUN is gone.
    let gw = t.ns_gw.clone();
    let routes = t.ns_ok(&gw, &["ip", "-4", "route", "show", "table", "all"]);
    assert!(
        routes.stdout.contains("unreachable default"),
        "no fail-closed route left behind:\n{}",
        routes.stdout
    );

    // A new start over the leftovers: it recognises them, translates, and at its exit GW is
    // as it was before the first start.
    let path = t.config.clone();
    let tun = t.tun.clone();
    let x2 = t.spawn_xlat(&gw, "xlat-restart", &["run"], &path, &cfg);
    t.wait_xlat_ready(
        x2,
        &gw,
        &tun,
        &[&["-4", "route", "show", "table", "all"]],
        &cfg,
    );
    t.ping_all(&inn, 2, &[], OUT_ADDR);
    assert!(
        t.proc(x2).stderr_text().contains("found the leftovers"),
        "the restart did not report the killed run's leftovers:\n{}",
        t.proc(x2).stderr_text()
    );
    let st = t.proc(x2).stop_with(libc::SIGTERM, Duration::from_secs(10));
    assert_eq!(
        st.and_then(|s| s.code()),
        Some(0),
        "xlat exit after SIGTERM: {st:?}\n{}",
        t.proc(x2).stderr_text()
    );
    let after = t.machine_state();
    assert_eq!(
        before, after,
        "GW after kill, restart and clean exit differs from before the first start"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn sigkill_fails_closed_tun() {
    sigkill_fails_closed(false);
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn sigkill_fails_closed_xdp() {
    sigkill_fails_closed(true);
}

/// SIGHUP (a closed terminal, `systemctl reload`) does not stop the daemon: it reloads the
/// configuration file (unchanged here), keeps translating, and still exits cleanly on SIGTERM.
#[test]
#[ignore = "needs root: scripts/test.sh"]
fn sighup_keeps_the_daemon_running() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let cfg = t.default_config();
    let x = t.start_xlat(&cfg);
    let inn = t.ns_in.clone();
    t.ping_all(&inn, 1, &[], OUT_ADDR);
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
        t.proc(x).try_status().is_none(),
        "xlat exited on SIGHUP: {:?}\n{}",
        t.proc(x).try_status(),
        t.proc(x).stderr_text()
    );
    assert!(logged, "no SIGHUP log line:\n{}", t.proc(x).stderr_text());
    t.ping_all(&inn, 2, &[], OUT_ADDR);
    let st = t.proc(x).stop_with(libc::SIGTERM, Duration::from_secs(10));
    assert_eq!(st.and_then(|s| s.code()), Some(0), "{st:?}");
}
