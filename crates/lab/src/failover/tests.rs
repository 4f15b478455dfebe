//! Unit tests of the failover experiment's texts, parsers and analysis.

use super::*;
fn flow(sent: &[f64], replied: &[Option<f64>], sources: &[(f64, &str)]) -> FlowRecord {
    FlowRecord {
        sent: sent.to_vec(),
        replied: replied.to_vec(),
        sources: sources.iter().map(|(t, s)| (*t, s.to_string())).collect(),
    }
}

#[test]
fn analysis_counts_lost_remapped_and_the_gap() {
    let sent: Vec<f64> = (0..40).map(|i| i as f64 * 0.1).collect();
    // Survives: replies stop at 2.0..2.3, come back from 2.3.
    let ok: Vec<Option<f64>> = sent
        .iter()
        .map(|s| (*s < 2.0 || *s >= 2.3).then_some(s + 0.01))
        .collect();
    // Lost: nothing after the failure at 2.0.
    let lost: Vec<Option<f64>> = sent
        .iter()
        .map(|s| (*s < 2.0).then_some(s + 0.01))
        .collect();
    let flows = vec![
        flow(&sent, &ok, &[(0.0, "198.19.0.100:40000")]),
        flow(
            &sent,
            &ok,
            &[(0.0, "198.19.0.100:40001"), (2.35, "198.19.0.100:9999")],
        ),
        flow(&sent, &lost, &[(0.0, "198.19.0.100:40002")]),
        // Too young at the failure: not established.
        flow(&[1.5, 1.6], &[Some(1.51), None], &[]),
    ];
    let o = analyse(&flows, 2.0);
    assert_eq!(o.established, 3);
    assert_eq!(o.established_stopped, 1);
    assert_eq!(o.established_remapped, 1);
    // The remapped flow is lost to the server too.
    assert_eq!(o.established_lost, 2);
    // Last reply before the failure at 1.91, the next at 2.31.
    let g = o.failover_ms.unwrap();
    assert!((g - 400.0).abs() < 1e-6, "{g}");
    assert_eq!(o.sent_after, 60);
    assert_eq!(o.lost_after, 3 + 3 + 20);
}

#[test]
fn nothing_established_gives_no_gap() {
    let o = analyse(&[], 1.0);
    assert_eq!(o, FlowOutcome::default());
}

#[test]
fn payload_round_trips_and_rejects_others() {
    let p = payload(7, 123_456);
    assert_eq!(parse_payload(&p), Some((7, 123_456)));
    assert_eq!(parse_payload(&p[..10]), None);
    let mut q = p;
    q[0] = b'Y';
    assert_eq!(parse_payload(&q), None);
}

#[test]
fn notify_log_and_iperf_output_are_read() {
    let l = parse_notify_log(
        "master begin 1700000000.100\nmaster end 1700000000.150\nnoise\nbackup start 1\n",
    );
    assert_eq!(l.len(), 2);
    assert!(l[0].1 && !l[1].1);
    assert!((l[1].2 - 1_700_000_000.15).abs() < 1e-3);
    let j = r#"{"end":{"sum_received":{"bytes":1000},"sum_sent":{"retransmits":3}}}"#;
    assert_eq!(parse_iperf(j), Some((true, 1000, 3)));
    assert_eq!(parse_iperf(r#"{"error":"x"}"#), Some((false, 0, 0)));
    assert_eq!(parse_iperf("garbage"), None);
    let st = "cache internal:\ncurrent active connections:\t 0\n\ncache external:\n\
              current active connections:\t        2165\nconnections created:\t 2165\n";
    assert_eq!(conntrackd_external_active(st), Some(2165));
    assert_eq!(
        conntrackd_external_active("cache internal:\ncurrent active connections: 5\n"),
        None
    );
}

#[test]
fn options_are_checked() {
    let ok = FailOpts {
        devices: vec![Dev::Xlat],
        variants: vec![Variant::Kill],
        flows: 10,
        flow_pps: 100.0,
        new_rates: vec![1000.0],
        after: 3.0,
        download_rate: 500_000,
        iperf: false,
        dir: PathBuf::from("/tmp/x"),
        xlat_bin: None,
    };
    ok.validate().unwrap();
    for bad in [
        FailOpts {
            flows: 0,
            ..ok.clone()
        },
        FailOpts {
            flows: 1001,
            ..ok.clone()
        },
        FailOpts {
            new_rates: vec![],
            ..ok.clone()
        },
        FailOpts {
            new_rates: vec![1e9],
            ..ok.clone()
        },
        FailOpts {
            after: 1.0,
            ..ok.clone()
        },
        FailOpts {
            devices: vec![],
            ..ok.clone()
        },
        FailOpts {
            flow_pps: 0.0,
            ..ok.clone()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
    assert!(Dev::parse("tayga").is_err() && Variant::parse("reboot").is_err());
}

#[test]
fn configs_name_their_gateway() {
    let d = Path::new("/tmp/f");
    let x = xlat_config(1, "xl1", "/tmp/f/b.sock");
    assert!(
        x.contains("listen = \"198.18.254.2:4790\"") && x.contains("peer = \"198.18.254.1:4790\"")
    );
    let c = conntrackd_config(0, d);
    assert!(
        c.contains("IPv4_Destination_Address 198.18.254.2")
            && c.contains("/tmp/f/conntrackd-0.ctl")
    );
    let n = notify_script(Dev::Kernel, 1, d, Path::new("/x"), Path::new("/s"));
    assert!(n.contains("-c; ") && n.contains("-n"));
    let k = keepalived_config(0, Path::new("/tmp/f/notify-0.sh"));
    assert!(k.contains("priority 150") && k.contains("advert_int 0.1"));
    assert!(nft_snat(false).ends_with("snat to 198.19.0.100\n  }\n}\n"));
    assert!(nft_snat(true).contains("snat to 198.19.0.100 random\n"));
}
