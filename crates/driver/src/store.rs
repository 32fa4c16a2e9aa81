//! Durable bookmark files: `<dir>/<rollout>.json`, each written atomically
//! (temp file, fsync, rename, fsync of the directory), mode 0600. The
//! checkpoint control plane exports bookmarks from memory; these files let
//! tools and a restarted process see where each rollout stood.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::bookmark::Bookmark;
use crate::errors::DriverError;

#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Uses (and creates, mode 0700) `dir`.
    pub fn open(dir: &Path) -> Result<Self, DriverError> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| DriverError::Store {
                path: dir.to_owned(),
                what: "create",
                source: e.into(),
            })?;
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    pub fn path(&self, rollout: &str) -> PathBuf {
        self.dir.join(format!("{rollout}.json"))
    }

    pub async fn write(&self, bookmark: &Bookmark) -> Result<(), DriverError> {
        let path = self.path(&bookmark.rollout);
        let dir = self.dir.clone();
        let bytes = bookmark.encode();
        tokio::task::spawn_blocking(move || write_atomic(&dir, &path, &bytes))
            .await
            .map_err(|e| DriverError::Store {
                path: self.dir.clone(),
                what: "writer did not finish",
                source: e.into(),
            })?
    }

    /// Reads back a rollout's bookmark.
    pub fn read(&self, rollout: &str) -> Result<Bookmark, DriverError> {
        let path = self.path(rollout);
        let bytes = std::fs::read(&path).map_err(|e| DriverError::Store {
            path: path.clone(),
            what: "read",
            source: e.into(),
        })?;
        Bookmark::decode(&bytes).map_err(|source| DriverError::Bookmark {
            rollout: rollout.to_owned(),
            source,
        })
    }
}

fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), DriverError> {
    let err = |what: &'static str, e: std::io::Error| DriverError::Store {
        path: path.to_owned(),
        what,
        source: e.into(),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| err("create temp", e))?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| err("chmod temp", e))?;
    tmp.write_all(bytes).map_err(|e| err("write temp", e))?;
    tmp.as_file().sync_all().map_err(|e| err("fsync temp", e))?;
    tmp.persist(path).map_err(|e| err("rename", e.error))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| err("fsync directory", e))
}
