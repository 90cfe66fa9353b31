//! The on-failure destination of the stream event source mappings: the
//! invocation record Lambda sends to an SQS queue or SNS topic when it gives
//! up on a batch, written locally as one JSON line per record.
//!
//! Shape (AWS Lambda, DynamoDB stream source):
//! ```json
//! {"requestContext": {"requestId": "…", "functionArn": "arn:aws:lambda:…:function:f",
//!                     "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 11},
//!  "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
//!  "version": "1.0", "timestamp": "2026-11-22T00:13:49.717Z",
//!  "DDBStreamBatchInfo": {"shardId": "…", "startSequenceNumber": "…", "endSequenceNumber": "…",
//!                         "approximateArrivalOfFirstRecord": "2026-11-22T00:13:19Z",
//!                         "approximateArrivalOfLastRecord": "2026-11-22T00:13:19Z",
//!                         "batchSize": 1, "streamArn": "arn:aws:dynamodb:…/stream/…"}}
//! ```
//! Like on AWS, the records themselves are not included: the sequence
//! numbers locate them in the stream.

use std::io::Write;
use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};

pub use whimbrel_core::redrive::{
    BatchInfo, Condition, OnFailureRecord, RequestContext, ResponseContext,
};

/// A record given up: its sequence number and approximate creation time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenUp {
    /// `SequenceNumber`.
    pub sequence_number: String,
    /// `ApproximateCreationDateTime`.
    pub arrival: DateTime<Utc>,
}

/// What is known about the batch's last invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastInvocation {
    /// Its request id.
    pub request_id: String,
    /// `Some("Unhandled")` after a function error.
    pub function_error: Option<String>,
}

/// `arn:aws:lambda:<region>:000000000000:function:<name>`, the local
/// stand-in for a function's ARN.
pub fn function_arn(region: &str, function: &str) -> String {
    format!("arn:aws:lambda:{region}:000000000000:function:{function}")
}

/// The record for `records` (in stream order, at least one) given up
/// for `condition` at `now`, after `invokes` invocations, the last one
/// `last` (None: never invoked).
#[allow(clippy::too_many_arguments)]
pub fn on_failure_record(
    condition: Condition,
    function_arn: String,
    stream_arn: &str,
    shard_id: &str,
    records: &[GivenUp],
    invokes: u32,
    last: Option<&LastInvocation>,
    now: DateTime<Utc>,
) -> OnFailureRecord {
    let first = records.first();
    let end = records.last();
    let at = |r: Option<&GivenUp>| {
        r.map(|r| r.arrival.to_rfc3339_opts(SecondsFormat::Secs, true))
            .unwrap_or_default()
    };
    OnFailureRecord {
        request_context: RequestContext {
            request_id: last
                .map(|l| l.request_id.clone())
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            function_arn,
            condition,
            approximate_invoke_count: invokes,
        },
        response_context: ResponseContext {
            status_code: if last.is_some() { 200 } else { 0 },
            executed_version: "$LATEST".into(),
            function_error: last.and_then(|l| l.function_error.clone()),
        },
        version: "1.0".into(),
        timestamp: now.to_rfc3339_opts(SecondsFormat::Millis, true),
        batch_info: BatchInfo {
            shard_id: shard_id.into(),
            start_sequence_number: first.map(|r| r.sequence_number.clone()).unwrap_or_default(),
            end_sequence_number: end.map(|r| r.sequence_number.clone()).unwrap_or_default(),
            approximate_arrival_of_first_record: at(first),
            approximate_arrival_of_last_record: at(end),
            batch_size: records.len(),
            stream_arn: stream_arn.into(),
        },
    }
}

/// Append `record` as one JSON line to `path` (created with its directory
/// if missing).
pub fn append_to(record: &OnFailureRecord, path: &Path) -> std::io::Result<()> {
    append_line(path, serde_json::to_vec(record)?)
}

/// Append `line` (no newline in it) and a newline to `path` (created with
/// its directory if missing), in one write.
pub fn append_line(path: &Path, mut line: Vec<u8>) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    line.push(b'\n');
    // One write per line: concurrent appenders never interleave inside it.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(&line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn retries_exhausted_record_has_aws_shape() {
        let records = [
            GivenUp {
                sequence_number: "100".into(),
                arrival: t("2026-11-22T00:13:19Z"),
            },
            GivenUp {
                sequence_number: "105".into(),
                arrival: t("2026-11-22T00:13:21Z"),
            },
        ];
        let last = LastInvocation {
            request_id: "req-1".into(),
            function_error: Some("Unhandled".into()),
        };
        let r = on_failure_record(
            Condition::RetryAttemptsExhausted,
            function_arn("us-east-1", "whimbrel-activity-event"),
            "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/2026",
            "shardId-1",
            &records,
            11,
            Some(&last),
            t("2026-11-22T00:13:49.717Z"),
        );
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({
                "requestContext": {
                    "requestId": "req-1",
                    "functionArn": "arn:aws:lambda:us-east-1:000000000000:function:whimbrel-activity-event",
                    "condition": "RetryAttemptsExhausted",
                    "approximateInvokeCount": 11
                },
                "responseContext": {
                    "statusCode": 200,
                    "executedVersion": "$LATEST",
                    "functionError": "Unhandled"
                },
                "version": "1.0",
                "timestamp": "2026-11-22T00:13:49.717Z",
                "DDBStreamBatchInfo": {
                    "shardId": "shardId-1",
                    "startSequenceNumber": "100",
                    "endSequenceNumber": "105",
                    "approximateArrivalOfFirstRecord": "2026-11-22T00:13:19Z",
                    "approximateArrivalOfLastRecord": "2026-11-22T00:13:21Z",
                    "batchSize": 2,
                    "streamArn": "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/2026"
                }
            })
        );
    }

    #[test]
    fn record_age_exceeded_without_invocation() {
        let records = [GivenUp {
            sequence_number: "7".into(),
            arrival: t("2026-11-22T00:00:00Z"),
        }];
        let r = on_failure_record(
            Condition::RecordAgeExceeded,
            function_arn("us-east-1", "f"),
            "s",
            "sh",
            &records,
            0,
            None,
            t("2026-11-22T02:00:00Z"),
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["requestContext"]["condition"], "RecordAgeExceeded");
        assert_eq!(v["requestContext"]["approximateInvokeCount"], 0);
        assert_eq!(v["responseContext"]["statusCode"], 0);
        assert!(v["responseContext"].get("functionError").is_none());
        assert_eq!(v["DDBStreamBatchInfo"]["batchSize"], 1);
        // Round trip.
        let back: OnFailureRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn appends_json_lines() {
        let dir = std::env::temp_dir().join(format!("wb-onfail-{}", uuid::Uuid::new_v4()));
        let path = dir.join("on-failure.jsonl");
        let r = on_failure_record(
            Condition::RecordAgeExceeded,
            function_arn("us-east-1", "f"),
            "s",
            "sh",
            &[GivenUp {
                sequence_number: "1".into(),
                arrival: Utc::now(),
            }],
            0,
            None,
            Utc::now(),
        );
        append_to(&r, &path).unwrap();
        append_to(&r, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<OnFailureRecord> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines, vec![r.clone(), r]);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
