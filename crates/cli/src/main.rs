//! The `rollpoint` host binary: one process for the embedded default, or one
//! service per process. Each subcommand lives in its own file under `cmd/`.
#![forbid(unsafe_code)]

mod cmd;
mod logging;
mod openapi;
mod openapi_limits;

use clap::{CommandFactory, FromArgMatches, Parser};

/// Runs coding-agent harnesses in sandboxes and checkpoints every in-flight rollout.
#[derive(Debug, Parser)]
#[command(name = "rollpoint", version, about)]
struct Cli {
    /// On an error, also print where in the code it arose (the backtrace captured when
    /// RUST_BACKTRACE=1); without this flag errors print as one message whatever
    /// RUST_BACKTRACE says.
    #[arg(long, global = true)]
    backtrace: bool,
    /// How log events are printed on stderr: `text` lines or `json` objects (one per line,
    /// for files; also `ROLLPOINT_LOG_FORMAT`, which the processes a command starts inherit).
    /// Which events: `RUST_LOG` (default `info`), e.g. `RUST_LOG=rollpoint_gateway=debug`.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "ROLLPOINT_LOG_FORMAT"
    )]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: cmd::Command,
}

fn main() -> std::process::ExitCode {
    let matches = cmd::number::negatives_as_values(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    logging::init(cli.log_format);
    let backtrace = cli.backtrace;
    match cmd::run(cli.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One message with its causes; the backtrace only when asked for.
            eprintln!("Error: {}", message(&e));
            if backtrace {
                let trace = e.backtrace();
                if trace.status() == std::backtrace::BacktraceStatus::Captured {
                    eprintln!("\n{trace}");
                } else {
                    eprintln!("(no backtrace was captured: set RUST_BACKTRACE=1 as well)");
                }
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// `e` and each cause its text does not already hold, joined by `: ` (many errors name their
/// cause in their own message as well).
fn message(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}
