//! Command-line parsing, by hand: the supervisor must stay small and static.

use std::path::PathBuf;
use std::time::Duration;

use rollpoint_proctree::{Budgets, Strategy};
use rollpoint_proto::control::Verb;

use crate::errors::Error;

#[derive(Debug)]
pub enum Parsed {
    Help,
    Run(RunOpts),
    Client(ClientOpts),
}

#[derive(Debug)]
pub struct RunOpts {
    pub session: PathBuf,
    pub launch_id: String,
    pub strategy: Strategy,
    pub cgroups: bool,
    pub cwd: Option<PathBuf>,
    pub budgets: Budgets,
    pub argv: Vec<String>,
}

#[derive(Debug)]
pub struct ClientOpts {
    pub verb: Verb,
    pub session: PathBuf,
    pub strategy: Strategy,
    pub budgets: Budgets,
}

pub fn parse(argv: &[String]) -> Result<Parsed, Error> {
    let usage = |m: String| Error::Usage(m);
    let Some((cmd, rest)) = argv.split_first() else {
        return Err(usage("missing subcommand".into()));
    };
    let verb = match cmd.as_str() {
        "-h" | "--help" | "help" => return Ok(Parsed::Help),
        "run" => None,
        "pause" => Some(Verb::Pause),
        "continue" => Some(Verb::Continue),
        "stop" => Some(Verb::Stop),
        "status" => Some(Verb::Status),
        other => return Err(usage(format!("unknown subcommand {other:?}"))),
    };
    let mut session = None;
    let mut launch_id = None;
    let mut strategy = Strategy::Auto;
    let mut cgroups = true;
    let mut cwd = None;
    let mut budgets = Budgets::default();
    let mut command = Vec::new();
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| usage(format!("{name} needs a value")))
        };
        match arg.as_str() {
            "--session" => session = Some(PathBuf::from(value("--session")?)),
            "--launch" => launch_id = Some(value("--launch")?),
            "--freeze" => strategy = value("--freeze")?.parse().map_err(usage)?,
            "--no-cgroup" => cgroups = false,
            "--cwd" => cwd = Some(PathBuf::from(value("--cwd")?)),
            "--command-budget" => budgets.command = secs("--command-budget", &value("--command-budget")?)?,
            "--confirm-budget" => budgets.confirm = secs("--confirm-budget", &value("--confirm-budget")?)?,
            "--d-budget" => budgets.d_state = secs("--d-budget", &value("--d-budget")?)?,
            "--stop-grace" => budgets.stop_grace = secs("--stop-grace", &value("--stop-grace")?)?,
            "-h" | "--help" => return Ok(Parsed::Help),
            "--" => {
                command.extend(it.by_ref().cloned());
                break;
            }
            other => return Err(usage(format!("unknown option {other:?}"))),
        }
    }
    let session = session.ok_or_else(|| usage("--session is required".into()))?;
    match verb {
        None => {
            let launch_id = launch_id.ok_or_else(|| usage("run needs --launch".into()))?;
            if launch_id.is_empty() || launch_id.contains(['/', '\0', '=']) {
                return Err(usage(format!("--launch {launch_id:?}: must be non-empty without '/', '=' or NUL")));
            }
            if command.is_empty() {
                return Err(usage("run needs a command after --".into()));
            }
            Ok(Parsed::Run(RunOpts {
                session,
                launch_id,
                strategy,
                cgroups,
                cwd,
                budgets,
                argv: command,
            }))
        }
        Some(verb) => Ok(Parsed::Client(ClientOpts {
            verb,
            session,
            strategy,
            budgets,
        })),
    }
}

fn secs(name: &str, v: &str) -> Result<Duration, Error> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| Error::Usage(format!("{name} {v:?}: expected a number of seconds")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_run() {
        let p = parse(&strings(&[
            "run", "--session", "/s", "--launch", "l1", "--freeze", "sigstop", "--stop-grace", "0.5", "--", "sh", "-c", "x",
        ]))
        .expect("parses");
        let Parsed::Run(r) = p else { panic!("not run") };
        assert_eq!(r.argv, strings(&["sh", "-c", "x"]));
        assert_eq!(r.strategy, Strategy::Sigstop);
        assert_eq!(r.budgets.stop_grace, Duration::from_millis(500));
        assert_eq!(r.budgets.d_state, Duration::from_secs(30));
    }

    #[test]
    fn rejects_bad_input_by_name() {
        let err = parse(&strings(&["run", "--session", "/s", "--launch", "a/b", "--", "x"])).expect_err("slash");
        assert!(err.to_string().contains("--launch"), "{err}");
        let err = parse(&strings(&["pause", "--session", "/s", "--d-budget", "soon"])).expect_err("nan");
        assert!(err.to_string().contains("--d-budget"), "{err}");
        let err = parse(&strings(&["pause"])).expect_err("no session");
        assert!(err.to_string().contains("--session"), "{err}");
        let err = parse(&strings(&["run", "--session", "/s", "--launch", "x"])).expect_err("no command");
        assert!(err.to_string().contains("command"), "{err}");
    }
}
