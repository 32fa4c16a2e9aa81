//! The run's files and their formats: what the run writes to its directory (atomically, or
//! a whole line at a time) and reads back with every field checked, so a crash at any point
//! leaves something a resume can read; the tasks file it is given; what a published
//! checkpoint saved.
//!
//! | file | what it is for |
//! |---|---|
//! | [`state`] | `run.json`: the config, the attempts dispatched, the gateway port |
//! | [`tasks`] | the tasks file, every line checked before anything runs |
//! | [`results`] | `results.jsonl`, one row per finished rollout |
//! | [`events`] | `events.jsonl`: start, resumes, checkpoints and their times, stop, end |
//! | [`definition`] | the run's definition (run.json, tasks, results) published with each checkpoint |
//! | `saved` | what a published checkpoint saved, read through the participants' formats |

pub mod definition;
pub mod events;
pub mod results;
pub(crate) mod saved;
pub mod state;
pub mod tasks;
