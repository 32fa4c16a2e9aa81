//! Files in and out of a session's sandbox, paths confined beneath its root.

use std::path::Path;

use super::LocalOwner;
use crate::errors::OwnerError;
use crate::owner::OwnerResult;
use crate::task::{check_sandbox_path, resolve};

impl LocalOwner {
    pub(super) async fn upload_impl(
        &self,
        session: &str,
        path: &str,
        bytes: Vec<u8>,
        mode: u32,
    ) -> OwnerResult<()> {
        let (sandbox, _) = self.current(session)?;
        check_sandbox_path("path", path)?;
        if mode > 0o7777 {
            return Err(OwnerError::bad(
                "mode",
                format!("{mode:o} is not a file mode"),
            ));
        }
        let path = resolve(&sandbox.spec.workdir, path);
        let id = sandbox.id.clone();
        self.on_backend(session, &sandbox.id, "upload", move |b| {
            b.upload(&id, Path::new(&path), &bytes, mode)
        })
        .await
    }

    pub(super) async fn download_impl(
        &self,
        session: &str,
        path: &str,
        limit: u64,
    ) -> OwnerResult<Vec<u8>> {
        let (sandbox, _) = self.current(session)?;
        check_sandbox_path("path", path)?;
        let path = resolve(&sandbox.spec.workdir, path);
        let id = sandbox.id.clone();
        self.on_backend(session, &sandbox.id, "download", move |b| {
            b.download(&id, Path::new(&path), limit)
        })
        .await
    }
}
