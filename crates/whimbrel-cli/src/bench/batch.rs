//! `whimbrel bench-batch` (in `make bench`): one stream batch of RUNNING
//! and COMPLETED records of many activities through
//! `handlers::activity_events`, one item at a time and then concurrently;
//! the speed-up, and every activity COMPLETED (per-activity order kept).

use std::time::Instant;
use whimbrel_core::attr;

use aws_lambda_events::event::dynamodb::{EventRecord, StreamRecord, StreamViewType};
use clap::Args;
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, Transition};
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::Engine;
use whimbrel_core::model::ActivityEvent;

use super::inproc::{bench_engine, register_roots, report, start_many, Recorder};
use crate::{CliError, Global};
/// Options of `whimbrel bench-batch`.
#[derive(Args, Debug, Clone)]
pub struct BatchArgs {
    /// Activities in the batch; each has a RUNNING and a COMPLETED record.
    #[arg(long, default_value_t = 50)]
    activities: usize,
    /// Items processed at once in the concurrent run.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Runs of each (a fresh workflow each run); the median is compared.
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// A DynamoDB stream event (the Lambda shape, built with
/// `aws_lambda_events`) of INSERT records of `rows` in `table`.
fn stream_batch(table: &str, rows: &[ActivityEvent]) -> Result<Value, CliError> {
    let records = rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let image: serde_dynamo::Item =
                serde_dynamo::to_item(row).map_err(|e| CliError(e.to_string()))?;
            let mut r = EventRecord::default();
            r.aws_region = "us-east-1".into();
            r.event_id = format!("bench-{i}");
            r.event_name = "INSERT".into();
            r.event_source = Some("aws:dynamodb".into());
            r.event_version = Some("1.1".into());
            r.event_source_arn = Some(format!(
                "arn:aws:dynamodb:us-east-1:000000000000:table/{table}/stream/2026-11-24T00:00:00.000"
            ));
            let mut c = StreamRecord::default();
            let keys: std::collections::HashMap<String, serde_dynamo::AttributeValue> =
                [attr::ACTIVITY_EVENT_ID, attr::ACTIVITY_EXEC_ID]
                    .iter()
                    .filter_map(|k| image.get(*k).map(|v| (k.to_string(), v.clone())))
                    .collect();
            c.keys = keys.into();
            c.new_image = image;
            c.sequence_number = Some(format!("{:021}", i + 1));
            c.stream_view_type = Some(StreamViewType::NewImage);
            r.change = c;
            Ok(r)
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    serde_json::to_value(json!({ "Records": records })).map_err(|e| CliError(e.to_string()))
}

/// One run: a fresh workflow of `width` roots, then one batch of each
/// activity's RUNNING and COMPLETED (in that order per activity,
/// interleaved across activities) through the handler. Returns the
/// handler's wall time, seconds.
async fn batch_run(
    engine: &Engine<Recorder>,
    activities: &Engine<()>,
    name: &str,
) -> Result<f64, CliError> {
    let payloads = start_many(engine, engine.launcher(), name, 1).await?;
    let row = |p, t| report(activities, p, t);
    let mut rows: Vec<ActivityEvent> = payloads
        .iter()
        .map(|p| row(p, Transition::Running))
        .collect();
    rows.extend(payloads.iter().map(|p| row(p, Transition::Completed)));
    let batch = stream_batch(&engine.store().tables().activity_event(), &rows)?;
    let t = Instant::now();
    let (_, summary) = whimbrel_core::handlers::activity_events(engine, &batch)
        .await
        .map_err(|e| CliError(e.to_string()))?;
    let secs = t.elapsed().as_secs_f64();
    let wf = &payloads[0].workflow_exec_id;
    let snap = crate::status::snapshot(engine.store(), wf).await?;
    let done = snap
        .activities
        .iter()
        .filter(|a| a.state == ActivityState::Completed)
        .count();
    if done != payloads.len() || summary.parked > 0 || summary.retried > 0 {
        return Err(CliError(format!(
            "{wf}: {done} of {} COMPLETED, {} parked, {} retried: per-activity order was not kept",
            payloads.len(),
            summary.parked,
            summary.retried
        )));
    }
    Ok(secs)
}

/// `whimbrel bench-batch`: the handler's speed-up from processing the
/// items of one stream batch concurrently.
///
/// Errors: a store error, or a run whose activities did not all complete
/// from the batch alone.
pub async fn run(g: Global, a: BatchArgs) -> Result<(), CliError> {
    let now = Timestamp::now().epoch;
    let name = format!("bench-batch-{}", a.activities);
    let mut medians = Vec::new();
    for concurrency in [1, a.concurrency] {
        let (engine, activities, _) = bench_engine(&g, now, concurrency).await?;
        register_roots(engine.store(), &name, a.activities, json!({})).await?;
        let mut times = Vec::new();
        for _ in 0..a.runs.max(1) {
            times.push(batch_run(&engine, &activities, &name).await?);
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!(
            "batch of {} records ({} activities x RUNNING, COMPLETED), {concurrency:>2} item(s) at once: median {:.3}s (min {:.3}, max {:.3}, {} runs)",
            2 * a.activities,
            a.activities,
            median,
            times[0],
            times[times.len() - 1],
            times.len()
        );
        medians.push(median);
    }
    println!(
        "speed-up from concurrency within a batch: {:.1}x (every activity COMPLETED from the batch alone: per-activity order kept)",
        medians[0] / medians[1]
    );
    Ok(())
}
