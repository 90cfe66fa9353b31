//! The Lambda handlers' logic, shared by the thin function mains and the
//! tests: turn a DynamoDB stream batch into engine calls and a partial batch
//! response, and run the heartbeat monitor for a Scheduled Event.
//!
//! Rules (design.md § 3.8): only INSERT records are processed; a record
//! that can never apply (malformed, wrong table, rejected by the engine) is
//! logged with its reason, counted, and does not block the records after it;
//! a record that may succeed later is reported as a batch item failure with
//! its sequence number. Records of different items run concurrently; the
//! records of one item run in stream order.

use crate::attr;
use std::collections::HashMap;

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use futures::stream::{self, StreamExt};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::{info, warn};

use crate::engine::decide::WakeUp;
use crate::engine::{Applied, Engine, EngineError, MonitorReport};
use crate::launcher::Launcher;
use crate::model::{ActivityEvent, SignalRow, WorkflowRequest};

/// A payload that is not a DynamoDB stream event or Scheduled Event at all
/// (an invocation error, not a record error).
#[derive(Debug, thiserror::Error)]
#[error("invalid invocation payload: {0}")]
pub struct PayloadError(pub String);

/// What happened to the records of one batch.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BatchSummary {
    /// Records applied (or already applied: redelivery).
    pub applied: u64,
    /// Records deliberately not processed: not INSERT, or `manual = true`.
    pub skipped: u64,
    /// Records that can never apply; logged with their reason.
    pub rejected: u64,
    /// Records reported as batch item failures, to be retried.
    pub retried: u64,
    /// Of the records applied, those parked on their activity until its
    /// state catches up.
    pub parked: u64,
    /// Of the records skipped, the MODIFY records: a row written again
    /// under an id already used (the engine never overwrites a request or
    /// event row), logged and counted as `RowsOverwritten`. Never applied.
    pub overwritten: u64,
    /// Each record's outcome, in batch order of items.
    #[serde(skip)]
    pub records: Vec<RecordReport>,
}

/// The outcome of one stream record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordReport {
    /// Its sequence number.
    pub sequence: Option<String>,
    /// Its row's key (`workflow_request_id` or `activity_event_id`), when
    /// the record could be read that far.
    pub key: Option<String>,
    /// What happened.
    pub outcome: Outcome,
    /// A MODIFY record (skipped): its row's id was written again.
    pub overwrite: bool,
    /// When the engine was done with it, its clock (epoch seconds): the
    /// latest its writes and reads can have happened, earlier than the
    /// batch's end when other records of the batch take longer. `None` for
    /// a record never given to the engine (skipped or rejected as it was
    /// parsed).
    pub finished_epoch: Option<i64>,
}

/// What happened to one stream record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Applied (or already applied).
    Applied,
    /// Parked on its activity.
    Parked,
    /// Not for this function (not INSERT, `manual = true`).
    Skipped,
    /// Can never apply: the reason, as logged.
    Rejected(String),
    /// A batch item failure, to be retried: the reason.
    Retry(String),
}

/// The table name of a stream ARN
/// (`arn:aws:dynamodb:REGION:ACCOUNT:table/NAME/stream/LABEL`).
pub fn table_of_stream_arn(arn: &str) -> Option<&str> {
    let rest = arn.split_once(":table/")?.1;
    Some(rest.split('/').next().unwrap_or(rest))
}

/// A parsed record ready for the engine: its ordering key and row.
struct Parsed<T> {
    seq: Option<String>,
    key: String,
    id: Option<String>,
    row: T,
}

/// Parse one raw record. `Err(None)` = skip (not INSERT), `Err(Some(reason))`
/// = reject.
fn parse_record<T: DeserializeOwned>(
    raw: &Value,
    table: &str,
    key_attr: &str,
    id_attr: &str,
) -> Result<Parsed<T>, Option<String>> {
    let rec: EventRecord = serde_json::from_value(raw.clone())
        .map_err(|e| Some(format!("not a DynamoDB stream record: {e}")))?;
    let seq = rec.change.sequence_number.clone();
    if rec.event_name != "INSERT" {
        return Err(None);
    }
    match rec
        .event_source_arn
        .as_deref()
        .and_then(table_of_stream_arn)
    {
        Some(t) if t == table => {}
        Some(t) => return Err(Some(format!("record from table {t}, expected {table}"))),
        None => return Err(Some("record without a table eventSourceARN".into())),
    }
    let key = match rec.change.new_image.get(key_attr) {
        Some(serde_dynamo::AttributeValue::S(k)) => k.clone(),
        _ => return Err(Some(format!("NewImage has no string {key_attr}"))),
    };
    let id = match rec.change.new_image.get(id_attr) {
        Some(serde_dynamo::AttributeValue::S(k)) => Some(k.clone()),
        _ => None,
    };
    let row: T = serde_dynamo::from_item(rec.change.new_image)
        .map_err(|e| Some(format!("malformed row {key}: {e}")))?;
    Ok(Parsed { seq, key, id, row })
}

/// Process a stream batch: parse each record, group by item, run `apply`
/// on each (`concurrency` items at once, each item's records in stream
/// order), and build the partial batch response. `now`: the engine's
/// clock, epoch seconds, to note when each record was done.
async fn process_batch<T, F, Fut>(
    concurrency: usize,
    now: &dyn Fn() -> i64,
    payload: &Value,
    table: &str,
    key_attr: &str,
    id_attr: &str,
    apply: F,
) -> Result<(DynamoDbEventResponse, BatchSummary), PayloadError>
where
    T: DeserializeOwned,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = Result<Applied, EngineError>>,
{
    let records = payload
        .get("Records")
        .and_then(Value::as_array)
        .ok_or_else(|| PayloadError("no Records array".into()))?;
    let (groups, mut reports) = group_records::<T>(records, table, key_attr, id_attr);
    let apply = &apply;
    let outcomes: Vec<Vec<RecordReport>> = stream::iter(groups)
        .map(|group| async move {
            // In stream order. A record to retry does not stop the later
            // ones of its item: the contract table decides what applies, and
            // a later record may be what makes the retried one valid
            // (RUNNING after an early COMPLETED). Redelivery is harmless.
            let mut out = Vec::with_capacity(group.len());
            for p in group {
                let outcome = outcome_of(table, &p.key, apply(p.row).await);
                out.push(RecordReport {
                    sequence: p.seq,
                    key: p.id,
                    outcome,
                    overwrite: false,
                    finished_epoch: Some(now()),
                });
            }
            out
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    reports.extend(outcomes.into_iter().flatten());
    Ok(summarize(table, reports))
}

/// The records of a batch parsed and grouped by item key, in stream order
/// within each group; and the reports of the records that were skipped
/// (not INSERTs) or rejected (malformed), which are never applied.
fn group_records<T: DeserializeOwned>(
    records: &[Value],
    table: &str,
    key_attr: &str,
    id_attr: &str,
) -> (Vec<Vec<Parsed<T>>>, Vec<RecordReport>) {
    let mut reports = Vec::new();
    let mut groups: Vec<Vec<Parsed<T>>> = Vec::new();
    let mut group_of: HashMap<String, usize> = HashMap::new();
    for raw in records {
        let sequence = raw["dynamodb"]["SequenceNumber"]
            .as_str()
            .map(str::to_string);
        let key = raw["dynamodb"]["NewImage"][id_attr]["S"]
            .as_str()
            .map(str::to_string);
        let outcome = match parse_record::<T>(raw, table, key_attr, id_attr) {
            Ok(p) => {
                let g = *group_of.entry(p.key.clone()).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                groups[g].push(p);
                continue;
            }
            Err(None) if raw["eventName"] == "MODIFY" && is_rejection_mark(raw) => {
                info!(table, key = ?key, "stream record skipped: the engine kept a rejection on its row");
                Outcome::Skipped
            }
            Err(None) if raw["eventName"] == "MODIFY" => {
                // Filtered in by the event source mapping for this alone:
                // a reused id may be an attempt to change what was applied.
                warn!(table, key = ?key, "stream record skipped: a row was overwritten under an id already used");
                crate::metrics::row_overwritten();
                reports.push(RecordReport {
                    sequence,
                    key,
                    outcome: Outcome::Skipped,
                    overwrite: true,
                    finished_epoch: None,
                });
                continue;
            }
            Err(None) => Outcome::Skipped,
            Err(Some(reason)) => {
                warn!(table, reason = %reason, "stream record rejected");
                Outcome::Rejected(reason)
            }
        };
        reports.push(RecordReport {
            sequence,
            key,
            outcome,
            overwrite: false,
            finished_epoch: None,
        });
    }
    (groups, reports)
}

/// Whether a MODIFY record is the engine's own write of a rejection on an
/// event row ([`crate::engine::decide::mark_rejected`]): its new image
/// carries `rejected_epoch`. Such a change is expected, not an overwrite.
fn is_rejection_mark(raw: &Value) -> bool {
    raw["dynamodb"]["NewImage"]
        .get(crate::attr::REJECTED_EPOCH)
        .is_some()
}

/// What applying one record came to, logged.
fn outcome_of(table: &str, key: &str, applied: Result<Applied, EngineError>) -> Outcome {
    match applied {
        Ok(Applied::Skipped) => Outcome::Skipped,
        Ok(Applied::Parked(_)) => Outcome::Parked,
        Ok(_) => Outcome::Applied,
        Err(EngineError::Rejected(reason)) => {
            warn!(table, key, reason = %reason, "stream record rejected");
            Outcome::Rejected(reason)
        }
        Err(EngineError::Retry(reason)) => {
            info!(table, key, reason = %reason, "stream record will be retried");
            Outcome::Retry(reason)
        }
    }
}

/// The partial batch response (a batch item failure for each record to
/// retry) and the summary of a batch's reports, counted in the metrics.
fn summarize(table: &str, reports: Vec<RecordReport>) -> (DynamoDbEventResponse, BatchSummary) {
    let mut summary = BatchSummary::default();
    let mut failures = Vec::new();
    for r in &reports {
        match &r.outcome {
            Outcome::Applied => summary.applied += 1,
            Outcome::Parked => {
                summary.applied += 1;
                summary.parked += 1;
            }
            Outcome::Skipped => {
                summary.skipped += 1;
                summary.overwritten += u64::from(r.overwrite);
            }
            Outcome::Rejected(reason) => {
                crate::metrics::transition_rejected(reason);
                summary.rejected += 1;
            }
            Outcome::Retry(_) => {
                summary.retried += 1;
                let mut f = DynamoDbBatchItemFailure::default();
                f.item_identifier = r.sequence.clone();
                failures.push(f);
            }
        }
    }
    crate::metrics::batch_size(reports.len());
    summary.records = reports;
    let mut response = DynamoDbEventResponse::default();
    response.batch_item_failures = failures;
    info!(
        table,
        applied = summary.applied,
        skipped = summary.skipped,
        rejected = summary.rejected,
        retried = summary.retried,
        "batch done"
    );
    (response, summary)
}

/// Handle a DynamoDB stream batch of `whimbrel_workflow_request`: start each
/// inserted workflow (see [`Engine::start_workflow`]), or, for a row with
/// `cancel_workflow_exec_id`, cancel that one ([`Engine::cancel_workflow`]);
/// with `redrive_workflow_exec_id`, redrive that one
/// ([`Engine::redrive_workflow`]).
///
/// Errors: [`PayloadError`] if the payload has no `Records` array.
pub async fn workflow_requests<L: Launcher>(
    engine: &Engine<L>,
    payload: &Value,
) -> Result<(DynamoDbEventResponse, BatchSummary), PayloadError> {
    let table = engine.store().tables().workflow_request();
    process_batch(
        engine.config().concurrency,
        &|| engine.now().epoch,
        payload,
        &table,
        attr::WORKFLOW_REQUEST_ID,
        attr::WORKFLOW_REQUEST_ID,
        |row: WorkflowRequest| async move {
            // contract: a Full Logic API client sets `manual` and starts the
            // workflow itself.
            if row.manual == Some(true) {
                return Ok(Applied::Skipped);
            }
            if row.cancel_workflow_exec_id.is_some() {
                return engine.cancel_workflow(&row).await;
            }
            if row.redrive_workflow_exec_id.is_some() {
                return engine.redrive_workflow(&row).await;
            }
            engine.start_workflow(&row).await
        },
    )
    .await
}

/// Handle a DynamoDB stream batch of `whimbrel_activity_event`: apply each
/// inserted event (see [`Engine::apply_event`]). Events of one activity
/// exec are applied in stream order.
///
/// Errors: [`PayloadError`] if the payload has no `Records` array.
pub async fn activity_events<L: Launcher>(
    engine: &Engine<L>,
    payload: &Value,
) -> Result<(DynamoDbEventResponse, BatchSummary), PayloadError> {
    let table = engine.store().tables().activity_event();
    // Grouped by the activity exec (the range key), not the event id, so
    // one activity's events keep their stream order.
    process_batch(
        engine.config().concurrency,
        &|| engine.now().epoch,
        payload,
        &table,
        attr::ACTIVITY_EXEC_ID,
        attr::ACTIVITY_EVENT_ID,
        |row: ActivityEvent| async move {
            // contract: a Full Logic API client applies its own events.
            if row.manual == Some(true) {
                return Ok(Applied::Skipped);
            }
            engine.apply_event(&row).await
        },
    )
    .await
}

/// Handle a DynamoDB stream batch of `whimbrel_signal` (design.md § 9.2):
/// deliver each inserted signal to the signal waits of its name
/// ([`Engine::receive_signal`]); one for an unknown or ended workflow, or
/// malformed, is rejected with a logged reason (`SignalsRejected`), never
/// a batch item failure. Signals of one workflow are applied in stream
/// order.
///
/// Errors: [`PayloadError`] if the payload has no `Records` array.
pub async fn signals<L: Launcher>(
    engine: &Engine<L>,
    payload: &Value,
) -> Result<(DynamoDbEventResponse, BatchSummary), PayloadError> {
    let table = engine.store().tables().signal();
    process_batch(
        engine.config().concurrency,
        &|| engine.now().epoch,
        payload,
        &table,
        attr::WORKFLOW_EXEC_ID,
        attr::SIGNAL_KEY,
        |row: SignalRow| async move {
            let applied = engine.receive_signal(&row).await;
            if !matches!(applied, Err(EngineError::Retry(_))) {
                crate::metrics::signal_received(applied.is_err());
            }
            applied
        },
    )
    .await
}

/// Handle a batch of either stream the activity-event function is mapped
/// to: `whimbrel_activity_event` ([`activity_events`]) or
/// `whimbrel_signal` ([`signals`]), by the first record's
/// `eventSourceARN` (one event source mapping sends one stream's records).
///
/// Errors: [`PayloadError`] if the payload has no `Records` array.
pub async fn client_rows<L: Launcher>(
    engine: &Engine<L>,
    payload: &Value,
) -> Result<(DynamoDbEventResponse, BatchSummary), PayloadError> {
    let first = payload["Records"][0]["eventSourceARN"].as_str();
    let signal_table = engine.store().tables().signal();
    if first.and_then(table_of_stream_arn) == Some(signal_table.as_str()) {
        signals(engine, payload).await
    } else {
        activity_events(engine, payload).await
    }
}

/// Handle an EventBridge Scheduled Event: one heartbeat monitor tick at the
/// current time.
///
/// Errors: [`PayloadError`] if the payload is not an EventBridge event with
/// `detail-type` "Scheduled Event"; [`EngineError`] text if the tick must be
/// retried.
pub async fn scheduled_event<L: Launcher>(
    engine: &Engine<L>,
    payload: &Value,
) -> Result<MonitorReport, PayloadError> {
    let ev: EventBridgeEvent = serde_json::from_value(payload.clone())
        .map_err(|e| PayloadError(format!("not an EventBridge event: {e}")))?;
    if ev.detail_type != "Scheduled Event" {
        return Err(PayloadError(format!(
            "detail-type {:?} is not \"Scheduled Event\"",
            ev.detail_type
        )));
    }
    // The engine's clock (its Environment), as every judgment of the tick
    // reads it: one clock for the due index's query and the items' verdicts.
    let now = engine.now().epoch;
    let report = engine
        .monitor_tick(now)
        .await
        .map_err(|e| PayloadError(e.to_string()))?;
    info!(
        timed_out = report.timed_out,
        relaunched = report.relaunched,
        "heartbeat monitor tick"
    );
    Ok(report)
}

/// The heartbeat monitor's entry point: an EventBridge Scheduled Event
/// runs a tick ([`scheduled_event`]); an SQS event from the timer queue
/// judges the items its wake-ups name, each at its second and all at once
/// ([`Engine::wake`], design.md § 9). Returns the tick's report, or the
/// SQS partial batch response (`ReportBatchItemFailures`): a wake-up whose
/// item could not be judged comes back after the visibility timeout; a
/// malformed one is logged and dropped (its marker, if any, is the
/// ticks').
///
/// Errors: [`PayloadError`] for a payload that is neither.
pub async fn monitor_event<L: Launcher>(
    engine: &Engine<L>,
    payload: &Value,
) -> Result<Value, PayloadError> {
    if payload.get("Records").is_none() {
        let report = scheduled_event(engine, payload).await?;
        return Ok(serde_json::to_value(report).expect("serializable"));
    }
    let event: SqsEvent =
        serde_json::from_value(payload.clone()).map_err(|e| PayloadError(e.to_string()))?;
    let failed: Vec<String> = stream::iter(event.records)
        .map(|m| async move {
            let id = m.message_id.unwrap_or_default();
            let body = m.body.unwrap_or_default();
            let wake: WakeUp = match serde_json::from_str(&body) {
                Ok(w) => w,
                Err(e) => {
                    warn!(message_id = %id, error = %e, "wake-up rejected: not a wake-up; dropped");
                    return None;
                }
            };
            match Box::pin(engine.wake(&wake)).await {
                Ok(_) => None,
                Err(e) => {
                    warn!(message_id = %id, activity_exec_id = %wake.activity_exec_id, error = %e, "wake-up failed; SQS delivers it again");
                    Some(id)
                }
            }
        })
        .buffer_unordered(engine.config().concurrency.max(1))
        .filter_map(|f| async move { f })
        .collect()
        .await;
    let mut response = SqsBatchResponse::default();
    for id in failed {
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = id;
        response.batch_item_failures.push(failure);
    }
    Ok(serde_json::to_value(response).expect("serializable"))
}

/// The claim function's entry point (`whimbrel-task-claim`, issue 42 B.1):
/// a worker's [`crate::worker::ClaimRequest`] in, a
/// [`crate::worker::ClaimResponse`] out (`{"task": null}` when nothing is
/// claimable). `scope` is the function's `WHIMBREL_CLAIM_TASK_LISTS`.
///
/// Errors: [`PayloadError`] with the reason for a payload that is not a
/// claim request or a claim the scope or limits refuse (the worker sees
/// it as the function's error), and for a store that is unavailable.
pub async fn claim_event<L: Launcher>(
    engine: &Engine<L>,
    scope: &crate::worker::ClaimScope,
    payload: &Value,
) -> Result<Value, PayloadError> {
    let req: crate::worker::ClaimRequest = serde_json::from_value(payload.clone())
        .map_err(|e| PayloadError(format!("not a claim request: {e}")))?;
    let answer = engine.claim_task(&req, scope).await.map_err(|e| {
        warn!(worker = %req.worker, task_lists = ?req.task_lists, error = %e, "claim refused");
        PayloadError(e.to_string())
    })?;
    Ok(serde_json::to_value(answer).expect("serializable"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_arn_table() {
        assert_eq!(
            table_of_stream_arn("arn:aws:dynamodb:us-east-1:123456789012:table/whimbrel_activity_event/stream/2026-11-22T00:00:00.000"),
            Some("whimbrel_activity_event")
        );
        assert_eq!(table_of_stream_arn("arn:aws:sqs:us-east-1:1:q"), None);
    }
}
