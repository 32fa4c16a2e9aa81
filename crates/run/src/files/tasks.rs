//! The tasks file: one driver `RolloutTask` JSON object per line. Every line
//! is checked before anything runs; an error names the file, the line and the
//! field. Its SHA-256 is kept in `run.json`, so a resume refuses a file that
//! changed under it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rollpoint_driver::{DriverError, RolloutTask};
use sha2::{Digest as _, Sha256};

use crate::errors::RunError;

/// A tasks file, read and checked.
#[derive(Debug, Clone)]
pub struct TasksFile {
    /// The path as given, made absolute.
    pub path: PathBuf,
    pub sha256: String,
    pub tasks: Vec<RolloutTask>,
    /// Tasks the infrastructure failed before they could run (an
    /// environment that did not build), by rollout id (a sample's group):
    /// each ends as a row of `infra_error` without a sandbox.
    pub failed: std::collections::BTreeMap<String, (rollpoint_driver::InfraClass, String)>,
}

/// Reads and checks every task of `path`; blank lines are skipped.
pub fn load_tasks(path: &Path) -> Result<TasksFile, RunError> {
    let path = std::path::absolute(path).map_err(|e| RunError::io(path, e))?;
    let bytes = std::fs::read(&path).map_err(|e| RunError::io(&path, e))?;
    let tasks = parse_tasks(&bytes, &path)?;
    Ok(TasksFile {
        sha256: rollpoint_proto::hex::hex(&Sha256::digest(&bytes)),
        path,
        tasks,
        failed: std::collections::BTreeMap::new(),
    })
}

impl TasksFile {
    /// Every task as its samples ([`RolloutTask::samples`]), in file order;
    /// a sample id that another task already has is refused by name.
    pub fn with_samples(mut self, run_samples: u32) -> Result<Self, RunError> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(self.tasks.len());
        for (index, task) in std::mem::take(&mut self.tasks).into_iter().enumerate() {
            let bad = |field: String, message: String| RunError::Task {
                path: self.path.clone(),
                line: index + 1,
                field,
                message,
            };
            let samples = task.samples(run_samples).map_err(|e| match e {
                DriverError::Task { field, message } => bad(field, message),
                other => bad("task".to_owned(), other.to_string()),
            })?;
            for s in samples {
                if !seen.insert(s.rollout().to_owned()) {
                    return Err(bad(
                        "task.id".to_owned(),
                        format!(
                            "rollout {:?} is also another task's or sample's id",
                            s.rollout()
                        ),
                    ));
                }
                out.push(s);
            }
        }
        self.tasks = out;
        Ok(self)
    }
}

/// Parses tasks; `path` names the file in errors.
pub fn parse_tasks(bytes: &[u8], path: &Path) -> Result<Vec<RolloutTask>, RunError> {
    let bad = |line: usize, field: &str, message: String| RunError::Task {
        path: path.to_owned(),
        line,
        field: field.to_owned(),
        message,
    };
    let mut tasks = Vec::new();
    let mut seen = BTreeSet::new();
    for (index, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = index + 1;
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let task = RolloutTask::decode(raw).map_err(|e| match e {
            DriverError::Task { field, message } => bad(line, &field, message),
            other => bad(line, "task", other.to_string()),
        })?;
        if !seen.insert(task.rollout().to_owned()) {
            return Err(bad(
                line,
                "task.id",
                format!("rollout {:?} appears on an earlier line", task.rollout()),
            ));
        }
        tasks.push(task);
    }
    if tasks.is_empty() {
        return Err(bad(1, "task", "the file holds no task".to_owned()));
    }
    Ok(tasks)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"v":1,"task":{"id":"a","verify":{"command":["true"]}},"adapter":{"kind":"command","argv":["true"]}}"#;

    #[test]
    fn errors_name_the_line_and_the_field() {
        let p = Path::new("tasks.jsonl");
        let two = format!("{GOOD}\n\n{}\n", GOOD.replace("\"a\"", "\"b\""));
        assert_eq!(parse_tasks(two.as_bytes(), p).unwrap().len(), 2);

        let dup = format!("{GOOD}\n{GOOD}\n");
        let e = parse_tasks(dup.as_bytes(), p).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("task.id"), "{e}");

        let unknown = format!("{GOOD}\n{}\n", GOOD.replace("\"argv\"", "\"argz\""));
        let e = parse_tasks(unknown.as_bytes(), p).unwrap_err().to_string();
        assert!(
            e.contains("tasks.jsonl: line 2") && e.contains("adapter"),
            "{e}"
        );

        let e = parse_tasks(b"{\"v\":9}\n", p).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("task.v"), "{e}");
        let e = parse_tasks(b"not json\n", p).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        let e = parse_tasks(b"\n", p).unwrap_err().to_string();
        assert!(e.contains("no task"), "{e}");
    }

    #[test]
    fn an_id_that_reads_as_an_attempt_is_refused_by_name() {
        let p = Path::new("tasks.jsonl");
        // `task-a1` would be attempt 1 of `task` in every key; explicit ids too.
        let task_id = GOOD.replace("\"a\"", "\"task-a1\"");
        let e = parse_tasks(task_id.as_bytes(), p).unwrap_err().to_string();
        assert!(
            e.contains("line 1") && e.contains("task.id") && e.contains("-a<digits>"),
            "{e}"
        );
        let explicit = GOOD.replace("{\"v\":1,", "{\"v\":1,\"id\":\"r-a20\",");
        let e = parse_tasks(explicit.as_bytes(), p).unwrap_err().to_string();
        assert!(e.contains("task.id") && e.contains("-a<digits>"), "{e}");
        // Ids that only contain `-a` stay accepted.
        let fine = GOOD.replace("\"a\"", "\"task-a\"");
        assert_eq!(
            parse_tasks(fine.as_bytes(), p).unwrap()[0].rollout(),
            "task-a"
        );
    }

    #[test]
    fn huge_timeouts_are_refused_by_name_with_the_range() {
        let p = Path::new("tasks.jsonl");
        let cases = [
            (
                GOOD.replace(
                    "{\"v\":1,",
                    "{\"v\":1,\"harness_timeout_s\":18446744073709551615,",
                ),
                "task.harness_timeout_s",
            ),
            (
                GOOD.replace(
                    "\"command\":[\"true\"]}",
                    "\"command\":[\"true\"],\"timeout_s\":18446744073709551615}",
                ),
                "task.task.verify.timeout_s",
            ),
            (
                GOOD.replace(
                    "\"id\":\"a\",",
                    "\"id\":\"a\",\"setup_timeout_s\":18446744073709551615,",
                ),
                "task.task.setup_timeout_s",
            ),
        ];
        for (line, field) in cases {
            let e = parse_tasks(line.as_bytes(), p).unwrap_err().to_string();
            assert!(
                e.contains(field) && e.contains("1..=2592000"),
                "{field}: {e}"
            );
        }
    }
}
