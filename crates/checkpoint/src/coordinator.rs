//! The coordinator: the controller's side of the protocol over a set of
//! participants, in process or over HTTP alike (`Arc<dyn Control>`).
//!
//! Prepare goes stage by stage, model -> agent -> resources (fan-out within
//! a stage) and stops at the first stage not ready: the model holds replies
//! so agents reach boundaries, and resources go last because agents call
//! them until they park. Commit and restore go to everyone at once; resume
//! goes in reverse order and carries on past failures (a participant that
//! cannot be reached resumes by itself when its lease runs out). A
//! checkpoint is published (`checkpoint.json`, then `LATEST`) only after
//! every commit succeeded. Restore is all or nothing: on any failure the new
//! attempts are retired everywhere and everyone is resumed.
//!
//! With a checkpoint store (`CoordinatorConfig::remote`), the publish point
//! is the store's next publish marker (`store::remote`): the coordinator
//! counts on from the newest marker it saw when it started, so one that
//! missed a rival's publish is fenced out. `LATEST` follows locally.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;

use crate::client::CALL_MARGIN;
use crate::control::{Control, ControlResult};
use crate::errors::{Code, ControlError, CoordinatorError, StoreError};
use crate::participant::{AttemptKey, Kind};
use crate::phase::Phase;
use crate::store::{self, CheckpointDoc, DEFAULT_KEEP};
use crate::wire::{
    CommitRequest, ForkSpec, KeysRequest, KeysVerb, PrepareReply, PrepareRequest, RestoreRequest,
    ResumeRequest,
};
use rollpoint_remote::RemoteStore;

/// Shortest deadline used to clean up after a failure (resume, retire).
pub const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How the coordinator works.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// The run directory; checkpoints are published under
    /// `run_dir/checkpoints/`.
    pub run_dir: PathBuf,
    /// How many published checkpoints to keep.
    pub keep: usize,
    /// Each control call's deadline.
    pub timeout: Duration,
    /// The object store checkpoints are published in, besides `run_dir`.
    pub remote: Option<RemoteStore>,
}

impl CoordinatorConfig {
    pub fn new(run_dir: impl Into<PathBuf>) -> Self {
        Self {
            run_dir: run_dir.into(),
            keep: DEFAULT_KEEP,
            timeout: Duration::from_secs(300),
            remote: None,
        }
    }
}

/// A participant the coordinator drives.
#[derive(Debug, Clone)]
pub struct Peer {
    pub kind: Kind,
    pub instance: String,
    pub control: Arc<dyn Control>,
}

/// What prepare found.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Every participant prepared.
    pub ready: bool,
    /// The replies of the stages reached, in prepare order.
    pub replies: Vec<(Kind, String, PrepareReply)>,
    /// Attempt keys some participant cannot continue.
    pub restarts: BTreeSet<AttemptKey>,
}

impl Prepared {
    /// What blocks the cut, participant by participant.
    pub fn blockers(&self) -> String {
        self.replies
            .iter()
            .filter(|(_, _, r)| r.phase != Phase::Prepared)
            .map(|(kind, instance, r)| {
                format!(
                    "{kind}/{instance}: {} blockers ({})",
                    r.readiness.blocker_count,
                    r.readiness.blockers.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// What to checkpoint.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub id: String,
    /// The attempt keys in flight (and restored, not yet re-dispatched).
    pub scope: Vec<AttemptKey>,
    /// The checkpoint this run was restored from.
    pub continues: Option<String>,
    /// End the run: park what was exported and do not resume.
    pub stop: bool,
}

/// How long each step of a checkpoint took.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timings {
    pub prepare: Duration,
    pub commit: Duration,
    pub publish: Duration,
    /// Kept paused on purpose after publishing ([`Coordinator::checkpoint_kept_paused`]).
    pub kept_paused: Duration,
    pub resume: Duration,
}

/// A published checkpoint.
#[derive(Debug, Clone)]
pub struct Checkpointed {
    pub doc: CheckpointDoc,
    pub timings: Timings,
    /// Older checkpoints deleted by retention.
    pub pruned: Vec<String>,
}

/// A restore done everywhere.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The next attempts' keys, as each participant reported them.
    pub restored: Vec<(Kind, String, Vec<AttemptKey>)>,
}

/// A lost participant's share installed into a live one of the same kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub kind: Kind,
    /// The instance that wrote the share (gone).
    pub from: String,
    /// The instance that takes its rollouts over.
    pub to: String,
}

/// Drives a fixed set of participants.
#[derive(Debug, Clone)]
pub struct Coordinator {
    peers: Vec<Peer>,
    config: CoordinatorConfig,
    /// The newest publish marker of the store this coordinator saw or made.
    published_seq: Arc<tokio::sync::Mutex<Option<u64>>>,
}

impl Coordinator {
    /// Asks every control for its kind and instance and orders them for
    /// prepare. Two participants with the same kind and instance are
    /// refused.
    pub async fn new(
        controls: Vec<Arc<dyn Control>>,
        config: CoordinatorConfig,
    ) -> Result<Self, CoordinatorError> {
        let mut peers = Vec::with_capacity(controls.len());
        for (index, control) in controls.into_iter().enumerate() {
            let status = control
                .status()
                .await
                .map_err(|source| CoordinatorError::Discover { index, source })?;
            peers.push(Peer {
                kind: status.kind,
                instance: status.instance,
                control,
            });
        }
        peers.sort_by(|a, b| (a.kind, &a.instance).cmp(&(b.kind, &b.instance)));
        for pair in peers.windows(2) {
            if pair[0].kind == pair[1].kind && pair[0].instance == pair[1].instance {
                return Err(CoordinatorError::Duplicate {
                    kind: pair[0].kind,
                    instance: pair[0].instance.clone(),
                });
            }
        }
        let published_seq = match &config.remote {
            Some(remote) => {
                store::remote::head(remote)
                    .await
                    .map_err(|source| CoordinatorError::Store {
                        checkpoint: "(publish marker)".to_owned(),
                        source,
                    })?
            }
            None => None,
        };
        Ok(Self {
            peers,
            config,
            published_seq: Arc::new(tokio::sync::Mutex::new(published_seq)),
        })
    }

    /// The object store checkpoints are published in, if any.
    pub fn remote(&self) -> Option<&RemoteStore> {
        self.config.remote.as_ref()
    }

    /// The participants, in prepare order.
    pub fn peers(&self) -> &[Peer] {
        &self.peers
    }

    fn timeout_ms(&self, timeout: Duration) -> u64 {
        u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, crate::wire::MAX_TIMEOUT_MS)
    }

    /// Runs one call on `peer`, bounded by `timeout` plus the margin even
    /// when the participant is in process.
    async fn call<T>(
        peer: &Peer,
        action: &'static str,
        timeout: Duration,
        fut: impl Future<Output = ControlResult<T>>,
    ) -> Result<T, CoordinatorError> {
        let result = match tokio::time::timeout(timeout + CALL_MARGIN, fut).await {
            Ok(r) => r,
            Err(_) => Err(ControlError::new(
                Code::DeadlineExceeded,
                format!("no reply within {} ms", (timeout + CALL_MARGIN).as_millis()),
            )),
        };
        result.map_err(|source| CoordinatorError::Call {
            action,
            kind: peer.kind,
            instance: peer.instance.clone(),
            source,
        })
    }

    /// Prepares checkpoint `id` stage by stage. An error or a stage not
    /// ready stops it; the caller resumes (see [`Self::checkpoint`]).
    pub async fn prepare(&self, id: &str) -> Result<Prepared, CoordinatorError> {
        let timeout = self.config.timeout;
        let mut out = Prepared {
            ready: true,
            replies: Vec::new(),
            restarts: BTreeSet::new(),
        };
        for kind in Kind::ALL {
            let stage: Vec<&Peer> = self.peers.iter().filter(|p| p.kind == kind).collect();
            let replies = join_all(stage.iter().map(|peer| {
                let req = PrepareRequest {
                    checkpoint: id.to_owned(),
                    timeout_ms: self.timeout_ms(timeout),
                };
                Self::call(peer, "prepare", timeout, peer.control.prepare(req))
            }))
            .await;
            let mut failures = Vec::new();
            for (peer, reply) in stage.iter().zip(replies) {
                match reply {
                    Ok(reply) => {
                        out.ready &= reply.phase == Phase::Prepared;
                        out.restarts
                            .extend(reply.readiness.restarts.iter().cloned());
                        out.replies.push((peer.kind, peer.instance.clone(), reply));
                    }
                    Err(e) => failures.push(e),
                }
            }
            if !failures.is_empty() {
                return Err(several("prepare", id, failures));
            }
            if !out.ready {
                break;
            }
        }
        Ok(out)
    }

    /// Commits checkpoint `id` everywhere at once; returns each
    /// participant's manifest.
    pub async fn commit(
        &self,
        id: &str,
        scope: &[AttemptKey],
        stop: bool,
    ) -> Result<Vec<store::Member>, CoordinatorError> {
        let timeout = self.config.timeout;
        let replies = join_all(self.peers.iter().map(|peer| {
            let req = CommitRequest {
                checkpoint: id.to_owned(),
                timeout_ms: self.timeout_ms(timeout),
                scope: scope.to_vec(),
                stop,
            };
            Self::call(peer, "commit", timeout, peer.control.commit(req))
        }))
        .await;
        let mut members = Vec::new();
        let mut failures = Vec::new();
        for (peer, reply) in self.peers.iter().zip(replies) {
            match reply {
                Ok(reply) => members.push(store::Member {
                    kind: peer.kind,
                    instance: peer.instance.clone(),
                    manifest: reply.manifest,
                }),
                Err(e) => failures.push(e),
            }
        }
        if failures.is_empty() {
            Ok(members)
        } else {
            Err(several("commit", id, failures))
        }
    }

    /// Resumes `id` everywhere, in reverse prepare order, carrying on past
    /// failures; reports every failure at the end.
    pub async fn resume(&self, id: &str) -> Result<(), CoordinatorError> {
        self.resume_within(id, self.config.timeout).await
    }

    async fn resume_within(&self, id: &str, timeout: Duration) -> Result<(), CoordinatorError> {
        let mut failures = Vec::new();
        for peer in self.peers.iter().rev() {
            let req = ResumeRequest {
                checkpoint: id.to_owned(),
                timeout_ms: self.timeout_ms(timeout),
            };
            if let Err(e) = Self::call(peer, "resume", timeout, peer.control.resume(req)).await {
                failures.push(e);
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(several("resume", id, failures))
        }
    }

    /// Takes checkpoint `plan.id`: prepare, commit the scope minus the
    /// attempts some participant must restart, publish, prune, and resume
    /// (unless `plan.stop`). On any failure before publishing, everyone is
    /// resumed and nothing is published; a failure to resume after
    /// publishing is [`CoordinatorError::PublishedNotResumed`].
    pub async fn checkpoint(&self, plan: &Plan) -> Result<Checkpointed, CoordinatorError> {
        self.checkpoint_kept_paused(plan, Duration::ZERO).await
    }

    /// [`Coordinator::checkpoint`], keeping everyone paused for `pause` after
    /// the checkpoint is published and before resuming, so a frozen rollout
    /// can be inspected (the wire's `hold_ms`). `pause` must stay well under
    /// the participants' lease, or they resume on their own.
    #[tracing::instrument(name = "checkpoint", skip_all, fields(checkpoint = %plan.id, scope = plan.scope.len()))]
    pub async fn checkpoint_kept_paused(
        &self,
        plan: &Plan,
        pause: Duration,
    ) -> Result<Checkpointed, CoordinatorError> {
        let id = plan.id.as_str();
        let mut timings = Timings::default();
        let started = Instant::now();
        let prepared = match self.prepare(id).await {
            Ok(p) if p.ready => p,
            Ok(p) => {
                self.cleanup_resume(id).await;
                return Err(CoordinatorError::NotPrepared {
                    checkpoint: id.to_owned(),
                    detail: p.blockers(),
                });
            }
            Err(e) => {
                self.cleanup_resume(id).await;
                return Err(e);
            }
        };
        timings.prepare = started.elapsed();

        let scope: Vec<AttemptKey> = plan
            .scope
            .iter()
            .filter(|k| !prepared.restarts.contains(*k))
            .cloned()
            .collect();
        let started = Instant::now();
        let members = match self.commit(id, &scope, plan.stop).await {
            Ok(m) => m,
            Err(e) => {
                self.cleanup_resume(id).await;
                return Err(e);
            }
        };
        timings.commit = started.elapsed();

        let started = Instant::now();
        let doc = CheckpointDoc {
            version: store::CHECKPOINT_VERSION,
            id: id.to_owned(),
            created_unix_ms: now_ms(),
            continues: plan.continues.clone(),
            scope,
            restarts: prepared.restarts.into_iter().collect(),
            participants: members,
        };
        let pruned = match self.publish(&doc).await {
            Ok(pruned) => pruned,
            Err(source) => {
                self.cleanup_resume(id).await;
                return Err(CoordinatorError::Store {
                    checkpoint: id.to_owned(),
                    source,
                });
            }
        };
        timings.publish = started.elapsed();

        if !plan.stop {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
                timings.kept_paused = pause;
            }
            let started = Instant::now();
            self.resume(id)
                .await
                .map_err(|e| CoordinatorError::PublishedNotResumed {
                    checkpoint: id.to_owned(),
                    source: Box::new(e),
                })?;
            timings.resume = started.elapsed();
        }
        Ok(Checkpointed {
            doc,
            timings,
            pruned,
        })
    }

    /// Publishes `doc` (every share is written) and prunes. Returns the ids
    /// retention removed here.
    async fn publish(&self, doc: &CheckpointDoc) -> Result<Vec<String>, StoreError> {
        let run_dir = self.config.run_dir.clone();
        let keep = self.config.keep;
        let Some(remote) = &self.config.remote else {
            let doc = doc.clone();
            return blocking(move || {
                store::publish(&run_dir, &doc)?;
                store::prune(&run_dir, keep)
            })
            .await;
        };
        {
            let (run_dir, doc) = (run_dir.clone(), doc.clone());
            blocking(move || store::write_doc(&run_dir, &doc)).await?;
        }
        let mut seq = self.published_seq.lock().await;
        let marker = store::remote::publish(remote, &run_dir, doc, *seq).await?;
        *seq = Some(marker);
        drop(seq);
        // Published: what is left only follows the store, and a failure of it
        // is mended by the next fetch or prune.
        let id = doc.id.clone();
        let local = blocking(move || {
            store::point_latest(&run_dir, &id)?;
            let pruned = store::prune(&run_dir, keep)?;
            Ok((pruned, store::local_ids(&run_dir)?))
        })
        .await;
        let (pruned, kept) = match local {
            Ok(done) => done,
            Err(e) => {
                tracing::warn!(checkpoint = %doc.id, marker, error = %e, "published in the checkpoint store; the local copy did not follow");
                return Ok(Vec::new());
            }
        };
        if let Err(e) = store::remote::prune(remote, &kept, self.config.keep).await {
            tracing::warn!(checkpoint = %doc.id, error = %e, "pruning the checkpoint store failed");
        }
        Ok(pruned)
    }

    /// Resumes after a failure with a deadline of at least
    /// [`CLEANUP_TIMEOUT`]; a participant it cannot reach resumes on its
    /// lease.
    async fn cleanup_resume(&self, id: &str) {
        let timeout = self.config.timeout.max(CLEANUP_TIMEOUT);
        let _reported_by_caller: Result<(), CoordinatorError> =
            self.resume_within(id, timeout).await;
    }

    /// Restores published checkpoint `source` everywhere at once as restore
    /// `id`, for the attempt keys in `scope`. All or nothing: on any failure
    /// the next attempts already installed are retired everywhere, everyone
    /// is resumed, and the error is returned. On success the caller
    /// dispatches the next attempts, then resumes `id`.
    #[tracing::instrument(name = "restore", skip_all, fields(restore = %id, checkpoint = %source))]
    pub async fn restore(
        &self,
        id: &str,
        source: &str,
        scope: &[AttemptKey],
    ) -> Result<Restored, CoordinatorError> {
        self.restore_or_fork(id, source, scope, None, &[]).await
    }

    /// [`Coordinator::restore`] of rollouts whose participants are gone (a lost node): each
    /// [`Move`] installs the share `from` wrote into the peer `to` of the same kind, which
    /// takes those rollouts over as their next attempts. `from` must have written to the
    /// checkpoint and must not be a peer; every other peer restores its own share (the
    /// gateway's calls of the moved rollouts). Retiring the saved attempts everywhere first
    /// fences the lost node's attempts out of the gateway and the store.
    #[tracing::instrument(name = "restore", skip_all, fields(restore = %id, checkpoint = %source, moves = moves.len()))]
    pub async fn restore_moved(
        &self,
        id: &str,
        source: &str,
        scope: &[AttemptKey],
        moves: &[Move],
    ) -> Result<Restored, CoordinatorError> {
        self.restore_or_fork(id, source, scope, None, moves).await
    }

    /// The attempt keys participant `kind`/`instance`'s share of published checkpoint
    /// `source` holds: what moves with that participant's node.
    pub async fn keys_of(
        &self,
        source: &str,
        kind: Kind,
        instance: &str,
    ) -> Result<Vec<AttemptKey>, CoordinatorError> {
        let bad = |e: StoreError| CoordinatorError::Store {
            checkpoint: source.to_owned(),
            source: e,
        };
        if let Some(remote) = &self.config.remote {
            store::remote::fetch_share(remote, &self.config.run_dir, source, kind, instance)
                .await
                .map_err(bad)?;
        }
        let (run_dir, id, inst) = (
            self.config.run_dir.clone(),
            source.to_owned(),
            instance.to_owned(),
        );
        let (_, records) = blocking(move || store::read(&run_dir, &id, kind, &inst, None))
            .await
            .map_err(bad)?;
        let mut keys: Vec<AttemptKey> = records
            .iter()
            .filter_map(|r| crate::participant::record_key(r).ok())
            .collect();
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Forks attempt `from` of published checkpoint `source` into the branches `to` (see
    /// [`ForkSpec`]) everywhere at once, as restore `id`: each participant installs `from`'s
    /// records once per branch. All or nothing, as [`Coordinator::restore`]; on success the
    /// caller dispatches the branches' next attempts, then resumes `id`.
    #[tracing::instrument(name = "fork", skip_all, fields(fork = %id, checkpoint = %source, from = %from, branches = to.len()))]
    pub async fn fork(
        &self,
        id: &str,
        source: &str,
        from: &AttemptKey,
        to: &[AttemptKey],
    ) -> Result<Restored, CoordinatorError> {
        let fork = ForkSpec {
            from: from.clone(),
            to: to.to_vec(),
        };
        fork.check().map_err(|e| CoordinatorError::Fork {
            checkpoint: source.to_owned(),
            source: e,
        })?;
        self.restore_or_fork(id, source, std::slice::from_ref(from), Some(fork), &[])
            .await
    }

    async fn restore_or_fork(
        &self,
        id: &str,
        source: &str,
        scope: &[AttemptKey],
        fork: Option<ForkSpec>,
        moves: &[Move],
    ) -> Result<Restored, CoordinatorError> {
        self.check_members(source, moves).await?;
        let timeout = self.config.timeout;
        let replies = join_all(self.peers.iter().map(|peer| {
            let from_instance = moves
                .iter()
                .find(|m| m.kind == peer.kind && m.to == peer.instance)
                .map(|m| m.from.clone());
            let req = RestoreRequest {
                from_instance,
                checkpoint: id.to_owned(),
                source: source.to_owned(),
                timeout_ms: self.timeout_ms(timeout),
                scope: scope.to_vec(),
                fork: fork.clone(),
            };
            Self::call(peer, "restore", timeout, peer.control.restore(req))
        }))
        .await;
        let mut restored = Vec::new();
        let mut failures = Vec::new();
        for (peer, reply) in self.peers.iter().zip(replies) {
            match reply {
                Ok(r) => restored.push((peer.kind, peer.instance.clone(), r.restored)),
                Err(e) => failures.push(e),
            }
        }
        if failures.is_empty() {
            return Ok(Restored { restored });
        }
        let next: BTreeSet<AttemptKey> = restored
            .iter()
            .flat_map(|(_, _, keys)| keys.iter().cloned())
            .collect();
        if !next.is_empty() {
            let keys: Vec<AttemptKey> = next.into_iter().collect();
            if let Err(e) = self
                .retire_within(&keys, timeout.max(CLEANUP_TIMEOUT))
                .await
            {
                failures.push(e);
            }
        }
        if let Err(e) = self.resume_within(id, timeout.max(CLEANUP_TIMEOUT)).await {
            failures.push(e);
        }
        Err(several("restore", id, failures))
    }

    /// Checks that checkpoint `source` is published and was written by
    /// exactly these participants, before anyone is disturbed.
    async fn check_members(&self, source: &str, moves: &[Move]) -> Result<(), CoordinatorError> {
        if let Some(remote) = &self.config.remote {
            store::remote::fetch_checkpoint(remote, &self.config.run_dir, source)
                .await
                .map_err(|e| CoordinatorError::Store {
                    checkpoint: source.to_owned(),
                    source: e,
                })?;
        }
        let run_dir = self.config.run_dir.clone();
        let id = source.to_owned();
        let doc = tokio::task::spawn_blocking(move || store::read_checkpoint(&run_dir, &id))
            .await
            .map_err(|e| CoordinatorError::Store {
                checkpoint: source.to_owned(),
                source: StoreError::Invalid {
                    path: self.config.run_dir.clone(),
                    message: format!("read task failed: {e}"),
                },
            })?
            .map_err(|e| CoordinatorError::Store {
                checkpoint: source.to_owned(),
                source: e,
            })?;
        let written: BTreeSet<(Kind, &str)> = doc
            .participants
            .iter()
            .map(|m| (m.kind, m.instance.as_str()))
            .collect();
        let here: BTreeSet<(Kind, &str)> = self
            .peers
            .iter()
            .map(|p| (p.kind, p.instance.as_str()))
            .collect();
        let moved_from: BTreeSet<(Kind, &str)> =
            moves.iter().map(|m| (m.kind, m.from.as_str())).collect();
        let moved_to: BTreeSet<(Kind, &str)> =
            moves.iter().map(|m| (m.kind, m.to.as_str())).collect();
        let bad_move = |message: String| CoordinatorError::Store {
            checkpoint: source.to_owned(),
            source: StoreError::Invalid {
                path: store::checkpoint_dir(&self.config.run_dir, source),
                message,
            },
        };
        for m in moves {
            let (from, to) = ((m.kind, m.from.as_str()), (m.kind, m.to.as_str()));
            if !written.contains(&from) {
                return Err(bad_move(format!(
                    "move {}/{}: it wrote nothing to this checkpoint",
                    m.kind, m.from
                )));
            }
            if here.contains(&from) {
                return Err(bad_move(format!(
                    "move {}/{}: it is still a participant here",
                    m.kind, m.from
                )));
            }
            if !here.contains(&to) {
                return Err(bad_move(format!(
                    "move to {}/{}: no such participant here",
                    m.kind, m.to
                )));
            }
        }
        if moved_to.len() != moves.len() {
            return Err(bad_move(
                "a participant may take over one lost participant's share per restore".to_owned(),
            ));
        }
        let covered: BTreeSet<(Kind, &str)> = here.union(&moved_from).copied().collect();
        let served: BTreeSet<(Kind, &str)> = written.union(&moved_to).copied().collect();
        if written.is_subset(&covered) && here.is_subset(&served) {
            return Ok(());
        }
        let name = |set: BTreeSet<&(Kind, &str)>| {
            set.into_iter()
                .map(|(k, i)| format!("{k}/{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Err(CoordinatorError::Members {
            checkpoint: source.to_owned(),
            missing: name(written.difference(&covered).collect()),
            extra: name(here.difference(&served).collect()),
        })
    }

    /// Retires attempt `keys` everywhere: callers (agents) before callees
    /// (model and resources).
    pub async fn retire(&self, keys: &[AttemptKey]) -> Result<(), CoordinatorError> {
        self.retire_within(keys, self.config.timeout).await
    }

    async fn retire_within(
        &self,
        keys: &[AttemptKey],
        timeout: Duration,
    ) -> Result<(), CoordinatorError> {
        self.keys_call(keys, timeout, KeysVerb::Retire).await
    }

    /// Forgets the rollouts of `keys` everywhere, callers first.
    pub async fn forget(&self, keys: &[AttemptKey]) -> Result<(), CoordinatorError> {
        self.keys_call(keys, self.config.timeout, KeysVerb::Forget)
            .await
    }

    async fn keys_call(
        &self,
        keys: &[AttemptKey],
        timeout: Duration,
        verb: KeysVerb,
    ) -> Result<(), CoordinatorError> {
        let callers = self.peers.iter().filter(|p| p.kind == Kind::Agent);
        let callees = self.peers.iter().filter(|p| p.kind != Kind::Agent);
        let mut failures = Vec::new();
        for group in [callers.collect::<Vec<_>>(), callees.collect()] {
            let replies = join_all(group.iter().map(|peer| {
                let req = KeysRequest {
                    keys: keys.to_vec(),
                    timeout_ms: self.timeout_ms(timeout),
                };
                let fut = match verb {
                    KeysVerb::Retire => peer.control.retire(req),
                    KeysVerb::Forget => peer.control.forget(req),
                };
                Self::call(peer, verb.as_str(), timeout, fut)
            }))
            .await;
            failures.extend(replies.into_iter().filter_map(Result::err));
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(several(
                verb.as_str(),
                &format!("{} keys", keys.len()),
                failures,
            ))
        }
    }
}

fn several(
    action: &'static str,
    id: &str,
    mut failures: Vec<CoordinatorError>,
) -> CoordinatorError {
    if failures.len() == 1
        && let Some(only) = failures.pop()
    {
        return only;
    }
    CoordinatorError::Several {
        action,
        checkpoint: id.to_owned(),
        failures,
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::Invalid {
            path: PathBuf::new(),
            message: format!("file task failed: {e}"),
        })?
}
