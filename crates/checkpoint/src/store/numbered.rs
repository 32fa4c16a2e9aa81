//! Numbered objects in a store: `<prefix>/<seq, 20 digits>.json`, made put-if-absent so one
//! writer wins each number, and each naming its own number inside. Publish markers and run
//! claims are both this.

use bytes::Bytes;
use rollpoint_remote::RemoteStore;
use serde::de::DeserializeOwned;

use super::versioned;
use crate::errors::StoreError;

/// Object `seq` under `prefix`.
pub(super) fn key(prefix: &str, seq: u64) -> String {
    format!("{prefix}/{seq:020}.json")
}

/// How errors name object `key` of `store`.
pub(super) fn path(store: &RemoteStore, key: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("{}/{key}", store.url()))
}

/// The numbers of every object under `prefix`, newest first.
pub(super) async fn seqs(store: &RemoteStore, prefix: &str) -> Result<Vec<u64>, StoreError> {
    let keys = store.list(prefix).await?;
    let mut seqs: Vec<u64> = keys
        .iter()
        .filter_map(|k| k.strip_prefix(prefix)?.strip_prefix('/'))
        .filter_map(|name| name.strip_suffix(".json")?.parse().ok())
        .collect();
    seqs.sort_unstable_by(|a, b| b.cmp(a));
    Ok(seqs)
}

/// Reads object `seq` under `prefix` as a `T` of `version`, whose own number (`seq_of`) must
/// be `seq`.
pub(super) async fn read<T: DeserializeOwned>(
    store: &RemoteStore,
    prefix: &str,
    seq: u64,
    version: u32,
    seq_of: impl Fn(&T) -> u64,
) -> Result<T, StoreError> {
    let key = key(prefix, seq);
    let path = path(store, &key);
    let bytes: Bytes = store
        .get(&key)
        .await?
        .ok_or_else(|| StoreError::invalid(path.clone(), "listed but gone"))?;
    let doc: T = versioned::decode(&path, &bytes, version)?;
    if seq_of(&doc) != seq {
        return Err(StoreError::Mismatch {
            path,
            field: "seq",
            expected: seq.to_string(),
            found: seq_of(&doc).to_string(),
        });
    }
    Ok(doc)
}
