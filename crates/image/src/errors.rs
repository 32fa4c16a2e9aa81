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
