//! Talking to a launch's supervisor from the host: its control socket (one
//! JSON request line, one reply line), its launch record, and the pause file
//! in its session directory.

use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rollpoint_proto::Cause;
use rollpoint_proto::anchor::LAUNCH_OUTPUT;
use rollpoint_proto::launch::LaunchRecord;
use rollpoint_proto::session::{LAUNCH_FILE, PAUSE_FILE};
use rollpoint_proto::supervisor::{Reply, Request, SUPERVISOR_SOCKET, Verb};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;

use crate::errors::SupervisorError;

/// How long a freshly started supervisor may take to open its socket.
const SOCKET_WAIT: Duration = Duration::from_secs(30);
/// How often a launch being waited on is checked for a supervisor gone.
const GONE_CHECK: Duration = Duration::from_secs(2);
/// How long a supervisor that could not start its harness may take to
/// write why, after its record says so.
const START_ERROR_WAIT: Duration = Duration::from_secs(2);

/// The supervisor's message about a harness it could not start, from the
/// launch's output log (which holds nothing else: the harness never ran).
fn spawn_message(log: &str) -> Option<String> {
    log.lines()
        .rev()
        .filter_map(|l| l.trim().strip_prefix("rollpoint-supervisor: "))
        .find(|l| l.contains("start the harness"))
        .map(str::to_owned)
}

/// One launch's session directory on the host.
#[derive(Debug, Clone)]
pub struct LaunchDir {
    pub dir: PathBuf,
}

impl LaunchDir {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join(SUPERVISOR_SOCKET)
    }

    /// The launch record, if it can be read yet.
    pub async fn record(&self) -> Option<LaunchRecord> {
        let bytes = tokio::fs::read(self.dir.join(LAUNCH_FILE)).await.ok()?;
        LaunchRecord::decode(&bytes).ok()
    }

    /// Asks the supervisor `verb`, waiting up to `limit` for the reply.
    /// A socket that is not there yet is retried for a while (the supervisor
    /// opens it just after the launch returns).
    pub async fn ask(&self, verb: Verb, limit: Duration) -> Result<Reply, SupervisorError> {
        let path = self.socket();
        let limit_s = limit.as_secs();
        tokio::time::timeout(limit, self.ask_inner(&path, verb))
            .await
            .map_err(|_| SupervisorError::Timeout {
                path: path.clone(),
                limit_s,
            })?
    }

    async fn ask_inner(&self, path: &Path, verb: Verb) -> Result<Reply, SupervisorError> {
        let socket_err = |what: &'static str, source: Cause| SupervisorError::Socket {
            path: path.to_owned(),
            what,
            source,
        };
        // Session directories nest deep under the owner's store, past the
        // 108 bytes a socket address holds: connect through a descriptor of
        // the directory instead (`/proc/self/fd/<n>/control.sock`).
        let dir = std::fs::File::open(&self.dir)
            .map_err(|e| socket_err("open the session directory", e.into()))?;
        let short = PathBuf::from(format!(
            "/proc/self/fd/{}/{SUPERVISOR_SOCKET}",
            dir.as_raw_fd()
        ));
        let started = tokio::time::Instant::now();
        let stream = loop {
            match UnixStream::connect(&short).await {
                Ok(s) => break s,
                Err(e)
                    if started.elapsed() < SOCKET_WAIT
                        && matches!(
                            e.kind(),
                            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                        ) =>
                {
                    // A launch that already ended has no socket any more.
                    if self.record().await.is_some_and(|r| r.ended.is_some()) {
                        return Err(socket_err("connect (the launch has ended)", e.into()));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(socket_err("connect", e.into())),
            }
        };
        drop(dir);
        let (read, mut write) = stream.into_split();
        let mut line = serde_json::to_vec(&Request::new(verb))
            .map_err(|e| socket_err("encode request", e.into()))?;
        line.push(b'\n');
        write
            .write_all(&line)
            .await
            .map_err(|e| socket_err("write request", e.into()))?;
        let mut reply = Vec::new();
        BufReader::new(read)
            .read_until(b'\n', &mut reply)
            .await
            .map_err(|e| socket_err("read reply", e.into()))?;
        Reply::decode(&reply).map_err(|source| SupervisorError::Reply {
            path: path.to_owned(),
            source,
        })
    }

    /// Creates the pause file (mode 0600): a launch that has not started
    /// waits until it is removed.
    pub async fn hold(&self) -> Result<(), SupervisorError> {
        let path = self.dir.join(PAUSE_FILE);
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .await
            .map_err(|e| SupervisorError::Socket {
                path: path.clone(),
                what: "create the pause file",
                source: e.into(),
            })?;
        file.sync_all().await.map_err(|e| SupervisorError::Socket {
            path,
            what: "sync the pause file",
            source: e.into(),
        })
    }

    /// Removes the pause file; one already gone is fine.
    pub async fn release(&self) -> Result<(), SupervisorError> {
        let path = self.dir.join(PAUSE_FILE);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(SupervisorError::Socket {
                path,
                what: "remove the pause file",
                source: e.into(),
            }),
        }
    }

    /// Why the harness of this launch could not be started, once its record
    /// says so: it ended without a process ever started (no pid, no start
    /// time), which is how the supervisor records a failed spawn (a missing
    /// or unexecutable binary). Its own message, written to the launch's
    /// output log right after the record, names the binary and the error;
    /// without one the record's argv\[0\] is named. `None` for a launch that
    /// started (or has not ended).
    pub async fn start_error(&self) -> Option<String> {
        let record = self.record().await?;
        let ended = record.ended.as_ref()?;
        if record.pid.is_some() || record.started_at_ms.is_some() {
            return None;
        }
        let log = self.dir.join(LAUNCH_OUTPUT);
        let started = tokio::time::Instant::now();
        loop {
            let text = tokio::fs::read(&log)
                .await
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            if let Some(message) = spawn_message(&text) {
                return Some(message);
            }
            if started.elapsed() >= START_ERROR_WAIT {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let argv0 = record.argv.first().map_or("", String::as_str);
        Some(format!(
            "the supervisor could not start the harness {argv0:?} (exit code {}; see {})",
            ended
                .exit_code
                .map_or_else(|| "none".to_owned(), |c| c.to_string()),
            log.display()
        ))
    }

    /// Whether nothing listens on the supervisor's socket any more: the
    /// supervisor is gone (its sandbox with it, unless it ended on its own,
    /// which its record then says). A socket not there yet is not gone.
    pub async fn supervisor_gone(&self) -> bool {
        matches!(
            self.connect().await,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        )
    }

    /// A connection to the supervisor's socket, through a descriptor of the
    /// session directory (its path may be past what a socket address holds).
    /// A session directory that is gone reads as a refused connection.
    async fn connect(&self) -> std::io::Result<UnixStream> {
        let Ok(dir) = std::fs::File::open(&self.dir) else {
            return Err(std::io::ErrorKind::ConnectionRefused.into());
        };
        UnixStream::connect(format!(
            "/proc/self/fd/{}/{SUPERVISOR_SOCKET}",
            dir.as_raw_fd()
        ))
        .await
    }

    /// Waits, up to `limit`, until the supervisor has exited: its socket is
    /// gone or refuses connections. It exits only after it has stopped
    /// whatever the harness left behind, so nothing of the launch runs on
    /// once this returns true.
    pub async fn wait_exited(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Err(e) = self.connect().await
                && matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                )
            {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The harness's exit code once the launch record says it ended (or never
    /// started), or `Err` naming the socket when the supervisor went
    /// away without recording an end (its sandbox was lost). Checked every
    /// [`GONE_CHECK`].
    pub async fn ended_or_lost(&self) -> Result<Option<i32>, String> {
        let ended = |r: &LaunchRecord| match &r.ended {
            Some(e) => Some(e.exit_code),
            None if r.phase == rollpoint_proto::launch::LaunchPhase::NeverStarted => {
                Some(Some(rollpoint_proto::session::NEVER_STARTED_EXIT))
            }
            None => None,
        };
        let mut last_check = tokio::time::Instant::now();
        loop {
            if let Some(code) = self.record().await.as_ref().and_then(ended) {
                return Ok(code);
            }
            if last_check.elapsed() >= GONE_CHECK {
                last_check = tokio::time::Instant::now();
                if self.supervisor_gone().await {
                    // It may have recorded its end just before it went.
                    if let Some(code) = self.record().await.as_ref().and_then(ended) {
                        return Ok(code);
                    }
                    return Err(format!(
                        "the launch's supervisor at {} is gone and recorded no end",
                        self.socket().display()
                    ));
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::spawn_message;

    #[test]
    fn the_supervisor_message_about_a_failed_start_is_found() {
        let log = "rollpoint-supervisor: cgroup v2: not available\n\
                   rollpoint-supervisor: failed to start the harness \"nope\": No such file or directory (os error 2)\n";
        assert_eq!(
            spawn_message(log).as_deref(),
            Some("failed to start the harness \"nope\": No such file or directory (os error 2)")
        );
        assert_eq!(spawn_message("hello\n"), None);
    }
}
