//! The `read` tool: a file's text, optionally a range of lines, capped.

use std::io::Read;

use serde::Deserialize;

use super::capped::Capped;
use super::{Outcome, ToolContext};
use crate::transcript::ToolStatus;

/// Largest part of a file the tool reads (its output is capped far below this anyway).
const MAX_READ_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: String,
    #[serde(default)]
    pub offset: Option<usize>,
    #[serde(default)]
    pub limit: Option<usize>,
}

pub fn run(args: &Args, ctx: &ToolContext) -> Outcome {
    let path = ctx.resolve(&args.path);
    let mut bytes = Vec::new();
    let read =
        std::fs::File::open(&path).and_then(|f| f.take(MAX_READ_BYTES).read_to_end(&mut bytes));
    if let Err(e) = read {
        return Outcome::error(format!("cannot read {}: {e}", path.display()));
    }
    let text = String::from_utf8_lossy(&bytes);
    let selected: String = match (args.offset, args.limit) {
        (None, None) => text.into_owned(),
        (offset, limit) => text
            .split_inclusive('\n')
            .skip(offset.unwrap_or(1).saturating_sub(1))
            .take(limit.unwrap_or(usize::MAX))
            .collect(),
    };
    let mut out = Capped::new(ctx.output_cap);
    out.push(selected.as_bytes());
    Outcome {
        content: out.render(),
        status: ToolStatus::Ok,
        exit_code: None,
        truncated_bytes: out.dropped(),
    }
}
