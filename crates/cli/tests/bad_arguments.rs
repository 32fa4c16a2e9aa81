//! Every binary refuses bad arguments and bad input files the same way: a
//! non-zero exit (never a panic's 101), within seconds (never a hang), and a
//! message naming the flag, the field or the path that is wrong (with the
//! allowed range for numbers). Nothing is started or created on the way.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::cargo_bin;

/// Runs `program args` in `dir`; fails unless it exits non-zero (not 101)
/// within 20 s with `needle` in its stderr and no panic.
fn refused(dir: &Path, program: &Path, args: &[&str], needle: &str) {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            child.kill().unwrap();
            panic!("{} {args:?} hung", program.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    assert!(
        code.is_some_and(|c| c != 0 && c != 101) && !err.contains("panicked"),
        "{} {args:?}: exit {code:?}:\n{err}",
        program.display()
    );
    assert!(
        err.contains(needle),
        "{} {args:?}: the error does not name `{needle}`:\n{err}",
        program.display()
    );
}

#[test]
fn rollpoint_refuses_bad_arguments_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("bad.json"), "{\"v\":1").unwrap();
    std::fs::write(d.join("tasks.jsonl"), "garbage\n").unwrap();
    std::fs::write(d.join("tok"), "t\n").unwrap();
    std::fs::write(d.join("empty.tok"), "\n").unwrap();
    std::fs::create_dir(d.join("v9")).unwrap();
    std::fs::write(d.join("v9/run.json"), "{\"v\":9}").unwrap();
    let bin = cargo_bin("rollpoint");
    let cases: &[(&[&str], &str)] = &[
        (&["run", "nope.jsonl", "--run-dir", "r"], "nope.jsonl"),
        (&["run", "tasks.jsonl", "--run-dir", "r"], "tasks.jsonl"),
        (
            &["run", "tasks.jsonl", "--run-dir", "r", "--concurrency", "0"],
            "1..=65536",
        ),
        (
            &[
                "run",
                "tasks.jsonl",
                "--run-dir",
                "r",
                "--concurrency",
                "99999999999999999999999",
            ],
            "concurrency",
        ),
        (
            &[
                "run",
                "tasks.jsonl",
                "--run-dir",
                "r",
                "--config",
                "bad.json",
            ],
            "bad.json",
        ),
        // A negative number reaches the flag's own parser, which names the flag and its range.
        (
            &[
                "run",
                "t.jsonl",
                "--run-dir",
                "r",
                "--checkpoint-every-s",
                "-1",
            ],
            "'--checkpoint-every-s <CHECKPOINT_EVERY_S>': must be a whole number in 0..=604800",
        ),
        (
            &["run", "t.jsonl", "--run-dir", "r", "--keep", "-3"],
            "'--keep <KEEP>': must be a whole number in 1..=1000",
        ),
        (
            &["run", "t.jsonl", "--run-dir", "r", "--gateway-port", "-1"],
            "'--gateway-port <GATEWAY_PORT>': must be a whole number in 0..=65535",
        ),
        (
            &["demo", "--hold", "-0.5"],
            "'--hold <HOLD>': must be a number of seconds in 0..=3600",
        ),
        (&["resume", "nowhere"], "nowhere"),
        (&["resume", "v9"], "unknown version 9"),
        (&["status", "v9"], "unknown version 9"),
        (&["report", "v9"], "unknown version 9"),
        (&["report", "nowhere"], "nowhere"),
        (&["export", "v9"], "unknown version 9"),
        (&["export", "nowhere"], "nowhere"),
        (&["export", "v9", "--format", "xml"], "xml"),
        (
            &[
                "fork",
                "v9",
                "--checkpoint",
                "ck-1",
                "--rollout",
                "r",
                "--n",
                "0",
            ],
            "'--n <N>': must be a whole number in 1..=256",
        ),
        (
            &[
                "fork",
                "v9",
                "--checkpoint",
                "ck-1",
                "--rollout",
                "~r",
                "--n",
                "2",
            ],
            "rollout",
        ),
        (
            &[
                "fork",
                "v9",
                "--checkpoint",
                "../x",
                "--rollout",
                "r",
                "--n",
                "2",
            ],
            "checkpoint",
        ),
        (
            &["fork", "v9", "--checkpoint", "ck-1", "--rollout", "r"],
            "unknown version 9",
        ),
        (&["--log-format", "xml", "status", "v9"], "--log-format"),
        (&["sweep", "nowhere"], "nowhere"),
        (&["gateway", "--db", "l.db"], "--upstream"),
        (
            &["gateway", "--upstream", "ftp://x", "--db", "l.db"],
            "ftp://x",
        ),
        (
            &["gateway", "--model-script", "nope.json", "--db", "l.db"],
            "nope.json",
        ),
        (
            &["gateway", "--model-script", "bad.json", "--db", "l.db"],
            "bad.json",
        ),
        (
            &[
                "gateway",
                "--upstream",
                "http://127.0.0.1:9",
                "--db",
                "no/such/dir/l.db",
            ],
            "no/such/dir/l.db",
        ),
        (
            &[
                "gateway",
                "--upstream",
                "http://127.0.0.1:9",
                "--db",
                "l.db",
                "--drain-s",
                "99999",
            ],
            "0..=3600",
        ),
        (
            &[
                "gateway",
                "--upstream",
                "http://127.0.0.1:9",
                "--db",
                "l.db",
                "--bind-wait-s=-1",
            ],
            "--bind-wait-s",
        ),
        (
            &[
                "gateway",
                "--upstream",
                "http://127.0.0.1:9",
                "--db",
                "l.db",
                "--listen",
                "here",
            ],
            "--listen",
        ),
        (
            &[
                "gateway",
                "--upstream",
                "http://127.0.0.1:9",
                "--db",
                "l.db",
                "--register",
                "a/b",
            ],
            "a/b",
        ),
        (
            &[
                "gateway",
                "--upstream",
                "http://127.0.0.1:9",
                "--db",
                "l.db",
                "--run-dir",
                "r",
            ],
            "--control-token-file",
        ),
        (
            &[
                "gateway",
                "--upstream",
                "http://127.0.0.1:9",
                "--db",
                "l.db",
                "--run-dir",
                "r",
                "--control-token-file",
                "empty.tok",
            ],
            "empty.tok",
        ),
        (
            &["model-script", "--script", "nope.json", "--port", "0"],
            "nope.json",
        ),
        (
            &["model-script", "--script", "bad.json", "--port", "0"],
            "bad.json",
        ),
        (
            &["worker", "nope.json", "--checkpoint", "c", "res.json"],
            "nope.json",
        ),
        (
            &["worker", "bad.json", "--checkpoint", "c", "res.json"],
            "bad.json",
        ),
        (
            &["owner", "--run-dir", "o", "--token-file", "nope.tok"],
            "nope.tok",
        ),
        (
            &[
                "serve",
                "agent",
                "--run-dir",
                "a",
                "--token-file",
                "tok",
                "--owner",
                "ftp://x",
            ],
            "ftp://x",
        ),
        (
            &[
                "serve",
                "agent",
                "--run-dir",
                "a",
                "--token-file",
                "tok",
                "--owner",
                "http://127.0.0.1:9",
                "--concurrency",
                "0",
            ],
            "1..=65536",
        ),
        (
            &[
                "serve",
                "coordinator",
                "--run-dir",
                "c",
                "--token-file",
                "tok",
                "--participant",
                "x",
            ],
            "KIND=URL",
        ),
        (&["frobnicate"], "frobnicate"),
    ];
    for (args, needle) in cases {
        refused(d, &bin, args, needle);
    }
    // The worker's result file is its report: a bad input is failed there too.
    let report = std::fs::read_to_string(d.join("res.json")).unwrap();
    assert!(report.contains("bad.json"), "{report}");
    for never in ["r", "o", "a", "c", "l.db"] {
        assert!(!d.join(never).exists(), "a refused command created {never}");
    }
}

#[test]
fn the_supervisor_refuses_bad_arguments_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sup = rollpoint_testkit::supervisor_bin();
    let session = d.join("s").display().to_string();
    let cases: &[(&[&str], &str)] = &[
        (&["frobnicate"], "frobnicate"),
        (&["run"], "--session"),
        (&["run", "--session", &session, "--launch", "l"], "COMMAND"),
        (
            &[
                "run",
                "--session",
                &session,
                "--launch",
                "l",
                "--command-budget",
                "999999999999",
                "--",
                "true",
            ],
            "0..=86400",
        ),
        (
            &[
                "run",
                "--session",
                &session,
                "--launch",
                "l",
                "--freeze",
                "ice",
                "--",
                "true",
            ],
            "ice",
        ),
        (&["pause", "--session", &session], "launch.json"),
        (
            &[
                "anchor",
                "--root",
                "relative",
                "--control",
                "/c",
                "--hostname",
                "h",
            ],
            "--root",
        ),
    ];
    for (args, needle) in cases {
        refused(d, &sup, args, needle);
    }
    assert!(
        !d.join("s").exists(),
        "a refused command created the session"
    );
}
