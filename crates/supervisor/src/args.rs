//! Command-line parsing, by hand: the supervisor must stay small and static.

use std::path::PathBuf;
use std::time::Duration;

use rollpoint_proctree::isolate::IdRange;
use rollpoint_proctree::spawn::Credentials;
use rollpoint_proctree::{Budgets, Strategy};
use rollpoint_proto::supervisor::Verb;

use crate::errors::Error;

#[derive(Debug)]
pub enum Parsed {
    Help,
    Run(RunOpts),
    Client(ClientOpts),
    Anchor(AnchorOpts),
}

/// `anchor`: how the host started this sandbox (see `anchor/mod.rs`).
#[derive(Debug)]
pub struct AnchorOpts {
    /// The sandbox's root as mounted on the host; becomes `/`.
    pub root: PathBuf,
    /// The host's control directory; appears at `/run/rollpoint`.
    pub control: PathBuf,
    pub hostname: String,
    /// The sandbox's cgroup2 directory on the host.
    pub cgroup_v2: Option<PathBuf>,
    /// The sandbox's v1 freezer cgroup directory on the host.
    pub cgroup_freezer: Option<PathBuf>,
    /// The sandbox's network (`--net`, `--gateway`, `--allow`, `--host`).
    pub net: crate::net_opts::NetOpts,
    /// The pid of the sandbox's owner, which must be the anchor's parent
    /// (`--owner`; without it, whatever parent the anchor has at start).
    pub owner: Option<i32>,
    /// `--tool AT=HOST`: the host file or directory mounted read-only at
    /// `/.rollpoint/AT` (a sandbox whose base is not the host's root).
    pub tools: Vec<(String, PathBuf)>,
    /// `--user UID:GID[:GROUPS]`: what every command and launch runs as
    /// (root when absent). The anchor itself stays root.
    pub user: Option<Credentials>,
    /// `--home`: `HOME` for a command or launch whose environment has none.
    pub home: String,
    /// `--userns HOST:COUNT`: strict isolation. Commands and launches run in
    /// a user namespace mapping `0..COUNT` to `HOST..`, with Docker's default
    /// capabilities and the seccomp filter; `/proc` is masked. Without it (a trusted sandbox) they run as the host's ids.
    pub userns: Option<IdRange>,
    /// `--owner-userns-fd N` (with `--userns`): the owner's descriptor N is
    /// that user namespace, already mapped; the anchor takes a copy of it
    /// (`pidfd_getfd`) instead of making one per sandbox.
    pub owner_userns_fd: Option<i32>,
    /// `--owner-netns-fd N` (with `--enter` and a network of its own): the
    /// owner's descriptor N is a fresh network namespace it made ahead of
    /// time, which the anchor joins instead of making one while the
    /// sandbox starts.
    pub owner_netns_fd: Option<i32>,
    /// `--owner-root-fd N` (with `--enter`): the owner's descriptor N is the
    /// sandbox's root, an overlay made and attached nowhere, which the
    /// anchor attaches at `--root` in the sandbox's own mount namespace.
    pub owner_root_fd: Option<i32>,
    /// `--lend PATH`: a host path bind-mounted read-only at the same place
    /// (the harness install, the worker, paths a task names).
    pub lend: Vec<PathBuf>,
    /// `--drop-caps NAME,...`: capabilities dropped from those a strict
    /// sandbox keeps (a mask).
    pub drop_caps: u64,
    /// `--no-new-privs` (with `--userns`): `no_new_privs` on every command
    /// and launch, so no setuid program gains anything.
    pub no_new_privs: bool,
    /// `--enter`: the anchor resets its signals, joins `join` and makes the
    /// sandbox's namespaces itself, before anything else, instead of being
    /// started inside them. The host then starts it with a plain spawn, no
    /// fork of its own (large) process.
    pub enter: bool,
    /// `--join DIR` (with `--enter`): a cgroup directory the anchor moves
    /// itself into first.
    pub join: Vec<PathBuf>,
}

#[derive(Debug)]
pub struct RunOpts {
    pub session: PathBuf,
    pub launch_id: String,
    pub strategy: Strategy,
    pub cgroups: bool,
    pub cwd: Option<PathBuf>,
    pub budgets: Budgets,
    /// `--user UID:GID[:GROUPS]`: the harness runs as this user; the
    /// supervisor stays root to freeze it.
    pub user: Option<Credentials>,
    /// `--userns-fd N`: descriptor N is the sandbox's user namespace; the
    /// harness is confined in it (see `AnchorOpts::userns`).
    pub userns_fd: Option<i32>,
    /// `--drop-caps NAME,...`: as the anchor's.
    pub drop_caps: u64,
    /// `--no-new-privs`: as the anchor's.
    pub no_new_privs: bool,
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
        "anchor" => return parse_anchor(rest),
        other => return Err(usage(format!("unknown subcommand {other:?}"))),
    };
    let mut session = None;
    let mut launch_id = None;
    let mut strategy = Strategy::Auto;
    let mut cgroups = true;
    let mut cwd = None;
    let mut budgets = Budgets::default();
    let mut user = None;
    let mut userns_fd = None;
    let (mut drop_caps, mut no_new_privs) = (0, false);
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
            "--user" => user = Some(credentials(&value("--user")?)?),
            "--userns-fd" => {
                let v = value("--userns-fd")?;
                let fd = v.parse::<i32>().ok().filter(|fd| *fd > 2);
                userns_fd = Some(fd.ok_or_else(|| {
                    usage(format!(
                        "--userns-fd {v:?}: expected a descriptor number above 2"
                    ))
                })?);
            }
            "--drop-caps" => drop_caps = dropped(&value("--drop-caps")?)?,
            "--no-new-privs" => no_new_privs = true,
            "--command-budget" => {
                budgets.command = secs("--command-budget", &value("--command-budget")?)?
            }
            "--confirm-budget" => {
                budgets.confirm = secs("--confirm-budget", &value("--confirm-budget")?)?
            }
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
                return Err(usage(format!(
                    "--launch {launch_id:?}: must be non-empty without '/', '=' or NUL"
                )));
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
                user,
                userns_fd,
                drop_caps,
                no_new_privs,
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

/// `--drop-caps NAME,...` as a mask.
fn dropped(list: &str) -> Result<u64, Error> {
    let names: Vec<&str> = list.split(',').filter(|n| !n.is_empty()).collect();
    rollpoint_proctree::isolate::drop_mask(&names)
        .map_err(|e| Error::Usage(format!("--drop-caps: {e}")))
}

fn parse_anchor(argv: &[String]) -> Result<Parsed, Error> {
    let mut given = AnchorArgs::default();
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| Error::Usage(format!("{name} needs a value")))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            name => given.set(name, &mut value)?,
        }
    }
    given.check().map(Parsed::Anchor)
}

/// The anchor's options as given, each read on its own; [`AnchorArgs::check`]
/// then checks them together.
#[derive(Default)]
struct AnchorArgs {
    root: Option<PathBuf>,
    control: Option<PathBuf>,
    hostname: Option<String>,
    cgroup_v2: Option<PathBuf>,
    cgroup_freezer: Option<PathBuf>,
    net: crate::net_opts::NetOpts,
    owner: Option<i32>,
    tools: Vec<(String, PathBuf)>,
    user: Option<Credentials>,
    home: Option<String>,
    enter: bool,
    join: Vec<PathBuf>,
    userns: Option<IdRange>,
    lend: Vec<PathBuf>,
    drop_caps: u64,
    no_new_privs: bool,
    owner_userns_fd: Option<i32>,
    owner_netns_fd: Option<i32>,
    owner_root_fd: Option<i32>,
}

impl AnchorArgs {
    /// Takes option `arg`, reading its value with `value` if it has one.
    fn set(
        &mut self,
        arg: &str,
        value: &mut dyn FnMut(&str) -> Result<String, Error>,
    ) -> Result<(), Error> {
        let usage = |m: String| Error::Usage(m);
        match arg {
            "--root" => self.root = Some(PathBuf::from(value("--root")?)),
            "--control" => self.control = Some(PathBuf::from(value("--control")?)),
            "--hostname" => self.hostname = Some(value("--hostname")?),
            "--cgroup-v2" => self.cgroup_v2 = Some(PathBuf::from(value("--cgroup-v2")?)),
            "--cgroup-freezer" => {
                self.cgroup_freezer = Some(PathBuf::from(value("--cgroup-freezer")?));
            }
            "--net" | "--gateway" | "--gateway-attach" | "--allow" | "--host" => {
                let v = value(arg)?;
                self.net.set(arg, &v).map_err(usage)?;
            }
            "--enter" => self.enter = true,
            "--join" => self.join.push(PathBuf::from(value("--join")?)),
            "--user" => self.user = Some(credentials(&value("--user")?)?),
            "--home" => self.home = Some(value("--home")?),
            "--userns" => {
                let v = value("--userns")?;
                self.userns = Some(IdRange::parse(&v).map_err(|e| usage(format!("--userns {e}")))?);
            }
            "--owner-userns-fd" => self.owner_userns_fd = Some(owner_fd(arg, &value(arg)?)?),
            "--owner-netns-fd" => self.owner_netns_fd = Some(owner_fd(arg, &value(arg)?)?),
            "--owner-root-fd" => self.owner_root_fd = Some(owner_fd(arg, &value(arg)?)?),
            "--drop-caps" => self.drop_caps = dropped(&value("--drop-caps")?)?,
            "--no-new-privs" => self.no_new_privs = true,
            "--lend" => self.lend.push(lent(value("--lend")?)?),
            "--tool" => self.tools.push(tool(&value("--tool")?)?),
            "--owner" => {
                let v = value("--owner")?;
                let pid = v.parse::<i32>().ok().filter(|p| *p > 0);
                self.owner = Some(pid.ok_or_else(|| {
                    usage(format!("--owner {v:?}: expected a pid (a positive number)"))
                })?);
            }
            other => return Err(usage(format!("anchor: unknown option {other:?}"))),
        }
        Ok(())
    }

    /// The options checked together: paths absolute, each option with
    /// those it needs, the hostname one the kernel takes.
    fn check(self) -> Result<AnchorOpts, Error> {
        let usage = |m: String| Error::Usage(m);
        let absolute = |name: &str, p: Option<PathBuf>| match p {
            Some(p) if p.is_absolute() => Ok(p),
            Some(p) => Err(usage(format!(
                "{name} {}: must be an absolute path",
                p.display()
            ))),
            None => Err(usage(format!("anchor needs {name}"))),
        };
        let root = absolute("--root", self.root)?;
        let control = absolute("--control", self.control)?;
        let cgroup_v2 = self
            .cgroup_v2
            .map(|p| absolute("--cgroup-v2", Some(p)))
            .transpose()?;
        let cgroup_freezer = self
            .cgroup_freezer
            .map(|p| absolute("--cgroup-freezer", Some(p)))
            .transpose()?;
        let join = self
            .join
            .into_iter()
            .map(|p| absolute("--join", Some(p)))
            .collect::<Result<Vec<_>, _>>()?;
        let enter = self.enter;
        if !join.is_empty() && !enter {
            return Err(usage("--join needs --enter".into()));
        }
        if self.owner_userns_fd.is_some() && self.userns.is_none() {
            return Err(usage(
                "--owner-userns-fd needs --userns (the range it maps)".into(),
            ));
        }
        if self.owner_netns_fd.is_some() && !(enter && self.net.own_namespace()) {
            return Err(usage(
                "--owner-netns-fd needs --enter and --net none|gateway|allow".into(),
            ));
        }
        if self.owner_root_fd.is_some() && !enter {
            return Err(usage(
                "--owner-root-fd needs --enter: the root is attached in the mount namespace \
                 the anchor makes"
                    .to_owned(),
            ));
        }
        let hostname = self
            .hostname
            .ok_or_else(|| usage("anchor needs --hostname".into()))?;
        // The kernel's limit (HOST_NAME_MAX); a NUL would cut the name short.
        if hostname.is_empty() || hostname.len() > 64 || hostname.contains('\0') {
            return Err(usage(format!(
                "--hostname {hostname:?}: must be 1 to 64 bytes without NUL"
            )));
        }
        Ok(AnchorOpts {
            root,
            control,
            hostname,
            cgroup_v2,
            cgroup_freezer,
            net: self.net,
            owner: self.owner,
            tools: self.tools,
            user: self.user,
            enter,
            join,
            userns: self.userns,
            owner_userns_fd: self.owner_userns_fd,
            owner_netns_fd: self.owner_netns_fd,
            owner_root_fd: self.owner_root_fd,
            lend: self.lend,
            drop_caps: self.drop_caps,
            no_new_privs: self.no_new_privs,
            home: match self.home {
                Some(h) if h.starts_with('/') && !h.contains('\0') => h,
                Some(h) => return Err(usage(format!("--home {h:?}: must be an absolute path"))),
                None => "/root".to_owned(),
            },
        })
    }
}

/// `--owner-*-fd N`: a descriptor number of the owner's.
fn owner_fd(name: &str, v: &str) -> Result<i32, Error> {
    v.parse::<i32>().ok().filter(|fd| *fd >= 0).ok_or_else(|| {
        Error::Usage(format!(
            "{name} {v:?}: expected a descriptor number (0 or more)"
        ))
    })
}

/// `--lend PATH`: an absolute path without `.` or `..`.
fn lent(v: String) -> Result<PathBuf, Error> {
    let fine =
        v.starts_with('/') && v.split('/').all(|p| p != "." && p != "..") && !v.contains('\0');
    if !fine {
        return Err(Error::Usage(format!(
            "--lend {v:?}: expected an absolute path without `.` or `..`"
        )));
    }
    Ok(PathBuf::from(v))
}

/// `--tool AT=HOST`: AT relative without `..`, HOST absolute.
fn tool(v: &str) -> Result<(String, PathBuf), Error> {
    let bad = || {
        Error::Usage(format!(
            "--tool {v:?}: expected AT=HOST, AT relative without `..`, HOST absolute"
        ))
    };
    let (at, host) = v.split_once('=').ok_or_else(bad)?;
    let fine = !at.is_empty()
        && at
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
        && host.starts_with('/');
    if !fine {
        return Err(bad());
    }
    Ok((at.to_owned(), PathBuf::from(host)))
}

fn credentials(v: &str) -> Result<Credentials, Error> {
    Credentials::parse(v).map_err(|e| Error::Usage(format!("--user {e}")))
}

/// Longest budget accepted, in seconds: one day. Every budget is a number of
/// seconds in `0..=MAX_BUDGET_S`, fractions allowed.
pub const MAX_BUDGET_S: f64 = 86_400.0;

fn secs(name: &str, v: &str) -> Result<Duration, Error> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && (0.0..=MAX_BUDGET_S).contains(s))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            Error::Usage(format!(
                "{name} {v:?}: expected a number of seconds in 0..={MAX_BUDGET_S}"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn budgets_out_of_range_are_refused_by_name() {
        for v in ["1e300", "-1", "NaN", "inf", "86401", "x"] {
            let err = parse(&strings(&[
                "run",
                "--session",
                "/s",
                "--launch",
                "l",
                "--stop-grace",
                v,
                "--",
                "true",
            ]))
            .expect_err(v);
            let text = err.to_string();
            assert!(
                text.contains("--stop-grace") && text.contains("0..=86400"),
                "{text}"
            );
        }
    }

    #[test]
    fn parses_run() {
        let p = parse(&strings(&[
            "run",
            "--session",
            "/s",
            "--launch",
            "l1",
            "--freeze",
            "sigstop",
            "--stop-grace",
            "0.5",
            "--",
            "sh",
            "-c",
            "x",
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
        let err = parse(&strings(&[
            "run",
            "--session",
            "/s",
            "--launch",
            "a/b",
            "--",
            "x",
        ]))
        .expect_err("slash");
        assert!(err.to_string().contains("--launch"), "{err}");
        let err = parse(&strings(&[
            "pause",
            "--session",
            "/s",
            "--d-budget",
            "soon",
        ]))
        .expect_err("nan");
        assert!(err.to_string().contains("--d-budget"), "{err}");
        let err = parse(&strings(&["pause"])).expect_err("no session");
        assert!(err.to_string().contains("--session"), "{err}");
        let err =
            parse(&strings(&["run", "--session", "/s", "--launch", "x"])).expect_err("no command");
        assert!(err.to_string().contains("command"), "{err}");
    }

    fn base_with_host() -> [&'static str; 7] {
        [
            "anchor",
            "--root",
            "/m",
            "--control",
            "/c",
            "--hostname",
            "h",
        ]
    }

    #[test]
    fn parses_anchor_and_names_bad_options() {
        let p = parse(&strings(&[
            "anchor",
            "--root",
            "/m",
            "--control",
            "/c",
            "--hostname",
            "box",
            "--cgroup-v2",
            "/sys/fs/cgroup/unified/rollpoint/box",
            "--net",
            "allow",
            "--gateway",
            "127.0.0.1:4000",
            "--allow",
            "10.9.0.0/24:8080",
            "--host",
            "pypi.test=10.9.0.2",
        ]))
        .expect("parses");
        let Parsed::Anchor(a) = p else {
            panic!("not anchor")
        };
        assert_eq!(a.root, PathBuf::from("/m"));
        assert_eq!(a.hostname, "box");
        assert!(a.cgroup_freezer.is_none() && a.cgroup_v2.is_some());
        assert_eq!(a.net.mode, crate::net_opts::NetMode::Allow);
        assert_eq!(a.net.allow.len(), 1);
        assert_eq!(
            a.net.hosts,
            [("pypi.test".to_owned(), [10, 9, 0, 2].into())]
        );
        let mut bad = strings(&base_with_host());
        bad.extend(["--allow".to_owned(), "10.0.0.0/33:80".to_owned()]);
        let err = parse(&bad).expect_err("bad prefix");
        assert!(err.to_string().contains("--allow"), "{err}");
        for value in ["s1", "=/run/a.sock", "s1=relative.sock"] {
            let mut bad = strings(&base_with_host());
            bad.extend(["--gateway-attach".to_owned(), value.to_owned()]);
            let err = parse(&bad).expect_err("bad --gateway-attach");
            assert!(err.to_string().contains("SANDBOX=PATH"), "{value}: {err}");
        }
        let mut attached = strings(&base_with_host());
        attached.extend([
            "--gateway-attach".to_owned(),
            "s1=/run/g/attach.sock".to_owned(),
        ]);
        let Parsed::Anchor(a) = parse(&attached).expect("parses") else {
            panic!("not anchor")
        };
        assert_eq!(
            a.net.attach,
            Some(("s1".to_owned(), PathBuf::from("/run/g/attach.sock")))
        );

        let base = ["anchor", "--root", "/m", "--control", "/c"];
        let err = parse(&strings(&base)).expect_err("no hostname");
        assert!(err.to_string().contains("--hostname"), "{err}");
        let mut long = strings(&base);
        long.extend(["--hostname".to_owned(), "h".repeat(65)]);
        let err = parse(&long).expect_err("long hostname");
        assert!(err.to_string().contains("--hostname"), "{err}");
        let err = parse(&strings(&["anchor", "--root", "m", "--control", "/c"]))
            .expect_err("relative root");
        assert!(err.to_string().contains("--root"), "{err}");

        let mut owned = strings(&base);
        owned.extend(strings(&["--hostname", "h", "--owner", "4242"]));
        let Ok(Parsed::Anchor(a)) = parse(&owned) else {
            panic!("not anchor")
        };
        assert_eq!(a.owner, Some(4242));
        for bad in ["0", "-3", "x"] {
            let mut argv = strings(&base);
            argv.extend(strings(&["--hostname", "h", "--owner", bad]));
            let err = parse(&argv).expect_err("bad owner");
            assert!(err.to_string().contains("--owner"), "{bad}: {err}");
        }
    }

    /// An anchor's required options, then `extra`.
    fn anchor_argv(extra: &[&str]) -> Vec<String> {
        let mut argv = strings(&[
            "anchor",
            "--root",
            "/m",
            "--control",
            "/c",
            "--hostname",
            "h",
        ]);
        argv.extend(strings(extra));
        argv
    }

    #[test]
    fn an_owner_userns_fd_needs_userns_and_a_number() {
        let Ok(Parsed::Anchor(a)) = parse(&anchor_argv(&[
            "--userns",
            "1073741824:65536",
            "--owner-userns-fd",
            "7",
        ])) else {
            panic!("not anchor")
        };
        assert_eq!(a.owner_userns_fd, Some(7));
        let err = parse(&anchor_argv(&["--owner-userns-fd", "7"])).expect_err("no --userns");
        assert!(err.to_string().contains("needs --userns"), "{err}");
        for bad in ["-1", "x", ""] {
            let argv = anchor_argv(&["--userns", "1:1", "--owner-userns-fd", bad]);
            let err = parse(&argv).expect_err(bad);
            assert!(
                err.to_string().contains("--owner-userns-fd"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn an_owner_netns_fd_needs_enter_a_namespace_and_a_number() {
        let net = ["--enter", "--net", "gateway", "--owner-netns-fd", "9"];
        let Ok(Parsed::Anchor(a)) = parse(&anchor_argv(&net)) else {
            panic!("not anchor")
        };
        assert_eq!(a.owner_netns_fd, Some(9));
        for argv in [
            &["--net", "gateway", "--owner-netns-fd", "9"][..],
            &["--enter", "--net", "host", "--owner-netns-fd", "9"],
        ] {
            let err = parse(&anchor_argv(argv)).expect_err("refused");
            assert!(err.to_string().contains("needs --enter and --net"), "{err}");
        }
        let err = parse(&anchor_argv(&[
            "--enter",
            "--net",
            "none",
            "--owner-netns-fd",
            "x",
        ]))
        .expect_err("not a number");
        assert!(err.to_string().contains("--owner-netns-fd \"x\""), "{err}");
    }

    #[test]
    fn enter_and_join_parse_and_a_join_needs_enter() {
        let Ok(Parsed::Anchor(a)) = parse(&anchor_argv(&[])) else {
            panic!("not anchor")
        };
        assert!(!a.enter && a.join.is_empty());
        let argv = anchor_argv(&["--enter", "--join", "/cg/a", "--join", "/cg/b"]);
        let Ok(Parsed::Anchor(a)) = parse(&argv) else {
            panic!("not anchor")
        };
        assert!(a.enter);
        assert_eq!(a.join, [PathBuf::from("/cg/a"), PathBuf::from("/cg/b")]);
        let err = parse(&anchor_argv(&["--join", "/cg/a"])).expect_err("join without enter");
        assert!(err.to_string().contains("--join needs --enter"), "{err}");
        let err = parse(&anchor_argv(&["--enter", "--join", "cg"])).expect_err("relative join");
        assert!(
            err.to_string()
                .contains("--join cg: must be an absolute path"),
            "{err}"
        );
    }

    #[test]
    fn user_and_home_parse_and_bad_ones_are_named() {
        let Ok(Parsed::Anchor(a)) = parse(&anchor_argv(&[])) else {
            panic!("not anchor")
        };
        assert_eq!((a.user, a.home.as_str()), (None, "/root"));
        let argv = anchor_argv(&["--user", "1000:1000:27", "--home", "/home/n"]);
        let Ok(Parsed::Anchor(a)) = parse(&argv) else {
            panic!("not anchor")
        };
        assert_eq!(
            a.user.map(|u| u.to_string()).as_deref(),
            Some("1000:1000:27")
        );
        assert_eq!(a.home, "/home/n");
        for (flag, bad) in [("--user", "node"), ("--user", "1"), ("--home", "rel")] {
            let err = parse(&anchor_argv(&[flag, bad]))
                .expect_err(bad)
                .to_string();
            assert!(err.contains(flag), "{bad}: {err}");
        }
        let run = ["run", "--session", "/s", "--launch", "l", "--user", "7:8"];
        let Ok(Parsed::Run(r)) = parse(&strings(&[&run[..], &["--", "true"]].concat())) else {
            panic!("not run")
        };
        assert_eq!(r.user.map(|u| (u.uid, u.gid)), Some((7, 8)));
    }
}
