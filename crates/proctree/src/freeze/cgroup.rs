//! Freezing and thawing one cgroup, v2 or v1, and confirming it.
//!
//! v2: write `1` to `cgroup.freeze`, wait for `frozen 1` in `cgroup.events`.
//! v1: write `FROZEN` to `freezer.state`, wait until it reads `FROZEN` (it
//! passes through `FREEZING`). A task in uninterruptible sleep delays both
//! until its syscall returns; such tasks get the `D` budget, everything else
//! the confirm budget, and on failure the cgroup is thawed again.

use std::path::Path;
use std::time::Instant;

use crate::Budgets;
use crate::cgroup::{CgroupFs, Kind, procs};
use crate::scan::read_stat;
use crate::time::Backoff;

use super::cap_list;

/// Why a freeze or thaw failed.
#[derive(Debug)]
pub(crate) struct Failure {
    pub text: String,
    pub rounds: u32,
}

pub(crate) fn freeze(
    fs: &dyn CgroupFs,
    kind: Kind,
    dir: &Path,
    budgets: Budgets,
    start: Instant,
) -> Result<u32, Failure> {
    let fail = |text: String, rounds| Failure { text, rounds };
    let (file, value) = match kind {
        Kind::V2 => ("cgroup.freeze", "1"),
        Kind::V1Freezer => ("freezer.state", "FROZEN"),
    };
    fs.write(dir, file, value).map_err(|e| fail(e.to_string(), 0))?;
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
    let (file, value) = match kind {
        Kind::V2 => ("cgroup.freeze", "0"),
        Kind::V1Freezer => ("freezer.state", "THAWED"),
    };
    fs.write(dir, file, value).map_err(|e| Failure {
        text: e.to_string(),
        rounds: 0,
    })?;
    wait_for(fs, kind, dir, false, budgets, start)
}

fn is_frozen(fs: &dyn CgroupFs, kind: Kind, dir: &Path, want: bool) -> Result<bool, crate::Error> {
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
        if elapsed >= budgets.confirm {
            let states = member_states(fs, dir);
            let in_d: Vec<String> = states
                .iter()
                .filter(|(_, s)| *s == 'D')
                .map(|(p, s)| format!("pid {p} in {s}"))
                .collect();
            let blocked_too_long = elapsed >= budgets.d_state || elapsed >= budgets.command;
            // On v1, frozen tasks themselves show `D`; only a thaw can
            // mistake them, and thawing needs no D budget.
            if in_d.is_empty() || blocked_too_long || !frozen {
                let listed: Vec<String> = states
                    .iter()
                    .map(|(p, s)| format!("pid {p} in {s}"))
                    .collect();
                let (budget, who) = if in_d.is_empty() || !frozen {
                    (budgets.confirm, cap_list(&listed))
                } else {
                    (budgets.d_state.min(budgets.command), cap_list(&in_d))
                };
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

fn member_states(fs: &dyn CgroupFs, dir: &Path) -> Vec<(u32, char)> {
    procs(fs, dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|pid| read_stat(pid).map(|s| (pid, s.state)))
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
        let rounds = freeze(&fs, Kind::V1Freezer, Path::new("/cg"), quick(), Instant::now())
            .expect("freezes");
        assert_eq!(rounds, 3);
        assert_eq!(fs.writes(), vec![("freezer.state".into(), "FROZEN".into())]);
    }

    #[test]
    fn v2_confirms_from_events() {
        let fs = FakeFs::default();
        fs.script("cgroup.events", &["populated 1\nfrozen 0\n", "populated 1\nfrozen 1\n"]);
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
        assert!(err.text.contains("did not freeze within 0.05s"), "{}", err.text);
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
        thaw(&fs, Kind::V1Freezer, Path::new("/cg"), quick(), Instant::now()).expect("thaws");
        assert_eq!(fs.writes(), vec![("freezer.state".into(), "THAWED".into())]);
    }
}
