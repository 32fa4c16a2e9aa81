//! `rollpoint bench pause`: time to a confirmed pause and a confirmed
//! continue for 100, 1,000 and 2,400 processes with each strategy, side by
//! side with a Python SIGSTOP walker (walk the tree, SIGSTOP each, poll to `T`) run
//! on the same tree in the same run.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use rollpoint_proctree::freeze::Freezer;
use rollpoint_proctree::{Budgets, Launch, MemberSpec, Strategy, cgroup};

use super::stats::{Summary, ms};
use crate::cmd::locate;

const WALKER: &str = include_str!("sigstop_walker.py");
const CHAIN: &str = r#"n=$1; ready=$2
if [ "$n" -gt 1 ]; then sh "$0" $((n-1)) "$ready"; else touch "$ready"; sleep 3600; fi
"#;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Repetitions per measurement (1..=1000).
    #[arg(long, default_value_t = 9, value_parser = crate::cmd::number::whole::<usize>(1, 1000))]
    reps: usize,
    /// Tree sizes (processes), each built flat; the largest also nested.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,2400")]
    sizes: Vec<usize>,
    /// The supervisor binary whose size, RSS and start-up are reported.
    #[arg(long)]
    supervisor: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Flat,
    Nested,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("cannot create a scratch directory")?;
    let walker = dir.path().join("sigstop_walker.py");
    let chain = dir.path().join("chain.sh");
    std::fs::write(&walker, WALKER).context("cannot write the baseline script")?;
    std::fs::write(&chain, CHAIN).context("cannot write the chain script")?;

    let root = std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    let v2 = cgroup::v2_root().filter(|_| root);
    let v1 = cgroup::v1_freezer_root().filter(|_| root);
    let mut strategies = Vec::new();
    if v2.is_some() {
        strategies.push(Strategy::CgroupV2);
    }
    if v1.is_some() {
        strategies.push(Strategy::CgroupV1);
    }
    strategies.push(Strategy::Sigstop);
    if !root {
        println!("not root: cgroup strategies skipped");
    }

    let mut cases: Vec<(Shape, usize)> = args.sizes.iter().map(|&n| (Shape::Flat, n)).collect();
    if let Some(&max) = args.sizes.iter().max() {
        cases.push((Shape::Nested, max));
    }
    println!(
        "{:>6} {:>6}  {:<10} {:>22} {:>22} {:>14} {:>14} {:>8}",
        "procs",
        "shape",
        "method",
        "pause ms med/min/max",
        "continue ms med/min/max",
        "python pause",
        "python cont",
        "ratio"
    );
    for (shape, n) in cases {
        let tree = Tree::build(shape, n, v2.as_deref(), v1.as_deref(), dir.path(), &chain)?;
        let baseline = python_baseline(&walker, tree.root, args.reps)?;
        for &strategy in &strategies {
            let (pause, cont) = measure(&tree, strategy, args.reps)?;
            let ratio = ms(baseline.0.median) / ms(pause.median);
            println!(
                "{:>6} {:>6}  {:<10} {:>22} {:>22} {:>14.2} {:>14.2} {:>7.1}x",
                tree.count,
                match shape {
                    Shape::Flat => "flat",
                    Shape::Nested => "nested",
                },
                name(strategy),
                pause.ms(),
                cont.ms(),
                ms(baseline.0.median),
                ms(baseline.1.median),
                ratio
            );
        }
        tree.teardown()?;
    }
    println!("ratio = Python walker pause median / rollpoint pause median (higher is better)");
    supervisor_stats(args.supervisor.as_ref(), dir.path())
}

fn name(s: Strategy) -> &'static str {
    match s {
        Strategy::CgroupV2 => "cgroup-v2",
        Strategy::CgroupV1 => "cgroup-v1",
        Strategy::Sigstop | Strategy::Auto => "sigstop",
    }
}

/// A process tree built for the benchmark, in its own cgroups when root.
struct Tree {
    child: Child,
    root: u32,
    count: usize,
    launch: Launch,
}

impl Tree {
    fn build(
        shape: Shape,
        n: usize,
        v2: Option<&Path>,
        v1: Option<&Path>,
        dir: &Path,
        chain: &Path,
    ) -> anyhow::Result<Self> {
        let name = format!("bench-{}-{n}-{shape:?}", std::process::id());
        let cg_v2 = v2.map(|r| cgroup::create(r, &name)).transpose()?;
        let cg_v1 = v1.map(|r| cgroup::create(r, &name)).transpose()?;
        let ready = dir.join(format!("ready-{name}"));
        let join: String = [&cg_v2, &cg_v1]
            .into_iter()
            .flatten()
            .map(|d| format!("echo 0 > {}/cgroup.procs; ", d.display()))
            .collect();
        let body = match shape {
            Shape::Flat => format!(
                "i=1; while [ $i -lt {n} ]; do sleep 3600 & i=$((i+1)); done; touch {}; wait",
                ready.display()
            ),
            Shape::Nested => format!(
                "exec sh {} {} {}",
                chain.display(),
                n.saturating_sub(1),
                ready.display()
            ),
        };
        let child = Command::new("sh")
            .args(["-c", &format!("{join}{body}")])
            .stdin(Stdio::null())
            .spawn()
            .context("cannot start the tree")?;
        let root = child.id();
        let launch = Launch {
            id: name,
            spec: MemberSpec {
                roots: vec![root],
                include_roots: true,
                tag: None,
                exclude: Vec::new(),
            },
            cgroup_v2: cg_v2,
            cgroup_v1: cg_v1,
        };
        let end = Instant::now() + Duration::from_secs(300);
        while !ready.exists() {
            ensure!(
                Instant::now() < end,
                "the tree of {n} did not build in 300 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut probe = Freezer::new(launch.clone(), Strategy::Sigstop, Budgets::default())?;
        let count = probe.members().len();
        Ok(Self {
            child,
            root,
            count,
            launch,
        })
    }

    /// Kills the tree and removes its cgroups, confirming both.
    fn teardown(mut self) -> anyhow::Result<()> {
        self.kill()
    }

    fn kill(&mut self) -> anyhow::Result<()> {
        let budgets = Budgets {
            stop_grace: Duration::from_millis(200),
            ..Budgets::default()
        };
        let mut control = Freezer::new(self.launch.clone(), Strategy::Auto, budgets)?;
        let receipt = control.stop();
        let _ = self.child.wait();
        if receipt.cleanup_confirmed != Some(true) {
            bail!(
                "tree not cleaned up: {}",
                receipt.reason.unwrap_or_default()
            );
        }
        let cgroups = [self.launch.cgroup_v2.take(), self.launch.cgroup_v1.take()];
        for d in cgroups.into_iter().flatten() {
            cgroup::remove(&d)?;
        }
        Ok(())
    }
}

impl Drop for Tree {
    /// A benchmark that fails half-way still leaves nothing behind.
    fn drop(&mut self) {
        let cgroups = self.launch.cgroup_v2.is_some() || self.launch.cgroup_v1.is_some();
        if (cgroups || self.child.try_wait().ok().flatten().is_none())
            && let Err(e) = self.kill()
        {
            tracing::warn!(error = %e, "the benchmark's process tree could not be stopped");
        }
    }
}

fn measure(tree: &Tree, strategy: Strategy, reps: usize) -> anyhow::Result<(Summary, Summary)> {
    let mut control = Freezer::new(tree.launch.clone(), strategy, Budgets::default())?;
    let (mut pauses, mut conts) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        let r = control.pause();
        pauses.push(t.elapsed());
        ensure!(
            r.confirmed(),
            "pause not confirmed: {}",
            r.reason.unwrap_or_default()
        );
        ensure!(
            r.members.len() >= tree.count,
            "pause saw {} of {} processes",
            r.members.len(),
            tree.count
        );
        let t = Instant::now();
        let r = control.continue_frozen();
        conts.push(t.elapsed());
        ensure!(
            r.confirmed(),
            "continue not confirmed: {}",
            r.reason.unwrap_or_default()
        );
    }
    Ok((
        Summary::of(&pauses).context("no samples")?,
        Summary::of(&conts).context("no samples")?,
    ))
}

fn python_baseline(walker: &Path, root: u32, reps: usize) -> anyhow::Result<(Summary, Summary)> {
    let out = Command::new("python3")
        .arg(walker)
        .args([root.to_string(), reps.to_string()])
        .output()
        .context("cannot run python3 for the baseline")?;
    ensure!(
        out.status.success(),
        "baseline failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut p, mut c) = (Vec::new(), Vec::new());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: [f64; 2] =
            serde_json::from_str(line).with_context(|| format!("baseline printed {line:?}"))?;
        p.push(Duration::from_secs_f64(v[0]));
        c.push(Duration::from_secs_f64(v[1]));
    }
    Ok((
        Summary::of(&p).context("baseline printed nothing")?,
        Summary::of(&c).context("baseline printed nothing")?,
    ))
}

/// File size, peak RSS and start-up time of the supervisor against
/// `python3 -c pass`.
fn supervisor_stats(explicit: Option<&PathBuf>, dir: &Path) -> anyhow::Result<()> {
    let sup = locate::supervisor(explicit)?;
    let size = std::fs::metadata(&sup)?.len();
    let startup = |cmd: &mut Command| -> anyhow::Result<Summary> {
        let mut samples = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status()?;
            samples.push(t.elapsed());
            ensure!(status.success(), "{cmd:?} failed");
        }
        Summary::of(&samples).context("no samples")
    };
    let sup_start = startup(Command::new(&sup).arg("--help"))?;
    let py_start = startup(Command::new("python3").args(["-c", "pass"]))?;
    let session = dir.join("rss-session");
    let sup_rss = peak_rss(
        Command::new(&sup)
            .args(["run", "--no-cgroup", "--launch", "bench-rss", "--session"])
            .arg(&session)
            .args(["--", "sleep", "0.5"]),
    )?;
    let py_rss = peak_rss(Command::new("python3").args(["-c", "import time; time.sleep(0.5)"]))?;
    println!();
    println!("supervisor  {}", sup.display());
    println!("  file size         {:.2} MB", bytes_mb(size));
    println!(
        "  start-up ms       {} (python3 -c pass: {}; ratio {:.1}x)",
        sup_start.ms(),
        py_start.ms(),
        ms(py_start.median) / ms(sup_start.median)
    );
    println!("  peak RSS          {sup_rss} kB (python3 sleeping: {py_rss} kB)");
    Ok(())
}

#[expect(clippy::cast_precision_loss, reason = "display only")]
fn bytes_mb(b: u64) -> f64 {
    b as f64 / 1_048_576.0
}

/// VmHWM of a process sampled shortly before it exits.
fn peak_rss(cmd: &mut Command) -> anyhow::Result<u64> {
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
    std::thread::sleep(Duration::from_millis(300));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id()))?;
    child.wait()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in /proc/<pid>/status")
}
