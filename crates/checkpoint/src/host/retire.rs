//! Retire and forget: only while no checkpoint is open (idle) or after a
//! restore, so a retired attempt cannot be half exported.

use std::sync::Arc;

use super::{Inner, millis, within};
use crate::api::CallResult;
use crate::errors::CallError;
use crate::wire::{KeysReply, KeysRequest, KeysVerb, Request as _};

pub(super) async fn run(
    inner: Arc<Inner>,
    req: KeysRequest,
    verb: KeysVerb,
) -> CallResult<KeysReply> {
    req.check()?;
    let timeout = millis(req.timeout_ms);
    inner.renew(timeout);
    let action = verb.as_str();
    let _ops = inner.ops.lock().await;
    inner.machine().check_retire(action)?;
    let what = format!("{} keys", req.keys.len());
    within(action, &what, timeout, async {
        let done = match verb {
            KeysVerb::Retire => inner.participant.retire(&req.keys).await,
            KeysVerb::Forget => inner.participant.forget(&req.keys).await,
        };
        done.map(|keys| KeysReply { keys })
            .map_err(|e| CallError::hook(action, &e))
    })
    .await
}
