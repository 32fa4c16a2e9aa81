//! A run's claim on its checkpoint store (`rollpoint_checkpoint::store::claim`): taken before
//! the process drives a run that has a store, kept alive by a heartbeat while it does, and
//! released when it stops. A process whose claim stops being the newest (another machine took
//! the run over) is told so by its heartbeat and stops at once: it is fenced.
//!
//! `RUN_DIR/claim.json` remembers the claim this run directory last held, so its own resume
//! after a crash takes the run back at once (the run lock proves the crashed process gone),
//! while a directory whose claim was taken over is refused.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rollpoint_checkpoint::StoreError;
use rollpoint_checkpoint::store::claim::{self, Claim, Holder};
use rollpoint_proto::clock::unix_ms;
use rollpoint_remote::RemoteStore;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::config::RunConfig;
use crate::errors::RunError;
use crate::files::state::write_atomic;
use crate::run_loop::signal::Signal;

/// Version of [`LocalClaim`].
pub const LOCAL_CLAIM_VERSION: u32 = 1;
/// `RUN_DIR/claim.json`.
pub const CLAIM_FILE: &str = "claim.json";

/// `RUN_DIR/claim.json`: the claim this run directory last held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalClaim {
    pub v: u32,
    pub store: String,
    pub seq: u64,
    pub holder: String,
}

/// How the process comes to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// `rollpoint run`: the store must hold no run yet.
    Start,
    /// `rollpoint resume RUN_DIR`: this directory's own claim must be the newest.
    Resume,
    /// `rollpoint resume --from`: take the run over once its holder is gone.
    TakeOver,
}

/// A store error met while taking or keeping the claim, naming the store.
fn claim_error(store: &RemoteStore, e: StoreError) -> RunError {
    RunError::setup("checkpoint store claim", format!("{}: {e}", store.url()))
}

/// This process, as claims name it: host, pid and start time.
fn holder_id() -> &'static str {
    static HOLDER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOLDER.get_or_init(|| {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "unknown-host".to_owned());
        format!("{host}:{}:{}", std::process::id(), unix_ms())
    })
}

fn read_local(run_dir: &Path) -> Result<Option<LocalClaim>, RunError> {
    let path = run_dir.join(CLAIM_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => rollpoint_proto::decode("run claim", LOCAL_CLAIM_VERSION, &bytes)
            .map(Some)
            .map_err(|e| RunError::state(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RunError::io(&path, e)),
    }
}

/// Whether any checkpoint of the run was published in `store`.
pub async fn published_any(store: &RemoteStore) -> Result<bool, RunError> {
    rollpoint_checkpoint::store::remote::head(store)
        .await
        .map(|head| head.is_some())
        .map_err(|e| claim_error(store, e))
}

/// Waits until the newest claim's holder is gone; the claim to count on from.
async fn take_over(store: &RemoteStore, lease: Duration) -> Result<Option<u64>, RunError> {
    let poll = (lease / 10).clamp(Duration::from_millis(200), Duration::from_secs(5));
    match claim::wait_gone(store, lease, poll)
        .await
        .map_err(|e| claim_error(store, e))?
    {
        Holder::None => Ok(None),
        Holder::Gone(c) => {
            tracing::info!(store = %store.url(), holder = %c.holder, claim = c.seq, "taking the run over");
            Ok(Some(c.seq))
        }
    }
}

/// Takes the run's claim on `store` for this process, as `how` allows, and records it in
/// `RUN_DIR/claim.json`.
pub async fn acquire(
    store: &RemoteStore,
    run_dir: &Path,
    how: Acquire,
    lease: Duration,
) -> Result<Claim, RunError> {
    let url = store.url().to_string();
    let newest = claim::newest(store)
        .await
        .map_err(|e| claim_error(store, e))?;
    let after = match (how, &newest) {
        (_, None) => None,
        // A run that never published a checkpoint has nothing to continue: once its holder is
        // gone (a start that crashed, a job preempted before its first checkpoint), it starts
        // again in the same store.
        (Acquire::Start, Some(_)) if !published_any(store).await? => {
            take_over(store, lease).await?
        }
        (Acquire::Start, Some(c)) => {
            return Err(RunError::setup(
                "checkpoint store claim",
                format!(
                    "{url} already holds a run (claim {} by {}): continue it with `rollpoint \
                     resume --from {url} --run-dir DIR` (or `rollpoint run --or-resume`), or \
                     give this run a store prefix of its own",
                    c.seq, c.holder
                ),
            ));
        }
        (Acquire::Resume, Some(c)) => {
            let local = read_local(run_dir)?;
            match local {
                // Taken by this process a moment ago (`resume --from`).
                Some(l) if l.store == url && l.seq == c.seq && c.holder == holder_id() => {
                    return Ok(c.clone());
                }
                Some(l) if l.store == url && l.seq == c.seq && l.holder == c.holder => Some(c.seq),
                Some(l) => {
                    return Err(RunError::setup(
                        "checkpoint store claim",
                        format!(
                            "{url}: this run directory held claim {} but the run was taken over \
                             by {} (claim {}), so this directory may not drive it (fenced); \
                             continue from the store in a new directory with `rollpoint resume \
                             --from {url} --run-dir NEW_DIR`",
                            l.seq, c.holder, c.seq
                        ),
                    ));
                }
                None => {
                    return Err(RunError::setup(
                        "checkpoint store claim",
                        format!(
                            "{url} is held by {} (claim {}) and {} never held it; continue from \
                             the store in a new directory with `rollpoint resume --from {url} \
                             --run-dir NEW_DIR`",
                            c.holder,
                            c.seq,
                            run_dir.display()
                        ),
                    ));
                }
            }
        }
        (Acquire::TakeOver, Some(_)) => take_over(store, lease).await?,
    };
    let mine = claim::take(store, holder_id(), after, unix_ms())
        .await
        .map_err(|e| claim_error(store, e))?;
    claim::beat(store, &mine, 0, false, unix_ms())
        .await
        .map_err(|e| claim_error(store, e))?;
    if after.is_some() {
        // A holder that was only silent (a partition, a frozen machine) may still be about to
        // publish: moving the publish markers past its count fences it at once, before its
        // heartbeat tells it to stop.
        let marker = rollpoint_checkpoint::store::remote::fence(store, unix_ms())
            .await
            .map_err(|e| claim_error(store, e))?;
        tracing::info!(store = %url, marker = ?marker, "publish markers moved past the old holder's");
    }
    let local = LocalClaim {
        v: LOCAL_CLAIM_VERSION,
        store: url,
        seq: mine.seq,
        holder: mine.holder.clone(),
    };
    let path = run_dir.join(CLAIM_FILE);
    let bytes = serde_json::to_vec_pretty(&local).map_err(|e| RunError::state(path.clone(), e))?;
    write_atomic(&path, &bytes)?;
    tracing::info!(store = %local.store, claim = mine.seq, holder = %mine.holder, "holding the run's claim");
    Ok(mine)
}

/// With a checkpoint store in `config`: the run's claim taken as `how` allows and its heartbeat
/// started, telling the loop through `loop_tx` if it is fenced.
pub async fn hold(
    config: &RunConfig,
    run_dir: &Path,
    how: Acquire,
    loop_tx: &mpsc::UnboundedSender<Signal>,
) -> Result<Option<Keeper>, RunError> {
    let Some(store) = config.open_checkpoint_store()? else {
        return Ok(None);
    };
    let lease = Duration::from_secs(config.store_lease_s);
    let claim = acquire(&store, run_dir, how, lease).await?;
    Ok(Some(keep(store, claim, lease, loop_tx.clone())))
}

/// The heartbeat of a claim this process holds. Dropping it stops the heartbeat without
/// releasing the claim (a crash looks the same to the store).
#[derive(Debug)]
pub struct Keeper {
    store: RemoteStore,
    claim: Claim,
    beats: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Beats claim `claim` every third of `lease` until dropped or released. When a newer claim
/// appears, the loop is told ([`Signal::Fenced`]) and the heartbeat stops.
pub fn keep(
    store: RemoteStore,
    claim: Claim,
    lease: Duration,
    loop_tx: mpsc::UnboundedSender<Signal>,
) -> Keeper {
    let beats = Arc::new(AtomicU64::new(1));
    let period = (lease / 3).max(Duration::from_millis(100));
    let task = {
        let (store, claim, beats) = (store.clone(), claim.clone(), Arc::clone(&beats));
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                match claim::newest(&store).await {
                    Ok(Some(newest)) if newest.seq > claim.seq => {
                        let why = format!(
                            "{}: the run was taken over by {} (claim {}, this process held {})",
                            store.url(),
                            newest.holder,
                            newest.seq,
                            claim.seq
                        );
                        let _loop_gone = loop_tx.send(Signal::Fenced(why));
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(store = %store.url(), error = %e, "the run's claim cannot be read; the heartbeat goes on");
                    }
                }
                let n = beats.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = claim::beat(&store, &claim, n, false, unix_ms()).await {
                    tracing::warn!(store = %store.url(), error = %e, "the run's heartbeat was not written");
                }
            }
        })
    };
    Keeper {
        store,
        claim,
        beats,
        task,
    }
}

impl Keeper {
    /// Stops the heartbeat and gives the run up, so another process takes it at once.
    pub async fn release(self) {
        self.task.abort();
        let n = self.beats.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = claim::beat(&self.store, &self.claim, n, true, unix_ms()).await {
            tracing::warn!(store = %self.store.url(), error = %e, "the run's claim was not released; a takeover waits for its lease");
        }
    }
}
