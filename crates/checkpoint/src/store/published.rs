//! The controller's side of storage: `checkpoint.json` (which participants
//! wrote which manifest, when, and which checkpoint this one continues),
//! then `LATEST`, the publish point. Reading a checkpoint checks the
//! document and that every manifest on disk is the one it records.

use std::collections::BTreeSet;
use std::path::Path;

use crate::participant::AttemptKey;
use serde::{Deserialize, Serialize};

use super::fsio;
use super::records::{MANIFEST_FILE, Manifest, participant_dir, read_manifest};
use super::versioned;
use crate::errors::StoreError;
use crate::participant::Kind;

/// The checkpoint document format this build writes and reads.
pub const CHECKPOINT_VERSION: u32 = 1;
pub const CHECKPOINT_FILE: &str = "checkpoint.json";
pub const LATEST_FILE: &str = "LATEST";

/// One participant's part of a published checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub kind: Kind,
    pub instance: String,
    pub manifest: Manifest,
}

/// `checkpoints/<id>/checkpoint.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointDoc {
    pub version: u32,
    pub id: String,
    pub created_unix_ms: u64,
    /// The checkpoint this run was restored from, if any.
    #[serde(default)]
    pub continues: Option<String>,
    /// The attempt keys covered.
    pub scope: Vec<AttemptKey>,
    /// The attempt keys participants could not continue (restarted instead).
    #[serde(default)]
    pub restarts: Vec<AttemptKey>,
    pub participants: Vec<Member>,
}

/// Writes `doc` as `checkpoints/<id>/checkpoint.json`, then points `LATEST`
/// at it. Each step is atomic; a crash before `LATEST` leaves the previous
/// checkpoint the latest.
pub fn publish(run_dir: &Path, doc: &CheckpointDoc) -> Result<(), StoreError> {
    super::check_component("checkpoint", &doc.id)?;
    let dir = super::checkpoint_dir(run_dir, &doc.id);
    fsio::create_dirs(&dir)?;
    let path = dir.join(CHECKPOINT_FILE);
    let bytes = serde_json::to_vec_pretty(doc).map_err(|e| StoreError::Json {
        path: path.clone(),
        message: e.to_string(),
    })?;
    fsio::replace(&path, &bytes)?;
    let latest = super::checkpoints_dir(run_dir).join(LATEST_FILE);
    fsio::replace(&latest, format!("{}\n", doc.id).as_bytes())
}

/// The id `LATEST` names, if any checkpoint was published.
pub fn latest(run_dir: &Path) -> Result<Option<String>, StoreError> {
    let path = super::checkpoints_dir(run_dir).join(LATEST_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(&path)(e)),
    };
    let text = String::from_utf8(bytes).map_err(|_| StoreError::Invalid {
        path: path.clone(),
        message: "not utf-8".to_owned(),
    })?;
    let id = text.strip_suffix('\n').unwrap_or(&text).to_owned();
    super::check_component("checkpoint", &id).map_err(|e| StoreError::Invalid {
        path,
        message: e.to_string(),
    })?;
    Ok(Some(id))
}

/// Reads `checkpoints/<id>/checkpoint.json` and checks that every manifest
/// it records is the one on disk.
pub fn read_checkpoint(run_dir: &Path, id: &str) -> Result<CheckpointDoc, StoreError> {
    super::check_component("checkpoint", id)?;
    let path = super::checkpoint_dir(run_dir, id).join(CHECKPOINT_FILE);
    let doc: CheckpointDoc = versioned::decode(&path, &fsio::read(&path)?, CHECKPOINT_VERSION)?;
    if doc.id != id {
        return Err(StoreError::Mismatch {
            path,
            field: "id",
            expected: id.to_owned(),
            found: doc.id,
        });
    }
    let mut seen = BTreeSet::new();
    for m in &doc.participants {
        if !seen.insert((m.kind, m.instance.clone())) {
            return Err(StoreError::Invalid {
                path,
                message: format!("participant {}/{} is listed twice", m.kind, m.instance),
            });
        }
        let mpath = participant_dir(run_dir, id, m.kind, &m.instance).join(MANIFEST_FILE);
        let on_disk = read_manifest(&mpath, id, m.kind, &m.instance)?;
        if on_disk != m.manifest {
            return Err(StoreError::Mismatch {
                path: mpath,
                field: "records_sha256",
                expected: m.manifest.records_sha256.clone(),
                found: on_disk.records_sha256,
            });
        }
    }
    Ok(doc)
}

/// Reads checkpoint `id` and every participant's records in full: the
/// check a reader makes before trusting a checkpoint.
pub fn verify(run_dir: &Path, id: &str) -> Result<CheckpointDoc, StoreError> {
    let doc = read_checkpoint(run_dir, id)?;
    for m in &doc.participants {
        super::records::read(run_dir, id, m.kind, &m.instance, Some(&BTreeSet::new()))?;
    }
    Ok(doc)
}
