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

use rollpoint_proctree::{Freezer, Launch, MemberSpec, Paused, ProcId};
use rollpoint_proto::receipt::{Op, Outcome, Receipt};
use rollpoint_proto::session::{
    FALLBACK_PAUSE_FILE, FALLBACK_PAUSE_VERSION, FallbackPause, Identity,
};
use rollpoint_proto::supervisor::{Reply, Request, SUPERVISOR_SOCKET, SUPERVISOR_VERSION, Verb};

use crate::args::ClientOpts;
use crate::errors::Error;
use crate::files::write_json;
use crate::server::ended_receipt;
use crate::session::read_record;

pub fn client(opts: &ClientOpts) -> Result<i32, Error> {
    let socket = opts.session.join(SUPERVISOR_SOCKET);
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
        Err(source) => {
            return Err(Error::Socket {
                path: socket,
                source,
            });
        }
    };
    let text = serde_json::to_string_pretty(&reply).map_err(|e| Error::Encode {
        path: opts.session.clone(),
        source: e,
    })?;
    println!("{text}");
    let ok = reply.error.is_none()
        && reply
            .receipt
            .as_ref()
            .is_none_or(|r| matches!(r.outcome, Outcome::Confirmed | Outcome::AlreadyEnded));
    Ok(if ok { 0 } else { 1 })
}

fn ask(path: &Path, mut stream: UnixStream, verb: Verb) -> Result<Reply, Error> {
    let io = |source| Error::Socket {
        path: path.to_owned(),
        source,
    };
    let mut line = serde_json::to_vec(&Request::new(verb)).map_err(|e| Error::Encode {
        path: path.to_owned(),
        source: e,
    })?;
    line.push(b'\n');
    stream.write_all(&line).map_err(io)?;
    let mut reply = Vec::new();
    BufReader::new(&stream)
        .read_until(b'\n', &mut reply)
        .map_err(io)?;
    Reply::decode(&reply).map_err(|source| Error::Format {
        path: path.to_owned(),
        source,
    })
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
        v: SUPERVISOR_VERSION,
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
    let mut control = Freezer::new(launch.clone(), opts.strategy, opts.budgets)?;
    let saved = opts.session.join(FALLBACK_PAUSE_FILE);
    Ok(match op {
        Op::Pause => {
            let receipt = control.pause();
            if let Some(p) = control.paused() {
                write_json(&saved, &to_record(p))?;
            }
            receipt
        }
        Op::Continue => {
            if let Some(p) = load_pause(&saved)? {
                control.adopt_pause(p);
            }
            let receipt = control.continue_frozen();
            if receipt.confirmed() {
                let _ = std::fs::remove_file(&saved);
            }
            receipt
        }
        Op::Stop | Op::Cleanup => {
            let receipt = control.stop();
            let _ = std::fs::remove_file(&saved);
            if receipt.cleanup_confirmed == Some(true) {
                // The supervisor that made them is gone: remove its cgroups.
                for dir in [&launch.cgroup_v2, &launch.cgroup_v1].into_iter().flatten() {
                    if let Err(e) = rollpoint_proctree::cgroup::remove(dir) {
                        eprintln!("rollpoint-supervisor: {e}");
                    }
                }
            }
            receipt
        }
    })
}

fn to_record(p: &Paused) -> FallbackPause {
    let ids = |v: &mut dyn Iterator<Item = &ProcId>| {
        v.map(|i| Identity {
            pid: i.pid,
            start_time: i.start_time,
        })
        .collect()
    };
    FallbackPause {
        v: FALLBACK_PAUSE_VERSION,
        cgroup: p.cgroup,
        signalled: ids(&mut p.signalled.iter()),
        pre_stopped: ids(&mut p.pre_stopped.iter()),
    }
}

fn load_pause(path: &Path) -> Result<Option<Paused>, Error> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let record = FallbackPause::decode(&bytes).map_err(|source| Error::Format {
        path: path.to_owned(),
        source,
    })?;
    let id = |i: &Identity| ProcId {
        pid: i.pid,
        start_time: i.start_time,
    };
    Ok(Some(Paused {
        cgroup: record.cgroup,
        signalled: record.signalled.iter().map(id).collect(),
        pre_stopped: record.pre_stopped.iter().map(id).collect::<HashSet<_>>(),
    }))
}
