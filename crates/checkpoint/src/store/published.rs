//! The controller's side of storage: `checkpoint.json` (which participants
//! wrote which manifest, when, and which checkpoint this one continues),
//! then `LATEST`, the publish point. Reading a checkpoint checks the
//! document and that every manifest on disk is the one it records.

use std::collections::BTreeSet;
use std::path::Path;

use crate::participant::AttemptKey;
use rollpoint_proto::key::RolloutId;
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

/// Why a checkpoint has nothing of a rollout to fork.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unforkable {
    #[error("rollout {rollout} is not in checkpoint {checkpoint} (it saved: {saved})")]
    NotSaved {
        rollout: String,
        checkpoint: String,
        saved: String,
    },
    #[error(
        "{key} could not be saved at checkpoint {checkpoint} (it starts over from its seed): there is nothing to fork"
    )]
    Restart { key: AttemptKey, checkpoint: String },
}

impl CheckpointDoc {
    /// The attempt of `rollout` this checkpoint saved, to fork it.
    pub fn forkable(&self, rollout: &RolloutId) -> Result<AttemptKey, Unforkable> {
        let Some(key) = self.scope.iter().find(|k| k.rollout() == rollout) else {
            let saved: Vec<String> = self.scope.iter().map(ToString::to_string).collect();
            return Err(Unforkable::NotSaved {
                rollout: rollout.to_string(),
                checkpoint: self.id.clone(),
                saved: saved.join(", "),
            });
        };
        if self.restarts.contains(key) {
            return Err(Unforkable::Restart {
                key: key.clone(),
                checkpoint: self.id.clone(),
            });
        }
        Ok(key.clone())
    }
}

/// Writes `doc` as `checkpoints/<id>/checkpoint.json`, then points `LATEST`
/// at it. Each step is atomic; a crash before `LATEST` leaves the previous
/// checkpoint the latest.
pub fn publish(run_dir: &Path, doc: &CheckpointDoc) -> Result<(), StoreError> {
    write_doc(run_dir, doc)?;
    point_latest(run_dir, &doc.id)
}

/// Writes `doc` as `checkpoints/<id>/checkpoint.json` (atomic), publishing
/// nothing yet.
pub fn write_doc(run_dir: &Path, doc: &CheckpointDoc) -> Result<(), StoreError> {
    super::check_component("checkpoint", &doc.id)?;
    let dir = super::checkpoint_dir(run_dir, &doc.id);
    fsio::create_dirs(&dir)?;
    let path = dir.join(CHECKPOINT_FILE);
    let bytes = serde_json::to_vec_pretty(doc).map_err(|e| StoreError::json(path.clone(), e))?;
    fsio::replace(&path, &bytes)
}

/// Points `LATEST` at checkpoint `id` (atomic replace): the local publish
/// point.
pub fn point_latest(run_dir: &Path, id: &str) -> Result<(), StoreError> {
    super::check_component("checkpoint", id)?;
    let latest = super::checkpoints_dir(run_dir).join(LATEST_FILE);
    fsio::replace(&latest, format!("{id}\n").as_bytes())
}

/// The id `LATEST` names, if any checkpoint was published.
pub fn latest(run_dir: &Path) -> Result<Option<String>, StoreError> {
    let path = super::checkpoints_dir(run_dir).join(LATEST_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(&path)(e)),
    };
    let text =
        String::from_utf8(bytes).map_err(|_| StoreError::invalid(path.clone(), "not utf-8"))?;
    let id = text.strip_suffix('\n').unwrap_or(&text).to_owned();
    super::check_component("checkpoint", &id).map_err(|e| StoreError::invalid(path, e))?;
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
            return Err(StoreError::invalid(
                path,
                format!("participant {}/{} is listed twice", m.kind, m.instance),
            ));
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

/// The file a resume leaves in a checkpoint it found damaged, saying why.
/// Nothing else of the checkpoint is touched, so it stays for inspection;
/// retention neither counts it among the kept nor deletes it, and no resume
/// restores from it.
pub const DAMAGED_FILE: &str = "DAMAGED";

/// Marks checkpoint `id` damaged (`checkpoints/<id>/DAMAGED`, 0600,
/// fsynced, never replaced: the first reason stays). Nothing is written
/// when there is no such checkpoint directory.
pub fn mark_damaged(run_dir: &Path, id: &str, reason: &str) -> Result<(), StoreError> {
    super::check_component("checkpoint", id)?;
    let dir = super::checkpoint_dir(run_dir, id);
    if !dir.is_dir() {
        return Ok(());
    }
    fsio::publish(&dir.join(DAMAGED_FILE), format!("{reason}\n").as_bytes()).map(|_| ())
}

/// Why checkpoint `id` was marked damaged, if it was.
pub fn damaged(run_dir: &Path, id: &str) -> Result<Option<String>, StoreError> {
    if super::check_component("checkpoint", id).is_err() {
        return Ok(None);
    }
    let path = super::checkpoint_dir(run_dir, id).join(DAMAGED_FILE);
    match std::fs::read(&path) {
        Ok(b) => Ok(Some(String::from_utf8_lossy(&b).trim_end().to_owned())),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(StoreError::io(&path)(e)),
    }
}

/// When checkpoint `id` was created, by its `checkpoint.json` alone.
fn created_ms(run_dir: &Path, id: &str) -> Option<u64> {
    let path = super::checkpoint_dir(run_dir, id).join(CHECKPOINT_FILE);
    let bytes = fsio::read(&path).ok()?;
    versioned::decode::<CheckpointDoc>(&path, &bytes, CHECKPOINT_VERSION)
        .ok()
        .map(|d| d.created_unix_ms)
}

/// A published checkpoint as a resume finds it: its document, or why that
/// cannot be read.
#[derive(Debug)]
pub struct Published {
    /// The checkpoint's id; [`LATEST_FILE`] when `LATEST` itself is damaged.
    pub id: String,
    pub doc: Result<CheckpointDoc, StoreError>,
}

/// Every published checkpoint of `run_dir`, newest first: the one `LATEST`
/// names, then the others no newer than it by creation time (one newer
/// never reached the publish point; one whose manifests are damaged is
/// still dated by its `checkpoint.json`), then those whose `checkpoint.json`
/// cannot be read. When the latest's document cannot be read, the time
/// `LATEST` was written bounds the others. A directory without
/// `checkpoint.json` was never published and is left out; so is everything
/// when `LATEST` does not exist. Documents are read as [`read_checkpoint`]
/// does (manifests checked, records not: see [`verify`]).
pub fn published(run_dir: &Path) -> Result<Vec<Published>, StoreError> {
    let root = super::checkpoints_dir(run_dir);
    let latest_path = root.join(LATEST_FILE);
    let written_ms = match std::fs::metadata(&latest_path) {
        Ok(m) => m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(u64::MAX, |d| {
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(&latest_path)(e)),
    };
    let mut out = Vec::new();
    let latest = match latest(run_dir) {
        Ok(id) => id,
        Err(e) if e.is_damage() => {
            out.push(Published {
                id: LATEST_FILE.to_owned(),
                doc: Err(e),
            });
            None
        }
        Err(e) => return Err(e),
    };
    let mut bound = written_ms;
    if let Some(id) = &latest {
        if let Some(created) = created_ms(run_dir, id) {
            bound = created;
        }
        out.push(Published {
            id: id.clone(),
            doc: read_checkpoint(run_dir, id),
        });
    }
    let entries = std::fs::read_dir(&root).map_err(StoreError::io(&root))?;
    let mut older = Vec::new();
    let mut undated = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StoreError::io(&root))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let path = entry.path();
        if Some(&name) == latest.as_ref()
            || name.starts_with('.')
            || !path.is_dir()
            || !path.join(CHECKPOINT_FILE).exists()
            || super::check_component("checkpoint", &name).is_err()
        {
            continue;
        }
        // Dated by its own document, so one whose manifests are damaged
        // keeps its place.
        let doc = read_checkpoint(run_dir, &name);
        match created_ms(run_dir, &name) {
            Some(created) if created <= bound => older.push((created, name, doc)),
            Some(_) => {}
            None => undated.push(Published { id: name, doc }),
        }
    }
    older.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
    out.extend(older.into_iter().map(|(_, id, doc)| Published { id, doc }));
    undated.sort_by(|a, b| b.id.cmp(&a.id));
    out.extend(undated);
    Ok(out)
}
