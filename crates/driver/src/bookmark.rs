//! The bookmark: a rollout's next stage, persisted before that stage runs, so
//! a continuation (after a checkpoint's restore) knows exactly where to go on.
//!
//! On the wire it is one flat, versioned JSON object
//! (`{"v":1,"next":"seed"|"harness"|"verify"|"return",...}`); in memory it is
//! [`Bookmark`], whose stage carries only the fields that stage may have.
//! Decoding checks the version first, then every field, and every error names
//! the field (`bookmark.launches[2].ended_at_ms`); nothing is guessed.

use std::collections::BTreeMap;

use rollpoint_proto::FormatError;
use rollpoint_proto::anchor::check_launch_id;
use serde::{Deserialize, Serialize};

use crate::errors::BookmarkError;
use crate::launchlog::LaunchEntry;
use crate::result::{RESULT_VERSION, RESULT_VERSION_OLDEST, RolloutResult};

/// Version of the bookmark format.
pub const BOOKMARK_VERSION: u32 = 1;

pub use rollpoint_proto::limits::MAX_ROLLOUT_ID;

/// The stage a bookmark continues at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Next {
    Seed,
    Harness,
    Verify,
    Return,
}

impl Next {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Seed => "seed",
            Self::Harness => "harness",
            Self::Verify => "verify",
            Self::Return => "return",
        }
    }
}

/// How the rollout is graded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifyMode {
    /// The owner runs the task's verify command.
    #[default]
    Owner,
    /// No grading: the result carries the launch log and usage only.
    Skip,
}

/// Which owner session (and which sandbox it last had) the rollout uses.
/// The sandbox is a hint: after a restore the owner names a fork.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionHint {
    pub session: String,
    pub sandbox: String,
    pub workdir: String,
}

/// What the harness and verify stages carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub session: SessionHint,
    /// Owner cookies (routing, affinity), carried verbatim.
    pub cookies: BTreeMap<String, String>,
    pub verify_mode: VerifyMode,
    /// The adapter's state (where the harness keeps its session).
    pub state: serde_json::Value,
    /// The next launch asks the adapter whether to continue a saved session.
    pub resume: bool,
    pub launches: Vec<LaunchEntry>,
}

/// The stage and what it needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Stage {
    Seed,
    Harness(Progress),
    Verify(Progress),
    Return(Box<RolloutResult>),
}

/// A rollout's bookmark.
#[derive(Debug, Clone, PartialEq)]
pub struct Bookmark {
    pub rollout: String,
    /// The attempt that recorded it.
    pub attempt: u32,
    /// Start of the rollout's first attempt, Unix milliseconds.
    pub started_at_ms: u64,
    pub stage: Stage,
}

/// The flat wire form.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    v: u32,
    next: Next,
    rollout: String,
    attempt: u32,
    started_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session: Option<SessionHint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cookies: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    verify_mode: Option<VerifyMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resume: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    launches: Option<Vec<LaunchEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<Box<RolloutResult>>,
}

impl Bookmark {
    /// The first bookmark of a rollout.
    pub fn seed(rollout: &str, attempt: u32, started_at_ms: u64) -> Self {
        Self {
            rollout: rollout.to_owned(),
            attempt,
            started_at_ms,
            stage: Stage::Seed,
        }
    }

    pub fn next(&self) -> Next {
        match self.stage {
            Stage::Seed => Next::Seed,
            Stage::Harness(_) => Next::Harness,
            Stage::Verify(_) => Next::Verify,
            Stage::Return(_) => Next::Return,
        }
    }

    /// The harness or verify progress, if the stage has one.
    pub fn progress(&self) -> Option<&Progress> {
        match &self.stage {
            Stage::Harness(p) | Stage::Verify(p) => Some(p),
            Stage::Seed | Stage::Return(_) => None,
        }
    }

    /// The JSON bytes of the bookmark.
    pub fn encode(&self) -> Vec<u8> {
        let (session, cookies, verify_mode, state, resume, launches, result) = match &self.stage {
            Stage::Seed => (None, None, None, None, None, None, None),
            Stage::Harness(p) | Stage::Verify(p) => (
                Some(p.session.clone()),
                Some(p.cookies.clone()),
                Some(p.verify_mode),
                Some(p.state.clone()),
                Some(p.resume),
                Some(p.launches.clone()),
                None,
            ),
            Stage::Return(r) => (None, None, None, None, None, None, Some(r.clone())),
        };
        let wire = Wire {
            v: BOOKMARK_VERSION,
            next: self.next(),
            rollout: self.rollout.clone(),
            attempt: self.attempt,
            started_at_ms: self.started_at_ms,
            session,
            cookies,
            verify_mode,
            state,
            resume,
            launches,
            result,
        };
        // Every field is a string, number, string-keyed map or `Value`
        // (non-finite floats become `null`): encoding cannot fail.
        serde_json::to_vec(&wire).expect("a bookmark always encodes as JSON")
    }

    /// Reads and validates a bookmark; the error names the field.
    pub fn decode(bytes: &[u8]) -> Result<Self, BookmarkError> {
        let wire: Wire =
            rollpoint_proto::decode("bookmark", BOOKMARK_VERSION, bytes).map_err(from_format)?;
        from_wire(wire)
    }

    /// Checks what the wire types cannot; the error names the field.
    pub fn validate(&self) -> Result<(), BookmarkError> {
        check_rollout("bookmark.rollout", &self.rollout)?;
        match &self.stage {
            Stage::Seed => Ok(()),
            Stage::Harness(p) | Stage::Verify(p) => check_progress(p, self.started_at_ms),
            Stage::Return(r) => check_result(r, &self.rollout),
        }
    }
}

fn from_format(e: FormatError) -> BookmarkError {
    match e {
        FormatError::Json { source, .. } => {
            BookmarkError::new("bookmark", format!("not valid JSON: {source}"))
        }
        FormatError::MissingVersion { .. } => {
            BookmarkError::new("bookmark.v", "missing or not an integer")
        }
        FormatError::UnknownVersion {
            found, supported, ..
        } => BookmarkError::new(
            "bookmark.v",
            format!("unknown version {found} (this build reads version {supported})"),
        ),
        FormatError::Field { path, source, .. } => {
            let field = if path.is_empty() || path == "." {
                "bookmark".to_owned()
            } else {
                format!("bookmark.{path}")
            };
            BookmarkError::new(field, source.to_string())
        }
    }
}

/// Whether each field of the harness and verify stages is on the wire.
fn progress_fields(w: &Wire) -> [(&'static str, bool); 6] {
    [
        ("session", w.session.is_some()),
        ("cookies", w.cookies.is_some()),
        ("verify_mode", w.verify_mode.is_some()),
        ("state", w.state.is_some()),
        ("resume", w.resume.is_some()),
        ("launches", w.launches.is_some()),
    ]
}

/// Refuses the first of `fields` that is present, saying `why`.
fn refuse_present(fields: &[(&str, bool)], why: &str) -> Result<(), BookmarkError> {
    match fields.iter().find(|(_, present)| *present) {
        Some((name, _)) => Err(BookmarkError::new(format!("bookmark.{name}"), why)),
        None => Ok(()),
    }
}

fn from_wire(w: Wire) -> Result<Bookmark, BookmarkError> {
    let stage = match w.next {
        Next::Seed => {
            let why = "not allowed when `next` is `seed`";
            refuse_present(&progress_fields(&w), why)?;
            refuse_present(&[("result", w.result.is_some())], why)?;
            Stage::Seed
        }
        Next::Harness | Next::Verify => {
            if w.result.is_some() {
                return Err(BookmarkError::new(
                    "bookmark.result",
                    "only allowed when `next` is `return`",
                ));
            }
            let missing = |name: &str| BookmarkError::new(format!("bookmark.{name}"), "missing");
            let p = Progress {
                session: w.session.ok_or_else(|| missing("session"))?,
                cookies: w.cookies.ok_or_else(|| missing("cookies"))?,
                verify_mode: w.verify_mode.ok_or_else(|| missing("verify_mode"))?,
                state: w.state.ok_or_else(|| missing("state"))?,
                resume: w.resume.ok_or_else(|| missing("resume"))?,
                launches: w.launches.ok_or_else(|| missing("launches"))?,
            };
            if w.next == Next::Harness {
                Stage::Harness(p)
            } else {
                Stage::Verify(p)
            }
        }
        Next::Return => {
            refuse_present(
                &progress_fields(&w),
                "not allowed when `next` is `return` (the result holds it)",
            )?;
            Stage::Return(
                w.result
                    .map(|r| Box::new(r.upgraded()))
                    .ok_or_else(|| BookmarkError::new("bookmark.result", "missing"))?,
            )
        }
    };
    let bookmark = Bookmark {
        rollout: w.rollout,
        attempt: w.attempt,
        started_at_ms: w.started_at_ms,
        stage,
    };
    bookmark.validate()?;
    Ok(bookmark)
}

/// Rollout ids name launches and files: the task id alphabet.
pub fn check_rollout(field: &str, id: &str) -> Result<(), BookmarkError> {
    rollpoint_proto::key::RolloutId::new(id)
        .map(drop)
        .map_err(|e| BookmarkError::new(field, e.to_string()))
}

fn nonempty(field: &str, s: &str) -> Result<(), BookmarkError> {
    if s.is_empty() {
        return Err(BookmarkError::new(field, "is empty"));
    }
    Ok(())
}

fn check_progress(p: &Progress, started_at_ms: u64) -> Result<(), BookmarkError> {
    nonempty("bookmark.session.session", &p.session.session)?;
    nonempty("bookmark.session.sandbox", &p.session.sandbox)?;
    if !p.session.workdir.starts_with('/') {
        return Err(BookmarkError::new(
            "bookmark.session.workdir",
            format!("{:?} is not an absolute path", p.session.workdir),
        ));
    }
    if !p.state.is_object() {
        return Err(BookmarkError::new(
            "bookmark.state",
            "must be a JSON object",
        ));
    }
    check_launches("bookmark.launches", &p.launches, started_at_ms)
}

/// Launch records: valid ids, none repeated, times in order, an end only
/// with its time, and only the last one may still be open.
pub fn check_launches(
    field: &str,
    launches: &[LaunchEntry],
    started_at_ms: u64,
) -> Result<(), BookmarkError> {
    let count = launches.len();
    for (i, l) in launches.iter().enumerate() {
        let f = |name: &str| format!("{field}[{i}].{name}");
        check_launch_id(&l.launch_id).map_err(|m| BookmarkError::new(f("launch_id"), m))?;
        if launches[..i].iter().any(|o| o.launch_id == l.launch_id) {
            return Err(BookmarkError::new(
                f("launch_id"),
                format!("{:?} repeats an earlier launch", l.launch_id),
            ));
        }
        nonempty(&f("sandbox"), &l.sandbox)?;
        if l.started_at_ms < started_at_ms {
            return Err(BookmarkError::new(
                f("started_at_ms"),
                format!(
                    "{} is before the rollout started ({started_at_ms})",
                    l.started_at_ms
                ),
            ));
        }
        if let Some(prev) = i.checked_sub(1).map(|j| &launches[j])
            && prev.attempt > l.attempt
        {
            return Err(BookmarkError::new(
                f("attempt"),
                format!(
                    "{} is before the attempt of the launch above ({})",
                    l.attempt, prev.attempt
                ),
            ));
        }
        match (l.ended_at_ms, l.end) {
            (Some(end), Some(_)) => {
                if end < l.started_at_ms {
                    return Err(BookmarkError::new(
                        f("ended_at_ms"),
                        format!("{end} is before started_at_ms {}", l.started_at_ms),
                    ));
                }
                if l.paused_ms > end - l.started_at_ms {
                    return Err(BookmarkError::new(
                        f("paused_ms"),
                        format!(
                            "{} is longer than the launch ran ({} ms)",
                            l.paused_ms,
                            end - l.started_at_ms
                        ),
                    ));
                }
            }
            (None, None) => {
                if i + 1 != count {
                    return Err(BookmarkError::new(
                        f("ended_at_ms"),
                        "missing: only the last launch may still be running",
                    ));
                }
                if l.exit_code.is_some() {
                    return Err(BookmarkError::new(
                        f("exit_code"),
                        "set on a launch that has not ended",
                    ));
                }
            }
            (Some(_), None) => {
                return Err(BookmarkError::new(
                    f("end"),
                    "missing although ended_at_ms is set",
                ));
            }
            (None, Some(_)) => {
                return Err(BookmarkError::new(
                    f("ended_at_ms"),
                    "missing although end is set",
                ));
            }
        }
        if l.paused_ms > 0 && l.pauses == 0 {
            return Err(BookmarkError::new(
                f("paused_ms"),
                "paused time without a pause",
            ));
        }
    }
    Ok(())
}

fn check_result(r: &RolloutResult, rollout: &str) -> Result<(), BookmarkError> {
    if !(RESULT_VERSION_OLDEST..=RESULT_VERSION).contains(&r.v) {
        return Err(BookmarkError::new(
            "bookmark.result.v",
            format!(
                "unknown version {} (this build reads versions \
                 {RESULT_VERSION_OLDEST}..={RESULT_VERSION})",
                r.v
            ),
        ));
    }
    if r.rollout != rollout {
        return Err(BookmarkError::new(
            "bookmark.result.rollout",
            format!("{:?} is not the bookmark's rollout {rollout:?}", r.rollout),
        ));
    }
    if let Some(reward) = r.reward
        && !reward.is_finite()
    {
        return Err(BookmarkError::new("bookmark.result.reward", "not finite"));
    }
    check_launches(
        "bookmark.result.launches",
        &r.launches,
        r.timings.started_at_ms,
    )?;
    if let Some(i) = r.launches.iter().position(|l| l.end.is_none()) {
        return Err(BookmarkError::new(
            format!("bookmark.result.launches[{i}].ended_at_ms"),
            "missing: a returned rollout has no running launch",
        ));
    }
    Ok(())
}
