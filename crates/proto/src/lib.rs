//! Wire and on-disk formats shared by the supervisor and the host.
#![forbid(unsafe_code)]
