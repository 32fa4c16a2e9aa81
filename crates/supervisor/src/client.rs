//! The clients: `pause`, `continue`, `stop` and `status` of a session.
//!
//! They ask the supervisor over its control socket. When none answers (it
//! was killed, or the sandbox only offers "run a command"), they act
//! themselves on the launch found by its tag and cgroups, and keep what a
//! pause froze in the session directory so the next continue undoes exactly
//! that.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use rollpoint_proctree::{Control, Launch, MemberSpec, Paused, ProcId};
use rollpoint_proto::control::{CONTROL_SOCKET, CONTROL_VERSION, Reply, Request, Verb};
use rollpoint_proto::receipt::{Op, Outcome, Receipt};
use rollpoint_proto::session::FALLBACK_PAUSE_FILE;

use crate::args::ClientOpts;
use crate::errors::Error;
use crate::files::write_json;
use crate::server::ended_receipt;
use crate::session::read_record;

pub fn client(opts: &ClientOpts) -> Result<i32, Error> {
    let socket = opts.session.join(CONTROL_SOCKET);
    let reply = match UnixStream::connect(&socket) {
        Ok(stream) => ask(&socket, stream, opts.verb)?,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            fallback(opts)?
        }
        Err(source) => return Err(Error::Socket { path: socket, source }),
    };
    let text = serde_json::to_string_pretty(&reply).map_err(|e| Error::Encode {
        path: opts.session.clone(),
        source: e,
    })?;
    println!("{text}");
    let ok = reply.error.is_none()
        && reply.receipt.as_ref().is_none_or(|r| {
            matches!(r.outcome, Outcome::Confirmed | Outcome::AlreadyEnded)
        });
    Ok(if ok { 0 } else { 1 })
}

fn ask(path: &Path, mut stream: UnixStream, verb: Verb) -> Result<Reply, Error> {
    let io = |source| Error::Socket { path: path.to_owned(), source };
    let mut line = serde_json::to_vec(&Request::new(verb)).map_err(|e| Error::Encode {
        path: path.to_owned(),
        source: e,
    })?;
    line.push(b'\n');
    stream.write_all(&line).map_err(io)?;
    let mut reply = Vec::new();
    BufReader::new(&stream).read_until(b'\n', &mut reply).map_err(io)?;
    Reply::decode(&reply).map_err(|source| Error::Format { path: path.to_owned(), source })
}

fn fallback(opts: &ClientOpts) -> Result<Reply, Error> {
    let record = read_record(&opts.session)?;
    let op = match opts.verb {
        Verb::Status => None,
        Verb::Pause => Some(Op::Pause),
        Verb::Continue => Some(Op::Continue),
        Verb::Stop => Some(Op::Stop),
    };
    let receipt = match op {
        None => None,
        Some(op) => Some(match ended_receipt(op, &record) {
            Some(r) => r,
            None => act(opts, op, &record)?,
        }),
    };
    Ok(Reply {
        v: CONTROL_VERSION,
        launch: Some(record),
        receipt,
        error: None,
    })
}

fn act(
    opts: &ClientOpts,
    op: Op,
    record: &rollpoint_proto::launch::LaunchRecord,
) -> Result<Receipt, Error> {
    let existing = |p: &Option<String>| p.as_ref().map(PathBuf::from).filter(|d| d.is_dir());
    let launch = Launch {
        id: record.launch_id.clone(),
        spec: MemberSpec {
            roots: Vec::new(),
            include_roots: false,
            tag: Some(record.launch_id.clone()),
            exclude: Vec::new(),
        },
        cgroup_v2: existing(&record.cgroup_v2),
        cgroup_v1: existing(&record.cgroup_v1_freezer),
    };
    let mut control = Control::new(launch, opts.strategy, opts.budgets)?;
    let saved = opts.session.join(FALLBACK_PAUSE_FILE);
    Ok(match op {
        Op::Pause => {
            let receipt = control.pause();
            if let Some(p) = control.paused() {
                save_pause(&saved, p)?;
            }
            receipt
        }
        Op::Continue => {
            if let Some(p) = load_pause(&saved)? {
                control.adopt_pause(p);
            }
            let receipt = control.resume();
            if receipt.confirmed() {
                let _ = std::fs::remove_file(&saved);
            }
            receipt
        }
        Op::Stop | Op::Cleanup => {
            let receipt = control.stop();
            let _ = std::fs::remove_file(&saved);
            receipt
        }
    })
}

const FALLBACK_PAUSE_VERSION: u64 = 1;

fn ids(v: &[ProcId]) -> serde_json::Value {
    v.iter().map(|i| serde_json::json!([i.pid, i.start_time])).collect()
}

fn save_pause(path: &Path, p: &Paused) -> Result<(), Error> {
    let pre: Vec<ProcId> = p.pre_stopped.iter().copied().collect();
    let doc = serde_json::json!({
        "v": FALLBACK_PAUSE_VERSION,
        "cgroup": p.cgroup,
        "signalled": ids(&p.signalled),
        "pre_stopped": ids(&pre),
    });
    write_json(path, &doc)
}

fn load_pause(path: &Path) -> Result<Option<Paused>, Error> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(Error::Read { path: path.to_owned(), source }),
    };
    let bad = |what: &str| Error::Usage(format!("{}: {what}", path.display()));
    let doc: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| bad("not valid JSON"))?;
    match doc.get("v").and_then(serde_json::Value::as_u64) {
        Some(FALLBACK_PAUSE_VERSION) => {}
        Some(v) => return Err(bad(&format!("unknown version {v}"))),
        None => return Err(bad("field `v` is missing")),
    }
    let list = |field: &str| -> Result<Vec<ProcId>, Error> {
        doc.get(field)
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| bad(&format!("field `{field}` is missing")))?
            .iter()
            .map(|pair| {
                let pid = pair.get(0).and_then(serde_json::Value::as_u64);
                let st = pair.get(1).and_then(serde_json::Value::as_u64);
                match (pid.and_then(|p| u32::try_from(p).ok()), st) {
                    (Some(pid), Some(start_time)) => Ok(ProcId { pid, start_time }),
                    _ => Err(bad(&format!("field `{field}`: expected [pid, start_time] pairs"))),
                }
            })
            .collect()
    };
    Ok(Some(Paused {
        cgroup: doc
            .get("cgroup")
            .and_then(serde_json::Value::as_bool)
            .ok_or_else(|| bad("field `cgroup` is missing"))?,
        signalled: list("signalled")?,
        pre_stopped: list("pre_stopped")?.into_iter().collect::<HashSet<_>>(),
    }))
}
