//! What every call shares: its deadline and the error of a task that
//! failed.

use std::time::Duration;

use crate::api::CallResult;
use crate::errors::{CallError, Code};

/// Runs `fut` until `timeout`, else fails with `deadline_exceeded`.
pub(super) async fn within<T>(
    action: &str,
    subject: &str,
    timeout: Duration,
    fut: impl Future<Output = CallResult<T>>,
) -> CallResult<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result,
        Err(_) => Err(CallError::deadline(
            action,
            subject,
            u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        )),
    }
}

pub(super) fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

pub(super) fn join_error(action: &str, e: &tokio::task::JoinError) -> CallError {
    CallError::new(Code::HookFailed, format!("{action}: task failed: {e}"))
}
