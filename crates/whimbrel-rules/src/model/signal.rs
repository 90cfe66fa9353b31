//! A row of `whimbrel_signal` (design.md § 9.2): a named signal, with a
//! JSON input, sent to one workflow execution by inserting one row. The
//! row is the truth: a signal wait of that name completes with the
//! earliest one ([`earliest`]), whether the row came before the node
//! waited or after. A duplicate `signal_id` is the same key, so a second
//! put overwrites the row (a MODIFY record, which the handler skips and
//! counts as `RowsOverwritten`): a signal is applied once.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plan::MAX_NAME_LEN;

/// Largest signal `input`, bytes of JSON: the output of the node it
/// completes, which the engine keeps on an output row when large
/// (design.md § 2.8), within DynamoDB's 400 KB item.
pub const MAX_SIGNAL_INPUT_BYTES: usize = 256 * 1024;

/// Longest `signal_id`, characters.
pub const MAX_SIGNAL_ID_LEN: usize = 256;

/// One signal row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalRow {
    /// Hash key: the workflow execution signalled.
    pub workflow_exec_id: String,
    /// Range key, `(name)#(signal_id)` ([`signal_key`]), so a signal wait
    /// queries its name's signals with `begins_with`.
    pub signal_key: String,
    /// The signal's name, as a plan's `signal` node names it:
    /// `[A-Za-z0-9_.-]`, 1..=[`MAX_NAME_LEN`] characters.
    pub name: String,
    /// The sender's id for it, unique per signal (dedupe): 1..=
    /// [`MAX_SIGNAL_ID_LEN`] characters, no `#`.
    pub signal_id: String,
    /// The payload, any JSON: the output of the node it completes
    /// (`null` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// When it was sent, epoch seconds (the sender's clock); orders two
    /// signals of one name (absent sorts first, then by `signal_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_epoch: Option<i64>,
    /// When DynamoDB TTL may delete the row, epoch seconds; absent = kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_epoch: Option<i64>,
}

/// The range key of signal `signal_id` of name `name`: `(name)#(signal_id)`.
pub fn signal_key(name: &str, signal_id: &str) -> String {
    format!("{name}#{signal_id}")
}

/// The range key prefix of every signal named `name`: `(name)#`.
pub fn signal_key_prefix(name: &str) -> String {
    format!("{name}#")
}

/// The range key of the engine's copy of signal `signal_key` on
/// `whimbrel_decision` (hash key the workflow exec id):
/// `signal#(signal_key)`; with [`signal_key_prefix`], the prefix of a
/// name's copies, and with `""` of all. The engine keeps a copy of each
/// signal when it first applies it (its INSERT record), and delivers only
/// its copies: a signaller's later put over the row changes nothing
/// (issue 42 B.3).
pub fn signal_copy_log_key(signal_key: &str) -> String {
    format!("signal#{signal_key}")
}

impl SignalRow {
    /// A signal for `workflow_exec_id`, its key derived.
    pub fn new(workflow_exec_id: &str, name: &str, signal_id: &str, input: Option<Value>) -> Self {
        SignalRow {
            workflow_exec_id: workflow_exec_id.into(),
            signal_key: signal_key(name, signal_id),
            name: name.into(),
            signal_id: signal_id.into(),
            input,
            when_epoch: None,
            expires_at_epoch: None,
        }
    }

    /// Why the row can never be delivered, if it cannot: a bad name or id,
    /// a key that is not `(name)#(signal_id)`, an input too large.
    pub fn invalid(&self) -> Option<String> {
        let name_ok = (1..=MAX_NAME_LEN).contains(&self.name.len())
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !name_ok {
            return Some(format!(
                "signal name {:?} is invalid: use 1-{MAX_NAME_LEN} characters of A-Z a-z 0-9 _ . -",
                self.name
            ));
        }
        if self.signal_id.is_empty()
            || self.signal_id.len() > MAX_SIGNAL_ID_LEN
            || self.signal_id.contains('#')
        {
            return Some(format!(
                "signal_id {:?} is invalid: 1-{MAX_SIGNAL_ID_LEN} characters, no '#'",
                self.signal_id
            ));
        }
        if self.signal_key != signal_key(&self.name, &self.signal_id) {
            return Some(format!(
                "signal_key {:?} is not (name)#(signal_id) = {:?}",
                self.signal_key,
                signal_key(&self.name, &self.signal_id)
            ));
        }
        let size = self.input.as_ref().map_or(0, |v| v.to_string().len());
        (size > MAX_SIGNAL_INPUT_BYTES)
            .then(|| {
                format!(
                    "signal input is {size} bytes; at most {MAX_SIGNAL_INPUT_BYTES} are allowed"
                )
            })
            .or_else(|| {
                (self.input.as_ref()).and_then(|v| crate::payloads::too_deep("signal input", v))
            })
    }

    /// The order in which signals are delivered and shown: by
    /// `when_epoch`, then `signal_key` (within a name, `signal_id`). An
    /// undated row sorts last: a signaller cannot put a row ahead of the
    /// dated ones by leaving its date out (issue 42 B.3).
    pub fn order(&self) -> (i64, &str) {
        (self.when_epoch.unwrap_or(i64::MAX), &self.signal_key)
    }
}

/// Signal rows the engine reads in one look: of one name, when a wait
/// looks for the signal it takes; of every name, when an episodic
/// execution takes the signals sent before its first answer. The first
/// rows in `signal_key` order: more rows of a name than this are never
/// read, so a flood of rows (each up to [`MAX_SIGNAL_INPUT_BYTES`]) costs
/// a look at most 100 rows, about 26 MB, in a 256 MB function, and harms
/// only the execution it was sent to (issue 42 B.4; docs/limits.md § 3).
pub const MAX_SIGNALS_READ: usize = 100;

/// Signals an execution keeps, at most: every valid signal the engine
/// applies to it counts once, whatever its name; the next is refused with
/// the reason and never delivered (issue 42 B.4; docs/limits.md § 3). As
/// many as one look reads ([`MAX_SIGNALS_READ`]), so a look sees every
/// signal kept.
pub const MAX_SIGNALS_PER_EXECUTION: usize = MAX_SIGNALS_READ;

#[cfg(test)]
mod tests {
    use super::*;

    /// The signal a wait takes among `rows`: the first valid one in
    /// [`SignalRow::order`], as the engine's look takes it.
    fn earliest(rows: &[SignalRow]) -> Option<&SignalRow> {
        rows.iter()
            .filter(|r| r.invalid().is_none())
            .min_by(|a, b| a.order().cmp(&b.order()))
    }

    /// docs/limits.md § 3: a signal's name at 128 bytes and not 129, its
    /// id at 256 and not 257, its input at 262,144 bytes of JSON and not
    /// one more.
    #[test]
    fn a_signals_name_id_and_input_are_accepted_at_their_limits_and_refused_past_them() {
        let name = |n: usize| "n".repeat(n);
        assert_eq!(
            SignalRow::new("w::1", &name(128), "i", None).invalid(),
            None
        );
        let why = SignalRow::new("w::1", &name(129), "i", None)
            .invalid()
            .unwrap();
        assert!(why.starts_with("signal name"), "{why}");
        let id = |n: usize| "i".repeat(n);
        assert_eq!(
            SignalRow::new("w::1", "go", &id(MAX_SIGNAL_ID_LEN), None).invalid(),
            None
        );
        let why = SignalRow::new("w::1", "go", &id(MAX_SIGNAL_ID_LEN + 1), None)
            .invalid()
            .unwrap();
        assert!(why.starts_with("signal_id"), "{why}");
        // A string of n - 2 characters is n bytes of JSON.
        let input = |n: usize| Some(serde_json::json!("x".repeat(n - 2)));
        let at = SignalRow::new("w::1", "go", "i", input(MAX_SIGNAL_INPUT_BYTES));
        assert_eq!(at.invalid(), None);
        let past = SignalRow::new("w::1", "go", "i", input(MAX_SIGNAL_INPUT_BYTES + 1));
        assert_eq!(
            past.invalid().unwrap(),
            "signal input is 262145 bytes; at most 262144 are allowed"
        );
    }

    /// Issue 42 D (docs/limits.md § 3): a signal's input nests at most 24
    /// levels, as every input does.
    #[test]
    fn a_signal_input_nested_past_the_limit_is_invalid() {
        use crate::payloads::MAX_JSON_DEPTH;
        let nested =
            |d: usize| (1..d).fold(serde_json::json!({"a": 1}), |v, _| serde_json::json!([v]));
        let row = |d| SignalRow::new("w::1", "go", "s-1", Some(nested(d)));
        assert_eq!(row(MAX_JSON_DEPTH).invalid(), None);
        let why = row(MAX_JSON_DEPTH + 1).invalid().expect("invalid");
        assert_eq!(why, "signal input nests 25 levels; at most 24 are allowed");
    }

    #[test]
    fn a_row_is_checked_and_the_earliest_valid_wins() {
        let mut a = SignalRow::new("wf", "approve", "b", Some(serde_json::json!({"ok": 1})));
        assert_eq!(a.signal_key, "approve#b");
        assert_eq!(a.invalid(), None);
        a.when_epoch = Some(20);
        let mut b = SignalRow::new("wf", "approve", "a", None);
        b.when_epoch = Some(20);
        let mut c = SignalRow::new("wf", "approve", "c", None);
        c.when_epoch = Some(10);
        c.signal_key = "approve#x".into();
        assert!(c.invalid().unwrap().contains("not (name)#(signal_id)"));
        let rows = [a.clone(), b.clone(), c];
        assert_eq!(earliest(&rows).unwrap().signal_id, "a");
        // An undated row (a signaller's `when_epoch` left out) sorts last.
        let undated = SignalRow {
            when_epoch: None,
            ..SignalRow::new("wf", "approve", "0", None)
        };
        let rows = [undated.clone(), a.clone(), b.clone()];
        assert_eq!(earliest(&rows).unwrap().signal_id, "a");
        assert_eq!(earliest(&[undated]).unwrap().signal_id, "0");
        assert!(SignalRow::new("wf", "bad name", "x", None)
            .invalid()
            .is_some());
        assert!(SignalRow::new("wf", "ok", "x#y", None).invalid().is_some());
        let big = serde_json::json!("x".repeat(MAX_SIGNAL_INPUT_BYTES));
        assert!(SignalRow::new("wf", "ok", "x", Some(big))
            .invalid()
            .is_some());
    }
}
