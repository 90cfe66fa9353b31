//! `whimbrel replay`: apply stream records that an event source mapping
//! gave up on. The on-failure record (what Lambda sends to the on-failure
//! SQS queue or SNS topic, and what `whimbrel local` writes to its
//! on-failure file) holds the shard and the sequence-number range, not the
//! records: they are read back from the stream while it still retains
//! them (24 hours on AWS) and applied through the engine, as the
//! function would have. Applying is idempotent, so replaying a record
//! that was applied after all changes nothing.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use serde_json::{json, Value};
use whimbrel_core::engine::{Engine, EngineConfig};
use whimbrel_core::handlers::{self, BatchSummary};
use whimbrel_core::launcher::LambdaLauncher;

use crate::local::mapping::lambda_record;
use crate::local::on_failure::OnFailureRecord;
use crate::{CliError, Global};

/// `whimbrel replay` options.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// On-failure records: a file of JSON lines (as `whimbrel local
    /// --on-failure-file` writes, or one SQS message body per line), or
    /// `-` for stdin.
    pub file: PathBuf,
}

/// `a < b` for DynamoDB stream sequence numbers (decimal strings).
fn seq_le(a: &str, b: &str) -> bool {
    (a.len(), a) <= (b.len(), b)
}

/// The records of one on-failure record, read back from its shard:
/// `startSequenceNumber ..= endSequenceNumber`.
async fn read_back(
    streams: &aws_sdk_dynamodbstreams::Client,
    rec: &OnFailureRecord,
    region: &str,
) -> Result<Vec<Value>, CliError> {
    let info = &rec.batch_info;
    let it = streams
        .get_shard_iterator()
        .stream_arn(&info.stream_arn)
        .shard_id(&info.shard_id)
        .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
        .sequence_number(&info.start_sequence_number)
        .send()
        .await
        .map_err(|e| {
            CliError(format!(
                "shard {} from {}: {} (records older than the stream's retention cannot be replayed)",
                info.shard_id,
                info.start_sequence_number,
                aws_sdk_dynamodbstreams::error::DisplayErrorContext(&e)
            ))
        })?;
    let mut iterator = it.shard_iterator().map(str::to_string);
    let mut out = Vec::new();
    let mut empty = 0;
    while let Some(i) = iterator.take() {
        let page = streams
            .get_records()
            .shard_iterator(i)
            .send()
            .await
            .map_err(|e| {
                CliError(format!(
                    "GetRecords: {}",
                    aws_sdk_dynamodbstreams::error::DisplayErrorContext(&e)
                ))
            })?;
        let records = page.records();
        for r in records {
            let seq = r
                .dynamodb()
                .and_then(|d| d.sequence_number())
                .unwrap_or_default();
            if !seq_le(seq, &info.end_sequence_number) {
                return Ok(out);
            }
            out.push(
                serde_json::to_value(lambda_record(r, &info.stream_arn, region))
                    .map_err(|e| CliError(e.to_string()))?,
            );
        }
        // An open shard answers empty pages at its end.
        empty = if records.is_empty() { empty + 1 } else { 0 };
        if out.len() >= info.batch_size || empty >= 3 {
            break;
        }
        iterator = page.next_shard_iterator().map(str::to_string);
    }
    Ok(out)
}

/// The on-failure records' text: the file's, or stdin's for `-`.
fn read_on_failure_text(file: &Path) -> Result<String, CliError> {
    if file.as_os_str() == "-" {
        Ok(std::io::stdin()
            .lock()
            .lines()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CliError(e.to_string()))?
            .join("\n"))
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| CliError(format!("cannot read {}: {e}", file.display())))
    }
}

/// The engine that applies the replayed stream records as the functions
/// would (`g`'s tables, launches through Lambda), the DynamoDB Streams
/// client they are read back with, and the region they name.
async fn replay_engine(
    g: &Global,
) -> Result<
    (
        Engine<LambdaLauncher>,
        aws_sdk_dynamodbstreams::Client,
        String,
    ),
    CliError,
> {
    let sdk = whimbrel_core::aws_config(g.endpoint_url.as_deref()).await;
    let region = sdk
        .region()
        .map_or("us-east-1".to_string(), |r| r.to_string());
    let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
    let config = EngineConfig {
        table_prefix: g.table_prefix.clone(),
        ..EngineConfig::from_env().map_err(CliError)?
    };
    let engine = Engine::new(
        crate::store_for(g).await,
        LambdaLauncher::new(aws_sdk_lambda::Client::new(&sdk)),
        config,
    );
    Ok((engine, streams, region))
}

/// Apply `records`, read back from the stream `arn`, through the handler
/// of the stream's table (the one its function runs), as one event; `line`
/// is the on-failure record's line, for errors.
///
/// Errors: a stream of another table, or the handler refused the event.
async fn apply_records(
    engine: &Engine<LambdaLauncher>,
    arn: &str,
    records: &[Value],
    line: usize,
) -> Result<BatchSummary, CliError> {
    let tables = engine.store().tables();
    let event = json!({ "Records": records });
    let table = arn
        .split(":table/")
        .nth(1)
        .and_then(|t| t.split('/').next())
        .unwrap_or("");
    let result = if table == tables.workflow_request() {
        handlers::workflow_requests(engine, &event).await
    } else if table == tables.activity_event() {
        handlers::activity_events(engine, &event).await
    } else {
        return Err(CliError(format!(
            "line {line}: stream {arn} is not of {} or {}",
            tables.workflow_request(),
            tables.activity_event()
        )));
    };
    let (_, summary) = result.map_err(|e| CliError(format!("line {line}: {e}")))?;
    Ok(summary)
}

/// The JSON line printed for one on-failure record: its shard and range,
/// the records read back, and what applying them did.
fn replayed_line(rec: &OnFailureRecord, records: usize, summary: &BatchSummary) -> Value {
    json!({
        "shard": rec.batch_info.shard_id,
        "start": rec.batch_info.start_sequence_number,
        "end": rec.batch_info.end_sequence_number,
        "records": records,
        "applied": summary.applied,
        "parked": summary.parked,
        "skipped": summary.skipped,
        "rejected": summary.rejected,
        "retry": summary.retried,
    })
}

/// `whimbrel replay FILE`: prints one JSON line per on-failure record
/// (`shard`, `records` read back, the batch `summary`) and fails if a
/// record could not be read or still has records to retry.
pub async fn run(g: &Global, args: ReplayArgs) -> Result<(), CliError> {
    let text = read_on_failure_text(&args.file)?;
    let (engine, streams, region) = replay_engine(g).await?;
    let mut unfinished = 0;
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let rec: OnFailureRecord = serde_json::from_str(line)
            .map_err(|e| CliError(format!("line {}: not an on-failure record: {e}", n + 1)))?;
        let records = read_back(&streams, &rec, &region).await?;
        let summary = apply_records(&engine, &rec.batch_info.stream_arn, &records, n + 1).await?;
        if records.len() < rec.batch_info.batch_size || summary.retried > 0 {
            unfinished += 1;
        }
        println!("{}", replayed_line(&rec, records.len(), &summary));
    }
    if unfinished > 0 {
        return Err(CliError(format!(
            "{unfinished} on-failure record(s) not fully replayed (records gone from the stream, or to retry): run replay again"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::seq_le;

    #[test]
    fn sequence_numbers_compare_as_numbers() {
        assert!(seq_le("9", "10"));
        assert!(seq_le("100", "100"));
        assert!(!seq_le("101", "100"));
        assert!(!seq_le("1000", "999"));
    }
}
