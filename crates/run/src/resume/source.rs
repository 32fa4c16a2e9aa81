//! Choosing the checkpoint a resume restores from: the newest intact published one, or the
//! one asked for, after the store's are brought into the run directory.
//!
//! A checkpoint is intact when its document, every manifest and every
//! record verify ([`store::verify`]) and its records decode. A damaged one
//! is named on stderr with what is wrong, marked
//! (`checkpoints/<id>/DAMAGED`, nothing of it deleted) and passed over for
//! the next older published one; with none intact every unfinished rollout
//! starts over. A checkpoint asked for by id must be published and intact,
//! or the resume fails before changing anything.

use std::path::Path;

use rollpoint_checkpoint::StoreError;
use rollpoint_checkpoint::store::{self, CheckpointDoc, Published};

use crate::config::RunConfig;
use crate::errors::RunError;
use crate::files::saved::{Saved, Sessions, saved_sessions};

/// The checkpoint a resume restores from, verified, and what it saved.
#[derive(Debug)]
pub struct Source {
    pub id: String,
    pub doc: CheckpointDoc,
    pub sessions: Sessions,
    pub saved: Saved,
}

/// Whether a checkpoint can be restored from.
enum Check {
    Intact(Box<Source>),
    Damaged(String),
}

fn checkpoint_error(id: &str, message: impl std::fmt::Display) -> RunError {
    RunError::checkpoint(id.to_owned(), message.to_string())
}

/// Verifies published checkpoint `p`: an error only when it could not be
/// read (not damage), so nothing is decided on a passing I/O failure.
fn check(run_dir: &Path, p: Published) -> Result<Check, RunError> {
    let id = p.id;
    let classify = |e: StoreError| {
        if e.is_damage() {
            Ok(Check::Damaged(e.to_string()))
        } else {
            Err(checkpoint_error(&id, e))
        }
    };
    let doc = match p.doc {
        Ok(doc) => doc,
        Err(e) => return classify(e),
    };
    if let Err(e) = store::verify(run_dir, &id) {
        return classify(e);
    }
    // Every record verified: one the participants' formats cannot read is
    // as unusable as a damaged one.
    match saved_sessions(run_dir, &id) {
        Ok((sessions, saved)) => Ok(Check::Intact(Box::new(Source {
            id,
            doc,
            sessions,
            saved,
        }))),
        Err(RunError::Checkpoint { source, .. }) => Ok(Check::Damaged(source.to_string())),
        Err(e) => Err(e),
    }
}

/// The checkpoint to restore from: `asked` (published and intact, else an
/// error naming it, nothing changed), or the newest intact published one,
/// each damaged one on the way named on stderr and marked. `None`: nothing
/// was published, or nothing published is intact.
pub fn choose_source(run_dir: &Path, asked: Option<&str>) -> Result<Option<Source>, RunError> {
    let list = store::published(run_dir).map_err(|e| checkpoint_error("LATEST", e))?;
    if let Some(id) = asked {
        let names: Vec<&str> = list.iter().map(|p| p.id.as_str()).collect();
        let Some(at) = list.iter().position(|p| p.id == id) else {
            return Err(checkpoint_error(
                id,
                format!(
                    "no such published checkpoint in {} (published: {}); nothing was changed",
                    store::checkpoints_dir(run_dir).display(),
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                ),
            ));
        };
        if let Some(reason) = store::damaged(run_dir, id).map_err(|e| checkpoint_error(id, e))? {
            return Err(checkpoint_error(
                id,
                format!(
                    "marked damaged by an earlier resume ({reason}; see {}); nothing was changed",
                    store::checkpoint_dir(run_dir, id)
                        .join(store::DAMAGED_FILE)
                        .display()
                ),
            ));
        }
        let p = list
            .into_iter()
            .nth(at)
            .ok_or_else(|| checkpoint_error(id, "vanished"))?;
        return match check(run_dir, p)? {
            Check::Intact(source) => Ok(Some(*source)),
            Check::Damaged(why) => Err(checkpoint_error(
                id,
                format!("damaged: {why}; nothing was changed"),
            )),
        };
    }
    let mut passed = Vec::new();
    for p in list {
        let id = p.id.clone();
        if let Some(reason) = store::damaged(run_dir, &id).map_err(|e| checkpoint_error(&id, e))? {
            tracing::warn!(
                checkpoint = %id,
                reason = %reason,
                "checkpoint was found damaged by an earlier resume; passed over"
            );
            passed.push(id);
            continue;
        }
        match check(run_dir, p)? {
            Check::Intact(source) => {
                if !passed.is_empty() {
                    tracing::info!(
                        checkpoint = %source.id,
                        passed_over = %passed.join(", "),
                        "resuming from the newest intact checkpoint"
                    );
                }
                return Ok(Some(*source));
            }
            Check::Damaged(why) => {
                store::mark_damaged(run_dir, &id, &why).map_err(|e| checkpoint_error(&id, e))?;
                let marker = store::checkpoint_dir(run_dir, &id).join(store::DAMAGED_FILE);
                tracing::warn!(
                    checkpoint = %id,
                    reason = %why,
                    marked = marker.exists().then(|| marker.display().to_string()),
                    "checkpoint is damaged; falling back to an older checkpoint (nothing of it is deleted)"
                );
                passed.push(id);
            }
        }
    }
    if !passed.is_empty() {
        tracing::warn!(
            damaged = %passed.join(", "),
            "no intact checkpoint: every unfinished rollout starts over as its next attempt"
        );
    }
    Ok(None)
}

/// With a checkpoint store, brings what it publishes into the run directory first, so the
/// choice below sees every checkpoint the store holds (this node may hold none of them). A
/// store that cannot be reached is reported and the local copy is used: `LATEST` here only
/// ever follows the store, so it is at most one checkpoint behind it.
pub(super) async fn fetch_published(run_dir: &Path, config: &RunConfig) -> Result<(), RunError> {
    let Some(remote) = config.open_checkpoint_store()? else {
        return Ok(());
    };
    match store::remote::fetch(&remote, run_dir).await {
        Ok(fetched) => {
            for bad in &fetched.unreadable {
                tracing::warn!(store = %remote.url(), problem = %bad, "a publish marker of the checkpoint store cannot be read");
            }
            tracing::info!(store = %remote.url(), latest = fetched.latest.as_deref().unwrap_or("none"), files = fetched.files, "checkpoint store read");
        }
        Err(e) => {
            tracing::warn!(store = %remote.url(), error = %e, "the checkpoint store cannot be read; resuming from the local copy");
        }
    }
    Ok(())
}
