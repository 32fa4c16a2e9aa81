//! Retention: keep the latest K published checkpoints (the one `LATEST`
//! names always among them), delete older ones, unpublished ones (a commit
//! that never reached `LATEST`) and stray temp files. A damaged checkpoint
//! (marked `DAMAGED`, whose `checkpoint.json` cannot be read, or a share of
//! which lacks its records file) is neither counted among the K nor deleted:
//! it stays for inspection, and a missing records file is marked and logged
//! here, so the loss is reported the first time retention sees it. Run by the
//! controller after publishing, while no commit is in progress.

use std::fs;
use std::path::Path;

use super::published::{
    CHECKPOINT_FILE, CheckpointDoc, DAMAGED_FILE, latest, mark_damaged, read_checkpoint,
};
use crate::errors::StoreError;

/// How many checkpoints are kept by default: the latest and the one before.
pub const DEFAULT_KEEP: usize = 2;

/// Deletes all but the latest `keep` (at least 1) published checkpoints.
/// Returns the ids deleted.
pub fn prune(run_dir: &Path, keep: usize) -> Result<Vec<String>, StoreError> {
    let root = super::checkpoints_dir(run_dir);
    let entries = match fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(&root)(e)),
    };
    let latest = latest(run_dir)?;
    // A checkpoint.json newer than the one LATEST names never reached the
    // publish point (a crash between the two writes).
    let latest_created = match &latest {
        Some(id) => Some(read_checkpoint(run_dir, id)?.created_unix_ms),
        None => None,
    };
    let mut published = Vec::new();
    let mut doomed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StoreError::io(&root))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with('.') {
            doomed.push((name, path));
            continue;
        }
        if !path.is_dir() {
            continue;
        }
        if Some(&name) == latest.as_ref() {
            continue;
        }
        // A checkpoint found damaged stays for inspection and is never one
        // of the kept.
        if path.join(DAMAGED_FILE).exists() {
            continue;
        }
        // One that never reached checkpoint.json was never published: gone.
        if !path.join(CHECKPOINT_FILE).exists() {
            doomed.push((name, path));
            continue;
        }
        match read_checkpoint(run_dir, &name) {
            Ok(doc) if latest_created.is_some_and(|t| doc.created_unix_ms <= t) => {
                if let Some(missing) = missing_records(run_dir, &doc) {
                    let reason = format!("{} is missing", missing.display());
                    tracing::warn!(checkpoint = %name, %reason, "damaged checkpoint kept");
                    mark_damaged(run_dir, &name, &reason)?;
                    continue;
                }
                published.push((doc.created_unix_ms, name, path));
            }
            // Newer than the latest: it never reached the publish point.
            Ok(_) => doomed.push((name, path)),
            // checkpoint.json is written whole, after every manifest: one
            // that cannot be read is damage, kept for inspection like a
            // marked one, and not a restore point.
            Err(e) if e.is_damage() => {}
            Err(e) => return Err(e),
        }
    }
    published.sort();
    let others = keep.max(1) - usize::from(latest.is_some());
    let older = published.len().saturating_sub(others);
    doomed.extend(published.drain(..older).map(|(_, name, path)| (name, path)));

    let mut deleted = Vec::new();
    for (name, path) in doomed {
        let removed = if path.is_dir() {
            // checkpoint.json goes first, durably: a deletion cut short
            // leaves a checkpoint never published (deleted next time), not
            // one whose manifests are missing, which would read as damage.
            let doc = path.join(CHECKPOINT_FILE);
            match fs::remove_file(&doc) {
                Ok(()) => super::fsio::fsync_dir(&path)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(&doc)(e)),
            }
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(StoreError::io(&path))?;
        if !name.starts_with('.') {
            deleted.push(name);
        }
    }
    super::fsio::fsync_dir(&root)?;
    deleted.sort();
    Ok(deleted)
}

/// The names of every checkpoint directory under `run_dir/checkpoints/`
/// (published, damaged or not yet published): what a store prune keeps.
pub fn local_ids(run_dir: &Path) -> Result<std::collections::BTreeSet<String>, StoreError> {
    let root = super::checkpoints_dir(run_dir);
    let entries = match fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(StoreError::io(&root)(e)),
    };
    let mut ids = std::collections::BTreeSet::new();
    for entry in entries {
        let entry = entry.map_err(StoreError::io(&root))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && entry.path().is_dir() {
            ids.insert(name);
        }
    }
    Ok(ids)
}

/// The first records file `doc`'s manifests name that is not on disk (a
/// stat each: the digests are checked when a checkpoint is read).
fn missing_records(run_dir: &Path, doc: &CheckpointDoc) -> Option<std::path::PathBuf> {
    doc.participants.iter().find_map(|m| {
        let path = super::participant_dir(run_dir, &doc.id, m.kind, &m.instance)
            .join(&m.manifest.records_file);
        match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(path),
            _ => None,
        }
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::participant::{AttemptKey, Kind};
    use crate::store::{self, CheckpointDoc, LATEST_FILE, Member};

    fn publish(run: &Path, id: &str, created: u64) {
        let scope = vec![AttemptKey::parse("r1").unwrap()];
        let records = vec![serde_json::json!({"key": "r1", "n": created})];
        let manifest = store::write(run, id, Kind::Model, "gw", &scope, &records).unwrap();
        let doc = CheckpointDoc {
            version: store::CHECKPOINT_VERSION,
            id: id.to_owned(),
            created_unix_ms: created,
            continues: None,
            scope,
            restarts: Vec::new(),
            participants: vec![Member {
                kind: Kind::Model,
                instance: "gw".to_owned(),
                manifest,
            }],
        };
        store::publish(run, &doc).unwrap();
    }

    fn left(run: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(store::checkpoints_dir(run))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_damaged_checkpoint_is_neither_kept_nor_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        publish(run, "c1", 1);
        publish(run, "c2", 2);
        // c2 damaged (its records, which prune does not read) and marked by
        // a resume, which fell back to c1 and went on to c3.
        store::mark_damaged(run, "c2", "records damaged").unwrap();
        store::mark_damaged(run, "c2", "a second reason").unwrap();
        assert_eq!(
            store::damaged(run, "c2").unwrap().as_deref(),
            Some("records damaged"),
            "the first reason stays"
        );
        assert_eq!(store::damaged(run, "c1").unwrap(), None);
        publish(run, "c3", 3);
        assert!(prune(run, 2).unwrap().is_empty(), "c1 is the other kept");
        assert_eq!(left(run), ["LATEST", "c1", "c2", "c3"]);
        // A checkpoint.json that cannot be read is damage too.
        let doc = store::checkpoint_dir(run, "c1").join(CHECKPOINT_FILE);
        let mut bytes = fs::read(&doc).unwrap();
        bytes[0] = b'x';
        fs::write(&doc, &bytes).unwrap();
        publish(run, "c4", 4);
        assert!(prune(run, 2).unwrap().is_empty(), "c3 is the other kept");
        publish(run, "c5", 5);
        assert_eq!(prune(run, 2).unwrap(), ["c3"]);
        assert_eq!(left(run), ["LATEST", "c1", "c2", "c4", "c5"]);
        assert_eq!(fs::read(&doc).unwrap(), bytes, "never repaired or replaced");
    }

    #[test]
    fn published_lists_newest_first_and_bounds_by_the_latest() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        assert!(store::published(run).unwrap().is_empty());
        publish(run, "c1", 10);
        publish(run, "c3", 30);
        publish(run, "c2", 20);
        // Newer than LATEST's (c2): it never reached the publish point.
        publish(run, "c9", 90);
        fs::write(store::checkpoints_dir(run).join(LATEST_FILE), "c2\n").unwrap();
        // No checkpoint.json: never published.
        store::write(run, "c0", Kind::Model, "gw", &[], &[]).unwrap();
        let ids = |run: &Path| -> Vec<(String, bool)> {
            store::published(run)
                .unwrap()
                .into_iter()
                .map(|p| (p.id, p.doc.is_ok()))
                .collect()
        };
        assert_eq!(ids(run), [("c2".to_owned(), true), ("c1".to_owned(), true)]);
        // The latest's document damaged: still first, with its error.
        let path = store::checkpoint_dir(run, "c2").join(CHECKPOINT_FILE);
        fs::write(&path, b"{").unwrap();
        let list = store::published(run).unwrap();
        assert_eq!(list[0].id, "c2");
        let e = list[0].doc.as_ref().unwrap_err();
        assert!(
            e.is_damage() && e.to_string().contains("checkpoint.json"),
            "{e}"
        );
        // LATEST itself damaged.
        fs::write(store::checkpoints_dir(run).join(LATEST_FILE), "c/2\n").unwrap();
        let list = store::published(run).unwrap();
        assert_eq!(list[0].id, LATEST_FILE);
        assert!(list[0].doc.as_ref().unwrap_err().is_damage());
        assert_eq!(store::mark_damaged(run, LATEST_FILE, "x").ok(), Some(()));
        assert!(store::checkpoints_dir(run).join(LATEST_FILE).is_file());
    }
}
