//! The failover testbed: namespaces, bridges, gateways, daemons, and the failure itself.

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------------
// The testbed.

static COUNTER: AtomicUsize = AtomicUsize::new(0);

pub(super) struct Proc {
    pub(super) name: String,
    pub(super) child: Child,
}

/// The namespaces and processes of one device/variant run; dropping it removes them all.
pub struct Testbed {
    pub(super) dev: Dev,
    pub(super) cli: String,
    pub(super) srv: String,
    pub(super) gw: [String; 2],
    pub(super) namespaces: Vec<String>,
    pub(super) procs: Vec<Proc>,
    pub(super) dir: PathBuf,
    pub(super) xlat: PathBuf,
    pub(super) sock: [PathBuf; 2],
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
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

pub(super) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Testbed {
    pub fn new(dev: Dev, dir: &Path, xlat: PathBuf) -> Result<Testbed> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("failover needs root (network namespaces, TUN devices): run it with sudo");
        }
        let mut need = vec!["ip", "keepalived", "curl", "python3", "sha256sum", "nft"];
        if dev.kernel() {
            need.push("conntrackd");
        }
        let missing: Vec<&str> = need.into_iter().filter(|p| !sys::have(p)).collect();
        if !missing.is_empty() {
            bail!(
                "failover needs {missing:?}: apt-get install iproute2 keepalived curl python3 nftables conntrackd"
            );
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        // x<pid>f<n>-...: the names scripts/test.sh checks for leftovers.
        let id = format!("x{:x}f{n}", std::process::id());
        let mut t = Testbed {
            dev,
            cli: format!("{id}-cli"),
            srv: format!("{id}-srv"),
            gw: [format!("{id}-a"), format!("{id}-b")],
            namespaces: Vec::new(),
            procs: Vec::new(),
            dir: dir.to_path_buf(),
            xlat,
            sock: [dir.join("a.sock"), dir.join("b.sock")],
        };
        t.build(&id)?;
        Ok(t)
    }

    pub(super) fn add_ns(&mut self, ns: &str) -> Result<()> {
        let _ = sys::cmd(10, &["ip", "netns", "del", ns]);
        sys::cmd_ok(&["ip", "netns", "add", ns])?;
        self.namespaces.push(ns.to_string());
        ip(ns, &["link", "set", "lo", "up"])?;
        sys::ns_sh(
            ns,
            "sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
             net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
        )?;
        Ok(())
    }

    /// Port `p` of bridge `br` in switch namespace `sw`, its other end `dev` in `ns`.
    pub(super) fn port(sw: &str, p: &str, ns: &str, dev: &str, addr: &str) -> Result<()> {
        ip(
            sw,
            &[
                "link", "add", p, "type", "veth", "peer", "name", dev, "netns", ns,
            ],
        )?;
        ip(sw, &["link", "set", p, "master", "sw0"])?;
        ip(sw, &["link", "set", p, "up"])?;
        ip(ns, &["addr", "add", addr, "dev", dev])?;
        offloads_off(ns, dev);
        ip(ns, &["link", "set", dev, "up"])?;
        Ok(())
    }

    pub(super) fn build(&mut self, id: &str) -> Result<()> {
        let (swi, swo) = (format!("{id}-swi"), format!("{id}-swo"));
        let (cli, srv, gw) = (self.cli.clone(), self.srv.clone(), self.gw.clone());
        for ns in [&cli, &srv, &gw[0], &gw[1], &swi, &swo] {
            self.add_ns(ns)?;
        }
        for sw in [&swi, &swo] {
            ip(sw, &["link", "add", "name", "sw0", "type", "bridge"])?;
            ip(sw, &["link", "set", "sw0", "up"])?;
        }
        Self::port(&swi, "pc", &cli, "eth0", &format!("{CLI}/24"))?;
        Self::port(&swo, "ps", &srv, "eth0", &format!("{SRV}/24"))?;
        for (k, g) in gw.iter().enumerate() {
            let n = k + 2;
            Self::port(&swi, &format!("p{n}"), g, "in", &format!("198.18.0.{n}/24"))?;
            Self::port(
                &swo,
                &format!("p{n}"),
                g,
                "out",
                &format!("198.18.1.{n}/24"),
            )?;
            sys::ns_ok(g, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        }
        // The sync link.
        ip(
            &gw[0],
            &[
                "link", "add", "sy", "type", "veth", "peer", "name", "sy", "netns", &gw[1],
            ],
        )?;
        for (k, g) in gw.iter().enumerate() {
            let (me, _) = sync_addrs(k);
            ip(g, &["addr", "add", &format!("{me}/24"), "dev", "sy"])?;
            ip(g, &["link", "set", "sy", "up"])?;
        }
        ip(
            &cli,
            &["route", "add", "default", "via", &VIP_IN.to_string()],
        )?;
        ip(
            &srv,
            &[
                "route",
                "add",
                &format!("{POOL}/32"),
                "via",
                &VIP_OUT.to_string(),
            ],
        )?;
        // The server drops (and counts) the new sessions' datagrams; the client counts the
        // TCP resets it receives.
        sys::nft_load(
            &srv,
            &format!(
                "table inet xlatlab {{\n  chain in {{\n    type filter hook input priority 0; policy accept;\n    udp dport {NEW_BASE}-{} counter drop\n  }}\n}}\n",
                NEW_BASE + NEW_SPAN - 1
            ),
            &self.dir,
        )?;
        sys::nft_load(
            &cli,
            "table inet xlatlab {\n  chain in {\n    type filter hook input priority 0; policy accept;\n    tcp flags & rst == rst counter\n  }\n}\n",
            &self.dir,
        )?;
        Ok(())
    }

    pub(super) fn spawn(&mut self, ns: &str, name: &str, args: &[&str]) -> Result<u32> {
        let out = std::fs::File::create(self.dir.join(format!("{name}.log")))?;
        let err = out.try_clone()?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env("RUST_LOG", "warn")
            .spawn()
            .with_context(|| format!("starting {name}: {}", args.join(" ")))?;
        let pid = child.id();
        self.procs.push(Proc {
            name: name.to_string(),
            child,
        });
        Ok(pid)
    }

    pub(super) fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Waits for process `name` to exit (at most `limit`); its exit status, None on timeout.
    pub(super) fn wait_proc(
        &mut self,
        name: &str,
        limit: Duration,
    ) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        let p = self.procs.iter_mut().find(|p| p.name == name)?;
        loop {
            if let Ok(Some(st)) = p.child.try_wait() {
                return Some(st);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(super) fn kill_proc(&mut self, name: &str) {
        if let Some(p) = self.procs.iter_mut().find(|p| p.name == name) {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    pub(super) fn pid(&self, name: &str) -> Option<i32> {
        self.procs
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.child.id() as i32)
    }

    /// The device's own process(es) in gateway k, then keepalived.
    pub(super) fn start_gateway(&mut self, k: usize) -> Result<()> {
        let g = self.gw[k].clone();
        match self.dev {
            Dev::Xlat => {
                let conf = self.dir.join(format!("xlat-{k}.toml"));
                let sock = self.sock[k].clone();
                let _ = std::fs::remove_file(&sock);
                std::fs::write(
                    &conf,
                    xlat_config(k, &format!("xl{k}"), &sock.display().to_string()),
                )?;
                let bin = self.xlat.display().to_string();
                let c = conf.display().to_string();
                self.spawn(&g, &format!("xlat-{k}"), &[&bin, "run", "-c", &c])?;
                let name = format!("xlat-{k}");
                let start = Instant::now();
                while self.xlat_sync(k).is_err() {
                    if self.wait_proc(&name, Duration::from_millis(1)).is_some() {
                        bail!("xlat in gateway {k} exited: {}", self.log(&name));
                    }
                    if start.elapsed() > Duration::from_secs(20) {
                        bail!("xlat in gateway {k} did not answer within 20 s");
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            Dev::Kernel | Dev::KernelRandom => {
                sys::nft_load(&g, &nft_snat(self.dev == Dev::KernelRandom), &self.dir)?;
                let conf = self.dir.join(format!("conntrackd-{k}.conf"));
                std::fs::write(&conf, conntrackd_config(k, &self.dir))?;
                let _ = std::fs::remove_file(self.dir.join(format!("conntrackd-{k}.lock")));
                let c = conf.display().to_string();
                let name = format!("conntrackd-{k}");
                self.spawn(&g, &name, &["conntrackd", "-C", &c])?;
                let start = Instant::now();
                while sys::ns_ok(&g, &["conntrackd", "-C", &c, "-s"]).is_err() {
                    if self.wait_proc(&name, Duration::from_millis(1)).is_some() {
                        bail!(
                            "conntrackd in gateway {k} exited: {}{}",
                            self.log(&name),
                            std::fs::read_to_string(self.dir.join(format!("conntrackd-{k}.log")))
                                .unwrap_or_default()
                        );
                    }
                    if start.elapsed() > Duration::from_secs(10) {
                        bail!("conntrackd in gateway {k} did not answer within 10 s");
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        Ok(())
    }

    pub(super) fn start_keepalived(&mut self, k: usize) -> Result<()> {
        let notify = self.dir.join(format!("notify-{k}.sh"));
        std::fs::write(
            &notify,
            notify_script(self.dev, k, &self.dir, &self.xlat, &self.sock[k]),
        )?;
        std::fs::set_permissions(&notify, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let conf = self.dir.join(format!("keepalived-{k}.conf"));
        std::fs::write(&conf, keepalived_config(k, &notify))?;
        let pid = |n: &str| {
            self.dir
                .join(format!("keepalived-{k}-{n}.pid"))
                .display()
                .to_string()
        };
        let (pm, pv, c) = (pid("main"), pid("vrrp"), conf.display().to_string());
        let g = self.gw[k].clone();
        self.spawn(
            &g,
            &format!("keepalived-{k}"),
            &[
                "keepalived",
                "--dont-fork",
                "--log-console",
                "--vrrp",
                "--use-file",
                &c,
                "--pid",
                &pm,
                "--vrrp_pid",
                &pv,
            ],
        )?;
        Ok(())
    }

    pub(super) fn notify_log(&self, k: usize) -> Vec<(String, bool, f64)> {
        parse_notify_log(
            &std::fs::read_to_string(self.dir.join(format!("notify-{k}.log"))).unwrap_or_default(),
        )
    }

    /// Waits until gateway k's notify hook finished `state` (after unix time `since`).
    pub(super) fn wait_state(
        &self,
        k: usize,
        state: &str,
        since: f64,
        limit: Duration,
    ) -> Result<()> {
        let start = Instant::now();
        loop {
            if self
                .notify_log(k)
                .iter()
                .any(|(s, begin, t)| s == state && !begin && *t >= since)
            {
                return Ok(());
            }
            if start.elapsed() > limit || sys::stopped() {
                bail!(
                    "gateway {k}'s notify hook for {state} did not finish within {limit:?}; its log:\n{}\nkeepalived said:\n{}",
                    std::fs::read_to_string(self.dir.join(format!("notify-{k}.log")))
                        .unwrap_or_default(),
                    tail(&self.log(&format!("keepalived-{k}")), 15)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(super) fn xlat_sync(&self, k: usize) -> Result<serde_json::Value> {
        let bin = self.xlat.display().to_string();
        let sock = self.sock[k].display().to_string();
        let o = sys::cmd(10, &[&bin, "show", "sync", "--json", "--socket", &sock])?;
        if !o.ok {
            bail!("xlat show sync: {}", o.stderr.trim());
        }
        serde_json::from_str(&o.stdout).context("xlat show sync --json")
    }

    /// Starts both gateways: a first and master, then b, standby and (xlat) in sync.
    pub fn start(&mut self) -> Result<()> {
        self.start_gateway(0)?;
        self.start_gateway(1)?;
        let t = unix_now() - 1.0;
        self.start_keepalived(0)?;
        self.wait_state(0, "master", t, Duration::from_secs(10))?;
        self.start_keepalived(1)?;
        self.wait_state(1, "backup", t, Duration::from_secs(10))?;
        if self.dev == Dev::Xlat {
            let start = Instant::now();
            loop {
                let s = self.xlat_sync(1)?;
                if s["role"] == "standby" && s["in_sync"] == true {
                    break;
                }
                if start.elapsed() > Duration::from_secs(15) {
                    bail!("gateway b did not get in sync within 15 s: {s}");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        } else {
            // conntrackd's FTFW handshake; b asked for a resync in its backup hook.
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(())
    }

    /// The sync link's transmit counters on gateway k (bytes, packets).
    pub(super) fn sync_tx(&self, k: usize) -> (u64, u64) {
        let read = |f: &str| {
            sys::ns_ok(
                &self.gw[k],
                &["cat", &format!("/sys/class/net/sy/statistics/{f}")],
            )
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
        };
        (read("tx_bytes"), read("tx_packets"))
    }

    /// CPU nanoseconds of the sync work on gateway k and of the rest of the process (xlat:
    /// the `xlat-sync` thread, and every other thread: the packet path with its control
    /// threads; the kernel device: conntrackd, its data path being softirq work that is not
    /// its own).
    pub(super) fn cpu_ns(&self, k: usize) -> (u64, Option<u64>) {
        match self.dev {
            Dev::Xlat => {
                let Some(pid) = self.pid(&format!("xlat-{k}")) else {
                    return (0, None);
                };
                let (mut sync, mut rest) = (0, 0);
                for (comm, ns) in thread_cpu(pid) {
                    if comm == "xlat-sync" {
                        sync += ns;
                    } else {
                        rest += ns;
                    }
                }
                (sync, Some(rest))
            }
            Dev::Kernel | Dev::KernelRandom => (
                self.pid(&format!("conntrackd-{k}"))
                    .and_then(sys::proc_cpu_ns)
                    .unwrap_or(0),
                None,
            ),
        }
    }

    /// The failure of gateway a: its three links down at once (one `ip -batch`), then, for
    /// `kill`, its processes SIGKILLed.
    pub(super) fn fail_active(&mut self, v: Variant) -> Result<()> {
        let batch = self.dir.join("fail.batch");
        std::fs::write(
            &batch,
            "link set in down\nlink set out down\nlink set sy down\n",
        )?;
        let g = self.gw[0].clone();
        ip(&g, &["-batch", &batch.display().to_string()])?;
        if v == Variant::Kill {
            let own = match self.dev {
                Dev::Xlat => "xlat-0",
                Dev::Kernel | Dev::KernelRandom => "conntrackd-0",
            };
            self.kill_proc(own);
            self.kill_proc("keepalived-0");
        }
        Ok(())
    }

    /// Sessions gateway b holds as the active's copies (also saved to the run directory).
    pub(super) fn standby_entries(&self) -> Option<u64> {
        match self.dev {
            Dev::Xlat => {
                let s = self.xlat_sync(1).ok()?;
                let _ = std::fs::write(self.dir.join("b-sync-before.json"), s.to_string());
                let c = &s["counters"];
                Some(
                    c["installed"]
                        .as_u64()?
                        .saturating_sub(c["removed"].as_u64()?),
                )
            }
            Dev::Kernel | Dev::KernelRandom => {
                let c = self.dir.join("conntrackd-1.conf").display().to_string();
                let s = sys::ns_ok(&self.gw[1], &["conntrackd", "-C", &c, "-s"]).ok()?;
                let _ = std::fs::write(self.dir.join("b-conntrackd-stats-before.txt"), &s);
                conntrackd_external_active(&s)
            }
        }
    }

    pub(super) fn nft_counter(&self, ns: &str) -> u64 {
        sys::ns_ok(ns, &["nft", "list", "chain", "inet", "xlatlab", "in"])
            .ok()
            .and_then(|s| {
                let w: Vec<&str> = s.split_whitespace().collect();
                let p = w.iter().position(|x| *x == "packets")?;
                w.get(p + 1)?.parse().ok()
            })
            .unwrap_or(0)
    }
}

pub(super) fn offloads_off(ns: &str, dev: &str) {
    let _ = sys::cmd(
        10,
        &[
            "ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro",
            "off",
        ],
    );
}

pub(super) fn tail(s: &str, n: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(n)..].join("\n")
}

/// (thread name, CPU nanoseconds) of every thread of `pid` (from schedstat).
pub(super) fn thread_cpu(pid: i32) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return v;
    };
    for e in rd.flatten() {
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        v.push((comm.trim().to_string(), ns));
    }
    v
}
