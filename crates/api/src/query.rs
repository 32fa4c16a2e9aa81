//! Query parameters of a route, read one way everywhere: each at most once and each one the
//! route knows, or an error naming the parameter.

use std::collections::HashMap;

/// The parameters of `raw`, each one of `allowed` and given at most once; else the
/// parameter's name and what is wrong with it.
pub fn params(
    raw: Option<&str>,
    allowed: &[&str],
) -> Result<HashMap<String, String>, (String, String)> {
    let mut out = HashMap::new();
    for (name, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        if !allowed.contains(&name.as_ref()) {
            return Err((
                name.into_owned(),
                format!(
                    "unknown query parameter, expected one of {}",
                    allowed.join(", ")
                ),
            ));
        }
        if out.insert(name.to_string(), value.into_owned()).is_some() {
            return Err((name.into_owned(), "given more than once".to_owned()));
        }
    }
    Ok(out)
}

/// Parameter `name` of `params` as a number, `default` when absent.
pub fn number(
    params: &HashMap<String, String>,
    name: &str,
    default: u64,
) -> Result<u64, (String, String)> {
    match params.get(name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|e| (name.to_owned(), format!("{v:?} is not a whole number: {e}"))),
    }
}
