//! Reading what a published checkpoint saved, for a resume: the session each
//! agent record continues in, and the sessions the resources records hold.
//! Records are read through the participants' own formats
//! ([`AgentRecord`], [`SessionRecord`]), never by field name here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rollpoint_checkpoint::participant::{Kind, untag_decode};
use rollpoint_checkpoint::{AttemptKey, store};
use rollpoint_driver::AgentRecord;
use rollpoint_owner::SessionRecord;
use rollpoint_proto::Cause;

use crate::errors::RunError;

/// The session each agent record continues in (`None`: from its seed).
pub type Sessions = BTreeMap<AttemptKey, Option<String>>;
/// The (key, session) pairs the resources records saved.
pub type Saved = BTreeSet<(AttemptKey, String)>;

/// What checkpoint `id` in `run_dir` saved; a damaged record is an error
/// naming the checkpoint and the attempt.
pub fn saved_sessions(run_dir: &Path, id: &str) -> Result<(Sessions, Saved), RunError> {
    let err = |e: Cause| RunError::checkpoint(id, e);
    let doc = store::read_checkpoint(run_dir, id).map_err(|e| err(e.into()))?;
    let mut sessions = Sessions::new();
    let mut saved = Saved::new();
    for m in &doc.participants {
        let (_, records) =
            store::read(run_dir, id, m.kind, &m.instance, None).map_err(|e| err(e.into()))?;
        for r in records {
            match m.kind {
                Kind::Agent => {
                    let (key, record) = AgentRecord::untag(r).map_err(|e| err(e.into()))?;
                    let session = record
                        .bookmark
                        .progress()
                        .map(|p| p.session.session.clone());
                    sessions.insert(key, session);
                }
                Kind::Resources => {
                    let (key, record) = untag_decode(r, Kind::Resources, SessionRecord::decode)
                        .map_err(|e| err(e.into()))?;
                    saved.insert((key, record.session));
                }
                Kind::Model => {}
            }
        }
    }
    Ok((sessions, saved))
}

/// What checkpoint `doc` saved of attempt `from`, for a fork: its task, and the last model
/// call it had made (the branch point), if any.
pub fn fork_source(
    run_dir: &Path,
    doc: &store::CheckpointDoc,
    from: &AttemptKey,
) -> Result<(rollpoint_driver::RolloutTask, Option<String>), RunError> {
    let id = doc.id.as_str();
    let err = |e: Cause| RunError::checkpoint(id, e);
    let keep = BTreeSet::from([from.clone()]);
    let mut task = None;
    let mut last: Option<(i64, String)> = None;
    for m in &doc.participants {
        if m.kind == Kind::Resources {
            continue;
        }
        let (_, records) = store::read(run_dir, id, m.kind, &m.instance, Some(&keep))
            .map_err(|e| err(e.into()))?;
        for r in records {
            match m.kind {
                Kind::Agent => {
                    let (_, record) = AgentRecord::untag(r).map_err(|e| err(e.into()))?;
                    task = Some(record.task);
                }
                Kind::Model => {
                    let (_, calls) = untag_decode(r, Kind::Model, rollpoint_gateway::decode_jsonl)
                        .map_err(|e| err(e.into()))?;
                    for c in calls {
                        if let rollpoint_gateway::LedgerRecord::Call(c) = c
                            && last.as_ref().is_none_or(|(at, _)| c.admitted_ms >= *at)
                        {
                            last = Some((c.admitted_ms, c.call_id.clone()));
                        }
                    }
                }
                Kind::Resources => {}
            }
        }
    }
    let task = task.ok_or_else(|| err(format!("it holds no agent record of {from}").into()))?;
    Ok((task, last.map(|(_, id)| id)))
}

/// The ids of the checkpoints kept in `run_dir`.
pub fn retained_checkpoints(run_dir: &Path) -> Result<Vec<String>, RunError> {
    let dir = store::checkpoints_dir(run_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RunError::io(&dir, e)),
    };
    Ok(entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect())
}

/// The record checkpoint `id` saved of owner session `session`, if it saved one.
pub fn saved_session_record(
    run_dir: &Path,
    id: &str,
    session: &str,
) -> Result<Option<SessionRecord>, RunError> {
    let err = |e: Cause| RunError::checkpoint(id, e);
    let doc = store::read_checkpoint(run_dir, id).map_err(|e| err(e.into()))?;
    for m in doc
        .participants
        .iter()
        .filter(|m| m.kind == Kind::Resources)
    {
        let (_, records) =
            store::read(run_dir, id, m.kind, &m.instance, None).map_err(|e| err(e.into()))?;
        for r in records {
            let (_, record) = untag_decode(r, Kind::Resources, SessionRecord::decode)
                .map_err(|e| err(e.into()))?;
            if record.session == session {
                return Ok(Some(record));
            }
        }
    }
    Ok(None)
}
