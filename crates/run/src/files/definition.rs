//! The run's definition in the checkpoint store, published with every checkpoint, so a machine
//! that has nothing continues the run from the store alone (`rollpoint resume --from`):
//!
//! ```text
//! run/tasks-<sha256>.jsonl                       the tasks file, put-if-absent
//! checkpoints/<id>/run/results-<sha256>.jsonl    results.jsonl as it stood, put-if-absent
//! checkpoints/<id>/run/definition.json           run.json and the two files' keys and digests
//! ```
//!
//! It is uploaded before the checkpoint is prepared, so the publish marker, made last,
//! implies it; a checkpoint that fails leaves it to the store's prune with the rest of its
//! objects. The results it carries are those written before the checkpoint: a rollout that
//! finishes during the checkpoint is not among them, and after a move it runs again from the
//! checkpoint (its row here was never published).

use std::path::{Path, PathBuf};

use bytes::Bytes;
use rollpoint_checkpoint::StoreError;
use rollpoint_checkpoint::store::remote::markers;
use rollpoint_remote::{RemoteStore, sha256_hex};
use serde::{Deserialize, Serialize};

use crate::errors::RunError;
use crate::files::results::RESULTS_FILE;
use crate::files::state::{RunState, write_atomic};

/// Version of [`Definition`].
pub const DEFINITION_VERSION: u32 = 1;
/// The tasks file's name in a run directory made from the store.
pub const TASKS_FILE: &str = "tasks.jsonl";

/// `checkpoints/<id>/run/definition.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Definition {
    pub v: u32,
    pub checkpoint: String,
    /// `run.json` when the checkpoint began.
    pub state: RunState,
    pub tasks_key: String,
    pub results_key: String,
    pub results_sha256: String,
    pub results_bytes: u64,
}

fn definition_key(checkpoint: &str) -> String {
    format!("checkpoints/{checkpoint}/run/definition.json")
}

fn store_error(store: &RemoteStore, key: &str, e: impl std::fmt::Display) -> RunError {
    RunError::state(
        PathBuf::from(format!("{}/{key}", store.url())),
        e.to_string(),
    )
}

/// Uploads the definition of checkpoint `checkpoint` (the tasks file once, the results as
/// they stand, then the document).
pub async fn publish(
    store: &RemoteStore,
    run_dir: &Path,
    state: &RunState,
    checkpoint: &str,
) -> Result<(), StoreError> {
    let invalid = |path: PathBuf, message: String| StoreError::Invalid {
        path,
        source: message.into(),
    };
    let (tasks_path, results_path) = (state.tasks_path.clone(), run_dir.join(RESULTS_FILE));
    let read_both = move || -> Result<_, StoreError> {
        let read = |path: &Path| match std::fs::read(path) {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(StoreError::Io {
                path: path.to_owned(),
                source,
            }),
        };
        Ok((read(&tasks_path)?, read(&results_path)?))
    };
    let (tasks, results) = tokio::task::spawn_blocking(read_both)
        .await
        .map_err(|e| invalid(run_dir.to_owned(), e.to_string()))??;
    let tasks_sha = sha256_hex(&tasks);
    if tasks_sha != state.tasks_sha256 {
        return Err(invalid(
            state.tasks_path.clone(),
            format!(
                "the tasks file changed since the run started (sha256 {tasks_sha}, was {})",
                state.tasks_sha256
            ),
        ));
    }
    let tasks_key = format!("run/tasks-{tasks_sha}.jsonl");
    let results_sha = sha256_hex(&results);
    let results_key = format!("checkpoints/{checkpoint}/run/results-{results_sha}.jsonl");
    let definition = Definition {
        v: DEFINITION_VERSION,
        checkpoint: checkpoint.to_owned(),
        state: state.clone(),
        tasks_key: tasks_key.clone(),
        results_key: results_key.clone(),
        results_sha256: results_sha,
        results_bytes: results.len() as u64,
    };
    let key = definition_key(checkpoint);
    let doc = serde_json::to_vec_pretty(&definition)
        .map_err(|e| invalid(PathBuf::from(&key), e.to_string()))?;
    for (key, bytes) in [(tasks_key, tasks), (results_key, results), (key, doc)] {
        store.put_new(&key, Bytes::from(bytes)).await?;
    }
    Ok(())
}

/// The definition of the newest published checkpoint that carries one.
pub async fn newest(store: &RemoteStore) -> Result<Definition, RunError> {
    let (found, bad) = markers(store)
        .await
        .map_err(|e| store_error(store, "publish", e))?;
    for e in &bad {
        tracing::warn!(store = %store.url(), problem = %e, "a publish marker cannot be read; passed over");
    }
    for marker in &found {
        let key = definition_key(&marker.checkpoint);
        let Some(bytes) = store
            .get(&key)
            .await
            .map_err(|e| store_error(store, &key, e))?
        else {
            tracing::warn!(store = %store.url(), checkpoint = %marker.checkpoint, "published checkpoint carries no run definition; passed over");
            continue;
        };
        let def: Definition = rollpoint_proto::decode("run definition", DEFINITION_VERSION, &bytes)
            .map_err(|e| store_error(store, &key, e))?;
        if def.checkpoint != marker.checkpoint {
            return Err(store_error(
                store,
                &key,
                format!(
                    "names checkpoint {}, stored under {}",
                    def.checkpoint, marker.checkpoint
                ),
            ));
        }
        return Ok(def);
    }
    Err(RunError::state(
        PathBuf::from(store.url().to_string()),
        format!(
            "no published checkpoint carries a run definition ({} published); only a run \
             started by `rollpoint run` with this checkpoint_store can be resumed from it",
            found.len()
        ),
    ))
}

/// Fetches object `key` and checks its digest.
async fn fetch(store: &RemoteStore, key: &str, sha256: &str) -> Result<Vec<u8>, RunError> {
    let bytes = store
        .get(key)
        .await
        .map_err(|e| store_error(store, key, e))?
        .ok_or_else(|| store_error(store, key, "named by the run definition but missing"))?;
    let found = sha256_hex(&bytes);
    if found != sha256 {
        return Err(store_error(
            store,
            key,
            format!("sha256 is {found}, the run definition says {sha256}"),
        ));
    }
    Ok(bytes.to_vec())
}

/// Writes `definition` into the empty run directory `run_dir`: the tasks file, the results and
/// `run.json`, whose tasks path and checkpoint store now name this machine's.
pub async fn install(
    store: &RemoteStore,
    definition: &Definition,
    run_dir: &Path,
    options: Option<PathBuf>,
) -> Result<RunState, RunError> {
    let tasks = fetch(store, &definition.tasks_key, &definition.state.tasks_sha256).await?;
    let results = fetch(store, &definition.results_key, &definition.results_sha256).await?;
    let mut state = definition.state.clone();
    state.tasks_path = run_dir.join(TASKS_FILE);
    state.config.checkpoint_store = Some(store.url().to_string());
    state.config.checkpoint_store_options = options;
    state.config.validate(&RunState::path(run_dir))?;
    write_atomic(&state.tasks_path, &tasks)?;
    if !results.is_empty() {
        write_atomic(&run_dir.join(RESULTS_FILE), &results)?;
    }
    state.save(run_dir)?;
    Ok(state)
}
