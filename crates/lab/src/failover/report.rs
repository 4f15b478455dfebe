//! The failover run's report: experiments for results.json and the printed tables, and the
//! `xlat lab run failover` command.

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------------
// `xlat lab run failover`: results.json and the report.

pub(super) fn one(v: f64) -> Spread {
    Spread::of(&[v])
}

/// The lab's tables: the failures, and the sync cost by new-session rate.
pub fn experiments(outs: &[Outcome], o: &FailOpts) -> Vec<Experiment> {
    let mut rows = Vec::new();
    for x in outs {
        let mut m = BTreeMap::new();
        let f = &x.flows;
        m.insert("established".into(), one(f.established as f64));
        m.insert("established_lost".into(), one(f.established_lost as f64));
        m.insert(
            "established_stopped".into(),
            one(f.established_stopped as f64),
        );
        m.insert(
            "established_remapped".into(),
            one(f.established_remapped as f64),
        );
        if let Some(v) = f.failover_ms {
            m.insert("failover_ms".into(), one(v));
        }
        if let Some(v) = f.failover_ms_median {
            m.insert("failover_ms_median".into(), one(v));
        }
        if let Some(v) = x.vrrp_ms {
            m.insert("vrrp_ms".into(), one(v));
        }
        if let Some(v) = x.takeover_ms {
            m.insert("takeover_ms".into(), one(v));
        }
        m.insert("udp_lost_after".into(), one(f.lost_after as f64));
        m.insert("udp_sent_after".into(), one(f.sent_after as f64));
        m.insert("tcp_resets".into(), one(x.tcp_resets as f64));
        m.insert(
            "download_ok".into(),
            one(f64::from(u8::from(x.download_ok))),
        );
        if let Some(ok) = x.iperf_ok {
            m.insert("iperf3_ok".into(), one(f64::from(u8::from(ok))));
        }
        if let Some(r) = x.iperf_retransmits {
            m.insert("iperf3_retransmits".into(), one(r as f64));
        }
        m.insert("new_sent".into(), one(x.new_sent as f64));
        if let Some(v) = x.standby_entries {
            m.insert("standby_entries".into(), one(v as f64));
        }
        m.insert("new_arrived".into(), one(x.new_arrived as f64));
        m.insert("new_sent_after".into(), one(x.new_sent_after as f64));
        m.insert("new_arrived_after".into(), one(x.new_arrived_after as f64));
        if let Some(s) = x.sync.first() {
            if let Some(b) = s.bytes_per_event {
                m.insert("sync_bytes_per_event".into(), one(b));
            }
            m.insert("sync_pps".into(), one(s.link_pps));
            m.insert("sync_cpu_pct".into(), one(s.cpu_pct));
        }
        rows.push(Row {
            device: format!("{} ({})", x.device, x.variant),
            size: "UDP + TCP".into(),
            metrics: m,
            notes: x.notes.clone(),
            ..Row::default()
        });
    }
    let mut sync_rows = Vec::new();
    for x in outs.iter().filter(|x| x.variant == o.variants[0].name()) {
        for s in &x.sync {
            let mut m = BTreeMap::new();
            m.insert("new_per_s".into(), one(s.new_per_s));
            if let Some(v) = s.events_per_s {
                m.insert("events_per_s".into(), one(v));
            }
            if let Some(v) = s.bytes_per_event {
                m.insert("sync_bytes_per_event".into(), one(v));
            }
            m.insert("sync_pps".into(), one(s.link_pps));
            m.insert("sync_link_bytes_per_s".into(), one(s.link_bytes_per_s));
            m.insert("sync_cpu_pct".into(), one(s.cpu_pct));
            if let Some(v) = s.cpu_pct_of_datapath {
                m.insert("sync_cpu_pct_of_datapath".into(), one(v));
            }
            if let Some(v) = s.events_dropped {
                m.insert("events_dropped".into(), one(v as f64));
            }
            if let Some(v) = s.datagrams_resent {
                m.insert("datagrams_resent".into(), one(v as f64));
            }
            sync_rows.push(Row {
                device: x.device.clone(),
                size: "UDP".into(),
                x: Some(s.new_rate),
                metrics: m,
                ..Row::default()
            });
        }
    }
    let method = format!(
        "Two gateways (a active, b standby) between a client and a server, keepalived (VRRP v3, 100 ms \
         adverts, unicast) in both owning the inside gateway address and the address the server routes \
         the pool to. xlat-nat44: xlat with [sync]; kernel-nat44: nftables snat to the pool address, \
         conntrackd FTFW, the notify hooks of conntrackd's primary-backup.sh. Established: {} UDP flows \
         ({} datagrams/s each, distinct source ports, echoed), a rate-limited HTTP download \
         (sha256 compared) and an iperf3 stream, all older than 1 s at the failure; new sessions \
         (one datagram to a new destination port) keep arriving at {} /s. kill = the active's \
         processes SIGKILLed and its links down; link-down = its links down only. \
         established_lost = flows stopped (no reply in the last second of sending) or remapped \
         (the server saw them from another outside endpoint after the failure: the session it \
         knew ended); failover_ms = the \
         longest time from the failure to a flow's first echo of a datagram sent after it; \
         vrrp_ms = failure to b's notify_master hook starting (keepalived's detection); \
         takeover_ms = that hook's run time (the gateway's own part); tcp_resets = RSTs the \
         client received (an nft counter); new_arrived = new-session datagrams the server \
         received (an nft counter), _after = of those sent after the failure.",
        o.flows, o.flow_pps, o.new_rates[0]
    );
    let sync_method = format!(
        "Each new-session rate for {SYNC_WINDOW} s before the failure. sync_bytes_per_event: \
         xlat: bytes_sent / events_sent of `xlat show sync --json` on the active (UDP payload, \
         HMAC included); kernel-nat44: UDP payload bytes on the sync link per new session (frames \
         minus 42 bytes each, conntrackd's acknowledgements and alive messages included). \
         sync_pps: frames the active sent on the sync link per second. sync_cpu_pct: CPU time \
         of the active's xlat-sync thread (schedstat) or of conntrackd (the whole process) in \
         % of one CPU; sync_cpu_pct_of_datapath: xlat-sync over the xlat-worker threads. The \
         kernel's NAT runs in softirq and is not attributed."
    );
    vec![
        Experiment {
            name: "failover".into(),
            title: "Failover: the active gateway fails under established flows".into(),
            x_label: None,
            method,
            rows,
        },
        Experiment {
            name: "failover-sync".into(),
            title: "Failover: the cost of sync by new-session rate".into(),
            x_label: Some("new sessions/s".into()),
            method: sync_method,
            rows: sync_rows,
        },
    ]
}

/// The options from the command line (defaults: both devices, both variants, 50 flows at
/// 100/s, new sessions at 1,000 and 10,000/s, 4 s after the failure).
pub fn opts_from(o: &crate::RunOpts, dir: PathBuf) -> Result<FailOpts> {
    let devices = match &o.devices {
        Some(v) => v
            .iter()
            .map(|d| Dev::parse(d))
            .collect::<Result<Vec<_>>>()?,
        None => vec![Dev::Xlat, Dev::Kernel, Dev::KernelRandom],
    };
    let variants = match &o.variants {
        Some(v) => v
            .iter()
            .map(|d| Variant::parse(d))
            .collect::<Result<Vec<_>>>()?,
        None => vec![Variant::Kill, Variant::LinkDown],
    };
    let f = FailOpts {
        devices,
        variants,
        flows: o.flows.map(|f| f as usize).unwrap_or(50),
        flow_pps: o.rate.unwrap_or(100.0),
        new_rates: o
            .new_rates
            .clone()
            .unwrap_or_else(|| vec![1000.0, 10_000.0]),
        after: o.duration.unwrap_or(4.0),
        download_rate: 500_000,
        iperf: true,
        dir,
        xlat_bin: None,
    };
    f.validate()?;
    Ok(f)
}

/// `xlat lab run failover`: runs, writes `results/<stamp>-failover/`, prints the tables.
pub fn main_run(o: &crate::RunOpts) -> Result<PathBuf> {
    sys::install_stop_handler();
    let base = o.out.clone().unwrap_or_else(|| PathBuf::from("results"));
    let stamp = sys::utc_stamp();
    let dir = base.join(format!("{stamp}-failover"));
    let opts = opts_from(o, dir.join("runs"))?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let started = Instant::now();
    eprintln!(
        "xlat lab failover: {:?} x {:?}, {} flows; results in {}",
        opts.devices.iter().map(|d| d.name()).collect::<Vec<_>>(),
        opts.variants.iter().map(|d| d.name()).collect::<Vec<_>>(),
        opts.flows,
        dir.display()
    );
    let mut res = RunResults {
        schema: SCHEMA,
        name: "failover".into(),
        command_line: std::env::args().collect(),
        started_utc: stamp,
        machine: Machine::read(),
        settings: Settings {
            devices: opts.devices.iter().map(|d| d.name().to_string()).collect(),
            sizes: vec!["UDP + TCP".into()],
            trial_secs: opts.before() + opts.after,
            repeats: 1,
            flows: opts.flows as u32,
            ..Settings::default()
        },
        placement: format!(
            "both gateways, keepalived, conntrackd and the traffic share this machine's {} CPUs (no pinning)",
            sys::ncpus()
        ),
        ..RunResults::default()
    };
    res.versions
        .insert("xlat-lab".into(), env!("CARGO_PKG_VERSION").to_string());
    for (k, args) in [
        ("keepalived", &["keepalived", "--version"][..]),
        ("conntrackd", &["conntrackd", "-v"][..]),
    ] {
        if let Ok(v) = sys::cmd(5, args) {
            let s = format!("{}{}", v.stdout, v.stderr);
            if let Some(l) = s.lines().next() {
                res.versions.insert(k.into(), l.trim().to_string());
            }
        }
    }
    let outcome = run(&opts);
    res.wall_secs = started.elapsed().as_secs_f64();
    match &outcome {
        Ok(outs) => {
            res.experiments = experiments(outs, &opts);
            crate::save_outcome(&dir, outs)?;
        }
        Err(e) => res.incomplete = Some(format!("{e:#}")),
    }
    crate::finish(&dir, &res)?;
    outcome.map(|_| dir)
}
