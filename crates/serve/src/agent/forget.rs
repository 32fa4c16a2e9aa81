//! Forgetting finished rollouts, so later checkpoints no longer carry them.
//! The control plane refuses forget while a checkpoint is open, and every
//! call renews the open checkpoint's lease: retrying in a loop would keep
//! the checkpoint of a coordinator that went silent alive for ever. So
//! finished keys wait here from a prepare or restore until its resume, and
//! are then forgotten in one call; a refused call puts them back for the
//! next resume.

use std::sync::{Mutex, MutexGuard, PoisonError};

use rollpoint_checkpoint::wire::KeysRequest;
use rollpoint_checkpoint::{AttemptKey, ParticipantApi as _, ParticipantHost};

/// Deadline of one forget call.
const FORGET_TIMEOUT_MS: u64 = 30_000;

#[derive(Debug, Default)]
struct State {
    /// A prepare or restore came and its resume has not.
    open: bool,
    pending: Vec<AttemptKey>,
}

#[derive(Debug, Default)]
pub struct Forgetting {
    state: Mutex<State>,
}

impl Forgetting {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A checkpoint or restore began.
    pub fn opened(&self) {
        self.state().open = true;
    }

    /// `key` finished: the keys to forget now, unless a checkpoint is open.
    pub fn finished(&self, key: AttemptKey) -> Option<Vec<AttemptKey>> {
        let mut s = self.state();
        s.pending.push(key);
        (!s.open).then(|| std::mem::take(&mut s.pending))
    }

    /// The checkpoint ended (resumed): every waiting key, to forget now.
    pub fn closed(&self) -> Vec<AttemptKey> {
        let mut s = self.state();
        s.open = false;
        std::mem::take(&mut s.pending)
    }

    /// A forget was refused: its keys wait for the next resume.
    pub fn refused(&self, keys: Vec<AttemptKey>) {
        self.state().pending.extend(keys);
    }

    /// Forgets `keys` through `control`; refused keys wait.
    pub async fn flush(&self, control: &ParticipantHost, keys: Vec<AttemptKey>) {
        if keys.is_empty() {
            return;
        }
        let req = KeysRequest {
            keys: keys.clone(),
            timeout_ms: FORGET_TIMEOUT_MS,
        };
        if control.forget(req).await.is_err() {
            self.refused(keys);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(text: &str) -> AttemptKey {
        text.parse().expect("key")
    }

    #[test]
    fn keys_wait_while_a_checkpoint_is_open() {
        let f = Forgetting::default();
        assert_eq!(f.finished(k("a")), Some(vec![k("a")]));
        f.opened();
        assert_eq!(f.finished(k("b")), None);
        assert_eq!(f.finished(k("c")), None);
        assert_eq!(f.closed(), vec![k("b"), k("c")]);
        f.refused(vec![k("b")]);
        assert_eq!(f.finished(k("d")), Some(vec![k("b"), k("d")]));
        assert!(f.closed().is_empty());
    }
}
