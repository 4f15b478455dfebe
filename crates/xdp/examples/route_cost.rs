//! What one `RTM_GETROUTE` round trip costs the AF_XDP slow path's resolver (the kernel's
//! answer to `ip route get`), the unit of its work per new destination: `cargo run --release
//! -p xlat-xdp --example route_cost [N]` asks about N (default 100,000) documentation-range
//! addresses (198.18.0.0/15) and prints the median and spread of five rounds in ns a call.
//! It sends no packet. Run it inside a namespace of its own to ask an empty table
//! (`unshare -n`), or in the gateway's to ask its real one.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

fn main() -> std::io::Result<()> {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
        .max(1);
    let mut nl = xlat_xdp::nexthop::Netlink::open()?;
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut routed = 0u32;
        for i in 0..n {
            let a = IpAddr::V4(Ipv4Addr::from(0xC612_0000 | (i & 0x1_ffff)));
            if matches!(nl.route(a), Ok(Some(_))) {
                routed += 1;
            }
        }
        let ns = t.elapsed().as_nanos() as f64 / f64::from(n);
        println!("{n} route lookups ({routed} with a unicast route): {ns:.0} ns each");
        rounds.push(ns);
    }
    rounds.sort_by(f64::total_cmp);
    println!(
        "median {:.0} ns a lookup [{:.0}..{:.0}]; a refresh of 65,536 destinations a second: {:.1} % of a core",
        rounds[2],
        rounds[0],
        rounds[4],
        rounds[2] * 65_536.0 / 1e9 * 100.0
    );
    Ok(())
}
