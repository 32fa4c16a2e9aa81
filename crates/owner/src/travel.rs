//! Snapshots that travel: each snapshot a checkpoint takes is also kept in the checkpoint
//! store, so a rollout restores on a node that never held it.
//!
//! ```text
//! snapshots/<checkpoint>/<snapshot>/<n>-<sha256>      the stream, in chunks
//! snapshots/<checkpoint>/<snapshot>/meta.json         written after its chunks
//! snapshots/<checkpoint>/index-<instance>.json        every snapshot of the commit and the
//!                                                     older ones it needs (its chain)
//! ```
//!
//! A btrfs snapshot goes as a `btrfs send` stream against the rollout's previous uploaded
//! snapshot (`-p`), whole every [`Travel::full_every`] so a chain never grows past it; a copy
//! store snapshot as its archive. The rollout is the lineage, so it carries across restores
//! and nodes: a snapshot restored here is the parent of the rollout's next one. All of a
//! commit's objects are durable before its records are written, so a published checkpoint
//! never names a snapshot the store lacks. Restoring a snapshot this node lacks fetches its
//! chain, oldest first, checks every chunk's digest and receives it; a node that holds the
//! snapshot downloads nothing. The coordinator's store prune removes what no retained
//! checkpoint's index names.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{FutureExt as _, StreamExt as _};
use rollpoint_remote::{Chunk, Created, RemoteStore};
use rollpoint_sandbox::{Backend, SandboxSpec};
use serde::{Deserialize, Serialize};

use crate::record::SessionRecord;

/// The snapshot meta and index formats this build writes and reads.
pub const TRAVEL_VERSION: u32 = 1;
/// A whole send after this many incremental ones, by default.
pub const DEFAULT_FULL_EVERY: u32 = 8;
/// Largest `full_every` (a chain of more would make a restore fetch too much).
pub const MAX_FULL_EVERY: u32 = 1_000;
/// Stream chunk size.
const CHUNK_BYTES: usize = 8 << 20;
/// Snapshots sent or received at once.
const PARALLEL: usize = 4;

/// `snapshots/<checkpoint>/<snapshot>/meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotMeta {
    pub v: u32,
    pub snapshot: String,
    pub checkpoint: String,
    pub sandbox: String,
    pub spec: SandboxSpec,
    /// `btrfs` or `copy`: only a store of the same kind receives it.
    pub format: String,
    /// The snapshot this one was sent against (`<checkpoint>/<snapshot>`), if any.
    pub parent: Option<String>,
    /// Incremental sends since the last whole one (0 for a whole one).
    pub depth: u32,
    pub bytes: u64,
    pub chunks: Vec<Chunk>,
}

/// One snapshot of a commit and what it needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    /// `<checkpoint>/<snapshot>`.
    pub key: String,
    /// Its ancestors, oldest first.
    pub chain: Vec<String>,
}

/// `snapshots/<checkpoint>/index-<instance>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotIndexDoc {
    pub v: u32,
    pub checkpoint: String,
    pub instance: String,
    pub snapshots: Vec<IndexEntry>,
}

/// What one upload sent, for the benchmark and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub snapshot: String,
    pub parent: Option<String>,
    pub depth: u32,
    pub bytes: u64,
}

/// The last snapshot of a rollout in the store.
#[derive(Debug, Clone)]
struct Tip {
    key: String,
    snapshot: String,
    depth: u32,
    chain: Vec<String>,
}

impl Tip {
    fn chain_with_self(&self) -> Vec<String> {
        let mut chain = self.chain.clone();
        chain.push(self.key.clone());
        chain
    }
}

/// A participant's link to the checkpoint store for its snapshots. Cheap to share.
#[derive(Debug)]
pub struct Travel {
    store: RemoteStore,
    spool: PathBuf,
    full_every: u32,
    /// The newest snapshot in the store of each rollout.
    tips: Mutex<HashMap<String, Tip>>,
    seq: AtomicU64,
}

/// A failure of a snapshot's trip, naming the snapshot or object.
#[derive(Debug, thiserror::Error)]
pub enum TravelError {
    #[error(transparent)]
    Remote(#[from] rollpoint_remote::RemoteError),
    #[error("snapshot {snapshot}: {source}")]
    Backend {
        snapshot: String,
        source: Box<rollpoint_sandbox::Error>,
    },
    #[error("{key}: {source}")]
    Invalid {
        key: String,
        source: rollpoint_proto::Cause,
    },
    #[error("spool {path}: {source}")]
    Spool {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl TravelError {
    fn invalid(key: impl Into<String>, source: impl Into<rollpoint_proto::Cause>) -> Self {
        Self::Invalid {
            key: key.into(),
            source: source.into(),
        }
    }
}

impl Travel {
    /// Snapshots go to `store`; streams are spooled under `spool` (created, 0700); a whole
    /// send every `full_every` (1..=[`MAX_FULL_EVERY`]; 1 sends every snapshot whole).
    pub fn new(store: RemoteStore, spool: &Path, full_every: u32) -> Result<Self, TravelError> {
        use std::os::unix::fs::DirBuilderExt as _;
        if !(1..=MAX_FULL_EVERY).contains(&full_every) {
            return Err(TravelError::invalid(
                "full_every",
                format!("{full_every} is outside 1..={MAX_FULL_EVERY}"),
            ));
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(spool)
            .map_err(|source| TravelError::Spool {
                path: spool.to_owned(),
                source,
            })?;
        Ok(Self {
            store,
            spool: spool.to_owned(),
            full_every,
            tips: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
        })
    }

    pub fn store(&self) -> &RemoteStore {
        &self.store
    }

    fn spool_file(&self, snapshot: &str) -> PathBuf {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        self.spool
            .join(format!("{snapshot}.{}.{n}.stream", std::process::id()))
    }

    fn tips(&self) -> std::sync::MutexGuard<'_, HashMap<String, Tip>> {
        self.tips.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Uploads the snapshot of every `(rollout, record)` of commit `checkpoint`, then the
    /// commit's index. Returns what each send held.
    pub async fn upload(
        &self,
        backend: &Arc<dyn Backend>,
        checkpoint: &str,
        instance: &str,
        records: &[(String, SessionRecord)],
    ) -> Result<Vec<Sent>, TravelError> {
        let sends: Vec<BoxFuture<'_, Result<(Sent, Tip), TravelError>>> = records
            .iter()
            .map(|(rollout, record)| self.upload_one(backend, rollout, record).boxed())
            .collect();
        let done: Vec<Result<(Sent, Tip), TravelError>> = futures_util::stream::iter(sends)
            .buffered(PARALLEL)
            .collect()
            .await;
        let done: Vec<(Sent, Tip)> = done.into_iter().collect::<Result<_, _>>()?;
        let index = SnapshotIndexDoc {
            v: TRAVEL_VERSION,
            checkpoint: checkpoint.to_owned(),
            instance: instance.to_owned(),
            snapshots: done
                .iter()
                .map(|(_, tip)| IndexEntry {
                    key: tip.key.clone(),
                    chain: tip.chain.clone(),
                })
                .collect(),
        };
        let key = format!("snapshots/{checkpoint}/index-{instance}.json");
        let bytes =
            serde_json::to_vec_pretty(&index).map_err(|e| TravelError::invalid(key.clone(), e))?;
        self.store.put(&key, Bytes::from(bytes)).await?;
        let mut tips = self.tips();
        for ((rollout, _), (_, tip)) in records.iter().zip(&done) {
            tips.insert(rollout.clone(), tip.clone());
        }
        drop(tips);
        Ok(done.into_iter().map(|(sent, _)| sent).collect())
    }

    async fn upload_one(
        &self,
        backend: &Arc<dyn Backend>,
        rollout: &str,
        record: &SessionRecord,
    ) -> Result<(Sent, Tip), TravelError> {
        let format = backend.snapshot_format().ok_or_else(|| {
            TravelError::invalid(
                record.snapshot.clone(),
                "this node's snapshots do not travel",
            )
        })?;
        let previous = self.tips().get(rollout).cloned();
        let parent = previous.filter(|tip| {
            format == "btrfs"
                && tip.depth + 1 < self.full_every
                && tip.snapshot != record.snapshot
                && backend.has_snapshot(&tip.snapshot)
        });
        let spool = self.spool_file(&record.snapshot);
        let sent = {
            let (backend, snapshot, parent_id, out) = (
                Arc::clone(backend),
                record.snapshot.clone(),
                parent.as_ref().map(|p| p.snapshot.clone()),
                spool.clone(),
            );
            tokio::task::spawn_blocking(move || {
                backend.send_snapshot(&snapshot, parent_id.as_deref(), &out)
            })
            .await
            .map_err(|e| {
                TravelError::invalid(record.snapshot.clone(), format!("send task failed: {e}"))
            })?
        };
        let result = async {
            let (sandbox, spec) = sent.map_err(|source| TravelError::Backend {
                snapshot: record.snapshot.clone(),
                source: Box::new(source),
            })?;
            let key = format!("{}/{}", record.checkpoint, record.snapshot);
            let prefix = format!("snapshots/{key}");
            let chunks = self.store.upload_file(&prefix, &spool, CHUNK_BYTES).await?;
            let meta = SnapshotMeta {
                v: TRAVEL_VERSION,
                snapshot: record.snapshot.clone(),
                checkpoint: record.checkpoint.clone(),
                sandbox,
                spec,
                format: format.to_owned(),
                parent: parent.as_ref().map(|p| p.key.clone()),
                depth: parent.as_ref().map_or(0, |p| p.depth + 1),
                bytes: chunks.iter().map(|c| c.len).sum(),
                chunks,
            };
            let bytes = serde_json::to_vec_pretty(&meta)
                .map_err(|e| TravelError::invalid(prefix.clone(), e))?;
            if self
                .store
                .put_new(&format!("{prefix}/meta.json"), Bytes::from(bytes))
                .await?
                == Created::Existed
            {
                // A retry of the same commit: the first upload's meta stands.
                let existing = self.meta(&key).await?;
                return Ok((
                    Sent {
                        snapshot: record.snapshot.clone(),
                        parent: existing.parent.clone(),
                        depth: existing.depth,
                        bytes: existing.bytes,
                    },
                    self.tip_of(&key, &existing).await?,
                ));
            }
            let tip = Tip {
                key,
                snapshot: record.snapshot.clone(),
                depth: meta.depth,
                chain: parent
                    .as_ref()
                    .map(Tip::chain_with_self)
                    .unwrap_or_default(),
            };
            Ok((
                Sent {
                    snapshot: record.snapshot.clone(),
                    parent: meta.parent.clone(),
                    depth: meta.depth,
                    bytes: meta.bytes,
                },
                tip,
            ))
        }
        .await;
        let _ = tokio::fs::remove_file(&spool).await;
        result
    }

    /// Reads `snapshots/<key>/meta.json`.
    async fn meta(&self, key: &str) -> Result<SnapshotMeta, TravelError> {
        let object = format!("snapshots/{key}/meta.json");
        let bytes = self.store.get(&object).await?.ok_or_else(|| {
            TravelError::invalid(
                format!("{}/{object}", self.store.url()),
                "missing: the checkpoint names a snapshot the store does not hold",
            )
        })?;
        let meta: SnapshotMeta =
            rollpoint_proto::decode("snapshot meta", TRAVEL_VERSION, &bytes)
                .map_err(|e| TravelError::invalid(format!("{}/{object}", self.store.url()), e))?;
        if format!("{}/{}", meta.checkpoint, meta.snapshot) != key {
            return Err(TravelError::invalid(
                format!("{}/{object}", self.store.url()),
                format!(
                    "names snapshot {}/{}, not {key}",
                    meta.checkpoint, meta.snapshot
                ),
            ));
        }
        Ok(meta)
    }

    /// The chain of `key` (its ancestors, oldest first), read from the store's metas.
    async fn tip_of(&self, key: &str, meta: &SnapshotMeta) -> Result<Tip, TravelError> {
        let mut chain = Vec::new();
        let mut next = meta.parent.clone();
        while let Some(parent) = next {
            if chain.len() > MAX_FULL_EVERY as usize {
                return Err(TravelError::invalid(
                    key.to_owned(),
                    format!("its chain is longer than {MAX_FULL_EVERY}"),
                ));
            }
            let m = self.meta(&parent).await?;
            chain.push(parent);
            next = m.parent;
        }
        chain.reverse();
        Ok(Tip {
            key: key.to_owned(),
            snapshot: meta.snapshot.clone(),
            depth: meta.depth,
            chain,
        })
    }

    /// Makes sure every snapshot `records` name is here: each one this node lacks is
    /// fetched with the ancestors it lacks, oldest first, and received. Each restored
    /// rollout's lineage continues from its snapshot. Returns how many snapshots came
    /// from the store.
    pub async fn fetch(
        &self,
        backend: &Arc<dyn Backend>,
        records: &[(String, SessionRecord)],
    ) -> Result<usize, TravelError> {
        let mut wanted: Vec<(String, String)> = Vec::new();
        let mut seen = BTreeSet::new();
        for (_, record) in records {
            if seen.insert(record.snapshot.clone()) {
                wanted.push((record.checkpoint.clone(), record.snapshot.clone()));
            }
        }
        let fetches: Vec<BoxFuture<'_, Result<(usize, Tip), TravelError>>> = wanted
            .iter()
            .map(|(checkpoint, snapshot)| self.fetch_one(backend, checkpoint, snapshot).boxed())
            .collect();
        let fetched: Vec<Result<(usize, Tip), TravelError>> = futures_util::stream::iter(fetches)
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        let mut count = 0;
        let mut by_snapshot = HashMap::new();
        for r in fetched {
            let (n, tip) = r?;
            count += n;
            by_snapshot.insert(tip.snapshot.clone(), tip);
        }
        let mut tips = self.tips();
        for (rollout, record) in records {
            if let Some(tip) = by_snapshot.get(&record.snapshot) {
                tips.insert(rollout.clone(), tip.clone());
            }
        }
        Ok(count)
    }

    async fn fetch_one(
        &self,
        backend: &Arc<dyn Backend>,
        checkpoint: &str,
        snapshot: &str,
    ) -> Result<(usize, Tip), TravelError> {
        let key = format!("{checkpoint}/{snapshot}");
        let meta = self.meta(&key).await?;
        let tip = self.tip_of(&key, &meta).await?;
        if backend.has_snapshot(snapshot) {
            return Ok((0, tip));
        }
        let format = backend.snapshot_format().unwrap_or("none");
        // Oldest first, from the newest ancestor this node holds.
        let mut needed = Vec::new();
        for ancestor in tip.chain_with_self().into_iter().rev() {
            let m = if ancestor == key {
                meta.clone()
            } else {
                self.meta(&ancestor).await?
            };
            if backend.has_snapshot(&m.snapshot) {
                break;
            }
            needed.push(m);
        }
        needed.reverse();
        let mut count = 0;
        for m in needed {
            if m.format != format {
                return Err(TravelError::invalid(
                    format!("snapshots/{}/{}", m.checkpoint, m.snapshot),
                    format!("a {} stream, and this node's store is {format}", m.format),
                ));
            }
            let spool = self.spool_file(&m.snapshot);
            let prefix = format!("snapshots/{}/{}", m.checkpoint, m.snapshot);
            let received = async {
                self.store.download_file(&prefix, &m.chunks, &spool).await?;
                let (backend, m, stream, named_by) = (
                    Arc::clone(backend),
                    m.clone(),
                    spool.clone(),
                    checkpoint.to_owned(),
                );
                tokio::task::spawn_blocking(move || {
                    backend
                        .receive_snapshot(&m.snapshot, &m.sandbox, &m.spec, &named_by, &stream)
                        .map_err(|source| TravelError::Backend {
                            snapshot: m.snapshot.clone(),
                            source: Box::new(source),
                        })
                })
                .await
                .map_err(|e| {
                    TravelError::invalid(prefix.clone(), format!("receive task failed: {e}"))
                })?
            }
            .await;
            let _ = tokio::fs::remove_file(&spool).await;
            received?;
            count += 1;
        }
        Ok((count, tip))
    }
}
