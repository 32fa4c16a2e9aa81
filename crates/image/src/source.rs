//! Where an image comes from, and reading it from there: its config and
//! its layer blobs in order. A registry over the OCI distribution API, or,
//! for air-gapped machines, an OCI layout directory, an OCI archive (a tar
//! of a layout) or a Docker archive (`docker save` / `podman save`).

use std::fmt;
use std::io::Read;
use std::path::PathBuf;

use crate::manifest::Compression;
use crate::{digest::Digest, errors::Error};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// `REGISTRY/REPO:TAG` or `...@sha256:...`.
    Registry(String),
    OciArchive(PathBuf),
    DockerArchive(PathBuf),
    OciLayout(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Registry(r) => f.write_str(r),
            Self::OciArchive(p) => write!(f, "oci-archive:{}", p.display()),
            Self::DockerArchive(p) => write!(f, "docker-archive:{}", p.display()),
            Self::OciLayout(p) => write!(f, "oci-layout:{}", p.display()),
        }
    }
}

/// One layer blob as the image's manifest names it.
#[derive(Debug, Clone)]
pub(crate) struct LayerBlob {
    /// `None` for a Docker archive, whose manifest names files, not digests.
    pub digest: Option<Digest>,
    /// `None` when no media type says (a Docker archive): sniffed.
    pub compression: Option<Compression>,
    /// For messages: the digest or the archive member.
    pub name: String,
}

/// An image as its source describes it, before any layer is read.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub manifest: Option<Digest>,
    pub config: Vec<u8>,
    pub layers: Vec<LayerBlob>,
}

/// A source opened for reading.
pub(crate) trait Fetch: Send + Sync {
    fn resolve(&self) -> Result<Resolved, Error>;
    fn open_layer(&self, layer: &LayerBlob) -> Result<Box<dyn Read + Send + '_>, Error>;
}
