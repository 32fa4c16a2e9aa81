//! `rollpoint resume --from STORE_URL --run-dir NEW_DIR`: continues a run on a machine that
//! has nothing of it. The new directory takes the run over from the store
//! ([`crate::claim::takeover`]), and the resume goes on as on the old machine: the
//! checkpoints and the sandbox snapshots come down from the store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::steps::resume;
use crate::claim::takeover::take_over;
use crate::errors::RunError;
use crate::files::state::create_dir;
use crate::inputs::Inputs;
use crate::run_loop::drive::Ending;

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
            create_dir(run_dir)?;
        }
        Err(e) => return Err(RunError::io(run_dir, e)),
    }
    let run_dir = std::fs::canonicalize(run_dir).map_err(|e| RunError::io(run_dir, e))?;
    take_over(url, options, &run_dir).await?;
    resume(&run_dir, None, supervisor, env, inputs).await
}
