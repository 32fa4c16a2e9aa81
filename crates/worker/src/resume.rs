//! The adapter hook for the rollout driver: should a relaunch continue from the checkpoint?
//! A pure read of the checkpoint file: it changes nothing on disk.

use std::path::Path;

use serde::Serialize;

use crate::journal;

/// The decision and why, for the launch log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumeDecision {
    pub resume: bool,
    pub reason: String,
}

/// Continue when a valid checkpoint exists. An unusable one (corrupt, unknown version) means
/// starting over: the caller removes it first, since the worker refuses to run on it.
pub fn resume_decision(checkpoint: &Path) -> ResumeDecision {
    match std::fs::symlink_metadata(checkpoint) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return ResumeDecision {
                resume: false,
                reason: format!("no checkpoint at {}: start fresh", checkpoint.display()),
            };
        }
        Err(e) => {
            return ResumeDecision {
                resume: false,
                reason: format!("checkpoint {}: cannot stat: {e}", checkpoint.display()),
            };
        }
        Ok(_) => {}
    }
    match journal::replay(checkpoint) {
        Ok(r) => ResumeDecision {
            resume: true,
            reason: format!(
                "checkpoint of rollout `{}`: {} model calls and {} tool calls done, launch {} next",
                r.header.rollout_id,
                r.state.usage.model_calls,
                r.state.tools.len(),
                r.state.launches + 1
            ),
        },
        Err(e) => ResumeDecision {
            resume: false,
            reason: format!("unusable, start over: {e}"),
        },
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::journal::Journal;
    use crate::journal::record::Header;
    use crate::transcript::State;

    #[test]
    fn decisions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        assert!(!resume_decision(&path).resume);
        let header = Header {
            rollout_id: "r7".to_owned(),
            partial: true,
            created_unix_ms: 0,
            worker: "t".to_owned(),
        };
        Journal::create(&path, header, &State::new("r7", None, "p")).unwrap();
        let yes = resume_decision(&path);
        assert!(yes.resume, "{}", yes.reason);
        assert!(yes.reason.contains("r7"));
        std::fs::write(&path, b"garbage").unwrap();
        let no = resume_decision(&path);
        assert!(!no.resume);
        assert!(no.reason.contains("bad magic"), "{}", no.reason);
    }
}
