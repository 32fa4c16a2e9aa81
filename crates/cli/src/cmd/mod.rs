//! Subcommands, one file each.

mod bench;
mod demo;
mod exec;
mod export;
mod fork;
mod gateway;
mod images;
mod locate;
mod logs;
mod model_script;
pub mod number;
mod openapi;
mod owner;
mod report;
mod resume;
mod run;
mod serve;
mod shell;
mod status;
mod store_args;
mod sweep;
mod worker;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a small process tree under the supervisor, pause it, show that it
    /// is held, and continue it.
    Demo(demo::Args),
    /// Benchmarks, each against its baseline in the same run.
    #[command(subcommand)]
    Bench(bench::Bench),
    /// Run the recording model gateway in front of one upstream.
    Gateway(Box<gateway::GatewayArgs>),
    /// Serve a scripted model (chat completions, Responses, Anthropic Messages).
    ModelScript(model_script::ModelScriptArgs),
    /// Run the native agent worker (inside a sandbox).
    Worker(worker::WorkerArgs),
    /// Serve the owner: lend local sandboxes over HTTP.
    Owner(owner::OwnerArgs),
    /// Tear down a crashed run's sandboxes and delete snapshots no retained
    /// checkpoint names.
    Sweep(sweep::SweepArgs),
    /// Run a file of tasks with every participant in this process,
    /// checkpointing every in-flight rollout.
    Run(run::RunArgs),
    /// Continue a run after a crash or a stop.
    Resume(resume::ResumeArgs),
    /// Fork a rollout a checkpoint saved into N new rollouts `R~1`..`R~N`.
    Fork(fork::ForkArgs),
    /// Serve one participant (or the coordinator) of a run spread over
    /// several machines.
    #[command(subcommand)]
    Serve(serve::Serve),
    /// Show a run's tasks, results, latest checkpoint and what is in flight.
    Status(status::StatusArgs),
    /// Print the OpenAPI 3.1 description of every HTTP API rollpoint serves.
    Openapi(openapi::OpenapiArgs),
    /// Write one self-contained HTML page of a run: summary, timeline,
    /// checkpoint durations, launches and transcripts.
    Report(report::ReportArgs),
    /// Write the run's trajectories (token ids, loss masks, logprobs, rewards) for a
    /// trainer.
    Export(export::ExportArgs),
    /// Print a rollout's launches and harness output; `-f` follows it until it finishes.
    Logs(logs::LogsArgs),
    /// Run a command in a live rollout's sandbox (or, `--while-frozen`, in a fork of its
    /// latest snapshot), through the run's control endpoint.
    Exec(exec::ExecArgs),
    /// Open a terminal (a shell by default) in a live rollout's sandbox, through the run's
    /// control endpoint.
    Shell(shell::ShellArgs),
    /// The task-image cache: pull an image, list the cached ones, prune.
    #[command(subcommand)]
    Images(images::Images),
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Demo(args) => demo::run(&args),
        Command::Bench(b) => bench::run(b),
        Command::Gateway(args) => gateway::run(*args),
        Command::ModelScript(args) => model_script::run(args),
        Command::Worker(args) => worker::run(args),
        Command::Owner(args) => owner::run(&args),
        Command::Sweep(args) => sweep::run(&args),
        Command::Run(args) => run::run(args),
        Command::Resume(args) => resume::run(&args),
        Command::Fork(args) => fork::run(&args),
        Command::Serve(s) => serve::run(s),
        Command::Status(args) => status::run(&args),
        Command::Openapi(args) => openapi::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Export(args) => export::run(&args),
        Command::Logs(args) => logs::run(&args),
        Command::Exec(args) => exec::run(&args),
        Command::Shell(args) => shell::run(&args),
        Command::Images(i) => images::run(i),
    }
}
