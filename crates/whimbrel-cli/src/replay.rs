//! `whimbrel replay`: apply stream records that an event source mapping
//! gave up on. The on-failure record (what Lambda sends to the on-failure
//! SQS queue or SNS topic, and what `whimbrel local` writes to its
//! on-failure file) holds the shard and the sequence-number range, not the
//! records: they are read back from the stream while it still retains
//! them (24 hours on AWS) and applied through the engine, as the
//! function would have ([`whimbrel_core::redrive`], what the redrive
//! function does for every on-failure record on its own). By hand it is
//! for what the redrive function could not apply: the messages of the
//! dead-letter queue. Applying is idempotent, so replaying a record that
//! was applied after all changes nothing.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::{CliError, Global};
use serde_json::{json, Value};
use whimbrel_core::engine::Engine;
use whimbrel_core::launcher::LambdaLauncher;
use whimbrel_core::redrive::{self, DynamoDbStreamReader, OnFailureRecord, Redriven};

/// `whimbrel replay` options.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// On-failure records: a file of JSON lines (as `whimbrel local
    /// --on-failure-file` writes, or one SQS message body per line), or
    /// `-` for stdin.
    pub file: PathBuf,
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
/// would (`g`'s tables, launches through Lambda), and the reader of the
/// DynamoDB Streams they are read back from.
async fn replay_engine(
    g: &Global,
) -> Result<(Engine<LambdaLauncher>, DynamoDbStreamReader), CliError> {
    let sdk = whimbrel_core::aws_config(g.endpoint_url.as_deref()).await;
    let region = sdk
        .region()
        .map_or("us-east-1".to_string(), |r| r.to_string());
    let streams = DynamoDbStreamReader::new(aws_sdk_dynamodbstreams::Client::new(&sdk), region);
    let engine = crate::limits::lambda_engine(g).await?;
    Ok((engine, streams))
}

/// The JSON line printed for one on-failure record: its shard and range,
/// the records read back, and what applying them did.
fn replayed_line(rec: &OnFailureRecord, done: &Redriven) -> Value {
    let summary = &done.summary;
    json!({
        "shard": rec.batch_info.shard_id,
        "start": rec.batch_info.start_sequence_number,
        "end": rec.batch_info.end_sequence_number,
        "records": done.read,
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
    let (engine, streams) = replay_engine(g).await?;
    let mut unfinished = 0;
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let rec: OnFailureRecord = serde_json::from_str(line)
            .map_err(|e| CliError(format!("line {}: not an on-failure record: {e}", n + 1)))?;
        let done = redrive::redrive(&engine, &streams, &rec)
            .await
            .map_err(|e| CliError(format!("line {}: {e}", n + 1)))?;
        if !done.complete() {
            unfinished += 1;
        }
        println!("{}", replayed_line(&rec, &done));
    }
    if unfinished > 0 {
        return Err(CliError(format!(
            "{unfinished} on-failure record(s) not fully replayed (records gone from the stream, or to retry): run replay again"
        )));
    }
    Ok(())
}
