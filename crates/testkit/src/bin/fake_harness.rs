//! A harness stand-in that builds every process-tree shape the engine must
//! handle. Arguments are steps run in order; steps that spawn return at once
//! and the last step usually blocks:
//!
//! ```text
//! fake-harness ignore-int setsid daemon clearenv ready /tmp/r sleep 3600
//! ```
//!
//! | step | effect |
//! |---|---|
//! | `sleep SECS` | sleep |
//! | `exit CODE` | exit with CODE |
//! | `wait` | wait for every child, then go on |
//! | `ready FILE` | create FILE (atomically) |
//! | `flat N` | fork N children that sleep |
//! | `chain N` | exec a chain of N nested processes; the innermost runs the remaining steps, every other level waits for its child |
//! | `setsid` | fork a child that starts its own session and sleeps |
//! | `daemon` | double-fork a detached daemon (own session, parent gone) |
//! | `clearenv` | spawn a child with an empty environment that sleeps |
//! | `ignore-int` | ignore SIGINT from now on (inherited by later children) |
//! | `burst` | fork a child that runs short `true` commands, 4 at a time, forever |
//! | `churn` | run `sh -c 'while :; do /bin/true; done'` in 2 children |
//! | `tick FILE MS STEPS` | append `step N` to FILE every MS ms, STEPS times |
//! | `tickers DIR K MS STEPS` | fork K children that each tick into DIR/tick-<k> |
//! | `dwrite PATH` | fork a child that writes PATH (blocks in D on a frozen filesystem) |
//! | `abandon N` | orphan N grandchildren that exit within 200 ms |

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("fake-harness: {e}");
        std::process::exit(2);
    }
}

fn num<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, String> {
    args.get(i)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{what}: expected a number at argument {i}"))
}

fn arg<'a>(args: &'a [String], i: usize, what: &str) -> Result<&'a str, String> {
    args.get(i)
        .map(String::as_str)
        .ok_or_else(|| format!("{what}: missing argument"))
}

/// The steps of each kind, in turn; a step's function answers how many
/// arguments it took, or `None` when the step is not of its kind.
type Steps = fn(&[String], usize) -> Result<Option<usize>, String>;

fn run(args: &[String]) -> Result<(), String> {
    let mut i = 0;
    'steps: while i < args.len() {
        for steps in [control as Steps, tree, load] {
            if let Some(used) = steps(args, i)? {
                i += used;
                continue 'steps;
            }
        }
        return Err(format!("unknown step {:?}", args[i]));
    }
    Ok(())
}

/// Steps that shape this process: sleeping, exiting, waiting, signals.
fn control(args: &[String], i: usize) -> Result<Option<usize>, String> {
    let step = args[i].as_str();
    let used = match step {
        "sleep" => {
            std::thread::sleep(Duration::from_secs_f64(num(args, i + 1, step)?));
            2
        }
        "exit" => std::process::exit(num(args, i + 1, step)?),
        "wait" => {
            wait_all();
            1
        }
        "ready" => {
            let path = arg(args, i + 1, step)?;
            let tmp = format!("{path}.tmp");
            std::fs::write(&tmp, std::process::id().to_string()).map_err(|e| e.to_string())?;
            std::fs::rename(&tmp, path).map_err(|e| e.to_string())?;
            2
        }
        "ignore-int" => {
            // SAFETY: installing SIG_IGN has no handler code to run.
            unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
            1
        }
        _ => return Ok(None),
    };
    Ok(Some(used))
}

/// Steps that build a process-tree shape.
fn tree(args: &[String], i: usize) -> Result<Option<usize>, String> {
    let step = args[i].as_str();
    let used = match step {
        "flat" => {
            let n: u32 = num(args, i + 1, step)?;
            for _ in 0..n {
                fork_then(|| sleep_forever())?;
            }
            2
        }
        "chain" => {
            let n: u32 = num(args, i + 1, step)?;
            if n > 0 {
                let me = std::env::current_exe().map_err(|e| e.to_string())?;
                let mut rest = vec!["chain".to_owned(), (n - 1).to_string()];
                rest.extend_from_slice(&args[i + 2..]);
                let status = Command::new(me)
                    .args(rest)
                    .status()
                    .map_err(|e| e.to_string())?;
                std::process::exit(status.code().unwrap_or(1));
            }
            2
        }
        "setsid" => {
            fork_then(|| {
                // SAFETY: setsid has no memory effects.
                unsafe { libc::setsid() };
                sleep_forever()
            })?;
            1
        }
        "daemon" => {
            let middle = fork_then(|| {
                let _ = fork_then(|| {
                    // SAFETY: setsid has no memory effects.
                    unsafe { libc::setsid() };
                    sleep_forever()
                });
                // SAFETY: _exit skips destructors, as a forked child should.
                unsafe { libc::_exit(0) }
            })?;
            waitpid(middle);
            1
        }
        "clearenv" => {
            let me = std::env::current_exe().map_err(|e| e.to_string())?;
            Command::new(me)
                .env_clear()
                .args(["sleep", "3600"])
                .spawn()
                .map_err(|e| e.to_string())?;
            1
        }
        "abandon" => {
            let n: u32 = num(args, i + 1, step)?;
            for k in 0..n {
                let middle = fork_then(move || {
                    let _ = fork_then(move || {
                        std::thread::sleep(Duration::from_millis(u64::from(k % 200)));
                        // SAFETY: _exit skips destructors, as a forked child should.
                        unsafe { libc::_exit(0) }
                    });
                    // SAFETY: as above.
                    unsafe { libc::_exit(0) }
                })?;
                waitpid(middle);
            }
            2
        }
        _ => return Ok(None),
    };
    Ok(Some(used))
}

/// Steps that keep children busy: process churn, ticking files, a blocking write.
fn load(args: &[String], i: usize) -> Result<Option<usize>, String> {
    let step = args[i].as_str();
    let used = match step {
        "burst" => {
            fork_then(|| {
                loop {
                    let kids: Vec<_> = (0..4)
                        .filter_map(|_| Command::new("true").stdout(Stdio::null()).spawn().ok())
                        .collect();
                    for mut k in kids {
                        let _ = k.wait();
                    }
                }
            })?;
            1
        }
        "churn" => {
            for _ in 0..2 {
                Command::new("sh")
                    .args(["-c", "while :; do /bin/true; done"])
                    .spawn()
                    .map_err(|e| e.to_string())?;
            }
            1
        }
        "tick" => {
            let file = arg(args, i + 1, step)?.to_owned();
            let ms: u64 = num(args, i + 2, step)?;
            let steps: u32 = num(args, i + 3, step)?;
            tick(&file, ms, steps)?;
            4
        }
        "tickers" => {
            let dir = arg(args, i + 1, step)?.to_owned();
            let k: u32 = num(args, i + 2, step)?;
            let ms: u64 = num(args, i + 3, step)?;
            let steps: u32 = num(args, i + 4, step)?;
            for n in 0..k {
                let file = format!("{dir}/tick-{n}");
                fork_then(move || {
                    let code = i32::from(tick(&file, ms, steps).is_err());
                    // SAFETY: _exit skips destructors, as a forked child should.
                    unsafe { libc::_exit(code) }
                })?;
            }
            5
        }
        "dwrite" => {
            let path = arg(args, i + 1, step)?.to_owned();
            fork_then(move || {
                if let Ok(mut f) = std::fs::File::create(&path) {
                    let _ = f.write_all(b"written\n");
                    let _ = f.sync_all();
                }
                sleep_forever()
            })?;
            2
        }
        _ => return Ok(None),
    };
    Ok(Some(used))
}

fn tick(file: &str, ms: u64, steps: u32) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| format!("{file}: {e}"))?;
    writeln!(f, "start {}", std::process::id()).map_err(|e| e.to_string())?;
    for n in 1..=steps {
        std::thread::sleep(Duration::from_millis(ms));
        writeln!(f, "step {n}").map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn sleep_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Forks; the child runs `f` and never returns. This program is
/// single-threaded, so the child may run ordinary code.
fn fork_then(f: impl FnOnce()) -> Result<libc::pid_t, String> {
    // SAFETY: the process is single-threaded (no step starts a thread), so
    // the child owns a consistent copy of the address space.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            f();
            // SAFETY: _exit skips destructors, as a forked child should.
            unsafe { libc::_exit(0) }
        }
        pid => Ok(pid),
    }
}

fn waitpid(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: status is a valid out-pointer for the call.
    unsafe { libc::waitpid(pid, &raw mut status, 0) };
}

fn wait_all() {
    let mut status = 0;
    // SAFETY: as above; -1 waits for any child until none is left.
    while unsafe { libc::waitpid(-1, &raw mut status, 0) } > 0 {}
}
