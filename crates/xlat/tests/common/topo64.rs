//! The topology of the NAT64, SIIT and DNS64 tests: an IPv6-only client, a gateway, and an
//! IPv4-only server network.
//!
//! ```text
//!   CLI <client>/64 ---- 2001:2:0:1::1 [GW] 198.19.0.1/24 ---- SRV 198.19.0.2/24
//!   (IPv6 only)          (the tests run xlat here)             (IPv4 only, no default route)
//! ```
//!
//! CLI gets no IPv4 address at all and SRV no route back: only what xlat translates (or
//! answers for) crosses GW. The tests add what they need on top (more addresses, routes).

use std::ops::{Deref, DerefMut};

use super::Lab;

/// The gateway on the client's link.
pub const GW6: &str = "2001:2:0:1::1";
/// The gateway on the server's link.
pub const GW4: &str = "198.19.0.1";
/// The IPv4 server.
pub const SRV: &str = "198.19.0.2";

/// CLI, GW and SRV namespaces; torn down on drop (see `Lab`, reached through `Deref`).
pub struct Topo64 {
    lab: Lab,
    pub cli: String,
    pub gw: String,
    pub srv: String,
    /// CLI's and SRV's devices.
    pub cli_dev: String,
    pub srv_dev: String,
    /// GW's devices towards CLI and towards SRV.
    pub gw_cli_dev: String,
    pub gw_srv_dev: String,
    /// The name for xlat's TUN device.
    pub tun: String,
}

impl Deref for Topo64 {
    type Target = Lab;
    fn deref(&self) -> &Lab {
        &self.lab
    }
}

impl DerefMut for Topo64 {
    fn deref_mut(&mut self) -> &mut Lab {
        &mut self.lab
    }
}

impl Topo64 {
    /// Builds the three namespaces with the client at `cli_addr`. `kind` is the lab's letter
    /// (see `Lab::new`); `fast_path`: GW will run the XDP fast path, so the hosts' offloads
    /// are set for it.
    pub fn new(kind: char, cli_addr: &str, fast_path: bool) -> Topo64 {
        let lab = Lab::new(kind);
        let id = lab.id.clone();
        let t = Topo64 {
            cli: format!("{id}-cli"),
            gw: format!("{id}-gw"),
            srv: format!("{id}-srv"),
            cli_dev: format!("{id}c"),
            srv_dev: format!("{id}s"),
            gw_cli_dev: format!("{id}g"),
            gw_srv_dev: format!("{id}h"),
            tun: format!("{id}t"),
            lab,
        };
        t.build(cli_addr, fast_path)
    }

    fn build(mut self, cli_addr: &str, fast_path: bool) -> Topo64 {
        for ns in [self.cli.clone(), self.gw.clone(), self.srv.clone()] {
            self.add_ns(&ns);
        }
        let (cli, gw, srv) = (&self.cli, &self.gw, &self.srv);
        let (c, s, gc, gs) = (
            &self.cli_dev,
            &self.srv_dev,
            &self.gw_cli_dev,
            &self.gw_srv_dev,
        );
        // CLI <-> GW: IPv6 only (nodad: usable at once).
        self.veth(gw, gc, cli, c);
        self.ip(
            gw,
            &["addr", "add", &format!("{GW6}/64"), "dev", gc, "nodad"],
        );
        self.ip(
            cli,
            &["addr", "add", &format!("{cli_addr}/64"), "dev", c, "nodad"],
        );
        // GW <-> SRV: IPv4 only.
        self.veth(gw, gs, srv, s);
        self.ip(gw, &["addr", "add", &format!("{GW4}/24"), "dev", gs]);
        self.ip(srv, &["addr", "add", &format!("{SRV}/24"), "dev", s]);
        for (ns, dev) in [(gw, gc), (cli, c), (gw, gs), (srv, s)] {
            self.offloads_off(ns, dev, fast_path && ns != gw);
            self.ip(ns, &["link", "set", dev, "up"]);
        }
        if fast_path {
            // The peer's GRO must be switched on while both ends are up for the kernel to
            // mark GW's device a redirect target (otherwise XDP_REDIRECT into it fails with
            // EOPNOTSUPP, seen on 6.18 when GW's end came up first): toggle it.
            for (ns, dev) in [(cli, c), (srv, s)] {
                let _ = self.ns(ns, 10, &["ethtool", "-K", dev, "gro", "off"]);
                let _ = self.ns(ns, 10, &["ethtool", "-K", dev, "gro", "on"]);
            }
        }
        self
    }
}
