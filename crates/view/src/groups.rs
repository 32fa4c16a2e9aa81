//! Groups of samples (`samples = K`): pass@k per group and over the run.
//! Pure, so the estimator is tested without a run.
//!
//! A member the infrastructure ended (status `infra_error`, after its
//! retries) is no sample of the policy: it counts in neither n nor c, and
//! a group is complete only when every member has a row.

use std::collections::BTreeMap;

use rollpoint_driver::{RolloutResult, Status};

/// One group's members, as far as they have rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Group {
    pub id: String,
    /// Rows of the group.
    pub rows: usize,
    /// Members the policy ended (verified or unverified): n.
    pub samples: usize,
    /// Verified members with a reward above 0: c.
    pub passed: usize,
    /// Members the infrastructure ended.
    pub infra_errors: usize,
}

/// The unbiased pass@k estimate of a group with `n` samples of which `c`
/// passed: 1 - C(n-c, k) / C(n, k). `None` when `k` is 0 or above `n`.
#[must_use]
pub fn pass_at_k(n: usize, c: usize, k: usize) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    if n - c < k {
        return Some(1.0);
    }
    // The product form avoids the binomials' overflow.
    #[expect(clippy::cast_precision_loss, reason = "sample counts")]
    let miss: f64 = ((n - c + 1)..=n)
        .map(|i| 1.0 - k as f64 / i as f64)
        .product();
    Some(1.0 - miss)
}

/// The groups of `rows` (rows without a group are left out), by id.
#[must_use]
pub fn groups(rows: &[RolloutResult]) -> Vec<Group> {
    let mut by: BTreeMap<&str, Group> = BTreeMap::new();
    for r in rows {
        let Some(id) = r.group.as_deref() else {
            continue;
        };
        let g = by.entry(id).or_insert_with(|| Group {
            id: id.to_owned(),
            ..Group::default()
        });
        g.rows += 1;
        match r.status {
            Status::Verified | Status::Unverified => {
                g.samples += 1;
                if r.status == Status::Verified && r.reward.is_some_and(|x| x > 0.0) {
                    g.passed += 1;
                }
            }
            Status::InfraError => g.infra_errors += 1,
            Status::Cancelled => {}
        }
    }
    by.into_values().collect()
}

/// The mean of pass@k over the groups that have at least `k` samples, with
/// how many groups that is.
#[must_use]
pub fn mean_pass_at_k(groups: &[Group], k: usize) -> Option<(f64, usize)> {
    let values: Vec<f64> = groups
        .iter()
        .filter_map(|g| pass_at_k(g.samples, g.passed, k))
        .collect();
    if values.is_empty() {
        return None;
    }
    #[expect(clippy::cast_precision_loss, reason = "a count of groups")]
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    Some((mean, values.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn pass_at_k_matches_the_binomial_form() {
        // n=4, c=1: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6.
        assert!(close(pass_at_k(4, 1, 1), 0.25));
        assert!(close(pass_at_k(4, 1, 2), 0.5));
        assert!(close(pass_at_k(4, 1, 4), 1.0));
        assert!(close(pass_at_k(4, 0, 4), 0.0));
        assert!(close(pass_at_k(10, 3, 5), 1.0 - 21.0 / 252.0));
        assert_eq!(pass_at_k(3, 1, 4), None);
        assert_eq!(pass_at_k(3, 1, 0), None);
    }
}
