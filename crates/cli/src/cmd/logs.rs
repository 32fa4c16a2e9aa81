//! `rollpoint logs RUN_DIR ROLLOUT [-f]`: a rollout's launches (when each started and why,
//! how it ended) and each launch's harness output, read from the run directory: the live
//! sandbox's output file while it runs, the kept one after. With `-f` it follows: new output
//! and new launches as they come, until the rollout has its result row.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use rollpoint_run::view::{LaunchLine, RolloutLine, output_files, run_view};

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The rollout.
    pub rollout: String,
    /// Follow: print new output and launches as they come, until the rollout finishes.
    #[arg(short, long)]
    pub follow: bool,
}

/// How often a follow looks again.
const POLL: Duration = Duration::from_millis(200);

pub fn run(args: &LogsArgs) -> anyhow::Result<()> {
    rollpoint_proto::key::RolloutId::new(&args.rollout)
        .map_err(|e| anyhow::anyhow!("rollout: {e}"))?;
    let mut out = std::io::stdout().lock();
    let mut printed: Vec<(String, u64)> = Vec::new();
    loop {
        let line = rollout_line(&args.run_dir, &args.rollout)?;
        let finished = line.as_ref().is_some_and(|l| l.ended_ms.is_some());
        let launches = line.map(|l| l.launches).unwrap_or_default();
        // Launches come from the row once it is written, else from the latest checkpoint;
        // launches the run has started since are found by their output files.
        let mut all = launches;
        all.extend(live_launches(&args.run_dir, &args.rollout, &all));
        for l in &all {
            let at = match printed.iter_mut().find(|(id, _)| *id == l.id) {
                Some(p) => p,
                None => {
                    writeln!(out, "{}", header(l))?;
                    printed.push((l.id.clone(), 0));
                    printed.last_mut().context("just pushed")?
                }
            };
            if let Some(path) = output_files(&args.run_dir, l) {
                at.1 = copy_from(&path, at.1, &mut out)?;
            }
        }
        out.flush()?;
        if !args.follow || finished {
            if let Some(l) = rollout_line(&args.run_dir, &args.rollout)?
                && let Some(end) = l.ended_ms
            {
                writeln!(out, "== {} finished: {} at {end}", args.rollout, l.state)?;
            }
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}

/// The rollout's line of the run's document, from disk.
fn rollout_line(run_dir: &Path, rollout: &str) -> anyhow::Result<Option<RolloutLine>> {
    let view = run_view(run_dir, None)?;
    let known = view.rollouts.into_iter().find(|r| r.id == rollout);
    if known.is_none() {
        anyhow::bail!(
            "{}: the run has no rollout {rollout} (see `rollpoint status {}`)",
            run_dir.display(),
            run_dir.display()
        );
    }
    Ok(known)
}

/// Launches of `rollout` not in `known`: each live sandbox of the rollout's session with a
/// launch directory (a launch's id starts with its rollout's).
fn live_launches(run_dir: &Path, rollout: &str, known: &[LaunchLine]) -> Vec<LaunchLine> {
    let sandboxes = run_dir
        .join(rollpoint_run::stack::OWNER_DIR)
        .join("sandboxes");
    let mut found = Vec::new();
    for sb in std::fs::read_dir(&sandboxes)
        .into_iter()
        .flatten()
        .flatten()
    {
        let launches = sb
            .path()
            .join("control")
            .join(rollpoint_proto::anchor::LAUNCHES_DIR);
        for l in std::fs::read_dir(&launches).into_iter().flatten().flatten() {
            let (Some(id), Some(sandbox)) = (
                l.file_name().to_str().map(str::to_owned),
                sb.file_name().to_str().map(str::to_owned),
            ) else {
                continue;
            };
            if !launch_of(&id, rollout) || known.iter().any(|k| k.id == id) {
                continue;
            }
            let start_ms = l
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            found.push(LaunchLine {
                id,
                attempt: 0,
                sandbox,
                start_ms,
                end_ms: None,
                resumed: false,
                reason: "running now".to_owned(),
                end: None,
                exit_code: None,
                pauses: 0,
                paused_ms: 0,
                note: None,
            });
        }
    }
    found.sort_by_key(|l| l.start_ms);
    found
}

/// Whether launch id `id` is one of `rollout`'s: `<rollout>-a<attempt>-l<n>`
/// (`rollpoint_proto::key::launch_id`).
fn launch_of(id: &str, rollout: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    id.strip_prefix(rollout)
        .and_then(|rest| rest.strip_prefix("-a"))
        .and_then(|rest| rest.split_once("-l"))
        .is_some_and(|(a, n)| digits(a) && digits(n))
}

fn header(l: &LaunchLine) -> String {
    let how = if l.resumed {
        "continued its saved session"
    } else {
        "started"
    };
    let end = match (l.end, l.exit_code) {
        (Some(e), Some(c)) => format!(", ended {e:?} (exit {c})"),
        (Some(e), None) => format!(", ended {e:?}"),
        _ => String::new(),
    };
    format!(
        "== launch {} (attempt {}, sandbox {}) {how} at {}: {}; paused {} times{end}",
        l.id, l.attempt, l.sandbox, l.start_ms, l.reason, l.pauses
    )
}

/// Writes `path` from byte `from` to `out`; the offset reached.
fn copy_from(path: &Path, from: u64, out: &mut impl std::io::Write) -> anyhow::Result<u64> {
    let Ok(mut f) = rollpoint_run::view::open_output(path) else {
        return Ok(from);
    };
    let len = f.metadata().map_or(0, |m| m.len());
    if len <= from {
        return Ok(from);
    }
    f.seek(SeekFrom::Start(from))
        .with_context(|| format!("seek {}", path.display()))?;
    let mut buf = Vec::new();
    (&mut f)
        .take(len - from)
        .read_to_end(&mut buf)
        .with_context(|| format!("read {}", path.display()))?;
    out.write_all(&buf)?;
    Ok(from + buf.len() as u64)
}
