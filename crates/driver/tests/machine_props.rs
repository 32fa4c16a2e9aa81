//! Property tests of the pure stage machine against a simulated world (owner,
//! supervisor, harness, checkpoints). For every effect of a run, a crash
//! right after it and a continuation from the last recorded bookmark reach
//! the same result, no stage before that bookmark runs again, every recorded
//! bookmark survives its wire format, and restarts are never parked.

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;
use rollpoint_driver::machine::{Effect, Event, Machine, PauseOutcome, Setup};
use rollpoint_driver::{Bookmark, Collected, Next, RolloutResult, Status, VerifyMode};
use rollpoint_owner::Verdict;

const STEPS: u32 = 5;

/// What the world does at the next point where it has a choice.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// The harness finishes.
    Finish,
    /// A checkpoint comes while the launch runs; the pause goes `pause` and
    /// the continue succeeds when `continues`.
    Park { pause: Pause, continues: bool },
    /// A checkpoint comes while an owner call is in flight.
    ParkEarly { held: bool },
}

#[derive(Debug, Clone, Copy)]
enum Pause {
    Confirmed,
    AlreadyEnded,
    Failed,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Finish),
        (
            prop_oneof![
                Just(Pause::Confirmed),
                Just(Pause::AlreadyEnded),
                Just(Pause::Failed)
            ],
            any::<bool>()
        )
            .prop_map(|(pause, continues)| Op::Park { pause, continues }),
        any::<bool>().prop_map(|held| Op::ParkEarly { held }),
    ]
}

#[derive(Debug, Clone, Copy)]
struct Cfg {
    capturable: bool,
    pauses: bool,
}

/// One effect as it happened, with the attempt that asked for it.
#[derive(Debug, Clone)]
struct Done {
    attempt: u32,
    kind: &'static str,
}

#[derive(Debug, Default)]
struct World {
    /// Harness steps saved in the session.
    work: u32,
    sandbox: u32,
    launch_ids: HashSet<String>,
    history: Vec<Done>,
    /// A launch started while a park was asked is held by the pause file
    /// (else it was already running and is paused).
    held: bool,
    /// The park being served: how its pause and continue go.
    pending: Option<(Pause, bool)>,
}

fn kind(e: &Effect) -> &'static str {
    match e {
        Effect::RecordBookmark(_) => "record",
        Effect::Seed => "seed",
        Effect::Access { .. } => "access",
        Effect::ResumeDecision { .. } => "decide",
        Effect::Launch { .. } => "launch",
        Effect::Wait { .. } => "wait",
        Effect::Pause { .. } => "pause",
        Effect::Continue { .. } => "continue",
        Effect::Stop { .. } => "stop",
        Effect::Park(_) => "park",
        Effect::Verify { .. } => "verify",
        Effect::CloseSession { .. } => "close",
        Effect::StopSandbox { .. } => "stop_sandbox",
        Effect::Return(_) => "return",
    }
}

struct Outcome {
    result: RolloutResult,
    history: Vec<Done>,
    /// The bookmark continued from, when a crash happened.
    crashed_at: Option<Bookmark>,
    effects: usize,
}

fn verdict(reward: f64) -> Verdict {
    Verdict {
        reward,
        exit_code: Some(0),
        passed: reward > 0.0,
        timed_out: false,
        reward_error: None,
        rewards: Default::default(),
        cleanup_error: None,
        stdout_tail: String::new(),
        stderr_tail: String::new(),
    }
}

impl World {
    /// Carries out one action; returns its event and, for the runner's
    /// in-flight park requests, whether one is fed first.
    fn perform(
        &mut self,
        e: &Effect,
        ops: &mut std::iter::Peekable<impl Iterator<Item = Op>>,
        cfg: Cfg,
        wants_park: bool,
    ) -> Event {
        match e {
            Effect::Seed => {
                self.sandbox += 1;
                Event::Seeded {
                    session: "s1".into(),
                    sandbox: format!("sb{}", self.sandbox),
                    workdir: "/w".into(),
                    capturable: cfg.capturable,
                    cookies: BTreeMap::new(),
                    state: serde_json::json!({"dir": "/w/.h"}),
                }
            }
            Effect::Access { .. } => Event::Accessed {
                sandbox: format!("sb{}", self.sandbox),
                workdir: "/w".into(),
            },
            Effect::ResumeDecision { .. } => Event::Decided {
                resume: self.work > 0,
                reason: format!("{} steps saved", self.work),
            },
            Effect::Launch {
                launch_id, resume, ..
            } => {
                assert!(
                    self.launch_ids.insert(launch_id.clone()),
                    "launch id {launch_id} reused"
                );
                if !resume {
                    self.work = 0;
                }
                self.work = (self.work + 1).min(STEPS);
                Event::Launched {
                    launch_id: launch_id.clone(),
                    tier: Some(rollpoint_driver::launchlog::RecoveryTier::Exact),
                }
            }
            // A restart gets no park requests: the runner never asks.
            Effect::Wait { .. } => match ops
                .find(|o| wants_park || matches!(o, Op::Finish))
                .unwrap_or(Op::Finish)
            {
                Op::Finish => {
                    self.work = STEPS;
                    Event::Ended { exit_code: Some(0) }
                }
                Op::Park { pause, continues } => {
                    self.pending = Some((pause, continues));
                    self.work = (self.work + 1).min(STEPS);
                    Event::ParkRequested
                }
                Op::ParkEarly { .. } => {
                    self.pending = Some((Pause::Confirmed, true));
                    Event::ParkRequested
                }
            },
            Effect::Pause { hold, .. } => {
                let (pause, _) = self.pending.unwrap_or((Pause::Confirmed, true));
                Event::Paused(match pause {
                    Pause::Confirmed if *hold && self.held => PauseOutcome::Held,
                    Pause::Confirmed => PauseOutcome::Confirmed,
                    Pause::AlreadyEnded => {
                        self.work = STEPS;
                        PauseOutcome::AlreadyEnded { exit_code: Some(0) }
                    }
                    Pause::Failed => PauseOutcome::Failed {
                        reason: "pid 7 in D".into(),
                    },
                })
            }
            Effect::Park(_) => Event::Opened,
            Effect::Continue { .. } => {
                let continues = self.pending.take().is_none_or(|(_, c)| c);
                Event::Continued {
                    error: (!continues).then(|| "pid 7 is gone".to_owned()),
                }
            }
            Effect::Stop { .. } => {
                self.pending = None;
                Event::Stopped {
                    ended_on_its_own: false,
                    exit_code: None,
                    confirmed: true,
                    reason: None,
                }
            }
            Effect::Verify { .. } => Event::Verified {
                verdict: Some(verdict(if self.work >= STEPS { 1.0 } else { 0.0 })),
                collected: Collected {
                    usage: None,
                    response: Some(format!("work {}", self.work)),
                    transcript: Vec::new(),
                },
            },
            Effect::CloseSession { .. } | Effect::StopSandbox { .. } => {
                Event::Closed { error: None }
            }
            Effect::RecordBookmark(_) | Effect::Return(_) => unreachable!("not an action"),
        }
    }
}

fn setup(cfg: Cfg) -> Setup {
    Setup {
        task_id: "t".into(),
        checkpointing: true,
        pauses: cfg.pauses,
        verify_mode: VerifyMode::Owner,
    }
}

/// Runs a rollout; with `crash_after = Some(k)` the driver dies right after
/// its k-th effect and a new machine continues from the last bookmark.
fn run(cfg: Cfg, ops: &[Op], crash_after: Option<usize>) -> Outcome {
    let mut world = World::default();
    let mut ops = ops.iter().copied().peekable();
    let mut attempt = 0;
    let mut machine = Machine::new(setup(cfg), Bookmark::seed("r", 0, 1000), 0);
    let mut now = 1000;
    let mut recorded = Bookmark::seed("r", 0, 1000);
    let mut crash = crash_after;
    let mut crashed_at = None;
    let mut effects = machine.step(now, Event::Start);
    let mut count = 0;
    for _ in 0..10_000 {
        now += 10;
        let actions = effects
            .iter()
            .filter(|e| !matches!(e, Effect::RecordBookmark(_)))
            .count();
        assert!(actions <= 1, "one action per step: {effects:?}");
        let mut next = None;
        let mut event = None;
        for e in std::mem::take(&mut effects) {
            count += 1;
            world.history.push(Done {
                attempt,
                kind: kind(&e),
            });
            match &e {
                Effect::RecordBookmark(b) => {
                    let bytes = b.encode();
                    let back = Bookmark::decode(&bytes)
                        .unwrap_or_else(|err| panic!("recorded bookmark does not decode: {err}"));
                    assert_eq!(&back, b);
                    if !cfg.capturable {
                        assert_eq!(b.next(), Next::Seed, "a restart's bookmark is its seed");
                    }
                    recorded = back;
                }
                Effect::Return(r) => {
                    return Outcome {
                        result: (**r).clone(),
                        history: world.history,
                        crashed_at,
                        effects: count,
                    };
                }
                other => {
                    if !cfg.capturable {
                        assert!(
                            !matches!(other, Effect::Park(_) | Effect::Pause { .. }),
                            "a restart is never parked"
                        );
                    }
                    event = Some(world.perform(other, &mut ops, cfg, machine.wants_park()));
                    next = Some(other.clone());
                }
            }
            if crash == Some(count) {
                crash = None;
                crashed_at = Some(recorded.clone());
                attempt += 1;
                machine = Machine::new(setup(cfg), recorded.clone(), attempt);
                world.pending = None;
                next = None;
                event = None;
                effects = machine.step(now, Event::Start);
                break;
            }
        }
        let (Some(action), Some(event)) = (next, event) else {
            assert!(
                !effects.is_empty(),
                "the machine stopped without returning: {machine:?}"
            );
            continue;
        };
        // The runner feeds a park request that came during an owner call
        // before that call's event.
        if !matches!(action, Effect::Wait { .. } | Effect::Park(_))
            && machine.wants_park()
            && let Some(Op::ParkEarly { held }) = ops.peek().copied()
        {
            ops.next();
            world.held = held;
            effects.extend(machine.step(now, Event::ParkRequested));
            assert!(
                effects.is_empty(),
                "a park during an action only sets a flag"
            );
        }
        effects.extend(machine.step(now, event));
    }
    panic!("the run did not end");
}

fn cfg() -> impl Strategy<Value = Cfg> {
    (any::<bool>(), any::<bool>()).prop_map(|(capturable, pauses)| Cfg { capturable, pauses })
}

/// Side effects the continuation may not repeat, by the bookmark it
/// continued from.
fn forbidden(next: Next) -> &'static [&'static str] {
    match next {
        Next::Seed => &[],
        Next::Harness => &["seed"],
        Next::Verify => &["seed", "launch", "pause", "continue", "stop"],
        Next::Return => &[
            "seed",
            "launch",
            "pause",
            "continue",
            "stop",
            "verify",
            "close",
            "stop_sandbox",
        ],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_crash_after_any_effect_reaches_the_same_result(
        cfg in cfg(),
        ops in proptest::collection::vec(op(), 0..6),
    ) {
        let clean = run(cfg, &ops, None);
        prop_assert_eq!(clean.result.status, Status::Verified);
        prop_assert_eq!(clean.result.reward, Some(1.0));
        prop_assert_eq!(clean.result.restart, !cfg.capturable);
        prop_assert_eq!(
            clean.history.iter().filter(|d| d.kind == "seed").count(), 1
        );
        let kinds: Vec<&str> = clean.history.iter().map(|d| d.kind).collect();
        if cfg.capturable && matches!(ops.first(), Some(Op::Park { .. })) {
            prop_assert!(
                kinds.contains(&if cfg.pauses { "pause" } else { "stop" }),
                "a park while the launch runs pauses or stops it: {:?}", kinds
            );
        }
        if cfg.capturable && matches!(ops.first(), Some(Op::ParkEarly { .. })) {
            prop_assert!(kinds.contains(&"park"), "an early park parks: {:?}", kinds);
        }
        for k in 1..=clean.effects {
            let crashed = run(cfg, &ops, Some(k));
            let r = &crashed.result;
            prop_assert_eq!(r.status, clean.result.status, "crash after effect {}", k);
            prop_assert_eq!(r.reward, clean.result.reward, "crash after effect {}", k);
            prop_assert!(r.launches.iter().all(|l| l.end.is_some()));
            let Some(mark) = crashed.crashed_at else { continue };
            let after: Vec<&str> = crashed
                .history
                .iter()
                .filter(|d| d.attempt == 1)
                .map(|d| d.kind)
                .collect();
            for kind in forbidden(mark.next()) {
                prop_assert!(
                    !after.contains(kind),
                    "crash after effect {} at `{:?}`: `{}` ran again: {:?}",
                    k, mark.next(), kind, after
                );
            }
            // Seed runs twice only when the crash came before the harness
            // bookmark; verify only when it came at verify.
            let seeds = crashed.history.iter().filter(|d| d.kind == "seed").count();
            prop_assert!(seeds <= 1 || mark.next() == Next::Seed);
            let verifies = crashed.history.iter().filter(|d| d.kind == "verify").count();
            prop_assert!(verifies <= 1 || matches!(mark.next(), Next::Verify | Next::Seed));
        }
    }
}
