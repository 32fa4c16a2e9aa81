//! Commit: every participant writes its share at once.

use futures_util::future::join_all;

use super::{Coordinator, several};
use crate::errors::CoordinatorError;
use crate::participant::AttemptKey;
use crate::store;
use crate::wire::CommitRequest;

impl Coordinator {
    /// Commits checkpoint `id` everywhere at once; returns each
    /// participant's manifest.
    pub async fn commit(
        &self,
        id: &str,
        scope: &[AttemptKey],
        stop: bool,
    ) -> Result<Vec<store::Member>, CoordinatorError> {
        let timeout = self.config.timeout;
        let replies = join_all(self.peers.iter().map(|peer| {
            let req = CommitRequest {
                checkpoint: id.to_owned(),
                timeout_ms: self.timeout_ms(timeout),
                scope: scope.to_vec(),
                stop,
            };
            Self::call(peer, "commit", timeout, peer.control.commit(req))
        }))
        .await;
        let mut members = Vec::new();
        let mut failures = Vec::new();
        for (peer, reply) in self.peers.iter().zip(replies) {
            match reply {
                Ok(reply) => members.push(store::Member {
                    kind: peer.kind,
                    instance: peer.instance.clone(),
                    manifest: reply.manifest,
                }),
                Err(e) => failures.push(e),
            }
        }
        if failures.is_empty() {
            Ok(members)
        } else {
            Err(several("commit", id, failures))
        }
    }
}
