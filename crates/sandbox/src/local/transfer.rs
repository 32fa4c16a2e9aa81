//! Upload and download: files in and out of the sandbox's overlay, reached
//! through the owner's handle on it (attached only in the sandbox's own
//! mount namespace) and confined beneath it ([`crate::SandboxRoot`]).
//! Uploads belong to the sandbox's user.

use std::path::Path;

use super::backend::LocalBackend;
use crate::errors::Error;

impl LocalBackend {
    pub(super) fn upload(
        &self,
        id: &str,
        path: &Path,
        bytes: &[u8],
        mode: u32,
    ) -> Result<(), Error> {
        let identity = self.live(id, |l| l.identity.clone())?;
        // A file put in for the sandbox's user is that user's.
        self.root(id)?
            .upload_owned(path, bytes, mode, identity.owner())
    }

    pub(super) fn download(&self, id: &str, path: &Path, limit: u64) -> Result<Vec<u8>, Error> {
        self.root(id)?.download(path, limit)
    }

    pub(super) fn fresh_dir(&self, id: &str, path: &Path) -> Result<(), Error> {
        let identity = self.live(id, |l| l.identity.clone())?;
        let root = self.root(id)?;
        root.remove_all(path)?;
        root.make_dir(path, identity.owner())
    }
}
