//! The last step of a resume: the forks asked for made, the control endpoint served, and the
//! loop driven to its end; then the run's claim on its store is released.

use crate::claim::lease::Keeper;
use crate::endpoint::start::{self as endpoint, Reach};
use crate::errors::RunError;
use crate::inputs::Inputs;
use crate::run_loop::drive::Ending;
use crate::run_loop::new::Loop;

/// Drives `lp` with `inputs` to the end, releasing `keeper`'s claim after.
pub(super) async fn run_on(
    mut lp: Loop,
    inputs: Inputs,
    keeper: Option<Keeper>,
) -> Result<Ending, RunError> {
    for req in &inputs.forks {
        let made = lp.fork(req).await?;
        tracing::info!(
            checkpoint = %made.checkpoint,
            branches = %made.branches.join(", "),
            "the branches run with the rest of the run"
        );
    }
    let serving = match inputs.listen {
        Some(listen) => Some(endpoint::start(&lp.run_dir, listen, Reach::of(&lp.stack)).await?),
        None => None,
    };
    let ending = lp
        .drive(inputs.signals, inputs.grace, inputs.stop_requested)
        .await;
    drop(serving);
    if let Some(keeper) = keeper {
        keeper.release().await;
    }
    ending
}
