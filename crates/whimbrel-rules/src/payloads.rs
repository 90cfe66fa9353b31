//! Where a payload is kept: on the activity item when it is small, on a
//! write-once row otherwise (design.md § 2.8). The rules of it, pure; the
//! engine's `payloads` module reads them back.

use std::collections::HashMap;

use serde_json::Value;

use crate::decide::Details;
use crate::ids;
use crate::model::{ActivityEvent, InputRow, WorkflowExec};
use crate::plan::Plan;

/// Largest payload (input or output), in bytes of compact JSON, kept on the
/// activity item itself; larger ones are kept on a write-once row.
pub const INLINE_PAYLOAD_BYTES: usize = 256;

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

/// [`output_by_reference`] for a row known to be stored (`event_id`). Pure.
pub fn output_by_row(details: &mut Details, event_id: &str) {
    if details.output.as_ref().is_some_and(|v| !inline(v)) {
        details.output = None;
        details.output_event_id = Some(event_id.to_string());
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
}
