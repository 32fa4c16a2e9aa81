//! Seeding a session: a sandbox made, the task's files uploaded, its setup run; on any failure the
//! sandbox is destroyed before the error is returned.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rollpoint_proto::anchor::ExecRequest;
use rollpoint_sandbox::{Backend, SandboxInfo};
use tokio::sync::OwnedSemaphorePermit;

use super::{LocalOwner, OUTPUT_LIMIT, SETUP_TAIL, Session, TASK_FILE_MODE};
use crate::errors::OwnerError;
use crate::owner::{OwnerResult, SessionInfo};
use crate::task::OwnerTask;
use crate::verdict::tail;

impl LocalOwner {
    pub(super) async fn create_session_impl(&self, task: OwnerTask) -> OwnerResult<SessionInfo> {
        task.validate()?;
        let attempt = task.attempt()?;
        let _seed = self.admit_seed().await;
        let turn = self.start_turn().await;
        // Bounded, so sandbox and snapshot ids fit the store (`SESSION_STEM`).
        let stem = &task.id[..task.id.len().min(rollpoint_proto::limits::SESSION_STEM)];
        let session = format!("{stem}-{}", self.nonce());
        let sandbox = format!("{session}.{}", self.nonce());
        let task = Arc::new(task);
        let info = {
            let (name, sandbox, task) = (session.clone(), sandbox.clone(), Arc::clone(&task));
            let backend = Arc::clone(&self.backend);
            tokio::task::spawn_blocking(move || {
                seed(backend.as_ref(), &name, &sandbox, &task, turn)
            })
            .await
            .map_err(|source| OwnerError::Join {
                session: session.clone(),
                call: "seed",
                source,
            })??
        };
        let out = SessionInfo {
            session: session.clone(),
            sandbox: info.id.clone(),
            workdir: info.spec.workdir.clone(),
            capturable: task.capture,
        };
        self.sessions().insert(
            session,
            Session {
                task,
                attempt,
                sandbox: info,
                records: HashMap::new(),
            },
        );
        Ok(out)
    }
}

/// Creates the sandbox, uploads the task's files and runs its setup; on any
/// failure the sandbox is destroyed before the error is returned.
fn seed(
    backend: &dyn Backend,
    session: &str,
    sandbox: &str,
    task: &OwnerTask,
    turn: Option<OwnedSemaphorePermit>,
) -> OwnerResult<SandboxInfo> {
    let backend_err = |source| OwnerError::backend(session, sandbox, source);
    let info = backend
        .create(sandbox, &task.sandbox)
        .map_err(backend_err)?;
    // The turn covers making the sandbox, not the task's setup, which may
    // run for minutes.
    drop(turn);
    let prepared = prepare(backend, session, &info, task);
    if prepared.is_err() {
        // The seed error is what the caller needs; a failed destroy leaves
        // the sandbox to the sweep, which lists what the backend holds.
        let _ignored = backend.destroy(sandbox);
    }
    prepared.map(|()| info)
}

fn prepare(
    backend: &dyn Backend,
    session: &str,
    info: &SandboxInfo,
    task: &OwnerTask,
) -> OwnerResult<()> {
    let backend_err = |source| OwnerError::backend(session, &info.id, source);
    for (path, content) in &task.files {
        let path = crate::task::resolve(&info.spec.workdir, path);
        backend
            .upload(
                &info.id,
                Path::new(&path),
                content.as_bytes(),
                TASK_FILE_MODE,
            )
            .map_err(backend_err)?;
    }
    if let Some(upload) = &task.upload {
        let files = upload.decoded("task.upload")?;
        backend
            .fresh_dir(&info.id, Path::new(upload.dir.trim_end_matches('/')))
            .map_err(backend_err)?;
        for (path, bytes, mode) in files {
            backend
                .upload(&info.id, Path::new(&path), &bytes, mode)
                .map_err(backend_err)?;
        }
    }
    for (index, argv) in task.setup.iter().enumerate() {
        let req = ExecRequest {
            argv: argv.clone(),
            env: Default::default(),
            cwd: info.spec.workdir.clone(),
            timeout_ms: task.setup_timeout_s.saturating_mul(1000),
            output_limit: OUTPUT_LIMIT,
            stdin: None,
        };
        let out = backend.exec(&info.id, &req).map_err(backend_err)?;
        if out.exit_code != Some(0) || out.timed_out {
            let status = match (out.timed_out, out.exit_code, out.signal) {
                (true, ..) => format!("a timeout after {} s", task.setup_timeout_s),
                (false, Some(code), _) => format!("exit code {code}"),
                (false, None, Some(sig)) => format!("signal {sig}"),
                (false, None, None) => "no exit status".to_owned(),
            };
            return Err(OwnerError::Setup {
                session: session.to_owned(),
                index,
                argv: argv.join(" "),
                status,
                stderr_tail: tail(&out.stderr, SETUP_TAIL).to_owned(),
            });
        }
    }
    Ok(())
}
