//! `xlat lookup`: who held an outside address and port at a given time, answered from the NAT
//! event log -- the question RFC 6888 REQ-12 and REQ-13 keep the log for ("who had
//! 198.19.0.100 port 40312 at 14:02:11?").
//!
//! It reads the syslog lines the daemon sends (docs/LOGGING.md), as a
//! collector stored them: each line is searched for its RFC 5424 timestamp, its MSGID (RFC 8158
//! natEvent names) and its `key=value` pairs, so a prefix a collector adds does not matter. A
//! session, mapping (BIB entry) or port block is open from its `_CREATE` / `_ALLOC` line to the
//! `_DELETE` / `_DEALLOC` line with the same fields; every one open at the asked time whose
//! outside address and port (or port range) match is an answer. Lines that are not xlat's are
//! skipped.
//!
//! It reads IPFIX too: a file of stored IPFIX messages (RFC 5655's format; a collector that
//! writes each datagram as it came makes one) is decoded by [`crate::ipfix_log`] into the
//! same events, by the RFC 8158 natEvent of each record. Files compressed with gzip (as
//! logrotate leaves them) are read through it. Nothing here is on the packet path.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::ipfix_log;

/// What was asked: an outside endpoint at a time (microseconds since 1970, UTC).
#[derive(Clone, Debug)]
pub struct Query {
    pub addr: Ipv4Addr,
    pub port: u16,
    pub at: i64,
    /// `tcp`, `udp` or `icmp`; any when `None`.
    pub proto: Option<String>,
}

/// One answer: a session, mapping or port block that held the endpoint at the asked time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// `NAT44_SESSION`, `NAT64_BIB`, `PORT_BLOCK`, ...
    pub what: String,
    /// The fields of its lines (`proto`, `inside`, `inside_port`, `outside`, ...).
    pub fields: Vec<(String, String)>,
    pub from: i64,
    /// When it ended, and why (`reason`), if the log says.
    pub until: Option<(i64, Option<String>)>,
}

/// One NAT event from a log: when, its RFC 8158 natEvent name (the syslog MSGID), and its
/// fields by the syslog line's keys (`proto`, `inside`, `outside`, `outside_port`, `ports`,
/// ...). Syslog lines and IPFIX records ([`crate::ipfix_log`]) both read into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Microseconds since 1970, UTC.
    pub at: i64,
    pub name: &'static str,
    pub fields: Vec<(String, String)>,
}

impl Event {
    fn get(&self, k: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }
}

/// What is open, by its kind and its fields without the reason.
type OpenKey = (&'static str, Vec<(String, String)>);

/// The event names that open something, and the names that close it.
const OPENS: [(&str, &str, &str); 5] = [
    (
        "NAT44_SESSION_CREATE",
        "NAT44_SESSION_DELETE",
        "NAT44_SESSION",
    ),
    (
        "NAT64_SESSION_CREATE",
        "NAT64_SESSION_DELETE",
        "NAT64_SESSION",
    ),
    ("NAT44_BIB_CREATE", "NAT44_BIB_DELETE", "NAT44_BIB"),
    ("NAT64_BIB_CREATE", "NAT64_BIB_DELETE", "NAT64_BIB"),
    ("PORT_BLOCK_ALLOC", "PORT_BLOCK_DEALLOC", "PORT_BLOCK"),
];

/// RFC 3339 (RFC 5424 6.2.3) in UTC -- `YYYY-MM-DDTHH:MM:SS[.fraction]Z` -- as microseconds
/// since 1970. `None` for anything else.
pub fn parse_time(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':');
    let (hh, mm, ss): (i64, i64, i64) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    if d.next().is_some()
        || t.next().is_some()
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || hh > 23
        || mm > 59
        || ss > 60
        || frac.len() > 9
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let micros = format!("{frac:0<6}").get(..6)?.parse::<i64>().ok()?;
    let secs = days_from_civil(y, m, day) * 86_400 + hh * 3600 + mm * 60 + ss;
    Some(secs * 1_000_000 + micros)
}

/// Days since 1970-01-01 of a date (Howard Hinnant's algorithm, as the daemon's log writer).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The microseconds as RFC 3339 UTC text.
pub fn show_time(at: i64) -> String {
    let (secs, us) = (at.div_euclid(1_000_000), at.rem_euclid(1_000_000));
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{us:06}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// An xlat event line, or `None`.
pub fn parse_line(line: &str) -> Option<Event> {
    let mut at = None;
    let mut name = None;
    let mut fields = Vec::new();
    for tok in line.split_ascii_whitespace() {
        if let Some((k, v)) = tok.split_once('=') {
            fields.push((k.to_string(), v.to_string()));
        } else if at.is_none() && tok.contains('T') {
            at = parse_time(tok);
        } else if name.is_none() {
            name = OPENS
                .iter()
                .find_map(|&(open, close, _)| [open, close].into_iter().find(|n| *n == tok));
        }
    }
    Some(Event {
        at: at?,
        name: name?,
        fields,
    })
}

/// True when the event's outside endpoint (or port range) covers the query's.
pub fn covers(e: &Event, q: &Query) -> bool {
    if e.get("outside").and_then(|a| a.parse::<Ipv4Addr>().ok()) != Some(q.addr) {
        return false;
    }
    if q.proto
        .as_deref()
        .is_some_and(|p| e.get("proto") != Some(p))
    {
        return false;
    }
    if let Some(p) = e.get("outside_port") {
        return p.parse::<u16>().ok() == Some(q.port);
    }
    e.get("ports")
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?)))
        .is_some_and(|(a, b)| (a..=b).contains(&q.port))
}

/// Everything among `events` that held the query's endpoint at its time, oldest first.
pub fn lookup(events: impl IntoIterator<Item = Event>, q: &Query) -> Vec<Hit> {
    let mut events: Vec<Event> = events.into_iter().filter(|e| covers(e, q)).collect();
    // Workers' lines interleave; a stable sort keeps each one's order within a microsecond.
    events.sort_by_key(|e| e.at);
    // Open ones by (what, fields without the reason).
    let mut open: HashMap<OpenKey, i64> = HashMap::new();
    let mut hits = Vec::new();
    for e in events {
        let Some(&(open_name, _, what)) =
            OPENS.iter().find(|(o, c, _)| e.name == *o || e.name == *c)
        else {
            continue;
        };
        let reason = e.get("reason").map(str::to_string);
        let key_fields: Vec<(String, String)> = e
            .fields
            .into_iter()
            .filter(|(k, _)| k != "reason")
            .collect();
        let key = (what, key_fields);
        if e.name == open_name {
            open.insert(key, e.at);
            continue;
        }
        let Some(from) = open.remove(&key) else {
            continue;
        };
        if from <= q.at && e.at >= q.at {
            hits.push(Hit {
                what: what.to_string(),
                fields: key.1,
                from,
                until: Some((e.at, reason)),
            });
        }
    }
    for ((what, fields), from) in open {
        if from <= q.at {
            hits.push(Hit {
                what: what.to_string(),
                fields,
                from,
                until: None,
            });
        }
    }
    hits.sort_by_key(|h| h.from);
    hits
}

/// What [`read_logs`] read: files by kind, and what it could not read.
#[derive(Debug, Default)]
pub struct LogsRead {
    pub files: usize,
    pub lines: u64,
    pub ipfix: ipfix_log::Summary,
    /// Files skipped or cut short, and why (each names its file).
    pub warnings: Vec<String>,
}

/// How a file's first octets say it must be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Text,
    Ipfix,
    Gzip,
    /// nfdump's own file format (nfcapd's output), which nfdump itself queries.
    Nfdump,
}

fn kind(head: &[u8]) -> Kind {
    match head {
        [0x1f, 0x8b, ..] => Kind::Gzip,
        // nffile.h: MAGIC 0xA50C, written in the host's (little-endian) order.
        [0x0c, 0xa5, ..] => Kind::Nfdump,
        _ if ipfix_log::looks_like_ipfix(head) => Kind::Ipfix,
        _ => Kind::Text,
    }
}

/// The files named: each file itself, each directory's files (not its subdirectories), in
/// name order.
fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for l in paths {
        if l.is_dir() {
            let mut in_dir: Vec<PathBuf> = std::fs::read_dir(l)
                .with_context(|| format!("{}: cannot read the directory", l.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            in_dir.sort();
            files.extend(in_dir);
        } else {
            files.push(l.clone());
        }
    }
    Ok(files)
}

/// Reads every log file under `paths` -- syslog lines, stored IPFIX, either gzipped -- and
/// keeps the events that concern `q`'s endpoint (only those stay in memory).
pub fn read_logs(paths: &[PathBuf], q: &Query) -> Result<(Vec<Event>, LogsRead)> {
    let mut read = LogsRead::default();
    let mut events = Vec::new();
    for f in files(paths)? {
        let file =
            std::fs::File::open(&f).with_context(|| format!("{}: cannot read", f.display()))?;
        read.files += 1;
        read_one(&f, Box::new(file), q, &mut events, &mut read, 0)?;
    }
    Ok((events, read))
}

/// Reads one file's contents, by what its first octets say it is.
fn read_one(
    f: &Path,
    r: Box<dyn Read + '_>,
    q: &Query,
    events: &mut Vec<Event>,
    read: &mut LogsRead,
    depth: u8,
) -> Result<()> {
    let mut r = BufReader::with_capacity(1 << 16, r);
    let what = |e: std::io::Error| anyhow::anyhow!("{}: cannot read: {e}", f.display());
    let head = r.fill_buf().map_err(what)?.to_vec();
    let mut keep = |e: Event| {
        if covers(&e, q) {
            events.push(e);
        }
    };
    match kind(&head) {
        Kind::Gzip if depth == 0 => {
            let inner = flate2::bufread::MultiGzDecoder::new(r);
            return read_one(f, Box::new(inner), q, events, read, 1);
        }
        Kind::Gzip => read
            .warnings
            .push(format!("{}: gzip inside gzip, not read", f.display())),
        Kind::Nfdump => read.warnings.push(format!(
            "{}: an nfdump file (nfcapd's), not read: ask nfdump, e.g. nfdump -r FILE 'proto udp and dst port 40312'",
            f.display()
        )),
        Kind::Ipfix => {
            let s = ipfix_log::read(r, &mut keep).map_err(what)?;
            if let Some(why) = &s.stopped {
                read.warnings.push(format!("{}: {why}", f.display()));
            }
            let sum = &mut read.ipfix;
            sum.messages += s.messages;
            sum.records += s.records;
            sum.without_template += s.without_template;
            sum.bad += s.bad;
        }
        Kind::Text => {
            let mut buf = Vec::new();
            loop {
                buf.clear();
                if r.read_until(b'\n', &mut buf).map_err(what)? == 0 {
                    break;
                }
                read.lines += 1;
                if let Some(e) = parse_line(&String::from_utf8_lossy(&buf)) {
                    keep(e);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
<134>1 2026-11-26T14:01:58.100000Z gw xlat 812 NAT44_SESSION_CREATE - proto=tcp inside=198.18.0.7 inside_port=40312 outside=198.19.0.100 outside_port=40312 remote=198.19.0.2 remote_port=80
<134>1 2026-11-26T14:02:30.000000Z gw xlat 812 NAT44_SESSION_CREATE - proto=udp inside=198.18.0.9 inside_port=5000 outside=198.19.0.100 outside_port=40312 remote=198.19.0.3 remote_port=53
Nov 26 14:03:00 collector some other program: nothing=here
<134>1 2026-11-26T14:05:00.250000Z gw xlat 812 NAT44_SESSION_DELETE - proto=tcp inside=198.18.0.7 inside_port=40312 outside=198.19.0.100 outside_port=40312 remote=198.19.0.2 remote_port=80 reason=expired
<134>1 2026-11-26T13:00:00.000000Z gw xlat 812 PORT_BLOCK_ALLOC - proto=tcp inside=198.18.0.8 outside=198.19.0.100 ports=40256-40767
<134>1 2026-11-26T13:30:00.000000Z gw xlat 812 PORT_BLOCK_DEALLOC - proto=tcp inside=198.18.0.8 outside=198.19.0.100 ports=40256-40767
";

    fn q(at: &str) -> Query {
        Query {
            addr: Ipv4Addr::new(198, 19, 0, 100),
            port: 40312,
            at: parse_time(at).unwrap(),
            proto: None,
        }
    }

    fn inside(h: &Hit) -> &str {
        &h.fields.iter().find(|(k, _)| k == "inside").unwrap().1
    }

    #[test]
    fn rfc3339_times_both_ways() {
        let t = parse_time("2026-11-26T14:02:11.5Z").unwrap();
        assert_eq!(show_time(t), "2026-11-26T14:02:11.500000Z");
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_time("2000-03-01T00:00:00Z"),
            Some(951_868_800_000_000)
        );
        for bad in [
            "2026-13-01T00:00:00Z",
            "2026-11-26 14:02:11Z",
            "2026-11-26T14:02:11",
            "x",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    /// RFC 6888 REQ-12: the session open at the asked time, with its interval and end.
    #[test]
    fn who_had_the_endpoint_at_that_time() {
        let h = lookup(
            LOG.lines().filter_map(parse_line),
            &q("2026-11-26T14:02:11Z"),
        );
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(inside(&h[0]), "198.18.0.7");
        assert_eq!(h[0].what, "NAT44_SESSION");
        let until = h[0].until.clone().unwrap();
        assert_eq!(until.1.as_deref(), Some("expired"));
        assert_eq!(show_time(until.0), "2026-11-26T14:05:00.250000Z");
        // Later both the TCP session and the UDP one (still open in the log) held it.
        let h = lookup(
            LOG.lines().filter_map(parse_line),
            &q("2026-11-26T14:03:00Z"),
        );
        assert_eq!(h.len(), 2);
        assert!(h[1].until.is_none());
        // With a protocol, only that one.
        let mut udp = q("2026-11-26T14:03:00Z");
        udp.proto = Some("udp".into());
        let h = lookup(LOG.lines().filter_map(parse_line), &udp);
        assert_eq!((h.len(), inside(&h[0])), (1, "198.18.0.9"));
        // Port blocks: the range covers the port.
        let h = lookup(
            LOG.lines().filter_map(parse_line),
            &q("2026-11-26T13:10:00Z"),
        );
        assert_eq!(
            (h.len(), h[0].what.as_str(), inside(&h[0])),
            (1, "PORT_BLOCK", "198.18.0.8")
        );
        // Nobody before, or between.
        assert!(lookup(
            LOG.lines().filter_map(parse_line),
            &q("2026-11-26T12:00:00Z")
        )
        .is_empty());
        assert!(lookup(
            LOG.lines().filter_map(parse_line),
            &q("2026-11-26T13:45:00Z")
        )
        .is_empty());
    }

    /// A directory of logs as logrotate leaves them: text, gzipped text, an nfdump file
    /// (named, not read); every xlat line in them is found.
    #[test]
    fn a_directory_of_plain_and_gzipped_logs() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("xlat-lookup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (old, new) = LOG.split_at(LOG.find("Nov 26").unwrap());
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(old.as_bytes()).unwrap();
        std::fs::write(dir.join("xlat.log.1.gz"), gz.finish().unwrap()).unwrap();
        std::fs::write(dir.join("xlat.log"), new).unwrap();
        std::fs::write(dir.join("nfcapd.202611261400"), [0x0c, 0xa5, 1, 0]).unwrap();
        let r = read_logs(std::slice::from_ref(&dir), &q("2026-11-26T14:02:11Z"));
        std::fs::remove_dir_all(&dir).unwrap();
        let (events, read) = r.unwrap();
        assert_eq!(read.files, 3);
        assert_eq!(read.lines, LOG.lines().count() as u64);
        assert_eq!(read.warnings.len(), 1, "{:?}", read.warnings);
        assert!(read.warnings[0].contains("nfdump -r"));
        let h = lookup(events, &q("2026-11-26T14:02:11Z"));
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(inside(&h[0]), "198.18.0.7");
    }
}
