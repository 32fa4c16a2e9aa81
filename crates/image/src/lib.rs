//! Task images as sandbox bases. An image from a registry, an OCI layout,
//! an OCI archive or a Docker archive is read to its config and layers;
//! each layer is verified by digest and unpacked once into a
//! content-addressed cache, whiteouts turned into overlayfs ones, so the
//! layers stack as a sandbox overlay's lower directories with no flattening
//! copy and any number of sandboxes of one image share one copy on disk.
//! See docs/design/images.md.

mod archive;
mod auth;
mod cache;
mod digest;
mod errors;
pub mod manifest;
mod registry;
mod source;
pub mod unpack;

pub use cache::{ImageCache, ImageRecord, Pruned, RECORD_VERSION};
pub use digest::Digest;
pub use errors::{Error, FormatError, UnpackError};
pub use registry::RegistryOptions;
pub use source::Source;
