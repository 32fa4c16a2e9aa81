//! What a live service knows that no file does: where each rollout its drivers hold stands.

use rollpoint_driver::machine::ParkKind;
use rollpoint_driver::{LaunchEntry, RunStatus, Runs};

/// Each rollout's id, state and number of launches: what a change stream compares.
pub type Marks = Vec<(String, &'static str, usize)>;

/// The rollouts the drivers hold.
#[derive(Debug, Clone, Default)]
pub struct LiveState {
    pub rollouts: Vec<LiveRollout>,
}

/// One rollout the drivers hold.
#[derive(Debug, Clone)]
pub struct LiveRollout {
    pub id: String,
    pub attempt: u32,
    /// `queued`, `running`, `paused` (its launch frozen in place), `parked` (held, stopped
    /// or at its bookmark) or `finishing` (its result is being recorded).
    pub state: &'static str,
    pub started_ms: Option<u64>,
    pub launches: Vec<LaunchEntry>,
    /// The owner session it runs in, once it has one.
    pub session: Option<String>,
}

impl LiveRollout {
    /// The state the view shows for a driver's run status.
    #[must_use]
    pub fn state_of(status: &RunStatus) -> &'static str {
        match status {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Parked(ParkKind::Paused) => "paused",
            RunStatus::Parked(_) => "parked",
            RunStatus::Done => "finishing",
        }
    }
}

impl LiveState {
    /// Where every run of `runs` stands now.
    #[must_use]
    pub fn of(runs: &Runs) -> Self {
        Self {
            rollouts: runs
                .states()
                .into_iter()
                .map(|(id, status, bookmark)| LiveRollout {
                    id,
                    attempt: bookmark.attempt,
                    state: LiveRollout::state_of(&status),
                    started_ms: Some(bookmark.started_at_ms),
                    launches: bookmark
                        .progress()
                        .map(|p| p.launches.clone())
                        .unwrap_or_default(),
                    session: bookmark.progress().map(|p| p.session.session.clone()),
                })
                .collect(),
        }
    }

    /// What changes when the drivers' side of a run does: each rollout's state and number of
    /// launches (for a change stream's fingerprint).
    #[must_use]
    pub fn marks(&self) -> Marks {
        let mut marks: Vec<_> = self
            .rollouts
            .iter()
            .map(|r| (r.id.clone(), r.state, r.launches.len()))
            .collect();
        marks.sort();
        marks
    }
}
