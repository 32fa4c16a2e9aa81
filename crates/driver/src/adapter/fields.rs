//! Small readers the adapters share: a string of the adapter state, and
//! the default of a settings switch that is on unless turned off.

use crate::errors::AdapterError;

/// A string field of the adapter state.
pub(crate) fn state_str<'a>(
    adapter: &'static str,
    state: &'a serde_json::Value,
    key: &str,
) -> Result<&'a str, AdapterError> {
    state
        .get(key)
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| {
            AdapterError::new(
                adapter,
                format!("state field `{key}` is missing or not a string"),
            )
        })
}

/// The default of a settings switch that is on unless turned off.
pub(super) fn default_true() -> bool {
    true
}
