//! Freezing or thawing many cgroups as one step.
//!
//! Every write goes out before anything is confirmed, so the kernel freezes
//! all the cgroups at once while one thread reads `cgroup.events` (or
//! `freezer.state`) round after round; no process is woken to do it and no
//! cgroup waits for another's confirmation. A cgroup still unconfirmed after
//! the fast rounds takes the one-cgroup path ([`super::cgroup`]): its
//! D-state budget, the v1 vfork retry and, for a freeze it cannot confirm,
//! the undo, with every budget counted from the batch's start.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::cgroup::{CgroupFs, Kind, procs};
use crate::time::Backoff;
use crate::{budget::Budgets, errors::Error};

use super::cgroup::{freeze, is_frozen, thaw};

/// How long the rounds over the whole batch go on before the cgroups left
/// take the one-cgroup path (at most the confirm budget).
const FAST_ROUNDS: Duration = Duration::from_millis(50);

/// One cgroup of a batch confirmed frozen (or thawed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmed {
    /// Rounds of reads until the kernel confirmed it.
    pub rounds: u32,
    /// Its processes once frozen, from `cgroup.procs` (empty for a thaw).
    pub members: Vec<u32>,
}

/// Why one cgroup of a batch was not confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unconfirmed {
    /// The cgroup is not there (its launch ended and it was removed).
    pub gone: bool,
    /// What failed, naming the cgroup and what blocked it; a freeze says
    /// whether it was undone.
    pub text: String,
}

/// What one cgroup of a batch came to, in the order of the batch.
pub type Outcome = Result<Confirmed, Unconfirmed>;

/// Freezes every cgroup of `targets` and confirms each with the kernel; a
/// freeze that cannot be confirmed within the budgets is undone and fails
/// that cgroup alone.
pub fn freeze_many(fs: &dyn CgroupFs, targets: &[(Kind, &Path)], budgets: Budgets) -> Vec<Outcome> {
    many(fs, targets, true, budgets)
}

/// Thaws every cgroup of `targets` and confirms each.
pub fn thaw_many(fs: &dyn CgroupFs, targets: &[(Kind, &Path)], budgets: Budgets) -> Vec<Outcome> {
    many(fs, targets, false, budgets)
}

fn unconfirmed(e: &Error) -> Unconfirmed {
    let gone = matches!(e, Error::Read { source, .. } | Error::Write { source, .. }
        if source.kind() == std::io::ErrorKind::NotFound);
    Unconfirmed {
        gone,
        text: e.to_string(),
    }
}

fn many(
    fs: &dyn CgroupFs,
    targets: &[(Kind, &Path)],
    frozen: bool,
    budgets: Budgets,
) -> Vec<Outcome> {
    let start = Instant::now();
    let mut done: Vec<Option<Result<u32, Unconfirmed>>> = targets
        .iter()
        .map(|(kind, dir)| {
            let (file, value) = kind.freezer_write(frozen);
            fs.write(dir, file, value)
                .err()
                .map(|e| Err(unconfirmed(&e)))
        })
        .collect();
    let fast = FAST_ROUNDS.min(budgets.confirm);
    let mut backoff = Backoff::new();
    let mut rounds = 0;
    loop {
        rounds += 1;
        let mut pending = false;
        for (slot, (kind, dir)) in done.iter_mut().zip(targets) {
            if slot.is_some() {
                continue;
            }
            match is_frozen(fs, *kind, dir, frozen) {
                Ok(true) => *slot = Some(Ok(rounds)),
                Ok(false) => pending = true,
                Err(e) => *slot = Some(Err(unconfirmed(&e))),
            }
        }
        if !pending || start.elapsed() >= fast {
            break;
        }
        backoff.sleep();
    }
    done.into_iter()
        .zip(targets)
        .map(|(slot, (kind, dir))| {
            let rounds = match slot {
                Some(r) => r?,
                None => {
                    let one = if frozen {
                        freeze(fs, *kind, dir, budgets, start)
                    } else {
                        thaw(fs, *kind, dir, budgets, start)
                    };
                    rounds
                        + one.map_err(|f| Unconfirmed {
                            gone: false,
                            text: f.text,
                        })?
                }
            };
            let members = if frozen {
                procs(fs, dir).unwrap_or_default()
            } else {
                Vec::new()
            };
            Ok(Confirmed { rounds, members })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fake::FakeFs;

    fn quick() -> Budgets {
        Budgets {
            command: Duration::from_secs(5),
            confirm: Duration::from_millis(30),
            d_state: Duration::from_millis(60),
            stop_grace: Duration::from_millis(30),
        }
    }

    #[test]
    fn every_freeze_is_written_before_any_is_confirmed() {
        let fs = FakeFs::default();
        fs.script(
            "cgroup.events",
            &["frozen 0\n", "frozen 1\n", "frozen 1\n", "frozen 1\n"],
        );
        fs.script("cgroup.procs", &["7\n8\n"]);
        let (a, b) = (Path::new("/cg/a"), Path::new("/cg/b"));
        let out = freeze_many(&fs, &[(Kind::V2, a), (Kind::V2, b)], quick());
        assert_eq!(
            fs.writes(),
            vec![
                ("cgroup.freeze".into(), "1".into()),
                ("cgroup.freeze".into(), "1".into())
            ]
        );
        let confirmed = out
            .into_iter()
            .map(|o| o.expect("confirmed"))
            .collect::<Vec<_>>();
        assert_eq!(confirmed[0].rounds, 2, "the first read said frozen 0");
        assert_eq!(confirmed[1].rounds, 1);
        assert_eq!(confirmed[0].members, vec![7, 8]);
    }

    #[test]
    fn a_cgroup_that_never_freezes_fails_alone_and_is_undone() {
        let fs = FakeFs::default();
        fs.script("cgroup.events", &["frozen 0\n"]);
        fs.script("cgroup.procs", &[""]);
        let out = freeze_many(&fs, &[(Kind::V2, Path::new("/cg/a"))], quick());
        let err = out
            .into_iter()
            .next()
            .expect("one")
            .expect_err("never frozen");
        assert!(!err.gone);
        assert!(err.text.contains("pause undone"), "{}", err.text);
        assert_eq!(
            fs.writes().last(),
            Some(&("cgroup.freeze".into(), "0".into()))
        );
    }
}
