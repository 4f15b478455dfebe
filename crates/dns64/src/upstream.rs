//! The upstream resolvers: UDP, and TCP (RFC 7766 length prefix) for truncated answers or
//! when the client came over TCP.
//!
//! Each exchange uses a fresh socket (a random source port) and a random query ID, and
//! accepts only a response with that ID and the same question (RFC 5452 9.1); others are
//! counted and ignored. Upstreams are tried in order; every attempt is bounded by the
//! configured timeout, so one exchange takes at most `upstreams x 2 x timeout`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Header, MessageType, Query, ResponseCode};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use crate::policy::{Exchange, Upstream, UpstreamError};
use crate::stats::{inc, Stats};

/// The configured upstream servers.
#[derive(Debug, Clone)]
pub struct UpstreamSet {
    servers: Vec<SocketAddr>,
    timeout: Duration,
    stats: Arc<Stats>,
}

/// One failed attempt.
enum Attempt {
    Timeout,
    Failed(String),
}

impl UpstreamSet {
    pub fn new(servers: Vec<SocketAddr>, timeout: Duration, stats: Arc<Stats>) -> UpstreamSet {
        UpstreamSet {
            servers,
            timeout,
            stats,
        }
    }

    fn attempt(
        &self,
        server: SocketAddr,
        query: &[u8],
        q: &Question,
        how: Exchange,
    ) -> Result<Vec<u8>, Attempt> {
        match how {
            Exchange::Udp => self.udp(server, query, q),
            Exchange::Tcp => self.tcp(server, query, q),
            Exchange::Complete => {
                let r = self.udp(server, query, q)?;
                if truncated(&r) {
                    inc(&self.stats.upstream_tcp_retries);
                    self.tcp(server, query, q)
                } else {
                    Ok(r)
                }
            }
        }
    }

    fn udp(&self, server: SocketAddr, query: &[u8], q: &Question) -> Result<Vec<u8>, Attempt> {
        let local: SocketAddr = if server.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let io = |e: std::io::Error| Attempt::Failed(format!("{server}: {e}"));
        let sock = UdpSocket::bind(local).map_err(io)?;
        sock.connect(server).map_err(io)?;
        sock.send(query).map_err(io)?;
        let deadline = Instant::now() + self.timeout;
        let mut buf = vec![0u8; 65535];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Attempt::Timeout);
            }
            sock.set_read_timeout(Some(left)).map_err(io)?;
            match sock.recv(&mut buf) {
                Ok(n) => {
                    let r = buf.get(..n).unwrap_or_default();
                    if q.matches(r) {
                        return Ok(r.to_vec());
                    }
                    inc(&self.stats.upstream_bad_responses);
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Err(Attempt::Timeout)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
    }

    fn tcp(&self, server: SocketAddr, query: &[u8], q: &Question) -> Result<Vec<u8>, Attempt> {
        let io = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Attempt::Timeout,
            _ => Attempt::Failed(format!("{server} (TCP): {e}")),
        };
        let len = u16::try_from(query.len())
            .map_err(|_| Attempt::Failed("query longer than 65535 bytes".to_string()))?;
        let deadline = Instant::now() + self.timeout;
        let mut s = TcpStream::connect_timeout(&server, self.timeout).map_err(io)?;
        let left = || {
            Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            )
        };
        s.set_nodelay(true).map_err(io)?;
        s.set_write_timeout(left()).map_err(io)?;
        // RFC 7766 8: the length and the message in one write.
        let mut out = Vec::with_capacity(query.len() + 2);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(query);
        s.write_all(&out).map_err(io)?;
        let mut n = [0u8; 2];
        s.set_read_timeout(left()).map_err(io)?;
        s.read_exact(&mut n).map_err(io)?;
        let mut r = vec![0u8; usize::from(u16::from_be_bytes(n))];
        s.set_read_timeout(left()).map_err(io)?;
        s.read_exact(&mut r).map_err(io)?;
        if q.matches(&r) {
            Ok(r)
        } else {
            inc(&self.stats.upstream_bad_responses);
            Err(Attempt::Failed(format!(
                "{server} (TCP): response does not match the query"
            )))
        }
    }
}

impl Upstream for UpstreamSet {
    fn exchange(&mut self, query: &[u8], how: Exchange) -> Result<Vec<u8>, UpstreamError> {
        let (client_id, question) = Question::of(query).ok_or(UpstreamError::BadQuery)?;
        let mut last = UpstreamError::Failed("no upstream configured".to_string());
        for &server in &self.servers {
            // RFC 5452 9.2: an unpredictable ID (and source port: a fresh socket) per query.
            let id: u16 = rand::random();
            let mut q = query.to_vec();
            set_id(&mut q, id);
            let question = Question {
                id,
                ..question.clone()
            };
            match self.attempt(server, &q, &question, how) {
                Ok(mut r) => {
                    set_id(&mut r, client_id);
                    return Ok(r);
                }
                Err(Attempt::Timeout) => {
                    inc(&self.stats.upstream_timeouts);
                    last = UpstreamError::Timeout;
                }
                Err(Attempt::Failed(e)) => last = UpstreamError::Failed(e),
            }
        }
        inc(&self.stats.upstream_errors);
        Err(last)
    }
}

fn set_id(msg: &mut [u8], id: u16) {
    if let Some(b) = msg.get_mut(..2) {
        b.copy_from_slice(&id.to_be_bytes());
    }
}

fn truncated(msg: &[u8]) -> bool {
    msg.get(2).is_some_and(|f| f & 0x02 != 0)
}

/// What a response must repeat: the ID and the question (RFC 5452 9.1).
#[derive(Clone, Debug)]
struct Question {
    id: u16,
    query: Option<Query>,
}

impl Question {
    /// The ID and question of a query message (read with hickory-proto).
    fn of(msg: &[u8]) -> Option<(u16, Question)> {
        let mut d = BinDecoder::new(msg);
        let h = Header::read(&mut d).ok()?;
        let query = if h.counts.queries >= 1 {
            Some(Query::read(&mut d).ok()?)
        } else {
            None
        };
        let id = h.metadata.id;
        Some((id, Question { id, query }))
    }

    /// Whether `resp` answers this question: a response with the same ID and question
    /// (name compared without case). A response without a question section is accepted
    /// only as an error (FORMERR, NOTIMP: some servers leave the question out of those).
    fn matches(&self, resp: &[u8]) -> bool {
        let mut d = BinDecoder::new(resp);
        let Ok(h) = Header::read(&mut d) else {
            return false;
        };
        if h.metadata.id != self.id || h.metadata.message_type != MessageType::Response {
            return false;
        }
        match (&self.query, h.counts.queries) {
            (_, 0) => h.metadata.response_code != ResponseCode::NoError,
            (Some(q), 1) => Query::read(&mut d).is_ok_and(|r| {
                r.name == q.name && r.query_type == q.query_type && r.query_class == q.query_class
            }),
            _ => false,
        }
    }
}
