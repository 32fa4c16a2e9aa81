//! Upload and download: files in and out of the overlay the owner has
//! mounted, confined beneath the sandbox root ([`SandboxRoot`]).

use std::path::Path;

use super::LocalBackend;
use crate::{Error, SandboxRoot};

pub(super) fn upload(
    backend: &LocalBackend,
    id: &str,
    path: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), Error> {
    let info = backend.info(id)?;
    SandboxRoot::open(&info.root)?.upload(path, bytes, mode)
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
