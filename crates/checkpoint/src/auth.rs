//! Bearer tokens: the one check of every rollpoint HTTP surface lives in
//! [`rollpoint_api::auth`].

pub use rollpoint_api::auth::BearerToken;
