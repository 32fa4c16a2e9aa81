//! `rollpoint status RUN_DIR`: what a run holds, read from disk only (no
//! process of the run needs to be alive): tasks, result rows and rewards,
//! the latest checkpoint (verified in full: a damaged one is said to be),
//! and the rollouts not finished.

use std::collections::BTreeMap;
use std::path::Path;

use rollpoint_checkpoint::store;
use rollpoint_driver::RolloutResult;

use crate::errors::RunError;
use crate::files::results::read_results;
use crate::files::state::RunState;

/// A run as it stands on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct RunStatus {
    pub tasks: usize,
    pub done: usize,
    /// Result rows by status (`verified`, `failed`, ...).
    pub by_status: BTreeMap<String, usize>,
    pub reward_sum: f64,
    pub rewarded: usize,
    /// Latest published checkpoint: id, creation time and scope size (0 and
    /// 0 when its document cannot be read).
    pub latest: Option<(String, u64, usize)>,
    /// What is wrong with the latest checkpoint, when it is damaged (a
    /// resume falls back to an older one).
    pub latest_damaged: Option<String>,
    /// Unfinished rollouts with the attempt they were last dispatched as.
    pub unfinished: Vec<(String, u32)>,
    /// Rollouts whose sandboxes are trusted (the rest are strict).
    pub trusted: Vec<String>,
}

/// Version of the `rollpoint status --json` document.
pub const STATUS_VERSION: u32 = 1;

impl RunStatus {
    /// The status as the versioned JSON document `rollpoint status --json` prints:
    /// `{v, tasks, done, by_status, reward_sum, rewarded, latest: {id, created_ms, scope} |
    /// null, latest_damaged, unfinished: [{rollout, attempt}], trusted: [rollout]}`.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "v": STATUS_VERSION,
            "tasks": self.tasks,
            "done": self.done,
            "by_status": self.by_status,
            "reward_sum": self.reward_sum,
            "rewarded": self.rewarded,
            "latest": self.latest.as_ref().map(|(id, created_ms, scope)| serde_json::json!({
                "id": id, "created_ms": created_ms, "scope": scope,
            })),
            "latest_damaged": self.latest_damaged,
            "unfinished": self.unfinished.iter().map(|(rollout, attempt)| serde_json::json!({
                "rollout": rollout, "attempt": attempt,
            })).collect::<Vec<_>>(),
            "trusted": self.trusted,
        })
    }
}

/// The rollouts of `state` without a row in `rows`, with the attempt last dispatched.
pub(crate) fn unfinished(state: &RunState, rows: &[RolloutResult]) -> Vec<(String, u32)> {
    let done: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.rollout.as_str()).collect();
    state
        .attempts
        .iter()
        .filter(|(r, _)| !done.contains(r.as_str()))
        .map(|(r, a)| (r.clone(), *a))
        .collect()
}

/// Reads the status of `run_dir`.
pub fn read_status(run_dir: &Path) -> Result<RunStatus, RunError> {
    let state = RunState::load(run_dir)?;
    let rows = read_results(run_dir)?;
    let mut by_status = BTreeMap::new();
    let mut reward_sum = 0.0;
    let mut rewarded = 0;
    for r in &rows {
        let name = serde_json::to_value(r.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        *by_status.entry(name).or_insert(0) += 1;
        if let Some(x) = r.reward {
            reward_sum += x;
            rewarded += 1;
        }
    }
    let mut latest_damaged = None;
    let latest = match store::latest(run_dir) {
        Ok(Some(id)) => {
            let marked =
                store::damaged(run_dir, &id).map_err(|e| RunError::checkpoint(id.clone(), e))?;
            match (marked, store::verify(run_dir, &id)) {
                (None, Ok(doc)) => Some((id, doc.created_unix_ms, doc.scope.len())),
                (Some(reason), Ok(doc)) => {
                    latest_damaged = Some(format!("marked damaged: {reason}"));
                    Some((id, doc.created_unix_ms, doc.scope.len()))
                }
                (_, Err(e)) if e.is_damage() => {
                    latest_damaged = Some(e.to_string());
                    Some((id, 0, 0))
                }
                (_, Err(e)) => {
                    return Err(RunError::checkpoint(id, e));
                }
            }
        }
        Ok(None) => None,
        Err(e) if e.is_damage() => {
            latest_damaged = Some(e.to_string());
            Some((store::LATEST_FILE.to_owned(), 0, 0))
        }
        Err(e) => {
            return Err(RunError::checkpoint("LATEST", e));
        }
    };
    let unfinished = unfinished(&state, &rows);
    let done: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.rollout.as_str()).collect();
    Ok(RunStatus {
        tasks: state.attempts.len(),
        done: done.len(),
        by_status,
        reward_sum,
        rewarded,
        latest,
        latest_damaged,
        unfinished,
        trusted: state.trusted.into_iter().collect(),
    })
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "tasks: {}", self.tasks)?;
        write!(f, "done: {}", self.done)?;
        for (status, n) in &self.by_status {
            write!(f, ", {status} {n}")?;
        }
        writeln!(f)?;
        if self.rewarded > 0 {
            #[expect(clippy::cast_precision_loss, reason = "a count of rows")]
            let mean = self.reward_sum / self.rewarded as f64;
            writeln!(f, "reward: mean {mean:.3} over {} rows", self.rewarded)?;
        }
        match (&self.latest, &self.latest_damaged) {
            (Some((id, _, _)), Some(why)) => writeln!(
                f,
                "latest checkpoint: {id} DAMAGED ({why}); a resume falls back to the newest intact one"
            )?,
            (Some((id, at, n)), None) => {
                writeln!(f, "latest checkpoint: {id} ({n} rollouts, created {at} ms)")?
            }
            (None, _) => writeln!(f, "latest checkpoint: none")?,
        }
        match self.trusted.len() {
            0 => writeln!(f, "isolation: strict")?,
            n => writeln!(
                f,
                "isolation: strict, but {n} TRUSTED (their code runs as the host's root): {}",
                self.trusted.join(", ")
            )?,
        }
        writeln!(f, "not finished: {}", self.unfinished.len())?;
        for (r, a) in &self.unfinished {
            writeln!(f, "  {r} (attempt {a})")?;
        }
        Ok(())
    }
}
