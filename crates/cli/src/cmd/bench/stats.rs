//! Median, min and max of a sample.

use std::time::Duration;

/// Summary of repeated measurements.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: Duration,
    pub min: Duration,
    pub max: Duration,
}

impl Summary {
    /// Summarises `samples`; `None` when empty.
    pub fn of(samples: &[Duration]) -> Option<Self> {
        let mut s = samples.to_vec();
        s.sort_unstable();
        let n = s.len();
        let median = match n {
            0 => return None,
            n if n % 2 == 1 => s[n / 2],
            n => (s[n / 2 - 1] + s[n / 2]) / 2,
        };
        Some(Self {
            median,
            min: s[0],
            max: s[n - 1],
        })
    }

    /// `median/min/max` in milliseconds.
    pub fn ms(&self) -> String {
        format!(
            "{:.2}/{:.2}/{:.2}",
            ms(self.median),
            ms(self.min),
            ms(self.max)
        )
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_samples() {
        let d = Duration::from_millis;
        let s = Summary::of(&[d(5), d(1), d(3)]).expect("summary");
        assert_eq!((s.median, s.min, s.max), (d(3), d(1), d(5)));
        let s = Summary::of(&[d(4), d(1), d(2), d(10)]).expect("summary");
        assert_eq!(s.median, d(3));
        assert!(Summary::of(&[]).is_none());
    }
}
