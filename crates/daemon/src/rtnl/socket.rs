//! The blocking `NETLINK_ROUTE` socket: steps sent in chunks with `NLM_F_ACK`, answers
//! matched to their steps by sequence number ([`Rtnl`]), and the dumps and route lookups.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::time::{Duration, Instant};

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::{request, Links, Step, ANSWER_TIMEOUT, CAP_ACK, CHUNK};

/// The kernel's error of one step, with the step's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepError {
    pub step: String,
    /// The errno (positive).
    pub errno: i32,
    /// The kernel's own words about it (its extended acknowledgement, `NETLINK_EXT_ACK`),
    /// e.g. "Nexthop has invalid gateway", when it gave any.
    pub why: Option<String>,
}

impl StepError {
    /// The object was there already (an add) or is gone already (a delete).
    pub fn is_benign(&self) -> bool {
        matches!(
            self.errno,
            libc::EEXIST | libc::ENOENT | libc::ESRCH | libc::ENODEV | libc::EADDRNOTAVAIL
        )
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = io::Error::from_raw_os_error(self.errno);
        write!(f, "netlink `{}` failed: {e}", self.step)?;
        match &self.why {
            Some(why) => write!(f, " (the kernel: {why})"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for StepError {}

/// What [`apply`](super::apply) got done: per step, `None` if it was not sent (an earlier failure without
/// `force`), else its result.
#[derive(Debug, Default)]
pub struct Applied {
    pub results: Vec<Option<Result<(), StepError>>>,
}

impl Applied {
    /// Steps that succeeded.
    pub fn ok(&self) -> usize {
        self.results
            .iter()
            .filter(|r| matches!(r, Some(Ok(()))))
            .count()
    }

    /// The first failure, if any.
    pub fn first_error(&self) -> Option<&StepError> {
        self.results.iter().find_map(|r| match r {
            Some(Err(e)) => Some(e),
            _ => None,
        })
    }

    /// Failures that are not [`StepError::is_benign`].
    pub fn serious(&self) -> impl Iterator<Item = &StepError> {
        self.results.iter().filter_map(|r| match r {
            Some(Err(e)) if !e.is_benign() => Some(e),
            _ => None,
        })
    }
}

/// A `NETLINK_ROUTE` socket, blocking, with a timeout on answers.
pub struct Rtnl {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

/// One answer: its sequence number and payload.
/// One answer: its sequence number, its payload, and an error's extended acknowledgement
/// message ([`ext_ack_message`]).
type Answer = (u32, NetlinkPayload<RouteNetlinkMessage>, Option<String>);

/// `NLMSG_ERROR` (netlink(7)).
const NLMSG_ERROR: u16 = 2;
/// The error message's header flags: the request's payload left out (`NETLINK_CAP_ACK`), and
/// TLVs after it (`NETLINK_EXT_ACK`; include/uapi/linux/netlink.h).
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
/// `NLMSGERR_ATTR_MSG`: the error's text, NUL-terminated.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// The longest kernel message kept (they are short sentences).
const EXT_ACK_MAX: usize = 200;

/// The text of an extended acknowledgement (netlink(7), "NETLINK_EXT_ACK") in one netlink
/// message `msg` as received, header included: for an `NLMSG_ERROR` with `NLM_F_ACK_TLVS`,
/// the `NLMSGERR_ATTR_MSG` attribute after the error code and the echoed request (its header
/// alone with `NLM_F_CAPPED`, else the whole request). `None` for anything else, and for
/// bytes that do not parse: the kernel is trusted no more than any peer.
pub(super) fn ext_ack_message(msg: &[u8]) -> Option<String> {
    let u16_at = |at: usize| -> Option<u16> {
        Some(u16::from_ne_bytes(msg.get(at..at + 2)?.try_into().ok()?))
    };
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(msg.get(at..at + 4)?.try_into().ok()?))
    };
    let len = usize::try_from(u32_at(0)?).ok()?.min(msg.len());
    let (kind, flags) = (u16_at(4)?, u16_at(6)?);
    if kind != NLMSG_ERROR || flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    // The outer header (16), the error code (4), then the request as echoed.
    let echoed = 20;
    let request = if flags & NLM_F_CAPPED != 0 {
        16
    } else {
        usize::try_from(u32_at(echoed)?).ok()?.next_multiple_of(4)
    };
    let mut at = echoed.checked_add(request)?;
    // TLVs (struct nlattr): length (header included), type; padded to 4 bytes.
    for _ in 0..16 {
        let (alen, atype) = (usize::from(u16_at(at)?), u16_at(at + 2)?);
        if alen < 4 || at + alen > len {
            return None;
        }
        if atype & 0x3fff == NLMSGERR_ATTR_MSG {
            let text = msg.get(at + 4..at + alen)?;
            let text = text.split(|b| *b == 0).next().unwrap_or_default();
            let text = String::from_utf8_lossy(text);
            let text: String = text
                .chars()
                .filter(|c| !c.is_control())
                .take(EXT_ACK_MAX)
                .collect();
            return (!text.is_empty()).then_some(text);
        }
        at += alen.next_multiple_of(4);
    }
    None
}

impl Rtnl {
    /// Opens the socket (in this thread's network namespace).
    pub fn open() -> io::Result<Rtnl> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        // Best effort: a larger buffer for big dumps; small acknowledgements.
        let _ = sock.set_rx_buf_sz(1 << 20);
        let _ = sock.set_cap_ack(CAP_ACK);
        // Best effort: the kernel's words with its errors (Linux 4.12 and later).
        let _ = sock.set_ext_ack(true);
        // Non-blocking, waited on with a deadline (the crate has no safe receive timeout):
        // the kernel answers route, rule, neighbour and address requests while it takes
        // them, so their answers are queued when `send` returns.
        sock.set_non_blocking(true)?;
        Ok(Rtnl {
            sock,
            seq: 0,
            buf: Vec::with_capacity(1 << 16),
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends `msgs` (with their flags) in one datagram; returns their sequence numbers.
    fn send(&mut self, msgs: Vec<(RouteNetlinkMessage, u16)>) -> io::Result<Vec<u32>> {
        let mut out = Vec::new();
        let mut seqs = Vec::with_capacity(msgs.len());
        for (m, flags) in msgs {
            let seq = self.next_seq();
            let mut header = NetlinkHeader::default();
            header.flags = flags;
            header.sequence_number = seq;
            let mut nl = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(m));
            nl.finalize();
            let at = out.len();
            out.resize(at + nl.buffer_len(), 0);
            if let Some(b) = out.get_mut(at..) {
                nl.serialize(b);
            }
            // Messages start on 4-byte boundaries.
            out.resize(out.len().next_multiple_of(4), 0);
            seqs.push(seq);
        }
        if !out.is_empty() {
            self.sock.send(&out, 0)?;
        }
        Ok(seqs)
    }

    /// Reads one datagram of answers.
    fn recv(&mut self) -> io::Result<Vec<Answer>> {
        self.buf.clear();
        if self.buf.capacity() < 1 << 16 {
            self.buf.reserve(1 << 16);
        }
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        let n = loop {
            match self.sock.recv(&mut self.buf, 0) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(io::Error::from(io::ErrorKind::TimedOut));
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        let data = self.buf.get(..n.min(self.buf.len())).unwrap_or_default();
        let mut answers = Vec::new();
        let mut off = 0;
        while let Some(rest) = data.get(off..).filter(|r| !r.is_empty()) {
            let Ok(b) = NetlinkBuffer::new_checked(rest) else {
                break;
            };
            let len = b.length() as usize;
            let seq = b.sequence_number();
            let one = rest.get(..len).unwrap_or_default();
            let why = ext_ack_message(one);
            match NetlinkMessage::<RouteNetlinkMessage>::deserialize(one) {
                Ok(m) => answers.push((seq, m.payload, why)),
                // An answer the crate cannot decode still answers its request.
                Err(_) => answers.push((seq, NetlinkPayload::Overrun(Vec::new()), why)),
            }
            off += len.next_multiple_of(4).max(4);
        }
        Ok(answers)
    }

    /// The interfaces (`RTM_GETLINK` dump).
    pub fn links(&mut self) -> io::Result<Links> {
        let all = self.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        Ok(Links::new(all.into_iter().filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => {
                let name = l.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n.clone()),
                    _ => None,
                })?;
                Some((name, l.header.index))
            }
            _ => None,
        })))
    }

    /// Makes `steps` (module docs); answers map back to steps by sequence number.
    pub fn apply(&mut self, steps: &[Step], force: bool) -> Applied {
        let mut results: Vec<Option<Result<(), StepError>>> = vec![None; steps.len()];
        // Devices by name, once per batch (only if a step names one).
        let links = if steps.iter().any(Step::has_dev) {
            self.links().unwrap_or_default()
        } else {
            Links::default()
        };
        let fail_why = |i: usize, errno: i32, why: Option<String>| {
            Some(Err(StepError {
                step: steps.get(i).map(Step::to_string).unwrap_or_default(),
                errno,
                why,
            }))
        };
        let fail = |i: usize, errno: i32| fail_why(i, errno, None);
        let mut start = 0;
        while start < steps.len() {
            let end = (start + CHUNK).min(steps.len());
            let mut msgs = Vec::new();
            let mut index = Vec::new();
            for (i, s) in steps.iter().enumerate().take(end).skip(start) {
                match request(s, &links) {
                    Ok(m) => {
                        msgs.push(m);
                        index.push(i);
                    }
                    Err(errno) => results[i] = fail(i, errno),
                }
            }
            let by_seq: HashMap<u32, usize> = match self.send(msgs) {
                Ok(seqs) => seqs.into_iter().zip(index).collect(),
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(libc::EIO);
                    for i in index {
                        results[i] = fail(i, errno);
                    }
                    HashMap::new()
                }
            };
            let mut waiting = by_seq.len();
            while waiting > 0 {
                let answers = match self.recv() {
                    Ok(a) => a,
                    Err(e) => {
                        // A timeout or lost answers (ENOBUFS): the unanswered count as failed.
                        let errno = e.raw_os_error().unwrap_or(libc::EIO);
                        for i in by_seq.values() {
                            if results[*i].is_none() {
                                results[*i] = fail(*i, errno);
                            }
                        }
                        break;
                    }
                };
                for (seq, payload, why) in answers {
                    let Some(&i) = by_seq.get(&seq) else {
                        continue;
                    };
                    if results[i].is_some() {
                        continue;
                    }
                    results[i] = match payload {
                        NetlinkPayload::Error(e) if e.code.is_some() => {
                            fail_why(i, -e.raw_code(), why)
                        }
                        NetlinkPayload::Error(_) => Some(Ok(())),
                        _ => continue,
                    };
                    waiting -= 1;
                }
            }
            let failed = results
                .get(start..end)
                .unwrap_or_default()
                .iter()
                .any(|r| matches!(r, Some(Err(_))));
            if failed && !force {
                break;
            }
            start = end;
        }
        Applied { results }
    }

    /// Sends one request per item and collects the single answer of each (an
    /// `RTM_GETROUTE`-style request without `NLM_F_ACK`): the reply, or `None` for an error.
    pub(super) fn ask(
        &mut self,
        msgs: Vec<(RouteNetlinkMessage, u16)>,
    ) -> io::Result<Vec<Option<RouteNetlinkMessage>>> {
        let mut out: Vec<Option<RouteNetlinkMessage>> = Vec::with_capacity(msgs.len());
        let mut msgs = msgs.into_iter().peekable();
        while msgs.peek().is_some() {
            let chunk: Vec<_> = msgs.by_ref().take(CHUNK).collect();
            let n = chunk.len();
            let seqs = self.send(chunk)?;
            let by_seq: HashMap<u32, usize> =
                seqs.into_iter().enumerate().map(|(i, s)| (s, i)).collect();
            let mut got: Vec<Option<Option<RouteNetlinkMessage>>> = vec![None; n];
            let mut waiting = n;
            while waiting > 0 {
                for (seq, payload, _) in self.recv()? {
                    let Some(&i) = by_seq.get(&seq) else {
                        continue;
                    };
                    if got[i].is_some() {
                        continue;
                    }
                    got[i] = Some(match payload {
                        NetlinkPayload::InnerMessage(m) => Some(m),
                        _ => None,
                    });
                    waiting -= 1;
                }
            }
            out.extend(got.into_iter().map(Option::flatten));
        }
        Ok(out)
    }

    /// A dump (`NLM_F_DUMP`) of `msg`'s kind: every message until `NLMSG_DONE`.
    pub(super) fn dump(
        &mut self,
        msg: RouteNetlinkMessage,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        let seq = self
            .send(vec![(msg, NLM_F_REQUEST | NLM_F_DUMP)])?
            .first()
            .copied()
            .unwrap_or_default();
        let mut out = Vec::new();
        loop {
            for (s, payload, _) in self.recv()? {
                if s != seq {
                    continue;
                }
                match payload {
                    NetlinkPayload::InnerMessage(m) => out.push(m),
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(e) if e.code.is_some() => return Err(e.to_io()),
                    _ => {}
                }
            }
        }
    }
}
