//! End to end with the AF_XDP slow path (`[dataplane] slow_path = "af_xdp"`, issue 25): the
//! NAT44 namespaces (IN -- GW running `xlat run` -- OUT) with the XDP program on GW's two veth
//! devices and no recipes (fast path off), so every packet the engine translates should come
//! from an AF_XDP socket and leave through one, never crossing the TUN device: a file fetched
//! over HTTP arrives intact (SHA-256) with the pool address at the server, pings are answered,
//! and the counters say which way the packets went. The whole NAT44, NAT64/SIIT, metrics and
//! logging suites also run with it on (`XLAT_E2E_AF_XDP=1`, see scripts/test.sh).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;

fn setup() -> Topo {
    require_root();
    let mut t = Topo::new(Opts {
        af_xdp: true,
        ..Opts::default()
    });
    let cfg = t.default_config();
    assert!(cfg.contains("slow_path = \"af_xdp\""), "{cfg}");
    t.start_xlat(&cfg);
    t
}

/// The worker counters of the AF_XDP path and the TUN reads: enough to read a failure by.
fn brief(st: &serde_json::Value) -> String {
    let names = [
        "afxdp_rx",
        "afxdp_tx",
        "afxdp_fallback_unresolved",
        "afxdp_fallback_no_socket",
        "afxdp_fallback_tx_full",
        "afxdp_fallback_ttl",
        "afxdp_rx_invalid",
        "afxdp_kernel_drops",
    ];
    let w: Vec<String> = names
        .iter()
        .map(|n| format!("{n}={}", worker_counter(st, n)))
        .collect();
    format!(
        "{} xdp_to_afxdp={} io={}",
        w.join(" "),
        xdp(st, "xdp_to_afxdp"),
        st["io"]
    )
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn http_and_ping_cross_af_xdp_not_the_tun_device() {
    let mut t = setup();
    let srv = t.fetch_random_file(2_097_152);
    let log = t.proc(srv).stderr_text();
    assert_http_client(&log, "/blob.bin", POOL_ADDR);
    // ICMP echo is the engine's too (no recipe ever carries it).
    let inn = t.ns_in.clone();
    let r = t.ping_all(&inn, 5, &[], OUT_ADDR);
    assert_all_replies(&r, 5);

    let st = t.stats();
    let rx = worker_counter(&st, "afxdp_rx");
    let tx = worker_counter(&st, "afxdp_tx");
    let tun_rx = st["io"]["tun_rx_packets"].as_u64().unwrap_or(u64::MAX);
    eprintln!("after 2 MiB and 5 pings: {}", brief(&st));
    // 2 MiB is ~1,450 full segments plus ACKs and the pings; all of them are the engine's.
    assert!(
        rx >= 1500,
        "only {rx} packets came over AF_XDP: {}",
        brief(&st)
    );
    assert!(
        tx >= 1500,
        "only {tx} packets left over AF_XDP: {}",
        brief(&st)
    );
    assert!(xdp(&st, "xdp_to_afxdp") >= rx, "{}", brief(&st));
    // The TUN device carries only what fell back (the first packets to a new destination).
    assert!(
        tun_rx * 20 < rx,
        "the TUN device still read {tun_rx} packets beside {rx} over AF_XDP: {}",
        brief(&st)
    );
    let fallbacks = worker_counter(&st, "afxdp_fallback_unresolved")
        + worker_counter(&st, "afxdp_fallback_no_socket")
        + worker_counter(&st, "afxdp_fallback_tx_full");
    assert!(fallbacks * 20 < tx, "{}", brief(&st));
    assert_eq!(worker_counter(&st, "afxdp_rx_invalid"), 0, "{}", brief(&st));
}
