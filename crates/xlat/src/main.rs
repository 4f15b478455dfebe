//! `xlat`: the one binary. Subcommands check a configuration, run the gateway, show a running
//! gateway's state through its control socket, and translate captures offline.
//!
//! Exit codes: 0 success; 1 failure (including "no daemon" for `show`); 2 an invalid
//! configuration file or invalid command line. docs/CLI.md shows every command's output.

#![forbid(unsafe_code)]

mod ipfix_log;
mod lookup;
mod show;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use xlat_daemon::config::{Config, ConfigFileError, DEFAULT_SOCKET};
use xlat_daemon::control::{self, ClientError, Request, Response};
use xlat_engine::flow::{Proto, Translator};
use xlat_engine::SessionFilter;

#[derive(Parser)]
#[command(
    name = "xlat",
    version,
    about = "A userspace IP translator (NAT44, NAT64, SIIT) for Linux"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// The doc comments here are `--help` text, not rustdoc: `[dns64]` names a TOML table.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Subcommand)]
enum Cmd {
    /// Validate a configuration file; print "FILE: ok" and any warnings.
    Check {
        /// Configuration file (TOML).
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: PathBuf,
        /// The other nodes of a scale-out cluster (docs/SCALE-OUT.md): their configuration
        /// files, checked too, and refused when a node's outside addresses overlap this one's.
        #[arg(long = "cluster", value_name = "FILE")]
        cluster: Vec<PathBuf>,
    },
    /// Run the gateway in the foreground until SIGINT or SIGTERM.
    Run {
        /// Configuration file (TOML).
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: PathBuf,
    },
    /// Run only the DNS64 proxy ([dns64] of the file) in the foreground until SIGINT or SIGTERM.
    Dns64 {
        /// Configuration file (TOML); only its [dns64] table is read.
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: PathBuf,
    },
    /// Show a running gateway's state.
    Show {
        #[command(subcommand)]
        what: ShowCmd,
    },
    /// Make a running gateway read its configuration file again and apply what changed, all
    /// or nothing (as SIGHUP does); exit 2 when the file is refused.
    Reload {
        #[command(flatten)]
        target: Target,
    },
    /// Session sync (`[sync]`, stateful failover): set this gateway's role. keepalived's
    /// notify hooks run it: `xlat sync role active` (forward, with the synced table) and
    /// `xlat sync role standby` (drop the sessions, take the active's table).
    Sync {
        #[command(subcommand)]
        what: SyncCmd,
    },
    /// Print the next packets' paths through the engine, like VPP's packet trace: worker and
    /// where each came from, translator, headers before, session lookup (found, created,
    /// static, none), headers after, verdict (forwarded, ICMP error sent back, dropped with
    /// its reason and explanation). Waits until COUNT packets matched or the timeout.
    /// Packets of flows the XDP fast path carries never reach the engine and are not seen.
    Trace {
        /// Packets to record (1 to 10000).
        #[arg(long, value_name = "N", default_value_t = 10,
              value_parser = clap::value_parser!(u64).range(1..=10_000))]
        count: u64,
        /// Only packets with this inside host's address as source or destination, before or
        /// after translation (IPv4 for NAT44, IPv6 for NAT64).
        #[arg(long, value_name = "ADDR")]
        inside: Option<std::net::IpAddr>,
        /// Only packets with this outside address (a pool or a remote address) as source or
        /// destination, before or after translation.
        #[arg(long, value_name = "ADDR")]
        outside: Option<std::net::IpAddr>,
        /// Only this protocol (icmp: ICMP and ICMPv6).
        #[arg(long, value_parser = ["tcp", "udp", "icmp"])]
        proto: Option<String>,
        /// Stop waiting after this many seconds (1 to 3600).
        #[arg(long, value_name = "SECS", default_value_t = 10,
              value_parser = clap::value_parser!(u64).range(1..=3600))]
        timeout: u64,
        /// Print the records as a JSON array.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Remove state from a running gateway.
    Clear {
        #[command(subcommand)]
        what: ClearCmd,
    },
    /// Who held an outside address and port at a time, from the NAT event log (syslog lines
    /// a collector stored; docs/LOGGING.md): every session, mapping or port block open then.
    /// With deterministic NAT44 or NAT64 (`deterministic = true`, RFC 7422) computed from
    /// the configuration file instead (`-c FILE`), no log needed; `--inside` then gives a
    /// subscriber's outside address and ports. Exit 1 when nobody held it.
    #[command(group(clap::ArgGroup::new("source").required(true).args(["config", "log"])))]
    Lookup {
        /// The outside endpoint, ADDRESS:PORT (a pool address; ICMP: the identifier).
        #[arg(long, value_name = "ADDR:PORT", required_unless_present = "inside")]
        outside: Option<String>,
        /// Deterministic NAT only: the inside address (IPv4: NAT44, IPv6: NAT64) whose outside
        /// address and ports to print.
        #[arg(long, value_name = "ADDR", conflicts_with_all = ["outside", "log"], requires = "config")]
        inside: Option<std::net::IpAddr>,
        /// The time, RFC 3339 in UTC: 2026-11-26T14:02:11Z (fractions allowed); with `--log`.
        #[arg(long, value_name = "TIME", requires = "log")]
        at: Option<String>,
        /// Only this protocol: tcp, udp or icmp.
        #[arg(long, value_parser = ["tcp", "udp", "icmp"])]
        proto: Option<String>,
        /// Log files (syslog lines or stored IPFIX messages, plain or gzipped), or directories
        /// whose files are all read.
        #[arg(long, value_name = "FILE-or-DIR", requires = "at")]
        log: Vec<PathBuf>,
        /// Deterministic NAT: the configuration file in force at the time asked about (the
        /// answer is computed from it).
        #[arg(
            short = 'c',
            long = "config",
            value_name = "FILE",
            conflicts_with = "log"
        )]
        config: Option<PathBuf>,
    },
    /// Translate a pcap capture offline with the configuration's NAT settings.
    Translate {
        /// Configuration file (TOML); [control] is ignored, and of [tun] only mtu (NAT64, SIIT).
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: PathBuf,
        /// Input capture (pcap; link type RAW, IPV4, IPV6 or ETHERNET).
        #[arg(long = "in", value_name = "IN.pcap")]
        input: PathBuf,
        /// Output capture (pcap, link type RAW).
        #[arg(long = "out", value_name = "OUT.pcap")]
        output: PathBuf,
        /// Print the statistics as JSON instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Measure translators in a namespace testbed (needs root): list | run | reproduce | report.
    Lab(Box<xlat_lab::LabArgs>),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell), generated from
    /// these definitions: `xlat completions bash > /etc/bash_completion.d/xlat`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page xlat(1) (roff), generated from these definitions:
    /// `xlat man | gzip > /usr/share/man/man1/xlat.1.gz`.
    Man,
}

#[derive(Subcommand)]
enum ShowCmd {
    /// The translation table (static entries, then sessions).
    Sessions {
        /// Print a JSON array of sessions.
        #[arg(long)]
        json: bool,
        /// At most this many rows (the filter and the limit apply inside the daemon).
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        #[command(flatten)]
        select: Select,
        #[command(flatten)]
        target: Target,
    },
    /// Session sync with the peer gateway (`[sync]`): role, peer, in sync, counters.
    Sync {
        /// Print the state as one JSON object.
        #[arg(long)]
        json: bool,
        /// Explain each counter.
        #[arg(long)]
        explain: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Counters, table sizes and drop reasons.
    Stats {
        /// Print the statistics as one JSON object.
        #[arg(long)]
        json: bool,
        /// Explain each drop reason listed.
        #[arg(long)]
        explain: bool,
        /// List every drop reason, including those never seen.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Subcommand)]
enum SyncCmd {
    /// Make the gateway active or standby; prints the sync state after.
    Role {
        #[arg(value_parser = ["active", "standby"])]
        role: String,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Subcommand)]
enum ClearCmd {
    /// End the dynamic sessions the options select (static entries stay); prints how many.
    Sessions {
        /// Every dynamic session (required when no other selection is given).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        select: Select,
        #[command(flatten)]
        target: Target,
    },
}

/// Which sessions: every option given must match.
#[derive(Args)]
struct Select {
    /// Inside host (IPv4 for NAT44, IPv6 for NAT64).
    #[arg(long, value_name = "ADDR")]
    inside: Option<std::net::IpAddr>,
    /// Outside (pool) address.
    #[arg(long, value_name = "ADDR")]
    outside: Option<std::net::Ipv4Addr>,
    /// Remote address (IPv4).
    #[arg(long, value_name = "ADDR")]
    remote: Option<std::net::Ipv4Addr>,
    /// A port or ICMP identifier on any side.
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// Protocol.
    #[arg(long, value_parser = ["tcp", "udp", "icmp"])]
    proto: Option<String>,
    /// Translator.
    #[arg(long, value_parser = ["nat44", "nat64"])]
    translator: Option<String>,
}

impl Select {
    fn filter(&self) -> SessionFilter {
        SessionFilter {
            inside: self.inside,
            outside: self.outside,
            remote: self.remote,
            port: self.port,
            proto: self.proto.as_deref().map(|p| match p {
                "tcp" => Proto::Tcp,
                "udp" => Proto::Udp,
                _ => Proto::Icmp,
            }),
            translator: self.translator.as_deref().map(|t| match t {
                "nat44" => Translator::Nat44,
                _ => Translator::Nat64,
            }),
        }
    }
}

/// Which daemon to ask.
#[derive(Args)]
struct Target {
    /// Take the control socket path from this configuration file's [control].socket.
    #[arg(
        short = 'c',
        long = "config",
        value_name = "FILE",
        conflicts_with = "socket"
    )]
    config: Option<PathBuf>,
    /// Control socket path (default /run/xlat.sock).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

impl Target {
    fn socket(&self) -> Result<PathBuf> {
        if let Some(s) = &self.socket {
            return Ok(s.clone());
        }
        if let Some(c) = &self.config {
            return Ok(Config::load(c)?.socket);
        }
        Ok(PathBuf::from(DEFAULT_SOCKET))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = if matches!(cli.cmd, Cmd::Run { .. } | Cmd::Dns64 { .. }) {
        "info"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    match dispatch(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<ConfigFileError>().is_some()
                || e.downcast_ref::<BadFile>().is_some()
            {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// An error that, like an invalid configuration file, exits 2 (a refused reload).
#[derive(Debug)]
struct BadFile(anyhow::Error);

impl std::fmt::Display for BadFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for BadFile {}

/// Writes to stdout; a closed pipe (`xlat show sessions | head`) is not an error.
fn print(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(()),
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<String> {
    let mut s = serde_json::to_string_pretty(v).context("encoding JSON")?;
    s.push('\n');
    Ok(s)
}

fn dispatch(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Check { config, cluster } => {
            let cfg = Config::load(&config)?;
            let others = cluster
                .iter()
                .map(|f| Config::load(f))
                .collect::<Result<Vec<_>, _>>()?;
            let clash = xlat_daemon::cluster::overlaps(&cfg, &others);
            if !clash.is_empty() {
                return Err(anyhow::Error::new(BadFile(anyhow::anyhow!(
                    clash.join("\n")
                ))));
            }
            let mut out = format!("{}: ok\n", cfg.file);
            for w in cfg.warnings() {
                out.push_str(&format!("{}: warning: {w}\n", cfg.file));
            }
            for a in cfg.advice() {
                out.push_str(&format!("{}: note: {a}\n", cfg.file));
            }
            for d in cfg.deterministic_summary() {
                out.push_str(&format!("{}: note: {d}\n", cfg.file));
            }
            print(&out)
        }
        Cmd::Run { config } => {
            let cfg = Config::load(&config)?;
            xlat_daemon::run::run(&cfg)
        }
        Cmd::Dns64 { config } => {
            let d = xlat_daemon::config::load_dns64(&config)?;
            xlat_daemon::run::run_dns64(&config.display().to_string(), &d)
        }
        Cmd::Show { what } => show(what),
        Cmd::Lookup {
            outside,
            inside,
            at,
            proto,
            log,
            config,
        } => match (config, outside, at) {
            (Some(c), outside, _) => lookup_computed(&c, outside.as_deref(), inside),
            (None, Some(outside), Some(at)) => lookup_cmd(&outside, &at, proto, &log),
            _ => Err(anyhow::Error::new(BadFile(anyhow::anyhow!(
                "give --outside ADDR:PORT with --at TIME and --log FILE (from the log), or -c FILE (deterministic NAT)"
            )))),
        },
        Cmd::Reload { target } => {
            let socket = target.socket()?;
            match ask(&socket, &Request::Reload {}) {
                Ok(Response::Reloaded(done)) => {
                    for w in &done.warnings {
                        eprintln!("warning: {w}");
                    }
                    print(&reload_summary(&done))
                }
                Ok(_) => bail!(
                    "{}: the daemon sent an answer of the wrong kind",
                    socket.display()
                ),
                Err(e) => match e.downcast_ref::<ClientError>() {
                    // Refused: the file is at fault, as with `xlat check`: exit 2.
                    Some(ClientError::Refused { .. }) => Err(anyhow::Error::new(BadFile(e))),
                    _ => Err(e),
                },
            }
        }
        Cmd::Sync {
            what: SyncCmd::Role { role, target },
        } => {
            let socket = target.socket()?;
            let Response::Sync(st) = ask(&socket, &Request::SyncRole { role })? else {
                bail!(
                    "{}: the daemon sent an answer of the wrong kind",
                    socket.display()
                );
            };
            print(&show::sync_status(&st, false))
        }
        Cmd::Clear {
            what:
                ClearCmd::Sessions {
                    all,
                    select,
                    target,
                },
        } => {
            let filter = select.filter();
            if filter.any() && !all {
                bail!("xlat clear sessions: say which (--inside, --outside, --remote, --port, --proto, --translator), or --all for every dynamic session");
            }
            let socket = target.socket()?;
            let Response::Cleared(n) = ask(&socket, &Request::Clear { filter })? else {
                bail!(
                    "{}: the daemon sent an answer of the wrong kind",
                    socket.display()
                );
            };
            print(&format!("{n} sessions cleared\n"))
        }
        Cmd::Trace {
            count,
            inside,
            outside,
            proto,
            timeout,
            json: as_json,
            target,
        } => {
            let socket = target.socket()?;
            let filter = xlat_engine::trace::TraceFilter {
                inside,
                outside,
                proto: proto.as_deref().map(|p| match p {
                    "tcp" => Proto::Tcp,
                    "udp" => Proto::Udp,
                    _ => Proto::Icmp,
                }),
            };
            let count = usize::try_from(count).unwrap_or(usize::MAX);
            let req = Request::Trace {
                filter,
                count,
                timeout_secs: timeout,
            };
            let wait = std::time::Duration::from_secs(timeout.saturating_add(10));
            let answer = control::request_waiting(&socket, &req, wait).map_err(|e| match e {
                ClientError::NoDaemon(_) | ClientError::Permission(_) => anyhow::Error::new(e),
                e => anyhow::Error::new(e).context("asking the xlat daemon"),
            })?;
            let Response::Trace(entries) = answer else {
                bail!(
                    "{}: the daemon sent an answer of the wrong kind",
                    socket.display()
                );
            };
            if as_json {
                print(&json(&entries)?)
            } else {
                print(&show::trace_text(&entries, count, timeout))
            }
        }
        Cmd::Translate {
            config,
            input,
            output,
            json: as_json,
        } => translate(&config, &input, &output, as_json),
        Cmd::Lab(args) => xlat_lab::main(*args),
        Cmd::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "xlat",
                &mut out,
            );
            print(&String::from_utf8_lossy(&out))
        }
        Cmd::Man => {
            let mut out = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
                .render(&mut out)
                .context("rendering the man page")?;
            print(&String::from_utf8_lossy(&out))
        }
    }
}

fn ask(socket: &Path, req: &Request) -> Result<Response> {
    control::request(socket, req).map_err(|e| match e {
        ClientError::NoDaemon(_) | ClientError::Permission(_) => anyhow::Error::new(e),
        e => anyhow::Error::new(e).context("asking the xlat daemon"),
    })
}

fn show(what: ShowCmd) -> Result<()> {
    match what {
        ShowCmd::Sync {
            json: as_json,
            explain,
            target,
        } => {
            let socket = target.socket()?;
            let Response::Sync(st) = ask(&socket, &Request::SyncStatus {})? else {
                bail!(
                    "{}: the daemon sent an answer of the wrong kind",
                    socket.display()
                );
            };
            if as_json {
                print(&json(&st)?)
            } else {
                print(&show::sync_status(&st, explain))
            }
        }
        ShowCmd::Sessions {
            json: as_json,
            limit,
            select,
            target,
        } => {
            let socket = target.socket()?;
            let req = Request::Sessions {
                limit,
                filter: select.filter(),
            };
            let Response::Sessions(rows) = ask(&socket, &req)? else {
                bail!(
                    "{}: the daemon sent an answer of the wrong kind",
                    socket.display()
                );
            };
            if as_json {
                print(&json(&rows)?)
            } else {
                print(&show::sessions_table(&rows))
            }
        }
        ShowCmd::Stats {
            json: as_json,
            explain,
            all,
            target,
        } => {
            let socket = target.socket()?;
            let Response::Stats(stats) = ask(&socket, &Request::Stats {})? else {
                bail!(
                    "{}: the daemon sent an answer of the wrong kind",
                    socket.display()
                );
            };
            if as_json {
                print(&json(&stats)?)
            } else {
                let mut text = show::stats_text(&stats.engine, Some(&stats.io), explain, all);
                if let Some(d) = &stats.dns64 {
                    text.push_str(&show::dns64_text(&d.fields()));
                }
                if let Some(f) = &stats.fast_path {
                    text.push_str(&show::fast_path_text(f, explain, all));
                }
                if let Some(l) = &stats.log {
                    text.push_str(&show::log_text(l, explain));
                }
                if !stats.workers.is_empty() {
                    text.push_str(&show::workers_text(&stats.workers, explain, all));
                }
                print(&text)
            }
        }
    }
}

fn translate(config: &Path, input: &Path, output: &Path, as_json: bool) -> Result<()> {
    let cfg = Config::load(config)?;
    for w in cfg.rfc_warnings() {
        eprintln!("{}: warning: {w}", cfg.file);
    }
    // Offline runs are reproducible: seed 0 unless the file sets one.
    let stats = xlat_daemon::translate::translate(cfg.engine_config(0), input, output)?;
    if as_json {
        print(&json(&stats)?)
    } else {
        print(&show::translate_summary(
            &input.display().to_string(),
            &output.display().to_string(),
            &stats.engine,
            &stats.pcap,
        ))
    }
}

/// `xlat lookup`: reads the logs, prints every session, mapping or port block that held the
/// endpoint at the time (docs/CLI.md).
/// `--outside ADDR:PORT`, or exit 2 naming what is wrong.
fn outside_endpoint(outside: &str) -> Result<(std::net::Ipv4Addr, u16)> {
    outside
        .rsplit_once(':')
        .and_then(|(a, p)| Some((a.parse().ok()?, p.parse().ok()?)))
        .ok_or_else(|| {
            anyhow::Error::new(BadFile(anyhow::anyhow!(
                "--outside {outside:?}: expected ADDRESS:PORT like 198.19.0.100:40312"
            )))
        })
}

/// `xlat lookup -c FILE`: deterministic NAT44 or NAT64 (RFC 7422 2) answers from the
/// configuration alone -- the subscriber whose range holds an outside endpoint, or a
/// subscriber's range.
fn lookup_computed(
    file: &std::path::Path,
    outside: Option<&str>,
    inside: Option<std::net::IpAddr>,
) -> Result<()> {
    use std::net::IpAddr;
    let cfg = Config::load(file)?;
    let det44 = cfg.nat44.as_ref().and_then(|n| n.deterministic_map());
    let det64 = cfg.nat64.as_ref().and_then(|n| n.deterministic_map());
    if det44.is_none() && det64.is_none() {
        return Err(anyhow::Error::new(BadFile(anyhow::anyhow!(
            "{}: neither nat44.deterministic nor nat64.deterministic is on, so outside ports are not a function of the file; look it up in the NAT event log: xlat lookup --outside ADDR:PORT --at TIME --log DIR",
            cfg.file
        ))));
    }
    let range = |s: xlat_engine::deterministic::Slice| {
        format!(
            "{}:{}-{}",
            std::net::Ipv4Addr::from(s.addr),
            s.first,
            s.last
        )
    };
    // A subscriber as the operator knows it: an IPv4 address, or an IPv6 prefix.
    let name = |d: &xlat_engine::deterministic::Deterministic, a: IpAddr| match a {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) if d.subscriber_len() == 128 => a.to_string(),
        IpAddr::V6(a) => format!("{a}/{}", d.subscriber_len()),
    };
    let what = |v6: bool| {
        if v6 {
            "deterministic NAT64"
        } else {
            "deterministic NAT44, RFC 7422"
        }
    };
    if let Some(a) = inside {
        let (d, table) = match a {
            IpAddr::V4(_) => (det44.as_ref(), "nat44"),
            IpAddr::V6(_) => (det64.as_ref(), "nat64"),
        };
        let Some(s) = d.and_then(|d| d.of_inside_ip(a)) else {
            bail!(
                "{a} is in no {table}.inside prefix of {} (or {table}.deterministic is off)",
                cfg.file
            );
        };
        return print(&format!(
            "{a} -> {} ({}; {})\n",
            range(s),
            what(a.is_ipv6()),
            cfg.file
        ));
    }
    let (addr, port) = outside_endpoint(outside.unwrap_or_default())?;
    let a4 = u32::from(addr);
    // The pool the address is in names the table (they may not overlap).
    let d = match (&det44, &det64) {
        (Some(d), _)
            if cfg
                .nat44
                .as_ref()
                .is_some_and(|n| n.pool.iter().any(|p| p.contains(a4))) =>
        {
            Some(d)
        }
        (_, Some(d))
            if cfg
                .nat64
                .as_ref()
                .is_some_and(|n| n.pool4.iter().any(|p| p.contains(a4))) =>
        {
            Some(d)
        }
        _ => None,
    };
    match d.and_then(|d| Some((d, d.of_outside_ip(a4, port)?))) {
        Some((d, a)) => {
            let s = d.of_inside_ip(a).map(range).unwrap_or_default();
            print(&format!(
                "{addr}:{port} is {} (its range {s}; {}; {})\n",
                name(d, a),
                what(a.is_ipv6()),
                cfg.file
            ))
        }
        None => bail!(
            "{addr}:{port} is in no subscriber's range of {}: not a pool address of a deterministic table, a port outside its ports, or past the last subscriber",
            cfg.file
        ),
    }
}

fn lookup_cmd(outside: &str, at: &str, proto: Option<String>, logs: &[PathBuf]) -> Result<()> {
    let (addr, port) = outside_endpoint(outside)?;
    let t = lookup::parse_time(at).ok_or_else(|| {
        BadFile(anyhow::anyhow!(
            "--at {at:?}: expected an RFC 3339 UTC time like 2026-11-26T14:02:11Z"
        ))
    })?;
    let q = lookup::Query {
        addr,
        port,
        at: t,
        proto,
    };
    let (events, read) = lookup::read_logs(logs, &q)?;
    for w in &read.warnings {
        eprintln!("warning: {w}");
    }
    let hits = lookup::lookup(events, &q);
    if hits.is_empty() {
        let ipfix = &read.ipfix;
        bail!(
            "no session, mapping or port block held {outside} at {} in {} file(s) ({} syslog lines, {} IPFIX messages with {} records{})",
            lookup::show_time(t),
            read.files,
            read.lines,
            ipfix.messages,
            ipfix.records,
            match (ipfix.without_template, ipfix.bad) {
                (0, 0) => String::new(),
                (n, b) => format!("; {n} data sets without their template, {b} malformed messages"),
            }
        );
    }
    let mut out = format!("{outside} at {}:\n", lookup::show_time(t));
    for h in &hits {
        let fields: Vec<String> = h.fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let until = match &h.until {
            Some((end, Some(r))) => format!("{} ({r})", lookup::show_time(*end)),
            Some((end, None)) => lookup::show_time(*end),
            None => "open at the end of the log".to_string(),
        };
        out.push_str(&format!(
            "  {} {}\n    from {} until {until}\n",
            h.what,
            fields.join(" "),
            lookup::show_time(h.from)
        ));
    }
    print(&out)
}

/// `xlat reload`'s line: what changed, and the sessions it ended.
fn reload_summary(done: &xlat_daemon::control::Reloaded) -> String {
    if done.keys.is_empty() {
        return "reloaded: nothing changed\n".to_string();
    }
    let mut line = format!("reloaded: {} changed", done.keys.join(", "));
    if done.sessions_ended > 0 {
        line += &format!(
            "; {} sessions ended (no longer allowed: sessions_removed_by_reload)",
            done.sessions_ended
        );
    }
    line + "\n"
}
