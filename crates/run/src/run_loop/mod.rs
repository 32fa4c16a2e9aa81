//! The loop of `rollpoint run` and `rollpoint resume`: dispatch, a result row per finished
//! rollout, checkpoints on a timer and on signals, forks and the fleet's pause on request,
//! and a stop (a checkpoint with `stop`, then exit 75) on SIGTERM/SIGINT.
//!
//! One task owns the loop, so checkpoints, result rows and `forget` never
//! overlap: a rollout finishing during a checkpoint is written after it. Each of its verbs
//! is a file with an `impl Loop` of its own.
//!
//! | file | what it is for |
//! |---|---|
//! | `new` | the loop's state (`Loop`), made once |
//! | [`signal`] | its input: signals, the claim's fencing, control requests |
//! | `drive` | the loop itself, until every rollout is done or the run stops |
//! | `dispatch` | a task dispatched, a rollout started over, a task that could not run |
//! | `finish` | a finished attempt: its row, or a retry of an infrastructure error |
//! | `checkpoint` | a checkpoint of every rollout in flight |
//! | `stop` | the stop checkpoint, within the grace period if there is one |
//! | `grace` | when the grace period after SIGTERM runs out |
//! | `fork` | a checkpointed rollout forked into new rollouts of the run |
//! | `fleet` | the fleet paused for a weight update, and continued |
//! | `metrics` | the run's Prometheus metrics |
//! | [`progress`] | bars on a terminal, plain lines otherwise |

mod checkpoint;
mod dispatch;
pub(crate) mod drive;
mod finish;
mod fleet;
pub(crate) mod fork;
mod grace;
mod metrics;
pub(crate) mod new;
pub mod progress;
pub mod signal;
mod stop;

pub use drive::Ending;
pub use signal::{EndpointRequest, Signal};
