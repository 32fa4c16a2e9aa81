//! `rollpoint` services run as children of a test (`serve gateway`, `serve owner`, ...): each
//! started with a port file and a log of its own, killed on drop if the test fails first.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The services, killed if the test fails before it stops them.
#[derive(Debug)]
pub struct Services {
    children: Vec<(&'static str, Child)>,
    logs: PathBuf,
}

impl Services {
    /// Services whose logs (and port files) go to `logs`.
    pub fn new(logs: PathBuf) -> Self {
        Self {
            children: Vec::new(),
            logs,
        }
    }

    /// Starts `rollpoint <args> --port-file <file>` and returns its port.
    pub fn start(&mut self, name: &'static str, args: &[&OsStr]) -> u16 {
        let port_file = self.logs.join(format!("{name}.port"));
        let _first_start = std::fs::remove_file(&port_file);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.logs.join(format!("{name}.log")))
            .unwrap();
        let child = Command::new(crate::rollpoint_bin())
            .args(args)
            .arg("--port-file")
            .arg(&port_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.push((name, child));
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return port;
            }
            assert!(
                Instant::now() < end,
                "{name} wrote no port:\n{}",
                self.log(name)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL to `name`, reaped.
    pub fn kill(&mut self, name: &str) {
        let i = self.children.iter().position(|(n, _)| *n == name).unwrap();
        let (_, mut child) = self.children.remove(i);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.logs.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// SIGTERM to each, last started first; each must exit cleanly.
    pub fn stop(&mut self) {
        while let Some((name, mut child)) = self.children.pop() {
            let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
            kill(pid, Signal::SIGTERM).unwrap();
            let end = Instant::now() + Duration::from_secs(180);
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break s;
                }
                assert!(
                    Instant::now() < end,
                    "{name} did not stop:\n{}",
                    self.log(name)
                );
                std::thread::sleep(Duration::from_millis(50));
            };
            assert!(
                status.success(),
                "{name} exited {status}:\n{}",
                self.log(name)
            );
        }
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _already_gone = child.kill();
            let _reaped = child.wait();
        }
    }
}
