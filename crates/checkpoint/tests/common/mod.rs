//! A scriptable participant for the tests: records every hook call, holds
//! records per attempt key, and can be told to block, stall or fail.
#![allow(dead_code, reason = "each test file uses part of the fake")]
#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a poisoned lock is a test failure"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_checkpoint::{AttemptKey, HookError, HookResult, Kind, Participant, Readiness};
use serde_json::{Value, json};
use tokio::sync::Notify;

static SEQ: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Default)]
pub struct FakeState {
    pub open: bool,
    pub blockers: Vec<String>,
    pub restarts: Vec<String>,
    /// Records by attempt key.
    pub records: BTreeMap<String, Vec<Value>>,
    pub installed: Vec<Value>,
    pub retired: BTreeSet<String>,
    pub forgotten: BTreeSet<String>,
    pub parked: bool,
    pub calls: Vec<String>,
    /// Every call with a process-wide sequence number, to check the order
    /// across participants.
    pub ticks: Vec<(u64, String)>,
    pub export_delay: Option<Duration>,
    pub fail_install: bool,
    pub fail_open: bool,
    pub fail_close: bool,
}

#[derive(Debug)]
pub struct Fake {
    pub kind: Kind,
    pub instance: String,
    pub state: Mutex<FakeState>,
    pub changed: Notify,
}

impl Fake {
    pub fn new(kind: Kind, instance: &str) -> Arc<Self> {
        Arc::new(Self {
            kind,
            instance: instance.to_owned(),
            state: Mutex::new(FakeState {
                open: true,
                ..FakeState::default()
            }),
            changed: Notify::new(),
        })
    }

    /// A fake holding `n` records for each key in `keys`.
    pub fn with_records(kind: Kind, instance: &str, keys: &[AttemptKey], n: usize) -> Arc<Self> {
        let fake = Self::new(kind, instance);
        {
            let mut s = fake.state.lock().unwrap();
            for key in keys {
                let recs = (0..n)
                    .map(|i| json!({"key": key, "kind": kind.as_str(), "instance": instance, "seq": i}))
                    .collect();
                s.records.insert(key.to_string(), recs);
            }
        }
        fake
    }

    pub fn set<F: FnOnce(&mut FakeState)>(&self, f: F) {
        f(&mut self.state.lock().unwrap());
        self.changed.notify_waiters();
    }

    pub fn get<T, F: FnOnce(&FakeState) -> T>(&self, f: F) -> T {
        f(&self.state.lock().unwrap())
    }

    pub fn is_open(&self) -> bool {
        self.get(|s| s.open)
    }

    pub fn calls(&self) -> Vec<String> {
        self.get(|s| s.calls.clone())
    }

    fn log(&self, call: &str) {
        let tick = SEQ.fetch_add(1, Ordering::SeqCst);
        let mut s = self.state.lock().unwrap();
        s.calls.push(call.to_owned());
        s.ticks.push((tick, call.to_owned()));
    }

    /// The sequence number of this participant's first call starting with
    /// `prefix`.
    pub fn tick_of(&self, prefix: &str) -> Option<u64> {
        self.get(|s| {
            s.ticks
                .iter()
                .find(|(_, c)| c.starts_with(prefix))
                .map(|(t, _)| *t)
        })
    }
}

impl Participant for Fake {
    fn kind(&self) -> Kind {
        self.kind
    }

    fn instance(&self) -> String {
        self.instance.clone()
    }

    fn close_admission<'a>(&'a self, checkpoint: &'a str) -> BoxFuture<'a, HookResult<()>> {
        async move {
            self.log(&format!("close {checkpoint}"));
            let mut s = self.state.lock().unwrap();
            if s.fail_close {
                return Err(HookError::new("close refused"));
            }
            s.open = false;
            Ok(())
        }
        .boxed()
    }

    fn open_admission(&self) -> BoxFuture<'_, HookResult<()>> {
        async move {
            self.log("open");
            let mut s = self.state.lock().unwrap();
            if s.fail_open {
                return Err(HookError::new(format!("{} cannot reopen", self.instance)));
            }
            s.open = true;
            Ok(())
        }
        .boxed()
    }

    fn readiness(&self) -> BoxFuture<'_, Readiness> {
        async move {
            let s = self.state.lock().unwrap();
            Readiness::from_blockers(s.blockers.clone())
                .with_count("records", s.records.values().map(|v| v.len() as u64).sum())
                .with_restarts(s.restarts.iter().map(|k| key(k)).collect())
        }
        .boxed()
    }

    fn changed(&self) -> BoxFuture<'_, ()> {
        self.changed.notified().boxed()
    }

    fn export<'a>(
        &'a self,
        checkpoint: &'a str,
        scope: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<Value>>> {
        async move {
            self.log(&format!("export {checkpoint}"));
            let delay = self.get(|s| s.export_delay);
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            let s = self.state.lock().unwrap();
            Ok(scope
                .iter()
                .flat_map(|k| s.records.get(&k.to_string()).cloned().unwrap_or_default())
                .collect())
        }
        .boxed()
    }

    fn park_exported(&self) -> BoxFuture<'_, HookResult<()>> {
        async move {
            self.log("park");
            self.state.lock().unwrap().parked = true;
            Ok(())
        }
        .boxed()
    }

    fn install<'a>(
        &'a self,
        checkpoint: &'a str,
        records: Vec<Value>,
        scope: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            self.log(&format!("install {checkpoint}"));
            let mut s = self.state.lock().unwrap();
            if s.fail_install {
                return Err(HookError::new(format!(
                    "{}: install refused",
                    self.instance
                )));
            }
            s.installed.extend(records);
            Ok(scope.iter().map(AttemptKey::next).collect())
        }
        .boxed()
    }

    fn fork<'a>(
        &'a self,
        checkpoint: &'a str,
        records: Vec<Value>,
        from: &'a AttemptKey,
        to: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            self.log(&format!("fork {checkpoint} {from}"));
            let mut s = self.state.lock().unwrap();
            if s.fail_install {
                return Err(HookError::new(format!("{}: fork refused", self.instance)));
            }
            for _ in to {
                s.installed.extend(records.iter().cloned());
            }
            Ok(to.iter().map(AttemptKey::next).collect())
        }
        .boxed()
    }

    fn retire<'a>(&'a self, keys: &'a [AttemptKey]) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            self.log("retire");
            self.state
                .lock()
                .unwrap()
                .retired
                .extend(keys.iter().map(ToString::to_string));
            Ok(keys.to_vec())
        }
        .boxed()
    }

    fn forget<'a>(&'a self, keys: &'a [AttemptKey]) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            self.log("forget");
            let mut s = self.state.lock().unwrap();
            for k in keys {
                s.retired.remove(&k.to_string());
                s.forgotten.insert(k.to_string());
            }
            Ok(keys.to_vec())
        }
        .boxed()
    }
}

pub fn keys(n: usize) -> Vec<AttemptKey> {
    (0..n).map(|i| key(&format!("r{i}"))).collect()
}

/// The attempt key written `text`.
pub fn key(text: &str) -> AttemptKey {
    AttemptKey::parse(text).unwrap()
}

pub const TOKEN: &str = "s3cret-token";

/// Serves `control` on 127.0.0.1:0; returns its base URL.
pub async fn serve(control: Arc<dyn rollpoint_checkpoint::ParticipantApi>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let _ended = rollpoint_checkpoint::serve(listener, control, TOKEN).await;
    });
    format!("http://{addr}")
}

/// Participants over fakes and a coordinator driving them.
pub struct Rig {
    pub fakes: Vec<Arc<Fake>>,
    pub controls: Vec<Arc<dyn rollpoint_checkpoint::ParticipantApi>>,
    pub coordinator: rollpoint_checkpoint::Coordinator,
}

/// A coordinator over `fakes`, each a participant writing under `run` (over real HTTP on
/// 127.0.0.1 when `http`), all on checkpoint store `remote` when one is given.
pub async fn rig(
    run: &std::path::Path,
    fakes: Vec<Arc<Fake>>,
    http: bool,
    timeout: Duration,
    remote: Option<&rollpoint_remote::RemoteStore>,
) -> Rig {
    use rollpoint_checkpoint::{
        Coordinator, CoordinatorConfig, HostConfig, HttpParticipant, ParticipantApi,
        ParticipantHost,
    };
    let mut controls: Vec<Arc<dyn ParticipantApi>> = Vec::new();
    for fake in &fakes {
        let host = HostConfig {
            remote: remote.cloned(),
            ..HostConfig::new(run)
        };
        let local = ParticipantHost::new(fake.clone(), host).expect("control");
        if http {
            let base = serve(Arc::new(local)).await;
            controls.push(Arc::new(
                HttpParticipant::new(&base, TOKEN).expect("client"),
            ));
        } else {
            controls.push(Arc::new(local));
        }
    }
    let mut config = CoordinatorConfig::new(run);
    config.timeout = timeout;
    config.remote = remote.cloned();
    let coordinator = Coordinator::new(controls.clone(), config)
        .await
        .expect("coordinator");
    Rig {
        fakes,
        controls,
        coordinator,
    }
}

/// Every participant idle and every fake open again.
pub async fn all_idle(rig: &Rig) {
    for c in &rig.controls {
        let status = c.status().await.expect("status");
        assert_eq!(
            status.phase,
            rollpoint_checkpoint::Phase::Idle,
            "{}/{}",
            status.kind,
            status.instance
        );
    }
    for f in &rig.fakes {
        assert!(f.is_open(), "{} left closed", f.instance);
    }
}

/// A checkpoint `id` of `scope`.
pub fn plan(id: &str, scope: Vec<AttemptKey>) -> rollpoint_checkpoint::coordinator::Plan {
    rollpoint_checkpoint::coordinator::Plan {
        id: id.to_owned(),
        scope,
        continues: None,
        stop: false,
    }
}
