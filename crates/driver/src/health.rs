//! Telling an unreachable model from a policy's failure. A harness whose
//! model calls find no upstream gives up and exits like one that failed the
//! task; graded, it would score 0 for the infrastructure's fault. Before a
//! rollout is graded, the runner asks the model side how the attempt's last
//! call ended; a call the upstream never answered ends the rollout as
//! `infra_error` / `model_unreachable` instead.

use futures_util::future::BoxFuture;

/// The model side's account of an attempt's calls.
pub trait ModelHealth: Send + Sync + std::fmt::Debug {
    /// Why the last model call of `rollout`'s `attempt` got no answer from
    /// the upstream (unreachable, broken off, overloaded), or `None` when it
    /// was answered, made none, or cannot be told.
    fn last_call_unanswered<'a>(
        &'a self,
        rollout: &'a str,
        attempt: u32,
    ) -> BoxFuture<'a, Option<String>>;
}
