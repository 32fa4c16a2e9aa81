//! The call ledger: one SQLite database (bundled, WAL) owned by one writer thread. Every model
//! call becomes a row; request and response bodies are stored once, addressed by SHA-256.
//! Callers send closures over a channel and await the answer, so the async proxy never blocks
//! on SQLite, and queued jobs are committed together in one transaction. One verb per file;
//! each runs on the writer thread with the connection.

mod begin;
mod bodies;
mod call_id;
mod delivered;
mod export;
mod finish;
mod install;
mod lookup;
mod parent_turn;
mod parents;
pub mod record;
mod reject;
mod replay;
mod schema;
mod status;
mod sweep;

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use rusqlite::Connection;

use crate::errors::GatewayError;

pub(crate) use begin::begin;
pub use begin::{Begun, NewCall};
pub use call_id::{CallId, RowKey};
pub(crate) use delivered::delivered;
pub(crate) use export::export;
pub use export::{read_for_trajectories, read_with_requests};
pub use finish::Finish;
pub(crate) use finish::finish;
pub use install::InstallReport;
pub(crate) use install::install;
pub(crate) use lookup::{body, next_seq, rows};
pub(crate) use parent_turn::parent_turn;
pub use reject::Rejected;
pub(crate) use reject::reject;
pub use replay::Replay;
pub use schema::SCHEMA_VERSION;
pub use status::CallStatus;

/// Told whether the transaction its job ran in was committed.
type Waiter = Box<dyn FnOnce(Result<(), GatewayError>) + Send>;

/// A job, and where it leaves a waiter for the commit of its transaction.
type Job = Box<dyn FnOnce(&Connection, &mut Vec<Waiter>) + Send>;

/// Jobs committed in one transaction at most.
const BATCH: usize = 1024;

/// How long a transaction stays open for more jobs. Most jobs are posted (nobody waits for
/// them), and every call rewrites the same hot pages: one commit for many calls writes each
/// page once.
const LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// Handle to the ledger's writer thread.
#[derive(Debug, Clone)]
pub struct Ledger {
    tx: mpsc::Sender<Job>,
    path: PathBuf,
}

impl Ledger {
    /// Opens (creating with mode 0600) the ledger at `path` and starts its writer thread.
    pub fn open(path: &Path) -> Result<Self, GatewayError> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| GatewayError::LedgerFile {
                path: path.to_owned(),
                source,
            })?;
        let mut conn = Connection::open(path).map_err(|source| GatewayError::LedgerOpen {
            path: path.to_owned(),
            source,
        })?;
        schema::prepare(&mut conn, path)?;
        sweep::sweep_interrupted(&conn)?;
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || writer(&conn, &rx))
            .map_err(|source| GatewayError::LedgerFile {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            tx,
            path: path.to_owned(),
        })
    }

    /// The database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the writer thread and returns its result.
    pub async fn run<R, F>(&self, f: F) -> Result<R, GatewayError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, GatewayError> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.tx
            .send(Box::new(move |conn, _| {
                let _ = reply.send(f(conn));
            }))
            .map_err(|_| GatewayError::LedgerGone)?;
        answer.await.map_err(|_| GatewayError::LedgerGone)?
    }

    /// Waits until every job queued before is committed.
    pub async fn flush(&self) -> Result<(), GatewayError> {
        self.run(commit_now).await
    }

    /// Runs `f` on the writer thread and answers once its transaction is committed, with
    /// every job queued before it. The writer stops lingering for more jobs while anyone waits
    /// on a commit, so this costs no batching delay; jobs already queued share the commit.
    pub async fn run_committed<R, F>(&self, f: F) -> Result<R, GatewayError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, GatewayError> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.tx
            .send(Box::new(move |conn, waiters: &mut Vec<Waiter>| {
                match f(conn) {
                    Ok(out) => waiters.push(Box::new(move |committed| {
                        let _ = reply.send(committed.map(|()| out));
                    })),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }))
            .map_err(|_| GatewayError::LedgerGone)?;
        answer.await.map_err(|_| GatewayError::LedgerGone)?
    }

    /// Queues `f` without waiting for it.
    pub fn post<F>(&self, f: F)
    where
        F: FnOnce(&Connection) + Send + 'static,
    {
        let _ = self.tx.send(Box::new(move |conn, _| f(conn)));
    }
}

/// Commits the open transaction (if any) and opens the next, mid-batch.
fn commit_now(conn: &Connection) -> Result<(), GatewayError> {
    if !conn.is_autocommit() {
        conn.execute_batch("COMMIT; BEGIN")
            .map_err(GatewayError::ledger("commit"))?;
    }
    Ok(())
}

fn writer(conn: &Connection, rx: &mpsc::Receiver<Job>) {
    let mut waiters: Vec<Waiter> = Vec::new();
    while let Ok(first) = rx.recv() {
        // A failed BEGIN leaves autocommit on: each job then commits alone.
        let batched = conn.execute_batch("BEGIN").is_ok();
        first(conn, &mut waiters);
        let deadline = std::time::Instant::now() + LINGER;
        for _ in 1..BATCH {
            // Someone waits on this commit: take only what is already queued.
            let next = if waiters.is_empty() {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                rx.recv_timeout(left).ok()
            } else {
                rx.try_recv().ok()
            };
            match next {
                Some(job) => job(conn, &mut waiters),
                None => break,
            }
        }
        let committed = if batched {
            conn.execute_batch("COMMIT").map_err(|e| {
                let _ = conn.execute_batch("ROLLBACK");
                GatewayError::Ledger {
                    context: "commit",
                    source: e,
                }
            })
        } else {
            Ok(())
        };
        if let Err(e) = &committed
            && waiters.is_empty()
        {
            // Nobody to hand the error to: the jobs already answered. Say it once.
            tracing::error!(error = %e, "ledger commit failed");
        }
        for waiter in waiters.drain(..) {
            waiter(match &committed {
                Ok(()) => Ok(()),
                Err(e) => Err(GatewayError::CommitFailed {
                    message: e.to_string(),
                }),
            });
        }
    }
}
