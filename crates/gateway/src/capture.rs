//! Capture keys are attempt keys (`<rollout_id>` or `<rollout_id>-a<N>`), defined once in
//! `rollpoint_proto::key` for every component that names an attempt.

pub use rollpoint_proto::key::AttemptKey as CaptureKey;
