//! Retire and forget: only while no checkpoint is open (idle) or after a
//! restore, so a retired attempt cannot be half exported.

use super::Inner;
use super::call::{millis, within};
use crate::api::CallResult;
use crate::errors::CallError;
use crate::wire::{KeysReply, KeysRequest, KeysVerb, Request as _};

impl Inner {
    /// Retires or forgets `req.keys`, as `verb` says.
    pub(super) async fn retire(&self, req: KeysRequest, verb: KeysVerb) -> CallResult<KeysReply> {
        req.check()?;
        let timeout = millis(req.timeout_ms);
        self.renew(timeout);
        let action = verb.as_str();
        let _ops = self.ops.lock().await;
        self.machine().check_retire(action)?;
        let what = format!("{} keys", req.keys.len());
        within(action, &what, timeout, async {
            let done = match verb {
                KeysVerb::Retire => self.participant.retire(&req.keys).await,
                KeysVerb::Forget => self.participant.forget(&req.keys).await,
            };
            done.map(|keys| KeysReply { keys })
                .map_err(|e| CallError::hook(action, &e))
        })
        .await
    }
}
