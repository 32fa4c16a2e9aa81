//! Prepare: stage by stage, model -> agent -> resources (fan-out within a
//! stage), stopping at the first stage not ready.

use std::collections::BTreeSet;

use futures_util::future::join_all;

use super::{Coordinator, Peer, several};
use crate::errors::CoordinatorError;
use crate::participant::{AttemptKey, Kind};
use crate::phase::Phase;
use crate::wire::{PrepareReply, PrepareRequest};

/// What prepare found.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Every participant prepared.
    pub ready: bool,
    /// The replies of the stages reached, in prepare order.
    pub replies: Vec<(Kind, String, PrepareReply)>,
    /// Attempt keys some participant cannot continue.
    pub restarts: BTreeSet<AttemptKey>,
}

impl Prepared {
    /// What blocks the cut, participant by participant.
    pub fn blockers(&self) -> String {
        self.replies
            .iter()
            .filter(|(_, _, r)| r.phase != Phase::Prepared)
            .map(|(kind, instance, r)| {
                format!(
                    "{kind}/{instance}: {} blockers ({})",
                    r.readiness.blocker_count,
                    r.readiness.blockers.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl Coordinator {
    /// Prepares checkpoint `id` stage by stage. An error or a stage not
    /// ready stops it; the caller resumes (see [`Self::checkpoint`]).
    pub async fn prepare(&self, id: &str) -> Result<Prepared, CoordinatorError> {
        let timeout = self.config.timeout;
        let mut out = Prepared {
            ready: true,
            replies: Vec::new(),
            restarts: BTreeSet::new(),
        };
        for kind in Kind::ALL {
            let stage: Vec<&Peer> = self.peers.iter().filter(|p| p.kind == kind).collect();
            let replies = join_all(stage.iter().map(|peer| {
                let req = PrepareRequest {
                    checkpoint: id.to_owned(),
                    timeout_ms: self.timeout_ms(timeout),
                };
                Self::call(peer, "prepare", timeout, peer.control.prepare(req))
            }))
            .await;
            let mut failures = Vec::new();
            for (peer, reply) in stage.iter().zip(replies) {
                match reply {
                    Ok(reply) => {
                        out.ready &= reply.phase == Phase::Prepared;
                        out.restarts
                            .extend(reply.readiness.restarts.iter().cloned());
                        out.replies.push((peer.kind, peer.instance.clone(), reply));
                    }
                    Err(e) => failures.push(e),
                }
            }
            if !failures.is_empty() {
                return Err(several("prepare", id, failures));
            }
            if !out.ready {
                break;
            }
        }
        Ok(out)
    }
}
