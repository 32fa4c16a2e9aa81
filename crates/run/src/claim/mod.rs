//! One driver per run: `RUN_DIR/lock` on this machine, and with a checkpoint store the
//! run's claim there, which another machine takes over (`rollpoint resume --from`) once its
//! holder is gone.
//!
//! | file | what it is for |
//! |---|---|
//! | [`lock`] | `RUN_DIR/lock`: one process drives a run at a time |
//! | [`lease`] | the run's claim on its checkpoint store: heartbeat, release, fencing |
//! | [`takeover`] | a store's run taken over for a new run directory |

pub mod lease;
pub mod lock;
pub mod takeover;
