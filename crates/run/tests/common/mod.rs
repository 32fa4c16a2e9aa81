//! Shared by the tests of `rollpoint run`: the binary, task files written
//! for one test, and waiting on the process with a generous limit.
#![allow(dead_code, reason = "each test uses its part")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use rollpoint_testkit::rollpoint_bin;

/// Lines each command task appends (one every `tick_ms`).
pub const LINES: u32 = 20;
/// Steps of the native worker's script.
pub const STEPS: u32 = 6;

/// A command task that appends 1..=LINES to `lines`, continuing from the
/// file's length, and is verified by comparing the file with `seq`.
pub fn command_task(id: &str, tick_ms: u32) -> serde_json::Value {
    let sleep = format!("{}.{:03}", tick_ms / 1000, tick_ms % 1000);
    let script = format!(
        "n=$(wc -l < lines 2>/dev/null || echo 0); while [ \"$n\" -lt {LINES} ]; do n=$((n+1)); echo \"$n\" >> lines; sleep {sleep}; done"
    );
    serde_json::json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["/bin/sh", "-c", format!("seq 1 {LINES} | cmp -s - lines")]}},
        "adapter": {"kind": "command", "argv": ["/bin/sh", "-c", script], "pauses": true}
    })
}

/// A native-worker task against the run's scripted model.
pub fn native_task(id: &str) -> serde_json::Value {
    rollpoint_testkit::native_task(id, STEPS)
}

/// The scripted model: STEPS shell steps; the tool runs take the time, so a
/// kill lands in a tool far more often than in a model call.
pub fn model_script(tool_ms: u32) -> serde_json::Value {
    rollpoint_testkit::native_model_script(STEPS, tool_ms)
}

/// Waits up to `limit` until no process, mount or cgroup of the run is
/// left (processes and cgroups by the rollouts' `tag`); `Err` lists what
/// still is.
pub fn wait_nothing_left(tag: &str, run_dir: &Path, limit: Duration) -> Result<(), String> {
    let end = std::time::Instant::now() + limit;
    loop {
        let (procs, mounts, groups) = (
            processes_of(tag),
            rollpoint_testkit::mounts_under(run_dir),
            cgroups_of(tag),
        );
        if procs.is_empty() && mounts.is_empty() && groups.is_empty() {
            return Ok(());
        }
        if std::time::Instant::now() >= end {
            return Err(format!(
                "left behind: processes {procs:?}, mounts {mounts:?}, cgroups {groups:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Puts `check` (a shell condition) before the task's verify script, so
/// verify passes only when both hold.
pub fn also_verify(task: &mut serde_json::Value, check: &str) {
    let script = task["task"]["verify"]["command"][2]
        .as_str()
        .expect("a /bin/sh -c verify script")
        .to_owned();
    task["task"]["verify"]["command"][2] = format!("{check} && {script}").into();
}

pub fn write_jsonl(path: &Path, rows: &[serde_json::Value]) {
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).expect("write tasks");
}

/// `rollpoint` with `args`, stderr to `log`.
pub fn spawn(args: &[&std::ffi::OsStr], log: &Path) -> Child {
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open log");
    Command::new(rollpoint_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("spawn rollpoint")
}

/// Waits for `child` up to `limit`; kills it and fails past that.
pub fn wait(child: &mut Child, limit: Duration, log: &Path) -> ExitStatus {
    let end = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!(
                "rollpoint did not end within {limit:?}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `path` exists.
pub fn wait_file(path: &Path, limit: Duration, log: &Path) {
    let end = Instant::now() + limit;
    while !path.exists() {
        assert!(
            Instant::now() < end,
            "{} did not appear:\n{}",
            path.display(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Processes whose environment names a rollout starting with `tag`.
pub fn processes_of(tag: &str) -> Vec<u32> {
    rollpoint_testkit::processes_with_env("ROLLPOINT_ROLLOUT", tag)
}

/// Cgroup directories (a few levels deep) whose name holds `tag`.
pub fn cgroups_of(tag: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: u32, tag: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = e.path();
            if e.file_name().to_string_lossy().contains(tag) {
                out.push(p.clone());
            }
            if depth > 0 {
                walk(&p, depth - 1, tag, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(Path::new("/sys/fs/cgroup"), 4, tag, &mut out);
    out
}

/// A request to the run's control endpoint (address from
/// `RUN_DIR/control.json`): the status code and the JSON body.
pub fn control(
    run_dir: &Path,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, serde_json::Value) {
    let file = rollpoint_run::EndpointFile::load(run_dir).expect("control.json");
    let url = format!("http://{}{path}", file.addr);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into();
    let auth = format!("Bearer {token}");
    let reply = match (method, body) {
        ("GET", _) => agent.get(&url).header("authorization", &auth).call(),
        (_, body) => agent
            .post(&url)
            .header("authorization", &auth)
            .header("content-type", "application/json")
            .send(body.unwrap_or_default()),
    };
    let mut reply = reply.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = reply.status().as_u16();
    let text = reply.body_mut().read_to_string().expect("reply body");
    let value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, value)
}

/// Takes a checkpoint over the control endpoint, holding every rollout
/// paused `hold_ms` after it is published; returns the report.
pub fn checkpoint_held(run_dir: &Path, token: &str, hold_ms: u64) -> serde_json::Value {
    let body = serde_json::json!({"v": 1, "hold_ms": hold_ms}).to_string();
    let (status, reply) = control(
        run_dir,
        token,
        "POST",
        "/v1/coordinator/checkpoint",
        Some(&body),
    );
    assert_eq!(status, 200, "checkpoint: {reply}");
    reply
}

/// utime + stime of `pid` in clock ticks (`None` once it is gone).
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The argv of `rollpoint run TASKS --config CONFIG --run-dir RUN_DIR
/// --supervisor SUP`.
pub fn run_args<'a>(
    tasks: &'a Path,
    config: &'a Path,
    run_dir: &'a Path,
    sup: &'a Path,
) -> Vec<&'a std::ffi::OsStr> {
    use std::ffi::OsStr;
    vec![
        OsStr::new("run"),
        tasks.as_os_str(),
        OsStr::new("--config"),
        config.as_os_str(),
        OsStr::new("--run-dir"),
        run_dir.as_os_str(),
        OsStr::new("--supervisor"),
        sup.as_os_str(),
    ]
}

/// The argv of [`run_args`] serving the control endpoint on a free port of 127.0.0.1
/// behind the token in `token_file`.
pub fn run_args_listening(
    tasks: &Path,
    config: &Path,
    run_dir: &Path,
    sup: &Path,
    token_file: &Path,
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = run_args(tasks, config, run_dir, sup)
        .into_iter()
        .map(std::ffi::OsStr::to_owned)
        .collect();
    args.extend([
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--control-token-file".into(),
        token_file.as_os_str().to_owned(),
    ]);
    args
}

/// Every snapshot id the retained checkpoints name (index.json).
pub fn retained_snapshots(owner: &Path) -> BTreeSet<String> {
    let Ok(text) = std::fs::read_to_string(owner.join("index.json")) else {
        return BTreeSet::new();
    };
    let v: serde_json::Value = serde_json::from_str(&text).expect("index.json");
    let mut out = BTreeSet::new();
    // The index maps checkpoints to snapshots; take every string under it.
    fn strings(v: &serde_json::Value, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::String(s) => {
                out.insert(s.clone());
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            serde_json::Value::Object(m) => m.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }
    strings(&v, &mut out);
    out
}

pub fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `rollpoint run` of `tasks` with `config` into `run_dir`, with `name`=`value` in its
/// environment, to its end; fails unless it succeeds with every row verified. Returns its
/// stderr.
pub fn run_verified_with_env(
    tasks: &Path,
    config: &Path,
    run_dir: &Path,
    (name, value): (&str, &str),
    log: &Path,
) -> String {
    let err = std::fs::File::create(log).expect("log");
    let sup = rollpoint_testkit::supervisor_bin();
    let mut run = Command::new(rollpoint_bin())
        .args(run_args(tasks, config, run_dir, &sup))
        .env(name, value)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("spawn rollpoint");
    let status = wait(&mut run, Duration::from_secs(300), log);
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "the run failed ({status}):\n{text}");
    for r in rollpoint_run::read_results(run_dir).expect("results") {
        assert_eq!(
            r.status,
            rollpoint_driver::Status::Verified,
            "{r:?}\n{text}"
        );
    }
    text
}

/// Every regular file under `dir` that holds `needle`.
pub fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let holds =
        |p: &Path| std::fs::read(p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle));
    if dir.is_file() {
        if holds(dir) {
            out.push(dir.display().to_string());
        }
        return out;
    }
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                stack.push(e.path());
            } else if kind.is_file() && holds(&e.path()) {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

/// `rollpoint run` of `rows` in `dir/run` with no timed checkpoint, to its end (it must
/// succeed); returns the result rows and the run directory.
pub fn run_rows_to_end(
    dir: &Path,
    rows: &[serde_json::Value],
) -> (Vec<rollpoint_driver::RolloutResult>, PathBuf) {
    use std::ffi::OsStr;
    let sup = rollpoint_testkit::supervisor_bin();
    let tasks = dir.join("tasks.jsonl");
    write_jsonl(&tasks, rows);
    let run_dir = dir.join("run");
    let log = dir.join("run.log");
    let mut child = spawn(
        &[
            OsStr::new("run"),
            tasks.as_os_str(),
            OsStr::new("--run-dir"),
            run_dir.as_os_str(),
            OsStr::new("--supervisor"),
            sup.as_os_str(),
            OsStr::new("--checkpoint-every-s"),
            OsStr::new("0"),
        ],
        &log,
    );
    let status = wait(&mut child, Duration::from_secs(300), &log);
    assert!(
        status.success(),
        "run failed ({status}):\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let results = rollpoint_run::read_results(&run_dir).expect("results");
    (results, run_dir)
}

/// The workspaces of the run's sandboxes whose directory name holds `part` (a branch's is
/// `.b<i>.`).
pub fn workspaces(run_dir: &Path, part: &str) -> Vec<PathBuf> {
    std::fs::read_dir(run_dir.join("owner/sandboxes"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().contains(part))
                .filter_map(|e| rollpoint_testkit::sandbox_root(&e.path()))
                .map(|root| root.join("workspace"))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

/// `POST /v1/coordinator/fork` `body` on the run's control endpoint: the status and reply.
pub fn fork(run_dir: &Path, token: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    control(
        run_dir,
        token,
        "POST",
        "/v1/coordinator/fork",
        Some(&body.to_string()),
    )
}

/// The branch ids of a fork reply.
pub fn branch_ids(reply: &serde_json::Value) -> Vec<String> {
    reply["branches"]
        .as_array()
        .expect("branches")
        .iter()
        .map(|b| b.as_str().expect("id").to_owned())
        .collect()
}

/// Each of branches 1..=`n` has its sandbox there, holding the source's `kept` file and not
/// `marker`, which the source wrote after the checkpoint.
pub fn check_branches_start_from_the_snapshot(run_dir: &Path, n: usize, kept: &str, marker: &str) {
    for i in 1..=n {
        let found = workspaces(run_dir, &format!(".b{i}."));
        assert!(!found.is_empty(), "branch {i}'s sandbox is there");
        for ws in found {
            assert!(ws.join(kept).exists(), "branch {i} has the source's {kept}");
            assert!(
                !ws.join(marker).exists(),
                "branch {i} sees a file written after the checkpoint ({})",
                ws.display()
            );
        }
    }
}
