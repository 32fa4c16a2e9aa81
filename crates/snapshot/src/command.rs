//! Running the external tools the stores rely on (`btrfs`, `mkfs.btrfs`,
//! `mount`, `umount`, `losetup`). A failure carries the full command
//! line and its stderr.

use std::ffi::OsStr;
use std::process::{Command, Stdio};

use crate::errors::Error;

/// Runs `program args...` to completion; returns its stdout.
pub(crate) fn run<I, S>(program: &str, args: I) -> Result<String, Error>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(program);
    cmd.args(args).stdout(Stdio::piped());
    finish(cmd)
}

fn finish(mut cmd: Command) -> Result<String, Error> {
    cmd.stdin(Stdio::null()).stderr(Stdio::piped());
    let line = describe(&cmd);
    let out = cmd.output().map_err(|source| Error::Spawn {
        command: line.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: line,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn describe(cmd: &Command) -> String {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}
