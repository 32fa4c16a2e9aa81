//! The checkpoint store kept in an object store as well as under `RUN_DIR/checkpoints/`, so
//! a checkpoint outlives the node that took it. Remote keys mirror the local layout:
//!
//! ```text
//! checkpoints/<id>/<kind>/<instance>/records-<sha256>.jsonl   put-if-absent
//! checkpoints/<id>/<kind>/<instance>/manifest.json            put-if-absent, never replaced
//! checkpoints/<id>/checkpoint.json                            put-if-absent
//! publish/<seq, 20 digits>.json                               the publish point
//! ```
//!
//! Object stores offer no rename, so `LATEST` cannot be replaced atomically against a rival.
//! Publishing is instead the creation of marker `seq` = the last marker this coordinator saw
//! plus one, put-if-absent: of two coordinators that saw the same marker exactly one
//! publishes, and a coordinator that missed another's publish can never publish again (it is
//! fenced). The newest marker names the latest checkpoint. Every object a marker implies is
//! durable in the store before the marker is written, so a reader never sees half of one; what
//! a failed or killed upload leaves is named by no marker and removed by [`prune`].
//!
//! Locally the directory stays the working copy: participants write there first and upload;
//! a node without the files fetches them ([`fetch`], [`fetch_share`]) and then reads and
//! verifies them as it always has, digests included.

use std::collections::BTreeSet;
use std::path::Path;

use bytes::Bytes;
use rollpoint_remote::{Created, RemoteStore};
use serde::{Deserialize, Serialize};

use super::fsio;
use super::numbered;
use super::published::{CHECKPOINT_FILE, CHECKPOINT_VERSION, CheckpointDoc};
use super::records::{MANIFEST_FILE, MANIFEST_VERSION, Manifest, participant_dir};
use super::versioned;
use crate::errors::StoreError;
use crate::participant::Kind;

/// The publish marker format this build writes and reads.
pub const MARKER_VERSION: u32 = 1;
/// The prefix of publish markers in the store.
pub const MARKER_PREFIX: &str = "publish";

/// `publish/<seq>.json`: checkpoint `checkpoint` is published as the `seq`-th.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    pub version: u32,
    pub seq: u64,
    pub checkpoint: String,
    pub created_unix_ms: u64,
}

fn marker_key(seq: u64) -> String {
    numbered::key(MARKER_PREFIX, seq)
}

fn checkpoint_key(id: &str) -> String {
    format!("checkpoints/{id}/{CHECKPOINT_FILE}")
}

fn share_key(id: &str, kind: Kind, instance: &str, file: &str) -> String {
    format!("checkpoints/{id}/{}/{instance}/{file}", kind.as_str())
}

/// Uploads participant `manifest.kind`/`manifest.instance`'s share of `manifest.checkpoint`,
/// written locally by [`super::write`]: the records, then the manifest. A manifest already in
/// the store is kept if it is this one, and a conflict otherwise.
pub async fn upload_share(
    store: &RemoteStore,
    run_dir: &Path,
    manifest: &Manifest,
) -> Result<(), StoreError> {
    let dir = participant_dir(
        run_dir,
        &manifest.checkpoint,
        manifest.kind,
        &manifest.instance,
    );
    let records = read_local(&dir.join(&manifest.records_file)).await?;
    let key = |file: &str| {
        share_key(
            &manifest.checkpoint,
            manifest.kind,
            &manifest.instance,
            file,
        )
    };
    // Named by its digest: one already there holds the same bytes or is found damaged on read.
    store.put_new(&key(&manifest.records_file), records).await?;
    let bytes = read_local(&dir.join(MANIFEST_FILE)).await?;
    put_once(store, &key(MANIFEST_FILE), bytes).await
}

/// Puts `bytes` as `key` unless it is there; one there with other bytes is a conflict.
async fn put_once(store: &RemoteStore, key: &str, bytes: Bytes) -> Result<(), StoreError> {
    if store.put_new(key, bytes.clone()).await? == Created::New {
        return Ok(());
    }
    let existing = store.get(key).await?;
    if existing.as_ref() == Some(&bytes) {
        return Ok(());
    }
    Err(StoreError::invalid(
        format!("{}/{key}", store.url()),
        "already in the store with other content, not replaced",
    ))
}

/// Publishes `doc` (whose `checkpoint.json` is written locally) in the store: its document,
/// then marker `after + 1` (1 when nothing was published). Every participant's share must be
/// uploaded already. Returns the marker's number; when another coordinator holds that number
/// the checkpoint is not published ([`StoreError::Fenced`]).
pub async fn publish(
    store: &RemoteStore,
    run_dir: &Path,
    doc: &CheckpointDoc,
    after: Option<u64>,
) -> Result<u64, StoreError> {
    let local = super::checkpoint_dir(run_dir, &doc.id).join(CHECKPOINT_FILE);
    put_once(store, &checkpoint_key(&doc.id), read_local(&local).await?).await?;
    let seq = after.map_or(1, |s| s.saturating_add(1));
    let marker = Marker {
        version: MARKER_VERSION,
        seq,
        checkpoint: doc.id.clone(),
        created_unix_ms: doc.created_unix_ms,
    };
    let bytes =
        serde_json::to_vec_pretty(&marker).map_err(|e| StoreError::json(marker_key(seq), e))?;
    match store.put_new(&marker_key(seq), Bytes::from(bytes)).await? {
        Created::New => Ok(seq),
        Created::Existed => {
            let holder = read_marker(store, seq)
                .await
                .map(|m| m.checkpoint)
                .unwrap_or_else(|e| format!("unreadable: {e}"));
            Err(StoreError::Fenced {
                url: store.url().to_string(),
                seq,
                holder,
            })
        }
    }
}

/// Re-publishes the newest marker's checkpoint as the next marker, so every coordinator that
/// counted from an older marker is fenced from now on: a process taking a run over makes this
/// its first step, before anything of the run is read. Returns the new marker's number (`None`
/// when nothing was published). A rival that publishes meanwhile moves the head, and the step
/// is taken again from there.
pub async fn fence(store: &RemoteStore, now_unix_ms: u64) -> Result<Option<u64>, StoreError> {
    const TRIES: usize = 100;
    for _ in 0..TRIES {
        let Some(head) = head(store).await? else {
            return Ok(None);
        };
        let newest = read_marker(store, head).await?;
        let seq = head.saturating_add(1);
        let marker = Marker {
            version: MARKER_VERSION,
            seq,
            checkpoint: newest.checkpoint,
            created_unix_ms: now_unix_ms,
        };
        let bytes =
            serde_json::to_vec_pretty(&marker).map_err(|e| StoreError::json(marker_key(seq), e))?;
        if store.put_new(&marker_key(seq), Bytes::from(bytes)).await? == Created::New {
            return Ok(Some(seq));
        }
    }
    Err(StoreError::invalid(
        format!("{}/{MARKER_PREFIX}", store.url()),
        format!("the newest publish marker moved {TRIES} times while this process fenced it"),
    ))
}

async fn read_marker(store: &RemoteStore, seq: u64) -> Result<Marker, StoreError> {
    let marker: Marker = numbered::read(store, MARKER_PREFIX, seq, MARKER_VERSION, |m: &Marker| {
        m.seq
    })
    .await?;
    super::check_component("checkpoint", &marker.checkpoint)?;
    Ok(marker)
}

/// The numbers of every publish marker in the store, newest first.
async fn marker_seqs(store: &RemoteStore) -> Result<Vec<u64>, StoreError> {
    numbered::seqs(store, MARKER_PREFIX).await
}

/// The newest publish marker's number, if any: where a coordinator starts counting.
pub async fn head(store: &RemoteStore) -> Result<Option<u64>, StoreError> {
    Ok(marker_seqs(store).await?.first().copied())
}

/// The published checkpoints the store holds, newest first (unreadable markers left out and
/// reported through the returned errors).
pub async fn markers(store: &RemoteStore) -> Result<(Vec<Marker>, Vec<StoreError>), StoreError> {
    let mut found = Vec::new();
    let mut bad = Vec::new();
    for seq in marker_seqs(store).await? {
        match read_marker(store, seq).await {
            Ok(m) => found.push(m),
            Err(e) => bad.push(e),
        }
    }
    Ok((found, bad))
}

/// What [`fetch`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The checkpoint the store's newest marker names.
    pub latest: Option<String>,
    /// Files written locally.
    pub files: usize,
    /// Markers that could not be read, as messages.
    pub unreadable: Vec<String>,
}

/// Brings every checkpoint the store publishes into `run_dir` (only files missing locally are
/// fetched; each is written atomically, 0600), then points the local `LATEST` at the store's
/// newest. After it the local readers see what the store publishes, and verify it by digest as
/// they verify their own files.
pub async fn fetch(store: &RemoteStore, run_dir: &Path) -> Result<Fetched, StoreError> {
    let (found, bad) = markers(store).await?;
    let mut out = Fetched {
        latest: found.first().map(|m| m.checkpoint.clone()),
        files: 0,
        unreadable: bad.iter().map(ToString::to_string).collect(),
    };
    for marker in &found {
        out.files += fetch_checkpoint(store, run_dir, &marker.checkpoint).await?;
    }
    if let Some(id) = out.latest.clone() {
        let run_dir = run_dir.to_owned();
        tokio::task::spawn_blocking(move || {
            if super::latest(&run_dir).ok().flatten().as_ref() == Some(&id) {
                return Ok(());
            }
            super::point_latest(&run_dir, &id)
        })
        .await
        .map_err(join)??;
    }
    Ok(out)
}

/// Fetches checkpoint `id`'s document and every share it names, when missing locally.
/// Returns how many files were written.
pub async fn fetch_checkpoint(
    store: &RemoteStore,
    run_dir: &Path,
    id: &str,
) -> Result<usize, StoreError> {
    super::check_component("checkpoint", id)?;
    let dir = super::checkpoint_dir(run_dir, id);
    let mut files =
        usize::from(fetch_file(store, &checkpoint_key(id), &dir.join(CHECKPOINT_FILE)).await?);
    // Read leniently: a damaged document still comes down whole, and the local reader says
    // what is wrong with it.
    let path = dir.join(CHECKPOINT_FILE);
    let Ok(doc) =
        versioned::decode::<CheckpointDoc>(&path, &read_local(&path).await?, CHECKPOINT_VERSION)
    else {
        return Ok(files);
    };
    for m in &doc.participants {
        files += fetch_share(store, run_dir, id, m.kind, &m.instance).await?;
    }
    Ok(files)
}

/// Fetches participant `kind`/`instance`'s share of checkpoint `id` (manifest, then the
/// records it names), when missing locally. Returns how many files were written.
pub async fn fetch_share(
    store: &RemoteStore,
    run_dir: &Path,
    id: &str,
    kind: Kind,
    instance: &str,
) -> Result<usize, StoreError> {
    super::check_component("checkpoint", id)?;
    super::check_component("instance", instance)?;
    let dir = participant_dir(run_dir, id, kind, instance);
    let mpath = dir.join(MANIFEST_FILE);
    let mut files = usize::from(
        fetch_file(store, &share_key(id, kind, instance, MANIFEST_FILE), &mpath).await?,
    );
    let Ok(manifest) =
        versioned::decode::<Manifest>(&mpath, &read_local(&mpath).await?, MANIFEST_VERSION)
    else {
        return Ok(files);
    };
    if super::check_component("records file", &manifest.records_file).is_ok() {
        let key = share_key(id, kind, instance, &manifest.records_file);
        files += usize::from(fetch_file(store, &key, &dir.join(&manifest.records_file)).await?);
    }
    Ok(files)
}

/// Writes object `key` to `path` unless `path` exists. False when nothing was written.
async fn fetch_file(store: &RemoteStore, key: &str, path: &Path) -> Result<bool, StoreError> {
    if tokio::fs::try_exists(path).await.unwrap_or(false) {
        return Ok(false);
    }
    let Some(bytes) = store.get(key).await? else {
        return Ok(false);
    };
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        if let Some(parent) = path.parent() {
            fsio::create_dirs(parent)?;
        }
        fsio::publish(&path, &bytes)
    })
    .await
    .map_err(join)?
}

/// Removes from the store every checkpoint neither in `keep` nor named by one of the newest
/// `newest` markers, and every marker naming a removed one, but always keeps the newest
/// marker (the count goes on from it). So a coordinator whose own directory holds fewer
/// checkpoints (a new one, on another node) never prunes the store below `newest`. Objects of a checkpoint no
/// marker names (a commit that failed or was killed mid-upload) go too. Run by the
/// coordinator after publishing, while no commit is in progress. Returns the ids removed.
pub async fn prune(
    store: &RemoteStore,
    keep: &BTreeSet<String>,
    newest: usize,
) -> Result<Vec<String>, StoreError> {
    let seqs = marker_seqs(store).await?;
    let mut keep = keep.clone();
    for seq in seqs.iter().take(newest.max(1)) {
        if let Ok(m) = read_marker(store, *seq).await {
            keep.insert(m.checkpoint);
        }
    }
    let keep = &keep;
    for (i, seq) in seqs.iter().enumerate() {
        if i == 0 {
            continue;
        }
        let doomed = match read_marker(store, *seq).await {
            Ok(m) => !keep.contains(&m.checkpoint),
            Err(_) => false,
        };
        if doomed {
            store.delete(&marker_key(*seq)).await?;
        }
    }
    let mut removed = Vec::new();
    for id in store.children("checkpoints").await? {
        if keep.contains(&id) {
            continue;
        }
        store.delete_prefix(&format!("checkpoints/{id}")).await?;
        removed.push(id);
    }
    prune_snapshots(store, keep).await?;
    Ok(removed)
}

/// Removes the snapshot objects participants stored under `snapshots/<checkpoint>/` that
/// no retained checkpoint needs: a retained checkpoint keeps all of its own, and every
/// older one its `index-*.json` files name (the chains its incremental snapshots were sent
/// against).
async fn prune_snapshots(store: &RemoteStore, keep: &BTreeSet<String>) -> Result<(), StoreError> {
    let checkpoints = store.children("snapshots").await?;
    let mut needed = BTreeSet::new();
    for id in checkpoints.iter().filter(|id| keep.contains(*id)) {
        for key in store.list(&format!("snapshots/{id}")).await? {
            let name = key.rsplit('/').next().unwrap_or_default();
            if !(name.starts_with("index-") && name.ends_with(".json")) {
                continue;
            }
            let Some(bytes) = store.get(&key).await? else {
                continue;
            };
            // Read loosely: only the names matter here, and a damaged index keeps what
            // its checkpoint holds anyway.
            let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            for entry in doc["snapshots"].as_array().into_iter().flatten() {
                let chain = entry["chain"].as_array().into_iter().flatten();
                for k in chain.chain(std::iter::once(&entry["key"])) {
                    if let Some(k) = k.as_str() {
                        needed.insert(k.to_owned());
                    }
                }
            }
        }
    }
    for id in checkpoints.iter().filter(|id| !keep.contains(*id)) {
        for key in store.list(&format!("snapshots/{id}")).await? {
            let mut parts = key.splitn(4, '/');
            let (_, _, snapshot) = (parts.next(), parts.next(), parts.next());
            let is_object = parts.next().is_some();
            let doomed = match snapshot {
                Some(s) if is_object => !needed.contains(&format!("{id}/{s}")),
                _ => true,
            };
            if doomed {
                store.delete(&key).await?;
            }
        }
    }
    Ok(())
}

async fn read_local(path: &Path) -> Result<Bytes, StoreError> {
    tokio::fs::read(path)
        .await
        .map(Bytes::from)
        .map_err(StoreError::io(path))
}

fn join(e: tokio::task::JoinError) -> StoreError {
    StoreError::invalid(std::path::PathBuf::new(), format!("file task failed: {e}"))
}
