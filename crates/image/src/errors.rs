//! Every error names the image and, where there is one, the layer or field.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The reference, path or option given does not name a usable image.
    #[error("image {image}: {message}")]
    Invalid { image: String, message: String },
    /// The registry refused or failed a request.
    #[error("image {image}: registry: {message}")]
    Registry { image: String, message: String },
    /// A manifest, index or config that is not what its media type says.
    #[error("image {image}: {what}: {source}")]
    Format {
        image: String,
        what: String,
        source: rollpoint_proto::Cause,
    },
    /// A layer that is truncated, corrupt, of an unsupported type, or whose
    /// content does not match its digest.
    #[error("image {image}: layer {layer}: {source}")]
    Layer {
        image: String,
        layer: String,
        source: rollpoint_proto::Cause,
    },
    /// A layer whose tar did not unpack: most often a truncated download.
    #[error("image {image}: layer {layer}: {source} (truncated or corrupt?)")]
    Unpack {
        image: String,
        layer: String,
        #[source]
        source: UnpackError,
    },
    #[error("image cache {path}: {what}: {source}")]
    Io {
        what: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(
        what: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let (what, path) = (what.into(), path.into());
        move |source| Self::Io { what, path, source }
    }
}

/// What is wrong with a digest, manifest, index or image config: each
/// variant names the field or value it is about.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{0:?} is not a sha256 digest (sha256:<64 hex digits>)")]
    NotSha256(String),
    #[error("{0:?} is not a sha256 digest (sha256:<64 lowercase hex digits>)")]
    DigestHex(String),
    #[error(
        "unsupported layer media type {0:?} (supported: OCI and Docker tar layers, \
         uncompressed, gzip or zstd)"
    )]
    LayerMediaType(String),
    #[error("not JSON of a manifest or index: {0}")]
    NotDocument(#[source] serde_json::Error),
    #[error("schemaVersion {0}: only 2 is supported")]
    SchemaVersion(u32),
    #[error(
        "unsupported media type {0:?} (supported: OCI index and manifest, Docker manifest list \
         and v2 manifest)"
    )]
    MediaType(String),
    #[error("neither an index (manifests) nor a manifest (config and layers)")]
    NeitherIndexNorManifest,
    #[error("no linux/amd64 image in the index (it offers: {})", offered(.0))]
    NoPlatform(Vec<String>),
    #[error("not an image config: {0}")]
    NotConfig(#[source] serde_json::Error),
    #[error("rootfs.type {0:?}: only \"layers\" is supported")]
    RootfsType(String),
    #[error("os {0:?}: only linux images run in sandboxes")]
    Os(String),
    #[error("architecture {0:?}: only amd64 images run on this machine")]
    Architecture(String),
}

fn offered(platforms: &[String]) -> String {
    if platforms.is_empty() {
        "none".to_owned()
    } else {
        platforms.join(", ")
    }
}

/// Why a layer did not unpack: the stream, or the tar entry (by its path in
/// the layer) and what was being done to it.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("zstd: {0}")]
    Zstd(#[source] std::io::Error),
    #[error("not a tar archive: {0}")]
    NotTar(#[source] std::io::Error),
    #[error("reading the tar: {0}")]
    ReadTar(#[source] std::io::Error),
    #[error("reading the blob: {0}")]
    ReadBlob(#[source] std::io::Error),
    #[error("an entry's path: {0}")]
    EntryPath(#[source] std::io::Error),
    #[error("entry {}: the path leaves the layer", .entry.display())]
    Leaves { entry: PathBuf },
    #[error("entry {}: its directory {} is a symlink", .entry.display(), .dir.display())]
    SymlinkDir { entry: PathBuf, dir: PathBuf },
    #[error("entry {}: {source}", .entry.display())]
    Write {
        entry: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `what` names the field read or the step taken (`mode`, `chown`,
    /// `xattr NAME`...).
    #[error("entry {}: {what}: {source}", .entry.display())]
    Step {
        entry: PathBuf,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("entry {}: {what}: {source}", .entry.display())]
    Node {
        entry: PathBuf,
        what: String,
        #[source]
        source: nix::errno::Errno,
    },
    #[error("entry {}: owner id {id} out of range", .entry.display())]
    OwnerId { entry: PathBuf, id: u64 },
}
