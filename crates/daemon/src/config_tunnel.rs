//! `[tunnel.6to4]` and `[tunnel.isatap]` (docs/CONFIG.md): 6in4 tunnel endpoints on the TUN
//! device (RFC 3056, RFC 5214, RFC 4213 3).

use serde::Deserialize;
use xlat_engine::tunnel::{IsatapConfig, IsatapRole, SixToFourConfig, TunnelConfig, TunnelParams};

use super::{ConfigFileError, Ctx};

/// Router Lifetime an ISATAP router advertises unless told (RFC 4861 6.2.1: 3 x 600 s).
pub const DEFAULT_ROUTER_LIFETIME: u16 = 1800;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTunnel {
    #[serde(rename = "6to4")]
    sixtofour: Option<RawSixToFour>,
    isatap: Option<RawIsatap>,
}

impl RawTunnel {
    /// The file has a tunnel the XDP fast path carries: a `[tunnel.6to4]`, or a
    /// `[tunnel.isatap]` router (a host's router and prefix are learned state, not carried).
    pub(super) fn xdp_carries(&self) -> bool {
        self.sixtofour.is_some()
            || self
                .isatap
                .as_ref()
                .is_some_and(|i| i.role.as_deref() == Some("router"))
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSixToFour {
    ipv4: Option<String>,
    relay: Option<String>,
    relay_router: Option<bool>,
    mtu: Option<u32>,
    ttl: Option<u32>,
    pmtud: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawIsatap {
    role: Option<String>,
    ipv4: Option<String>,
    prefix: Option<String>,
    routers: Option<Vec<String>>,
    router_lifetime: Option<u32>,
    mtu: Option<u32>,
    ttl: Option<u32>,
    pmtud: Option<bool>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Router,
    Host,
}

impl Ctx<'_> {
    fn tunnel_params(
        &self,
        section: &str,
        mtu: Option<u32>,
        ttl: Option<u32>,
        pmtud: Option<bool>,
    ) -> Result<TunnelParams, ConfigFileError> {
        let d = TunnelParams::default();
        let mtu = match mtu {
            None => d.mtu,
            Some(m) => u16::try_from(m).map_err(|_| {
                self.invalid(
                    format!("{section}.mtu"),
                    format!("{m} is out of range; expected 1280 to 65515, usually 1480"),
                )
            })?,
        };
        let ttl = match ttl {
            None => d.ttl,
            Some(t) => u8::try_from(t).map_err(|_| {
                self.invalid(
                    format!("{section}.ttl"),
                    format!("{t} is out of range; expected 1 to 255, usually 64"),
                )
            })?,
        };
        Ok(TunnelParams {
            mtu,
            ttl,
            pmtud: pmtud.unwrap_or(d.pmtud),
        })
    }

    fn required_v4(
        &self,
        key: &str,
        value: Option<&str>,
    ) -> Result<std::net::Ipv4Addr, ConfigFileError> {
        match value {
            Some(v) => self.address(key.to_string(), v),
            None => Err(self.invalid(
                key,
                "missing; expected the endpoint's IPv4 address, like \"198.18.0.2\"",
            )),
        }
    }

    pub(super) fn tunnel(&self, t: RawTunnel) -> Result<TunnelConfig, ConfigFileError> {
        let sixtofour = match t.sixtofour {
            None => None,
            Some(s) => Some(SixToFourConfig {
                ipv4: self.required_v4("tunnel.6to4.ipv4", s.ipv4.as_deref())?,
                relay: s
                    .relay
                    .as_deref()
                    .map(|r| self.address("tunnel.6to4.relay".into(), r))
                    .transpose()?,
                relay_router: s.relay_router.unwrap_or(false),
                params: self.tunnel_params("tunnel.6to4", s.mtu, s.ttl, s.pmtud)?,
            }),
        };
        let isatap = match t.isatap {
            None => None,
            Some(i) => {
                let role = match i.role.as_deref() {
                    None => return Err(self.invalid(
                        "tunnel.isatap.role",
                        "missing; expected \"router\" (advertises tunnel.isatap.prefix) or \"host\" (solicits tunnel.isatap.routers)",
                    )),
                    Some(r) => self.choice(
                        "tunnel.isatap.role",
                        Some(r),
                        Role::Host,
                        &[("router", Role::Router), ("host", Role::Host)],
                    )?,
                };
                let role = match role {
                    Role::Router => {
                        if i.routers.is_some() {
                            return Err(self.invalid("tunnel.isatap.routers", "only a host has a potential router list; a router advertises tunnel.isatap.prefix"));
                        }
                        let Some(p) = i.prefix.as_deref() else {
                            return Err(self.invalid(
                                "tunnel.isatap.prefix",
                                "missing; a router advertises a /64, like \"2001:2:0:5::/64\"",
                            ));
                        };
                        let lifetime = i
                            .router_lifetime
                            .map(u16::try_from)
                            .transpose()
                            .map_err(|_| {
                                self.invalid(
                                    "tunnel.isatap.router_lifetime",
                                    "out of range; expected 0 to 9000 seconds (RFC 4861 6.2.1), usually 1800",
                                )
                            })?
                            .unwrap_or(DEFAULT_ROUTER_LIFETIME);
                        if lifetime > 9000 {
                            return Err(self.invalid(
                                "tunnel.isatap.router_lifetime",
                                format!("{lifetime} is above 9000 s, the RFC 4861 6.2.1 maximum"),
                            ));
                        }
                        IsatapRole::Router {
                            prefix: self.prefix6("tunnel.isatap.prefix".into(), p)?,
                            lifetime,
                        }
                    }
                    Role::Host => {
                        if i.prefix.is_some() || i.router_lifetime.is_some() {
                            return Err(self.invalid("tunnel.isatap.prefix", "a host learns its prefix from the routers' advertisements; prefix and router_lifetime are for role = \"router\""));
                        }
                        let mut routers = Vec::new();
                        for (k, r) in i.routers.unwrap_or_default().iter().enumerate() {
                            routers.push(self.address(format!("tunnel.isatap.routers[{k}]"), r)?);
                        }
                        IsatapRole::Host { routers }
                    }
                };
                Some(IsatapConfig {
                    ipv4: self.required_v4("tunnel.isatap.ipv4", i.ipv4.as_deref())?,
                    role,
                    params: self.tunnel_params("tunnel.isatap", i.mtu, i.ttl, i.pmtud)?,
                })
            }
        };
        let cfg = TunnelConfig { sixtofour, isatap };
        cfg.validate().map_err(|e| self.invalid(e.key, e.problem))?;
        Ok(cfg)
    }
}

/// The largest tunnel MTU configured: the TUN device must carry that plus the outer header.
pub fn max_tunnel_mtu(t: &TunnelConfig) -> u32 {
    t.sixtofour
        .iter()
        .map(|s| s.params.mtu)
        .chain(t.isatap.iter().map(|i| i.params.mtu))
        .max()
        .map_or(0, u32::from)
}

/// The smallest tunnel MTU configured: the IPv6 MTU of the TUN device.
pub fn min_tunnel_mtu(t: &TunnelConfig) -> u32 {
    t.sixtofour
        .iter()
        .map(|s| s.params.mtu)
        .chain(t.isatap.iter().map(|i| i.params.mtu))
        .min()
        .map_or(0, u32::from)
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use xlat_engine::tunnel::IsatapRole;

    fn key(text: &str) -> String {
        Config::parse("t.toml", text)
            .err()
            .and_then(|e| e.key().map(str::to_string))
            .unwrap_or_default()
    }

    #[test]
    fn parses_both_sections() {
        let c = Config::parse(
            "t.toml",
            r#"
[tunnel.6to4]
ipv4 = "198.18.0.2"
relay = "198.18.0.1"

[tunnel.isatap]
role = "router"
ipv4 = "198.18.0.1"
prefix = "2001:2:0:5::/64"
"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let t = c.tunnel.clone().unwrap_or_default();
        let s = t.sixtofour.unwrap_or_else(|| panic!("no 6to4"));
        assert_eq!(
            s.relay.map(|r| r.to_string()).as_deref(),
            Some("198.18.0.1")
        );
        assert_eq!(
            (s.params.mtu, s.params.ttl, s.params.pmtud),
            (1480, 64, true)
        );
        let i = t.isatap.unwrap_or_else(|| panic!("no isatap"));
        assert!(matches!(i.role, IsatapRole::Router { lifetime: 1800, .. }));
        assert_eq!(c.tun.mtu, 1500, "tun carries 1480 + 20");
        assert!(c.engine_config(0).tunnel.is_some());
    }

    #[test]
    fn host_role_and_mtu() {
        let c = Config::parse(
            "t.toml",
            "[tunnel.isatap]\nrole = \"host\"\nipv4 = \"198.18.0.2\"\nrouters = [\"198.18.0.1\"]\nmtu = 9000\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.tun.mtu, 9020);
    }

    #[test]
    fn errors_name_the_key() {
        assert_eq!(
            key("[tunnel.6to4]\nipv4 = \"10.0.0.1\"\n"),
            "tunnel.6to4.ipv4"
        );
        assert_eq!(
            key("[tunnel.6to4]\nrelay = \"198.18.0.1\"\n"),
            "tunnel.6to4.ipv4"
        );
        assert_eq!(
            key("[tunnel.6to4]\nipv4 = \"198.18.0.2\"\nttl = 300\n"),
            "tunnel.6to4.ttl"
        );
        assert_eq!(
            key("[tunnel.isatap]\nipv4 = \"198.18.0.2\"\n"),
            "tunnel.isatap.role"
        );
        assert_eq!(
            key("[tunnel.isatap]\nrole = \"router\"\nipv4 = \"198.18.0.2\"\n"),
            "tunnel.isatap.prefix"
        );
        assert_eq!(
            key("[tunnel.isatap]\nrole = \"host\"\nipv4 = \"198.18.0.2\"\n"),
            "tunnel.isatap.routers"
        );
        assert_eq!(
            key("[tunnel.isatap]\nrole = \"hub\"\nipv4 = \"198.18.0.2\"\n"),
            "tunnel.isatap.role"
        );
        assert_eq!(
            key("[tun]\nmtu = 1400\n[tunnel.6to4]\nipv4 = \"198.18.0.2\"\n"),
            "tun.mtu"
        );
        assert!(Config::parse(
            "t.toml",
            "[tunnel.6to4]\nipv4 = \"198.18.0.2\"\nbogus = 1\n"
        )
        .is_err());
    }
}
