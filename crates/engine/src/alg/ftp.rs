//! The FTP control channel's words an ALG rewrites, parsed from untrusted bytes and written
//! anew, and the TCP sequence-number adjustment a rewrite of a different length needs.
//!
//! - RFC 959 4.1.2 (PORT h1,h2,h3,h4,p1,p2) and 4.2.2 (227 Entering Passive Mode
//!   (h1,h2,h3,h4,p1,p2)); the address is four decimal bytes, the port p1 * 256 + p2.
//! - RFC 2428 2 (EPRT |af|addr|port|, af 1 = IPv4, 2 = IPv6, any printable delimiter
//!   between 33 and 126) and 3 (EPSV, reply 229 (|||port|)).
//! - RFC 6384 (FTP ALG for IPv6-to-IPv4 translation): EPRT with an IPv6 address becomes a
//!   PORT with the translator's IPv4 address and a mapped port; EPSV passes unchanged.
//!
//! Nothing here allocates or panics: a line that does not parse is `None`, and the caller
//! passes it on unmodified (and counts it). Only whole lines (ending in LF, RFC 959 4.1.3's
//! Telnet end-of-line CRLF or a bare LF) are parsed: a command split across TCP segments is
//! not reassembled (see [`crate::alg`]).

/// The longest line written here: "EPRT |1|255.255.255.255|65535|\r\n" and
/// "227 Entering Passive Mode (255,255,255,255,255,255).\r\n" fit.
pub const MAX_OUT: usize = 64;

/// The longest control line looked at; a longer one passes unparsed.
pub const MAX_LINE: usize = 512;

/// A client command the ALG acts on (RFC 959 4.1.2, RFC 2428).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// RFC 959 4.1.2: PORT h1,h2,h3,h4,p1,p2.
    Port { addr: u32, port: u16 },
    /// RFC 2428 2: EPRT |1|a.b.c.d|port|.
    Eprt4 { addr: u32, port: u16 },
    /// RFC 2428 2: EPRT |2|ipv6|port|.
    Eprt6 { addr: u128, port: u16 },
    /// RFC 2428 3: EPSV (with or without an argument); `all`: RFC 2428 4's `EPSV ALL`,
    /// which asks for no passive port (it tells the server that only EPSV follows).
    Epsv { all: bool },
    /// RFC 959 4.1.2: PASV.
    Pasv,
}

/// A server reply the ALG acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// RFC 959 4.2.2: 227 ... (h1,h2,h3,h4,p1,p2) -- the numbers may appear without the
    /// parentheses (RFC 1123 4.1.2.6 tells clients to scan for them).
    Pasv227 { addr: u32, port: u16 },
    /// RFC 2428 3: 229 ... (|||port|).
    Epsv229 { port: u16 },
    /// Any other reply code (three digits).
    Other(u16),
}

/// The first line of `data` without its end of line, and the length including it; `None`
/// when there is no whole line (no LF within [`MAX_LINE`] bytes).
pub fn first_line(data: &[u8]) -> Option<(&[u8], usize)> {
    let lf = data.iter().take(MAX_LINE).position(|&b| b == b'\n')?;
    let line = data.get(..lf)?;
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Some((line, lf + 1))
}

/// Parses a client command line (without its end of line). Verbs are case-insensitive
/// (RFC 959 5.3.1); the argument follows one space.
pub fn parse_command(line: &[u8]) -> Option<Command> {
    let verb = line.get(..4)?;
    let rest = line.get(4..)?;
    let arg = || rest.strip_prefix(b" ");
    if verb.eq_ignore_ascii_case(b"PORT") {
        let (addr, port) = parse_h1_p2(trim(arg()?))?;
        Some(Command::Port { addr, port })
    } else if verb.eq_ignore_ascii_case(b"EPRT") {
        parse_eprt(trim(arg()?))
    } else if verb.eq_ignore_ascii_case(b"EPSV") {
        // "EPSV", "EPSV 1", "EPSV 2", "EPSV ALL" (RFC 2428 3, 4).
        let all = arg().is_some_and(|a| trim(a).eq_ignore_ascii_case(b"ALL"));
        (rest.is_empty() || rest.first() == Some(&b' ')).then_some(Command::Epsv { all })
    } else if verb.eq_ignore_ascii_case(b"PASV") {
        trim(rest).is_empty().then_some(Command::Pasv)
    } else {
        None
    }
}

/// Parses a server reply line (single-line reply: three digits and a space).
pub fn parse_reply(line: &[u8]) -> Option<Reply> {
    let code = line.get(..3)?;
    if !code.iter().all(u8::is_ascii_digit) || line.get(3).is_some_and(|&b| b != b' ') {
        return None;
    }
    let n = code.iter().fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
    let text = line.get(3..).unwrap_or(&[]);
    match n {
        227 => {
            // RFC 1123 4.1.2.6: the six numbers start at the first digit after the code.
            let start = text.iter().position(u8::is_ascii_digit)?;
            let nums = text.get(start..)?;
            let end = nums
                .iter()
                .position(|&b| !(b.is_ascii_digit() || b == b','))
                .unwrap_or(nums.len());
            let (addr, port) = parse_h1_p2(nums.get(..end)?)?;
            Some(Reply::Pasv227 { addr, port })
        }
        229 => {
            // RFC 2428 3: "(<d><d><d><tcp-port><d>)".
            let open = text.iter().position(|&b| b == b'(')?;
            let inner = text.get(open + 1..)?;
            let close = inner.iter().position(|&b| b == b')')?;
            let inner = inner.get(..close)?;
            let d = *inner.first()?;
            if !(33..=126).contains(&d) || d.is_ascii_digit() {
                return None;
            }
            let body = inner.strip_prefix(&[d, d, d][..])?.strip_suffix(&[d][..])?;
            Some(Reply::Epsv229 {
                port: parse_u16(body)?,
            })
        }
        n => Some(Reply::Other(n)),
    }
}

/// RFC 959 4.1.2: h1,h2,h3,h4,p1,p2 (decimal bytes).
fn parse_h1_p2(s: &[u8]) -> Option<(u32, u16)> {
    let mut v = [0u8; 6];
    let mut it = s.split(|&b| b == b',');
    for slot in v.iter_mut() {
        *slot = parse_byte(it.next()?)?;
    }
    if it.next().is_some() {
        return None;
    }
    let [a, b, c, d, p1, p2] = v;
    Some((
        u32::from_be_bytes([a, b, c, d]),
        u16::from_be_bytes([p1, p2]),
    ))
}

/// RFC 2428 2: EPRT<space><d><net-prt><d><net-addr><d><tcp-port><d>.
fn parse_eprt(s: &[u8]) -> Option<Command> {
    let d = *s.first()?;
    if !(33..=126).contains(&d) {
        return None;
    }
    let mut f = s.get(1..)?.split(|&b| b == d);
    let (af, addr, port, end) = (f.next()?, f.next()?, f.next()?, f.next()?);
    if !end.is_empty() || f.next().is_some() {
        return None;
    }
    let port = parse_u16(port)?;
    let addr = std::str::from_utf8(addr).ok()?;
    match af {
        b"1" => Some(Command::Eprt4 {
            addr: u32::from(addr.parse::<std::net::Ipv4Addr>().ok()?),
            port,
        }),
        b"2" => Some(Command::Eprt6 {
            addr: u128::from(addr.parse::<std::net::Ipv6Addr>().ok()?),
            port,
        }),
        _ => None,
    }
}

/// A decimal byte of one to three digits.
fn parse_byte(s: &[u8]) -> Option<u8> {
    if s.is_empty() || s.len() > 3 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    u8::try_from(s.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'))).ok()
}

/// A decimal port of one to five digits.
fn parse_u16(s: &[u8]) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    u16::try_from(s.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'))).ok()
}

fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// A small stack buffer lines are written into.
pub struct Out {
    buf: [u8; MAX_OUT],
    len: usize,
}

impl Out {
    fn new() -> Out {
        Out {
            buf: [0; MAX_OUT],
            len: 0,
        }
    }
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
    fn push(&mut self, s: &[u8]) {
        for &b in s {
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = b;
                self.len += 1;
            }
        }
    }
    fn num(&mut self, n: u32) {
        let mut digits = [0u8; 10];
        let mut i = digits.len();
        let mut n = n;
        loop {
            i -= 1;
            if let Some(d) = digits.get_mut(i) {
                *d = b'0' + (n % 10) as u8;
            }
            n /= 10;
            if n == 0 || i == 0 {
                break;
            }
        }
        let d = digits;
        self.push(d.get(i..).unwrap_or(&[]));
    }
    fn h1_p2(&mut self, addr: u32, port: u16) {
        let [a, b, c, d] = addr.to_be_bytes();
        let [p1, p2] = port.to_be_bytes();
        for (i, v) in [a, b, c, d, p1, p2].into_iter().enumerate() {
            if i > 0 {
                self.push(b",");
            }
            self.num(u32::from(v));
        }
    }
}

/// RFC 959 4.1.2: "PORT h1,h2,h3,h4,p1,p2\r\n".
pub fn write_port(addr: u32, port: u16) -> Out {
    let mut o = Out::new();
    o.push(b"PORT ");
    o.h1_p2(addr, port);
    o.push(b"\r\n");
    o
}

/// RFC 2428 2: "EPRT |1|a.b.c.d|port|\r\n".
pub fn write_eprt4(addr: u32, port: u16) -> Out {
    let mut o = Out::new();
    o.push(b"EPRT |1|");
    for (i, v) in addr.to_be_bytes().into_iter().enumerate() {
        if i > 0 {
            o.push(b".");
        }
        o.num(u32::from(v));
    }
    o.push(b"|");
    o.num(u32::from(port));
    o.push(b"|\r\n");
    o
}

/// RFC 959 4.2.2 / 4.1.2: "227 Entering Passive Mode (h1,h2,h3,h4,p1,p2).\r\n".
pub fn write_227(addr: u32, port: u16) -> Out {
    let mut o = Out::new();
    o.push(b"227 Entering Passive Mode (");
    o.h1_p2(addr, port);
    o.push(b").\r\n");
    o
}

/// RFC 2428 3: "229 Entering Extended Passive Mode (|||port|)\r\n".
pub fn write_229(port: u16) -> Out {
    let mut o = Out::new();
    o.push(b"229 Entering Extended Passive Mode (|||");
    o.num(u32::from(port));
    o.push(b"|)\r\n");
    o
}

/// "PASV\r\n" (RFC 959 4.1.2).
pub fn write_pasv() -> Out {
    let mut o = Out::new();
    o.push(b"PASV\r\n");
    o
}

/// The sequence-number offset of one direction of a control connection whose bytes the
/// ALG changed in length: RFC 6384 (and every NAT ALG since RFC 3022 4.3 / RFC 2663 8.2)
/// must move the sequence numbers of later segments by what was added, and the peer's
/// acknowledgements back by the same.
///
/// Kept as the last change's position and the offsets before and after it: a segment that
/// starts after `pos` gets `after`; one at or before it (the rewritten segment itself, or an
/// earlier one retransmitted) gets `before`. A retransmitted rewritten segment is rewritten
/// again to the same bytes (the caller reuses its mapped port), and records no second change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqAdj {
    pos: u32,
    before: i32,
    after: i32,
    changed: bool,
}

/// Serial-number comparison (RFC 1982 / RFC 9293 3.4): is `a` after `b`?
#[inline]
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl SeqAdj {
    /// The sequence number a segment of this direction that started at `seq` leaves with.
    pub fn seq(&self, seq: u32) -> u32 {
        let off = if self.changed && after(seq, self.pos) {
            self.after
        } else {
            self.before
        };
        seq.wrapping_add(off as u32)
    }

    /// The acknowledgement number the sender of this direction expects, for a peer's `ack`
    /// of the rewritten stream.
    pub fn ack(&self, ack: u32) -> u32 {
        let off = if self.changed && after(ack.wrapping_sub(self.before as u32), self.pos) {
            self.after
        } else {
            self.before
        };
        ack.wrapping_sub(off as u32)
    }

    /// Records that the segment starting at `seq` (as the sender numbered it) grew by
    /// `diff` bytes. Only a segment after the last change counts: a retransmission does not
    /// add its change twice.
    pub fn record(&mut self, seq: u32, diff: i32) {
        if diff == 0 {
            return;
        }
        if !self.changed || after(seq, self.pos) {
            self.before = self.after;
            self.after = self.after.wrapping_add(diff);
            self.pos = seq;
            self.changed = true;
        }
    }

    /// Where the last change was recorded (`None`: none yet).
    pub fn pos(&self) -> Option<u32> {
        self.changed.then_some(self.pos)
    }

    /// True once a change was recorded.
    pub fn changed(&self) -> bool {
        self.changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(s: &str) -> Option<Command> {
        parse_command(s.as_bytes())
    }

    #[test]
    fn rfc959_4_1_2_port() {
        // RFC 959 4.1.2: "PORT h1,h2,h3,h4,p1,p2" -- 198.18.0.2 port 4*256+1.
        assert_eq!(
            cmd("PORT 198,18,0,2,4,1"),
            Some(Command::Port {
                addr: 0xc612_0002,
                port: 1025
            })
        );
        assert_eq!(
            cmd("port 198,18,0,2,4,1"),
            Some(Command::Port {
                addr: 0xc612_0002,
                port: 1025
            })
        );
        for bad in [
            "PORT 198,18,0,2,4",
            "PORT 198,18,0,2,4,1,7",
            "PORT 256,18,0,2,4,1",
            "PORT 198,18,0,2,4,1000",
            "PORT 198,,0,2,4,1",
            "PORT",
            "PORTX 1,2,3,4,5,6",
            "PORT -1,2,3,4,5,6",
        ] {
            assert_eq!(cmd(bad), None, "{bad}");
        }
    }

    #[test]
    fn rfc2428_2_eprt() {
        // RFC 2428 2's examples.
        assert_eq!(
            cmd("EPRT |1|132.235.1.2|6275|"),
            Some(Command::Eprt4 {
                addr: 0x84eb_0102,
                port: 6275
            })
        );
        assert_eq!(
            cmd("EPRT |2|1080::8:800:200C:417A|5282|"),
            Some(Command::Eprt6 {
                addr: u128::from(
                    "1080::8:800:200C:417A"
                        .parse::<std::net::Ipv6Addr>()
                        .unwrap()
                ),
                port: 5282
            })
        );
        // Another delimiter in the printable range.
        assert_eq!(
            cmd("EPRT !1!198.18.0.2!80!"),
            Some(Command::Eprt4 {
                addr: 0xc612_0002,
                port: 80
            })
        );
        for bad in [
            "EPRT |3|1.2.3.4|5|",
            "EPRT |1|1.2.3.4|5",
            "EPRT |1|1.2.3.4|65536|",
            "EPRT |1|1.2.3|5|",
            "EPRT |2|1.2.3.4|5|",
            "EPRT  1 1.2.3.4 5 ",
            "EPRT |1|1.2.3.4|5|x",
        ] {
            assert_eq!(cmd(bad), None, "{bad}");
        }
    }

    #[test]
    fn rfc2428_3_epsv_and_pasv() {
        assert_eq!(cmd("EPSV"), Some(Command::Epsv { all: false }));
        assert_eq!(cmd("EPSV 2"), Some(Command::Epsv { all: false }));
        // RFC 2428 4: "EPSV ALL" (any case).
        assert_eq!(cmd("epsv ALL"), Some(Command::Epsv { all: true }));
        assert_eq!(cmd("EPSV all"), Some(Command::Epsv { all: true }));
        assert_eq!(cmd("PASV"), Some(Command::Pasv));
        assert_eq!(cmd("EPSVX"), None);
        assert_eq!(cmd("USER anonymous"), None);
    }

    #[test]
    fn rfc959_4_2_2_227_and_rfc2428_3_229() {
        let r = |s: &str| parse_reply(s.as_bytes());
        assert_eq!(
            r("227 Entering Passive Mode (198,18,1,2,195,80)."),
            Some(Reply::Pasv227 {
                addr: 0xc612_0102,
                port: 50000
            })
        );
        // RFC 1123 4.1.2.6: without parentheses.
        assert_eq!(
            r("227 =198,18,1,2,195,80"),
            Some(Reply::Pasv227 {
                addr: 0xc612_0102,
                port: 50000
            })
        );
        assert_eq!(
            r("229 Entering Extended Passive Mode (|||6446|)"),
            Some(Reply::Epsv229 { port: 6446 })
        );
        assert_eq!(r("229 x (!!!6446!)"), Some(Reply::Epsv229 { port: 6446 }));
        assert_eq!(
            r("500 'EPSV': command not understood."),
            Some(Reply::Other(500))
        );
        assert_eq!(r("227 Entering Passive Mode (1,2,3,4,5)."), None);
        assert_eq!(r("229 (|||99999|)"), None);
        assert_eq!(r("229 (||6446|)"), None);
        assert_eq!(r("22"), None);
        // A multi-line reply's first line is not acted on.
        assert_eq!(r("227-Entering (1,2,3,4,5,6)"), None);
    }

    #[test]
    fn writers_round_trip() {
        let p = write_port(0xcb00_7101, 40000);
        assert_eq!(p.as_bytes(), b"PORT 203,0,113,1,156,64\r\n");
        let (l, n) = first_line(p.as_bytes()).unwrap();
        assert_eq!(n, p.as_bytes().len());
        assert_eq!(
            parse_command(l),
            Some(Command::Port {
                addr: 0xcb00_7101,
                port: 40000
            })
        );
        assert_eq!(
            write_eprt4(0xcb00_7101, 0).as_bytes(),
            b"EPRT |1|203.0.113.1|0|\r\n"
        );
        let big = write_227(u32::MAX, u16::MAX);
        assert_eq!(
            big.as_bytes(),
            b"227 Entering Passive Mode (255,255,255,255,255,255).\r\n"
        );
        assert_eq!(
            write_229(65535).as_bytes(),
            b"229 Entering Extended Passive Mode (|||65535|)\r\n"
        );
        assert_eq!(
            parse_reply(first_line(big.as_bytes()).unwrap().0),
            Some(Reply::Pasv227 {
                addr: u32::MAX,
                port: u16::MAX
            })
        );
    }

    #[test]
    fn first_line_needs_a_line_feed() {
        assert_eq!(first_line(b"PORT 1,2,3,4,5,6"), None);
        assert_eq!(first_line(b"PASV\r\nLIST\r\n"), Some((&b"PASV"[..], 6)));
        assert_eq!(first_line(b"PASV\n"), Some((&b"PASV"[..], 5)));
        let long = [b'a'; MAX_LINE + 2];
        assert_eq!(first_line(&long), None);
    }

    #[test]
    fn rfc6384_sequence_adjustment() {
        // Segment at 1000 grew by 3 (e.g. "PORT 10,0,0,1,..." to a longer address).
        let mut a = SeqAdj::default();
        assert_eq!(a.seq(1000), 1000);
        a.record(1000, 3);
        // The rewritten segment itself keeps its number; later ones move by 3.
        assert_eq!(a.seq(1000), 1000);
        assert_eq!(a.seq(1030), 1033);
        // The peer acks the rewritten stream: 1033 means the sender's 1030.
        assert_eq!(a.ack(1033), 1030);
        // An ack up to the rewritten segment (not past its change) is unchanged.
        assert_eq!(a.ack(1000), 1000);
        // A retransmission of the rewritten segment records nothing more.
        a.record(1000, 3);
        assert_eq!(a.seq(1030), 1033);
        // A second change, shorter by 2, after the first.
        a.record(1030, -2);
        assert_eq!(a.seq(1030), 1033);
        assert_eq!(a.seq(1060), 1061);
        assert_eq!(a.ack(1061), 1060);
        // An ack of the second rewritten segment's start.
        assert_eq!(a.ack(1033), 1030);
        // Across the wrap of the 32-bit sequence space.
        let mut w = SeqAdj::default();
        w.record(u32::MAX - 5, 10);
        assert_eq!(w.seq(4), 14);
        assert_eq!(w.ack(14), 4);
    }
}
