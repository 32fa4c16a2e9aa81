//! Grading: turning the verify command's output into a verdict. Pure, so
//! every reward rule is tested without a sandbox.

use rollpoint_proto::anchor::ExecOutput;
use serde::{Deserialize, Serialize};

use crate::task::RewardMode;

/// Bytes kept of the verify command's stdout and stderr tails.
pub const TAIL_BYTES: usize = 4096;

/// The grade of one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub reward: f64,
    /// `None` when a signal (or the timeout) ended the command.
    pub exit_code: Option<i32>,
    /// `reward > 0`.
    pub passed: bool,
    pub timed_out: bool,
    /// Set when the reward could not be read (JSON mode with no reward line);
    /// the reward is then 0.
    pub reward_error: Option<String>,
    /// Every value of a `reward.json` ([`RewardMode::Files`]), by key.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rewards: std::collections::BTreeMap<String, f64>,
    /// Set when the graded sandbox could not be destroyed afterwards (the
    /// session is over either way; a sweep reaps the sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup_error: Option<String>,
    pub stdout_tail: String,
    pub stderr_tail: String,
}

/// Grades `out` by `mode`. A command that timed out gets 0 whatever it
/// printed.
pub fn grade(mode: RewardMode, out: &ExecOutput) -> Verdict {
    let (reward, reward_error) = if out.timed_out {
        (0.0, Some("the verify command timed out".to_owned()))
    } else {
        match mode {
            RewardMode::ExitCode => (if out.exit_code == Some(0) { 1.0 } else { 0.0 }, None),
            // Read from the sandbox after the command: see [`grade_files`].
            RewardMode::Files => (0.0, None),
            RewardMode::Json => match json_reward(&out.stdout) {
                Some(r) => (r, None),
                None => (
                    0.0,
                    Some(
                        "no stdout line is a JSON object with a numeric finite `reward`".to_owned(),
                    ),
                ),
            },
        }
    };
    Verdict {
        reward,
        exit_code: out.exit_code,
        passed: reward > 0.0,
        timed_out: out.timed_out,
        reward_error,
        rewards: Default::default(),
        cleanup_error: None,
        stdout_tail: tail(&out.stdout, TAIL_BYTES).to_owned(),
        stderr_tail: tail(&out.stderr, TAIL_BYTES).to_owned(),
    }
}

/// Grades by the files a Harbor verifier left: `json` is `reward.json`'s
/// bytes and `txt` `reward.txt`'s, when present. A command that timed out
/// gets 0 whatever it wrote. No file, or a bad one, is a reward of 0 with
/// `reward_error` set: the graded code can break its own tests, so a
/// missing reward is the policy's outcome, not the infrastructure's.
pub fn grade_files(out: &ExecOutput, json: Option<&[u8]>, txt: Option<&[u8]>) -> Verdict {
    let mut verdict = grade(RewardMode::Files, out);
    if out.timed_out {
        return verdict;
    }
    match file_reward(json, txt) {
        Ok((reward, rewards)) => {
            verdict.reward = reward;
            verdict.passed = reward > 0.0;
            verdict.rewards = rewards;
        }
        Err(e) => verdict.reward_error = Some(e),
    }
    verdict
}

/// The reward of `reward.json` (its `reward` key, or its only value; every
/// value a finite number) or else of `reward.txt` (one finite number).
pub fn file_reward(
    json: Option<&[u8]>,
    txt: Option<&[u8]>,
) -> Result<(f64, std::collections::BTreeMap<String, f64>), String> {
    use std::collections::BTreeMap;
    if let Some(bytes) = json {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("reward.json is not JSON: {e}"))?;
        let object = value
            .as_object()
            .ok_or("reward.json is not a JSON object")?;
        let mut rewards = BTreeMap::new();
        for (key, v) in object {
            let number = v
                .as_f64()
                .filter(|n| n.is_finite())
                .ok_or_else(|| format!("reward.json: `{key}` is not a finite number"))?;
            rewards.insert(key.clone(), number);
        }
        let reward = match (rewards.get("reward"), rewards.len()) {
            (Some(r), _) => *r,
            (None, 1) => rewards.values().copied().sum(),
            (None, 0) => return Err("reward.json holds no value".to_owned()),
            (None, _) => {
                return Err("reward.json has several values and no `reward` key to take".to_owned());
            }
        };
        return Ok((reward, rewards));
    }
    if let Some(bytes) = txt {
        let text = std::str::from_utf8(bytes).map_err(|_| "reward.txt is not UTF-8")?;
        let reward: f64 = text
            .trim()
            .parse()
            .map_err(|_| format!("reward.txt holds {:?}, not a number", tail(text.trim(), 64)))?;
        if !reward.is_finite() {
            return Err(format!("reward.txt holds {reward}, not a finite number"));
        }
        return Ok((reward, BTreeMap::new()));
    }
    Err("the verifier wrote neither /logs/verifier/reward.json nor reward.txt".to_owned())
}

/// The `reward` of the last stdout line that is a JSON object holding a
/// finite number there.
pub fn json_reward(stdout: &str) -> Option<f64> {
    stdout.lines().rev().find_map(|line| {
        let line = line.trim();
        if !line.starts_with('{') {
            return None;
        }
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        value.get("reward")?.as_f64().filter(|r| r.is_finite())
    })
}

/// The last `max` bytes of `s` (fewer, to start on a character boundary).
pub fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(code: Option<i32>, stdout: &str) -> ExecOutput {
        ExecOutput {
            exit_code: code,
            signal: None,
            timed_out: false,
            stdout: stdout.into(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            duration_ms: 1,
        }
    }

    #[test]
    fn exit_code_rewards() {
        let v = grade(RewardMode::ExitCode, &out(Some(0), ""));
        assert!((v.reward - 1.0).abs() < f64::EPSILON && v.passed);
        let v = grade(RewardMode::ExitCode, &out(Some(3), ""));
        assert!(v.reward.abs() < f64::EPSILON && !v.passed);
        assert_eq!(v.exit_code, Some(3));
        let v = grade(RewardMode::ExitCode, &out(None, ""));
        assert!(!v.passed);
    }

    #[test]
    fn json_takes_the_last_object_with_a_numeric_reward() {
        let s = "{\"reward\": 0.25}\nnoise\n{\"reward\": 0.75, \"x\": 1}\n{\"other\": 1}\n[1]\n{\"reward\":\"high\"}\n";
        assert_eq!(json_reward(s), Some(0.75));
        let v = grade(RewardMode::Json, &out(Some(1), s));
        assert!((v.reward - 0.75).abs() < f64::EPSILON && v.passed);
        let v = grade(RewardMode::Json, &out(Some(0), "all good\n"));
        assert!(v.reward.abs() < f64::EPSILON && !v.passed);
        assert!(v.reward_error.is_some());
    }

    #[test]
    fn reward_files_are_read_as_harbor_writes_them() {
        let ok = out(Some(0), "");
        let v = grade_files(&ok, Some(br#"{"reward": 0.5, "tests": 3}"#), Some(b"1"));
        assert!((v.reward - 0.5).abs() < f64::EPSILON && v.passed);
        assert_eq!(v.rewards.get("tests"), Some(&3.0));
        let v = grade_files(&ok, Some(br#"{"score": 1}"#), None);
        assert!((v.reward - 1.0).abs() < f64::EPSILON);
        let v = grade_files(&ok, None, Some(b" 1\n"));
        assert!((v.reward - 1.0).abs() < f64::EPSILON && v.rewards.is_empty());
        for (json, txt, says) in [
            (None, None, "neither"),
            (Some(&br#"{"a": 1, "b": 2}"#[..]), None, "no `reward` key"),
            (Some(&br#"{"reward": "1"}"#[..]), None, "`reward` is not"),
            (Some(&b"[1]"[..]), None, "not a JSON object"),
            (None, Some(&b"pass"[..]), "not a number"),
            (None, Some(&b"inf"[..]), "finite"),
        ] {
            let v = grade_files(&ok, json, txt);
            assert!(v.reward.abs() < f64::EPSILON && !v.passed);
            let e = v.reward_error.expect("a reward error");
            assert!(e.contains(says), "{says}: {e}");
        }
        let mut late = out(None, "");
        late.timed_out = true;
        let v = grade_files(&late, None, Some(b"1"));
        assert!(v.reward.abs() < f64::EPSILON && v.timed_out);
    }

    #[test]
    fn timeout_scores_zero() {
        let mut o = out(None, "{\"reward\":1}");
        o.timed_out = true;
        let v = grade(RewardMode::Json, &o);
        assert!(v.reward.abs() < f64::EPSILON && v.timed_out);
    }

    #[test]
    fn tails_cut_on_char_boundaries() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("abcdef", 2), "ef");
        assert_eq!(tail("aé", 1), "");
        assert_eq!(tail("aéb", 2), "b");
    }
}
