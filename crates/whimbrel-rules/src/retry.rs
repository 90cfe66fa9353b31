//! Retry policies: which failed attempts are tried again, and after how
//! long. Pure: the delay's jitter is drawn from a hash of the activity and
//! the attempt, so a redelivered failure computes the same delay.
//!
//! Rule (docs/contract.md, "Retries"): a FAILED or TIMED_OUT attempt with
//! attempts left, whose error name the policy retries, sends the activity
//! back to QUEUED for attempt + 1 after [`RetryPolicy::delay_seconds`]; only
//! the last attempt's failure is terminal. The error name is the part of
//! the `error` before the first `:`; a timeout's name is `TIMED_OUT`.

use serde::{Deserialize, Serialize};

/// Most attempts a policy may allow (each adds a few history entries to
/// the activity's item, which must stay far below 400 KB).
pub const MAX_ATTEMPTS: u32 = 100;

/// Longest delay between two attempts, seconds (one day).
pub const MAX_DELAY_SECONDS: i64 = 24 * 3600;

/// The error name of a timeout (contract: TIMED_OUT).
pub const TIMED_OUT: &str = "TIMED_OUT";

/// How the delay is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Jitter {
    /// The computed delay exactly.
    #[default]
    None,
    /// Uniform in 0..=computed delay (AWS "full jitter").
    Full,
}

/// A retry policy: on a plan (the workflow's default) or on one activity
/// (overriding the default field by field). Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, 1..=[`MAX_ATTEMPTS`]; default 1 (no retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Delay before the second attempt, seconds, ≥ 0; default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<i64>,
    /// Factor applied to the delay after each attempt, ≥ 1.0; default 2.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_rate: Option<f64>,
    /// Cap on the delay, seconds, ≤ [`MAX_DELAY_SECONDS`]; default that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_seconds: Option<i64>,
    /// `NONE` (default) or `FULL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<Jitter>,
    /// Retry only these error names (default: every name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_on: Option<Vec<String>>,
    /// Never retry these error names (checked first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_retry_on: Option<Vec<String>>,
}

/// Why a retry policy is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("retry policy: {0}")]
pub struct PolicyError(pub String);

/// The error name of an `error` text: the part before the first `:`,
/// trimmed; the whole text when it has no `:`.
pub fn error_name(error: &str) -> &str {
    error.split(':').next().unwrap_or("").trim()
}

impl RetryPolicy {
    /// Check the bounds of every field given.
    ///
    /// Errors: the first field out of bounds, named.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if let Some(m) = self.max_attempts {
            if !(1..=MAX_ATTEMPTS).contains(&m) {
                return Err(PolicyError(format!(
                    "max_attempts {m} is outside 1..={MAX_ATTEMPTS}"
                )));
            }
        }
        if let Some(i) = self.interval_seconds {
            if !(0..=MAX_DELAY_SECONDS).contains(&i) {
                return Err(PolicyError(format!(
                    "interval_seconds {i} is outside 0..={MAX_DELAY_SECONDS}"
                )));
            }
        }
        if let Some(r) = self.backoff_rate {
            if !(1.0..=100.0).contains(&r) {
                return Err(PolicyError(format!(
                    "backoff_rate {r} is outside 1.0..=100.0"
                )));
            }
        }
        if let Some(d) = self.max_delay_seconds {
            if !(0..=MAX_DELAY_SECONDS).contains(&d) {
                return Err(PolicyError(format!(
                    "max_delay_seconds {d} is outside 0..={MAX_DELAY_SECONDS}"
                )));
            }
        }
        for list in [&self.retry_on, &self.no_retry_on].into_iter().flatten() {
            if list.iter().any(|n| n.trim().is_empty() || n.contains(':')) {
                return Err(PolicyError(
                    "error names in retry_on / no_retry_on must be non-empty and have no ':'"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// This policy with the unset fields taken from `defaults` (the plan's).
    pub fn over(&self, defaults: &RetryPolicy) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts.or(defaults.max_attempts),
            interval_seconds: self.interval_seconds.or(defaults.interval_seconds),
            backoff_rate: self.backoff_rate.or(defaults.backoff_rate),
            max_delay_seconds: self.max_delay_seconds.or(defaults.max_delay_seconds),
            jitter: self.jitter.or(defaults.jitter),
            retry_on: self.retry_on.clone().or_else(|| defaults.retry_on.clone()),
            no_retry_on: self
                .no_retry_on
                .clone()
                .or_else(|| defaults.no_retry_on.clone()),
        }
    }

    /// Attempts in all (default 1).
    pub fn attempts(&self) -> u32 {
        self.max_attempts.unwrap_or(1)
    }

    /// True when an attempt that failed with `error_name` may be retried
    /// (attempts aside): not in `no_retry_on`, and in `retry_on` if given.
    pub fn retries(&self, error_name: &str) -> bool {
        let listed =
            |l: &Option<Vec<String>>| l.as_ref().map(|l| l.iter().any(|n| n == error_name));
        listed(&self.no_retry_on) != Some(true) && listed(&self.retry_on) != Some(false)
    }

    /// The delay before attempt `failed + 1`, seconds, after attempt
    /// `failed` (1-based) failed: `interval × rate^(failed − 1)`, capped by
    /// `max_delay_seconds`, then with `FULL` jitter scaled by `unit`
    /// (0.0..=1.0, from [`jitter_unit`]).
    pub fn delay_seconds(&self, failed: u32, unit: f64) -> i64 {
        let interval = self.interval_seconds.unwrap_or(1) as f64;
        let rate = self.backoff_rate.unwrap_or(2.0);
        let cap = self.max_delay_seconds.unwrap_or(MAX_DELAY_SECONDS) as f64;
        let exp = i32::try_from(failed.saturating_sub(1)).unwrap_or(i32::MAX);
        let delay = (interval * rate.powi(exp)).min(cap);
        let delay = match self.jitter.unwrap_or_default() {
            Jitter::None => delay,
            Jitter::Full => delay * unit.clamp(0.0, 1.0),
        };
        delay.round() as i64
    }
}

/// A number in 0.0..1.0 drawn from `activity_exec_id` and `attempt`: the
/// same failure always gets the same jitter (a redelivery agrees).
pub fn jitter_unit(activity_exec_id: &str, attempt: u32) -> f64 {
    let h = uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_OID,
        format!("{activity_exec_id}#{attempt}").as_bytes(),
    );
    (h.as_u128() >> 75) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: &str) -> RetryPolicy {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn error_names() {
        assert_eq!(error_name("Throttled: slow down"), "Throttled");
        assert_eq!(error_name("plain text"), "plain text");
        assert_eq!(error_name(""), "");
    }

    #[test]
    fn exponential_backoff_capped() {
        let p = policy(
            r#"{"max_attempts":5,"interval_seconds":2,"backoff_rate":3.0,"max_delay_seconds":10}"#,
        );
        let delays: Vec<i64> = (1..=4).map(|a| p.delay_seconds(a, 0.5)).collect();
        assert_eq!(delays, vec![2, 6, 10, 10]);
        assert_eq!(RetryPolicy::default().delay_seconds(3, 0.5), 4);
    }

    #[test]
    fn full_jitter_stays_within_the_delay_and_is_stable() {
        let p = policy(r#"{"interval_seconds":100,"jitter":"FULL"}"#);
        let u = jitter_unit("a::x", 2);
        assert_eq!(u, jitter_unit("a::x", 2));
        assert_ne!(u, jitter_unit("a::x", 3));
        assert!((0.0..1.0).contains(&u));
        let d = p.delay_seconds(1, u);
        assert!((0..=100).contains(&d), "{d}");
    }

    #[test]
    fn retry_on_and_no_retry_on() {
        let p = policy(r#"{"retry_on":["Busy","TIMED_OUT"],"no_retry_on":["Busy"]}"#);
        assert!(!p.retries("Busy"));
        assert!(p.retries("TIMED_OUT"));
        assert!(!p.retries("Other"));
        assert!(RetryPolicy::default().retries("anything"));
    }

    #[test]
    fn activity_fields_override_the_plan_default() {
        let plan = policy(r#"{"max_attempts":3,"interval_seconds":5}"#);
        let act = policy(r#"{"interval_seconds":1,"no_retry_on":["Bad"]}"#);
        let p = act.over(&plan);
        assert_eq!(p.attempts(), 3);
        assert_eq!(p.interval_seconds, Some(1));
        assert_eq!(p.no_retry_on, Some(vec!["Bad".to_string()]));
    }

    #[test]
    fn bounds() {
        for bad in [
            r#"{"max_attempts":0}"#,
            r#"{"max_attempts":101}"#,
            r#"{"interval_seconds":-1}"#,
            r#"{"backoff_rate":0.5}"#,
            r#"{"max_delay_seconds":100000}"#,
            r#"{"retry_on":["a:b"]}"#,
        ] {
            assert!(policy(bad).validate().is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<RetryPolicy>(r#"{"maxAttempts":2}"#).is_err());
        assert!(serde_json::from_str::<RetryPolicy>(r#"{"jitter":"HALF"}"#).is_err());
    }
}
