//! The stack built over the swept sandboxes, and the loop made over it, counting the
//! rollouts already finished.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rollpoint_sandbox::local::LocalBackend;

use super::read::OnDisk;
use crate::errors::RunError;
use crate::run_loop::new::Loop;
use crate::stack::build::Stack;

/// Starts the run's participants over `backend` (the gateway with `program`) and makes the
/// loop that continues checkpoint `continues`.
pub(super) async fn build(
    disk: &mut OnDisk,
    backend: Arc<LocalBackend>,
    program: &Path,
    continues: Option<String>,
    env: BTreeMap<String, String>,
) -> Result<Loop, RunError> {
    let state = &mut disk.state;
    let stack = Stack::build(
        &disk.run_dir,
        &state.config,
        backend,
        program,
        state.gateway_port,
    )
    .await?;
    // A run killed before its gateway first listened has no port yet: this one is its port.
    if state.gateway_port != stack.gateway_port {
        state.gateway_port = stack.gateway_port;
        state.save(&disk.run_dir)?;
    }
    let mut lp = Loop::new(
        disk.run_dir.clone(),
        stack,
        state.clone(),
        disk.order.len(),
        disk.finished.len(),
        continues,
        env,
    )?;
    if state.config.retry_infra > 0 {
        lp.tasks = disk
            .by_id
            .iter()
            .filter(|(id, _)| !state.forks.contains_key(*id))
            .map(|(id, t)| {
                (
                    id.clone(),
                    t.clone().with_limits(&state.config.sandbox_limits),
                )
            })
            .collect();
    }
    Ok(lp)
}
