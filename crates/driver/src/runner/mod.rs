//! The runner: carries out one rollout's effects (owner calls, the adapter,
//! the supervisor's control socket) and feeds the outcomes back to the
//! machine. Each bookmark is recorded before the effect after it runs.
//!
//! The runner itself is `context`; `drive` runs the machine, and each kind
//! of effect is a file: `perform` (seed, access, resume decision, close),
//! `launch`, `wait`, `pause` (and continue), `stop`, `verify`. `env` is
//! what every launch's environment carries.

pub(crate) mod context;
mod drive;
pub(crate) mod env;
mod launch;
mod pause;
mod perform;
mod stop;
mod verify;
mod wait;

pub use context::Budgets;
pub use env::{
    ATTEMPT_VAR, CAPTURE_KEY_VAR, GATEWAY_VAR, ROLLOUT_VAR, capture_key, gateway_base, on_loopback,
};
