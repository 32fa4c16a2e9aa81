//! `rollpoint demo`: the supervisor pausing and continuing a live process
//! tree, end to end through its control socket.
//!
//! Three workers each append a counter to a file every 100 ms. The demo
//! pauses the launch, shows that no file changes while it is held, continues
//! it, and checks that every worker wrote every step exactly once.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use rollpoint_proto::receipt::Receipt;
use rollpoint_proto::supervisor::Reply;

use super::locate;

const WORKERS: usize = 3;
const STEPS: usize = 40;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The supervisor binary (default: the static build, or the one next to rollpoint).
    #[arg(long)]
    supervisor: Option<PathBuf>,
    /// Freeze strategy: auto, cgroup-v2, cgroup-v1 or sigstop.
    #[arg(long, default_value = "auto")]
    freeze: String,
    /// How long to hold the pause, in seconds (0..=3600).
    #[arg(long, default_value_t = 1.0, value_parser = super::number::seconds(0.0, 3600.0))]
    hold: f64,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let sup = locate::supervisor(args.supervisor.as_ref())?;
    let dir = tempfile::tempdir().context("cannot create a scratch directory")?;
    let session = dir.path().join("session");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).context("cannot create the work directory")?;
    let script = format!(
        "for w in $(seq 1 {WORKERS}); do \
           ( i=0; while [ $i -lt {STEPS} ]; do i=$((i+1)); echo $i >> worker-$w; sleep 0.1; done ) & \
         done; wait"
    );
    println!("supervisor  {}", sup.display());
    let mut child = Command::new(&sup)
        .args(["run", "--session"])
        .arg(&session)
        .args(["--launch", &format!("demo-{}", std::process::id())])
        .args(["--freeze", &args.freeze, "--cwd"])
        .arg(&work)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", sup.display()))?;

    let files: Vec<PathBuf> = (1..=WORKERS)
        .map(|w| work.join(format!("worker-{w}")))
        .collect();
    wait_until(Duration::from_secs(30), || {
        files.iter().all(|f| lines(f) >= 5)
    })
    .context("the workers did not start writing")?;

    let pause = ask(&sup, &session, "pause")?;
    println!(
        "paused      {} processes with {} in {:.2} ms",
        pause.members.len(),
        pause.method.as_str(),
        micros_ms(pause.duration_us)
    );
    let held: Vec<usize> = files.iter().map(|f| lines(f)).collect();
    std::thread::sleep(Duration::from_secs_f64(args.hold));
    let after: Vec<usize> = files.iter().map(|f| lines(f)).collect();
    ensure!(
        held == after,
        "files changed while paused: {held:?} -> {after:?}"
    );
    println!(
        "held        {:.1} s, no file changed (lines per worker: {held:?})",
        args.hold
    );

    let cont = ask(&sup, &session, "continue")?;
    println!("continued   in {:.2} ms", micros_ms(cont.duration_us));

    let status = child.wait().context("cannot wait for the supervisor")?;
    ensure!(status.success(), "the launch failed: {status}");
    for f in &files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
        let expected: Vec<String> = (1..=STEPS).map(|n| n.to_string()).collect();
        let got: Vec<&str> = text.lines().collect();
        ensure!(
            got == expected,
            "{}: steps lost or repeated: {got:?}",
            f.display()
        );
    }
    println!(
        "finished    exit 0; {WORKERS} workers wrote all {STEPS} steps, none lost or repeated"
    );
    Ok(())
}

fn ask(sup: &Path, session: &Path, verb: &str) -> anyhow::Result<Receipt> {
    let out = Command::new(sup)
        .arg(verb)
        .arg("--session")
        .arg(session)
        .output()
        .with_context(|| format!("cannot run {} {verb}", sup.display()))?;
    let reply = Reply::decode(&out.stdout).with_context(|| {
        format!(
            "{verb}: unreadable reply: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let receipt = reply
        .receipt
        .with_context(|| format!("{verb}: no receipt in the reply"))?;
    if !receipt.confirmed() {
        bail!(
            "{verb} not confirmed: {}",
            receipt.reason.unwrap_or_default()
        );
    }
    Ok(receipt)
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> anyhow::Result<()> {
    let end = Instant::now() + timeout;
    while !f() {
        ensure!(Instant::now() < end, "timed out after {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

#[expect(clippy::cast_precision_loss, reason = "display only")]
fn micros_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}
