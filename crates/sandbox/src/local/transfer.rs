//! Upload and download: files in and out of the overlay the owner has
//! mounted, confined beneath the sandbox root ([`SandboxRoot`]). Uploads
//! belong to the sandbox's user.

use std::path::Path;

use super::backend::LocalBackend;
use crate::{Error, SandboxRoot};

pub(super) fn upload(
    backend: &LocalBackend,
    id: &str,
    path: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), Error> {
    let (info, identity) = backend.live(id, |l| (l.info.clone(), l.identity.clone()))?;
    // A file put in for the sandbox's user is that user's.
    SandboxRoot::open(&info.root)?.upload_owned(path, bytes, mode, identity.owner())
}

pub(super) fn download(
    backend: &LocalBackend,
    id: &str,
    path: &Path,
    limit: u64,
) -> Result<Vec<u8>, Error> {
    let info = backend.info(id)?;
    SandboxRoot::open(&info.root)?.download(path, limit)
}

pub(super) fn fresh_dir(backend: &LocalBackend, id: &str, path: &Path) -> Result<(), Error> {
    let (info, identity) = backend.live(id, |l| (l.info.clone(), l.identity.clone()))?;
    let root = SandboxRoot::open(&info.root)?;
    root.remove_all(path)?;
    root.make_dir(path, identity.owner())
}
