//! The testbed: the inside and outside routers, the nodes (xlat + BIRD each), the resilient
//! nexthop group, and the events that change them (a node killed, restarted, added).

use super::*;

pub(super) static COUNTER: AtomicUsize = AtomicUsize::new(0);

pub(super) struct Node {
    pub(super) ns: String,
    pub(super) tun: String,
    pub(super) pool: String,
    pub(super) conf: PathBuf,
    pub(super) socket: PathBuf,
    pub(super) log: PathBuf,
    pub(super) xlat: Option<Child>,
    /// Inside link: node side address; ir side is .1.
    pub(super) in_addr: Ipv4Addr,
    pub(super) ir_addr: Ipv4Addr,
    pub(super) out_addr: Ipv4Addr,
    pub(super) or_addr: Ipv4Addr,
}

/// The namespaces and processes of one scale-out run; dropping it removes them all.
pub struct Cluster {
    pub(super) id: String,
    pub(super) ns_t: String,
    pub(super) ns_ir: String,
    pub(super) ns_or: String,
    pub(super) nodes: Vec<Node>,
    pub(super) namespaces: Vec<String>,
    pub(super) routing: Routing,
    pub(super) dir: PathBuf,
    pub(super) opts: ScaleOpts,
    /// The inside router's health check (docs/scale-out/xlat-ecmp-health.sh) and its node list.
    pub(super) health: Option<Child>,
    pub(super) nodes_file: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.xlat.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if let Some(mut c) = self.health.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // destroy_ns kills what is left in each namespace (BIRD, `ip monitor`) and deletes it.
        for ns in self.namespaces.iter().rev() {
            destroy_ns(ns);
        }
    }
}

pub(super) fn ip(ns: &str, args: &[&str]) -> Result<String> {
    let mut v = vec!["ip", "-n", ns];
    v.extend_from_slice(args);
    sys::cmd_ok(&v)
}

pub(super) fn bird_ctl(dir: &Path, ns: &str) -> PathBuf {
    dir.join(format!("{ns}.bird.ctl"))
}

impl Cluster {
    /// Builds the namespaces, links, routes and starts xlat (and BIRD) on every node and the
    /// inside router's health check; waits until the outside router has a route to every pool
    /// and the inside router's group holds every node.
    pub fn new(opts: &ScaleOpts) -> Result<Cluster> {
        opts.validate()?;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("scale-out needs root (network namespaces, TUN devices): run it with sudo");
        }
        if !sys::have("ip") || !sys::have("bash") {
            bail!("scale-out needs `ip` and `bash` (apt-get install iproute2 bash)");
        }
        if opts.routing == Routing::Bgp && !(sys::have("bird") && sys::have("birdc")) {
            bail!("--routing bgp needs BIRD 2 (apt-get install bird2)");
        }
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let id = format!("s{:x}{n}", std::process::id());
        std::fs::create_dir_all(&opts.dir)
            .with_context(|| format!("creating {}", opts.dir.display()))?;
        let mut c = Cluster {
            ns_t: format!("{id}-t"),
            ns_ir: format!("{id}-ir"),
            ns_or: format!("{id}-or"),
            id,
            nodes: Vec::new(),
            namespaces: Vec::new(),
            routing: opts.routing,
            dir: opts.dir.clone(),
            opts: opts.clone(),
            health: None,
            nodes_file: opts.dir.join("nodes"),
        };
        c.build()?;
        Ok(c)
    }

    pub(super) fn add_ns(&mut self, ns: &str) -> Result<()> {
        let _ = sys::cmd(10, &["ip", "netns", "del", ns]);
        sys::cmd_ok(&["ip", "netns", "add", ns])?;
        self.namespaces.push(ns.to_string());
        ip(ns, &["link", "set", "lo", "up"])?;
        sys::ns_sh(
            ns,
            "sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
             net.ipv4.conf.default.rp_filter=0 net.ipv6.conf.all.disable_ipv6=1 \
             net.ipv6.conf.default.disable_ipv6=1",
        )?;
        Ok(())
    }

    /// A veth pair `a`@`ns_a` -- `b`@`ns_b`, up, with addresses (prefix length 24).
    pub(super) fn link(
        ns_a: &str,
        a: &str,
        addr_a: Ipv4Addr,
        ns_b: &str,
        b: &str,
        addr_b: Ipv4Addr,
    ) -> Result<()> {
        ip(
            ns_a,
            &[
                "link", "add", a, "type", "veth", "peer", "name", b, "netns", ns_b,
            ],
        )?;
        ip(ns_a, &["addr", "add", &format!("{addr_a}/24"), "dev", a])?;
        ip(ns_b, &["addr", "add", &format!("{addr_b}/24"), "dev", b])?;
        ip(ns_a, &["link", "set", "dev", a, "up"])?;
        ip(ns_b, &["link", "set", "dev", b, "up"])?;
        Ok(())
    }

    pub(super) fn build(&mut self) -> Result<()> {
        let (t, ir, or) = (self.ns_t.clone(), self.ns_ir.clone(), self.ns_or.clone());
        for ns in [&t, &ir, &or] {
            self.add_ns(ns)?;
        }
        // Tester: the subscribers (and those that start late) on its one port.
        let gw_t = Ipv4Addr::new(198, 18, 0, 1);
        Self::link(&t, "ir", Ipv4Addr::new(198, 18, 0, 2), &ir, "t", gw_t)?;
        for s in 0..self.opts.subscribers + self.opts.late_subscribers {
            ip(
                &t,
                &["addr", "add", &format!("{}/32", subscriber(s)), "dev", "ir"],
            )?;
        }
        ip(&t, &["route", "add", "default", "via", &gw_t.to_string()])?;
        ip(
            &ir,
            &["route", "add", &INSIDE.to_string(), "via", "198.18.0.2"],
        )?;
        // The outside router: the server on its loopback.
        ip(&or, &["addr", "add", &format!("{SERVER}/32"), "dev", "lo"])?;
        // L3 hash (source, destination) with a fixed seed.
        sys::ns_sh(
            &ir,
            &format!(
                "sysctl -qw net.ipv4.fib_multipath_hash_policy=0 && \
                 (sysctl -qw net.ipv4.fib_multipath_hash_seed={HASH_SEED} 2>/dev/null || true)"
            ),
        )?;
        std::fs::write(&self.nodes_file, "# <nexthop id> <via> <dev> <pool>\n")
            .with_context(|| format!("writing {}", self.nodes_file.display()))?;
        for i in 0..self.opts.nodes {
            self.create_node(i)?;
        }
        if self.routing == Routing::Bgp {
            self.start_bird()?;
        }
        for i in 0..self.nodes.len() {
            self.start_xlat(i)?;
        }
        for i in 0..self.nodes.len() {
            self.list_node(i)?;
            if self.routing == Routing::Static {
                self.static_route(i, true)?;
            }
        }
        // The health check starts once every pool is in the inside router's table, so the
        // group is made with all nodes at once and the spread repeats from run to run.
        let t0 = Instant::now();
        while (0..self.nodes.len()).any(|i| !self.nodes_table_has(i)) {
            if t0.elapsed() > Duration::from_secs(40) || sys::stopped() {
                bail!("not every node's pool reached the inside router within 40 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.start_health()?;
        for i in 0..self.nodes.len() {
            self.wait_outside_route(i, true, Duration::from_secs(40))
                .with_context(|| format!("node {i}'s pool never reached the outside router"))?;
        }
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        self.wait_group(&all, Duration::from_secs(20))
            .context("the health check never put every node in the group")?;
        Ok(())
    }

    /// Node i's namespace, links, routes and xlat configuration (nothing started).
    pub(super) fn create_node(&mut self, i: usize) -> Result<()> {
        let ir = self.ns_ir.clone();
        let or = self.ns_or.clone();
        let ns = format!("{}-n{i}", self.id);
        self.add_ns(&ns)?;
        let in_addr = Ipv4Addr::new(198, 18, 16 + i as u8, 2);
        let ir_addr = Ipv4Addr::new(198, 18, 16 + i as u8, 1);
        let out_addr = Ipv4Addr::new(198, 19, 64 + i as u8, 2);
        let or_addr = Ipv4Addr::new(198, 19, 64 + i as u8, 1);
        Self::link(&ir, &format!("n{i}"), ir_addr, &ns, "in", in_addr)?;
        Self::link(&ns, "out", out_addr, &or, &format!("n{i}"), or_addr)?;
        ip(
            &ns,
            &[
                "route",
                "add",
                &INSIDE.to_string(),
                "via",
                &ir_addr.to_string(),
            ],
        )?;
        ip(
            &ns,
            &["route", "add", "default", "via", &or_addr.to_string()],
        )?;
        let (p, len) = pool_of(i);
        let tun = "xlat0".to_string();
        let socket = self.dir.join(format!("n{i}.sock"));
        let conf = self.dir.join(format!("n{i}.toml"));
        let pool = format!("{p}/{len}");
        std::fs::write(
            &conf,
            node_config(&tun, &pool, &socket.display().to_string()),
        )
        .with_context(|| format!("writing {}", conf.display()))?;
        self.nodes.push(Node {
            ns,
            tun,
            pool,
            conf,
            socket,
            log: self.dir.join(format!("n{i}.xlat.log")),
            xlat: None,
            in_addr,
            ir_addr,
            out_addr,
            or_addr,
        });
        Ok(())
    }

    /// Puts node i in the health check's node list (the operator's step "tell the inside
    /// router about the node"); the check adds its nexthop to the group once its pool is
    /// announced.
    pub(super) fn list_node(&self, i: usize) -> Result<()> {
        use std::io::Write;
        let n = &self.nodes[i];
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.nodes_file)
            .with_context(|| format!("opening {}", self.nodes_file.display()))?;
        writeln!(f, "{} {} n{i} {}", i + 1, n.in_addr, n.pool)?;
        Ok(())
    }

    /// Starts docs/scale-out/xlat-ecmp-health.sh in the inside router.
    pub(super) fn start_health(&mut self) -> Result<()> {
        let script = self.dir.join("xlat-ecmp-health.sh");
        std::fs::write(&script, HEALTH_SCRIPT)
            .with_context(|| format!("writing {}", script.display()))?;
        let log = self.dir.join("inside-health.log");
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns_ir, "bash"])
            .arg(&script)
            .arg(&self.nodes_file)
            .env("GROUP", GROUP_ID.to_string())
            .env("TABLE", NODES_TABLE.to_string())
            .env("BUCKETS", self.opts.buckets.to_string())
            .env("IDLE_TIMER", self.opts.idle_timer.to_string())
            // Bounded: no run lasts an hour; the cluster's drop ends it anyway.
            .env("MAX_SECONDS", "3600")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .context("starting the inside router's health check")?;
        self.health = Some(child);
        Ok(())
    }

    /// The health check's log so far.
    pub fn health_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("inside-health.log")).unwrap_or_default()
    }

    pub(super) fn peers(&self, addr: impl Fn(&Node) -> Ipv4Addr) -> Vec<(Ipv4Addr, u32)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (addr(n), 64497 + i as u32))
            .collect()
    }

    /// Writes the two routers' BIRD configurations for the current nodes.
    pub(super) fn write_router_birds(&self) -> Result<(PathBuf, PathBuf)> {
        let oc = self.dir.join("outside.bird.conf");
        std::fs::write(
            &oc,
            self.bird_logged(
                "outside",
                &bird_outside_config(SERVER, &self.peers(|n| n.out_addr)),
            ),
        )?;
        let ic = self.dir.join("inside.bird.conf");
        std::fs::write(
            &ic,
            self.bird_logged(
                "inside",
                &bird_inside_config(Ipv4Addr::new(198, 18, 0, 1), &self.peers(|n| n.in_addr)),
            ),
        )?;
        Ok((oc, ic))
    }

    /// A BIRD configuration with a log file in the run directory (`<name>.bird.log`: sessions,
    /// routes in and out), for the lab only.
    pub(super) fn bird_logged(&self, name: &str, conf: &str) -> String {
        format!(
            "log \"{}\" all;\ndebug protocols all;\n{conf}",
            self.dir.join(format!("{name}.bird.log")).display()
        )
    }

    pub(super) fn start_bird(&mut self) -> Result<()> {
        let (oc, ic) = self.write_router_birds()?;
        self.bird(&self.ns_or, &oc)?;
        self.bird(&self.ns_ir, &ic)?;
        for i in 0..self.nodes.len() {
            self.start_node_bird(i)?;
        }
        Ok(())
    }

    pub(super) fn start_node_bird(&self, i: usize) -> Result<()> {
        let n = &self.nodes[i];
        let c = bird_node_config(
            n.out_addr,
            64497 + i as u32,
            n.or_addr,
            OR_ASN,
            n.ir_addr,
            &n.pool,
            &n.tun,
        );
        let conf = self.dir.join(format!("n{i}.bird.conf"));
        std::fs::write(&conf, self.bird_logged(&format!("n{i}"), &c))?;
        self.bird(&n.ns, &conf)
    }

    pub(super) fn bird(&self, ns: &str, conf: &Path) -> Result<()> {
        let ctl = bird_ctl(&self.dir, ns);
        let pid = self.dir.join(format!("{ns}.bird.pid"));
        let (c, s, p) = (
            conf.display().to_string(),
            ctl.display().to_string(),
            pid.display().to_string(),
        );
        // BIRD forks into the background; it stays in the namespace, which destroy_ns empties.
        sys::ns_ok(ns, &["bird", "-c", &c, "-s", &s, "-P", &p])
            .with_context(|| format!("starting BIRD in {ns}"))?;
        Ok(())
    }

    /// `birdc configure` in `ns` (the routers after a node was added to their config).
    pub(super) fn bird_configure(&self, ns: &str) -> Result<()> {
        let ctl = bird_ctl(&self.dir, ns).display().to_string();
        let o = sys::cmd(10, &["birdc", "-s", &ctl, "configure"])?;
        if !o.ok || !o.stdout.contains("Reconfigur") {
            bail!(
                "birdc configure in {ns}: {}{}",
                o.stdout.trim(),
                o.stderr.trim()
            );
        }
        Ok(())
    }

    /// Adds a new node (index = the number of nodes so far) the way an operator does:
    /// its namespace and links, its xlat config (own pool), BIRD on it, a BGP neighbour on
    /// both routers, xlat started, the node in the health check's list. Returns its index;
    /// it joins the group when its pool is announced.
    pub fn add_node(&mut self) -> Result<usize> {
        let i = self.nodes.len();
        if i >= MAX_NODES {
            bail!("a cluster has at most {MAX_NODES} nodes");
        }
        self.create_node(i)?;
        if self.routing == Routing::Bgp {
            // The routers listen (passive sessions) before the node's BIRD connects.
            self.write_router_birds()?;
            self.bird_configure(&self.ns_or)?;
            self.bird_configure(&self.ns_ir)?;
            self.start_node_bird(i)?;
        }
        self.start_xlat(i)?;
        self.list_node(i)?;
        Ok(i)
    }

    /// Starts node i's `xlat run` and waits until its pool route is in the node's kernel.
    pub fn start_xlat(&mut self, i: usize) -> Result<()> {
        let bin = self.bin()?;
        let n = &mut self.nodes[i];
        let _ = std::fs::remove_file(&n.socket);
        let log = std::fs::File::create(&n.log)
            .with_context(|| format!("creating {}", n.log.display()))?;
        let log2 = log.try_clone()?;
        let child = Command::new("ip")
            .args(["netns", "exec", &n.ns])
            .arg(&bin)
            .args(["run", "-c"])
            .arg(&n.conf)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .env("RUST_LOG", "warn")
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        n.xlat = Some(child);
        let start = Instant::now();
        for _ in 0..400 {
            if let Some(c) = self.nodes[i].xlat.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    bail!(
                        "node {i}'s xlat exited ({st}) during start; log {}:\n{}",
                        self.nodes[i].log.display(),
                        std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
                    );
                }
            }
            if self.node_has_route(i) {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(20) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "node {i}'s xlat did not route its pool within 20 s; log {}",
            self.nodes[i].log.display()
        )
    }

    pub(super) fn bin(&self) -> Result<PathBuf> {
        match &self.opts.xlat_bin {
            Some(b) => Ok(b.clone()),
            None => crate::device::xlat_bin(),
        }
    }

    /// SIGKILLs node i's xlat; returns when the process is gone.
    pub fn kill_xlat(&mut self, i: usize) -> Result<()> {
        let Some(mut c) = self.nodes[i].xlat.take() else {
            bail!("node {i}'s xlat is not running");
        };
        c.kill().context("SIGKILL")?;
        c.wait().context("waiting for the killed xlat")?;
        Ok(())
    }

    /// xlat's own inbound route (`<pool> dev <tun>`) is in node i's main table.
    pub fn node_has_route(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        ip(
            &n.ns,
            &["-4", "route", "show", "exact", &n.pool, "dev", &n.tun],
        )
        .map(|s| !s.trim().is_empty())
        .unwrap_or(false)
    }

    /// The outside router routes node i's pool to node i.
    pub fn outside_has_route(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        ip(&self.ns_or, &["-4", "route", "show", "exact", &n.pool])
            .map(|s| s.contains(&format!("via {} ", n.out_addr)))
            .unwrap_or(false)
    }

    /// Polls (every 2 ms, at most `limit`) until the outside router's route to node i's pool
    /// is `present`; returns the time it took.
    pub fn wait_outside_route(&self, i: usize, present: bool, limit: Duration) -> Result<Duration> {
        let start = Instant::now();
        let max = limit.as_millis() as usize / 2 + 1;
        for _ in 0..max {
            if self.outside_has_route(i) == present {
                return Ok(start.elapsed());
            }
            if self.routing == Routing::Static && self.node_has_route(i) == present {
                // The lab is the routing protocol: follow xlat's route.
                self.static_route(i, present)?;
                continue;
            }
            if start.elapsed() > limit || sys::stopped() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        bail!(
            "node {i}'s pool route at the outside router did not {} within {limit:?}",
            if present { "appear" } else { "go" }
        )
    }

    /// Static routing: the pool route on the outside router and, for the health check, in
    /// the inside router's nodes table (what BIRD does with `--routing bgp`).
    pub(super) fn static_route(&self, i: usize, add: bool) -> Result<()> {
        let n = &self.nodes[i];
        let (via, via_in) = (n.out_addr.to_string(), n.in_addr.to_string());
        let table = NODES_TABLE.to_string();
        if add {
            ip(&self.ns_or, &["route", "replace", &n.pool, "via", &via])?;
            ip(
                &self.ns_ir,
                &["route", "replace", &n.pool, "via", &via_in, "table", &table],
            )?;
        } else {
            let _ = ip(&self.ns_or, &["route", "del", &n.pool, "via", &via]);
            let _ = ip(&self.ns_ir, &["route", "del", &n.pool, "table", &table]);
        }
        Ok(())
    }

    /// The inside router's nodes table (the health check's signal) routes node i's pool.
    pub(super) fn nodes_table_has(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        let table = NODES_TABLE.to_string();
        ip(
            &self.ns_ir,
            &["-4", "route", "show", "exact", &n.pool, "table", &table],
        )
        .map(|s| !s.trim().is_empty())
        .unwrap_or(false)
    }

    /// The inside router's group members now, as node indexes (empty without a group).
    pub fn group_members(&self) -> Vec<usize> {
        let Ok(o) = ip(
            &self.ns_ir,
            &["nexthop", "show", "id", &GROUP_ID.to_string()],
        ) else {
            return Vec::new();
        };
        parse_group(&o)
    }

    /// Polls (every 2 ms, at most `limit`) until the group's members are exactly `members`;
    /// returns the time it took.
    pub fn wait_group(&self, members: &[usize], limit: Duration) -> Result<Duration> {
        let start = Instant::now();
        let max = limit.as_millis() as usize / 2 + 1;
        let mut last = Vec::new();
        for _ in 0..max {
            last = self.group_members();
            if last == members {
                return Ok(start.elapsed());
            }
            if start.elapsed() > limit || sys::stopped() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        bail!(
            "the inside router's group did not become nodes {members:?} within {limit:?} (it is {last:?}); health check log:\n{}",
            self.health_log()
        )
    }

    /// Polls (every 2 ms, at most `limit`) until the outside router routes node i's pool and
    /// the group's members are `members`; returns when each happened, from the call.
    pub fn wait_joined(
        &self,
        i: usize,
        members: &[usize],
        limit: Duration,
    ) -> Result<(Duration, Duration)> {
        let start = Instant::now();
        let (mut routed, mut grouped) = (None, None);
        for _ in 0..limit.as_millis() as usize / 2 + 1 {
            if self.routing == Routing::Static && routed.is_none() && self.node_has_route(i) {
                // The lab is the routing protocol: follow xlat's route.
                self.static_route(i, true)?;
            }
            if routed.is_none() && self.outside_has_route(i) {
                routed = Some(start.elapsed());
            }
            if grouped.is_none() && self.group_members() == members {
                grouped = Some(start.elapsed());
            }
            if let (Some(r), Some(g)) = (routed, grouped) {
                return Ok((r, g));
            }
            if start.elapsed() > limit || sys::stopped() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        bail!(
            "node {i} did not join within {limit:?}: outside route {routed:?}, group {grouped:?} (members {:?}); health check log:\n{}",
            self.group_members(),
            self.health_log()
        )
    }

    /// Node i's UDP sessions to the server as (inside, outside) addresses, from `xlat show
    /// sessions` (its own table); an error when the daemon does not answer.
    pub fn sessions(&self, i: usize) -> Result<BTreeSet<(Ipv4Addr, Ipv4Addr)>> {
        let bin = self.bin()?.display().to_string();
        let sock = self.nodes[i].socket.display().to_string();
        let server = SERVER.to_string();
        let o = sys::cmd(
            10,
            &[
                &bin, "show", "sessions", "--json", "--proto", "udp", "--remote", &server,
                "--limit", "100000", "--socket", &sock,
            ],
        )?;
        if !o.ok {
            bail!("node {i}: xlat show sessions failed: {}", o.stderr.trim());
        }
        let rows: Vec<serde_json::Value> = serde_json::from_str(&o.stdout).with_context(|| {
            format!("node {i}: xlat show sessions --json printed {:?}", o.stdout)
        })?;
        let mut v = BTreeSet::new();
        for r in rows {
            let a = r["inside"].as_str().and_then(|x| x.parse().ok());
            let b = r["outside"].as_str().and_then(|x| x.parse().ok());
            if let (Some(a), Some(b)) = (a, b) {
                v.insert((a, b));
            }
        }
        Ok(v)
    }

    pub fn xlat_pid(&self, i: usize) -> Option<i32> {
        self.nodes[i].xlat.as_ref().map(|c| c.id() as i32)
    }

    pub fn routing(&self) -> Routing {
        self.routing
    }

    /// The outside router's BGP summary (for the run directory), or "" without BIRD.
    pub fn bird_show(&self) -> String {
        if self.routing != Routing::Bgp {
            return String::new();
        }
        let ctl = bird_ctl(&self.dir, &self.ns_or).display().to_string();
        let mut s = String::new();
        for q in [&["show", "protocols"][..], &["show", "route"][..]] {
            let mut v = vec!["birdc", "-s", &ctl];
            v.extend_from_slice(q);
            if let Ok(o) = sys::cmd(10, &v) {
                s.push_str(&o.stdout);
            }
        }
        s
    }

    /// The resilient group's bucket count per nexthop id.
    pub fn buckets(&self) -> BTreeMap<u32, usize> {
        let mut m = BTreeMap::new();
        if let Ok(o) = ip(
            &self.ns_ir,
            &["nexthop", "bucket", "show", "id", &GROUP_ID.to_string()],
        ) {
            for l in o.lines() {
                let w: Vec<&str> = l.split_whitespace().collect();
                if let Some(p) = w.iter().position(|x| *x == "nhid") {
                    if let Some(id) = w.get(p + 1).and_then(|x| x.parse().ok()) {
                        *m.entry(id).or_insert(0) += 1;
                    }
                }
            }
        }
        m
    }
}
