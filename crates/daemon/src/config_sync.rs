//! `[sync]` in the configuration file (docs/FAILOVER.md): session sync with a peer gateway
//! for stateful failover.
//!
//! ```toml
//! [sync]
//! listen = "198.18.254.1:4790"   # this gateway's sync address (UDP)
//! peer = "198.18.254.2:4790"     # the other gateway's
//! role = "auto"                  # "active", "standby", or "auto": standby until keepalived
//!                                # (notify hook: xlat sync role active) says otherwise
//! key = "a long shared secret"   # HMAC-SHA256 key, the same on both (or key_file = PATH)
//! min_session_age = 0            # seconds a session lives before it is synced (0: all)
//! ```

use std::net::SocketAddr;

use serde::Deserialize;

use crate::sync::{StartRole, SyncConfig};

use super::{ConfigFileError, Ctx};

/// Shortest key accepted: 16 bytes (128 bits, RFC 2104 3 asks for at least the hash's
/// output length for full strength; a passphrase should be longer).
const MIN_KEY: usize = 16;

/// Longest `min_session_age`: a minute (the held sessions wait in memory on the active).
const MAX_MIN_AGE: i64 = 60;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSync {
    listen: Option<String>,
    peer: Option<String>,
    role: Option<String>,
    key: Option<String>,
    key_file: Option<String>,
    min_session_age: Option<i64>,
}

impl RawSync {
    pub(super) fn check(self, cx: &Ctx<'_>) -> Result<SyncConfig, ConfigFileError> {
        let addr = |key: &str,
                    v: Option<String>,
                    example: &str|
         -> Result<SocketAddr, ConfigFileError> {
            let Some(v) = v else {
                return Err(cx.invalid(
                    format!("sync.{key}"),
                    format!("missing; expected an address and port like {example:?}"),
                ));
            };
            let a: SocketAddr = v.parse().map_err(|_| {
                cx.invalid(
                    format!("sync.{key}"),
                    format!("{v:?} is not an address and port; expected one like {example:?}"),
                )
            })?;
            if a.port() == 0 || a.ip().is_multicast() {
                return Err(cx.invalid(
                    format!("sync.{key}"),
                    format!("{v:?}: expected a unicast address and a fixed port, like {example:?}"),
                ));
            }
            Ok(a)
        };
        let listen = addr("listen", self.listen, "198.18.254.1:4790")?;
        let peer = addr("peer", self.peer, "198.18.254.2:4790")?;
        if peer.ip().is_unspecified() {
            return Err(cx.invalid(
                "sync.peer",
                "the peer's address is unspecified; expected the other gateway's address, like \"198.18.254.2:4790\"",
            ));
        }
        if listen == peer {
            return Err(cx.invalid(
                "sync.peer",
                "is this gateway's own sync.listen; expected the other gateway's address",
            ));
        }
        let role = match self.role.as_deref() {
            None | Some("auto") => StartRole::Auto,
            Some("active") => StartRole::Active,
            Some("standby") => StartRole::Standby,
            Some(other) => {
                return Err(cx.invalid(
                    "sync.role",
                    format!("unknown role {other:?}; expected \"active\", \"standby\" or \"auto\" (standby until keepalived's notify hook runs `xlat sync role active`)"),
                ))
            }
        };
        let key = match (self.key, self.key_file) {
            (Some(_), Some(_)) => {
                return Err(cx.invalid(
                    "sync.key_file",
                    "both sync.key and sync.key_file are set; keep one",
                ))
            }
            (Some(k), None) => k.into_bytes(),
            (None, Some(path)) => std::fs::read(&path)
                .map(|mut b| {
                    while b.last().is_some_and(|c| c.is_ascii_whitespace()) {
                        b.pop();
                    }
                    b
                })
                .map_err(|e| {
                    cx.invalid(
                        "sync.key_file",
                        format!("cannot read {path:?}: {e}; expected a file holding the shared key (mode 0600)"),
                    )
                })?,
            (None, None) => {
                return Err(cx.invalid(
                    "sync.key",
                    "missing; sync datagrams are authenticated with a shared key (HMAC-SHA256): set the same key = \"...\" (16 characters or more) or key_file = PATH on both gateways",
                ))
            }
        };
        if key.len() < MIN_KEY {
            return Err(cx.invalid(
                "sync.key",
                format!("the key has {} bytes; expected {MIN_KEY} or more (a long random string, the same on both gateways)", key.len()),
            ));
        }
        let min_age = match self.min_session_age {
            None => 0,
            Some(s) if (0..=MAX_MIN_AGE).contains(&s) => s.unsigned_abs(),
            Some(s) => {
                return Err(cx.invalid(
                    "sync.min_session_age",
                    format!("{s} seconds is out of range; expected 0 (sync every session) to {MAX_MIN_AGE}, like 2"),
                ))
            }
        };
        Ok(SyncConfig {
            listen,
            peer,
            role,
            key,
            min_age: std::time::Duration::from_secs(min_age),
        })
    }
}
