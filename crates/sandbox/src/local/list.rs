//! List: every sandbox directory of the backend, and every snapshot the
//! store holds.

use super::backend::LocalBackend;
use crate::{BackendListing, errors::Error};

impl LocalBackend {
    pub(super) fn list(&self) -> Result<BackendListing, Error> {
        let dir = self.dir.join("sandboxes");
        let mut sandboxes: Vec<String> = std::fs::read_dir(&dir)
            .map_err(|source| Error::Setup {
                sandbox: "-".into(),
                what: format!("list {}", dir.display()),
                source,
            })?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        sandboxes.sort();
        let snapshots = self
            .store
            .list()
            .map_err(|source| Error::Store {
                sandbox: "-".into(),
                source,
            })?
            .snapshots;
        Ok(BackendListing {
            sandboxes,
            snapshots,
        })
    }
}
