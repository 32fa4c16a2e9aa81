//! `rollpoint logs RUN_DIR ROLLOUT [-f]`: a rollout's launches (when each started and why,
//! how it ended) and each launch's harness output, read from the run directory: the live
//! sandbox's output file while it runs, the kept one after. With `-f` it follows: new output
//! and new launches as they come, until the rollout has its result row.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use rollpoint_view::{LaunchLine, RolloutLine, output_files};

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
    let mut row = Row::watch(&args.run_dir, &args.rollout)?;
    let mut out = std::io::stdout().lock();
    let mut printed: Vec<(String, u64)> = Vec::new();
    loop {
        let line = row.current()?;
        // Launches come from the row once it is written; before, they are found by their
        // output files. Either way in order: by attempt, then launch.
        let mut all = line.map(|l| l.launches.clone()).unwrap_or_default();
        all.extend(live_launches(&args.run_dir, &args.rollout, &all));
        all.sort_by_key(|l| launch_of(&l.id, &args.rollout).unwrap_or((u32::MAX, u32::MAX)));
        for l in &all {
            let at = match printed.iter_mut().find(|(id, _)| *id == l.id) {
                Some(p) => p,
                None => {
                    writeln!(out, "{}", header(l))?;
                    printed.push((l.id.clone(), 0));
                    printed.last_mut().context("just pushed")?
                }
            };
            if let Some(path) = output_files(&args.run_dir.join(rollpoint_run::stack::OWNER_DIR), l)
            {
                at.1 = copy_from(&path, at.1, &mut out)?;
            }
        }
        let ended = line.and_then(|l| l.ended_ms.map(|end| (end, l.state.clone())));
        if let Some((end, state)) = &ended {
            writeln!(out, "== {} finished: {state} at {end}", args.rollout)?;
        }
        out.flush()?;
        if !args.follow || ended.is_some() {
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}

/// The rollout's result row as a line of the run's document, read again only when
/// `results.jsonl` has grown.
struct Row {
    run_dir: PathBuf,
    rollout: String,
    size: Option<u64>,
    line: Option<RolloutLine>,
}

impl Row {
    /// Watches `rollout`'s row; an error when the run has no such rollout.
    fn watch(run_dir: &Path, rollout: &str) -> anyhow::Result<Self> {
        let state = rollpoint_run::files::state::RunState::load(run_dir)?;
        let mut row = Self {
            run_dir: run_dir.to_owned(),
            rollout: rollout.to_owned(),
            size: None,
            line: None,
        };
        if !state.attempts.contains_key(rollout) && row.current()?.is_none() {
            anyhow::bail!(
                "{}: the run has no rollout {rollout} (see `rollpoint status {}`)",
                run_dir.display(),
                run_dir.display()
            );
        }
        Ok(row)
    }

    fn current(&mut self) -> anyhow::Result<Option<&RolloutLine>> {
        let path = self
            .run_dir
            .join(rollpoint_run::files::results::RESULTS_FILE);
        let size = std::fs::metadata(&path).ok().map(|m| m.len());
        if size != self.size {
            self.size = size;
            self.line = rollpoint_run::files::results::read_results(&self.run_dir)?
                .iter()
                .rev()
                .find(|r| r.rollout == self.rollout)
                .map(RolloutLine::from);
        }
        Ok(self.line.as_ref())
    }
}

/// Launches of `rollout` not in `known`, found by their output files: in a live sandbox's
/// control directory, or kept after its sandbox was destroyed.
fn live_launches(run_dir: &Path, rollout: &str, known: &[LaunchLine]) -> Vec<LaunchLine> {
    let owner = run_dir.join(rollpoint_run::stack::OWNER_DIR);
    let mut files: Vec<(String, String, PathBuf)> = Vec::new();
    let names = |dir: &Path| -> Vec<(String, PathBuf)> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| Some((e.file_name().to_str()?.to_owned(), e.path())))
            .collect()
    };
    for (sandbox, dir) in names(&owner.join("sandboxes")) {
        for (id, path) in names(
            &dir.join("control")
                .join(rollpoint_proto::anchor::LAUNCHES_DIR),
        ) {
            files.push((sandbox.clone(), id, path));
        }
    }
    for (sandbox, dir) in names(&owner.join(rollpoint_sandbox::local::OUTPUT_DIR)) {
        for (name, path) in names(&dir) {
            if let Some(id) = name.strip_suffix(".log") {
                files.push((sandbox.clone(), id.to_owned(), path));
            }
        }
    }
    let mut found: Vec<LaunchLine> = Vec::new();
    for (sandbox, id, path) in files {
        let Some((attempt, _)) = launch_of(&id, rollout) else {
            continue;
        };
        if known.iter().chain(found.iter()).any(|k| k.id == id) {
            continue;
        }
        let start_ms = std::fs::symlink_metadata(&path)
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        found.push(LaunchLine {
            id,
            attempt,
            sandbox,
            start_ms,
            end_ms: None,
            resumed: false,
            reason: "found by its output".to_owned(),
            end: None,
            exit_code: None,
            pauses: 0,
            paused_ms: 0,
            note: None,
        });
    }
    found
}

/// The attempt and number of `rollout`'s launch `id` (`<rollout>-a<attempt>-l<n>`,
/// `rollpoint_proto::key::launch_id`), or `None` when it is not one of its launches.
fn launch_of(id: &str, rollout: &str) -> Option<(u32, u32)> {
    let (a, n) = id
        .strip_prefix(rollout)?
        .strip_prefix("-a")?
        .split_once("-l")?;
    Some((a.parse().ok()?, n.parse().ok()?))
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
    let Ok(mut f) = rollpoint_view::open_output(path) else {
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
