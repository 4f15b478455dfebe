//! Progress of a lab run on stderr. On a terminal: one bar line redrawn in place (units of work
//! done out of those planned, elapsed time, an estimate of what is left, the trial running
//! now), with lasting messages (devices set up, ceilings, warnings) printed above it. Anywhere
//! else (CI logs, files): plain lines, one per message and one per finished trial, each with
//! the elapsed time and the unit count, so logs stay readable.
//!
//! A unit is one device set up for one experiment (and frame size where the experiment has
//! sizes); the plan's count is known before the run starts, how long each takes is not, so the
//! estimate assumes the units left take as long as the ones done.

use std::cell::RefCell;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Width of the bar itself, in characters.
const BAR: usize = 24;

#[derive(Debug)]
struct State {
    total: usize,
    done: usize,
    /// What runs now (on a terminal: the tail of the bar line).
    status: String,
    drawn: bool,
}

/// The run's progress display.
#[derive(Debug)]
pub struct Progress {
    tty: bool,
    started: Instant,
    st: RefCell<State>,
}

impl Progress {
    /// A bar on stderr if stderr is a terminal (and TERM is not `dumb`), plain lines otherwise.
    pub fn new() -> Progress {
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        Progress::with_mode(std::io::stderr().is_terminal() && !dumb)
    }

    fn with_mode(tty: bool) -> Progress {
        Progress {
            tty,
            started: Instant::now(),
            st: RefCell::new(State {
                total: 0,
                done: 0,
                status: String::new(),
                drawn: false,
            }),
        }
    }

    /// Plans `n` more units.
    pub fn plan(&self, n: usize) {
        self.st.borrow_mut().total += n;
        self.redraw();
    }

    /// One unit finished.
    pub fn unit_done(&self) {
        {
            let mut st = self.st.borrow_mut();
            st.done += 1;
            st.total = st.total.max(st.done);
        }
        self.redraw();
    }

    /// A lasting message.
    pub fn line(&self, msg: &str) {
        let text = self.plain(msg);
        self.emit(Some(&text));
    }

    /// What runs now: on a terminal the bar shows it until the next status; plain output
    /// does not print it (the finished trial's line follows).
    pub fn status(&self, msg: &str) {
        if self.tty {
            self.st.borrow_mut().status = msg.to_string();
            self.redraw();
        }
    }

    /// A finished step (a trial): on a terminal it replaces the status, elsewhere a line.
    pub fn step(&self, msg: &str) {
        if self.tty {
            self.status(msg);
        } else {
            self.line(msg);
        }
    }

    /// Removes the bar (before the report is printed, and on drop).
    pub fn clear(&self) {
        let mut st = self.st.borrow_mut();
        if self.tty && st.drawn {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K");
            let _ = e.flush();
            st.drawn = false;
        }
    }

    fn plain(&self, msg: &str) -> String {
        let st = self.st.borrow();
        let units = if st.total > 0 {
            format!(" {}/{}", st.done, st.total)
        } else {
            String::new()
        };
        format!(
            "[{:>6.1}s{units}] {msg}",
            self.started.elapsed().as_secs_f64()
        )
    }

    fn redraw(&self) {
        self.emit(None);
    }

    /// Clears the bar, prints `line` if any, and draws the bar again (terminal), or prints
    /// `line` (plain).
    fn emit(&self, line: Option<&str>) {
        let mut e = std::io::stderr().lock();
        if !self.tty {
            if let Some(l) = line {
                let _ = writeln!(e, "{l}");
            }
            return;
        }
        let mut st = self.st.borrow_mut();
        let width = crate::sys::term_width(2).unwrap_or(100).clamp(40, 400);
        let mut out = String::from("\r\x1b[2K");
        if let Some(l) = line {
            out.push_str(l);
            out.push('\n');
        }
        out.push_str(&bar_line(
            st.done,
            st.total,
            self.started.elapsed(),
            &st.status,
            width - 1,
        ));
        let _ = write!(e, "{out}");
        let _ = e.flush();
        st.drawn = true;
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `m:ss` (or `h:mm:ss`).
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// The bar line, at most `width` characters: `[#####.....] 3/12 0:42 ~1:24 left  status`.
fn bar_line(done: usize, total: usize, elapsed: Duration, status: &str, width: usize) -> String {
    let total = total.max(done);
    let filled = if total == 0 {
        0
    } else {
        (done * BAR).div_ceil(total).min(BAR)
    };
    let left = if done > 0 && total > done {
        let each = elapsed.as_secs_f64() / done as f64;
        format!(
            " ~{} left",
            clock(Duration::from_secs_f64(each * (total - done) as f64))
        )
    } else {
        String::new()
    };
    let s = format!(
        "[{}{}] {done}/{total} {}{left}  {status}",
        "#".repeat(filled),
        ".".repeat(BAR - filled),
        clock(elapsed),
    );
    s.chars().take(width).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_lines() {
        let s = bar_line(0, 12, Duration::from_secs(5), "setting up", 200);
        assert_eq!(s, format!("[{}] 0/12 0:05  setting up", ".".repeat(BAR)));
        let s = bar_line(3, 12, Duration::from_secs(42), "trial 9", 200);
        assert_eq!(
            s,
            format!(
                "[{}{}] 3/12 0:42 ~2:06 left  trial 9",
                "#".repeat(6),
                ".".repeat(18)
            )
        );
        let s = bar_line(12, 12, Duration::from_secs(3725), "", 200);
        assert!(s.starts_with(&format!("[{}] 12/12 1:02:05", "#".repeat(BAR))));
        // More units than planned: the count grows, the bar stays full.
        assert!(bar_line(5, 4, Duration::ZERO, "", 200).contains("5/5"));
        // Never wider than the terminal (a wrapped bar cannot be redrawn in place).
        assert_eq!(
            bar_line(1, 2, Duration::ZERO, &"x".repeat(500), 60).len(),
            60
        );
    }

    #[test]
    fn plain_lines_carry_time_and_units() {
        let p = Progress::with_mode(false);
        assert!(p.plain("hello").ends_with("s] hello"));
        p.plan(4);
        p.unit_done();
        assert!(p.plain("x").contains(" 1/4] x"));
    }
}
