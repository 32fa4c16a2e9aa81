//! `rollpoint bench checkpoint`: checkpoints of N in-flight rollouts
//! through the real `rollpoint run` stack, as a user runs it: N command
//! tasks (a shell loop appending a line every 0.2 s) on the btrfs store,
//! checkpoints asked for over the control endpoint, each reply's phase
//! timings kept (its `total_ms` is the checkpoint's time; the request's
//! round trip is shown beside it). Per size it also measures start-up (every sandbox has run
//! its first command), the resident memory of the sandboxes' supervisors,
//! and a resume after SIGKILL (every rollout relaunched). Baseline in the
//! same run, over the same sandboxes: the reference's way, one sandbox after
//! another: freeze its cgroup, `tar -c` its upper, thaw.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail, ensure};

use super::stats::{Summary, ms};
use crate::cmd::locate;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rollouts in flight, one run each (1..=4096).
    #[arg(long, value_delimiter = ',', default_value = "128,512,1024")]
    sizes: Vec<usize>,
    /// Checkpoints per size (1..=100); the baseline runs once per size.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Scratch directory (a run directory per size is made and removed in it).
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
    /// The static supervisor (default: as `rollpoint run` finds it).
    #[arg(long)]
    supervisor: Option<PathBuf>,
    /// Seconds between a rollout's lines (0.05..=60): at 0.2 s, a thousand
    /// rollouts start five thousand processes a second.
    #[arg(long, default_value_t = 0.2, value_parser = crate::cmd::number::seconds(0.05, 60.0))]
    tick_s: f64,
    /// Seconds to wait for a size's rollouts to start, or to resume (1..=3600).
    #[arg(long, default_value_t = 600)]
    wait_s: u64,
    /// The sandboxes' isolation, one run per value and size (`strict`,
    /// `trusted`, repeated as often as wanted); with both, the last table
    /// compares them, pair by pair and (several pairs) as a median.
    #[arg(long, value_delimiter = ',', default_value = "strict")]
    isolation: Vec<Isolation>,
}

/// `sandbox.isolation` of the bench's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Isolation {
    Strict,
    Trusted,
}

impl Isolation {
    fn name(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::Trusted => "trusted",
        }
    }
}

/// One size's figures.
struct Row {
    n: usize,
    isolation: Isolation,
    started: Duration,
    /// The run's own figure (`timings.total_ms`): prepare to resume.
    total: Vec<Duration>,
    /// The control request's round trip, as the client saw it.
    round_trip: Vec<Duration>,
    prepare: Vec<Duration>,
    commit: Vec<Duration>,
    baseline: Vec<Duration>,
    rss_kib: u64,
    pss_kib: u64,
    /// The machine's available memory (`MemAvailable`) before the run and
    /// once every rollout is running.
    available_before_kib: u64,
    available_after_kib: u64,
    resumed: Duration,
}

impl Row {
    /// What the machine gave each sandbox, kernel memory included: the
    /// drop in available memory over start-up, per sandbox.
    fn machine_kib(&self) -> u64 {
        self.available_before_kib
            .saturating_sub(self.available_after_kib)
            / self.n as u64
    }
}

/// `MemAvailable` of /proc/meminfo, KiB (0 when unreadable).
fn available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Tasks (processes and threads) a bench rollout's sandbox holds, rounded up.
const TASKS_PER_SANDBOX: usize = 10;

pub fn run(args: &Args) -> anyhow::Result<()> {
    ensure!(
        !args.sizes.is_empty() && args.sizes.iter().all(|n| (1..=4096).contains(n)),
        "--sizes: each must be in 1..=4096"
    );
    ensure!(
        (1..=100).contains(&args.rounds),
        "--rounds must be in 1..=100"
    );
    ensure!(
        (1..=3600).contains(&args.wait_s),
        "--wait-s must be in 1..=3600"
    );
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    ensure!(
        root,
        "rollpoint bench checkpoint needs root (sandboxes: mounts, cgroups, namespaces)"
    );
    // Each sandbox is about nine tasks (its anchor's two processes and
    // their threads, its launch's supervisor, the rollout's own processes),
    // and every task takes a pid.
    let pid_max: usize = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(usize::MAX);
    let most = args.sizes.iter().max().copied().unwrap_or(0);
    ensure!(
        most.saturating_mul(TASKS_PER_SANDBOX) < pid_max,
        "--sizes {most}: about {} tasks, past kernel.pid_max {pid_max}; raise it \
         (sysctl kernel.pid_max=4194304, systemd's default)",
        most.saturating_mul(TASKS_PER_SANDBOX)
    );
    let exe = std::env::current_exe().context("cannot find the rollpoint binary")?;
    let mut rows = Vec::new();
    ensure!(
        !args.isolation.is_empty(),
        "--isolation: strict, trusted or both"
    );
    for &n in &args.sizes {
        for &isolation in &args.isolation {
            let row = size(args, &exe, n, isolation)
                .with_context(|| format!("size {n}, {}", isolation.name()))?;
            print_row(&row);
            rows.push(row);
        }
    }
    println!();
    println!(
        "| N | isolation | start-up s | checkpoint ms med (min-max) | per rollout ms | prepare ms med | \
         commit ms med | baseline ms med | ratio vs baseline | RSS KiB/sandbox | PSS KiB/sandbox \
         | machine KiB/sandbox | available after start-up MiB | resume s |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let total = Summary::of(&r.total).context("no checkpoint")?;
        let prepare = Summary::of(&r.prepare).context("no checkpoint")?;
        let commit = Summary::of(&r.commit).context("no checkpoint")?;
        let base = Summary::of(&r.baseline).context("no baseline")?;
        println!(
            "| {} | {} | {:.2} | {:.0} ({:.0}-{:.0}) | {:.3} | {:.0} | {:.0} | {:.0} | {:.3} | {} | {} | {} | {} | {:.2} |",
            r.n,
            r.isolation.name(),
            r.started.as_secs_f64(),
            ms(total.median),
            ms(total.min),
            ms(total.max),
            ms(total.median) / r.n as f64,
            ms(prepare.median),
            ms(commit.median),
            ms(base.median),
            total.median.as_secs_f64() / base.median.as_secs_f64(),
            r.rss_kib / r.n as u64,
            r.pss_kib / r.n as u64,
            r.machine_kib(),
            r.available_after_kib / 1024,
            r.resumed.as_secs_f64(),
        );
    }
    compare_isolation(&rows)?;
    let first_kind = args.isolation[0];
    let same: Vec<&Row> = rows.iter().filter(|r| r.isolation == first_kind).collect();
    if let (Some(first), Some(last)) = (same.first(), same.last())
        && same.len() > 1
    {
        let a = Summary::of(&first.total).context("no checkpoint")?.median;
        let b = Summary::of(&last.total).context("no checkpoint")?.median;
        println!(
            "\ntime({})/time({}) = {:.2} (linear: {:.2})",
            last.n,
            first.n,
            b.as_secs_f64() / a.as_secs_f64(),
            last.n as f64 / first.n as f64
        );
    }
    Ok(())
}

/// Strict against trusted at each size measured both ways: start-up,
/// checkpoint and resume, as ratios (the target: start-up at most 1.10,
/// checkpoint and resume unchanged). The k-th strict run of a size is paired
/// with its k-th trusted run (`--isolation strict,trusted,strict,trusted`
/// alternates them); with several pairs, a last row per size gives the
/// median, min and max of each ratio.
fn compare_isolation(rows: &[Row]) -> anyhow::Result<()> {
    let of = |n: usize, kind: Isolation| {
        rows.iter()
            .filter(move |r| r.n == n && r.isolation == kind)
            .collect::<Vec<_>>()
    };
    let mut sizes: Vec<usize> = Vec::new();
    for r in rows {
        if !sizes.contains(&r.n) {
            sizes.push(r.n);
        }
    }
    let ck = |r: &Row| {
        Summary::of(&r.total)
            .map(|x| x.median.as_secs_f64())
            .context("no checkpoint")
    };
    let mut table = Vec::new();
    for n in sizes {
        let pairs: Vec<[f64; 3]> = of(n, Isolation::Strict)
            .into_iter()
            .zip(of(n, Isolation::Trusted))
            .map(|(s, t)| {
                Ok([
                    s.started.as_secs_f64() / t.started.as_secs_f64(),
                    ck(s)? / ck(t)?,
                    s.resumed.as_secs_f64() / t.resumed.as_secs_f64(),
                ])
            })
            .collect::<anyhow::Result<_>>()?;
        for p in &pairs {
            table.push(format!("| {n} | {:.2} | {:.2} | {:.2} |", p[0], p[1], p[2]));
        }
        if pairs.len() > 1 {
            let column = |i: usize| {
                let mut v: Vec<f64> = pairs.iter().map(|p| p[i]).collect();
                v.sort_by(f64::total_cmp);
                let median = if v.len() % 2 == 1 {
                    v[v.len() / 2]
                } else {
                    (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
                };
                format!(
                    "{median:.2} ({:.2}-{:.2})",
                    v.first().copied().unwrap_or_default(),
                    v.last().copied().unwrap_or_default()
                )
            };
            table.push(format!(
                "| {n}, median of {} pairs | {} | {} | {} |",
                pairs.len(),
                column(0),
                column(1),
                column(2)
            ));
        }
    }
    if table.is_empty() {
        return Ok(());
    }
    println!(
        "\n| N | start-up strict/trusted | checkpoint strict/trusted (medians) | resume strict/trusted |"
    );
    println!("|---:|---:|---:|---:|");
    for line in table {
        println!("{line}");
    }
    Ok(())
}

fn print_row(r: &Row) {
    let cell = |s: &[Duration]| Summary::of(s).map_or_else(|| "-".into(), |s| s.ms());
    println!(
        "N={:<5} {:<7} start-up {:.2} s  checkpoint {}  (request {})  prepare {}  commit {}  baseline {}  \
         RSS {} KiB  PSS {} KiB  machine {} KiB per sandbox  available {} MiB  resume {:.2} s",
        r.n,
        r.isolation.name(),
        r.started.as_secs_f64(),
        cell(&r.total),
        cell(&r.round_trip),
        cell(&r.prepare),
        cell(&r.commit),
        cell(&r.baseline),
        r.rss_kib / r.n as u64,
        r.pss_kib / r.n as u64,
        r.machine_kib(),
        r.available_after_kib / 1024,
        r.resumed.as_secs_f64(),
    );
}

/// SIGKILLs the run on drop (a crash: its sandboxes freeze and wait for a
/// resume or a sweep).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn size(args: &Args, exe: &Path, n: usize, isolation: Isolation) -> anyhow::Result<Row> {
    let scratch = tempfile::Builder::new()
        .prefix("rollpoint-bench-ck-")
        .tempdir_in(&args.dir)
        .with_context(|| format!("cannot make a scratch directory in {}", args.dir.display()))?;
    let dir = scratch.path();
    let tasks = dir.join("tasks.jsonl");
    let script = format!("while :; do echo x >> lines; sleep {}; done", args.tick_s);
    let mut text = String::new();
    for i in 0..n {
        let row = serde_json::json!({
            "v": 1,
            "task": {
                "id": format!("b{i}"),
                "verify": {"command": ["true"]},
                "sandbox": {"isolation": isolation.name()}
            },
            "adapter": {"kind": "command", "argv": ["/bin/sh", "-c", &script], "pauses": true}
        });
        text.push_str(&row.to_string());
        text.push('\n');
    }
    std::fs::write(&tasks, text).context("write the tasks")?;
    let config = dir.join("run.toml");
    std::fs::write(
        &config,
        format!("v = 1\nconcurrency = {n}\ncheckpoint_every_s = 0\nkeep = 2\nstore = \"btrfs\"\n"),
    )
    .context("write the config")?;
    let token = dir.join("token");
    std::fs::write(&token, "bench-token-0123456789").context("write the token")?;
    let run_dir = dir.join("run");
    let log = dir.join("run.log");
    let supervisor = match &args.supervisor {
        Some(p) => p.clone(),
        None => locate::supervisor(None)?,
    };
    let wait = Duration::from_secs(args.wait_s);

    let available_before_kib = available_kib();
    let started_at = Instant::now();
    let since = SystemTime::now();
    let mut cmd = Command::new(exe);
    cmd.arg("run")
        .arg(&tasks)
        .arg("--config")
        .arg(&config)
        .arg("--run-dir")
        .arg(&run_dir)
        .arg("--supervisor")
        .arg(&supervisor)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--control-token-file")
        .arg(&token);
    let run = Running(spawn(cmd, &log)?);
    wait_running(&run_dir, n, since, wait, &log)?;
    let started = started_at.elapsed();
    let (rss_kib, pss_kib) = supervisor_memory();
    let available_after_kib = available_kib();

    let mut row = Row {
        n,
        isolation,
        started,
        total: Vec::new(),
        round_trip: Vec::new(),
        prepare: Vec::new(),
        commit: Vec::new(),
        baseline: Vec::new(),
        rss_kib,
        pss_kib,
        available_before_kib,
        available_after_kib,
        resumed: Duration::ZERO,
    };
    for _ in 0..args.rounds {
        let t = Instant::now();
        let reply = checkpoint(&run_dir, "bench-token-0123456789")?;
        let took = t.elapsed();
        let timing = |k: &str| {
            reply["timings"][k]
                .as_u64()
                .map(Duration::from_millis)
                .with_context(|| format!("checkpoint reply without timings.{k}: {reply}"))
        };
        ensure!(
            reply["scope"].as_array().map(Vec::len) == Some(n),
            "checkpoint of {} rollouts, not {n}: {reply}",
            reply["scope"].as_array().map_or(0, Vec::len)
        );
        row.total.push(timing("total_ms")?);
        row.round_trip.push(took);
        row.prepare.push(timing("prepare_ms")?);
        row.commit.push(timing("commit_ms")?);
    }
    // Once per size: at a thousand sandboxes it takes minutes.
    row.baseline.push(baseline(&run_dir, dir)?);

    // A crash, then a resume: every rollout relaunched from the checkpoint.
    drop(run);
    let since = SystemTime::now();
    let t = Instant::now();
    let mut cmd = Command::new(exe);
    cmd.arg("resume").arg(&run_dir);
    let resumed = Running(spawn(cmd, &log)?);
    wait_running(&run_dir, n, since, wait, &log)?;
    row.resumed = t.elapsed();
    drop(resumed);
    // What the killed processes left: swept by a last resume's start would
    // take as long again; the sandboxes' processes are killed with their
    // cgroups when the scratch directory's store goes.
    cleanup(&run_dir);
    let kept = args.dir.join(format!("rollpoint-bench-checkpoint-{n}.log"));
    if std::fs::copy(&log, &kept).is_ok() {
        println!("N={n}: the run's log is kept at {}", kept.display());
    }
    Ok(row)
}

fn spawn(mut cmd: Command, log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("open {}", log.display()))?;
    let err = out.try_clone().context("duplicate the log")?;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .context("start rollpoint")
}

/// Waits until `n` sandboxes of the run have appended to their `lines`
/// since `since`: each has run (or, after a resume, rerun) its command.
fn wait_running(
    run_dir: &Path,
    n: usize,
    since: SystemTime,
    wait: Duration,
    log: &Path,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + wait;
    let sandboxes = run_dir.join("owner/sandboxes");
    // Each sandbox's root as the host reaches it, through its anchor (the
    // overlay is attached in the sandbox's namespace alone), once recorded.
    let mut roots: std::collections::HashMap<std::ffi::OsString, PathBuf> = Default::default();
    loop {
        let live = std::fs::read_dir(&sandboxes)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| {
                        let root = match roots.get(&e.file_name()) {
                            Some(root) => root.clone(),
                            None => {
                                let Some(root) = anchor_root(&e.path()) else {
                                    return false;
                                };
                                roots.insert(e.file_name(), root.clone());
                                root
                            }
                        };
                        std::fs::metadata(root.join("workspace/lines"))
                            .and_then(|m| m.modified())
                            .is_ok_and(|m| m >= since)
                    })
                    .count()
            })
            .unwrap_or(0);
        if live >= n {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            bail!(
                "only {live} of {n} rollouts running after {wait:?}; log tail:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn checkpoint(run_dir: &Path, token: &str) -> anyhow::Result<serde_json::Value> {
    let file = rollpoint_run::EndpointFile::load(run_dir).context("control.json")?;
    let url = format!("http://{}/v1/coordinator/checkpoint", file.addr);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(900)))
        .build()
        .into();
    let mut reply = agent
        .post(&url)
        .header("authorization", &format!("Bearer {token}"))
        .header("content-type", "application/json")
        .send(r#"{"v":1}"#)
        .with_context(|| format!("POST {url}"))?;
    let status = reply.status().as_u16();
    let text = reply.body_mut().read_to_string().context("reply body")?;
    ensure!(status == 200, "checkpoint: {status} {text}");
    serde_json::from_str(&text).context("checkpoint reply")
}

/// The reference's way over the same sandboxes, one after another: freeze
/// the sandbox's cgroup and confirm, `tar -c` its upper, thaw.
fn baseline(run_dir: &Path, scratch: &Path) -> anyhow::Result<Duration> {
    let cgroups: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup/unified/rollpoint")
        .context("the cgroup2 rollpoint directory")?
        .flatten()
        .map(|e| e.path())
        .collect();
    let mut sandboxes = Vec::new();
    for entry in std::fs::read_dir(run_dir.join("owner/sandboxes"))?.flatten() {
        let Ok(bytes) = std::fs::read(entry.path().join("sandbox.json")) else {
            continue;
        };
        let rec: serde_json::Value = serde_json::from_slice(&bytes)?;
        let (Some(id), Some(upper)) = (rec["id"].as_str(), rec["upper"].as_str()) else {
            continue;
        };
        let suffix = format!("-{id}");
        let Some(cgroup) = cgroups
            .iter()
            .find(|p| p.to_string_lossy().ends_with(&suffix))
        else {
            continue;
        };
        sandboxes.push((cgroup.clone(), PathBuf::from(upper)));
    }
    ensure!(!sandboxes.is_empty(), "no sandboxes for the baseline");
    let archive = scratch.join("baseline.tar");
    let start = Instant::now();
    for (cgroup, upper) in &sandboxes {
        std::fs::write(cgroup.join("cgroup.freeze"), "1")?;
        while !std::fs::read_to_string(cgroup.join("cgroup.events"))?.contains("frozen 1") {
            std::thread::sleep(Duration::from_micros(200));
        }
        let ok = Command::new("tar")
            .args(["--xattrs", "--numeric-owner", "-cf"])
            .arg(&archive)
            .arg("-C")
            .arg(upper)
            .arg(".")
            .status()?
            .success();
        std::fs::write(cgroup.join("cgroup.freeze"), "0")?;
        ensure!(ok, "tar of {} failed", upper.display());
    }
    let took = start.elapsed();
    let _ = std::fs::remove_file(&archive);
    Ok(took)
}

/// `/proc/<anchor>/root` of the sandbox whose directory is `dir`, once its
/// record names its anchor.
fn anchor_root(dir: &Path) -> Option<PathBuf> {
    let bytes = std::fs::read(dir.join("sandbox.json")).ok()?;
    let record: rollpoint_sandbox::local::SandboxRecord = serde_json::from_slice(&bytes).ok()?;
    (record.anchor_pid > 0).then(|| PathBuf::from(format!("/proc/{}/root", record.anchor_pid)))
}

/// RSS and PSS (KiB) of every supervisor process: the anchors (outside
/// and PID 1) and the launches' supervisors.
fn supervisor_memory() -> (u64, u64) {
    let (mut rss, mut pss) = (0, 0);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let p = entry.path();
        let Ok(cmdline) = std::fs::read(p.join("cmdline")) else {
            continue;
        };
        let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        let is_supervisor = argv0.ends_with(b"rollpoint-supervisor")
            || (argv0 == b"/proc/self/exe" && cmdline.windows(5).any(|w| w == b"\0run\0"));
        if !is_supervisor {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(p.join("smaps_rollup")) else {
            continue;
        };
        for line in text.lines() {
            let kib = || {
                line.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            if line.starts_with("Rss:") {
                rss += kib();
            } else if line.starts_with("Pss:") {
                pss += kib();
            }
        }
    }
    (rss, pss)
}

/// Kills what a killed run left (its sandboxes, frozen by their anchors)
/// and releases its store, so the scratch directory can go.
fn cleanup(run_dir: &Path) {
    let exe = std::env::current_exe().ok();
    if let Some(exe) = exe {
        let _ = Command::new(exe)
            .arg("sweep")
            .arg(run_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
