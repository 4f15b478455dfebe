//! `xlat show sessions` (`{"cmd":"sessions"}`) without stalling translation: the control
//! thread asks each packet worker for its table a page at a time
//! ([`xlat_engine::Engine::sessions_page`]: at most [`PAGE_ROWS`] rows, a bounded part of
//! the table looked at), between the worker's batches, and sorts and cuts what it gathered
//! on its own thread. A listing of millions of sessions is many short turns of each worker,
//! never one long one; with `--limit N` the control thread keeps only the first N rows as it
//! goes, so its memory stays bounded too.
//!
//! Order: the static entries first (worker 0 lists them: every worker has them), in the
//! configuration's order; then the sessions of all workers by translator, protocol, inside
//! endpoint and remote endpoint.

use std::cmp::Ordering;

use xlat_engine::flow::Translator;
use xlat_engine::{SessionCursor, SessionFilter, SessionInfo, SessionState};

use crate::control::{ask_some, Request, Response, WorkerLink};

/// Rows a worker puts in one page.
pub const PAGE_ROWS: usize = 4096;

/// The listing for `{"cmd":"sessions"}`: what `filter` takes on every worker, at most
/// `limit` rows (see the module docs for the order).
pub fn sessions(limit: Option<usize>, filter: SessionFilter, workers: &[WorkerLink]) -> Response {
    let mut statics = Vec::new();
    let mut rows = Vec::new();
    for k in 0..workers.len() {
        let mut at = Some(match k {
            0 => SessionCursor::default(),
            _ => SessionCursor::DYNAMIC,
        });
        while let Some(from) = at {
            let req = Request::SessionsPage {
                filter: filter.clone(),
                from,
            };
            let page = match ask_some(&req, workers, k..k + 1).map(|mut v| v.pop()) {
                Ok(Some(Response::SessionsPage { rows, next })) => {
                    at = next;
                    rows
                }
                Ok(Some(e @ Response::Error(_))) | Err(e) => return e,
                Ok(_) => {
                    return Response::Error(format!(
                        "packet worker {k} answered a session page with something else"
                    ))
                }
            };
            for r in page {
                match r.state {
                    SessionState::Static => statics.push(r),
                    _ => rows.push(r),
                }
            }
            if let Some(l) = limit {
                keep_first(&mut rows, l, false);
            }
        }
    }
    if let Some(l) = limit {
        statics.truncate(l);
        keep_first(&mut rows, l.saturating_sub(statics.len()), true);
    } else {
        rows.sort_unstable_by(order);
    }
    statics.extend(rows);
    Response::Sessions(statics)
}

/// Cuts `rows` to the first `n` in listing order once it holds more than twice that (or
/// at once when `now`), so a limited listing holds O(n + a page) rows.
fn keep_first(rows: &mut Vec<SessionInfo>, n: usize, now: bool) {
    if now || rows.len() > n.saturating_mul(2).max(PAGE_ROWS) {
        if n < rows.len() {
            rows.select_nth_unstable_by(n, order);
            rows.truncate(n);
        }
        rows.sort_unstable_by(order);
    }
}

/// Listing order of two sessions: translator, protocol, inside, remote.
fn order(a: &SessionInfo, b: &SessionInfo) -> Ordering {
    let key = |r: &SessionInfo| {
        (
            matches!(r.translator, Translator::Nat64),
            r.proto,
            r.inside,
            r.inside_port,
            r.remote,
            r.remote_port,
        )
    };
    key(a).cmp(&key(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};
    use xlat_engine::flow::Proto;

    fn row(tr: Translator, port: u16) -> SessionInfo {
        SessionInfo {
            translator: tr,
            proto: Some(Proto::Udp),
            inside: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            inside_port: Some(port),
            state: SessionState::Udp,
            ..SessionInfo::default()
        }
    }

    /// A limited listing keeps the first rows in listing order whatever order the pages
    /// came in, and stays bounded while it gathers.
    #[test]
    fn a_limited_listing_keeps_the_first_rows_in_order() {
        let mut rows: Vec<SessionInfo> = (0..10_000u16)
            .rev()
            .map(|p| row(Translator::Nat44, p))
            .collect();
        rows.push(row(Translator::Nat64, 0));
        keep_first(&mut rows, 3, false);
        assert!(
            rows.len() <= 2 * PAGE_ROWS.max(6),
            "bounded while gathering"
        );
        keep_first(&mut rows, 3, true);
        let ports: Vec<_> = rows.iter().map(|r| r.inside_port).collect();
        assert_eq!(ports, [Some(0), Some(1), Some(2)]);
        // NAT64 rows come after NAT44's.
        let mut mixed = vec![row(Translator::Nat64, 0), row(Translator::Nat44, 9)];
        keep_first(&mut mixed, 5, true);
        assert_eq!(mixed[0].translator, Translator::Nat44);
    }
}
