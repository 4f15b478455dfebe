//! What `xlat run` changed on the machine, written down before each change, so that the
//! leftovers of a run that could not clean up (SIGKILL, an OOM kill, a crash, a power-cut
//! container) are recognised as ours on the next start, undone, and the machine's true
//! original settings restored -- not the values the dead run left behind.
//!
//! One JSON file per TUN device and purpose (`routes`, `tunnel`) in [`STATE_DIR`], named
//! with the network namespace's inode so two namespaces' daemons on equally named devices
//! keep apart:
//!
//! ```text
//! /run/xlat/xlat0-routes.4026531840.json
//! {"pid":1234,"tun":"xlat0","sysctls":[["/proc/sys/net/ipv4/ip_forward","0"]],
//!  "undo":[["route","del","default","dev","xlat0","table","4400"], ...]}
//! ```
//!
//! Each undo is a [`Step`] in its words (`ip`'s syntax, [`crate::rtnl`]): readable, and the
//! very format of the versions that ran them through `ip -batch`, so their journals are
//! replayed too -- now over rtnetlink. Words outside that vocabulary are not run; they are
//! logged (the operator removes those by hand) and counted as not undone.
//!
//! The order is write-ahead: an undo step is in the file before the change it undoes is
//! made, and a sysctl's original value before the sysctl is written. Undoing something that
//! was never made fails harmlessly (deleting a missing route), so a run killed half-way
//! through its set-up is cleaned up too. The file is removed after a clean exit.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::rtnl::{self, Step};

/// Where the journals live (tmpfs: a reboot forgets them, as it forgets the changes).
pub const STATE_DIR: &str = "/run/xlat";

/// The contents of one journal file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The daemon that wrote it.
    pub pid: u32,
    pub tun: String,
    /// `/proc/sys` files changed, each with the value it had before xlat first changed it.
    pub sysctls: Vec<(String, String)>,
    /// The words of the steps that undo each change, oldest first.
    pub undo: Vec<Vec<String>>,
}

/// An open journal: the file and what it says.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    state: State,
}

/// What [`Journal::open`] found and undid of an earlier run.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The dead run's process id.
    pub pid: u32,
    /// Undo steps that succeeded, of `undo_total`.
    pub undone: usize,
    pub undo_total: usize,
    /// Sysctls put back to their original values.
    pub sysctls: usize,
}

/// The inode of this thread's network namespace (`/proc/thread-self/ns/net`).
fn netns_inode() -> Result<u64> {
    let m = std::fs::metadata("/proc/thread-self/ns/net")
        .context("cannot read /proc/thread-self/ns/net (is /proc mounted?)")?;
    Ok(m.ino())
}

/// Is `pid` a live process running the same executable as this one (not a dead run's
/// number reused by another program)?
fn same_program_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return false;
    }
    let theirs = std::fs::read_link(format!("/proc/{pid}/exe"));
    let ours = std::fs::read_link("/proc/self/exe");
    match (theirs, ours) {
        (Ok(t), Ok(o)) => t.file_name() == o.file_name(),
        _ => false,
    }
}

impl Journal {
    /// The journal for `tun` and `purpose` in `dir`. A journal left there by a run that is
    /// gone is replayed first -- its changes undone, newest first, its sysctls restored --
    /// and reported; a journal of a daemon still running is an error (two daemons would
    /// fight over the same routes).
    pub fn open(dir: &Path, tun: &str, purpose: &str) -> Result<(Journal, Option<Recovered>)> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the state directory {}", dir.display()))?;
        let path = dir.join(format!("{tun}-{purpose}.{}.json", netns_inode()?));
        let mut recovered = None;
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let old: State = serde_json::from_str(&text).with_context(|| {
                    format!(
                        "{}: not an xlat state file; remove it if no xlat runs on {tun}",
                        path.display()
                    )
                })?;
                if same_program_alive(old.pid) {
                    bail!(
                        "xlat (pid {}) is running on {tun} in this network namespace ({}): stop it first",
                        old.pid,
                        path.display()
                    );
                }
                recovered = Some(replay(&old));
                std::fs::remove_file(&path)
                    .with_context(|| format!("cannot remove {}", path.display()))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
        let j = Journal {
            path,
            state: State {
                pid: std::process::id(),
                tun: tun.to_string(),
                ..State::default()
            },
        };
        Ok((j, recovered))
    }

    /// Records that `path` is about to change from `original` (kept on disk before the
    /// change is made).
    pub fn sysctl(&mut self, path: &str, original: &str) -> Result<()> {
        self.state
            .sysctls
            .push((path.to_string(), original.to_string()));
        self.save()
    }

    /// Records the undo steps (their words) of changes about to be made.
    pub fn undo(&mut self, undo: impl IntoIterator<Item = Vec<String>>) -> Result<()> {
        self.state.undo.extend(undo);
        self.save()
    }

    /// Forgets the undo steps `done` (their changes were undone while running: a reload
    /// removed them).
    pub fn forget(&mut self, done: &[Vec<String>]) -> Result<()> {
        self.state.undo.retain(|u| !done.contains(u));
        self.save()
    }

    /// Writes the file (a new file renamed over the old one: never half written).
    fn save(&self) -> Result<()> {
        let tmp = self.path.with_extension("tmp");
        let text = serde_json::to_string(&self.state).context("encoding the state file")?;
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_data()?;
            std::fs::rename(&tmp, &self.path)
        };
        write().with_context(|| format!("cannot write the state file {}", self.path.display()))
    }

    /// Removes the file: everything it lists has been undone.
    pub fn close(self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            warn!(path = %self.path.display(), error = %e, "cannot remove the state file");
        }
    }
}

/// Undoes what `old` lists, newest first, and restores its sysctls. Failures are expected
/// (a route that went with its device, a change never made) and only counted.
fn replay(old: &State) -> Recovered {
    let mut undo: Vec<Step> = Vec::new();
    for words in old.undo.iter().rev() {
        match Step::parse(words) {
            Ok(s) => undo.push(s),
            Err(e) => warn!(
                undo = %words.join(" "),
                error = %e,
                "a leftover change in the state file is not one xlat makes: not undone, remove it by hand"
            ),
        }
    }
    let undone = rtnl::apply(&undo, true).ok();
    let mut sysctls = 0;
    for (path, value) in old.sysctls.iter().rev() {
        if std::fs::write(path, value).is_ok() {
            sysctls += 1;
        }
    }
    Recovered {
        pid: old.pid,
        undone,
        undo_total: old.undo.len(),
        sysctls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("xlat-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn journal_is_written_ahead_and_removed_on_close() -> Result<()> {
        let dir = scratch("close");
        let (mut j, rec) = Journal::open(&dir, "t0", "routes")?;
        assert_eq!(rec, None);
        let sysfile = dir.join("fake_sysctl");
        std::fs::write(&sysfile, "5")?;
        j.sysctl(&sysfile.to_string_lossy(), "5")?;
        j.undo([vec!["route".into(), "del".into(), "x".into()]])?;
        let files: Vec<_> = std::fs::read_dir(&dir)?.flatten().collect();
        assert_eq!(files.len(), 2, "the journal and the fake sysctl: {files:?}");
        let text = std::fs::read_to_string(&j.path)?;
        let st: State = serde_json::from_str(&text)?;
        assert_eq!(st.pid, std::process::id());
        assert_eq!(st.undo, [vec!["route", "del", "x"]]);
        assert_eq!(st.sysctls.len(), 1);
        let path = j.path.clone();
        j.close();
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn leftovers_of_a_dead_run_are_replayed() -> Result<()> {
        let dir = scratch("replay");
        let (j, _) = Journal::open(&dir, "t1", "routes")?;
        // A dead run: a pid that is not ours and not alive (pid_max is below 2^22).
        let sysfile = dir.join("fake_sysctl");
        std::fs::write(&sysfile, "1")?;
        let dead = State {
            pid: u32::MAX - 1,
            tun: "t1".into(),
            sysctls: vec![(sysfile.to_string_lossy().into_owned(), "0".into())],
            // Words outside the vocabulary: counted, not fatal.
            undo: vec![vec!["route".into(), "del".into(), "bogus-word".into()]],
        };
        std::fs::write(&j.path, serde_json::to_string(&dead)?)?;
        let (j2, rec) = Journal::open(&dir, "t1", "routes")?;
        let rec = rec.expect("the dead run's journal was not found");
        assert_eq!(rec.pid, u32::MAX - 1);
        assert_eq!((rec.undone, rec.undo_total, rec.sysctls), (0, 1, 1));
        assert_eq!(std::fs::read_to_string(&sysfile)?, "0", "original restored");
        j2.close();
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn garbage_state_file_is_a_clear_error() -> Result<()> {
        let dir = scratch("garbage");
        let (j, _) = Journal::open(&dir, "t2", "routes")?;
        std::fs::write(&j.path, "not json")?;
        let e = Journal::open(&dir, "t2", "routes").expect_err("garbage accepted");
        assert!(format!("{e:#}").contains("not an xlat state file"), "{e:#}");
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
