//! The `write` tool: replaces a file whole (running it twice leaves the same file).

use serde::Deserialize;

use super::{Outcome, ToolContext};
use crate::transcript::ToolStatus;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: String,
    pub content: String,
}

pub fn run(args: &Args, ctx: &ToolContext) -> Outcome {
    let path = ctx.resolve(&args.path);
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&path, &args.content));
    match written {
        Ok(()) => Outcome {
            content: format!("wrote {} bytes to {}", args.content.len(), path.display()),
            status: ToolStatus::Ok,
            exit_code: None,
            truncated_bytes: 0,
        },
        Err(e) => Outcome::error(format!("cannot write {}: {e}", path.display())),
    }
}
