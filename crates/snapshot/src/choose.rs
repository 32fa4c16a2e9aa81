//! Picking a store: btrfs when the tools and the kernel allow it (tried, not
//! guessed), else copy; or whichever the caller names.

use std::path::Path;
use std::str::FromStr;

use crate::errors::Error;
use crate::{SnapshotStore, btrfs::BtrfsStore, btrfs::ImageOptions, copy::CopyStore};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StoreChoice {
    /// btrfs if opening it works, else copy.
    #[default]
    Auto,
    Btrfs,
    Copy,
}

impl FromStr for StoreChoice {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "auto" => Ok(Self::Auto),
            "btrfs" => Ok(Self::Btrfs),
            "copy" => Ok(Self::Copy),
            other => Err(Error::UnknownStore {
                value: other.to_owned(),
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreOptions {
    pub choice: StoreChoice,
    pub image: ImageOptions,
}

/// A store ready for use and, under `Auto`, why btrfs was not used.
#[derive(Debug)]
pub struct Opened {
    pub store: Box<dyn SnapshotStore>,
    pub btrfs_error: Option<Error>,
}

/// Opens the store `options` asks for in `dir`.
pub fn open(dir: &Path, options: &StoreOptions) -> Result<Opened, Error> {
    let btrfs =
        || BtrfsStore::open(dir, &options.image).map(|s| Box::new(s) as Box<dyn SnapshotStore>);
    let copy = || CopyStore::open(dir).map(|s| Box::new(s) as Box<dyn SnapshotStore>);
    match options.choice {
        StoreChoice::Btrfs => Ok(Opened {
            store: btrfs()?,
            btrfs_error: None,
        }),
        StoreChoice::Copy => Ok(Opened {
            store: copy()?,
            btrfs_error: None,
        }),
        StoreChoice::Auto => match btrfs() {
            Ok(store) => Ok(Opened {
                store,
                btrfs_error: None,
            }),
            Err(e) => Ok(Opened {
                store: copy()?,
                btrfs_error: Some(e),
            }),
        },
    }
}
