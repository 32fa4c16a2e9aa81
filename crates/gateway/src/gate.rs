//! The admission gate. Closed: new requests wait (the harness sees latency, not an error) and
//! replies that have not started delivering are held. Open: both proceed in order. Streams
//! already delivering when it closes are reported to the closer, which either lets them
//! finish (and can wait for that) or holds their tail until the gate opens again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rollpoint_proto::key::AttemptKey;
use tokio::sync::watch;

use crate::ledger::CallId;

/// What a stream already delivering does when the gate closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailPolicy {
    /// Let it deliver to the end (wait with `Gateway::deliveries_drained`).
    Finish,
    /// Deliver nothing more until the gate opens.
    Hold,
}

/// Where an in-flight request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Arrived while closed, not yet admitted.
    Waiting,
    /// Admitted; its reply has not started reaching the caller.
    Upstream,
    /// Its reply is reaching the caller.
    Delivering,
}

/// One in-flight request, as reported by `close`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    pub capture_key: AttemptKey,
    pub call_id: Option<CallId>,
    pub phase: Phase,
}

/// What `close` found in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloseReport {
    /// Requests that were waiting already (the gate was closed).
    pub waiting: Vec<InFlight>,
    /// Admitted calls whose replies are now held.
    pub held: Vec<InFlight>,
    /// Streams that were delivering when the gate closed.
    pub delivering: Vec<InFlight>,
}

#[derive(Debug)]
struct Inner {
    open: bool,
    tails: TailPolicy,
    next: u64,
    entries: HashMap<u64, InFlight>,
}

/// The gate and its registry of in-flight requests.
#[derive(Debug)]
pub struct Gate {
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
    /// Fast-path copy of `open || tails == Finish` for the per-chunk check.
    tails_flow: AtomicBool,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                open: true,
                tails: TailPolicy::Finish,
                next: 0,
                entries: HashMap::new(),
            }),
            changed: watch::Sender::new(0),
            tails_flow: AtomicBool::new(true),
        }
    }
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Closes the gate and reports what is in flight.
    pub fn close(&self, tails: TailPolicy) -> CloseReport {
        let mut inner = self.lock();
        inner.open = false;
        inner.tails = tails;
        self.tails_flow
            .store(tails == TailPolicy::Finish, Ordering::SeqCst);
        let mut report = CloseReport::default();
        for e in inner.entries.values() {
            match e.phase {
                Phase::Waiting => report.waiting.push(e.clone()),
                Phase::Upstream => report.held.push(e.clone()),
                Phase::Delivering => report.delivering.push(e.clone()),
            }
        }
        drop(inner);
        self.bump();
        report
    }

    /// Opens the gate: waiting requests proceed and held replies are delivered.
    pub fn open(&self) {
        let mut inner = self.lock();
        inner.open = true;
        self.tails_flow.store(true, Ordering::SeqCst);
        drop(inner);
        self.bump();
    }

    /// Whether the gate is open.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.lock().open
    }

    /// Every request in flight, in no particular order.
    #[must_use]
    pub fn in_flight(&self) -> Vec<InFlight> {
        self.lock().entries.values().cloned().collect()
    }

    /// A receiver that sees a change whenever the gate or an entry moves.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Waits until no stream is delivering.
    pub async fn deliveries_drained(&self) {
        let mut rx = self.changed.subscribe();
        loop {
            if !self
                .lock()
                .entries
                .values()
                .any(|e| e.phase == Phase::Delivering)
            {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Waits until the gate is open and admits a request of `capture_key`.
    pub async fn admit(self: &Arc<Self>, capture_key: &AttemptKey) -> Ticket {
        let mut rx = self.changed.subscribe();
        let id = {
            let mut inner = self.lock();
            let id = inner.next;
            inner.next += 1;
            let phase = if inner.open {
                Phase::Upstream
            } else {
                Phase::Waiting
            };
            inner.entries.insert(
                id,
                InFlight {
                    capture_key: capture_key.clone(),
                    call_id: None,
                    phase,
                },
            );
            if phase == Phase::Upstream {
                return Ticket {
                    gate: self.clone(),
                    id,
                };
            }
            id
        };
        let ticket = Ticket {
            gate: self.clone(),
            id,
        };
        ticket.wait_then(&mut rx, Phase::Upstream).await;
        ticket
    }
}

/// One in-flight request's place in the gate's registry; dropping it removes the entry.
#[derive(Debug)]
pub struct Ticket {
    gate: Arc<Gate>,
    id: u64,
}

impl Ticket {
    /// Names the call this request became.
    pub fn set_call(&self, call_id: &CallId) {
        if let Some(e) = self.gate.lock().entries.get_mut(&self.id) {
            e.call_id = Some(call_id.clone());
        }
    }

    async fn wait_then(&self, rx: &mut watch::Receiver<u64>, phase: Phase) {
        loop {
            {
                let mut inner = self.gate.lock();
                if inner.open {
                    if let Some(e) = inner.entries.get_mut(&self.id) {
                        e.phase = phase;
                    }
                    return;
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Marks the reply as delivering if the gate is open; false if it is closed.
    #[must_use]
    pub fn try_deliver(&self) -> bool {
        let mut inner = self.gate.lock();
        if !inner.open {
            return false;
        }
        if let Some(e) = inner.entries.get_mut(&self.id) {
            e.phase = Phase::Delivering;
        }
        true
    }

    /// Whether a delivering reply may go on now (gate open, or closed letting tails finish).
    #[must_use]
    pub fn tail_flows(&self) -> bool {
        self.gate.tails_flow.load(Ordering::SeqCst)
    }

    /// Waits until the gate is open, then marks the reply as delivering.
    pub async fn deliver(&self) {
        let mut rx = self.gate.changed.subscribe();
        self.wait_then(&mut rx, Phase::Delivering).await;
    }

    /// Waits, if the gate is closed with held tails, until it opens.
    pub async fn tail(&self) {
        if self.gate.tails_flow.load(Ordering::SeqCst) {
            return;
        }
        let mut rx = self.gate.changed.subscribe();
        loop {
            {
                let inner = self.gate.lock();
                if inner.open || inner.tails == TailPolicy::Finish {
                    return;
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let removed = self.gate.lock().entries.remove(&self.id);
        if removed.is_some_and(|e| e.phase == Phase::Delivering) {
            self.gate.bump();
        }
    }
}
