//! Wire and on-disk formats shared by the supervisor and the host, and the
//! names every part gives a rollout.
//!
//! Every format here carries a version field `v`; writers write only the
//! current version, and every reader in the workspace checks the version
//! through [`check_version`] (or [`decode`], [`decode_versioned`]), rejecting
//! any other by name, so an old binary never guesses at a newer file. This
//! crate does no I/O.
//!
//! | module | what it holds |
//! |---|---|
//! | [`anchor`] | the sandbox anchor's socket protocol, launch id checks |
//! | [`cause`] | [`Cause`]: an error's cause kept whole, not as its text |
//! | [`clock`] | the one wall clock of records and ids |
//! | [`key`] | [`key::RolloutId`] and [`key::AttemptKey`]: the only place a key is formatted or parsed |
//! | [`launch`] | the launch record |
//! | [`limits`] | every id length limit |
//! | [`receipt`] | what a pause, continue or stop did, member by member |
//! | [`net`] | a destination a sandbox may reach (`IPv4/N:PORT`), parsed once for the owner and the anchor |
//! | [`route`] | the per-attempt route secret and the route segment `<key>@<secret>` |
//! | [`responses`] | facts about the OpenAI Responses API shared by the worker and the model |
//! | [`session`] | the files of a launch's session directory |
//! | [`supervisor`] | the launch supervisor's socket protocol |
//! | `version` | the one versioned-envelope reader |
#![forbid(unsafe_code)]

pub mod anchor;
pub mod cause;
pub mod clock;
pub mod hex;
pub mod key;
pub mod launch;
pub mod limits;
pub mod net;
pub mod receipt;
pub mod responses;
pub mod route;
pub mod session;
pub mod supervisor;
mod version;

pub use cause::Cause;
pub use version::{FormatError, check_version, decode, decode_since, decode_versioned, field_path};
