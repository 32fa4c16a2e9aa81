//! Wire and on-disk formats shared by the supervisor and the host.
//!
//! Every format here carries a version field `v`. Writers write only the
//! current version; readers reject any other version by name, so an old
//! binary never guesses at a newer file. This crate does no I/O.
#![forbid(unsafe_code)]

pub mod anchor;
pub mod control;
pub mod key;
pub mod launch;
pub mod limits;
pub mod receipt;
pub mod responses;
pub mod session;
mod version;

pub use version::{FormatError, decode, decode_versioned, field_path};
