//! The control socket: one JSON request line in, one JSON reply line out.
//!
//! Requests are served one at a time (pause, continue and stop of one launch
//! must not interleave). The reaper never waits for this lock: the launch
//! record, and with it `ended`, has its own.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rollpoint_proctree::Freezer;
use rollpoint_proto::launch::LaunchRecord;
use rollpoint_proto::receipt::{Op, Outcome, Receipt};
use rollpoint_proto::supervisor::{Reply, Request, SUPERVISOR_VERSION, Verb};

use crate::session::Session;

/// Largest request line accepted.
const MAX_REQUEST: u64 = 64 * 1024;

#[derive(Debug)]
pub struct Shared {
    pub session: Session,
    pub control: Mutex<Option<Freezer>>,
    /// A stop arrived before the harness started: it never starts.
    pub stop_requested: AtomicBool,
    /// Requests being answered; the supervisor waits for them before it
    /// exits, so no client loses its reply.
    in_flight: AtomicUsize,
}

impl Shared {
    pub fn new(session: Session) -> Self {
        Self {
            session,
            control: Mutex::new(None),
            stop_requested: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Accepts connections until the listener fails.
    pub fn serve(self: Arc<Self>, listener: UnixListener) {
        for stream in listener.incoming() {
            match stream {
                Ok(stream) => {
                    if let Err(e) = self.answer(stream) {
                        eprintln!("rollpoint-supervisor: control request failed: {e}");
                    }
                }
                Err(e) => {
                    eprintln!("rollpoint-supervisor: control socket accept failed: {e}");
                    return;
                }
            }
        }
    }

    /// Waits (up to `budget`) for requests being answered to finish.
    pub fn drain_requests(&self, budget: Duration) {
        let end = std::time::Instant::now() + budget;
        while self.in_flight.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn answer(&self, stream: UnixStream) -> std::io::Result<()> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let result = self.answer_one(&stream);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        result
    }

    fn answer_one(&self, stream: &UnixStream) -> std::io::Result<()> {
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut line = Vec::new();
        BufReader::new(stream.take(MAX_REQUEST)).read_until(b'\n', &mut line)?;
        let reply = match Request::decode(&line) {
            Ok(req) => self.perform(req.verb),
            Err(e) => Reply {
                v: SUPERVISOR_VERSION,
                launch: None,
                receipt: None,
                error: Some(e.to_string()),
            },
        };
        let mut out = serde_json::to_vec(&reply).map_err(std::io::Error::other)?;
        out.push(b'\n');
        let mut stream = stream;
        stream.write_all(&out)
    }

    /// Carries out one verb and writes its receipt.
    pub fn perform(&self, verb: Verb) -> Reply {
        let receipt = self.act(verb);
        let mut error = None;
        if let Some(r) = &receipt
            && let Err(e) = self.session.write_receipt(r)
        {
            error = Some(e.to_string());
        }
        Reply {
            v: SUPERVISOR_VERSION,
            launch: Some(self.session.record()),
            receipt,
            error,
        }
    }

    fn act(&self, verb: Verb) -> Option<Receipt> {
        let op = match verb {
            Verb::Status => return None,
            Verb::Pause => Op::Pause,
            Verb::Continue => Op::Continue,
            Verb::Stop => Op::Stop,
        };
        let record = self.session.record();
        if let Some(r) = ended_receipt(op, &record) {
            return Some(r);
        }
        let mut guard = self
            .control
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(control) = guard.as_mut() else {
            // Not started yet: a stop keeps it from ever starting; a pause
            // or continue has nothing to act on (the pause file holds it).
            if op == Op::Stop {
                self.stop_requested.store(true, Ordering::SeqCst);
            }
            return Some(Receipt::no_action(
                op,
                &record.launch_id,
                Outcome::NotRunning,
                None,
            ));
        };
        // The harness may have ended while we waited for the lock.
        if let Some(r) = ended_receipt(op, &self.session.record()) {
            return Some(r);
        }
        Some(match op {
            Op::Pause => control.pause(),
            Op::Continue => control.continue_frozen(),
            Op::Stop | Op::Cleanup => control.stop(),
        })
    }
}

/// For a launch whose harness already returned: its result stands and
/// nothing is paused or stopped (cleanup handles what it left).
pub fn ended_receipt(op: Op, record: &LaunchRecord) -> Option<Receipt> {
    let ended = record.ended.as_ref()?;
    Some(Receipt::no_action(
        op,
        &record.launch_id,
        Outcome::AlreadyEnded,
        ended.exit_code,
    ))
}
