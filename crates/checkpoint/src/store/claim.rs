//! Who drives a run whose checkpoints live in an object store: claims and heartbeats.
//!
//! ```text
//! claims/<seq, 20 digits>.json    put-if-absent: the seq-th process to drive the run
//! alive/<seq, 20 digits>.json     replaced by claim seq's holder while it drives, last with
//!                                 `released` when it stops
//! ```
//!
//! Publish markers already fence a coordinator that missed a rival's publish, but only at its
//! next publish, and they cannot tell a dead driver from a live one. A claim can: the newest
//! claim names the one process that may drive the run; a process whose claim is no longer the
//! newest stops (it is fenced). A new process takes over only once the newest claim's holder
//! released it or has been silent for a whole lease: its heartbeat object did not change while
//! the taker watched it. Watching for change, not comparing clocks, keeps machines with skewed
//! clocks from taking over from a live holder.

use std::time::Duration;

use bytes::Bytes;
use rollpoint_remote::{Created, RemoteStore};
use serde::{Deserialize, Serialize};

use super::{numbered, versioned};
use crate::errors::StoreError;

/// The claim and heartbeat format this build writes and reads.
pub const CLAIM_VERSION: u32 = 1;
const CLAIM_PREFIX: &str = "claims";
const ALIVE_PREFIX: &str = "alive";

/// `claims/<seq>.json`: `holder` drives the run from its `seq`-th claim on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub version: u32,
    pub seq: u64,
    /// Who holds it: host, process and start time, unique per process.
    pub holder: String,
    pub created_unix_ms: u64,
}

/// `alive/<seq>.json`: claim `seq`'s holder was alive at `beat` (a counter, so a reader sees
/// change without comparing clocks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub version: u32,
    pub seq: u64,
    pub holder: String,
    pub beat: u64,
    pub unix_ms: u64,
    /// The holder stopped and gave the run up: another may take it at once.
    pub released: bool,
}

fn claim_key(seq: u64) -> String {
    numbered::key(CLAIM_PREFIX, seq)
}

fn alive_key(seq: u64) -> String {
    numbered::key(ALIVE_PREFIX, seq)
}

/// The newest claim, if the run was ever claimed.
pub async fn newest(store: &RemoteStore) -> Result<Option<Claim>, StoreError> {
    let Some(&seq) = numbered::seqs(store, CLAIM_PREFIX).await?.first() else {
        return Ok(None);
    };
    numbered::read(store, CLAIM_PREFIX, seq, CLAIM_VERSION, |c: &Claim| c.seq)
        .await
        .map(Some)
}

/// Claim `seq`'s last heartbeat, if its holder wrote one.
pub async fn heartbeat(store: &RemoteStore, seq: u64) -> Result<Option<Heartbeat>, StoreError> {
    let key = alive_key(seq);
    let Some(bytes) = store.get(&key).await? else {
        return Ok(None);
    };
    versioned::decode(&numbered::path(store, &key), &bytes, CLAIM_VERSION).map(Some)
}

/// Makes claim `after + 1` for `holder`, put-if-absent. Another process that made that claim
/// first wins, and this one gets [`StoreError::Claimed`].
pub async fn take(
    store: &RemoteStore,
    holder: &str,
    after: Option<u64>,
    now_unix_ms: u64,
) -> Result<Claim, StoreError> {
    let seq = after.map_or(1, |s| s.saturating_add(1));
    let claim = Claim {
        version: CLAIM_VERSION,
        seq,
        holder: holder.to_owned(),
        created_unix_ms: now_unix_ms,
    };
    let key = claim_key(seq);
    let bytes = serde_json::to_vec_pretty(&claim).map_err(|e| StoreError::json(&key, e))?;
    match store.put_new(&key, Bytes::from(bytes)).await? {
        Created::New => Ok(claim),
        Created::Existed => {
            let other = newest(store).await?.map_or_else(
                || "(unreadable)".to_owned(),
                |c| format!("{} (claim {})", c.holder, c.seq),
            );
            Err(StoreError::Claimed {
                url: store.url().to_string(),
                holder: other,
                why: format!("claim {seq} was made by another process first"),
            })
        }
    }
}

/// Writes claim `claim`'s heartbeat number `beat`.
pub async fn beat(
    store: &RemoteStore,
    claim: &Claim,
    beat: u64,
    released: bool,
    now_unix_ms: u64,
) -> Result<(), StoreError> {
    let doc = Heartbeat {
        version: CLAIM_VERSION,
        seq: claim.seq,
        holder: claim.holder.clone(),
        beat,
        unix_ms: now_unix_ms,
        released,
    };
    let key = alive_key(claim.seq);
    let bytes = serde_json::to_vec_pretty(&doc).map_err(|e| StoreError::json(&key, e))?;
    store.put(&key, Bytes::from(bytes)).await?;
    Ok(())
}

/// How a taker found the newest claim's holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// Nobody ever claimed the run.
    None,
    /// It released the run, or its heartbeat stood still for a whole lease.
    Gone(Claim),
}

/// Waits until the newest claim's holder has released the run or stayed silent for `lease`,
/// looking every `poll`. A heartbeat that moves, or a newer claim made meanwhile, means
/// another process drives the run: [`StoreError::Claimed`].
pub async fn wait_gone(
    store: &RemoteStore,
    lease: Duration,
    poll: Duration,
) -> Result<Holder, StoreError> {
    let Some(claim) = newest(store).await? else {
        return Ok(Holder::None);
    };
    let first = heartbeat(store, claim.seq).await?;
    if first.as_ref().is_some_and(|h| h.released) {
        return Ok(Holder::Gone(claim));
    }
    tracing::info!(
        store = %store.url(),
        holder = %claim.holder,
        claim = claim.seq,
        lease_s = lease.as_secs_f64(),
        "the run's holder has not released it; taking over once its heartbeat has been still for a lease"
    );
    let start = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(poll.min(lease)).await;
        let now = newest(store).await?;
        if now.as_ref().map(|c| c.seq) != Some(claim.seq) {
            let other = now.map_or_else(String::new, |c| format!("{} (claim {})", c.holder, c.seq));
            return Err(StoreError::Claimed {
                url: store.url().to_string(),
                holder: other,
                why: "another process claimed the run while this one waited".to_owned(),
            });
        }
        let seen = heartbeat(store, claim.seq).await?;
        if seen.as_ref().is_some_and(|h| h.released) {
            return Ok(Holder::Gone(claim));
        }
        if seen.as_ref().map(|h| h.beat) != first.as_ref().map(|h| h.beat) {
            return Err(StoreError::Claimed {
                url: store.url().to_string(),
                holder: format!("{} (claim {})", claim.holder, claim.seq),
                why: "it is alive: its heartbeat moved while this process watched".to_owned(),
            });
        }
        if start.elapsed() >= lease {
            return Ok(Holder::Gone(claim));
        }
    }
}
