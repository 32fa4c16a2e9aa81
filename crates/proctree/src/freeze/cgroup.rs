//! Freezing and thawing one cgroup, v2 or v1, and confirming it.
//!
//! v2: write `1` to `cgroup.freeze`, wait for `frozen 1` in `cgroup.events`.
//! v1: write `FROZEN` to `freezer.state`, wait until it reads `FROZEN` (it
//! passes through `FREEZING`). A task in uninterruptible sleep delays both
//! until its syscall returns; such tasks get the `D` budget, everything else
//! the confirm budget, and on failure the cgroup is thawed again.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::budget::Budgets;
use crate::cgroup::{CgroupFs, Kind, procs};
use crate::scan::{read_stat, wchan};
use crate::time::Backoff;

use super::overdue;

/// Why a freeze or thaw failed.
#[derive(Debug)]
pub(crate) struct Failure {
    pub text: String,
    pub rounds: u32,
}

/// Freezes the cgroup and waits for the kernel to confirm it; undoes the
/// freeze when it cannot be confirmed.
pub(crate) fn freeze(
    fs: &dyn CgroupFs,
    kind: Kind,
    dir: &Path,
    budgets: Budgets,
    start: Instant,
) -> Result<u32, Failure> {
    let fail = |text: String, rounds| Failure { text, rounds };
    let (file, value) = kind.freezer_write(true);
    fs.write(dir, file, value)
        .map_err(|e| fail(e.to_string(), 0))?;
    let outcome = wait_for(fs, kind, dir, true, budgets, start);
    if let Err(f) = &outcome {
        // Undo: never leave a cgroup half frozen.
        let undo = thaw(fs, kind, dir, budgets, Instant::now());
        let text = match undo {
            Ok(_) => format!("{}; pause undone", f.text),
            Err(u) => format!("{}; undoing the pause also failed: {}", f.text, u.text),
        };
        return Err(fail(text, f.rounds));
    }
    outcome
}

pub(crate) fn thaw(
    fs: &dyn CgroupFs,
    kind: Kind,
    dir: &Path,
    budgets: Budgets,
    start: Instant,
) -> Result<u32, Failure> {
    let (file, value) = kind.freezer_write(false);
    fs.write(dir, file, value).map_err(|e| Failure {
        text: e.to_string(),
        rounds: 0,
    })?;
    wait_for(fs, kind, dir, false, budgets, start)
}

pub(super) fn is_frozen(
    fs: &dyn CgroupFs,
    kind: Kind,
    dir: &Path,
    want: bool,
) -> Result<bool, crate::errors::Error> {
    Ok(match kind {
        Kind::V2 => {
            let events = fs.read(dir, "cgroup.events")?;
            let line = if want { "frozen 1" } else { "frozen 0" };
            events.lines().any(|l| l.trim() == line)
        }
        Kind::V1Freezer => {
            let state = fs.read(dir, "freezer.state")?;
            state.trim() == if want { "FROZEN" } else { "THAWED" }
        }
    })
}

fn wait_for(
    fs: &dyn CgroupFs,
    kind: Kind,
    dir: &Path,
    frozen: bool,
    budgets: Budgets,
    start: Instant,
) -> Result<u32, Failure> {
    let what = if frozen { "freeze" } else { "thaw" };
    let mut backoff = Backoff::new();
    let mut rounds = 0;
    let mut next_vfork_check = Duration::from_millis(50);
    loop {
        rounds += 1;
        match is_frozen(fs, kind, dir, frozen) {
            Ok(true) => return Ok(rounds),
            Ok(false) => {}
            Err(e) => {
                return Err(Failure {
                    text: e.to_string(),
                    rounds,
                });
            }
        }
        let elapsed = start.elapsed();
        // The v1 freezer stays FREEZING while a shell waits in vfork for a
        // child that froze before it could exec. Thaw for a moment so the
        // child execs, and freeze again; only FROZEN confirms.
        if kind == Kind::V1Freezer && frozen && elapsed >= next_vfork_check {
            next_vfork_check = elapsed + Duration::from_millis(50);
            if tasks(fs, dir).iter().any(Task::in_vfork) {
                let retry = fs.write(dir, "freezer.state", "THAWED").and_then(|()| {
                    std::thread::sleep(Duration::from_millis(1));
                    fs.write(dir, "freezer.state", "FROZEN")
                });
                if let Err(e) = retry {
                    return Err(Failure {
                        text: e.to_string(),
                        rounds,
                    });
                }
            }
        }
        if elapsed >= budgets.confirm {
            // A thaw has no D budget: frozen v1 tasks show `D` themselves.
            let pending: Vec<(String, bool)> = tasks(fs, dir)
                .iter()
                .map(|t| (t.describe(), frozen && t.state == 'D'))
                .collect();
            if let Some((budget, who)) = overdue(elapsed, budgets, &pending) {
                return Err(Failure {
                    text: format!(
                        "cgroup {} did not {what} within {}s: {who}",
                        dir.display(),
                        budget.as_secs_f64()
                    ),
                    rounds,
                });
            }
        }
        backoff.sleep();
    }
}

/// A task of the cgroup as seen now.
#[derive(Debug)]
struct Task {
    pid: u32,
    /// `F` for a task in the v1 refrigerator (the kernel shows it as `D`;
    /// tasks frozen inside a freezable sleep show `D` and their sleep).
    state: char,
    wchan: Option<String>,
}

impl Task {
    /// A parent waiting for its vfork child to exec or exit.
    fn in_vfork(&self) -> bool {
        self.state == 'D'
            && self
                .wchan
                .as_deref()
                .is_some_and(|w| w.contains("vfork") || w.contains("kernel_clone"))
    }

    fn describe(&self) -> String {
        match &self.wchan {
            Some(w) => format!("pid {} in {} ({w})", self.pid, self.state),
            None => format!("pid {} in {}", self.pid, self.state),
        }
    }
}

fn tasks(fs: &dyn CgroupFs, dir: &Path) -> Vec<Task> {
    procs(fs, dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(read_stat)
        .map(|s| {
            let wchan = wchan(s.pid);
            let frozen =
                s.state == 'D' && wchan.as_deref().is_some_and(|w| w.contains("refrigerator"));
            Task {
                pid: s.pid,
                state: if frozen { 'F' } else { s.state },
                wchan,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fake::FakeFs;
    use std::time::Duration;

    fn quick() -> Budgets {
        Budgets {
            command: Duration::from_secs(5),
            confirm: Duration::from_millis(50),
            d_state: Duration::from_millis(200),
            stop_grace: Duration::from_millis(50),
        }
    }

    #[test]
    fn v1_waits_through_freezing() {
        let fs = FakeFs::default();
        fs.script("freezer.state", &["FREEZING", "FREEZING", "FROZEN"]);
        let rounds = freeze(
            &fs,
            Kind::V1Freezer,
            Path::new("/cg"),
            quick(),
            Instant::now(),
        )
        .expect("freezes");
        assert_eq!(rounds, 3);
        assert_eq!(fs.writes(), vec![("freezer.state".into(), "FROZEN".into())]);
    }

    #[test]
    fn v2_confirms_from_events() {
        let fs = FakeFs::default();
        fs.script(
            "cgroup.events",
            &["populated 1\nfrozen 0\n", "populated 1\nfrozen 1\n"],
        );
        let rounds =
            freeze(&fs, Kind::V2, Path::new("/cg"), quick(), Instant::now()).expect("freezes");
        assert_eq!(rounds, 2);
        assert_eq!(fs.writes(), vec![("cgroup.freeze".into(), "1".into())]);
    }

    #[test]
    fn unconfirmed_freeze_is_undone_and_reported() {
        let fs = FakeFs::default();
        // Never frozen; after the undo, thawed.
        fs.script("cgroup.events", &["frozen 0\n"]);
        fs.script("cgroup.procs", &[""]);
        let err = freeze(&fs, Kind::V2, Path::new("/cg"), quick(), Instant::now())
            .expect_err("cannot confirm");
        assert!(
            err.text.contains("did not freeze within 0.05s"),
            "{}",
            err.text
        );
        assert!(err.text.contains("pause undone"), "{}", err.text);
        assert_eq!(
            fs.writes(),
            vec![
                ("cgroup.freeze".into(), "1".into()),
                ("cgroup.freeze".into(), "0".into())
            ]
        );
    }

    #[test]
    fn thaw_of_v1_waits_for_thawed() {
        let fs = FakeFs::default();
        fs.script("freezer.state", &["FROZEN", "THAWED"]);
        thaw(
            &fs,
            Kind::V1Freezer,
            Path::new("/cg"),
            quick(),
            Instant::now(),
        )
        .expect("thaws");
        assert_eq!(fs.writes(), vec![("freezer.state".into(), "THAWED".into())]);
    }
}
