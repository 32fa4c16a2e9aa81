//! The plan step of a resume: what to do with each rollout ([`super::plan`], pure), with an
//! attempt whose session the checkpoint holds no sandbox for started over instead, each
//! such one said on stderr.

use super::plan::{ResumePlan, drop_unsaved_sessions, plan_resume};
use super::read::OnDisk;
use super::source::Source;

/// The plan of the run `disk` read, restoring from `source` if there is one.
pub(super) fn decide(disk: &OnDisk, source: Option<&Source>) -> ResumePlan {
    let mut plan = plan_resume(
        &disk.order,
        &disk.finished,
        &disk.state.attempts,
        source.map(|s| s.doc.scope.as_slice()),
    );
    if let Some(src) = source {
        for k in drop_unsaved_sessions(&mut plan, &src.sessions, &src.saved) {
            tracing::warn!(
                key = %k,
                checkpoint = %src.id,
                "the checkpoint holds no sandbox for the attempt's session; it starts over"
            );
        }
    }
    plan
}
