//! A worker's claim, as the engine's claim function takes it (issue 42
//! B.1; docs/workers.md § 2.2). Workers do not write activity items: they
//! ask the engine, which makes the conditional write and mints the attempt
//! token, as Step Functions' `GetActivityTask` and SWF's
//! `PollForActivityTask` do. So a worker's role holds no write to
//! `activity_exec` beyond its heartbeat, and cannot set another task's
//! token, target or input.

use serde::{Deserialize, Serialize};

use crate::plan::{LaunchPayload, MAX_NAME_LEN};

/// Task lists one claim may poll: the oldest claimable task of all of
/// them is taken.
pub const MAX_CLAIM_TASK_LISTS: usize = 10;

/// Bytes of a worker's name, as it is kept on the items it claims.
pub const MAX_WORKER_NAME_BYTES: usize = 128;

/// The claim function's input: `{"task_lists": ["resize"], "worker":
/// "host-1:4242"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRequest {
    /// 1..=[`MAX_CLAIM_TASK_LISTS`] task list names (`[A-Za-z0-9_.-]`,
    /// 1..=128 characters each), each allowed by the function's
    /// [`ClaimScope`].
    pub task_lists: Vec<String>,
    /// The worker's name, kept on the claimed item (`worker`): 1..=
    /// [`MAX_WORKER_NAME_BYTES`] bytes of printable text.
    pub worker: String,
}

/// The claim function's answer: `{"task": <launch payload> | null,
/// "lost_claims": 0}`. `task` carries the attempt token the worker then
/// heartbeats and reports with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimResponse {
    /// The claimed task's launch payload, or `null` when none was
    /// claimable.
    pub task: Option<LaunchPayload>,
    /// Candidates another worker claimed first during this poll.
    #[serde(default)]
    pub lost_claims: u64,
}

/// The task lists a claim function serves: the deployment's `TaskLists`
/// parameter (`WHIMBREL_CLAIM_TASK_LISTS`, comma-separated), each entry a
/// name or a pattern with IAM's wildcards (`*` any run of characters, `?`
/// one character): `images,thumbs-*`; `*` alone takes every list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimScope {
    patterns: Vec<String>,
}

impl ClaimScope {
    /// The scope of a comma-separated list of names and `prefix*`
    /// patterns (empty entries ignored; an empty list allows nothing).
    pub fn parse(list: &str) -> Self {
        let patterns = list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        ClaimScope { patterns }
    }

    /// Every task list (the Full Logic API's in-process claims).
    pub fn all() -> Self {
        ClaimScope::parse("*")
    }

    /// Whether `list` is one of the scope's lists.
    pub fn allows(&self, list: &str) -> bool {
        let list: Vec<char> = list.chars().collect();
        self.patterns.iter().any(|p| {
            let p: Vec<char> = p.chars().collect();
            wildcard_match(&p, &list)
        })
    }
}

/// IAM's string wildcards (`StringLike`): `*` matches any run of
/// characters, `?` exactly one, anything else itself.
fn wildcard_match(p: &[char], s: &[char]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some(('*', rest)) => (0..=s.len()).any(|i| wildcard_match(rest, &s[i..])),
        Some((c, rest)) => {
            s.first().is_some_and(|d| *c == '?' || c == d) && wildcard_match(rest, &s[1..])
        }
    }
}

impl ClaimRequest {
    /// Refuse a claim the function must not serve, with the reason: no
    /// list, too many, a malformed name, a list outside `scope`, or a bad
    /// worker name.
    pub fn check(&self, scope: &ClaimScope) -> Result<(), String> {
        if self.task_lists.is_empty() || self.task_lists.len() > MAX_CLAIM_TASK_LISTS {
            return Err(format!(
                "a claim names 1-{MAX_CLAIM_TASK_LISTS} task lists, not {}",
                self.task_lists.len()
            ));
        }
        for list in &self.task_lists {
            if !crate::plan::valid_name(list) {
                return Err(format!(
                    "task list {list:?} is invalid: use 1-{MAX_NAME_LEN} characters of A-Z a-z 0-9 _ . -"
                ));
            }
            if !scope.allows(list) {
                return Err(format!(
                    "task list {list:?} is not served by this claim function (WHIMBREL_CLAIM_TASK_LISTS)"
                ));
            }
        }
        let w = &self.worker;
        if w.is_empty() || w.len() > MAX_WORKER_NAME_BYTES || w.chars().any(char::is_control) {
            return Err(format!(
                "worker name must be 1-{MAX_WORKER_NAME_BYTES} bytes of printable text"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(lists: &[&str], worker: &str) -> ClaimRequest {
        ClaimRequest {
            task_lists: lists.iter().map(|s| s.to_string()).collect(),
            worker: worker.into(),
        }
    }

    #[test]
    fn a_scope_takes_names_and_prefixes() {
        let scope = ClaimScope::parse("images, thumbs-*,");
        assert!(scope.allows("images"));
        assert!(scope.allows("thumbs-small"));
        assert!(!scope.allows("images2"));
        assert!(!scope.allows("payroll"));
        assert!(!scope.allows("thumbs"));
        let inner = ClaimScope::parse("img-?-*-x");
        assert!(inner.allows("img-a-big-x"));
        assert!(!inner.allows("img-ab-big-x"));
        assert!(!inner.allows("img-a-big-y"));
        assert!(ClaimScope::all().allows("payroll"));
        assert!(!ClaimScope::parse("").allows("images"));
    }

    #[test]
    fn a_claim_is_refused_outside_its_scope_and_limits() {
        let scope = ClaimScope::parse("images,thumbs-*");
        assert_eq!(req(&["images", "thumbs-1"], "w").check(&scope), Ok(()));
        let reason = req(&["payroll"], "w").check(&scope).unwrap_err();
        assert!(reason.contains("\"payroll\" is not served"), "{reason}");
        assert!(req(&[], "w").check(&scope).is_err());
        assert!(req(&["bad list"], "w").check(&ClaimScope::all()).is_err());
        assert!(req(&["images"], "").check(&scope).is_err());
        assert!(req(&["images"], "a\nb").check(&scope).is_err());
        // At the limits, and just past them.
        let ten: Vec<String> = (0..MAX_CLAIM_TASK_LISTS).map(|i| format!("l{i}")).collect();
        let ten: Vec<&str> = ten.iter().map(String::as_str).collect();
        let name = "w".repeat(MAX_WORKER_NAME_BYTES);
        assert_eq!(req(&ten, &name).check(&ClaimScope::all()), Ok(()));
        let mut eleven = ten.clone();
        eleven.push("l10");
        assert!(req(&eleven, "w").check(&ClaimScope::all()).is_err());
        let long = "w".repeat(MAX_WORKER_NAME_BYTES + 1);
        assert!(req(&["images"], &long).check(&scope).is_err());
        let list = "l".repeat(MAX_NAME_LEN);
        assert_eq!(req(&[&list], "w").check(&ClaimScope::all()), Ok(()));
        let list = "l".repeat(MAX_NAME_LEN + 1);
        assert!(req(&[&list], "w").check(&ClaimScope::all()).is_err());
    }
}
