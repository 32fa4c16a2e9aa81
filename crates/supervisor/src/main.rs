//! `rollpoint-supervisor`: the process anchor inside every sandbox.
//!
//! `run` starts a harness under a child subreaper that owns `waitpid(-1)`,
//! records the launch, and serves pause, continue, stop and status on a
//! control socket in the session directory. `pause`, `continue`, `stop` and
//! `status` are that socket's clients; when no supervisor answers they fall
//! back to finding the launch by its environment tag and cgroups.
//!
//! `anchor` is the first process of a sandbox: it becomes PID 1 of the
//! sandbox's pid namespace, pivots into its root, reaps every process there
//! and serves `exec` and `launch` on the anchor socket.
//!
//! No async runtime, no TLS, no argument-parsing crate: this binary is built
//! static and copied into arbitrary task images, so it stays small.
//!
//! # Modules
//!
//! - `args`: the command line, parsed by hand.
//! - `run`: start the harness as a child subreaper, reap until nothing is left.
//! - `server`: the control socket of a launch: pause, continue, stop, status.
//! - `session`: the session directory: launch record, receipts, stop and pause files.
//! - `client`: the socket's clients, with a fallback when no supervisor answers.
//! - `anchor`: PID 1 of a sandbox: `mounts`, `reaper`, `serve`, `exec`, `launch`.
//! - `net_opts`: the anchor's network options as the command line gives them.
//! - `files`: durable private file writes.
//! - `errors`: the supervisor's errors.
//!
//! Every child is spawned through `rollpoint_proctree::spawn`.

mod anchor;
mod args;
mod client;
mod errors;
mod files;
mod net_opts;
mod run;
mod server;
mod session;

use std::process::ExitCode;

const USAGE: &str = "\
usage:
  rollpoint-supervisor run --session DIR --launch ID [options] -- COMMAND [ARGS...]
  rollpoint-supervisor pause|continue|stop|status --session DIR [options]
  rollpoint-supervisor anchor --root DIR --control DIR --hostname NAME
      [--cgroup-v2 DIR] [--cgroup-freezer DIR]
      [--net host|none|gateway|allow] [--gateway IP:PORT [--gateway-attach SANDBOX=PATH]]
      [--allow IP[/N]:PORT]... [--host NAME=IP]...
      [--enter [--join CGROUP_DIR]... [--owner-netns-fd N]] [--owner PID] [--tool AT=HOST]...
      [--user UID:GID[:GROUPS]] [--home DIR]
      [--userns HOST:COUNT [--owner-userns-fd N] [--drop-caps NAME,...]
       [--no-new-privs]] [--lend PATH]...

options:
  --freeze auto|cgroup-v2|cgroup-v1|sigstop   freeze strategy (default auto)
  --no-cgroup                                 run: do not create launch cgroups
  --cwd DIR                                   run: working directory of the harness
  --userns-fd N                               run: confine the harness in user namespace N
  --owner-userns-fd N                         anchor: the owner's descriptor N is the --userns namespace
  --owner-netns-fd N                          anchor: join the owner's fresh network namespace N
  --gateway-attach SANDBOX=PATH               anchor: hand the gateway listener to the gateway's attach socket
  --drop-caps NAME,...                        capabilities a strict sandbox drops
  --no-new-privs                              set no_new_privs on what a strict sandbox runs
  --command-budget SECS                       bound of one command (default 120)
  --confirm-budget SECS                       confirmation budget (default 5)
  --d-budget SECS                             wait for members in D (default 30)
  --stop-grace SECS                           SIGINT to SIGKILL grace (default 10)

exit status: run exits with the harness's own code (128+N when signal N
killed it; 125 when a stop file kept it from starting); the clients exit 0
when the request was confirmed and 1 otherwise, printing the reply as JSON.";

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match args::parse(&argv) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rollpoint-supervisor: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match parsed {
        args::Parsed::Help => {
            println!("{USAGE}");
            Ok(0)
        }
        args::Parsed::Run(opts) => run::run(opts),
        args::Parsed::Client(opts) => client::client(&opts),
        args::Parsed::Anchor(opts) => anchor::anchor(&opts),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(255)),
        Err(e) => {
            eprintln!("rollpoint-supervisor: {e}");
            ExitCode::from(2)
        }
    }
}
