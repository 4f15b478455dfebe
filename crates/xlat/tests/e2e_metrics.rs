//! End-to-end tests of `[metrics]` (docs/METRICS.md): a gateway in namespaces serves
//! Prometheus text that the real `promtool check metrics` accepts and whose counters move by
//! the packets sent through it, and the live page draws the traffic in a real headless Chromium (driven over WebDriver, in
//! real time), its screenshot kept under target/tmp.
//!
//! Topology (see `common`): IN 198.18.0.20 -- GW (xlat NAPT over 198.19.0.100, metrics on
//! 127.0.0.1:9641 in GW) -- OUT 198.19.0.2. Needs root, promtool (Debian `prometheus`) and
//! Chromium with its WebDriver (Debian `chromium`, `chromium-driver`): `#[ignore]`d, run by
//! scripts/test.sh (`--include-ignored`), failing when run without them.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use std::path::PathBuf;
use std::time::Duration;

const METRICS: &str = "127.0.0.1:9641";

/// `require_root`, and `tool` present (panics naming the Debian package when missing).
fn require_root_with(tool: &str, package: &str) {
    require_root();
    let missing = missing_tools(&[tool]);
    assert!(
        missing.is_empty(),
        "the metrics end-to-end tests need {tool}: apt-get install {package} (scripts/test.sh installs it)"
    );
}

/// The NAT44 test configuration with `[metrics]` on.
fn config(t: &Topo) -> String {
    format!(
        "{}\n[metrics]\nlisten = \"{METRICS}\"\n",
        t.default_config()
    )
}

/// `GET path` from GW's own loopback, where the daemon listens; the body.
fn get(t: &Topo, path: &str) -> String {
    let r = t.http_get(&t.ns_gw, &format!("http://{METRICS}{path}"));
    assert!(r.ok(), "GET {path} failed: {}\n{}", r.stdout, r.stderr);
    r.stdout
}

/// The value of sample `series` (name with labels, as written) in an exposition.
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

/// Runs `promtool check metrics` on `text`; its result.
fn promtool(t: &Topo, name: &str, text: &str) -> Run {
    let file = t.dir.join(name);
    std::fs::write(&file, text).unwrap();
    run_host(
        30,
        &[
            "sh",
            "-c",
            &format!("promtool check metrics < {}", file.display()),
        ],
    )
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn metrics_move_with_the_traffic_and_pass_promtool() {
    require_root_with("promtool", "prometheus");
    let mut t = Topo::new(Opts::default());
    let cfg = config(&t);
    t.start_xlat(&cfg);
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());

    // promtool can fail: a counter without _total and a sample without HELP are refused, so
    // its passing below means something.
    let bad = promtool(&t, "bad.prom", "# TYPE x counter\nx 1\ny 2\n");
    assert!(!bad.ok(), "promtool accepted a bad exposition: {bad:?}");

    let before = get(&t, "/metrics");
    let ok = promtool(&t, "before.prom", &before);
    assert!(
        ok.ok(),
        "promtool check metrics failed:\n{}\n{}",
        ok.stdout,
        ok.stderr
    );

    // Traffic: 10 pings (10 outbound and 10 inbound translations), an HTTP download, and 5
    // unsolicited datagrams to the pool address (dropped: no_mapping).
    const PINGS: u64 = 10;
    t.ping_all(&inn, PINGS as u32, &[], OUT_ADDR);
    const DOWNLOAD: u64 = 200_000;
    t.fetch_random_file(DOWNLOAD);
    const UNSOLICITED: u64 = 5;
    for k in 0..UNSOLICITED {
        t.ns_ok(
            &out,
            &[
                "python3",
                "-c",
                UDP4_SEND,
                OUT_ADDR,
                "0",
                POOL_ADDR,
                &(40000 + k).to_string(),
                "NOMAP",
            ],
        );
    }
    // Answers younger than 250 ms are served again: wait that out.
    std::thread::sleep(Duration::from_millis(400));

    let after = get(&t, "/metrics");
    let ok = promtool(&t, "after.prom", &after);
    assert!(
        ok.ok(),
        "promtool check metrics failed:\n{}\n{}",
        ok.stdout,
        ok.stderr
    );
    std::fs::write(t.dir.join("after.prom"), &after).unwrap();

    let moved = |series: &str| sample(&after, series).saturating_sub(sample(&before, series));
    assert!(
        moved("xlat_outbound_total") >= PINGS,
        "outbound moved by {}",
        moved("xlat_outbound_total")
    );
    assert!(
        moved("xlat_inbound_total") >= PINGS,
        "inbound moved by {}",
        moved("xlat_inbound_total")
    );
    // The download's data alone is at least DOWNLOAD / 1500 segments (the MTU; offloads are
    // off on GW's links); with the XDP fast path on, most are redirected in the kernel and
    // counted there.
    let fast = if t.fast_path {
        moved("xlat_xdp_redirected_total")
    } else {
        0
    };
    assert!(
        moved("xlat_packets_out_total") + fast >= 2 * PINGS + DOWNLOAD / 1500,
        "packets_out moved by {} (fast path {fast})",
        moved("xlat_packets_out_total")
    );
    assert!(
        moved("xlat_drops_total{reason=\"no_mapping\"}") >= UNSOLICITED,
        "no_mapping moved by {}",
        moved("xlat_drops_total{reason=\"no_mapping\"}")
    );
    // One row per packet worker (XLAT_E2E_WORKERS), together all the engines took in.
    let workers = workers_wanted().unwrap_or(1);
    // With the AF_XDP slow path (XLAT_E2E_AF_XDP) the engine's packets come from its
    // sockets, not the TUN device.
    let via_afxdp: u64 = (0..workers)
        .map(|k| moved(&format!("xlat_worker_afxdp_rx_total{{worker=\"{k}\"}}")))
        .sum();
    assert!(moved("xlat_tun_rx_packets_total") + via_afxdp >= 2 * PINGS + UNSOLICITED);
    let per_worker: u64 = (0..workers)
        .map(|k| moved(&format!("xlat_worker_packets_in_total{{worker=\"{k}\"}}")))
        .sum();
    assert!(per_worker >= 2 * PINGS, "the workers took in {per_worker}");
    assert!(moved("xlat_sessions_created_total") >= 2);
    assert!(sample(&after, "xlat_sessions") >= 1);
    assert_eq!(sample(&after, "xlat_pool_addresses"), 1);
    assert!(sample(&after, "xlat_pool_ports{proto=\"tcp\"}") > 60000);

    // The same numbers as `xlat show stats` (asked after the scrape: never fewer).
    let stats = t.stats();
    for (event, series) in [
        ("outbound", "xlat_outbound_total"),
        ("packets_in", "xlat_packets_in_total"),
    ] {
        let shown = Topo::event(&stats, event);
        let scraped = sample(&after, series);
        assert!(
            scraped <= shown && scraped > sample(&before, series),
            "{series} {scraped} vs show stats {event} {shown}"
        );
    }

    // /stats.json is the `show stats --json` document.
    let json: serde_json::Value = serde_json::from_str(&get(&t, "/stats.json")).unwrap();
    assert!(counter(&json, "events", "outbound") >= sample(&after, "xlat_outbound_total"));
    assert_eq!(json["workers"][0]["worker"], 0);

    // A reload moves the listener (e2e_reload has the refusals): the new address serves
    // the same numbers, the old one no longer answers.
    let moved_cfg = cfg.replace(METRICS, "127.0.0.1:9642");
    assert_ne!(moved_cfg, cfg);
    std::fs::write(&t.config, moved_cfg).unwrap();
    let r = t.xlat_cmd(&["reload"]).check();
    assert!(r.stdout.contains("metrics.listen"), "{}", r.stdout);
    let moved = t.http_get(&t.ns_gw, "http://127.0.0.1:9642/metrics");
    assert!(
        moved.ok() && moved.stdout.contains("# TYPE xlat_sessions gauge"),
        "{}",
        moved.stderr
    );
    let old = t.http_get(&t.ns_gw, &format!("http://{METRICS}/metrics"));
    assert!(!old.ok(), "the old address still serves");
}

/// A WebDriver command to the chromedriver listening on 127.0.0.1:9515 in GW; its `value`.
fn webdriver(t: &Topo, method: &str, path: &str, body: &str) -> serde_json::Value {
    let url = format!("http://127.0.0.1:9515{path}");
    let mut args = vec!["curl", "-sS", "--max-time", "60", "-X", method, &url];
    if method == "POST" {
        args.extend(["-H", "Content-Type: application/json", "-d", body]);
    }
    let r = t.ns(&t.ns_gw, 70, &args);
    assert!(
        r.ok(),
        "webdriver {method} {path}: {}\n{}",
        r.stdout,
        r.stderr
    );
    let v: serde_json::Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("webdriver {method} {path}: not JSON ({e}): {}", r.stdout));
    assert!(
        v["value"]["error"].is_null(),
        "webdriver {method} {path} failed: {}",
        r.stdout
    );
    v["value"].clone()
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn live_page_draws_in_headless_chromium() {
    require_root_with("chromium", "chromium");
    require_root_with("chromedriver", "chromium-driver");
    let mut t = Topo::new(Opts::default());
    let cfg = config(&t);
    t.start_xlat(&cfg);
    let (inn, gw) = (t.ns_in.clone(), t.ns_gw.clone());
    // Traffic while the page polls: 60 pings, 0.2 s apart (12 s).
    let ping = t.spawn(
        &inn,
        "ping",
        &["ping", "-n", "-c", "60", "-i", "0.2", "-W", "2", OUT_ADDR],
    );

    // A real headless Chromium driven over WebDriver, in real time: the page polls
    // /stats.json once a second as it would on an operator's screen.
    let driver = t.spawn(&gw, "chromedriver", &["chromedriver", "--port=9515"]);
    t.wait_listening(&gw, "tcp", 9515, Some(driver));
    let profile = t.dir.join("chromium-profile");
    std::fs::create_dir_all(&profile).unwrap();
    let caps = serde_json::json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
        "binary": "/usr/bin/chromium",
        "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 format!("--user-data-dir={}", profile.display()), "--window-size=1280,1100"]
    }}}});
    let session = webdriver(&t, "POST", "/session", &caps.to_string());
    let id = session["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no sessionId: {session}"))
        .to_string();
    let base = format!("/session/{id}");
    webdriver(
        &t,
        "POST",
        &format!("{base}/url"),
        &format!("{{\"url\":\"http://{METRICS}/\"}}"),
    );

    // What the page shows: its marker attributes and status line.
    let read = |t: &Topo| {
        webdriver(
            t,
            "POST",
            &format!("{base}/execute/sync"),
            r#"{"script":"const d = document.body.dataset; return {drawn: Number(d.drawn || 0), error: d.error || null, packets: Number(d.packetsIn || 0), rate: d.packetsRate === undefined || d.packetsRate === '' ? null : Number(d.packetsRate), status: document.getElementById('status').textContent};","args":[]}"#,
        )
    };
    let mut seen = serde_json::Value::Null;
    let mut max_rate = 0.0f64;
    let done = poll(Duration::from_secs(20), Duration::from_millis(500), || {
        seen = read(&t);
        assert!(seen["error"].is_null(), "the page shows an error: {seen}");
        max_rate = max_rate.max(seen["rate"].as_f64().unwrap_or(0.0));
        seen["drawn"].as_u64().unwrap_or(0) >= 4 && max_rate > 0.0
    });
    assert!(
        done,
        "the page did not draw the traffic within 20 s (drawn polls, packets in, last rate): {seen}"
    );
    assert!(seen["packets"].as_u64().unwrap_or(0) > 0, "{seen}");
    assert!(
        seen["status"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("{} worker(s)", workers_wanted().unwrap_or(1))),
        "{seen}"
    );

    // A screenshot, kept under target/ as the test's artifact.
    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("e2e-metrics-live-page.png");
    let b64 = t.dir.join("shot.b64");
    let png64 = webdriver(&t, "GET", &format!("{base}/screenshot"), "");
    std::fs::write(&b64, png64.as_str().unwrap_or_default()).unwrap();
    run_host(
        30,
        &[
            "sh",
            "-c",
            &format!("base64 -d < {} > {}", b64.display(), shot.display()),
        ],
    )
    .check();
    let png = std::fs::read(&shot).unwrap_or_default();
    assert!(
        png.len() > 10_000 && png.starts_with(b"\x89PNG"),
        "no screenshot at {} ({} bytes)",
        shot.display(),
        png.len()
    );
    eprintln!("screenshot: {} ({seen})", shot.display());
    webdriver(&t, "DELETE", &base, "");
    t.stop(driver);
    t.stop(ping);
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn a_metrics_address_in_use_stops_the_start_before_the_tun() {
    require_root();
    let mut t = Topo::new(Opts::default());
    let cfg = config(&t);
    let gw = t.ns_gw.clone();
    // Something else holds the port in GW.
    let holder = t.spawn(
        &gw,
        "holder",
        &["socat", "TCP-LISTEN:9641,bind=127.0.0.1,fork", "-"],
    );
    t.wait_listening(&gw, "tcp", 9641, Some(holder));
    let path = t.config.clone();
    let p = t.spawn_xlat(&gw, "xlat", &["run"], &path, &cfg);
    let status = t.proc(p).wait_exit(Duration::from_secs(15));
    let err = t.proc(p).stderr_text();
    assert!(
        status.is_some_and(|s| !s.success()),
        "xlat run did not fail: {status:?}\n{err}"
    );
    assert!(
        err.contains("metrics.listen: cannot listen on 127.0.0.1:9641")
            && err.contains(&path.display().to_string()),
        "the error does not name the file and key:\n{err}"
    );
    // It failed before touching the TUN device.
    let link = t.ns(&gw, 5, &["ip", "link", "show", "dev", &t.tun]);
    assert!(!link.ok(), "the TUN device was created: {}", link.stdout);
}
