//! End-to-end FTP ALG (`alg = ["ftp"]`): a real FTP server (vsftpd, anonymous, in the server
//! namespace) and a real client (curl) fetch a random file through `xlat run` in active and
//! passive mode, and the copy is compared (length and SHA-256).
//!
//! - NAT44 (the `common::Topo` topology, IN 198.18.0.20 -- GW -- OUT 198.19.0.2, pool
//!   198.19.0.100): active mode with EPRT |1| and with PORT (RFC 959 4.1.2, RFC 2428 2), which
//!   the ALG rewrites to the pool address and a mapped port the server can connect to, and
//!   passive mode with EPSV and with PASV (RFC 2428 3, RFC 959 4.1.2).
//! - NAT64 (the `common::Topo64` topology, IPv6-only client, IPv4-only server, pref64
//!   2001:2:0:64::/96, pool4 198.19.0.101): passive mode with EPSV, and active mode, where
//!   curl sends EPRT |2| and the ALG turns it into PORT with the pool4 address (RFC 6384).
//!
//! vsftpd refuses a PORT / EPRT address other than the control connection's peer (its
//! `port_promiscuous=NO` default), so without the ALG the active transfers fail: the tests
//! would catch an ALG that did nothing. Each test builds its own namespaces and removes them
//! (and kills its processes) on drop, also on failure; every command runs under `timeout`.
//! Needs root and vsftpd: `#[ignore]`d, run by scripts/test.sh.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::topo64::{GW6, SRV};
use common::{
    assert_same_file, missing_tools, require_root, run_host, workers_line, Lab, Opts, ProcId, Topo,
    Topo64, OUT_ADDR, POOL_ADDR,
};

const BLOB_LEN: u64 = 2 * 1024 * 1024 + 12345;
const CLI6: &str = "2001:2:0:1::10";
const SRV_V6: &str = "2001:2:0:64::c613:2";
const POOL4: &str = "198.19.0.101";

fn require_vsftpd() {
    require_root();
    let missing = missing_tools(&["vsftpd"]);
    assert!(
        missing.is_empty(),
        "the FTP end-to-end tests need vsftpd: apt-get install vsftpd (scripts/test.sh does)"
    );
}

/// Writes `len` random bytes to DIR/ftp/blob.bin and starts vsftpd in `ns` on `addr`:21,
/// anonymous and read-only, serving DIR/ftp, passive ports 40000-40099; waits until it
/// listens. Returns the server and the file.
fn start_vsftpd(lab: &mut Lab, ns: &str, addr: &str, len: u64) -> (ProcId, PathBuf) {
    let root = lab.dir.join("ftp");
    let empty = lab.dir.join("ftp-empty");
    for d in [&root, &empty] {
        std::fs::create_dir_all(d).unwrap();
    }
    let blob = root.join("blob.bin");
    let r = run_host(
        30,
        &[
            "sh",
            "-c",
            &format!(
                "head -c {len} /dev/urandom > {b} && chmod 755 {d} {root} {empty} && chmod 644 {b}",
                b = blob.display(),
                d = lab.dir.display(),
                root = root.display(),
                empty = empty.display()
            ),
        ],
    );
    assert!(r.ok(), "cannot write the file to serve: {}", r.stderr);
    let conf = lab.dir.join("vsftpd.conf");
    let log = lab.dir.join("vsftpd.log");
    std::fs::write(
        &conf,
        format!(
            "# written by the xlat FTP end-to-end tests\n\
             listen=YES\nlisten_ipv6=NO\nlisten_address={addr}\nbackground=NO\n\
             anonymous_enable=YES\nlocal_enable=NO\nwrite_enable=NO\nno_anon_password=YES\n\
             anon_root={root}\nsecure_chroot_dir={empty}\n\
             pasv_enable=YES\npasv_min_port=40000\npasv_max_port=40099\nport_enable=YES\n\
             connect_from_port_20=NO\nseccomp_sandbox=NO\n\
             xferlog_enable=YES\nvsftpd_log_file={log}\nlog_ftp_protocol=YES\n\
             dual_log_enable=NO\nsyslog_enable=NO\n",
            root = root.display(),
            empty = empty.display(),
            log = log.display(),
        ),
    )
    .unwrap();
    let conf_s = conf.display().to_string();
    let p = lab.spawn(ns, "vsftpd", &["vsftpd", &conf_s]);
    lab.wait_listening_on(ns, "tcp", addr, 21, Some(p));
    (p, blob)
}

/// Fetches `url` with curl in `ns` with the extra `args` (FTP mode); returns the file, or
/// panics with curl's output and the server's log.
fn curl_ftp(lab: &Lab, ns: &str, url: &str, args: &[&str], tag: &str) -> PathBuf {
    let got = lab.dir.join(format!("got-{tag}.bin"));
    let got_s = got.display().to_string();
    let mut v = vec![
        "curl",
        "-sS",
        "-v",
        "--fail",
        "--max-time",
        "45",
        "-o",
        &got_s,
    ];
    v.extend_from_slice(args);
    v.push(url);
    let r = lab.ns(ns, 60, &v);
    let log = std::fs::read_to_string(lab.dir.join("vsftpd.log")).unwrap_or_default();
    assert!(
        r.ok(),
        "curl {tag} failed: {}\n{}\n{}\nvsftpd log:\n{log}",
        r.cmd,
        r.stdout,
        r.stderr
    );
    got
}

fn event(stats: &serde_json::Value, name: &str) -> u64 {
    Topo::event(stats, name)
}

/// Each mode's fetch, checked, and the ALG counters it must move.
fn fetch_all(lab: &Lab, ns: &str, url: &str, blob: &Path, modes: &[(&str, &[&str])]) {
    for (tag, args) in modes {
        let got = curl_ftp(lab, ns, url, args, tag);
        assert_same_file(blob, &got);
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat44_curl_fetches_through_the_ftp_alg_active_and_passive() {
    require_vsftpd();
    let mut t = Topo::new(Opts::default());
    let cfg = t.default_config().replace(
        "filtering = \"address-dependent\"\n",
        "filtering = \"address-dependent\"\nalg = [\"ftp\"]\n",
    );
    assert!(cfg.contains("alg = [\"ftp\"]"), "{cfg}");
    t.start_xlat(&cfg);
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    let (_srv, blob) = start_vsftpd(&mut t, &out, OUT_ADDR, BLOB_LEN);
    let url = format!("ftp://{OUT_ADDR}/blob.bin");
    fetch_all(
        &t,
        &inn,
        &url,
        &blob,
        &[
            // curl's defaults: EPSV, and with -P EPRT first.
            ("epsv", &[]),
            ("pasv", &["--disable-epsv"]),
            ("eprt", &["-P", "-"]),
            ("port", &["-P", "-", "--disable-eprt"]),
        ],
    );
    let st = t.stats();
    assert!(
        event(&st, "alg_ftp_rewritten") >= 2,
        "EPRT and PORT should have been rewritten: {st}"
    );
    assert!(
        event(&st, "alg_ftp_data_opened") >= 2,
        "the server's active-mode connections should have used the ALG's mappings: {st}"
    );
    // The server saw the pool address, never the inside host.
    let log = std::fs::read_to_string(t.dir.join("vsftpd.log")).unwrap_or_default();
    assert!(
        log.contains(POOL_ADDR),
        "vsftpd log names no pool client:\n{log}"
    );
    assert!(
        !log.contains(common::IN_ADDR),
        "vsftpd saw the inside address:\n{log}"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat44_curl_reaches_a_port_forwarded_inside_ftp_server_passive_and_active() {
    // vsftpd on IN behind `static = [{ proto = "tcp", inside = IN:21, outside = pool:21 }]`:
    // its 227 and 229 replies name its own address and passive port, which the ALG maps
    // (RFC 959 4.2.2, RFC 2428 3); curl on OUT uses the 227's address (not the control
    // connection's), so the address rewrite is what it connects to.
    require_vsftpd();
    let mut t = Topo::new(Opts::default());
    let fwd = format!(
        "static = [{{ inside = \"{}\", outside = \"{}\" }}, {{ proto = \"tcp\", inside = \"{}:21\", outside = \"{POOL_ADDR}:21\" }}]\n",
        common::IN2_ADDR,
        common::STATIC_OUTSIDE,
        common::IN_ADDR
    );
    let cfg = t.default_config();
    let start = cfg.find("static = [").unwrap();
    let end = start + cfg[start..].find('\n').unwrap() + 1;
    let cfg = format!("{}{fwd}alg = [\"ftp\"]\n{}", &cfg[..start], &cfg[end..]);
    t.start_xlat(&cfg);
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    let (_srv, blob) = start_vsftpd(&mut t, &inn, common::IN_ADDR, BLOB_LEN);
    let url = format!("ftp://{POOL_ADDR}/blob.bin");
    fetch_all(
        &t,
        &out,
        &url,
        &blob,
        &[
            ("fwd-epsv", &[]),
            ("fwd-pasv", &["--disable-epsv", "--no-ftp-skip-pasv-ip"]),
            ("fwd-active", &["-P", "-"]),
        ],
    );
    let st = t.stats();
    assert!(
        event(&st, "alg_ftp_rewritten") >= 2,
        "the 229 and 227 replies should have been rewritten: {st}"
    );
    assert!(event(&st, "alg_ftp_data_opened") >= 2, "{st}");
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat44_without_the_alg_active_mode_fails() {
    // The control for the test above: without the ALG, vsftpd refuses the inside address
    // in PORT (or cannot reach it), so the active fetch must fail.
    require_vsftpd();
    let mut t = Topo::new(Opts::default());
    let cfg = t.default_config();
    t.start_xlat(&cfg);
    let (inn, out) = (t.ns_in.clone(), t.ns_out.clone());
    let (_srv, _blob) = start_vsftpd(&mut t, &out, OUT_ADDR, 4096);
    let got = t.dir.join("got-noalg.bin");
    let got_s = got.display().to_string();
    let url = format!("ftp://{OUT_ADDR}/blob.bin");
    let r = t.ns(
        &inn,
        40,
        &[
            "curl",
            "-sS",
            "--fail",
            "--max-time",
            "15",
            "-o",
            &got_s,
            "-P",
            "-",
            "--disable-eprt",
            &url,
        ],
    );
    assert!(
        !r.ok(),
        "active FTP crossed NAT44 without the ALG: {}",
        r.stderr
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh"]
fn nat64_curl_fetches_through_the_rfc6384_alg_active_and_passive() {
    require_vsftpd();
    let fast = std::env::var_os("XLAT_E2E_FAST_PATH").is_some();
    let mut lab = Topo64::new('p', CLI6, fast);
    lab.ip(&lab.cli, &["-6", "route", "add", "default", "via", GW6]);
    let dataplane = if fast {
        format!(
            "\n[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"{}\", \"{}\"]\n{}",
            lab.gw_cli_dev,
            lab.gw_srv_dev,
            workers_line()
        )
    } else if workers_line().is_empty() {
        String::new()
    } else {
        format!("\n[dataplane]\n{}", workers_line())
    };
    let config = format!(
        r#"# written by the xlat FTP end-to-end tests
[tun]
name = "{tun}"
mtu = 1500
auto_routes = true

[nat64]
prefix = "2001:2:0:64::/96"
pool4 = ["{POOL4}/32"]
filtering = "address-dependent"
alg = ["ftp"]

[control]
socket = "{sock}"
{dataplane}"#,
        tun = lab.tun,
        sock = lab.socket.display(),
    );
    let (gw, tun, path) = (lab.gw.clone(), lab.tun.clone(), lab.dir.join("xlat.toml"));
    let k = lab.spawn_xlat(&gw, "xlat", &["run"], &path, &config);
    lab.wait_xlat_ready(
        k,
        &gw,
        &tun,
        &[&["-6", "route", "show"], &["-4", "route", "show"]],
        &config,
    );
    let (cli, srv) = (lab.cli.clone(), lab.srv.clone());
    let (_srv, blob) = start_vsftpd(&mut lab, &srv, SRV, BLOB_LEN);
    let url = format!("ftp://[{SRV_V6}]/blob.bin");
    fetch_all(
        &lab,
        &cli,
        &url,
        &blob,
        &[
            // RFC 6384: EPSV passes the translator unchanged.
            ("epsv6", &[]),
            // curl on IPv6 sends EPRT |2|: the ALG makes it PORT with pool4.
            ("eprt6", &["-P", "-"]),
        ],
    );
    let st = common::stats_at(&lab.socket);
    assert!(
        event(&st, "alg_ftp_rewritten") >= 1,
        "EPRT |2| should have been rewritten: {st}"
    );
    assert!(event(&st, "alg_ftp_data_opened") >= 1, "{st}");
    let log = std::fs::read_to_string(lab.dir.join("vsftpd.log")).unwrap_or_default();
    assert!(
        log.contains(POOL4),
        "vsftpd log names no pool4 client:\n{log}"
    );
}
