//! Redrive: apply the stream records an event source mapping gave up on,
//! within a bound and with no person involved (contract.md: a given-up
//! record loses nothing; design.md § 8.6).
//!
//! Both stream mappings send the on-failure record of a batch they give up
//! on (retries or record age exhausted) to the `StreamFailureQueue`. The
//! redrive function, fed by that queue through an SQS event source mapping,
//! reads each record's sequence-number range back from its stream shard
//! ([`StreamReader`]; DynamoDB Streams keeps records 24 hours) and applies
//! the records through the handler of the stream's table, as the mapping's
//! function would have. Applying is idempotent: a record that was applied
//! after all changes nothing.
//!
//! A range not fully applied (a record to retry, a range whose last record
//! was not read back, a read that failed) is a batch item failure: SQS delivers
//! the message again after the queue's `VisibilityTimeout`, up to its
//! `maxReceiveCount`, then moves it to the dead-letter queue, which alarms
//! (`StreamFailureDeadLetterAlarm`); `whimbrel replay` applies it from there.
//!
//! The bound: a record is given up at most `MaximumRecordAgeInSeconds`
//! (3,600 s) after it was written, and redriven at once, or at the latest
//! after `maxReceiveCount` × `VisibilityTimeout` (5 × 1,800 s) if redrives
//! fail, well inside the stream's 24-hour retention.

mod streams;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::engine::Engine;
use crate::handlers::{self, BatchSummary, PayloadError};
use crate::launcher::Launcher;
pub use streams::{lambda_record, DynamoDbStreamReader};

/// Why a batch was given up (`requestContext.condition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Condition {
    /// `MaximumRetryAttempts` used up.
    RetryAttemptsExhausted,
    /// Records older than `MaximumRecordAgeInSeconds` (by
    /// `ApproximateCreationDateTime`), not delivered.
    RecordAgeExceeded,
}

/// `requestContext`: the last invocation of the batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestContext {
    /// Request id of the last invocation (a fresh one if never invoked).
    pub request_id: String,
    /// `arn:aws:lambda:<region>:<account>:function:<name>`.
    pub function_arn: String,
    /// Why the batch was given up.
    pub condition: Condition,
    /// Invocations that included these records (0: never invoked).
    pub approximate_invoke_count: u32,
}

/// `responseContext`: the answer of the last invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseContext {
    /// HTTP status of the Invoke call: 200, also for function errors
    /// (0 when the batch was never invoked).
    pub status_code: u16,
    /// `$LATEST` locally.
    pub executed_version: String,
    /// `Unhandled` after a function error (a crash, a timeout, an
    /// unreachable instance); absent after a partial batch failure.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub function_error: Option<String>,
}

/// `DDBStreamBatchInfo`: where the given-up records are in the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchInfo {
    /// The shard.
    pub shard_id: String,
    /// Sequence number of the first record given up.
    pub start_sequence_number: String,
    /// Sequence number of the last record given up.
    pub end_sequence_number: String,
    /// `ApproximateCreationDateTime` of the first record, RFC 3339, seconds.
    pub approximate_arrival_of_first_record: String,
    /// `ApproximateCreationDateTime` of the last record, RFC 3339, seconds.
    pub approximate_arrival_of_last_record: String,
    /// Records given up.
    pub batch_size: usize,
    /// The stream: `arn:aws:dynamodb:<region>:<account>:table/<table>/stream/<label>`.
    pub stream_arn: String,
}

/// One on-failure record, as Lambda sends it to SQS or SNS for a DynamoDB
/// stream (the body of a `StreamFailureQueue` message). Like on AWS, the
/// records themselves are not included: the sequence numbers locate them.
///
/// Shape (AWS Lambda, DynamoDB stream source):
/// ```json
/// {"requestContext": {"requestId": "…", "functionArn": "arn:aws:lambda:…:function:f",
///                     "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 11},
///  "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
///  "version": "1.0", "timestamp": "2026-11-22T00:13:49.717Z",
///  "DDBStreamBatchInfo": {"shardId": "…", "startSequenceNumber": "…", "endSequenceNumber": "…",
///                         "approximateArrivalOfFirstRecord": "2026-11-22T00:13:19Z",
///                         "approximateArrivalOfLastRecord": "2026-11-22T00:13:19Z",
///                         "batchSize": 1, "streamArn": "arn:aws:dynamodb:…/stream/…"}}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnFailureRecord {
    /// The last invocation.
    #[serde(rename = "requestContext")]
    pub request_context: RequestContext,
    /// Its answer.
    #[serde(rename = "responseContext")]
    pub response_context: ResponseContext,
    /// `1.0`.
    pub version: String,
    /// When the batch was given up, RFC 3339 with milliseconds.
    pub timestamp: String,
    /// Where the records are.
    #[serde(rename = "DDBStreamBatchInfo")]
    pub batch_info: BatchInfo,
}

/// Why a given-up range could not be applied (yet).
#[derive(Debug, thiserror::Error)]
pub enum RedriveError {
    /// The stream is not of the workflow request or activity event table.
    #[error("stream {0} is not of a Whimbrel stream-fed table")]
    UnknownStream(String),
    /// The range could not be read back (the records may be older than the
    /// stream's 24-hour retention, or the call failed).
    #[error("reading back shard {shard} from {start}: {reason}")]
    Read {
        /// The shard.
        shard: String,
        /// The first sequence number asked for.
        start: String,
        /// What the stream answered.
        reason: String,
    },
    /// The handler refused the records as an event.
    #[error(transparent)]
    Payload(#[from] PayloadError),
}

/// Where given-up records are read back from: DynamoDB Streams on AWS and
/// locally ([`DynamoDbStreamReader`]), the simulated stream in the
/// simulation.
pub trait StreamReader: Send + Sync {
    /// The records of `info`'s shard from `start_sequence_number` to
    /// `end_sequence_number` (both included), in stream order, each shaped
    /// as a Lambda DynamoDB event record (`eventName`, `dynamodb`, …).
    /// Records gone from the stream are missing from the answer.
    ///
    /// Errors: [`RedriveError::Read`].
    fn read_range(
        &self,
        info: &BatchInfo,
    ) -> impl std::future::Future<Output = Result<Vec<Value>, RedriveError>> + Send;
}

/// What redriving one on-failure record did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redriven {
    /// Records read back from the stream.
    pub read: usize,
    /// Records given up (`DDBStreamBatchInfo.batchSize`). The range may
    /// hold more records than that (records the mapping's filter left out,
    /// such as TTL's REMOVEs), so this is only logged.
    pub given_up: usize,
    /// Whether the range's last record (`endSequenceNumber`) was read: the
    /// whole range was.
    pub reached_end: bool,
    /// What applying them did.
    pub summary: BatchSummary,
}

impl Redriven {
    /// The whole range was read back and no record is left to retry.
    pub fn complete(&self) -> bool {
        self.reached_end && self.summary.retried == 0
    }
}

/// The table a stream ARN belongs to
/// (`arn:aws:dynamodb:…:table/<table>/stream/<label>`), if it names one.
pub fn stream_table(stream_arn: &str) -> Option<&str> {
    stream_arn.split(":table/").nth(1)?.split('/').next()
}

/// Apply `records` (Lambda DynamoDB event records of the stream
/// `stream_arn`) through the handler of the stream's table, as one event.
///
/// Errors: [`RedriveError::UnknownStream`], or [`RedriveError::Payload`].
pub async fn apply_records<L: Launcher>(
    engine: &Engine<L>,
    stream_arn: &str,
    records: Vec<Value>,
) -> Result<BatchSummary, RedriveError> {
    let tables = engine.store().tables();
    let table = stream_table(stream_arn).unwrap_or_default();
    let event = json!({ "Records": records });
    let result = if table == tables.workflow_request() {
        handlers::workflow_requests(engine, &event).await
    } else if table == tables.activity_event() {
        handlers::activity_events(engine, &event).await
    } else if table == tables.signal() {
        handlers::signals(engine, &event).await
    } else {
        return Err(RedriveError::UnknownStream(stream_arn.into()));
    };
    Ok(result?.1)
}

/// Read back the range of one on-failure record and apply it.
///
/// Errors: see [`StreamReader::read_range`] and [`apply_records`].
pub async fn redrive<L: Launcher, R: StreamReader>(
    engine: &Engine<L>,
    reader: &R,
    record: &OnFailureRecord,
) -> Result<Redriven, RedriveError> {
    let info = &record.batch_info;
    let records = reader.read_range(info).await?;
    let read = records.len();
    let end = info.end_sequence_number.as_str();
    let reached_end = records
        .iter()
        .any(|r| r["dynamodb"]["SequenceNumber"].as_str() == Some(end));
    let summary = apply_records(engine, &info.stream_arn, records).await?;
    Ok(Redriven {
        read,
        given_up: info.batch_size,
        reached_end,
        summary,
    })
}

/// Redrive one SQS message's on-failure record: what it did, or `None`
/// when it could not (each failure is logged with its reason).
async fn redrive_message<L: Launcher, R: StreamReader>(
    engine: &Engine<L>,
    reader: &R,
    id: &str,
    body: Option<&str>,
) -> Option<Redriven> {
    let record = match serde_json::from_str::<OnFailureRecord>(body.unwrap_or_default()) {
        Ok(r) => r,
        Err(e) => {
            // Kept (to the dead-letter queue): it may be an on-failure
            // record of a newer shape, and nothing is lost by keeping it.
            warn!(message_id = id, error = %e, "not an on-failure record");
            return None;
        }
    };
    let info = &record.batch_info;
    match redrive(engine, reader, &record).await {
        Ok(done) => {
            info!(
                message_id = id,
                shard = info.shard_id,
                start = info.start_sequence_number,
                given_up = done.given_up,
                read = done.read,
                applied = done.summary.applied,
                rejected = done.summary.rejected,
                retried = done.summary.retried,
                "redriven"
            );
            crate::metrics::redriven(done.read);
            Some(done)
        }
        Err(e) => {
            warn!(message_id = id, shard = info.shard_id, error = %e, "redrive failed");
            None
        }
    }
}

/// Handle an SQS event of the `StreamFailureQueue`: redrive each message's
/// on-failure record ([`redrive`]) and answer an SQS partial batch
/// response (`{"batchItemFailures": [{"itemIdentifier": messageId}]}`)
/// naming the messages not fully applied ([`Redriven::complete`]), so SQS
/// delivers them again after the visibility timeout (the mapping has
/// `ReportBatchItemFailures`). Also returns what each message's redrive
/// did, in message order (`None`: it could not be read or applied).
///
/// Errors: [`PayloadError`] if the payload is not an SQS event.
pub async fn given_up_batches<L: Launcher, R: StreamReader>(
    engine: &Engine<L>,
    reader: &R,
    payload: &Value,
) -> Result<(SqsBatchResponse, Vec<Option<Redriven>>), PayloadError> {
    let event: SqsEvent =
        serde_json::from_value(payload.clone()).map_err(|e| PayloadError(e.to_string()))?;
    let mut response = SqsBatchResponse::default();
    let mut done = Vec::new();
    for message in &event.records {
        let id = message.message_id.clone().unwrap_or_default();
        // Boxed: the engine's futures nest deep enough to exceed the
        // compiler's default query depth otherwise.
        let redriven = Box::pin(redrive_message(
            engine,
            reader,
            &id,
            message.body.as_deref(),
        ))
        .await;
        if !redriven.as_ref().is_some_and(Redriven::complete) {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
        done.push(redriven);
    }
    Ok((response, done))
}
