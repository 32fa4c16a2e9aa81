//! The object-store seam. A run keeps its checkpoints (and, later, its sandbox snapshots) in a
//! store chosen by one URL: `s3://bucket/prefix` (and S3-compatible servers through
//! `AWS_ENDPOINT`), `gs://bucket/prefix`, `az://container/prefix`, or `file:///shared/dir` for
//! a shared filesystem (NFS, Lustre) or one disk.
//!
//! Why a seam of its own: the checkpoint store must stay correct on stores that offer no
//! rename and no lock. The only primitives used are whole-object put, put-if-absent (S3's
//! `If-None-Match: *`, GCS and Azure preconditions, a hard link on a filesystem), get, list and
//! delete; everything the checkpoint store promises is built from those.
//!
//! Credentials come from the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`, as each store's own
//! tools read them) or from an options file of `KEY=VALUE` lines that only its owner may read.
//! They are never part of the URL (a URL with a user or password is refused), and neither this
//! crate's errors nor its `Debug` output carry them.

mod errors;
mod options;
mod store;
mod url;

pub use errors::RemoteError;
pub use options::Options;
pub use store::{Chunk, Created, RemoteStore, sha256_hex};
pub use url::StoreUrl;
