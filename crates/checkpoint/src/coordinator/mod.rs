//! The coordinator: the controller's side of the protocol over a set of
//! participants, in process or over HTTP alike (`Arc<dyn ParticipantApi>`).
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
//!
//! One file per verb, named as the participant's side names it in `host/`
//! and `http/`; this file holds the coordinator, its peers and the call
//! every verb makes.

mod checkpoint;
mod commit;
mod fleet;
mod forget;
mod fork;
mod prepare;
mod publish;
mod restore;
mod resume;
mod retire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::api::{CallResult, ParticipantApi};
use crate::client::CALL_MARGIN;
use crate::errors::{CallError, Code, CoordinatorError, StoreError};
use crate::participant::{AttemptKey, Kind};
use crate::store::{self, DEFAULT_KEEP};
use crate::wire::{KeysRequest, KeysVerb};
use rollpoint_remote::RemoteStore;

pub use checkpoint::{Checkpointed, Plan, Timings};
pub use prepare::Prepared;
pub use restore::{Move, Restored};

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
    pub control: Arc<dyn ParticipantApi>,
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
        controls: Vec<Arc<dyn ParticipantApi>>,
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
        fut: impl Future<Output = CallResult<T>>,
    ) -> Result<T, CoordinatorError> {
        let result = match tokio::time::timeout(timeout + CALL_MARGIN, fut).await {
            Ok(r) => r,
            Err(_) => Err(CallError::new(
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

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::invalid(PathBuf::new(), format!("file task failed: {e}")))?
}
