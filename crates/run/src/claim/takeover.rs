//! Taking a run over from its checkpoint store (`rollpoint resume --from`): the run's claim
//! is taken once its holder is gone ([`super::lease`]), and the run's definition published with
//! its newest checkpoint ([`crate::files::definition`]) becomes the new run directory's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rollpoint_remote::RemoteStore;

use super::lease::{self, Acquire};
use crate::errors::RunError;
use crate::files::definition;

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

/// Takes the run of store `url` over for the empty directory `run_dir`: its claim, once its
/// holder is gone, then its newest definition installed there.
pub(crate) async fn take_over(
    url: &str,
    options: Option<&Path>,
    run_dir: &Path,
) -> Result<(), RunError> {
    let (store, options) = open_store(url, options)?;
    // The lease the run was started with; the definition is read again once the run is ours,
    // since its holder may have published a newer one while it was let go.
    let seen = definition::newest(&store).await?;
    let lease = Duration::from_secs(seen.state.config.store_lease_s);
    lease::acquire(&store, run_dir, Acquire::TakeOver, lease).await?;
    let def = definition::newest(&store).await?;
    definition::install(&store, &def, run_dir, options).await?;
    tracing::info!(
        store = %store.url(),
        checkpoint = %def.checkpoint,
        run_dir = %run_dir.display(),
        results = def.results_bytes,
        "the run's definition came from the store"
    );
    Ok(())
}
