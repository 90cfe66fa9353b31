//! Payloads off the activity item (design.md § 2.8).
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

use crate::attr;
use std::collections::HashMap;

use serde_json::Value;

use super::{Engine, EngineError};
use crate::launcher::Launcher;
use crate::model::{ActivityExec, InputRow};
use crate::store::{s, Item, Store, StoreError};
pub use whimbrel_rules::payloads::*;

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
    let mut kept = HashMap::new();
    for a in execs {
        match a.outcome.output_event_id.clone() {
            Some(row) => {
                keys.push(event_key(&row, &a.activity_exec_id));
                kept.insert(row, a);
            }
            None => {
                out.insert(a.activity_name, a.outcome.output.unwrap_or(Value::Null));
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
        if let Some(a) = kept.remove(&row.activity_event_id) {
            let output = checked(&a, &row.activity_event_id, row.output)?;
            out.insert(a.activity_name, output);
        }
    }
    if let Some((row, a)) = kept.into_iter().next() {
        return Err(StoreError::Transient {
            op: "BatchGetItem",
            message: format!(
                "the output of {} is on event row {row}, which is gone",
                a.activity_name
            ),
        });
    }
    Ok(out)
}

/// The output `read` from event row `event_id`, checked against the digest
/// on `exec` ([`verified`]).
fn checked(exec: &ActivityExec, event_id: &str, read: Option<Value>) -> Result<Value, StoreError> {
    let expected = exec.outcome.output_sha256.as_deref();
    let output = read.unwrap_or(Value::Null);
    Ok(verified(
        &exec.activity_exec_id,
        event_id,
        expected,
        output,
    )?)
}

/// [`check_output`] as every reader of an output row applies it: a
/// mismatch is logged and counted (`OutputMismatches`, alarmed) here, once
/// for all readers.
///
/// Errors: [`OutputMismatch`]; the tampered output is not returned.
pub fn verified(
    activity_exec_id: &str,
    event_id: &str,
    expected: Option<&str>,
    output: Value,
) -> Result<Value, OutputMismatch> {
    check_output(activity_exec_id, event_id, expected, output).inspect_err(|e| {
        tracing::error!(error = %e, "an output row was overwritten after it was applied");
        crate::metrics::output_mismatch();
    })
}

/// The attributes [`output_of_row`] reads of an event row (keys first):
/// the IAM `dynamodb:Attributes` of an activity role's GetItem on the
/// event table (template.yaml `ReadPrerequisiteOutputs`).
pub const OUTPUT_ROW_READS: [&str; 3] = [
    attr::ACTIVITY_EVENT_ID,
    attr::ACTIVITY_EXEC_ID,
    attr::OUTPUT,
];

/// The output kept on event row `event_id` of activity `activity_exec_id`
/// (one GetItem of [`OUTPUT_ROW_READS`]), checked against `expected`, the
/// item's `output_sha256` ([`check_output`]): for a reader that is not the
/// engine, such as the activity helper.
///
/// Errors: the store's; a row that is gone is [`StoreError::Transient`];
/// one overwritten since it was applied is [`StoreError::Mismatch`].
pub async fn output_of_row(
    store: &Store,
    activity_exec_id: &str,
    event_id: &str,
    expected: Option<&str>,
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
    let output = row.output.unwrap_or(Value::Null);
    Ok(verified(activity_exec_id, event_id, expected, output)?)
}

fn event_key(event_id: &str, activity_exec_id: &str) -> Item {
    HashMap::from([
        (attr::ACTIVITY_EVENT_ID.to_string(), s(event_id)),
        (attr::ACTIVITY_EXEC_ID.to_string(), s(activity_exec_id)),
    ])
}

impl<L: Launcher> Engine<L> {
    /// The input of `exec`: inline, or read from its input row (GetItem).
    /// `null` when it has none.
    ///
    /// Errors: [`EngineError::Retry`] when the row cannot be read or is
    /// missing (it is put before the activity item exists).
    pub async fn input_of(&self, exec: &ActivityExec) -> Result<Value, EngineError> {
        let Some(key) = &exec.runner.input_ref else {
            return Ok(exec.runner.input.clone().unwrap_or(Value::Null));
        };
        let item = HashMap::from([
            (attr::WORKFLOW_EXEC_ID.to_string(), s(key)),
            (attr::WORKFLOW_NAME.to_string(), s(&exec.workflow_name)),
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
