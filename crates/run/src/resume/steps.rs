//! `rollpoint resume` as its steps, in order. Each step is a file of this folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::build::build;
use super::decide::decide;
use super::read::read;
use super::restore::restore;
use super::run_on::run_on;
use super::source::{choose_source, fetch_published};
use super::start_rest::start_rest;
use super::sweep::sweep;
use crate::claim::lease::{self, Acquire};
use crate::errors::RunError;
use crate::inputs::Inputs;
use crate::run_loop::drive::Ending;

/// `rollpoint resume`: continues the run in `run_dir` from checkpoint
/// `checkpoint` (default: the newest intact one).
pub async fn resume(
    run_dir: &Path,
    checkpoint: Option<&str>,
    supervisor: Option<PathBuf>,
    env: BTreeMap<String, String>,
    inputs: Inputs,
) -> Result<Ending, RunError> {
    let began = Instant::now();
    let ms = |since: Instant| since.elapsed().as_millis();
    // Locked, read and checked before anything is swept or restored.
    let mut disk = read(run_dir, &inputs.forks)?;
    // This directory's claim on the checkpoint store first: one taken over is fenced.
    let keeper = lease::hold(
        &disk.state.config,
        &disk.run_dir,
        Acquire::Resume,
        &inputs.loop_tx,
    )
    .await?;
    fetch_published(&disk.run_dir, &disk.state.config).await?;
    let read_ms = ms(began);
    let source = choose_source(&disk.run_dir, checkpoint)?;
    let chosen_ms = ms(began);
    let backend = sweep(
        &disk.run_dir,
        &disk.state.config,
        supervisor,
        began,
        read_ms,
        chosen_ms,
    )?;
    let plan = decide(&disk, source.as_ref());
    let source = source.map(|s| s.id);
    let mut lp = build(&mut disk, backend, &inputs.program, source.clone(), env).await?;
    restore(&mut lp, &mut disk.state, source.as_deref(), &plan).await?;
    start_rest(&mut lp, &disk, &plan, source).await?;
    // `disk` holds the run's lock until the loop ends.
    run_on(lp, inputs, keeper).await
}
