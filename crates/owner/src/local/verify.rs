//! Grading a session: the task's verify command in the sandbox, the reward read from it.
//!
//! Files the verify step brings (a Harbor task's `tests/`) are put in only
//! now, into a directory made afresh from the host side, so the graded code
//! can neither read them earlier nor plant its own beside them; a Harbor
//! reward directory is made afresh too, so a reward file the graded code
//! wrote is never read. Both belong to the sandbox's user, who grades.

use std::path::Path;

use rollpoint_proto::anchor::ExecRequest;

use super::{LocalOwner, OUTPUT_LIMIT};
use crate::owner::OwnerResult;
use crate::task::{RewardMode, VERIFIER_DIR};
use crate::verdict::{Verdict, grade, grade_files};

/// Largest reward file read back.
const REWARD_FILE_LIMIT: u64 = 1 << 20;

impl LocalOwner {
    pub(super) async fn verify_impl(&self, session: &str) -> OwnerResult<Verdict> {
        let (sandbox, task) = self.current(session)?;
        let exec = |argv: Vec<String>, timeout_ms: u64| ExecRequest {
            argv,
            env: Default::default(),
            cwd: sandbox.spec.workdir.clone(),
            timeout_ms,
            output_limit: OUTPUT_LIMIT,
            stdin: None,
        };
        let files_mode = task.verify.reward == RewardMode::Files;
        let upload = task
            .verify
            .upload
            .as_ref()
            .map(|u| u.decoded("task.verify.upload"))
            .transpose()?;
        let mut fresh: Vec<String> = Vec::new();
        if files_mode {
            fresh.push(VERIFIER_DIR.to_owned());
        }
        if let Some(u) = &task.verify.upload {
            fresh.push(u.dir.trim_end_matches('/').to_owned());
        }
        for dir in fresh {
            let id = sandbox.id.clone();
            self.on_backend(session, &sandbox.id, "verify", move |b| {
                b.fresh_dir(&id, Path::new(&dir))
            })
            .await?;
        }
        for (path, bytes, mode) in upload.into_iter().flatten() {
            let id = sandbox.id.clone();
            self.on_backend(session, &sandbox.id, "verify", move |b| {
                b.upload(&id, Path::new(&path), &bytes, mode)
            })
            .await?;
        }
        let req = exec(
            task.verify.command.clone(),
            task.verify.timeout_s.saturating_mul(1000),
        );
        let id = sandbox.id.clone();
        let out = self
            .on_backend(session, &sandbox.id, "verify", move |b| b.exec(&id, &req))
            .await?;
        let mut verdict = if files_mode {
            let read = |name: &str| {
                let id = sandbox.id.clone();
                let path = format!("{VERIFIER_DIR}/{name}");
                self.on_backend(session, &sandbox.id, "verify", move |b| {
                    Ok(b.download(&id, Path::new(&path), REWARD_FILE_LIMIT).ok())
                })
            };
            let json = read("reward.json").await?;
            let txt = read("reward.txt").await?;
            grade_files(&out, json.as_deref(), txt.as_deref())
        } else {
            grade(task.verify.reward, &out)
        };
        // The graded session is over: forget it and destroy its sandbox,
        // unless a restore has replaced the sandbox meanwhile.
        let ended = {
            let mut sessions = self.sessions();
            if sessions
                .get(session)
                .is_some_and(|s| s.sandbox.id == sandbox.id)
            {
                sessions.remove(session);
                true
            } else {
                false
            }
        };
        if ended && let Err(e) = self.destroy(session, &sandbox.id).await {
            verdict.cleanup_error = Some(e.to_string());
        }
        Ok(verdict)
    }
}
