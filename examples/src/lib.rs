//! Shared code of the example workflows: word splitting and counting (pure),
//! and the plan the wordcount decider returns.

use std::collections::HashMap;

use serde_json::{json, Value};
use whimbrel_core::plan::{Plan, PlannedActivity, SHAPE_VERSION};

/// The text counted when a request has no input: this project's README.
pub const DEFAULT_TEXT: &str = include_str!("../../README.md");

/// Default number of parallel `count` activities.
pub const DEFAULT_CHUNKS: usize = 8;

/// Lower-cased words of `text` (letters, digits and apostrophes).
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\'').to_lowercase())
        .filter(|w| !w.is_empty())
}

/// Word counts of `text`.
pub fn count(text: &str) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for w in words(text) {
        *m.entry(w).or_default() += 1;
    }
    m
}

/// Split `text` into `n` chunks of about equal size, at whitespace.
pub fn split(text: &str, n: usize) -> Vec<String> {
    let n = n.max(1);
    let target = text.len().div_ceil(n).max(1);
    let mut chunks = Vec::with_capacity(n);
    let mut cur = String::new();
    for piece in text.split_inclusive(char::is_whitespace) {
        cur.push_str(piece);
        if cur.len() >= target && chunks.len() + 1 < n {
            chunks.push(std::mem::take(&mut cur));
        }
    }
    chunks.push(cur);
    while chunks.len() < n {
        chunks.push(String::new());
    }
    chunks
}

/// The top `k` words of merged counts, most frequent first, ties by word.
pub fn top(counts: &HashMap<String, u64>, k: usize) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = counts.iter().map(|(w, c)| (w.clone(), *c)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(k);
    v
}

/// The wordcount plan for a request input `{"text"?, "chunks"?, "fail_chunk"?}`:
/// `chunks` parallel `count-i` activities (heartbeats on) and one `merge`
/// that depends on all of them. `count_lambda` / `merge_lambda` name the
/// functions.
pub fn wordcount_plan(input: &Value, count_lambda: &str, merge_lambda: &str) -> Plan {
    let text = input["text"].as_str().unwrap_or(DEFAULT_TEXT);
    let n = input["chunks"]
        .as_u64()
        .map_or(DEFAULT_CHUNKS, |c| c.clamp(1, 500) as usize);
    let fail = input["fail_chunk"].as_u64();
    let mut activities: Vec<PlannedActivity> = split(text, n)
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| PlannedActivity {
            name: format!("count-{i}"),
            lambda: count_lambda.into(),
            depends_on: vec![],
            heartbeat_timeout_seconds: Some(30),
            heartbeat_enabled: None,
            timeout_seconds: Some(300),
            input: Some(json!({"text": chunk, "fail": fail == Some(i as u64)})),
            ..PlannedActivity::default()
        })
        .collect();
    let all: Vec<String> = activities.iter().map(|a| a.name.clone()).collect();
    activities.push(PlannedActivity {
        name: "merge".into(),
        lambda: merge_lambda.into(),
        depends_on: all,
        heartbeat_timeout_seconds: None,
        heartbeat_enabled: None,
        timeout_seconds: Some(120),
        input: Some(json!({"top": 20})),
        ..PlannedActivity::default()
    });
    // Every activity reports through the helper, with its attempt token:
    // reports from a stale attempt or without a token are refused.
    Plan {
        version: SHAPE_VERSION,
        activities,
        require_tokens: Some(true),
        retry: None,
        execution_timeout_seconds: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_every_word() {
        let text = "the quick brown fox jumps over the lazy dog ".repeat(50);
        let chunks = split(&text, 8);
        assert_eq!(chunks.len(), 8);
        assert_eq!(chunks.concat(), text);
        let total: u64 = chunks.iter().map(|c| count(c).values().sum::<u64>()).sum();
        assert_eq!(total, 450);
    }

    #[test]
    fn plan_is_valid_with_fan_in() {
        let p = wordcount_plan(&Value::Null, "c", "m");
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(p.activities.len(), DEFAULT_CHUNKS + 1);
        assert_eq!(
            p.activities.last().unwrap().depends_on.len(),
            DEFAULT_CHUNKS
        );
    }

    #[test]
    fn top_orders_by_count_then_word() {
        let c = count("b a b c a b");
        assert_eq!(top(&c, 2), vec![("b".into(), 3), ("a".into(), 2)]);
    }
}
