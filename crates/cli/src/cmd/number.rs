//! Parsers for numeric flags: each takes any integer (negative included, as
//! the command line allows negative numbers) and refuses one outside its
//! range with the range, so `--keep -1` reads "must be a whole number in
//! 1..=1000", never clap's "unexpected argument". clap prefixes the flag
//! and the value to the error's text.

/// A flag's value outside its range, or no number at all: the message is
/// the range either way, which is what the user needs to fix it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RangeError {
    #[error("must be a whole number in {lo}..={hi}")]
    Whole { lo: u64, hi: u64 },
    #[error("must be a number of seconds in {lo}..={hi}")]
    Seconds { lo: f64, hi: f64 },
}

/// A whole number in `lo..=hi`, as `T`.
pub fn whole<T>(lo: u64, hi: u64) -> impl Fn(&str) -> Result<T, RangeError> + Clone + Send + Sync
where
    T: TryFrom<u64>,
{
    move |text: &str| {
        let n = text.trim().parse::<i128>().ok();
        match n.and_then(|n| u64::try_from(n).ok()) {
            Some(n) if (lo..=hi).contains(&n) => {
                T::try_from(n).map_err(|_| RangeError::Whole { lo, hi })
            }
            _ => Err(RangeError::Whole { lo, hi }),
        }
    }
}

/// A finite number of seconds in `lo..=hi`.
pub fn seconds(lo: f64, hi: f64) -> impl Fn(&str) -> Result<f64, RangeError> + Clone + Send + Sync {
    move |text: &str| match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && (lo..=hi).contains(&s) => Ok(s),
        _ => Err(RangeError::Seconds { lo, hi }),
    }
}

/// `command` and every subcommand under it taking negative numbers as values,
/// so a numeric flag's own parser names the flag and its range.
pub fn negatives_as_values(command: clap::Command) -> clap::Command {
    command
        .allow_negative_numbers(true)
        .mut_subcommands(negatives_as_values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_outside_their_range_name_it() {
        let keep = whole::<usize>(1, 1000);
        assert_eq!(keep("7"), Ok(7));
        for bad in ["-1", "0", "1001", "x", "1.5", "99999999999999999999999"] {
            assert_eq!(
                keep(bad).map_err(|e| e.to_string()),
                Err("must be a whole number in 1..=1000".into()),
                "{bad}"
            );
        }
        let port = whole::<u16>(0, 65_535);
        assert_eq!(port("65535"), Ok(65_535));
        assert!(port("65536").is_err());
    }

    #[test]
    fn seconds_are_finite_and_in_range() {
        let hold = seconds(0.0, 3600.0);
        assert_eq!(hold("0.5"), Ok(0.5));
        for bad in ["-1", "NaN", "inf", "3601", ""] {
            assert!(hold(bad).is_err(), "{bad}");
        }
    }
}
