//! Where a payload is kept: on the activity item when it is small, on a
//! write-once row otherwise (design.md § 2.8). The rules of it, pure; the
//! engine's `payloads` module reads them back.

use std::collections::HashMap;

use serde_json::Value;

use crate::decide::Details;
use crate::ids;
use crate::model::{ActivityEvent, ActivityExec, InputRow, OutputRow, WorkflowExec};
use crate::plan::Plan;

/// Largest payload (input or output), in bytes of compact JSON, kept on the
/// activity item itself; larger ones are kept on a write-once row.
pub const INLINE_PAYLOAD_BYTES: usize = 256;

/// Levels of maps and lists an input may nest, at most (a workflow's,
/// an activity's in its plan, a signal's): DynamoDB stores 32 levels, and
/// the deepest place an input is kept, a registered plan, puts it 4
/// levels down; 24 leaves room (docs/limits.md § 2).
pub const MAX_JSON_DEPTH: usize = 24;

/// Levels of maps and lists `v` nests: 0 for a scalar, 1 for `{"a": 1}`.
pub fn json_depth(v: &Value) -> usize {
    match v {
        Value::Array(xs) => 1 + xs.iter().map(json_depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Why input `v`, named `what` ("workflow input", "input of activity
/// \"x\"", "signal input"), is refused for its nesting, or `None`: one
/// rule for every input the API admits ([`MAX_JSON_DEPTH`]).
pub fn too_deep(what: &str, v: &Value) -> Option<String> {
    let depth = json_depth(v);
    (depth > MAX_JSON_DEPTH)
        .then(|| format!("{what} nests {depth} levels; at most {MAX_JSON_DEPTH} are allowed"))
}

/// Whether `v` is kept on the activity item (its JSON is at most
/// [`INLINE_PAYLOAD_BYTES`]). Pure.
pub fn inline(v: &Value) -> bool {
    json_len(v) <= INLINE_PAYLOAD_BYTES
}

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(usize::MAX, |b| b.len())
}

/// The key of the input row for `input` in workflow exec `workflow_exec_id`,
/// `None` when the input stays inline (or there is none). Pure.
pub fn input_ref(workflow_exec_id: &str, input: Option<&Value>) -> Option<String> {
    let input = input.filter(|v| !inline(v))?;
    let json = serde_json::to_vec(input).ok()?;
    Some(ids::input_row_key(workflow_exec_id, &json))
}

/// The input rows a plan's activities need (one per distinct input over
/// [`INLINE_PAYLOAD_BYTES`]), for the start to put before the activity
/// items. Pure.
pub fn input_rows(wf: &WorkflowExec, plan: &Plan) -> Vec<InputRow> {
    let mut rows: HashMap<String, InputRow> = HashMap::new();
    for a in &plan.activities {
        if let Some(key) = input_ref(&wf.workflow_exec_id, a.input.as_ref()) {
            rows.entry(key.clone()).or_insert_with(|| InputRow {
                workflow_exec_id: key,
                workflow_name: wf.workflow_name.clone(),
                input: a.input.clone().unwrap_or(Value::Null),
            });
        }
    }
    let mut rows: Vec<InputRow> = rows.into_values().collect();
    rows.sort_by(|a, b| a.workflow_exec_id.cmp(&b.workflow_exec_id));
    rows
}

/// The plan as stored (by the engine's plan store): each input too large for the
/// activity item replaced by its row's key (`PlannedActivity::input_ref`),
/// so it is stored once, on the row [`input_rows`] gives, not also in the
/// plan. The rows must be put before the plan. Pure.
pub fn by_reference(workflow_exec_id: &str, mut plan: Plan) -> Plan {
    for a in &mut plan.activities {
        if let Some(key) = input_ref(workflow_exec_id, a.input.as_ref()) {
            a.input = None;
            a.input_ref = Some(key);
        }
    }
    plan
}

/// Keep a large COMPLETED output of the event row `ev` by reference: the
/// details then name the row (`output_event_id`) instead of carrying the
/// output. A Full Logic API row (`manual`) keeps it inline: its client may
/// apply it without storing it. Pure.
pub fn output_by_reference(details: &mut Details, ev: &ActivityEvent) {
    if ev.manual != Some(true) {
        output_by_row(details, &ev.activity_event_id);
    }
}

/// [`output_by_reference`] for a row known to be stored (`event_id`): the
/// details name the row and carry the output's digest, which the item
/// stores with it. Pure.
pub fn output_by_row(details: &mut Details, event_id: &str) {
    if let Some(v) = details.output.take_if(|v| !inline(v)) {
        details.output_sha256 = Some(output_digest(&v));
        details.output_event_id = Some(event_id.to_string());
        details.output_copy = Some(v);
    }
}

/// The output row a COMPLETED of `exec` with `details` puts before it
/// applies: for an output kept off the item, a copy the engine owns,
/// keyed by its digest. `None` for an inline output. Pure.
pub fn output_row(exec: &ActivityExec, details: &Details) -> Option<OutputRow> {
    let output = details.output_copy.clone()?;
    let digest = details.output_sha256.as_deref()?;
    Some(OutputRow {
        workflow_exec_id: ids::output_row_key(&exec.workflow_exec_id, digest),
        workflow_name: exec.workflow_name.clone(),
        output,
    })
}

/// The SHA-256 of an output, hex (64 characters), over its compact JSON
/// with object keys in sorted order (serde_json's map is ordered), so two
/// reads of one DynamoDB row give the same digest. Pure.
pub fn output_digest(v: &Value) -> String {
    use sha2::{Digest, Sha256};
    let json = serde_json::to_vec(v).unwrap_or_default();
    hex::encode(Sha256::digest(&json))
}

/// An output read back from event row `event_id` does not match the digest
/// stored when it was applied: the row was overwritten since.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("output of {activity_exec_id} on event row {event_id} was changed after it was applied (SHA-256 mismatch): not used")]
pub struct OutputMismatch {
    /// The activity whose output it is.
    pub activity_exec_id: String,
    /// The event row read.
    pub event_id: String,
}

/// `output`, read back from event row `event_id`, if it matches `expected`
/// (the item's `output_sha256`; `None` on items completed before outputs
/// were bound, which are taken as they are). Pure.
///
/// Errors: [`OutputMismatch`]: the tampered output is never returned.
pub fn check_output(
    activity_exec_id: &str,
    event_id: &str,
    expected: Option<&str>,
    output: Value,
) -> Result<Value, OutputMismatch> {
    match expected {
        Some(digest) if output_digest(&output) != digest => Err(OutputMismatch {
            activity_exec_id: activity_exec_id.to_string(),
            event_id: event_id.to_string(),
        }),
        _ => Ok(output),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn small_payloads_stay_inline_and_large_ones_get_a_content_key() {
        assert_eq!(input_ref("wf::1", Some(&json!({"k": 1}))), None);
        assert_eq!(input_ref("wf::1", None), None);
        let big = json!({"pad": "x".repeat(INLINE_PAYLOAD_BYTES)});
        let key = input_ref("wf::1", Some(&big)).unwrap();
        assert!(key.starts_with("wf::1#input#"), "{key}");
        assert_eq!(input_ref("wf::1", Some(&big)), Some(key.clone()));
        let other = json!({"pad": "y".repeat(INLINE_PAYLOAD_BYTES)});
        assert_ne!(input_ref("wf::1", Some(&other)), Some(key));
    }

    #[test]
    fn a_large_output_of_a_stored_row_is_kept_by_reference() {
        let big = json!("x".repeat(INLINE_PAYLOAD_BYTES + 1));
        let mut ev: ActivityEvent = serde_json::from_value(json!({
            "activity_event_id": "a::1::e", "activity_exec_id": "a::1",
            "transition": "COMPLETED", "output": big.clone(),
        }))
        .unwrap();
        let mut d = Details {
            output: Some(big.clone()),
            ..Details::default()
        };
        output_by_reference(&mut d, &ev);
        assert_eq!(
            (d.output, d.output_event_id.as_deref()),
            (None, Some("a::1::e"))
        );
        assert_eq!(d.output_sha256, Some(output_digest(&big)));
        ev.manual = Some(true);
        let mut d = Details {
            output: Some(big.clone()),
            ..Details::default()
        };
        output_by_reference(&mut d, &ev);
        assert_eq!((d.output, d.output_event_id), (Some(big), None));
        let mut d = Details {
            output: Some(json!({"small": true})),
            ..Details::default()
        };
        output_by_row(&mut d, "a::1::e");
        assert_eq!(d.output_event_id, None);
    }

    #[test]
    fn an_output_read_back_is_used_only_if_its_digest_matches() {
        let applied = json!({"b": [1, 2.5, "x"], "a": {"z": null, "y": true}});
        let digest = output_digest(&applied);
        assert_eq!(digest.len(), 64);
        // Same content, keys in another order (DynamoDB maps are unordered).
        let reread: Value =
            serde_json::from_str(r#"{"a": {"y": true, "z": null}, "b": [1, 2.5, "x"]}"#).unwrap();
        assert_eq!(
            check_output("a::1", "a::1::e", Some(&digest), reread.clone()),
            Ok(reread)
        );
        let forged = json!({"b": [1, 2.5, "x"], "a": {"z": null, "y": false}});
        let err = check_output("a::1", "a::1::e", Some(&digest), forged).unwrap_err();
        assert_eq!(
            (err.activity_exec_id.as_str(), err.event_id.as_str()),
            ("a::1", "a::1::e")
        );
        // An item completed before outputs were bound has no digest.
        assert_eq!(check_output("a::1", "e", None, json!(7)), Ok(json!(7)));
    }
}
