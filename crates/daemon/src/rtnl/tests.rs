//! Tests of the steps' words, the requests and (as root) the socket.

use std::time::Instant;

use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::neighbour::NeighbourState;

use super::*;

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn parse(s: &str) -> Step {
    match Step::parse(&words(s)) {
        Ok(st) => st,
        Err(e) => panic!("{s:?}: {e}"),
    }
}

/// Every form older xlat versions wrote to their journals (as `ip` words) reads back,
/// and prints as it will be journaled now.
#[test]
fn journal_words_of_older_versions_read_back() {
    let cases = [
        (
            "route del unreachable 198.19.0.0/24 metric 4294967295",
            "route del unreachable 198.19.0.0/24 metric 4294967295",
        ),
        (
            "route del unreachable default table 4400 metric 4294967295",
            "route del unreachable default table 4400 metric 4294967295",
        ),
        (
            "route del default dev xlat0 table 4400",
            "route del default dev xlat0 table 4400",
        ),
        (
            "route del throw 198.18.0.0/24 table 4400",
            "route del throw 198.18.0.0/24 table 4400",
        ),
        (
            "route del 198.19.0.10/32 dev xlat0",
            "route del 198.19.0.10/32 dev xlat0",
        ),
        (
            "-6 route del unreachable 64:ff9b::/96 metric 4294967295",
            "-6 route del unreachable 64:ff9b::/96 metric 4294967295",
        ),
        (
            "-6 route del 64:ff9b::/96 dev xlat0",
            "-6 route del 64:ff9b::/96 dev xlat0",
        ),
        (
            "rule del from 198.18.0.0/24 lookup 4400 pref 4400",
            "rule del from 198.18.0.0/24 lookup 4400 pref 4400",
        ),
        (
            "neigh del proxy 192.0.2.7 dev eth0",
            "neigh del proxy 192.0.2.7 dev eth0",
        ),
        (
            "-4 rule del pref 9 iif xlat0 lookup local",
            "rule del iif xlat0 lookup local pref 9",
        ),
        (
            "-4 route del 192.0.2.1/32 dev xlat0 table 4400",
            "route del 192.0.2.1/32 dev xlat0 table 4400",
        ),
        (
            "-4 rule del pref 10 to 192.0.2.1/32 ipproto 41 lookup 4400",
            "rule del to 192.0.2.1/32 ipproto 41 lookup 4400 pref 10",
        ),
        (
            "-4 rule del pref 10 to 192.0.2.1/32 ipproto icmp lookup 4400",
            "rule del to 192.0.2.1/32 ipproto icmp lookup 4400 pref 10",
        ),
        (
            "-4 rule add pref 0 lookup local",
            "rule add lookup local pref 0",
        ),
        (
            "-4 rule del pref 20 lookup local",
            "rule del lookup local pref 20",
        ),
        (
            "-6 addr del 2002:c000:201::1/48 dev xlat0",
            "-6 addr del 2002:c000:201::1/48 dev xlat0",
        ),
        (
            "-6 route del 2002::/16 dev xlat0",
            "-6 route del 2002::/16 dev xlat0",
        ),
        (
            "-6 route del default dev xlat0 metric 2002",
            "-6 route del default dev xlat0 metric 2002",
        ),
    ];
    for (old, now) in cases {
        let s = parse(old);
        assert_eq!(s.to_string(), now, "{old}");
        assert_eq!(parse(now), s, "{now} reads back to the same step");
    }
}

#[test]
fn parsed_steps_are_typed() {
    assert_eq!(
        parse("-6 route replace default dev xlat0 metric 2002"),
        Step::route(
            Op::Replace,
            RouteKind::Unicast,
            Net::v6(0, 0),
            Some("xlat0"),
            TABLE_MAIN
        )
        .metric(2002)
    );
    assert_eq!(
        parse("-6 addr add fe80::5efe:c000:201/64 dev t nodad").obj,
        Obj::Addr {
            addr: "fe80::5efe:c000:201"
                .parse()
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            len: 64,
            dev: "t".into(),
            nodad: true
        }
    );
}

#[test]
fn words_outside_the_vocabulary_are_refused() {
    for bad in [
        "",
        "route",
        "link set dev eth0 up",
        "route frobnicate 1.2.3.4/32",
        "route del 1.2.3.4/33",
        "route del 1.2.3.4/32 via 1.1.1.1",
        "rule del from 1.2.3.0/24 pref 1",
        "rule del from 1.2.3.0/24 lookup x pref 1",
        "neigh del 1.2.3.4 dev eth0",
        "route del unreachable",
        "route del 1.2.3.4/32 dev",
    ] {
        assert!(Step::parse(&words(bad)).is_err(), "{bad:?} accepted");
    }
}

fn test_links() -> Links {
    Links::new([("lo".to_string(), 1), ("xlat0".to_string(), 7)])
}

fn bytes(s: &Step) -> Vec<u8> {
    use netlink_packet_core::NetlinkSerializable;
    let (m, _) = request(s, &test_links())
        .unwrap_or((RouteNetlinkMessage::GetRoute(RouteMessage::default()), 0));
    let mut b = vec![0; m.buffer_len()];
    m.serialize(&mut b);
    b
}

#[test]
fn route_requests_are_built_as_ip_builds_them() {
    // unreachable 198.19.0.0/24 metric MAX, table 4400 (above 255: RTA_TABLE only).
    let s = parse("route replace unreachable 198.19.0.0/24 table 4400 metric 4294967295");
    let (m, flags) = match request(&s, &test_links()) {
        Ok(x) => x,
        Err(e) => panic!("errno {e}"),
    };
    assert_eq!(
        flags,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
    );
    let RouteNetlinkMessage::NewRoute(r) = m else {
        panic!("not RTM_NEWROUTE");
    };
    assert_eq!(r.header.table, 0);
    assert_eq!(r.header.destination_prefix_length, 24);
    assert_eq!(r.header.kind, RouteType::Unreachable);
    assert!(r.attributes.contains(&RouteAttribute::Table(4400)));
    assert!(r.attributes.contains(&RouteAttribute::Priority(u32::MAX)));
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type.
    let b = bytes(&s);
    assert_eq!(b.get(..8), Some(&[2u8, 24, 0, 0, 0, 3, 0, 7][..]));
    // The delete matches any protocol and scope.
    let b = bytes(&s.with_op(Op::Del));
    assert_eq!(b.get(..8), Some(&[2u8, 24, 0, 0, 0, 0, 255, 7][..]));
    // `default` has no RTA_DST.
    let d = parse("route del unreachable default table 4400 metric 1");
    let Ok((RouteNetlinkMessage::DelRoute(r), f)) = request(&d, &test_links()) else {
        panic!("not RTM_DELROUTE");
    };
    assert_eq!(f, NLM_F_REQUEST | NLM_F_ACK);
    assert!(!r
        .attributes
        .iter()
        .any(|a| matches!(a, RouteAttribute::Destination(_))));
}

#[test]
fn rule_and_neighbour_requests() {
    let s = parse("rule add from 198.18.0.0/24 lookup 4400 pref 4400");
    let Ok((RouteNetlinkMessage::NewRule(r), f)) = request(&s, &test_links()) else {
        panic!("not RTM_NEWRULE");
    };
    assert_eq!(f, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
    assert_eq!(r.header.src_len, 24);
    assert_eq!(r.header.action, RuleAction::ToTable);
    assert!(r.attributes.contains(&RuleAttribute::Priority(4400)));
    assert!(r.attributes.contains(&RuleAttribute::Table(4400)));
    // fib_rule_hdr: family, dst_len, src_len, tos, table, res1, res2, action.
    assert_eq!(bytes(&s).get(..8), Some(&[2u8, 0, 24, 0, 0, 0, 0, 1][..]));
    let local = parse("rule del lookup local pref 0");
    assert_eq!(
        bytes(&local).get(..8),
        Some(&[2u8, 0, 0, 0, 255, 0, 0, 1][..])
    );
    // A proxy entry on a known device builds; one on a missing device is ENODEV.
    let n = parse("neigh add proxy 192.0.2.7 dev lo");
    let Ok((RouteNetlinkMessage::NewNeighbour(m), _)) = request(&n, &test_links()) else {
        panic!("not RTM_NEWNEIGH");
    };
    assert!(m.header.flags.contains(NeighbourFlags::Proxy));
    assert_eq!(m.header.state, NeighbourState::Permanent);
    let gone = parse("neigh del proxy 192.0.2.7 dev xlat-no-such-dev");
    assert_eq!(request(&gone, &test_links()).err(), Some(libc::ENODEV));
}

/// Runs `args` (`ip` in the test's namespace set-up); must succeed.
fn sh(args: &[&str]) {
    let st = std::process::Command::new(args[0])
        .args(&args[1..])
        .status();
    assert!(st.is_ok_and(|s| s.success()), "{args:?}");
}

/// The real kernel, in a network namespace of its own (root; `ip netns`): the test
/// binary runs itself again inside it.
#[test]
#[ignore = "needs root: creates a network namespace"]
fn batches_against_the_kernel_in_a_namespace() {
    const INNER: &str = "XLAT_RTNL_TEST_INNER";
    if std::env::var_os(INNER).is_none() {
        let ns = format!("xlat-rtnl-{}", std::process::id());
        sh(&["ip", "netns", "add", &ns]);
        let exe = std::env::current_exe().map(|p| p.to_string_lossy().into_owned());
        let st = exe.and_then(|exe| {
            std::process::Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &ns,
                    &exe,
                    "--exact",
                    "--include-ignored",
                    "--nocapture",
                ])
                .arg("rtnl::tests::batches_against_the_kernel_in_a_namespace")
                .env(INNER, "1")
                .status()
        });
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &ns])
            .status();
        assert!(
            st.is_ok_and(|s| s.success()),
            "the run inside the namespace failed"
        );
        return;
    }
    sh(&["ip", "link", "set", "lo", "up"]);
    sh(&[
        "ip", "link", "add", "xr0", "type", "veth", "peer", "name", "xr1",
    ]);
    sh(&["ip", "addr", "add", "198.18.0.1/24", "dev", "xr0"]);
    sh(&[
        "ip",
        "-6",
        "addr",
        "add",
        "2001:2::1/64",
        "dev",
        "xr0",
        "nodad",
    ]);
    sh(&["ip", "link", "set", "xr0", "up"]);
    sh(&["ip", "link", "set", "xr1", "up"]);

    // Lookups.
    let got = route_get(&[
        "198.18.0.7"
            .parse()
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        "203.0.113.1"
            .parse()
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        "198.18.0.1"
            .parse()
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        "2001:2::7"
            .parse()
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
    ]);
    assert_eq!(
        got,
        [Some("xr0".to_string()), None, None, Some("xr0".to_string())]
    );
    assert!(rules4().is_ok_and(|r| r
        .iter()
        .any(|x| x.pref == 0 && x.table == TABLE_LOCAL && x.plain)));

    // 2,000 routes and their fail-closed twins in one batch.
    let mut steps = Vec::new();
    for i in 0..2000u32 {
        let dst = Net::v4(0xc613_0000 | i, 32);
        steps.push(
            Step::route(Op::Replace, RouteKind::Unreachable, dst, None, TABLE_MAIN)
                .metric(u32::MAX),
        );
        steps.push(Step::route(
            Op::Replace,
            RouteKind::Unicast,
            dst,
            Some("xr0"),
            TABLE_MAIN,
        ));
    }
    let t = Instant::now();
    let r = apply(&steps, false);
    eprintln!("4,000 routes added in {:?}", t.elapsed());
    assert_eq!(r.ok(), 4000, "{:?}", r.first_error());
    let shown = std::process::Command::new("ip")
        .args(["-4", "route", "show", "table", "main"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains(" 198.19.") || l.starts_with("198.19."))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(shown, 4000);

    // A duplicate rule is EEXIST, named; a second delete is ENOENT; both benign.
    let rule = parse("rule add from 198.18.0.0/24 lookup 4400 pref 4400");
    assert_eq!(apply(std::slice::from_ref(&rule), false).ok(), 1);
    let again = apply(std::slice::from_ref(&rule), false);
    let e = again.first_error().cloned();
    assert!(
        e.as_ref()
            .is_some_and(|e| e.errno == libc::EEXIST && e.is_benign()),
        "{e:?}"
    );
    assert!(e.is_some_and(|e| e
        .to_string()
        .contains("rule add from 198.18.0.0/24 lookup 4400 pref 4400")));
    let del = rule.with_op(Op::Del);
    assert_eq!(apply(&[del.clone(), del.clone()], true).ok(), 1);

    // The kernel's own words come with its error (NETLINK_EXT_ACK), in the error's text.
    let bad = Step::route(
        Op::Add,
        RouteKind::Unicast,
        Net::v4(0xc613_0101, 24),
        Some("xr0"),
        TABLE_MAIN,
    );
    let r = apply(std::slice::from_ref(&bad), false);
    let e = r
        .first_error()
        .cloned()
        .expect("a prefix with host bits is refused");
    assert_eq!(e.errno, libc::EINVAL, "{e}");
    assert!(
        e.why.as_deref().is_some_and(|w| w.contains("prefix")),
        "the kernel's message: {e}"
    );
    assert!(e.to_string().contains("(the kernel: "), "{e}");

    // Without force, the batch stops after a failing chunk; with force it goes on.
    let missing = Step::route(
        Op::Del,
        RouteKind::Throw,
        Net::v4(0xc0000200, 24),
        None,
        4400,
    );
    let mut mixed = vec![missing.clone()];
    mixed.extend(std::iter::repeat_n(missing, CHUNK));
    mixed.push(parse("route replace throw 192.0.2.0/24 table 4400"));
    let r = apply(&mixed, false);
    assert!(
        r.results.last().is_some_and(Option::is_none),
        "sent after a failed chunk"
    );
    let r = apply(&mixed, true);
    assert_eq!(r.ok(), 1);

    // Proxy ARP, listed back; a step on a missing device fails alone.
    let proxy = parse("neigh add proxy 198.18.0.50 dev xr0");
    let gone = parse("neigh add proxy 198.18.0.51 dev xlat-no-such");
    let r = apply(&[gone, proxy.clone()], true);
    assert_eq!(r.first_error().map(|e| e.errno), Some(libc::ENODEV));
    assert_eq!(r.ok(), 1);
    assert!(proxy_neighbours()
        .is_ok_and(|p| p.contains(&(Ipv4Addr::new(198, 18, 0, 50), "xr0".to_string()))));
    assert_eq!(apply(&[proxy.with_op(Op::Del)], false).ok(), 1);

    // IPv6 address and routes, and the teardown of everything.
    let a = parse("-6 addr add 2001:2:0:1::1/64 dev xr0 nodad");
    assert_eq!(apply(std::slice::from_ref(&a), false).ok(), 1);
    assert_eq!(apply(&[a.with_op(Op::Del)], false).ok(), 1);
    let undo: Vec<Step> = steps.iter().rev().map(|s| s.with_op(Op::Del)).collect();
    let t = Instant::now();
    let r = apply(&undo, true);
    eprintln!("4,000 routes removed in {:?}", t.elapsed());
    assert_eq!(r.ok(), 4000, "{:?}", r.first_error());
}

/// `ext_ack_message` reads the kernel's text from an error with TLVs, capped or not, and
/// nothing from an acknowledgement, a message without TLVs, or bytes that lie about lengths.
#[test]
fn extended_acknowledgements_are_read_and_bad_ones_ignored() {
    use super::socket::ext_ack_message;
    // An NLMSG_ERROR: header (len, type 2, flags, seq, pid), error -22, the echoed request's
    // header (16 bytes, its length 40: the request was 40 bytes), then TLVs.
    let build = |flags: u16, echoed_payload: usize, tlvs: &[(u16, &[u8])]| {
        let mut m = Vec::new();
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&7u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&(-22i32).to_ne_bytes());
        m.extend_from_slice(&(16 + echoed_payload as u32).to_ne_bytes());
        m.extend_from_slice(&[0; 12]);
        m.extend(std::iter::repeat_n(0u8, echoed_payload));
        for (t, v) in tlvs {
            m.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
            m.extend_from_slice(&t.to_ne_bytes());
            m.extend_from_slice(v);
            while m.len() % 4 != 0 {
                m.push(0);
            }
        }
        let n = m.len() as u32;
        m[..4].copy_from_slice(&n.to_ne_bytes());
        m
    };
    let msg: &[u8] = b"Invalid prefix for given prefix length\0";
    // Capped (NETLINK_CAP_ACK): the TLVs right after the echoed header; an offset first.
    let m = build(0x300, 0, &[(2, &4u32.to_ne_bytes()), (1, msg)]);
    assert_eq!(
        ext_ack_message(&m).as_deref(),
        Some("Invalid prefix for given prefix length")
    );
    // Not capped: after the whole echoed request.
    let m = build(0x200, 24, &[(1, msg)]);
    assert_eq!(
        ext_ack_message(&m).as_deref(),
        Some("Invalid prefix for given prefix length")
    );
    // No TLV flag, an ACK's type, no message attribute: nothing.
    assert_eq!(ext_ack_message(&build(0x100, 0, &[(1, msg)])), None);
    let mut ack = build(0x300, 0, &[(1, msg)]);
    ack[4] = 3;
    assert_eq!(ext_ack_message(&ack), None);
    assert_eq!(ext_ack_message(&build(0x300, 0, &[(2, &[0; 4])])), None);
    // Lies: an attribute longer than the message, a huge echoed length, truncation, control
    // characters (dropped), an over-long text (cut).
    let mut m = build(0x300, 0, &[(1, msg)]);
    let at = 36;
    m[at..at + 2].copy_from_slice(&400u16.to_ne_bytes());
    assert_eq!(ext_ack_message(&m), None);
    let mut m = build(0x200, 0, &[(1, msg)]);
    m[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
    assert_eq!(ext_ack_message(&m), None);
    for cut in 0..40 {
        assert_eq!(ext_ack_message(&build(0x300, 0, &[(1, msg)])[..cut]), None);
    }
    let m = build(0x300, 0, &[(1, b"bad\x1b[31m\nline\0")]);
    assert_eq!(ext_ack_message(&m).as_deref(), Some("bad[31mline"));
    let long = vec![b'a'; 1000];
    let m = build(0x300, 0, &[(1, &long)]);
    assert_eq!(ext_ack_message(&m).map(|t| t.len()), Some(200));
}
