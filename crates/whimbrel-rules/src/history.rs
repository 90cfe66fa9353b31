//! An activity's bounded audit trail (`history` of `whimbrel_activity_exec`,
//! docs/tables.md): one entry per accepted transition, claim and retry.
//!
//! The trail lives on the activity item, which every transition rewrites,
//! and DynamoDB bills a write by the larger of the item's old and new size
//! in 1 KB units (docs/design.md § 2.8). Entries are therefore stored in a
//! compact form ([`StoredHistoryEntry`]: one-letter keys, the transition
//! only when it differs from the state it led to, and an event id in the
//! contract's form `(activity_exec_id)::(rest)` for this very activity
//! without its activity prefix), while [`HistoryEntry`] keeps its full
//! names everywhere else (JSON output, the simulation). Entries written by
//! earlier versions, with full keys, still read.

use serde::{Deserialize, Serialize};

use crate::contract::{ActivityState, Transition};

/// Longest event id a history entry keeps whole, bytes. A reporter may
/// write ids of up to 2,048 bytes (`ids::MAX_ID_BYTES`), and an activity
/// of 100 attempts has two reports each, so whole ids alone could pass
/// the item's 409,600 bytes (issue 42 D, docs/limits.md § 1).
pub const HISTORY_ID_BYTES: usize = 128;

/// Bytes of the start of a longer id that its kept form keeps.
const KEPT_ID_START: usize = 48;

/// `event_id` as a history entry keeps it: whole when at most
/// [`HISTORY_ID_BYTES`]; else its first 48 bytes (cut on a character
/// boundary), `#`, and the hex SHA-256 of the whole id: at most 113
/// bytes, so a kept form is kept as it is. It still names the one id it
/// came from (entries are compared in this form, [`HistoryEntry::names`]),
/// and its kind (`claim:`, `redrive:` …) still reads from its start.
pub fn kept_id(event_id: &str) -> std::borrow::Cow<'_, str> {
    use sha2::{Digest, Sha256};
    if event_id.len() <= HISTORY_ID_BYTES {
        return event_id.into();
    }
    let digest = hex::encode(Sha256::digest(event_id.as_bytes()));
    format!("{}#{digest}", cut(event_id, KEPT_ID_START)).into()
}

/// Bytes one history entry without an error takes on its item at most:
/// its keys, state, transition, time and attempt (under 128), and an
/// event id of at most [`HISTORY_ID_BYTES`].
pub const HISTORY_ENTRY_BYTES: usize = 256;

/// Bytes one entry with an error (a retried failure, a redrive) takes at
/// most: an entry, the error ([`HISTORY_ERROR_BYTES`]) and the next
/// attempt's time.
pub const HISTORY_ERROR_ENTRY_BYTES: usize = 512;

/// Entries one attempt adds at most: a launch each
/// ([`crate::config::MAX_LAUNCH_ATTEMPTS`]) or a claim, PREPARING,
/// RUNNING, a cancel request and its end or retry.
pub const ATTEMPT_HISTORY_ENTRIES: usize = crate::config::MAX_LAUNCH_ATTEMPTS as usize + 4;

/// Bytes one attempt adds to its activity's history at most: one entry
/// with an error, the rest without (2,816).
pub const ATTEMPT_HISTORY_BYTES: usize =
    HISTORY_ERROR_ENTRY_BYTES + (ATTEMPT_HISTORY_ENTRIES - 1) * HISTORY_ENTRY_BYTES;

/// Bytes the history of an activity gains at most over a generation in
/// which it may make `attempts` attempts, a redrive's entry included:
/// what its item must keep free for them (issue 42 D, docs/limits.md §
/// 5: the start of an execution and each redrive judge it).
pub fn generation_history_bytes(attempts: u32) -> usize {
    attempts as usize * ATTEMPT_HISTORY_BYTES + HISTORY_ERROR_ENTRY_BYTES
}

/// Longest error kept in a history entry, bytes (the item's `error` keeps
/// the last one whole, up to 2048 bytes).
pub const HISTORY_ERROR_BYTES: usize = 256;

/// `error` as a history entry keeps it: its first [`HISTORY_ERROR_BYTES`]
/// bytes, cut on a character boundary.
pub fn history_error(error: &str) -> String {
    cut(error, HISTORY_ERROR_BYTES).to_string()
}

/// The longest start of `text` of at most `max` bytes that ends on a
/// character boundary: every text the engine cuts (errors, reasons) is
/// cut here, so none is cut inside a character (which panics).
pub fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// One accepted transition in an activity's bounded audit trail.
/// Read from either stored form; serialized with full names (use
/// [`HistoryEntry::stored`] for what goes on the item).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "StoredHistoryEntry")]
pub struct HistoryEntry {
    /// The transition applied.
    pub transition: String,
    /// The state it led to.
    pub state: ActivityState,
    /// When it was applied, epoch seconds.
    pub at_epoch: i64,
    /// The event (or engine step) that caused it; when `own`, only the part
    /// after `(activity_exec_id)::`. Compare with [`HistoryEntry::names`],
    /// show with [`HistoryEntry::full_event_id`].
    pub event_id: String,
    /// Whether `event_id` is stored without its `(activity_exec_id)::`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own: bool,
    /// For a failed attempt that is retried (FAILED or TIMED_OUT → QUEUED):
    /// the attempt that failed, 1-based.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// For a retried attempt: its error, cut to [`HISTORY_ERROR_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For a retried attempt: when the next attempt is due, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_epoch: Option<i64>,
}

impl HistoryEntry {
    /// A plain entry: `transition` led to `state` at `at_epoch` because of
    /// `event_id`.
    pub fn new(
        transition: Transition,
        state: ActivityState,
        at_epoch: i64,
        event_id: &str,
    ) -> Self {
        HistoryEntry {
            transition: transition.as_str().into(),
            state,
            at_epoch,
            event_id: event_id.into(),
            own: false,
            attempt: None,
            error: None,
            next_attempt_epoch: None,
        }
    }

    /// The form written to the item of activity `activity_exec_id`:
    /// `{s, at}`, the event id as `r` (the part after
    /// `(activity_exec_id)::`) or else `e` (whole), plus `t` when the
    /// transition is not the state's name (a retried failure: `t` FAILED,
    /// `s` QUEUED), and the retry's `attempt`, `error`,
    /// `next_attempt_epoch`.
    pub fn stored(&self, activity_exec_id: &str) -> StoredHistoryEntry {
        let named = self.transition == self.state.as_str();
        let own = match self.own {
            true => Some(self.event_id.as_str()),
            false => own_part(activity_exec_id, &self.event_id),
        };
        StoredHistoryEntry {
            transition: (!named).then(|| self.transition.clone()),
            state: self.state,
            at_epoch: self.at_epoch,
            event_id: own.is_none().then(|| kept_id(&self.event_id).into_owned()),
            own_event_id: own.map(|o| kept_id(o).into_owned()),
            attempt: self.attempt,
            error: self.error.clone(),
            next_attempt_epoch: self.next_attempt_epoch,
        }
    }

    /// Whether `event_id` (whole, as on its row) caused this entry of
    /// activity `activity_exec_id`'s history: compared in the form the
    /// entry keeps ([`kept_id`]), whether the entry was read back or not.
    pub fn names(&self, activity_exec_id: &str, event_id: &str) -> bool {
        let mine = kept_id(&self.event_id);
        match self.own {
            true => own_part(activity_exec_id, event_id).map(kept_id) == Some(mine),
            false => kept_id(event_id) == mine,
        }
    }

    /// The event id of this entry of activity `activity_exec_id`, whole
    /// (or as kept, [`kept_id`], for an id longer than
    /// [`HISTORY_ID_BYTES`] read back from the item).
    pub fn full_event_id(&self, activity_exec_id: &str) -> String {
        match self.own {
            true => format!("{activity_exec_id}::{}", self.event_id),
            false => self.event_id.clone(),
        }
    }
}

/// The part of `event_id` after `(activity_exec_id)::`, when it has that
/// form (contract: an event id is `(activity_exec_id)::(uuid)`).
fn own_part<'a>(activity_exec_id: &str, event_id: &'a str) -> Option<&'a str> {
    event_id.strip_prefix(activity_exec_id)?.strip_prefix("::")
}

/// A history entry as stored on the item (see the module docs). Reads the
/// full names of earlier versions too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredHistoryEntry {
    /// `t`: the transition, when it is not the name of `state`.
    #[serde(
        rename = "t",
        alias = "transition",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub transition: Option<String>,
    /// `s`: the state it led to.
    #[serde(rename = "s", alias = "state")]
    pub state: ActivityState,
    /// `at`: when, epoch seconds.
    #[serde(rename = "at", alias = "at_epoch")]
    pub at_epoch: i64,
    /// `e`: the event (or engine step) that caused it, whole; absent when
    /// `r` is there.
    #[serde(
        rename = "e",
        alias = "event_id",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub event_id: Option<String>,
    /// `r`: an event id of this activity's own form, without its
    /// `(activity_exec_id)::`.
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    pub own_event_id: Option<String>,
    /// The attempt that failed (a retried failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Its error, cut to [`HISTORY_ERROR_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the next attempt is due, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_epoch: Option<i64>,
}

impl From<StoredHistoryEntry> for HistoryEntry {
    fn from(s: StoredHistoryEntry) -> Self {
        HistoryEntry {
            transition: s.transition.unwrap_or_else(|| s.state.as_str().into()),
            state: s.state,
            at_epoch: s.at_epoch,
            own: s.own_event_id.is_some(),
            event_id: s.own_event_id.or(s.event_id).unwrap_or_default(),
            attempt: s.attempt,
            error: s.error,
            next_attempt_epoch: s.next_attempt_epoch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn retried() -> HistoryEntry {
        HistoryEntry {
            attempt: Some(1),
            error: Some("boom".into()),
            next_attempt_epoch: Some(130),
            ..HistoryEntry::new(Transition::Failed, ActivityState::Queued, 100, "a::e")
        }
    }

    /// Issue 42 D: an entry keeps at most 128 bytes of its event id, and
    /// a long id kept still names that id alone, read back or not.
    #[test]
    fn a_long_event_id_is_kept_as_its_start_and_digest_and_still_names_it() {
        let exact = format!("a::{}", "x".repeat(HISTORY_ID_BYTES - 3));
        assert_eq!(kept_id(&exact), exact.as_str(), "at the bound: whole");
        let long = format!("redrive:{}é{}", "y".repeat(45), "z".repeat(2_000));
        let kept = kept_id(&long).into_owned();
        assert!(
            kept.len() <= HISTORY_ID_BYTES && kept.starts_with("redrive:"),
            "{kept}"
        );
        assert_eq!(
            kept_id(&kept),
            kept.as_str(),
            "a kept form is kept as it is"
        );
        let entry = HistoryEntry::new(Transition::Queued, ActivityState::Requested, 1, &long);
        let stored = serde_json::to_value(entry.stored("a")).unwrap();
        let back: HistoryEntry = serde_json::from_value(stored).unwrap();
        assert_eq!(back.event_id, kept);
        for e in [&entry, &back] {
            assert!(e.names("a", &long));
            assert!(!e.names("a", &format!("{long}!")));
        }
        // The own form: the part after `a::` is kept the same way.
        let own = format!("a::{}", "w".repeat(2_040));
        let entry = HistoryEntry::new(Transition::Running, ActivityState::Running, 1, &own);
        let back: HistoryEntry =
            serde_json::from_value(serde_json::to_value(entry.stored("a")).unwrap()).unwrap();
        assert!(back.own && back.event_id.len() <= HISTORY_ID_BYTES);
        assert!(back.names("a", &own) && !back.names("a", &format!("{own}w")));
    }

    #[test]
    fn the_stored_form_is_compact_and_reads_back() {
        let plain = HistoryEntry::new(Transition::Running, ActivityState::Running, 100, "a::e");
        let stored = serde_json::to_value(plain.stored("a")).unwrap();
        assert_eq!(stored, json!({"s": "RUNNING", "at": 100, "r": "e"}));
        let back: HistoryEntry = serde_json::from_value(stored).unwrap();
        assert!(back.own && back.names("a", "a::e"));
        assert!(!back.names("a", "e") && !back.names("a", "b::e"));
        assert_eq!(back.full_event_id("a"), "a::e");
        // Stored again (a put of the whole item), it stays the same.
        assert_eq!(back.stored("a"), plain.stored("a"));

        // Another activity's id, or an engine step's, is kept whole.
        let stored = serde_json::to_value(plain.stored("a:")).unwrap();
        assert_eq!(stored, json!({"s": "RUNNING", "at": 100, "e": "a::e"}));
        let back: HistoryEntry = serde_json::from_value(stored).unwrap();
        assert_eq!(back, plain);
        assert!(back.names("a:", "a::e"));

        let stored = serde_json::to_value(retried().stored("b")).unwrap();
        assert_eq!(stored["t"], "FAILED");
        assert_eq!(stored["s"], "QUEUED");
        let back: HistoryEntry = serde_json::from_value(stored).unwrap();
        assert_eq!(back, retried());
    }

    #[test]
    fn entries_of_earlier_versions_still_read() {
        let old = json!({"transition": "FAILED", "state": "QUEUED", "at_epoch": 100,
            "event_id": "a::e", "attempt": 1, "error": "boom", "next_attempt_epoch": 130});
        let back: HistoryEntry = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(back, retried());
        // Full names are what JSON output shows.
        assert_eq!(serde_json::to_value(&back).unwrap(), old);
    }
}
