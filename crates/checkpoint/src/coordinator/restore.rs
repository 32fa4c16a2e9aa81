//! Restore: every participant installs its share of a published checkpoint
//! at once, all or nothing (on a failure the new attempts are retired
//! everywhere and everyone is resumed); a lost node's share moves to a live
//! participant of its kind.

use std::collections::BTreeSet;

use futures_util::future::join_all;

use super::{CLEANUP_TIMEOUT, Coordinator, blocking, several};
use crate::errors::{CoordinatorError, MoveField, StoreError};
use crate::participant::{AttemptKey, Kind};
use crate::store;
use crate::store::CheckpointDoc;
use crate::wire::{ForkSpec, RestoreRequest};

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

impl Coordinator {
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

    /// Checks `moves` against published checkpoint `doc` and the participants here, touching
    /// nothing: each `from` must have written to it and be gone, each `to` must be here and
    /// take over one share. The error names the move and its field.
    pub fn check_moves(&self, doc: &CheckpointDoc, moves: &[Move]) -> Result<(), CoordinatorError> {
        let written: BTreeSet<(Kind, &str)> = doc
            .participants
            .iter()
            .map(|m| (m.kind, m.instance.as_str()))
            .collect();
        match move_fault(&written, &self.members(), moves) {
            Some(fault) => Err(fault.into_error(&doc.id)),
            None => Ok(()),
        }
    }

    /// The participants here, as `(kind, instance)`.
    fn members(&self) -> BTreeSet<(Kind, &str)> {
        self.peers
            .iter()
            .map(|p| (p.kind, p.instance.as_str()))
            .collect()
    }

    pub(super) async fn restore_or_fork(
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
                source: StoreError::invalid(
                    self.config.run_dir.clone(),
                    format!("read task failed: {e}"),
                ),
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
        let here = self.members();
        let moved_from: BTreeSet<(Kind, &str)> =
            moves.iter().map(|m| (m.kind, m.from.as_str())).collect();
        let moved_to: BTreeSet<(Kind, &str)> =
            moves.iter().map(|m| (m.kind, m.to.as_str())).collect();
        if let Some(fault) = move_fault(&written, &here, moves) {
            return Err(fault.into_error(source));
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
}

/// The first move that cannot be carried out, and why.
struct MoveFault {
    index: usize,
    field: MoveField,
    message: String,
}

impl MoveFault {
    fn into_error(self, checkpoint: &str) -> CoordinatorError {
        CoordinatorError::BadMove {
            checkpoint: checkpoint.to_owned(),
            index: self.index,
            field: self.field,
            message: self.message,
        }
    }
}

/// The first of `moves` that names a participant that did not write to the checkpoint
/// (`written`), one still `here`, one not here to take over, or a taker twice.
fn move_fault(
    written: &BTreeSet<(Kind, &str)>,
    here: &BTreeSet<(Kind, &str)>,
    moves: &[Move],
) -> Option<MoveFault> {
    let mut takers = BTreeSet::new();
    for (index, m) in moves.iter().enumerate() {
        let (from, to) = ((m.kind, m.from.as_str()), (m.kind, m.to.as_str()));
        let fault = |field, message| {
            Some(MoveFault {
                index,
                field,
                message,
            })
        };
        if !written.contains(&from) {
            return fault(
                MoveField::From,
                format!(
                    "move {}/{}: it wrote nothing to this checkpoint",
                    m.kind, m.from
                ),
            );
        }
        if here.contains(&from) {
            return fault(
                MoveField::From,
                format!("move {}/{}: it is still a participant here", m.kind, m.from),
            );
        }
        if !here.contains(&to) {
            return fault(
                MoveField::To,
                format!("move to {}/{}: no such participant here", m.kind, m.to),
            );
        }
        if !takers.insert(to) {
            return fault(
                MoveField::To,
                "a participant may take over one lost participant's share per restore".to_owned(),
            );
        }
    }
    None
}
