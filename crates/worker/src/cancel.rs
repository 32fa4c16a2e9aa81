//! SIGTERM and SIGINT: stop at once. A thread waits for the signals (blocked everywhere else);
//! on one it takes the run from the loop, kills the running tool's process group, writes a
//! `cancelled` result holding every completed step plus the running tool's output so far
//! (marked incomplete), and exits. The checkpoint keeps its last boundary: a pending tool
//! output never enters it.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, killpg};

use crate::engine::{Engine, Phase, exit, write_result};
use crate::result::{self, ErrorKind, RunError, Termination, Unfinished};

/// How long a cancellation waits for the killed tool's output to drain.
const DRAIN_WAIT: Duration = Duration::from_millis(500);

/// Starts the signal thread. `signals` must already be blocked in every thread.
pub(crate) fn watch(engine: Arc<Engine>, signals: SigSet) {
    std::thread::spawn(move || {
        loop {
            let Ok(signal) = signals.wait() else {
                continue;
            };
            cancel(&engine, signal);
        }
    });
}

fn cancel(engine: &Engine, signal: Signal) {
    // Held until the process exits: the loop never touches the state or the journal again,
    // and any append or compaction in progress has finished.
    let mut shared = engine.shared.lock().unwrap_or_else(PoisonError::into_inner);
    if shared.phase == Phase::Finishing {
        // The loop is already writing the normal result.
        return;
    }
    shared.phase = Phase::Cancelling;
    // Also held until exit: the group id cannot be released (reaped) and reused meanwhile.
    let group = engine
        .running_group
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(pgid) = *group {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
    let unfinished = shared.running.as_ref().map(|r| {
        // The group is dead, so the pipe ends soon: take what it still held, briefly.
        let began = Instant::now();
        loop {
            let output = r.output.lock().unwrap_or_else(PoisonError::into_inner);
            if output.is_closed() || began.elapsed() >= DRAIN_WAIT {
                break Unfinished {
                    call_id: r.call_id.clone(),
                    output: output.render(),
                };
            }
            drop(output);
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let result = result::build(
        &shared.state,
        Termination::Cancelled,
        Some(RunError::new(
            ErrorKind::Cancelled,
            format!("stopped by {signal}"),
        )),
        unfinished.as_ref(),
        shared.stats,
    );
    let code = if write_result(&engine.result_path, &result) {
        exit::CANCELLED
    } else {
        exit::NO_RESULT
    };
    std::process::exit(code);
}
