//! The cause of an error, kept whole.
//!
//! An error that several kinds of failure can cause (an I/O error, a format
//! error, another crate's error) keeps its cause as a boxed error rather than
//! its text: `source()` walks the chain, and a caller that cares can
//! `downcast_ref` to the concrete type. A cause that is only words (a check
//! that failed) is boxed from its `String`.

/// An error's cause, with its type and its own causes.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;
