//! The tail of results.jsonl through the real binaries (root): a finished
//! run whose last row lost its newline byte to damage keeps that row on
//! resume (the task is not run again; the newline is appended, no byte
//! rewritten); half a row is moved aside to `results.jsonl.torn-<offset>`
//! and reported; damage before the last line stops the resume and
//! `rollpoint status`, naming the line, and changes nothing.

mod common;

use std::ffi::OsStr;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use common::*;
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);

fn resume(run_dir: &Path, log: &Path) -> (bool, String) {
    let before = std::fs::read_to_string(log).unwrap_or_default().len();
    let mut child = spawn(&[OsStr::new("resume"), run_dir.as_os_str()], log);
    let status = wait(&mut child, LIMIT, log);
    let text = std::fs::read_to_string(log).unwrap_or_default();
    (status.success(), text[before..].to_owned())
}

fn rows(run_dir: &Path) -> Vec<(String, u32)> {
    let mut rows: Vec<(String, u32)> = rollpoint_run::read_results(run_dir)
        .expect("results")
        .into_iter()
        .map(|r| (r.rollout, r.attempt))
        .collect();
    rows.sort();
    rows
}

#[test]
fn root_a_whole_last_row_is_kept_a_torn_one_moved_aside_and_middle_damage_refused() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tag = format!("e{:04x}", fastrand::u16(..));
    let tasks = dir.path().join("tasks.jsonl");
    let rows_in: Vec<_> = (0..3)
        .map(|i| command_task(&format!("{tag}{i}"), 10))
        .collect();
    write_jsonl(&tasks, &rows_in);
    let config = dir.path().join("run.toml");
    std::fs::write(&config, "v = 1\ncheckpoint_every_s = 0\n").expect("config");
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let sup = supervisor_bin();
    let mut child = spawn(&run_args(&tasks, &config, &run_dir, &sup), &log);
    let status = wait(&mut child, LIMIT, &log);
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let finished = rows(&run_dir);
    assert_eq!(finished.len(), 3);
    assert!(finished.iter().all(|(_, a)| *a == 0));
    for r in rollpoint_run::read_results(&run_dir).expect("results") {
        assert_eq!(r.status, rollpoint_driver::Status::Verified, "{r:?}");
    }

    // One flipped bit in the final newline.
    let path = run_dir.join("results.jsonl");
    let mut bytes = std::fs::read(&path).expect("results");
    let nl = bytes.len() - 1;
    bytes[nl] ^= 0x01;
    std::fs::write(&path, &bytes).expect("damage");
    let (ok, said) = resume(&run_dir, &log);
    assert!(ok, "{said}");
    assert!(
        said.contains(&format!("{}: line 3 is a complete row", path.display()))
            && said.contains(&format!("byte offset {nl} is damaged (0x0b)")),
        "{said}"
    );
    assert_eq!(
        rows(&run_dir),
        finished,
        "the row is kept; nothing ran again"
    );
    let now = std::fs::read(&path).expect("results");
    assert_eq!(&now[..bytes.len()], &bytes[..], "no byte rewritten");
    assert_eq!(&now[bytes.len()..], b"\n", "a newline appended");

    // Half a row, as a crash mid-append leaves it.
    let line = std::fs::read(&path).expect("results");
    let first = &line[..line.iter().position(|b| *b == b'\n').expect("a line")];
    let half = &first[..first.len() / 2];
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("open");
    f.write_all(half).expect("tear");
    drop(f);
    let (ok, said) = resume(&run_dir, &log);
    assert!(ok, "{said}");
    let aside = run_dir.join(format!("results.jsonl.torn-{}", line.len()));
    assert!(
        said.contains(&path.display().to_string())
            && said.contains(&format!(
                "{} bytes at byte offset {}",
                half.len(),
                line.len()
            ))
            && said.contains(&aside.display().to_string()),
        "{said}"
    );
    assert_eq!(std::fs::read(&aside).expect("moved aside"), half);
    assert_eq!(std::fs::read(&path).expect("results"), line);
    assert_eq!(rows(&run_dir), finished);

    // A damaged byte inside line 2: refused, naming the line; unchanged.
    let mut damaged = line.clone();
    damaged[first.len() + 3] ^= 0x40;
    std::fs::write(&path, &damaged).expect("damage");
    let (ok, said) = resume(&run_dir, &log);
    assert!(!ok, "{said}");
    assert!(
        said.contains(&format!("{}: line 2", path.display())),
        "{said}"
    );
    assert_eq!(std::fs::read(&path).expect("results"), damaged);
    let out = std::process::Command::new(rollpoint_bin())
        .arg("status")
        .arg(&run_dir)
        .output()
        .expect("status");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("line 2"), "{err}");
}
