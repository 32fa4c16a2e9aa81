//! Pausing and continuing a launch, with proof.
//!
//! Three strategies sit behind [`Freezer`], best first: the cgroup v2
//! freezer (`cgroup.freeze`, confirmed by `frozen 1` in `cgroup.events`),
//! the cgroup v1 freezer (`freezer.state` reads `FROZEN`), and a SIGSTOP
//! sweep (scan and stop until no new member appears and every member is
//! `T`/`t`, a zombie, or gone). With a cgroup, the cgroup is the membership;
//! stop still scans for the tree and the tag as well. A pause that cannot
//! be confirmed within its budget is undone before it is reported failed, so
//! a caller never inherits a half-frozen tree.

pub mod batch;
mod cgroup;
mod sigstop;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use rollpoint_proto::receipt::{Member, Method, Op, Outcome, RECEIPT_VERSION, Receipt};

use crate::cgroup::{CgroupFs, Kind, RealFs};
use crate::ident::ProcId;
use crate::members::{MemberSpec, Membership};
use crate::scan::Table;
use crate::stat::Stat;
use crate::time::micros_since;
use crate::{budget::Budgets, errors::Error};

use sigstop::continue_ids;

/// State letter reported for a member frozen by its cgroup (the kernel's
/// own letters for frozen tasks, `S` on v2 and `D` on v1, say nothing).
pub const FROZEN_BY_CGROUP: char = 'F';

/// Which freeze strategy to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// The best the launch has: v2, then v1, then SIGSTOP.
    #[default]
    Auto,
    CgroupV2,
    CgroupV1,
    Sigstop,
}

impl FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "cgroup-v2" | "v2" => Ok(Self::CgroupV2),
            "cgroup-v1" | "v1" => Ok(Self::CgroupV1),
            "sigstop" => Ok(Self::Sigstop),
            other => Err(format!(
                "unknown freeze strategy {other:?} (expected auto, cgroup-v2, cgroup-v1 or sigstop)"
            )),
        }
    }
}

/// A launch as the engine sees it.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    pub id: String,
    pub spec: MemberSpec,
    pub cgroup_v2: Option<PathBuf>,
    pub cgroup_v1: Option<PathBuf>,
}

/// What a pause froze, so continue undoes exactly that. A client that
/// pauses without a live supervisor saves it and hands it back to continue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Paused {
    /// The launch cgroup was frozen.
    pub cgroup: bool,
    /// Members stopped with SIGSTOP.
    pub signalled: Vec<ProcId>,
    /// Members that were already stopped before the pause; left stopped.
    pub pre_stopped: HashSet<ProcId>,
}

/// Pause, continue and stop for one launch.
#[derive(Debug)]
pub struct Freezer {
    pub(crate) launch_id: String,
    pub(crate) method: Method,
    pub(crate) cgroup_dir: Option<PathBuf>,
    pub(crate) cgroup_v2: Option<PathBuf>,
    pub(crate) cgroup_v1: Option<PathBuf>,
    pub(crate) budgets: Budgets,
    pub(crate) membership: Membership,
    pub(crate) fs: Box<dyn CgroupFs>,
    paused: Option<Paused>,
}

impl Freezer {
    /// Chooses the strategy for `launch` and prepares to control it.
    pub fn new(launch: Launch, strategy: Strategy, budgets: Budgets) -> Result<Self, Error> {
        Self::with_fs(launch, strategy, budgets, Box::new(RealFs))
    }

    /// As [`Self::new`], with a given cgroup filesystem.
    pub fn with_fs(
        launch: Launch,
        strategy: Strategy,
        budgets: Budgets,
        fs: Box<dyn CgroupFs>,
    ) -> Result<Self, Error> {
        let unavailable = |strategy, what| Error::StrategyUnavailable {
            strategy,
            what,
            launch: launch.id.clone(),
        };
        let (method, cgroup_dir) = match strategy {
            Strategy::Auto => match (&launch.cgroup_v2, &launch.cgroup_v1) {
                (Some(d), _) => (Method::CgroupV2, Some(d.clone())),
                (None, Some(d)) => (Method::CgroupV1, Some(d.clone())),
                (None, None) => (Method::Sigstop, None),
            },
            Strategy::CgroupV2 => (
                Method::CgroupV2,
                Some(
                    launch
                        .cgroup_v2
                        .clone()
                        .ok_or_else(|| unavailable("cgroup-v2", "v2"))?,
                ),
            ),
            Strategy::CgroupV1 => (
                Method::CgroupV1,
                Some(
                    launch
                        .cgroup_v1
                        .clone()
                        .ok_or_else(|| unavailable("cgroup-v1", "v1 freezer"))?,
                ),
            ),
            Strategy::Sigstop => (Method::Sigstop, None),
        };
        Ok(Self {
            launch_id: launch.id,
            method,
            cgroup_dir,
            cgroup_v2: launch.cgroup_v2,
            cgroup_v1: launch.cgroup_v1,
            budgets,
            membership: Membership::new(launch.spec),
            fs,
            paused: None,
        })
    }

    pub fn method(&self) -> Method {
        self.method
    }

    /// What the current pause froze, if paused.
    pub fn paused(&self) -> Option<&Paused> {
        self.paused.as_ref()
    }

    /// Adopts a pause made by another `Freezer` of the same launch.
    pub fn adopt_pause(&mut self, paused: Paused) {
        self.paused = Some(paused);
    }

    /// The members of the launch now.
    pub fn members(&mut self) -> Vec<(ProcId, Stat)> {
        self.membership.find(&Table::scan())
    }

    fn kind(&self) -> Option<Kind> {
        match self.method {
            Method::CgroupV2 => Some(Kind::V2),
            Method::CgroupV1 => Some(Kind::V1Freezer),
            Method::Sigstop | Method::Signals => None,
        }
    }

    pub(crate) fn receipt(
        &self,
        op: Op,
        outcome: Outcome,
        members: Vec<Member>,
        rounds: u32,
        start: Instant,
        reason: Option<String>,
    ) -> Receipt {
        Receipt {
            v: RECEIPT_VERSION,
            op,
            launch_id: self.launch_id.clone(),
            method: self.method,
            outcome,
            members,
            rounds,
            duration_us: micros_since(start),
            reason,
            cleanup_confirmed: None,
            exit_code: None,
        }
    }

    /// Freezes the launch and confirms it, or undoes the attempt and says why.
    pub fn pause(&mut self) -> Receipt {
        let start = Instant::now();
        if self.paused.is_some() {
            let members = self.member_states();
            return self.receipt(Op::Pause, Outcome::Confirmed, members, 0, start, None);
        }
        match (self.kind(), self.cgroup_dir.clone()) {
            (Some(kind), Some(dir)) => self.pause_cgroup(kind, &dir, start),
            _ => self.pause_sweep(start),
        }
    }

    /// Freezes the cgroup and confirms it. The cgroup is the membership:
    /// every process forked inside it stays inside (setsid, double forks and
    /// cleared environments included) unless someone with rights over the
    /// cgroups moves it out, so no /proc scan is needed. Members are listed
    /// by pid from `cgroup.procs`, without a stat read each: at 2,400
    /// processes those reads would more than double the pause.
    fn pause_cgroup(&mut self, kind: Kind, dir: &Path, start: Instant) -> Receipt {
        let fs = self.fs.as_ref();
        let rounds = match cgroup::freeze(fs, kind, dir, self.budgets, start) {
            Ok(rounds) => rounds,
            Err(f) => {
                let members = self.member_states();
                return self.receipt(
                    Op::Pause,
                    Outcome::Failed,
                    members,
                    f.rounds,
                    start,
                    Some(f.text),
                );
            }
        };
        let members = crate::cgroup::procs(fs, dir)
            .unwrap_or_default()
            .into_iter()
            .map(|pid| Member {
                pid,
                start_time: None,
                state: FROZEN_BY_CGROUP,
            })
            .collect();
        self.paused = Some(Paused {
            cgroup: true,
            ..Paused::default()
        });
        self.receipt(Op::Pause, Outcome::Confirmed, members, rounds, start, None)
    }

    /// Stops every member with SIGSTOP; on failure undoes what it stopped.
    fn pause_sweep(&mut self, start: Instant) -> Receipt {
        let sweep = sigstop::stop_sweep(&mut self.membership, self.budgets, start);
        let rounds = sweep.rounds;
        self.paused = Some(Paused {
            cgroup: false,
            signalled: sweep.signalled,
            pre_stopped: sweep.pre_stopped,
        });
        if let Some(reason) = sweep.failure {
            // Undo: a half-paused tree is worse than a running one.
            let undo = self.continue_frozen();
            let reason = if undo.confirmed() {
                format!("{reason}; pause undone")
            } else {
                format!(
                    "{reason}; undoing the pause also failed: {}",
                    undo.reason.unwrap_or_default()
                )
            };
            let members = self.member_states();
            return self.receipt(
                Op::Pause,
                Outcome::Failed,
                members,
                rounds,
                start,
                Some(reason),
            );
        }
        self.receipt(
            Op::Pause,
            Outcome::Confirmed,
            sweep.members,
            rounds,
            start,
            None,
        )
    }

    /// Continues exactly what the last pause froze and confirms nothing of it
    /// is left frozen or stopped: the cgroup reports thawed, and every
    /// member stopped by signal is seen running (or gone).
    pub fn continue_frozen(&mut self) -> Receipt {
        let start = Instant::now();
        let Some(paused) = self.paused.take() else {
            let members = self.member_states();
            return self.receipt(Op::Continue, Outcome::NotRunning, members, 0, start, None);
        };
        let mut rounds = 0;
        let mut failures = Vec::new();
        if paused.cgroup
            && let (Some(kind), Some(dir)) = (self.kind(), self.cgroup_dir.clone())
        {
            match cgroup::thaw(self.fs.as_ref(), kind, &dir, self.budgets, start) {
                Ok(r) => rounds += r,
                Err(e) => failures.push(e.text),
            }
        }
        let members = match continue_ids(&paused.signalled, self.budgets, start) {
            Ok((r, members)) => {
                rounds += r;
                members
            }
            Err(reason) => {
                failures.push(reason);
                Vec::new()
            }
        };
        if failures.is_empty() {
            self.receipt(
                Op::Continue,
                Outcome::Confirmed,
                members,
                rounds,
                start,
                None,
            )
        } else {
            let reason = failures.join("; ");
            self.receipt(
                Op::Continue,
                Outcome::Failed,
                members,
                rounds,
                start,
                Some(reason),
            )
        }
    }

    pub(crate) fn member_states(&mut self) -> Vec<Member> {
        let members = self.members();
        to_members(&members)
    }

    /// Forgets a pause without continuing (used by stop, which thaws
    /// everything itself).
    pub(crate) fn take_paused(&mut self) -> bool {
        self.paused.take().is_some()
    }
}

/// Freezes a whole cgroup (a sandbox, not a launch) and confirms it with the
/// kernel; a freeze that cannot be confirmed is undone before the error.
pub fn freeze_cgroup(kind: Kind, dir: &Path, budgets: Budgets) -> Result<(), Error> {
    cgroup::freeze(&RealFs, kind, dir, budgets, Instant::now())
        .map(|_| ())
        .map_err(|f| Error::CgroupFreezer {
            what: "freeze",
            path: dir.to_owned(),
            text: f.text,
        })
}

/// Thaws a cgroup frozen by [`freeze_cgroup`] and confirms it.
pub fn thaw_cgroup(kind: Kind, dir: &Path, budgets: Budgets) -> Result<(), Error> {
    cgroup::thaw(&RealFs, kind, dir, budgets, Instant::now())
        .map(|_| ())
        .map_err(|f| Error::CgroupFreezer {
            what: "thaw",
            path: dir.to_owned(),
            text: f.text,
        })
}

pub(crate) fn to_members(members: &[(ProcId, Stat)]) -> Vec<Member> {
    members
        .iter()
        .map(|(id, s)| Member {
            pid: id.pid,
            start_time: Some(id.start_time),
            state: s.state,
        })
        .collect()
}

/// Once the confirm budget is spent: whether to give up, and if so which
/// budget was exceeded and who blocked it. `pending` holds each unconfirmed
/// member's description and whether it is in uninterruptible sleep; members
/// in `D` get the D budget, everything else only the confirm budget.
pub(crate) fn overdue(
    elapsed: std::time::Duration,
    budgets: Budgets,
    pending: &[(String, bool)],
) -> Option<(std::time::Duration, String)> {
    let in_d: Vec<String> = pending
        .iter()
        .filter(|(_, d)| *d)
        .map(|(w, _)| w.clone())
        .collect();
    if in_d.is_empty() {
        let all: Vec<String> = pending.iter().map(|(w, _)| w.clone()).collect();
        return Some((budgets.confirm, cap_list(&all)));
    }
    (elapsed >= budgets.d_state || elapsed >= budgets.command)
        .then(|| (budgets.d_state.min(budgets.command), cap_list(&in_d)))
}

/// Joins at most 20 items and says how many were left out.
pub(crate) fn cap_list(items: &[String]) -> String {
    const CAP: usize = 20;
    let mut s = items
        .iter()
        .take(CAP)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > CAP {
        s.push_str(&format!(" and {} more", items.len() - CAP));
    }
    s
}
