//! Linux process trees, synchronously and with small dependencies, so both the
//! static supervisor and the host can link it.
//!
//! - [`scan`]: `/proc` read into a table keyed by pid (state, ppid, threads,
//!   start time) and the children map.
//! - [`stat`]: parsing `/proc/<pid>/stat`.
//! - [`ident`]: [`ProcId`] (pid, start time), re-checked through a pidfd
//!   before every signal, so a reused pid is never signalled.
//! - [`members`]: the processes of a launch: its tree, the processes whose
//!   environment carries `ROLLPOINT_LAUNCH=<id>`, and members found earlier.
//! - [`freeze`]: pause a launch and prove it paused (cgroup v2 freezer,
//!   cgroup v1 freezer, or a SIGSTOP sweep), continue exactly what it froze,
//!   undo a pause it cannot confirm.
//! - [`stop`]: end a launch: thaw, SIGINT, grace, SIGKILL, `cgroup.kill`,
//!   drain, and a receipt saying whether cleanup is confirmed.
//! - [`cgroup`]: finding, creating and removing cgroups, and the file seam.
//! - [`spawn`]: the fork-to-exec hook of every spawner: signals reset,
//!   cgroups joined, namespaces entered.
//! - [`isolate`]: a sandbox's confinement (its user namespace, Docker's
//!   default capabilities, `no_new_privs`, the seccomp filter), entered by
//!   each child the anchor and the launch supervisors start.
//! - [`budget`]: time budgets of every operation.
//! - [`time`]: small time helpers.
//!
//! See docs/design/process-tree.md and docs/design/pause-strategies.md.

pub mod budget;
pub mod cgroup;
mod credentials;
mod errors;
pub mod fdpass;
pub mod freeze;
pub mod ident;
pub mod isolate;
pub mod limits;
pub mod members;
pub mod scan;
pub mod spawn;
pub mod stat;
pub mod stop;
pub mod time;

pub use budget::Budgets;
pub use errors::Error;
pub use freeze::{Freezer, Launch, Paused, Strategy};
pub use ident::ProcId;
pub use members::MemberSpec;
