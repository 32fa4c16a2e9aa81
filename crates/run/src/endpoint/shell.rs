//! `GET /v1/rollouts/{id}/shell` on the run's endpoint (`rollpoint shell`): a WebSocket to a
//! command (a shell by default) on a terminal in a live rollout's sandbox, started by the
//! sandbox's anchor like an exec (the sandbox's user, its isolation). Binary messages carry the
//! terminal's bytes both ways; the last text message says how the command ended. The same
//! refusals as an exec: a rollout frozen for a checkpoint only with `while_frozen`, which
//! opens the shell in a fork of its latest snapshot instead. Every shell is written to the
//! run's events.

use std::io::{Read as _, Write as _};
use std::sync::Arc;

use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use rollpoint_api::error::{ApiError, ErrorCode};
use rollpoint_owner::Owner as _;
use rollpoint_proto::anchor::ExecRequest;
use rollpoint_sandbox::local::{LocalBackend, Terminal};
use serde::Deserialize;
use tokio::sync::mpsc;

use super::exec::ExecContext;
use crate::files::events::Event;

/// The longest a shell may stay open.
pub const SHELL_LIMIT_MS: u64 = 24 * 3_600_000;

/// The query of the shell route.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellQuery {
    /// The terminal's rows (1 to 1000, default 24).
    #[serde(default)]
    pub rows: Option<u16>,
    /// The terminal's columns (1 to 1000, default 80).
    #[serde(default)]
    pub cols: Option<u16>,
    /// Open it in a fork of the latest snapshot.
    #[serde(default)]
    pub while_frozen: bool,
    /// The command as a JSON array of strings (default `["/bin/sh"]`).
    #[serde(default)]
    pub cmd: Option<String>,
}

/// The shell route.
pub fn routes(ctx: ExecContext, backend: Arc<LocalBackend>) -> Router {
    Router::new()
        .route("/v1/rollouts/{id}/shell", get(shell))
        .with_state((ctx, backend))
}

fn size(field: &str, value: Option<u16>, default: u16) -> Result<u16, ApiError> {
    match value {
        None => Ok(default),
        Some(v @ 1..=1000) => Ok(v),
        Some(v) => Err(ApiError::bad(field, format!("{v}: give 1 to 1000"))),
    }
}

#[utoipa::path(
    get,
    path = "/v1/rollouts/{id}/shell",
    operation_id = "rollout_shell",
    tag = "run",
    params(
        ("id" = String, Path, description = "The rollout."),
        ("rows" = Option<u16>, Query, description = "The terminal's rows, 1 to 1000 (24)."),
        ("cols" = Option<u16>, Query, description = "The terminal's columns, 1 to 1000 (80)."),
        ("while_frozen" = Option<bool>, Query, description = "Open it in a fork of the latest snapshot."),
        ("cmd" = Option<String>, Query, description = "The command as a JSON array of strings (`[\"/bin/sh\"]`)."),
    ),
    responses(
        (status = 101, description = "A WebSocket: binary messages are the terminal's bytes both ways; the last text message is `{\"v\":1,\"exit_code\",\"signal\"}` or `{\"v\":1,\"error\"}`."),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 404, description = "No such rollout in flight (`not_found`).", body = rollpoint_api::error::ErrorBody),
        (status = 409, description = "The rollout is parked (without `while_frozen`), queued or finished; or no checkpoint saved it (`conflict`).", body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The sandbox could not start it (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn shell(
    State((ctx, backend)): State<(ExecContext, Arc<LocalBackend>)>,
    Path(id): Path<String>,
    Query(q): Query<ShellQuery>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    rollpoint_proto::key::RolloutId::new(&id).map_err(|e| ApiError::bad("id", e.to_string()))?;
    let rows = size("rows", q.rows, 24)?;
    let cols = size("cols", q.cols, 80)?;
    let argv = match &q.cmd {
        None => vec!["/bin/sh".to_owned()],
        Some(text) => match serde_json::from_str::<Vec<String>>(text) {
            Ok(argv) if !argv.is_empty() && argv.len() <= super::exec::MAX_ARGS => argv,
            _ => {
                return Err(ApiError::bad(
                    "cmd",
                    format!(
                        "a JSON array of 1 to {} strings, not {text:?}",
                        super::exec::MAX_ARGS
                    ),
                ));
            }
        },
    };
    let session = super::exec::session_of(&ctx.live, &id, q.while_frozen)?;
    let failed = |e: &dyn std::fmt::Display| {
        ApiError::new(ErrorCode::Failed, format!("shell in rollout {id}: {e}"))
    };
    // A fork lives as long as the shell (dropped with it, whatever ends it).
    let (sandbox, fork) = if q.while_frozen {
        let fork = super::exec::fork_of(&ctx, &id, &session).await?;
        (fork.sandbox.clone(), Some(fork))
    } else {
        let access = ctx
            .live
            .owner
            .access(&session)
            .await
            .map_err(|e| failed(&e))?;
        (access.sandbox, None)
    };
    let request = ExecRequest {
        argv: argv.clone(),
        env: std::iter::once(("TERM".to_owned(), "xterm".to_owned())).collect(),
        cwd: String::new(),
        timeout_ms: SHELL_LIMIT_MS,
        output_limit: 0,
        stdin: None,
    };
    let terminal =
        tokio::task::spawn_blocking(move || backend.shell(&sandbox, &request, (rows, cols)))
            .await
            .map_err(|e| failed(&e))?
            .map_err(|e| failed(&e))?;
    Ok(upgrade.on_upgrade(move |socket| async move {
        let exit = relay(socket, terminal).await;
        drop(fork);
        (ctx.record)(Event::Exec {
            rollout: id,
            argv,
            exit_code: exit,
            while_frozen: q.while_frozen,
            tty: true,
        });
    }))
}

/// Copies the terminal to the socket and back until the command ends or the client leaves;
/// the command's exit code.
async fn relay(mut socket: WebSocket, terminal: Terminal) -> Option<i32> {
    let Ok(reader) = terminal.leader.try_clone() else {
        return None;
    };
    let mut reader = std::fs::File::from(reader);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(64);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    // The terminal's output, until the command has no terminal left (EIO) or the client
    // left (then this thread lets go of its end, so the command gets its hangup).
    std::thread::spawn(move || {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd as _;
        let mut buf = vec![0_u8; 16 * 1024];
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            let mut fds = [PollFd::new(reader.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(200_u16)) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                Ok(_) => {}
                Err(_) => break,
            }
            match reader.read(&mut buf) {
                Ok(n) if n > 0 => {
                    if out_tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
                _ => break,
            }
        }
    });
    let (in_tx, in_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let Ok(writer) = terminal.leader.try_clone() else {
        return None;
    };
    let mut writer = std::fs::File::from(writer);
    std::thread::spawn(move || {
        while let Ok(bytes) = in_rx.recv() {
            if writer.write_all(&bytes).is_err() {
                break;
            }
        }
    });
    loop {
        tokio::select! {
            out = out_rx.recv() => match out {
                Some(bytes) => {
                    if socket.send(Message::Binary(bytes.into())).await.is_err() {
                        break;
                    }
                }
                None => break,
            },
            msg = socket.recv() => match msg {
                Some(Ok(Message::Binary(bytes))) => {
                    if in_tx.send(bytes.to_vec()).is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
            },
        }
    }
    // Let go of the terminal: a command still running gets its hangup.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(in_tx);
    let pid = terminal.pid;
    let ended = tokio::task::spawn_blocking(move || terminal.wait()).await;
    let (code, text) = match ended {
        Ok(Ok(out)) => (
            out.exit_code,
            serde_json::json!({"v": 1, "exit_code": out.exit_code, "signal": out.signal}),
        ),
        Ok(Err(e)) => (None, serde_json::json!({"v": 1, "error": e.to_string()})),
        Err(e) => (
            None,
            serde_json::json!({"v": 1, "error": format!("shell pid {pid}: {e}")}),
        ),
    };
    let _ = socket.send(Message::Text(text.to_string().into())).await;
    let _ = socket.send(Message::Close(None)).await;
    code
}
