//! `rollpoint resume --from STORE_URL --run-dir NEW_DIR`: continues a run on a machine that
//! has nothing of it. The run's definition published with its newest checkpoint
//! ([`crate::definition`]) becomes a new run directory, the run's claim is taken over once
//! its holder is gone ([`crate::lease`]), and the resume goes on as on the old machine: the
//! checkpoints and the sandbox snapshots come down from the store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rollpoint_remote::RemoteStore;

use crate::controller::{Ending, Inputs};
use crate::definition;
use crate::errors::RunError;
use crate::lease::{self, Acquire};

/// Opens the store `url` names with the options file `options` (made absolute, so the run
/// finds it again from anywhere).
fn open_store(
    url: &str,
    options: Option<&Path>,
) -> Result<(RemoteStore, Option<PathBuf>), RunError> {
    let options = options
        .map(|p| std::path::absolute(p).map_err(|e| RunError::io(p, e)))
        .transpose()?;
    let store = RemoteStore::named(Some(url), options.as_deref())
        .map_err(|e| RunError::setup("checkpoint store", e))?
        .ok_or_else(|| RunError::setup("checkpoint store", "no store URL given"))?;
    Ok((store, options))
}

/// Whether `store` holds a run to continue: a checkpoint of it was published. (A run claimed
/// but never checkpointed starts again: `rollpoint run` takes it over.)
pub async fn holds_run(store: &RemoteStore) -> Result<bool, RunError> {
    lease::published_any(store).await
}

/// `rollpoint resume --from`: makes `run_dir` (absent or empty) from the store's newest
/// published run definition, takes the run over, and resumes it.
pub async fn resume_from(
    url: &str,
    options: Option<&Path>,
    run_dir: &Path,
    supervisor: Option<PathBuf>,
    env: BTreeMap<String, String>,
    inputs: Inputs,
) -> Result<Ending, RunError> {
    match std::fs::read_dir(run_dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(RunError::state(
                    run_dir.to_owned(),
                    "not empty: `resume --from` makes a new run directory (continue a run \
                     directory of this machine with `rollpoint resume RUN_DIR`)",
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::controller::create_dir(run_dir)?;
        }
        Err(e) => return Err(RunError::io(run_dir, e)),
    }
    let run_dir = std::fs::canonicalize(run_dir).map_err(|e| RunError::io(run_dir, e))?;
    let (store, options) = open_store(url, options)?;
    // The lease the run was started with; the definition is read again once the run is ours,
    // since its holder may have published a newer one while it was let go.
    let seen = definition::newest(&store).await?;
    let lease = Duration::from_secs(seen.state.config.store_lease_s);
    lease::acquire(&store, &run_dir, Acquire::TakeOver, lease).await?;
    let def = definition::newest(&store).await?;
    definition::install(&store, &def, &run_dir, options).await?;
    tracing::info!(
        store = %store.url(),
        checkpoint = %def.checkpoint,
        run_dir = %run_dir.display(),
        results = def.results_bytes,
        "the run's definition came from the store"
    );
    crate::resume::resume(&run_dir, None, supervisor, env, inputs).await
}
