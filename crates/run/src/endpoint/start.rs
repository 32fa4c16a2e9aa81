//! Serving the control endpoint: the address bound and recorded in `RUN_DIR/control.json`,
//! the routes mounted behind the bearer token (all but the dashboard's page), requests
//! handed to the loop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use axum::Router;
use axum::routing::{get, post};
use rollpoint_api::error::authorized;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::ask::{checkpoint, fleet_continue, fleet_pause, fork, metrics};
use super::dashboard::{self, Live};
use super::exec::{self, ExecContext};
use super::file::{ENDPOINT_VERSION, EndpointFile};
use super::shell;
use super::status::status;
use super::trajectory::trajectory;
use crate::errors::RunError;
use crate::run_loop::signal::{EndpointRequest, Signal};
use crate::stack::build::Stack;

/// Where and how the run serves its control endpoint.
#[derive(Debug, Clone)]
pub struct Listen {
    pub addr: SocketAddr,
    pub token: String,
    /// The loop's input, where requests are handed over.
    pub loop_tx: mpsc::UnboundedSender<Signal>,
}

/// What the dashboard and exec routes read directly (never the coordinator): the drivers'
/// registry and the owner.
#[derive(Debug, Clone)]
pub(crate) struct Reach {
    pub runs: rollpoint_driver::Runs,
    pub owner: std::sync::Arc<rollpoint_owner::LocalOwner>,
    pub backend: std::sync::Arc<rollpoint_sandbox::local::LocalBackend>,
}

impl Reach {
    /// What the routes read of the run's participants.
    pub(crate) fn of(stack: &Stack) -> Self {
        Self {
            runs: stack.runs.clone(),
            owner: std::sync::Arc::clone(&stack.owner),
            backend: std::sync::Arc::clone(&stack.backend),
        }
    }
}

/// The control endpoint while it serves; dropping it stops serving.
#[derive(Debug)]
pub(crate) struct Serving {
    task: tokio::task::JoinHandle<()>,
    file: PathBuf,
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
        let _gone_already: std::io::Result<()> = std::fs::remove_file(&self.file);
    }
}

/// Binds the address, records it in `RUN_DIR/control.json`, and serves the
/// control routes, handing requests to the loop.
pub(crate) async fn start(
    run_dir: &Path,
    listen: Listen,
    reach: Reach,
) -> Result<Serving, RunError> {
    let Listen {
        addr,
        token,
        loop_tx,
    } = listen;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| RunError::setup("control endpoint", format!("bind {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| RunError::setup("control endpoint", format!("address of {addr}: {e}")))?;
    EndpointFile {
        v: ENDPOINT_VERSION,
        addr: bound,
    }
    .save(run_dir)?;
    let live = Live {
        run_dir: run_dir.to_owned(),
        runs: reach.runs,
        owner: reach.owner,
    };
    let exec = ExecContext {
        live: live.clone(),
        record: {
            let tx = loop_tx.clone();
            std::sync::Arc::new(move |event| {
                let _loop_gone = tx.send(Signal::Endpoint(EndpointRequest::Record(event)));
            })
        },
    };
    let guarded = authorized(
        Router::new()
            .route("/v1/coordinator/checkpoint", post(checkpoint))
            .route("/v1/coordinator/fork", post(fork))
            .route("/v1/run/status", get(status))
            .route("/v1/fleet/pause", post(fleet_pause))
            .route("/v1/fleet/continue", post(fleet_continue))
            .route("/metrics", get(metrics))
            .with_state(loop_tx)
            .merge(
                Router::new()
                    .route("/v1/rollouts/{id}/trajectory", get(trajectory))
                    .with_state(std::sync::Arc::new(run_dir.to_owned())),
            )
            .merge(dashboard::routes(live))
            .merge(exec::routes(exec.clone()))
            .merge(shell::routes(exec, reach.backend)),
        &token,
    );
    let app = dashboard::page_routes().merge(guarded);
    let task = tokio::spawn(async move {
        if let Err(e) = rollpoint_api::serve(listener, app).await {
            tracing::error!(address = %bound, error = %e, "the control endpoint stopped");
        }
    });
    Ok(Serving {
        task,
        file: EndpointFile::path(run_dir),
    })
}
