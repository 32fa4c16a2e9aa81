//! Lineage: a call's parent is the earlier call of the same rollout whose output its
//! conversation extends. Candidates are found by the fingerprint of the model-authored turns
//! (the ledger stores each call's output fingerprint) and verified on the recorded prefix: the
//! parent's own conversation items must be a prefix of the child's. Pure.

/// An earlier call whose output fingerprint equals the request's model fingerprint.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub call_id: String,
    pub response_digest: Option<String>,
    pub items: Vec<String>,
}

/// Why a call is a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootReason {
    /// The conversation holds no model-authored turn yet.
    FirstTurn,
    /// No earlier call produced the model turns this conversation holds.
    NoMatch,
    /// Earlier calls produced those turns, but none of their conversations is a prefix.
    PrefixMismatch,
    /// Several verified candidates with different responses: never guess.
    Ambiguous,
    /// Not a generation call (e.g. `/v1/models`).
    NotGeneration,
}

impl RootReason {
    /// The reason as stored in the ledger.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::FirstTurn => "first_turn",
            Self::NoMatch => "no_match",
            Self::PrefixMismatch => "prefix_mismatch",
            Self::Ambiguous => "ambiguous",
            Self::NotGeneration => "not_generation",
        }
    }
}

/// A call's place in its rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lineage {
    Root(RootReason),
    Resolved(String),
}

/// Resolves the parent of a request with conversation `items`; `candidates` come in
/// admission order, earliest first.
#[must_use]
pub fn resolve(has_model_turns: bool, items: &[String], candidates: &[Candidate]) -> Lineage {
    if !has_model_turns {
        return Lineage::Root(RootReason::FirstTurn);
    }
    if candidates.is_empty() {
        return Lineage::Root(RootReason::NoMatch);
    }
    let verified: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.items.len() < items.len() && items.starts_with(&c.items))
        .collect();
    let Some(first) = verified.first() else {
        return Lineage::Root(RootReason::PrefixMismatch);
    };
    // Identical answers (retries, replays) collapse to the earliest call.
    if verified
        .iter()
        .all(|c| c.response_digest == first.response_digest)
    {
        Lineage::Resolved(first.call_id.clone())
    } else {
        Lineage::Root(RootReason::Ambiguous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(id: &str, resp: &str, items: &[&str]) -> Candidate {
        Candidate {
            call_id: id.into(),
            response_digest: Some(resp.into()),
            items: items.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn items(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn outcomes() {
        let req = items(&["u", "a", "t"]);
        assert_eq!(
            resolve(false, &req, &[]),
            Lineage::Root(RootReason::FirstTurn)
        );
        assert_eq!(resolve(true, &req, &[]), Lineage::Root(RootReason::NoMatch));
        assert_eq!(
            resolve(true, &req, &[cand("x", "r", &["other"])]),
            Lineage::Root(RootReason::PrefixMismatch)
        );
        assert_eq!(
            resolve(
                true,
                &req,
                &[cand("p1", "r", &["u"]), cand("p2", "r", &["u"])]
            ),
            Lineage::Resolved("p1".into())
        );
        assert_eq!(
            resolve(
                true,
                &req,
                &[cand("p1", "r", &["u"]), cand("p2", "s", &["u"])]
            ),
            Lineage::Root(RootReason::Ambiguous)
        );
    }
}
