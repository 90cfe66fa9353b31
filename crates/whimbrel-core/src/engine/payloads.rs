//! Payloads off the activity item (issue 7, design.md § 2.8).
//!
//! DynamoDB bills an update by the larger of the item's old and new size,
//! 1 write unit per KB, and an activity item is written about six times
//! (claim, RUNNING, COMPLETED, settle...). A 1 KB input or output kept on it
//! costs a write unit on each of those writes. So a payload whose JSON is
//! over [`INLINE_PAYLOAD_BYTES`] lives on a write-once row, and the item
//! keeps only the row's key:
//! * an **input** on an [`InputRow`] of `whimbrel_workflow_plan`, put by
//!   the start before the plan (content-addressed, so every put of it
//!   writes the same content), named by `input_ref` on the stored plan
//!   ([`by_reference`]: the input is stored once) and on the item;
//! * an **output** on the COMPLETED event row that reported it (already
//!   written, write-once), named by `output_event_id`. A Full Logic API
//!   report (`manual`), which may have no row, keeps its output inline.
//!
//! Readers get payloads through [`Engine::input_of`] and [`outputs_of`].

use std::collections::HashMap;

use serde_json::Value;

use super::decide::Details;
use super::{Engine, EngineError};
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{ActivityEvent, ActivityExec, InputRow, WorkflowExec};
use crate::plan::Plan;
use crate::store::{s, Item, Store, StoreError};

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

/// The plan as stored (`engine::plans`): each input too large for the
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

/// The outputs of `execs` by activity name: the inline ones, and those kept
/// on event rows, read with BatchGetItem. `null` for an activity without
/// an output.
///
/// Errors: the store's; a referenced row that is gone (expired by the
/// event table's TTL, `RowRetentionDays`) is [`StoreError::Transient`],
/// never a silent `null`.
pub async fn outputs_of(
    store: &Store,
    execs: Vec<ActivityExec>,
) -> Result<HashMap<String, Value>, StoreError> {
    let mut out = HashMap::new();
    let mut keys = Vec::new();
    let mut name_of = HashMap::new();
    for a in execs {
        match a.output_event_id {
            Some(row) => {
                keys.push(event_key(&row, &a.activity_exec_id));
                name_of.insert(row, a.activity_name);
            }
            None => {
                out.insert(a.activity_name, a.output.unwrap_or(Value::Null));
            }
        }
    }
    if keys.is_empty() {
        return Ok(out);
    }
    #[derive(serde::Deserialize)]
    struct Row {
        activity_event_id: String,
        #[serde(default)]
        output: Option<Value>,
    }
    let table = store.tables().activity_event();
    for row in store.batch_get::<Row>(&table, keys).await? {
        if let Some(name) = name_of.remove(&row.activity_event_id) {
            out.insert(name, row.output.unwrap_or(Value::Null));
        }
    }
    if let Some((row, name)) = name_of.into_iter().next() {
        return Err(StoreError::Transient {
            op: "BatchGetItem",
            message: format!("the output of {name} is on event row {row}, which is gone"),
        });
    }
    Ok(out)
}

/// The attributes [`output_of_row`] reads of an event row (keys first):
/// the IAM `dynamodb:Attributes` of an activity role's GetItem on the
/// event table (template.yaml `ReadPrerequisiteOutputs`).
pub const OUTPUT_ROW_READS: [&str; 3] = ["activity_event_id", "activity_exec_id", "output"];

/// The output kept on event row `event_id` of activity `activity_exec_id`
/// (one GetItem of [`OUTPUT_ROW_READS`]): for a reader that is not the
/// engine, such as the activity helper.
///
/// Errors: the store's; a row that is gone is [`StoreError::Transient`].
pub async fn output_of_row(
    store: &Store,
    activity_exec_id: &str,
    event_id: &str,
) -> Result<Value, StoreError> {
    #[derive(serde::Deserialize)]
    struct Row {
        #[serde(default)]
        output: Option<Value>,
    }
    let table = store.tables().activity_event();
    let row: Option<Row> = store
        .get_projected(
            &table,
            event_key(event_id, activity_exec_id),
            &OUTPUT_ROW_READS,
        )
        .await?;
    let row = row.ok_or_else(|| StoreError::Transient {
        op: "GetItem",
        message: format!(
            "the output of {activity_exec_id} is on event row {event_id}, which is gone"
        ),
    })?;
    Ok(row.output.unwrap_or(Value::Null))
}

fn event_key(event_id: &str, activity_exec_id: &str) -> Item {
    HashMap::from([
        ("activity_event_id".to_string(), s(event_id)),
        ("activity_exec_id".to_string(), s(activity_exec_id)),
    ])
}

impl<L: Launcher> Engine<L> {
    /// The input of `exec`: inline, or read from its input row (GetItem).
    /// `null` when it has none.
    ///
    /// Errors: [`EngineError::Retry`] when the row cannot be read or is
    /// missing (it is put before the activity item exists).
    pub async fn input_of(&self, exec: &ActivityExec) -> Result<Value, EngineError> {
        let Some(key) = &exec.input_ref else {
            return Ok(exec.input.clone().unwrap_or(Value::Null));
        };
        let item = HashMap::from([
            ("workflow_exec_id".to_string(), s(key)),
            ("workflow_name".to_string(), s(&exec.workflow_name)),
        ]);
        let row: Option<InputRow> = self
            .store
            .get(&self.store.tables().workflow_plan(), item)
            .await?;
        row.map(|r| r.input).ok_or_else(|| {
            EngineError::Retry(format!(
                "{}: input row {key} missing",
                exec.activity_exec_id
            ))
        })
    }

    /// [`outputs_of`] with the engine's store.
    ///
    /// Errors: [`EngineError::Retry`] as [`outputs_of`].
    pub async fn outputs_of(
        &self,
        execs: Vec<ActivityExec>,
    ) -> Result<HashMap<String, Value>, EngineError> {
        Ok(outputs_of(&self.store, execs).await?)
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
