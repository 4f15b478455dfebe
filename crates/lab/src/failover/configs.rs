//! The failover testbed's configuration texts: xlat, nftables, conntrackd, keepalived and
//! the notify hook.

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------------
// Configuration texts.

/// xlat's configuration in gateway `k` (0 = a, 1 = b).
pub fn xlat_config(k: usize, tun: &str, socket: &str) -> String {
    let (me, peer) = sync_addrs(k);
    format!(
        r#"# written by xlat lab failover: gateway {k}
[tun]
name = "{tun}"
mtu = 1500
auto_routes = true

[nat44]
inside = ["198.18.0.0/24"]
pool = ["{POOL}/32"]
mode = "napt"

[limits]
# Every new session of the lab comes from the one client host.
max_sessions_per_host = 1000000

[control]
socket = "{socket}"

[sync]
listen = "{me}:{SYNC_PORT}"
peer = "{peer}:{SYNC_PORT}"
role = "auto"
key = "{KEY}"
"#
    )
}

pub(super) fn sync_addrs(k: usize) -> (Ipv4Addr, Ipv4Addr) {
    let a = Ipv4Addr::new(198, 18, 254, 1);
    let b = Ipv4Addr::new(198, 18, 254, 2);
    if k == 0 {
        (a, b)
    } else {
        (b, a)
    }
}

/// The kernel device's NAT: inside hosts leaving by the outside link get the pool address
/// (`random`: and a random port, not their own when it is free).
pub fn nft_snat(random: bool) -> String {
    format!(
        "table ip xlatlab {{\n  chain post {{\n    type nat hook postrouting priority srcnat; policy accept;\n    oifname \"out\" ip saddr 198.18.0.0/24 snat to {POOL}{}\n  }}\n}}\n",
        if random { " random" } else { "" }
    )
}

/// conntrackd in FTFW mode over the sync link (after the package's
/// examples/sync/ftfw/conntrackd.conf, unicast UDP, UDP and ICMP synced too).
pub fn conntrackd_config(k: usize, dir: &Path) -> String {
    let (me, peer) = sync_addrs(k);
    let f = |x: &str| {
        dir.join(format!("conntrackd-{k}.{x}"))
            .display()
            .to_string()
    };
    format!(
        r#"# written by xlat lab failover: gateway {k}
Sync {{
    Mode FTFW {{
        DisableExternalCache Off
    }}
    UDP {{
        IPv4_address {me}
        IPv4_Destination_Address {peer}
        Port {CONNTRACKD_PORT}
        Interface sy
        SndSocketBuffer 1249280
        RcvSocketBuffer 1249280
        Checksum on
    }}
}}
General {{
    HashSize 32768
    HashLimit 262144
    LogFile {log}
    Syslog off
    LockFile {lock}
    UNIX {{
        Path {ctl}
    }}
    NetlinkBufferSize 2097152
    NetlinkBufferSizeMaxGrowth 8388608
    Filter From Userspace {{
        Protocol Accept {{
            TCP
            UDP
            ICMP
        }}
        Address Ignore {{
            IPv4_address 127.0.0.1
            IPv4_address {VIP_IN}
            IPv4_address {VIP_OUT}
            IPv4_address 198.18.0.2
            IPv4_address 198.18.0.3
            IPv4_address 198.18.1.2
            IPv4_address 198.18.1.3
            IPv4_address 198.18.254.0/24
        }}
    }}
}}
"#,
        log = f("log"),
        lock = f("lock"),
        ctl = f("ctl"),
    )
}

/// The keepalived notify script of gateway `k`: stamps the time, runs the device's part of
/// the role change, stamps again (`<state> <begin|end> <unix seconds>` lines in `log`).
pub fn notify_script(dev: Dev, k: usize, dir: &Path, xlat: &Path, socket: &Path) -> String {
    let log = dir.join(format!("notify-{k}.log")).display().to_string();
    let (master, backup, fault) = match dev {
        Dev::Xlat => {
            let x = format!("{} sync role", xlat.display());
            let s = socket.display();
            (
                format!("{x} active --socket {s}"),
                format!("{x} standby --socket {s}"),
                format!("{x} standby --socket {s}"),
            )
        }
        Dev::Kernel | Dev::KernelRandom => {
            let c = format!(
                "conntrackd -C {}",
                dir.join(format!("conntrackd-{k}.conf")).display()
            );
            (
                // conntrackd's primary-backup.sh, "primary".
                format!("{c} -c; {c} -f; {c} -R; {c} -B"),
                // "backup" (its restart of a dead conntrackd left out: the lab started it).
                format!("{c} -t; {c} -n"),
                format!("{c} -t"),
            )
        }
    };
    format!(
        r#"#!/bin/sh
# written by xlat lab failover: keepalived's notify hook of gateway {k}
echo "$1 begin $(date +%s.%N)" >> {log}
case "$1" in
  master) {master} ;;
  backup) {backup} ;;
  fault) {fault} ;;
esac
echo "$1 end $(date +%s.%N)" >> {log}
"#
    )
}

/// keepalived of gateway `k` (a preferred, nopreempt, 100 ms adverts), as in docs/FAILOVER.md.
pub fn keepalived_config(k: usize, notify: &Path) -> String {
    let me = Ipv4Addr::new(198, 18, 0, 2 + k as u8);
    let peer = Ipv4Addr::new(198, 18, 0, 3 - k as u8);
    let n = notify.display();
    format!(
        r#"global_defs {{
    router_id xlat-lab-{k}
    vrrp_version 3
    script_user root
    vrrp_garp_master_delay 0
    vrrp_garp_master_repeat 3
}}
vrrp_instance XLAT {{
    state BACKUP
    interface in
    virtual_router_id 51
    priority {prio}
    advert_int 0.1
    nopreempt
    unicast_src_ip {me}
    unicast_peer {{
        {peer}
    }}
    virtual_ipaddress {{
        {VIP_IN}/24 dev in
        {VIP_OUT}/24 dev out
    }}
    notify_master "{n} master"
    notify_backup "{n} backup"
    notify_fault "{n} fault"
}}
"#,
        prio = if k == 0 { 150 } else { 100 },
    )
}

/// Parses a notify log: (state, begin or end, unix seconds) per line; bad lines skipped.
pub fn parse_notify_log(text: &str) -> Vec<(String, bool, f64)> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() != 3 {
                return None;
            }
            let begin = match w[1] {
                "begin" => true,
                "end" => false,
                _ => return None,
            };
            Some((w[0].to_string(), begin, w[2].parse().ok()?))
        })
        .collect()
}
