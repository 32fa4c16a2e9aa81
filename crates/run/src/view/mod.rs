//! The documents of `rollpoint run`'s dashboard and report (`rollpoint_view`), read from the
//! run directory, each file once, with where the live run's drivers stand laid over them.

mod rollout;
mod run;

pub use rollout::{all_rollout_views, rollout_view};
pub use run::run_view;
