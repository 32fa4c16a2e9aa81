//! Linux process trees, synchronously and with small dependencies, so both the
//! static supervisor and the host can link it.
//!
//! - [`scan`] reads `/proc` into a table keyed by pid with state, ppid,
//!   threads and start time. A process is identified by [`ProcId`]
//!   (pid, start time) and that identity is re-checked through a pidfd before
//!   every signal, so a reused pid is never signalled.
//! - [`members`] finds the processes of a launch: its tree, processes whose
//!   environment carries `ROLLPOINT_LAUNCH=<id>`, and members found earlier.
//! - [`freeze`] pauses a launch and proves it paused (cgroup v2 freezer,
//!   cgroup v1 freezer, or a SIGSTOP sweep), continues exactly what it froze,
//!   and undoes a pause it cannot confirm.
//! - [`stop`] ends a launch: thaw, SIGINT, grace, SIGKILL, `cgroup.kill`,
//!   drain, and a receipt that says whether cleanup is confirmed.
//!
//! See docs/design/process-tree.md and docs/design/pause-strategies.md.

pub mod budget;
pub mod cgroup;
mod errors;
pub mod freeze;
pub mod ident;
pub mod members;
pub mod scan;
pub mod stat;
pub mod stop;
pub mod time;

pub use budget::Budgets;
pub use errors::Error;
pub use freeze::{Control, Launch, Paused, Strategy};
pub use ident::ProcId;
pub use members::MemberSpec;
