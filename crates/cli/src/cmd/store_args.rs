//! The checkpoint-store flags every service that writes or publishes checkpoints takes.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use rollpoint_remote::RemoteStore;

/// Where checkpoints are kept besides the run directory.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// Object store checkpoints are published in besides RUN_DIR, so they outlive this node:
    /// s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://CONTAINER/PREFIX or file:///SHARED/DIR.
    /// Credentials come from the environment (AWS_*, GOOGLE_*, AZURE_*) or the options file.
    #[arg(long)]
    pub checkpoint_store: Option<String>,
    /// A file of KEY=VALUE store settings and credentials (e.g. AWS_ENDPOINT,
    /// AWS_ACCESS_KEY_ID) that only its owner may read.
    #[arg(long, requires = "checkpoint_store")]
    pub checkpoint_store_options: Option<PathBuf>,
}

impl StoreArgs {
    /// The store the flags name, if any.
    pub fn open(&self) -> anyhow::Result<Option<RemoteStore>> {
        RemoteStore::named(
            self.checkpoint_store.as_deref(),
            self.checkpoint_store_options.as_deref(),
        )
        .context("--checkpoint-store")
    }
}
