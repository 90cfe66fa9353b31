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
use crate::keys::event_key;
use crate::launcher::Launcher;
use crate::model::{ActivityExec, InputRow, OutputRow};
use crate::store::{s, Item, Store, StoreError};
pub use whimbrel_rules::payloads::*;

/// The outputs of `execs` by activity name: the inline ones, and those kept
/// off the item: on the engine's output rows (`output_ref`), or on event
/// rows for activities completed before outputs were copied
/// (`output_event_id`), each read with BatchGetItem. `null` for an
/// activity without an output.
///
/// Errors: the store's; a referenced row that is gone is
/// [`StoreError::Transient`], never a silent `null`; one whose output does
/// not match the item's digest is [`StoreError::Mismatch`].
pub async fn outputs_of(
    store: &Store,
    execs: Vec<ActivityExec>,
) -> Result<HashMap<String, Value>, StoreError> {
    let mut out = HashMap::new();
    let (mut copied, mut on_rows) = (Vec::new(), Vec::new());
    for a in execs {
        if a.outcome.output_ref.is_some() {
            copied.push(a);
        } else if a.outcome.output_event_id.is_some() {
            on_rows.push(a);
        } else {
            out.insert(a.activity_name, a.outcome.output.unwrap_or(Value::Null));
        }
    }
    out.extend(copied_outputs(store, copied).await?);
    out.extend(row_outputs(store, on_rows).await?);
    Ok(out)
}

/// The outputs of `execs` from the engine's output rows (`output_ref`).
async fn copied_outputs(
    store: &Store,
    execs: Vec<ActivityExec>,
) -> Result<Vec<(String, Value)>, StoreError> {
    let refs: Vec<(String, &ActivityExec)> = execs
        .iter()
        .filter_map(|a| Some((a.outcome.output_ref.clone()?, a)))
        .collect();
    if refs.is_empty() {
        return Ok(Vec::new());
    }
    let mut keys: HashMap<String, Item> = HashMap::new();
    for (r, a) in &refs {
        keys.entry(r.clone())
            .or_insert_with(|| crate::keys::workflow_key(r, &a.workflow_name));
    }
    let table = store.tables().workflow_plan();
    let found: HashMap<String, Value> = store
        .batch_get::<OutputRow>(&table, keys.into_values().collect())
        .await?
        .into_iter()
        .map(|row| (row.workflow_exec_id, row.output))
        .collect();
    let mut out = Vec::new();
    for (r, a) in refs {
        let output = found
            .get(&r)
            .cloned()
            .ok_or_else(|| gone(&a.activity_exec_id, &r))?;
        out.push((a.activity_name.clone(), checked(a, &r, Some(output))?));
    }
    Ok(out)
}

/// The outputs of `execs` from the event rows that reported them
/// (`output_event_id`: activities completed before outputs were copied).
async fn row_outputs(
    store: &Store,
    execs: Vec<ActivityExec>,
) -> Result<Vec<(String, Value)>, StoreError> {
    let mut keys = Vec::new();
    let mut kept = HashMap::new();
    for a in execs {
        if let Some(row) = a.outcome.output_event_id.clone() {
            keys.push(event_key(&row, &a.activity_exec_id));
            kept.insert(row, a);
        }
    }
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    #[derive(serde::Deserialize)]
    struct Row {
        activity_event_id: String,
        #[serde(default)]
        output: Option<Value>,
    }
    let table = store.tables().activity_event();
    let mut out = Vec::new();
    for row in store.batch_get::<Row>(&table, keys).await? {
        if let Some(a) = kept.remove(&row.activity_event_id) {
            let output = checked(&a, &row.activity_event_id, row.output)?;
            out.push((a.activity_name, output));
        }
    }
    match kept.into_iter().next() {
        Some((row, a)) => Err(gone(&a.activity_exec_id, &row)),
        None => Ok(out),
    }
}

/// A referenced output row (`row`: an output row key or an event id) that
/// is not there: retried, never read as `null`.
fn gone(activity_exec_id: &str, row: &str) -> StoreError {
    StoreError::Transient {
        op: "GetItem",
        message: format!("the output of {activity_exec_id} is on row {row}, which is gone"),
    }
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

/// The attributes [`output_of_copy`] reads of an output row (keys
/// first): the IAM `dynamodb:Attributes` of an activity role's GetItem on
/// the plan table (template.yaml `ReadOutputCopies`).
pub const OUTPUT_COPY_READS: [&str; 3] =
    [attr::WORKFLOW_EXEC_ID, attr::WORKFLOW_NAME, attr::OUTPUT];

/// The output kept on event row `event_id` of activity `activity_exec_id`
/// (one GetItem of [`OUTPUT_ROW_READS`]), checked against `expected`, the
/// item's `output_sha256` ([`check_output`]): for a reader that is not the
/// engine, such as the activity helper, of an activity completed before
/// outputs were copied.
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
    let key = event_key(event_id, activity_exec_id);
    let row: Option<Row> = store.get_projected(&table, key, &OUTPUT_ROW_READS).await?;
    let row = row.ok_or_else(|| gone(activity_exec_id, event_id))?;
    let output = row.output.unwrap_or(Value::Null);
    Ok(verified(activity_exec_id, event_id, expected, output)?)
}

/// The output on the engine's output row `output_ref` of a workflow named
/// `workflow_name` (one GetItem of [`OUTPUT_COPY_READS`]), checked against
/// `expected` (the item's `output_sha256`): for a reader that is not the
/// engine, such as the activity helper.
///
/// Errors: the store's; a row that is gone is [`StoreError::Transient`];
/// a digest that does not match is [`StoreError::Mismatch`].
pub async fn output_of_copy(
    store: &Store,
    activity_exec_id: &str,
    (output_ref, workflow_name): (&str, &str),
    expected: Option<&str>,
) -> Result<Value, StoreError> {
    let table = store.tables().workflow_plan();
    let key = crate::keys::workflow_key(output_ref, workflow_name);
    let row: Option<OutputRow> = store.get_projected(&table, key, &OUTPUT_COPY_READS).await?;
    let row = row.ok_or_else(|| gone(activity_exec_id, output_ref))?;
    Ok(verified(
        activity_exec_id,
        output_ref,
        expected,
        row.output,
    )?)
}

impl<L: Launcher> Engine<L> {
    /// Put the engine's copy of an output ([`OutputRow`], on
    /// `whimbrel_workflow_plan`), before the COMPLETED that names it is
    /// written. Content-addressed, so a repeat writes the same item.
    ///
    /// Errors: the store's, as [`EngineError`].
    pub(crate) async fn put_output_row(&self, row: &OutputRow) -> Result<(), EngineError> {
        let table = self.store.tables().workflow_plan();
        Ok(self.store.put(&table, row).await?)
    }

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
