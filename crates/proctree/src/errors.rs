//! Errors of the process-tree library.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to write {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        source: std::io::Error,
    },
    #[error("failed to create cgroup {path}: {source}")]
    CreateCgroup {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to remove cgroup {path}: {source}")]
    RemoveCgroup {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to {what} cgroup {path}: {text}")]
    CgroupFreezer {
        what: &'static str,
        path: PathBuf,
        text: String,
    },
    #[error("no usable {what} found")]
    NoCgroup { what: &'static str },
    #[error("strategy {strategy} needs a {what} cgroup for launch {launch}, and it has none")]
    StrategyUnavailable {
        strategy: &'static str,
        what: &'static str,
        launch: String,
    },
}
