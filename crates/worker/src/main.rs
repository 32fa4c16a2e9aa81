//! `rollpoint-worker INPUT RESULT --checkpoint CHECKPOINT`: the static binary that runs inside
//! sandboxes. Arguments are parsed by hand to keep the binary small.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::path::PathBuf;

use rollpoint_worker::{Invocation, exit};

const USAGE: &str = "usage: rollpoint-worker INPUT RESULT --checkpoint CHECKPOINT";

/// Parses the arguments; on failure returns the message and the result path, if one was given.
fn parse(args: impl Iterator<Item = OsString>) -> Result<Invocation, (String, Option<PathBuf>)> {
    let mut positional = Vec::new();
    let mut checkpoint = None;
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--checkpoint") => match args.next() {
                Some(value) => checkpoint = Some(PathBuf::from(value)),
                None => return Err(("--checkpoint needs a path".to_owned(), None)),
            },
            Some(s) if s.starts_with("--checkpoint=") => {
                checkpoint = Some(PathBuf::from(&s["--checkpoint=".len()..]));
            }
            Some("-h" | "--help") => {
                println!("{USAGE}");
                std::process::exit(exit::OK);
            }
            Some("-V" | "--version") => {
                println!("rollpoint-worker {}", env!("CARGO_PKG_VERSION"));
                std::process::exit(exit::OK);
            }
            Some(s) if s.starts_with('-') && s.len() > 1 => {
                return Err((format!("unknown option {s}"), positional.get(1).cloned()));
            }
            _ => positional.push(PathBuf::from(arg)),
        }
    }
    let result = positional.get(1).cloned();
    match (positional.as_slice(), checkpoint) {
        ([input, result], Some(checkpoint)) => Ok(Invocation {
            input: input.clone(),
            result: result.clone(),
            checkpoint,
        }),
        ([_, _], None) => Err(("--checkpoint is required".to_owned(), result)),
        _ => Err((
            format!("expected INPUT and RESULT, got {} paths", positional.len()),
            result,
        )),
    }
}

fn main() {
    let code = match parse(std::env::args_os().skip(1)) {
        Ok(invocation) => rollpoint_worker::run(&invocation),
        Err((message, result)) => {
            rollpoint_worker::runner::usage_error(&message, result.as_deref())
        }
    };
    std::process::exit(code);
}
