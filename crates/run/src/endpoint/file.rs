//! `RUN_DIR/control.json`: where a run's control endpoint listens, written once it is bound
//! and removed when it stops, so `rollpoint` commands find the run.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::errors::RunError;
use crate::files::state::write_atomic;

/// Version of `control.json` and of the status reply.
pub const ENDPOINT_VERSION: u32 = 1;
/// Where a run with a control endpoint writes its address.
pub const CONTROL_FILE: &str = "control.json";

/// `control.json`: where the endpoint listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointFile {
    pub v: u32,
    pub addr: SocketAddr,
}

impl EndpointFile {
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join(CONTROL_FILE)
    }

    /// Reads `control.json`, rejecting an unknown version by name.
    pub fn load(run_dir: &Path) -> Result<Self, RunError> {
        let path = Self::path(run_dir);
        let bytes = std::fs::read(&path).map_err(|e| RunError::io(&path, e))?;
        rollpoint_proto::decode("run control file", ENDPOINT_VERSION, &bytes)
            .map_err(|e| RunError::state(path, e))
    }

    pub(super) fn save(&self, run_dir: &Path) -> Result<(), RunError> {
        let path = Self::path(run_dir);
        let bytes =
            serde_json::to_vec_pretty(self).map_err(|e| RunError::state(path.clone(), e))?;
        write_atomic(&path, &bytes)
    }
}
