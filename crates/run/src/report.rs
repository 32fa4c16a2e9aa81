//! `rollpoint report RUN_DIR`: one self-contained HTML page of a run, read from disk only.
//! It is the dashboard's page with the run's documents inlined (`view`): the summary, the
//! events, the rollout table (paged, sortable, filtered in the page), the histograms, the
//! timeline and the checkpoint chart on time axes, and per rollout its launches, its model
//! calls with their messages, its output and its trajectory. A rollout's document is parsed
//! only when it is opened, so a page of thousands of rollouts opens at once.

use std::path::{Path, PathBuf};

use crate::errors::RunError;
use crate::view::{all_rollout_views, run_view};
use rollpoint_view::{Mode, render};

/// The default file name under the run directory.
pub const REPORT_FILE: &str = "report.html";

/// The page of `run_dir`.
pub fn report_html(run_dir: &Path) -> Result<String, RunError> {
    let run = run_view(run_dir, None)?;
    let rollouts = all_rollout_views(run_dir)?;
    Ok(render(
        &run.title,
        Mode::Report {
            run: &run,
            rollouts: &rollouts,
        },
    ))
}

/// Writes the page of `run_dir` to `out` (default `RUN_DIR/report.html`), atomically, mode
/// 0600; returns where.
pub fn write_report(run_dir: &Path, out: Option<&Path>) -> Result<PathBuf, RunError> {
    let page = report_html(run_dir)?;
    let path = out.map_or_else(|| run_dir.join(REPORT_FILE), Path::to_path_buf);
    crate::files::state::write_atomic(&path, page.as_bytes())?;
    Ok(path)
}
