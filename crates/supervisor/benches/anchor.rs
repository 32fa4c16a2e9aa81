//! The sandbox anchor's costs, each against a baseline measured in the same
//! run: starting a sandbox (spawn to the first `status` reply) against
//! `unshare --mount --uts --ipc --pid --fork true` (the namespaces alone),
//! and an `exec` of `true` through the anchor socket against spawning and
//! waiting for `true` on the host. Needs root (overlay mount, namespaces).
//!
//! Run: `cargo bench -p rollpoint-supervisor --bench anchor`

#![expect(clippy::unwrap_used, reason = "benchmark")]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rollpoint_proto::anchor::{ANCHOR_SOCKET, AnchorReply, AnchorRequest, ExecRequest};

const ROUNDS: usize = 31;
const SUPERVISOR: &str = env!("CARGO_BIN_EXE_rollpoint-supervisor");

/// An overlay of the host root under a tempdir (opaque empty /tmp).
struct Overlay {
    _dir: tempfile::TempDir,
    merged: PathBuf,
    control: PathBuf,
}

impl Overlay {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        for d in ["upper", "work", "merged", "control", "upper/tmp"] {
            std::fs::create_dir(p(d)).unwrap();
        }
        let status = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o"])
            .arg(format!(
                "lowerdir=/,upperdir={},workdir={}",
                p("upper").display(),
                p("work").display()
            ))
            .arg(p("merged"))
            .status()
            .unwrap();
        assert!(status.success(), "mount overlay (run as root)");
        Self {
            merged: p("merged"),
            control: p("control"),
            _dir: dir,
        }
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.merged).status();
    }
}

fn spawn_anchor(o: &Overlay) -> Child {
    Command::new("unshare")
        .args([
            "--mount", "--uts", "--ipc", "--pid", "--", SUPERVISOR, "anchor",
        ])
        .arg("--root")
        .arg(&o.merged)
        .arg("--control")
        .arg(&o.control)
        .args(["--hostname", "bench"])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn request(socket: &Path, req: &AnchorRequest) -> std::io::Result<AnchorReply> {
    let mut s = UnixStream::connect(socket)?;
    let mut line = serde_json::to_vec(req).unwrap();
    line.push(b'\n');
    s.write_all(&line)?;
    let mut reply = Vec::new();
    BufReader::new(s).read_until(b'\n', &mut reply)?;
    Ok(AnchorReply::decode(&reply).unwrap())
}

fn stop(mut anchor: Child) {
    // SAFETY: kill(2) on a child not yet waited for.
    unsafe { libc::kill(i32::try_from(anchor.id()).unwrap(), libc::SIGTERM) };
    anchor.wait().unwrap();
}

fn ms(d: &Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn summary(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    (ms(&v[v.len() / 2]), ms(&v[0]), ms(&v[v.len() - 1]))
}

fn row(name: &str, ours: Vec<Duration>, base_name: &str, base: Vec<Duration>) {
    let (m, lo, hi) = summary(ours);
    let (bm, blo, bhi) = summary(base);
    println!(
        "{name:<14} {m:>8.2} {lo:>8.2} {hi:>8.2}   {base_name:<34} {bm:>8.2} {blo:>8.2} {bhi:>8.2}   {:>6.2}x",
        m / bm
    );
}

fn main() {
    let o = Overlay::new();
    let socket = o.control.join(ANCHOR_SOCKET);

    let mut start = Vec::new();
    let mut namespaces = Vec::new();
    for _ in 0..ROUNDS {
        let _ = std::fs::remove_file(&socket);
        let t = Instant::now();
        let anchor = spawn_anchor(&o);
        loop {
            if let Ok(r) = request(&socket, &AnchorRequest::status()) {
                assert_eq!(r.pid, 1);
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        start.push(t.elapsed());
        stop(anchor);

        let t = Instant::now();
        let s = Command::new("unshare")
            .args(["--mount", "--uts", "--ipc", "--pid", "--fork", "true"])
            .status()
            .unwrap();
        namespaces.push(t.elapsed());
        assert!(s.success());
    }

    let anchor = spawn_anchor(&o);
    while request(&socket, &AnchorRequest::status()).is_err() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let exec = AnchorRequest::exec(ExecRequest {
        argv: vec!["true".into()],
        env: BTreeMap::from([("PATH".into(), "/usr/bin:/bin".into())]),
        cwd: "/".into(),
        timeout_ms: 60_000,
        output_limit: 4096,
        stdin: None,
    });
    let mut exec_times = Vec::new();
    let mut host = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let r = request(&socket, &exec).unwrap();
        exec_times.push(t.elapsed());
        assert_eq!(r.exec.unwrap().exit_code, Some(0));

        let t = Instant::now();
        let out = Command::new("true").output().unwrap();
        host.push(t.elapsed());
        assert!(out.status.success());
    }
    stop(anchor);

    println!(
        "{:<14} {:>8} {:>8} {:>8}   {:<34} {:>8} {:>8} {:>8}   {:>7}",
        "ms", "median", "min", "max", "baseline", "median", "min", "max", "ratio"
    );
    row(
        "sandbox start",
        start,
        "unshare ... --fork true",
        namespaces,
    );
    row("exec true", exec_times, "host spawn + wait of true", host);
    println!("ratio = anchor median / baseline median ({ROUNDS} rounds each)");
}
