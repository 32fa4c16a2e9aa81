//! Subcommands, one file each.

mod gateway;
mod model_script;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the recording model gateway in front of one upstream.
    Gateway(gateway::GatewayArgs),
    /// Serve a scripted model (chat completions, Responses, Anthropic Messages).
    ModelScript(model_script::ModelScriptArgs),
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Gateway(args) => gateway::run(args),
        Command::ModelScript(args) => model_script::run(args),
    }
}
