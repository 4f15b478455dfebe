//! The run: the cluster up, steady state, a node killed and restarted, a node added, load
//! steps -- each measured from the record.

use super::*;

pub(super) fn sources_at(r: &Record, s: usize, t: f64) -> Vec<Ipv4Addr> {
    r.seen[s]
        .iter()
        .filter_map(|st| {
            st.changes
                .iter()
                .take_while(|c| c.0 <= t)
                .last()
                .map(|c| c.1)
        })
        .collect()
}

pub(super) fn cpu_of(c: &Cluster, nodes: usize) -> Vec<Option<u64>> {
    (0..nodes)
        .map(|i| c.xlat_pid(i).and_then(sys::proc_cpu_ns))
        .collect()
}

/// CPU ns per crossing: each stream packet crosses its node twice (out and back).
pub(super) fn ns_per_pkt(
    cpu0: &[Option<u64>],
    cpu1: &[Option<u64>],
    packets: &[u64],
) -> Vec<Option<f64>> {
    (0..packets.len())
        .map(|i| match (cpu0[i], cpu1[i]) {
            (Some(x), Some(y)) if packets[i] > 0 => {
                Some((y.saturating_sub(x)) as f64 / (2 * packets[i]) as f64)
            }
            _ => None,
        })
        .collect()
}

/// The record's tick times in [a, b).
pub(super) fn ticks_in(r: &Record, a: f64, b: f64) -> usize {
    r.ticks.iter().filter(|t| **t >= a && **t < b).count()
}

/// Runs the whole experiment: steady state, load steps, one node killed, the node back, a
/// new node added and late subscribers.
pub fn run(opts: &ScaleOpts) -> Result<Outcome> {
    let mut c = Cluster::new(opts)?;
    let nodes = opts.nodes;
    // node_of over every pool the run may use (the added node's included).
    let all = nodes + usize::from(opts.add_node);
    let settle = opts.settle.as_secs_f64();
    let limit = Duration::from_secs(30);
    // Enough sending for every phase's worst case; the streams stop by themselves then.
    let traffic = Traffic::start(
        &c,
        (5.0 + opts.load_steps.len() as f64) * (settle + 1.0)
            + 4.0 * limit.as_secs_f64()
            + 3.0 * f64::from(opts.idle_timer)
            + 10.0,
    )?;
    // Warm-up: every stream has a session and has been seen.
    sys::sleep_interruptible(Duration::from_secs(1));
    sys::check_stop()?;
    let a = traffic.now();
    let cpu0 = cpu_of(&c, nodes);
    sys::sleep_interruptible(opts.settle);
    sys::check_stop()?;
    let cpu1 = cpu_of(&c, nodes);
    let b = traffic.now();
    let buckets_before = c.buckets();
    let mut node_sessions = Vec::new();
    for i in 0..nodes {
        node_sessions.push(c.sessions(i)?.into_iter().collect());
    }

    // Load steps: every stream faster, through all nodes; per window the nodes' CPU.
    let mut load_windows = Vec::new();
    for &iv in &opts.load_steps {
        traffic.set_interval(iv);
        sys::sleep_interruptible(Duration::from_millis(500));
        sys::check_stop()?;
        let (t0, c0) = (traffic.now(), cpu_of(&c, nodes));
        sys::sleep_interruptible(opts.settle);
        sys::check_stop()?;
        let (t1, c1) = (traffic.now(), cpu_of(&c, nodes));
        load_windows.push((iv, t0, t1, c0, c1));
    }
    if !opts.load_steps.is_empty() {
        traffic.set_interval(opts.interval);
        // Let the queues of the last step drain before the events.
        sys::sleep_interruptible(Duration::from_secs(1));
        sys::check_stop()?;
    }

    // Which node to stop: the one given, else the one with most subscribers now.
    let seen = traffic.seen();
    let mut count = vec![0usize; nodes];
    for row in seen.iter().take(opts.subscribers) {
        if let Some(n) = row
            .first()
            .and_then(|st| st.changes.last())
            .and_then(|x| node_of(x.1, nodes))
        {
            count[n] += 1;
        }
    }
    let k = opts.kill.unwrap_or_else(|| {
        (0..nodes)
            .max_by_key(|&i| (count[i], std::cmp::Reverse(i)))
            .unwrap_or(0)
    });
    let others: Vec<usize> = (0..nodes).filter(|&i| i != k).collect();
    let everyone: Vec<usize> = (0..nodes).collect();

    // A node leaves: SIGKILL its xlat; BIRD withdraws its pool from both routers; the inside
    // router's health check takes the node out of the group.
    let t_kill = traffic.now();
    let kill_at = Instant::now();
    c.kill_xlat(k)?;
    let withdraw = c.wait_outside_route(k, false, limit)?;
    c.wait_group(&others, limit)?;
    let leave_group = kill_at.elapsed();
    // Until every stream of the node's subscribers arrives through another node (bounded).
    let deadline = Instant::now() + limit;
    loop {
        let s = traffic.seen();
        let waiting = s.iter().any(|row| {
            row.iter()
                .any(|st| st.changes.last().and_then(|x| node_of(x.1, nodes)) == Some(k))
        });
        if !waiting || Instant::now() > deadline || sys::stopped() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    sys::sleep_interruptible(Duration::from_secs(1));
    sys::check_stop()?;
    let t_left = traffic.now();

    // The node comes back: xlat restarted, the route returns, the health check puts it back.
    let t_start = traffic.now();
    let start_at = Instant::now();
    c.start_xlat(k)?;
    let announce = c.wait_outside_route(k, true, limit)?;
    c.wait_group(&everyone, limit)?;
    let join_group = start_at.elapsed();
    sys::sleep_interruptible(opts.settle + Duration::from_secs(opts.idle_timer.into()));
    sys::check_stop()?;
    let t_end = traffic.now();
    let buckets_after_join = c.buckets();

    // A new node: N -> N+1 the way an operator adds one; then new subscribers.
    let mut add_times = None;
    let mut add_setup = Duration::ZERO;
    if opts.add_node {
        let t_add = traffic.now();
        let add_at = Instant::now();
        let j = c.add_node()?;
        add_setup = add_at.elapsed();
        let with_new: Vec<usize> = (0..=nodes).collect();
        let (announced, grouped) = c.wait_joined(j, &with_new, limit)?;
        // Idle buckets move to the new node after the idle timer; then new subscribers.
        sys::sleep_interruptible(
            Duration::from_secs(opts.idle_timer.into()) + Duration::from_millis(500),
        );
        sys::check_stop()?;
        let t_late = traffic.start_late(opts.subscribers + opts.late_subscribers);
        sys::sleep_interruptible(opts.settle);
        sys::check_stop()?;
        let t_add_end = traffic.now();
        let new_sessions: Vec<(Ipv4Addr, Ipv4Addr)> = c.sessions(j)?.into_iter().collect();
        add_times = Some((
            t_add,
            t_late,
            t_add_end,
            announced,
            grouped,
            new_sessions,
            c.buckets(),
        ));
    }
    let bird = c.bird_show();
    let health_log = c.health_log();
    let routing = match c.routing() {
        Routing::Bgp => "bgp (BIRD)",
        Routing::Static => "static",
    };
    let rec = traffic.finish(Duration::from_millis(500))?;
    drop(c);

    let m = opts.subscribers;
    let before: Vec<Option<usize>> = (0..m).map(|s| rec.sub_node_at(s, b, nodes)).collect();
    let after_leave: Vec<Option<usize>> =
        (0..m).map(|s| rec.sub_node_at(s, t_left, nodes)).collect();
    let after_join: Vec<Option<usize>> = (0..m).map(|s| rec.sub_node_at(s, t_end, nodes)).collect();
    let packets = rec.packets_per_node(a, b, nodes);
    let cpu_ns_per_pkt = ns_per_pkt(&cpu0, &cpu1, &packets);
    let mut steady_lost = 0;
    let mut steady_sent = 0;
    for s in 0..m {
        steady_lost += rec.lost(s, a, b);
        steady_sent += rec.sent(s, a, b);
    }
    let load = load_windows
        .iter()
        .map(|(iv, t0, t1, c0, c1)| {
            let secs = (t1 - t0).max(1e-9);
            let pk = rec.packets_per_node(*t0, *t1, nodes);
            let offered = (ticks_in(&rec, *t0, *t1) * m * opts.flows) as f64;
            let lost: u64 = (0..m).map(|s| rec.lost(s, *t0, *t1)).sum();
            LoadStep {
                interval_ms: iv.as_secs_f64() * 1e3,
                secs,
                offered_pps: offered / secs,
                carried_pps: pk.iter().map(|p| *p as f64 / secs).collect(),
                replied_pct: if offered > 0.0 {
                    100.0 * (offered - lost as f64) / offered
                } else {
                    0.0
                },
                cpu_ns_per_pkt: ns_per_pkt(c0, c1, &pk),
                cpu_pct: (0..nodes)
                    .map(|i| match (c0[i], c1[i]) {
                        (Some(x), Some(y)) => Some(100.0 * y.saturating_sub(x) as f64 / 1e9 / secs),
                        _ => None,
                    })
                    .collect(),
            }
        })
        .collect();

    // `node_at` with `all` pools: the added node's pool is disjoint from the others.
    let event = |what: &str,
                 node: usize,
                 from: &[Option<usize>],
                 to: &[Option<usize>],
                 t0: f64,
                 t1: f64,
                 routing_ms: f64,
                 group_ms: f64,
                 leave: bool| {
        let moved: Vec<usize> = (0..m).filter(|&s| from[s] != to[s]).collect();
        let moved_other: Vec<usize> = moved
            .iter()
            .copied()
            .filter(|&s| {
                if leave {
                    from[s] != Some(node)
                } else {
                    to[s] != Some(node)
                }
            })
            .collect();
        let (mut ol, mut os, mut ml) = (0, 0, 0);
        for s in 0..m {
            if moved.contains(&s) {
                ml += rec.lost(s, t0, t1);
            } else {
                ol += rec.lost(s, t0, t1);
                os += rec.sent(s, t0, t1);
            }
        }
        let recover_ms = if leave && !moved.is_empty() {
            moved
                .iter()
                .map(|&s| rec.recovered_after(s, node, t0, all))
                .try_fold(0.0f64, |acc, x| x.map(|v| acc.max(v)))
                .map(|v| v * 1e3)
        } else {
            None
        };
        Event {
            what: what.to_string(),
            node,
            routing_ms,
            group_ms: Some(group_ms),
            setup_ms: None,
            moved_pct: 100.0 * moved.len() as f64 / m as f64,
            moved,
            moved_other,
            other_flows_lost: ol,
            other_flows_sent: os,
            moved_flows_lost: ml,
            recover_ms,
        }
    };
    let leave = event(
        "leave",
        k,
        &before,
        &after_leave,
        t_kill,
        t_left,
        withdraw.as_secs_f64() * 1e3,
        leave_group.as_secs_f64() * 1e3,
        true,
    );
    let join = event(
        "join",
        k,
        &after_leave,
        &after_join,
        t_start,
        t_end,
        announce.as_secs_f64() * 1e3,
        join_group.as_secs_f64() * 1e3,
        false,
    );
    let (mut add, mut after_add, mut late, mut buckets_after_add) =
        (None, Vec::new(), None, BTreeMap::new());
    if let Some((t_add, t_late, t_add_end, announced, grouped, new_sessions, bk)) = add_times {
        let j = nodes;
        let at_add: Vec<Option<usize>> = (0..m).map(|s| rec.sub_node_at(s, t_add, all)).collect();
        after_add = (0..m).map(|s| rec.sub_node_at(s, t_add_end, all)).collect();
        add = Some(event(
            "add",
            j,
            &at_add,
            &after_add,
            t_add,
            t_add_end,
            announced.as_secs_f64() * 1e3,
            grouped.as_secs_f64() * 1e3,
            false,
        ));
        if let Some(e) = add.as_mut() {
            e.setup_ms = Some(add_setup.as_secs_f64() * 1e3);
        }
        let subs: Vec<usize> = (m..m + opts.late_subscribers).collect();
        let node: Vec<Option<usize>> = subs
            .iter()
            .map(|&s| rec.sub_node_at(s, t_add_end, all))
            .collect();
        let on_new: Vec<usize> = subs
            .iter()
            .zip(&node)
            .filter(|(_, n)| **n == Some(j))
            .map(|(s, _)| *s)
            .collect();
        let (mut sent, mut lost, mut replied) = (0, 0, 0);
        for &s in &subs {
            let (x, l) = (
                rec.sent(s, t_late, t_add_end),
                rec.lost(s, t_late, t_add_end),
            );
            sent += x;
            lost += l;
            if on_new.contains(&s) {
                replied += x - l;
            }
        }
        late = Some(Late {
            subscribers: subs,
            node,
            on_new_node: on_new.len(),
            sent,
            lost,
            new_node_replied: replied,
            new_node_sessions: new_sessions,
        });
        buckets_after_add = bk;
    }
    Ok(Outcome {
        nodes,
        subscribers: m,
        flows: opts.flows,
        routing: routing.to_string(),
        pools: (0..all)
            .map(|i| {
                let (p, l) = pool_of(i);
                format!("{p}/{l}")
            })
            .collect(),
        sources_before: (0..m).map(|s| sources_at(&rec, s, b)).collect(),
        before,
        packets_per_node: packets,
        cpu_ns_per_pkt,
        node_sessions,
        buckets_before,
        steady_lost,
        steady_sent,
        load,
        leave,
        after_leave,
        join,
        after_join,
        buckets_after_join,
        add,
        after_add,
        late,
        buckets_after_add,
        bird,
        health_log,
    })
}
