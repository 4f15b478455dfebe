//! `xlat lab run scale-out`: the run directory, results.json and the report.

use super::*;

pub(super) fn one(v: f64) -> Spread {
    Spread::of(&[v])
}

/// The lab's tables for an outcome: the distribution over nodes and the two events.
pub fn experiments(o: &Outcome, settle: f64) -> Vec<Experiment> {
    let label = format!("UDP {PAYLOAD} B");
    let total: u64 = o.packets_per_node.iter().sum();
    let mut dist = Vec::new();
    for i in 0..o.nodes {
        let subs = o.before.iter().filter(|n| **n == Some(i)).count();
        let mut metrics = BTreeMap::new();
        metrics.insert("subscribers".into(), one(subs as f64));
        metrics.insert(
            "subscribers_pct".into(),
            one(100.0 * subs as f64 / o.subscribers.max(1) as f64),
        );
        metrics.insert("streams".into(), one((subs * o.flows) as f64));
        metrics.insert("packets".into(), one(o.packets_per_node[i] as f64));
        metrics.insert(
            "packets_pct".into(),
            one(if total > 0 {
                100.0 * o.packets_per_node[i] as f64 / total as f64
            } else {
                0.0
            }),
        );
        let b = o.buckets_before.get(&(i as u32 + 1)).copied().unwrap_or(0);
        metrics.insert("buckets".into(), one(b as f64));
        if let Some(ns) = o.cpu_ns_per_pkt[i] {
            metrics.insert("xlat_ns_per_pkt".into(), one(ns));
        }
        dist.push(Row {
            device: format!("node {i} (pool {})", o.pools[i]),
            size: label.clone(),
            metrics,
            ..Row::default()
        });
    }
    let unassigned = o.before.iter().filter(|n| n.is_none()).count();
    let mut ev_rows = Vec::new();
    for e in [&o.leave, &o.join].into_iter().chain(o.add.as_ref()) {
        let mut metrics = BTreeMap::new();
        metrics.insert("routing_ms".into(), one(e.routing_ms));
        if let Some(g) = e.group_ms {
            metrics.insert("group_ms".into(), one(g));
        }
        if let Some(x) = e.setup_ms {
            metrics.insert("setup_ms".into(), one(x));
        }
        metrics.insert("moved".into(), one(e.moved.len() as f64));
        metrics.insert("moved_pct".into(), one(e.moved_pct));
        metrics.insert("moved_other".into(), one(e.moved_other.len() as f64));
        metrics.insert("other_flows_lost".into(), one(e.other_flows_lost as f64));
        metrics.insert("other_flows_sent".into(), one(e.other_flows_sent as f64));
        metrics.insert("moved_flows_lost".into(), one(e.moved_flows_lost as f64));
        if let Some(r) = e.recover_ms {
            metrics.insert("recover_ms".into(), one(r));
        }
        let device = match e.what.as_str() {
            "leave" => format!("node {} leaves (xlat SIGKILLed)", e.node),
            "add" => format!(
                "node {} added (new, pool {})",
                e.node,
                o.pools.get(e.node).map(String::as_str).unwrap_or("?")
            ),
            _ => format!("node {} rejoins (xlat restarted)", e.node),
        };
        let mut notes = Vec::new();
        if let (true, Some(l)) = (e.what == "add", &o.late) {
            metrics.insert("late_subscribers".into(), one(l.subscribers.len() as f64));
            metrics.insert("late_on_new_node".into(), one(l.on_new_node as f64));
            metrics.insert("late_flows_sent".into(), one(l.sent as f64));
            metrics.insert("late_flows_lost".into(), one(l.lost as f64));
            notes.push(format!(
                "{} new subscribers started after the node joined: {} landed on it ({} echoes came back through it), the others on nodes {}",
                l.subscribers.len(),
                l.on_new_node,
                l.new_node_replied,
                l.node
                    .iter()
                    .filter(|n| **n != Some(e.node))
                    .map(|n| n.map_or("none".to_string(), |x| x.to_string()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !e.moved_other.is_empty() {
            notes.push(format!(
                "subscribers moved that were not node {}'s: {:?}",
                e.node, e.moved_other
            ));
        }
        ev_rows.push(Row {
            device,
            size: label.clone(),
            metrics,
            notes,
            ..Row::default()
        });
    }
    let mut method = format!(
        "{} xlat NAT44 nodes, each with its own pool prefix; the inside router spreads {} subscribers \
         ({} UDP streams each, one {PAYLOAD}-byte packet per stream every interval, echoed by the server) \
         over them with a resilient nexthop group hashing on the source address; the outside router \
         learns the pools by {}. Distribution: where each subscriber's streams arrived at the server \
         (by the pool their source address is in), packets the server received per node over {settle:.1} s \
         of steady state, and xlat's CPU time per packet crossing it (each packet crosses twice; \
         the nodes share this machine's CPUs and the load is light, so this includes wake-ups). \
         Leave: the node's xlat is SIGKILLed; routing = time until the outside router's route to its \
         pool is gone, then the inside router's health check (the lab) deletes its nexthop; recover = \
         until every stream of its subscribers arrived through another node. Rejoin: xlat restarted; \
         routing = time until the route is back, then the nexthop rejoins the group (only buckets idle \
         for the idle timer move to it, so established subscribers stay). Lost = stream packets sent in \
         the event's window without an echo.",
        o.nodes,
        o.subscribers,
        o.flows,
        o.routing
    );
    if unassigned > 0 {
        method.push_str(&format!(
            " {unassigned} subscribers had no single node in the steady state."
        ));
    }
    let mut load_rows = Vec::new();
    for st in &o.load {
        let size = format!("every {:.0} ms per stream", st.interval_ms);
        let mut projected = 0.0;
        let mut all_cap = true;
        for i in 0..o.nodes {
            let mut metrics = BTreeMap::new();
            metrics.insert("carried_pps".into(), one(st.carried_pps[i]));
            if let Some(ns) = st.cpu_ns_per_pkt[i] {
                metrics.insert("xlat_ns_per_pkt".into(), one(ns));
                // One dedicated core: 1e9 ns / cost per crossing, halved (out and back).
                let cap = 1e9 / ns / 2.0;
                metrics.insert("capacity_pps_projected".into(), one(cap));
                projected += cap;
            } else {
                all_cap = false;
            }
            if let Some(p) = st.cpu_pct[i] {
                metrics.insert("xlat_cpu_pct".into(), one(p));
            }
            load_rows.push(Row {
                device: format!("node {i}"),
                size: size.clone(),
                metrics,
                ..Row::default()
            });
        }
        let mut metrics = BTreeMap::new();
        metrics.insert("offered_pps".into(), one(st.offered_pps));
        metrics.insert("carried_pps".into(), one(st.carried_pps.iter().sum()));
        metrics.insert("replied_pct".into(), one(st.replied_pct));
        if all_cap {
            metrics.insert("capacity_pps_projected".into(), one(projected));
        }
        load_rows.push(Row {
            device: format!("all {} nodes", o.nodes),
            size,
            metrics,
            notes: vec![format!(
                "capacity_pps_projected is a projection, not a measurement: each node on its own dedicated core at the CPU cost per packet measured here ({} nodes x 1e9 / (2 x ns per crossing) round trips/s); in this run all nodes, the routers and the generator share {} CPUs",
                o.nodes,
                sys::ncpus()
            )],
            ..Row::default()
        });
    }
    let mut out = vec![
        Experiment {
            name: "scale-out-distribution".into(),
            title: format!(
                "Scale-out: {} subscribers x {} streams over {} nodes ({})",
                o.subscribers, o.flows, o.nodes, o.routing
            ),
            x_label: None,
            method,
            rows: dist,
        },
        Experiment {
            name: "scale-out-events".into(),
            title: if o.add.is_some() {
                "Scale-out: a node leaves and rejoins, then a new node is added".into()
            } else {
                "Scale-out: a node leaves and rejoins".into()
            },
            x_label: None,
            method: "The inside router's group follows the health check docs/scale-out/xlat-ecmp-health.sh \
                (BIRD on the inside router learns which nodes announce their pool); group_ms = time from \
                the event until the group changed. Add: a new namespace with xlat and BIRD, its own pool, \
                BGP neighbours added on both routers (birdc configure), the node in the health check's \
                list; moved/other_flows_* count the subscribers sending before it; then new subscribers \
                start (late_*)."
                .into(),
            rows: ev_rows,
        },
    ];
    if !load_rows.is_empty() {
        out.push(Experiment {
            name: "scale-out-load".into(),
            title: format!(
                "Scale-out: aggregate load through {} nodes, CPU per node (capacity is a projection)",
                o.nodes
            ),
            x_label: None,
            method: format!(
                "Every stream of the {} subscribers sends one {PAYLOAD}-byte packet per interval, echoed by \
                 the server; carried = packets per second the server received from each node's pool; \
                 xlat CPU from /proc of each node's xlat per packet crossing it (each packet crosses twice). \
                 capacity_pps_projected = 1e9 / (2 x ns per crossing): round trips per second one node \
                 would carry on a dedicated core; the aggregate is the sum over nodes. It is a projection: \
                 on this machine the nodes, routers, BIRD and the generator share {} CPUs.",
                o.subscribers,
                sys::ncpus()
            ),
            rows: load_rows,
        });
    }
    out
}

/// `xlat lab run scale-out`: runs, writes `results/<stamp>-scale-out/`, prints the tables.
pub fn main_run(o: &crate::RunOpts) -> Result<PathBuf> {
    sys::install_stop_handler();
    let base = o.out.clone().unwrap_or_else(|| PathBuf::from("results"));
    let stamp = sys::utc_stamp();
    let dir = base.join(format!("{stamp}-scale-out"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let routing = match o.routing.as_deref() {
        Some("static") => Routing::Static,
        Some(_) => Routing::Bgp,
        None if sys::have("bird") && sys::have("birdc") => Routing::Bgp,
        None => Routing::Static,
    };
    let nodes = o.nodes.unwrap_or(3);
    let opts = ScaleOpts {
        nodes,
        subscribers: o.subscribers.unwrap_or(24),
        flows: o.flows.map(|f| f as usize).unwrap_or(4),
        interval: Duration::from_millis(20),
        settle: Duration::from_secs_f64(o.duration.unwrap_or(3.0).clamp(0.0, 600.0)),
        routing,
        buckets: 128,
        idle_timer: 2,
        dir: dir.join("cluster"),
        kill: None,
        xlat_bin: None,
        add_node: nodes < MAX_NODES,
        late_subscribers: if nodes < MAX_NODES {
            let subs = o.subscribers.unwrap_or(24);
            (subs / 3)
                .clamp(1, 16)
                .min(MAX_SUBSCRIBERS.saturating_sub(subs))
        } else {
            0
        },
        load_steps: vec![
            Duration::from_millis(5),
            Duration::from_millis(2),
            Duration::from_millis(1),
        ],
    };
    opts.validate()?;
    let started = Instant::now();
    eprintln!(
        "xlat lab scale-out: {nodes} nodes, {} subscribers x {} streams, routing {routing:?}; results in {}",
        opts.subscribers,
        opts.flows,
        dir.display()
    );
    let mut res = RunResults {
        schema: SCHEMA,
        name: "scale-out".into(),
        command_line: std::env::args().collect(),
        started_utc: stamp,
        machine: Machine::read(),
        settings: Settings {
            devices: vec![format!("xlat-nat44 x {nodes}")],
            sizes: vec![format!("UDP {PAYLOAD} B")],
            trial_secs: opts.settle.as_secs_f64(),
            repeats: 1,
            flows: opts.flows as u32,
            ..Settings::default()
        },
        placement: format!(
            "{nodes} xlat nodes, BIRD, the routers and the streams all share this machine's {} CPUs (no pinning)",
            sys::ncpus()
        ),
        ..RunResults::default()
    };
    res.versions
        .insert("xlat-lab".into(), env!("CARGO_PKG_VERSION").to_string());
    if routing == Routing::Bgp {
        if let Ok(v) = sys::cmd(5, &["bird", "--version"]) {
            res.versions.insert(
                "bird".into(),
                format!("{}{}", v.stdout, v.stderr).trim().to_string(),
            );
        }
    } else {
        res.notes.push("BIRD was not used: the outside router got static routes, which the lab removes when a node's xlat route goes".into());
    }
    let outcome = run(&opts);
    res.wall_secs = started.elapsed().as_secs_f64();
    match &outcome {
        Ok(out) => {
            res.experiments = experiments(out, opts.settle.as_secs_f64());
            res.notes.push(format!(
                "steady state: {} of {} stream packets unanswered; buckets per nexthop id before {:?}, after the rejoin {:?}",
                out.steady_lost, out.steady_sent, out.buckets_before, out.buckets_after_join
            ));
            crate::save_outcome(&dir, out)?;
        }
        Err(e) => res.incomplete = Some(format!("{e:#}")),
    }
    crate::finish(&dir, &res)?;
    outcome.map(|_| dir)
}
