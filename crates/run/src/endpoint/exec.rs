//! `POST /v1/rollouts/{id}/exec` on the run's endpoint (`rollpoint exec`): one command in a
//! live rollout's sandbox, through its owner, so it runs as the sandbox's user under the
//! sandbox's isolation, like the harness. A rollout parked for a checkpoint (frozen in place,
//! or held) is refused: a command would change what is being saved, or wait on a frozen
//! process. With `while_frozen` the command runs instead in a fork of the rollout's sandbox
//! from the latest checkpoint that saved it, destroyed afterwards: the rollout never sees it.
//! Every exec is written to the run's events.

use std::sync::Arc;

use crate::files::events::Event;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use rollpoint_api::error::{ApiError, ErrorCode, json};
use rollpoint_api::extract::{Body, Versioned, VersionedBody};
use rollpoint_driver::RunStatus;
use rollpoint_owner::{LocalOwner, Owner as _};
use rollpoint_proto::anchor::ExecRequest;
use serde::{Deserialize, Serialize};

/// Version of the exec request and reply.
pub const EXEC_VERSION: u32 = 1;
/// Most arguments of a command.
pub const MAX_ARGS: usize = 256;
/// Longest command line, all arguments together.
pub const MAX_ARGV_BYTES: usize = 64 * 1024;
/// Longest a command may run.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Bytes kept of its stdout and of its stderr each.
pub const OUTPUT_LIMIT: u64 = 4 * 1024 * 1024;

/// `POST /v1/rollouts/{id}/exec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = RolloutExecRequest)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    pub v: u32,
    /// The command and its arguments (1 to 256, 64 KiB in all).
    pub argv: Vec<String>,
    /// Its working directory in the sandbox (default: the task's workdir).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Killed after this long (default 60000, at most 3600000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Written to its stdin, which is then closed.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Run in a fork of the latest checkpoint's snapshot of the rollout's sandbox rather than
    /// in the sandbox itself (allowed whether the rollout is frozen or not).
    #[serde(default)]
    pub while_frozen: bool,
}

/// The exec's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = RolloutExecReply)]
#[serde(deny_unknown_fields)]
pub struct ExecReply {
    pub v: u32,
    pub rollout: String,
    /// The sandbox it ran in: the rollout's own, or the fork.
    pub sandbox: String,
    /// The checkpoint whose snapshot was forked (`while_frozen`).
    pub checkpoint: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

impl VersionedBody for ExecBody {
    const WHAT: &'static str = "rollout exec request";
    const VERSION: u32 = EXEC_VERSION;
}

impl ExecBody {
    fn check(&self) -> Result<(), ApiError> {
        if self.argv.is_empty() || self.argv.len() > MAX_ARGS {
            return Err(ApiError::bad(
                "argv",
                format!("{} arguments: give 1 to {MAX_ARGS}", self.argv.len()),
            ));
        }
        let bytes: usize = self.argv.iter().map(String::len).sum();
        if bytes > MAX_ARGV_BYTES {
            return Err(ApiError::bad(
                "argv",
                format!("{bytes} bytes: at most {MAX_ARGV_BYTES}"),
            ));
        }
        if let Some(t) = self.timeout_ms
            && !(1..=MAX_TIMEOUT_MS).contains(&t)
        {
            return Err(ApiError::bad(
                "timeout_ms",
                format!("{t}: give 1 to {MAX_TIMEOUT_MS}"),
            ));
        }
        if let Some(cwd) = &self.cwd
            && !cwd.starts_with('/')
        {
            return Err(ApiError::bad(
                "cwd",
                format!("{cwd:?} is not an absolute path"),
            ));
        }
        Ok(())
    }
}

/// Hands an event to the run's loop for its events file.
pub type Record = Arc<dyn Fn(Event) + Send + Sync>;

/// What the exec and shell routes reach.
#[derive(Clone)]
pub struct ExecContext {
    /// The run directory, the drivers and the owner.
    pub live: super::dashboard::Live,
    pub record: Record,
}

impl std::fmt::Debug for ExecContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecContext")
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

pub fn routes(ctx: ExecContext) -> Router {
    Router::new()
        .route("/v1/rollouts/{id}/exec", post(exec))
        .with_state(ctx)
}

fn conflict(message: String) -> ApiError {
    ApiError::new(ErrorCode::Conflict, message)
}

/// The owner session of a live rollout to run a command or a shell in; an error when it has
/// no sandbox, or is parked and `while_frozen` was not given (then the command runs in a fork
/// of its latest snapshot instead).
pub(crate) fn session_of(
    live: &super::dashboard::Live,
    id: &str,
    while_frozen: bool,
) -> Result<String, ApiError> {
    let Some((_, status, bookmark)) = live.runs.states().into_iter().find(|(r, _, _)| r == id)
    else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!(
                "rollout {id} is not in flight in this run (a finished rollout has no sandbox)"
            ),
        ));
    };
    let parked = match status {
        RunStatus::Queued => {
            return Err(conflict(format!(
                "rollout {id} is queued: it has no sandbox yet"
            )));
        }
        RunStatus::Done => {
            return Err(conflict(format!(
                "rollout {id} has finished: its sandbox is gone"
            )));
        }
        RunStatus::Parked(_) => true,
        RunStatus::Running => false,
    };
    let session = bookmark
        .progress()
        .map(|p| p.session.session.clone())
        .ok_or_else(|| {
            conflict(format!(
                "rollout {id} is being set up: it has no sandbox yet"
            ))
        })?;
    if parked && !while_frozen {
        return Err(conflict(format!(
            "rollout {id} is parked (frozen in place or held, for a checkpoint, a fleet pause \
             or a stalled model call): a command would run beside a frozen harness and what a \
             checkpoint saves; give while_frozen (--while-frozen) to run it in a fork of its \
             latest snapshot instead"
        )));
    }
    Ok(session)
}

#[utoipa::path(
    post,
    path = "/v1/rollouts/{id}/exec",
    operation_id = "rollout_exec",
    tag = "run",
    params(("id" = String, Path, description = "The rollout.")),
    request_body = ExecBody,
    responses(
        (status = 200, description = "The command ran (whatever its exit code).", body = ExecReply),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 404, description = "No such rollout in flight (`not_found`).", body = rollpoint_api::error::ErrorBody),
        (status = 409, description = "The rollout is parked (without `while_frozen`), queued or finished; or no checkpoint saved it (`conflict`).", body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The sandbox failed the command (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn exec(
    State(ctx): State<ExecContext>,
    Path(id): Path<String>,
    Body(body, _): Versioned<ExecBody>,
) -> Result<Response, ApiError> {
    rollpoint_proto::key::RolloutId::new(&id).map_err(|e| ApiError::bad("id", e.to_string()))?;
    body.check()?;
    let session = session_of(&ctx.live, &id, body.while_frozen)?;
    let request = ExecRequest {
        argv: body.argv.clone(),
        env: std::collections::BTreeMap::new(),
        cwd: body.cwd.clone().unwrap_or_default(),
        timeout_ms: body.timeout_ms.unwrap_or(60_000),
        output_limit: OUTPUT_LIMIT,
        stdin: body.stdin.clone(),
    };
    let failed = |e: &dyn std::fmt::Display| {
        ApiError::new(ErrorCode::Failed, format!("exec in rollout {id}: {e}"))
    };
    let (out, sandbox, checkpoint) = if body.while_frozen {
        in_fork(&ctx, &id, &session, request).await?
    } else {
        let sandbox = ctx
            .live
            .owner
            .access(&session)
            .await
            .map_err(|e| failed(&e))?
            .sandbox;
        let out = ctx
            .live
            .owner
            .exec(&session, request)
            .await
            .map_err(|e| failed(&e))?;
        (out, sandbox, None)
    };
    (ctx.record)(Event::Exec {
        rollout: id.clone(),
        argv: body.argv.clone(),
        exit_code: out.exit_code,
        while_frozen: body.while_frozen,
        tty: false,
    });
    Ok(json(
        StatusCode::OK,
        &ExecReply {
            v: EXEC_VERSION,
            rollout: id,
            sandbox,
            checkpoint,
            exit_code: out.exit_code,
            signal: out.signal,
            timed_out: out.timed_out,
            stdout: out.stdout,
            stderr: out.stderr,
            stdout_truncated: out.stdout_truncated,
            stderr_truncated: out.stderr_truncated,
        },
    ))
}

/// A fork of a rollout's sandbox an exec or a shell runs in: a session of its own, under an
/// attempt key of its own (its session's name), so no checkpoint saves it as the rollout's or
/// asks the rollout to restart for it. Destroyed when dropped, whatever happened meanwhile.
pub(crate) struct Fork {
    pub session: String,
    pub sandbox: String,
    pub checkpoint: String,
    owner: Arc<LocalOwner>,
    rollout: String,
}

impl Drop for Fork {
    fn drop(&mut self) {
        let owner = Arc::clone(&self.owner);
        let (session, sandbox, rollout) = (
            self.session.clone(),
            self.sandbox.clone(),
            self.rollout.clone(),
        );
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(rollout = %rollout, sandbox = %sandbox,
                "the fork an exec ran in was not destroyed; a sweep removes it");
            return;
        };
        runtime.spawn(async move {
            if let Err(e) = owner.close(&session).await {
                tracing::warn!(rollout = %rollout, sandbox = %sandbox, error = %e,
                    "the fork an exec ran in was not destroyed; a sweep removes it");
            }
        });
    }
}

/// A fork of the newest checkpoint that saved `session` (rollout `id`'s).
pub(crate) async fn fork_of(ctx: &ExecContext, id: &str, session: &str) -> Result<Fork, ApiError> {
    let (mut record, checkpoint) = newest_record(&ctx.live.run_dir, session)
        .await?
        .ok_or_else(|| {
            conflict(format!(
                "rollout {id}: no published checkpoint saved its sandbox yet, so there is no \
             snapshot to fork"
            ))
        })?;
    static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = FORKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let fork_session = format!("exec.{}.{n}", rollpoint_proto::clock::unix_ms());
    record.session.clone_from(&fork_session);
    record.task.id.clone_from(&fork_session);
    let access = ctx.live.owner.restore(record).await.map_err(|e| {
        ApiError::new(
            ErrorCode::Failed,
            format!("rollout {id}: forking checkpoint {checkpoint}'s snapshot: {e}"),
        )
    })?;
    Ok(Fork {
        session: fork_session,
        sandbox: access.sandbox,
        checkpoint,
        owner: Arc::clone(&ctx.live.owner),
        rollout: id.to_owned(),
    })
}

/// Runs `request` in a fork of the newest checkpoint that saved `session`; the fork is
/// destroyed after.
async fn in_fork(
    ctx: &ExecContext,
    id: &str,
    session: &str,
    request: ExecRequest,
) -> Result<(rollpoint_proto::anchor::ExecOutput, String, Option<String>), ApiError> {
    let fork = fork_of(ctx, id, session).await?;
    let out = ctx
        .live
        .owner
        .exec(&fork.session, request)
        .await
        .map_err(|e| {
            ApiError::new(
                ErrorCode::Failed,
                format!(
                    "exec in a fork of rollout {id} from checkpoint {}: {e}",
                    fork.checkpoint
                ),
            )
        })?;
    Ok((out, fork.sandbox.clone(), Some(fork.checkpoint.clone())))
}

/// The newest published, undamaged checkpoint's record of `session`, and that checkpoint.
async fn newest_record(
    run_dir: &std::path::Path,
    session: &str,
) -> Result<Option<(rollpoint_owner::SessionRecord, String)>, ApiError> {
    let dir = run_dir.to_owned();
    let session = session.to_owned();
    rollpoint_view::http::blocking("reading the checkpoints".to_owned(), move || {
        let published = rollpoint_checkpoint::store::published(&dir).map_err(|e| {
            crate::errors::RunError::checkpoint("LATEST", rollpoint_proto::Cause::from(e))
        })?;
        for ck in published.iter().filter(|p| p.doc.is_ok()) {
            if matches!(
                rollpoint_checkpoint::store::damaged(&dir, &ck.id),
                Ok(Some(_))
            ) {
                continue;
            }
            // A checkpoint whose records cannot be read is passed over for an older one, as
            // a resume does.
            match crate::files::saved::saved_session_record(&dir, &ck.id, &session) {
                Ok(Some(r)) => return Ok(Some((r, ck.id.clone()))),
                Ok(None) => {}
                Err(e) => tracing::warn!(checkpoint = %ck.id, error = %e,
                    "a checkpoint's records could not be read; trying an older one"),
            }
        }
        Ok::<_, crate::errors::RunError>(None)
    })
    .await
}
