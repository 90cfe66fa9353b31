//! In-process scale benchmarks against a DynamoDB (DynamoDB Local for
//! `make bench-monitor` and `make bench`), the engine's own code with a
//! launcher that records launches instead of invoking:
//! * `whimbrel bench-monitor`: N RUNNING activities heartbeating through
//!   the `Activity` helper, S of them gone quiet; one monitor tick, and
//!   what it read (issue 7, target 4);
//! * `whimbrel bench-batch`: one stream batch of RUNNING and COMPLETED
//!   records of many activities through `handlers::activity_events`, one
//!   item at a time and then concurrently; the speed-up, and every
//!   activity COMPLETED (per-activity order kept) (issue 7, target 5).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_lambda_events::event::dynamodb::{EventRecord, StreamRecord, StreamViewType};
use aws_sdk_dynamodb::types::AttributeValue;
use clap::Args;
use futures::stream::{self, StreamExt, TryStreamExt};
use serde_json::{json, Value};
use whimbrel_core::activity::Activity;
use whimbrel_core::contract::ActivityState;
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::{decide, Engine, EngineConfig, Environment};
use whimbrel_core::launcher::{InvokeError, Launcher};
use whimbrel_core::model::{ActivityEvent, WorkflowLambda, WorkflowRequest};
use whimbrel_core::plan::{LaunchPayload, Plan};
use whimbrel_core::store::{n, Cond, Metrics, Store, UpdateRequest};
use whimbrel_core::{ids, install};

use crate::{store_for, CliError, Global};

/// A clock the benchmark moves (epoch seconds) and UUID v4 tokens.
#[derive(Debug)]
struct BenchClock(AtomicI64);

impl Environment for BenchClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_epoch(self.0.load(Ordering::SeqCst))
    }
    fn new_token(&self) -> String {
        uuid::Uuid::new_v4().simple().to_string()
    }
}

/// Keeps every async launch's payload; invokes nothing.
#[derive(Debug, Clone, Default)]
struct Recorder(Arc<Mutex<Vec<LaunchPayload>>>);

impl Launcher for Recorder {
    async fn invoke_sync(&self, function: &str, _: &Value) -> Result<Value, InvokeError> {
        Err(InvokeError::Rejected {
            function: function.into(),
            message: "benchmarks register static plans".into(),
        })
    }
    async fn invoke_async(&self, function: &str, payload: &Value) -> Result<(), InvokeError> {
        let p = serde_json::from_value(payload.clone()).map_err(|e| InvokeError::Rejected {
            function: function.into(),
            message: e.to_string(),
        })?;
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(p);
        Ok(())
    }
}

impl Recorder {
    fn take(&self) -> Vec<LaunchPayload> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The engine of a benchmark: `g`'s tables, created if missing, a clock
/// at `epoch` and `concurrency` items at once.
async fn bench_engine(
    g: &Global,
    epoch: i64,
    concurrency: usize,
) -> Result<(Engine<Recorder>, Arc<BenchClock>), CliError> {
    let store = store_for(g).await;
    install::install(&store).await?;
    let clock = Arc::new(BenchClock(AtomicI64::new(epoch)));
    let config = EngineConfig {
        table_prefix: g.table_prefix.clone(),
        concurrency,
        ..EngineConfig::default()
    };
    let engine = Engine::with_environment(store, Recorder::default(), config, clock.clone());
    Ok((engine, clock))
}

/// Register `name` as `width` root activities with `extra` settings each.
async fn register_roots(
    store: &Store,
    name: &str,
    width: usize,
    extra: Value,
) -> Result<(), CliError> {
    let activities: Vec<Value> = (0..width)
        .map(|i| {
            let mut a = json!({"name": format!("a-{i}"), "lambda": "whimbrel-noop"});
            if let (Some(a), Some(x)) = (a.as_object_mut(), extra.as_object()) {
                a.extend(x.clone());
            }
            a
        })
        .collect();
    let plan: Plan = serde_json::from_value(json!({ "activities": activities }))
        .map_err(|e| CliError(format!("bench plan: {e}")))?;
    plan.validate()
        .map_err(|e| CliError(format!("bench plan: {e}")))?;
    let item = WorkflowLambda {
        workflow_name: name.into(),
        lambda: None,
        definition: Some(plan),
    };
    store.put(&store.tables().workflow_lambda(), &item).await?;
    Ok(())
}

/// Start `count` workflows of `name` in-process (Full Logic API) and
/// return the launch payloads of their activities.
async fn start_many<L: Launcher>(
    engine: &Engine<L>,
    recorder: &Recorder,
    name: &str,
    count: usize,
) -> Result<Vec<LaunchPayload>, CliError> {
    let now = engine.now();
    stream::iter(0..count)
        .map(|_| async move {
            let row = WorkflowRequest {
                workflow_request_id: ids::new_id(name),
                workflow_name: name.into(),
                when: Some(now.date_list()),
                when_epoch: Some(now.epoch as f64),
                source: Some("whimbrel bench".into()),
                manual: Some(true),
                input: None,
                expires_at_epoch: None,
            };
            engine.start_workflow(&row).await
        })
        .buffer_unordered(4)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(recorder.take())
}

/// The event row an activity writes for `transition` of launch `p`.
fn report(p: &LaunchPayload, transition: &str, now: Timestamp) -> ActivityEvent {
    ActivityEvent {
        activity_event_id: ids::new_id(&p.activity_exec_id),
        activity_exec_id: p.activity_exec_id.clone(),
        transition: transition.into(),
        when: Some(now.date_list()),
        when_epoch: Some(now.epoch as f64),
        source: Some("whimbrel bench".into()),
        manual: None,
        output: (transition == "COMPLETED").then(|| json!({"ok": true})),
        error: None,
        activity_name: Some(p.activity_name.clone()),
        workflow_exec_id: Some(p.workflow_exec_id.clone()),
        workflow_name: Some(p.workflow_name.clone()),
        attempt: Some(p.attempt),
        attempt_token: p.attempt_token.clone(),
        expires_at_epoch: None,
    }
}

/// Print a store's requests and items by operation and its read units by
/// table or index since the last take; returns the items read by key
/// (GetItem, BatchGetItem) and the read units in all.
fn print_reads(metrics: &Metrics) -> (u64, f64) {
    let ops = metrics.take();
    let capacity = metrics.take_capacity();
    for (op, c) in &ops {
        println!("  {op:<20} {:>8} requests {:>8} items", c.requests, c.items);
    }
    let by_key = ["GetItem", "BatchGetItem"]
        .iter()
        .filter_map(|op| ops.get(*op))
        .map(|c| c.items)
        .sum();
    let mut rru = 0.0;
    for (k, c) in capacity.iter().filter(|(_, c)| c.read > 0.0) {
        println!("  {k:<70} RRU {:>8.1}", c.read);
        rru += c.read;
    }
    (by_key, rru)
}

/// Options of `whimbrel bench-monitor`.
#[derive(Args, Debug, Clone)]
pub struct MonitorArgs {
    /// RUNNING activities in all.
    #[arg(long, default_value_t = 100_000)]
    activities: usize,
    /// Of them, how many stop heartbeating.
    #[arg(long, default_value_t = 10)]
    stale: usize,
    /// Activities per workflow (at most the plan limit).
    #[arg(long, default_value_t = 2_000)]
    workflow_size: usize,
    /// Their heartbeat timeout, seconds.
    #[arg(long, default_value_t = 300)]
    heartbeat_timeout: i64,
    /// Requests at once while setting up.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Heartbeat as an existing client does instead (an UpdateItem of
    /// `heartbeat_time_epoch` only, which leaves the due marker): the
    /// tick then reads every activity whose marker came due.
    #[arg(long)]
    raw_heartbeats: bool,
}

/// `whimbrel bench-monitor`: set up N RUNNING activities (started,
/// launched and RUNNING through the engine, on a clock the benchmark
/// moves), heartbeat all but S of them through the `Activity` helper
/// after 60 % of the heartbeat timeout, then run one monitor tick past the
/// first deadline and print what it read.
///
/// Errors: a store error, or a tick that did not time out exactly S.
pub async fn monitor(g: Global, a: MonitorArgs) -> Result<(), CliError> {
    let t0 = Timestamp::now().epoch - 10 * a.heartbeat_timeout;
    let (engine, clock) = bench_engine(&g, t0, a.concurrency).await?;
    let store = engine.store().clone();
    let size = a.workflow_size.min(a.activities).max(1);
    let name = format!("bench-monitor-{size}");
    register_roots(
        &store,
        &name,
        size,
        json!({"heartbeat_timeout_seconds": a.heartbeat_timeout, "timeout_seconds": 86_400}),
    )
    .await?;
    let started = Instant::now();
    let workflows = a.activities.div_ceil(size);
    let payloads = start_many(&engine, engine.launcher(), &name, workflows).await?;
    println!(
        "started {workflows} workflows of {size}: {} activities launched in {:.1}s",
        payloads.len(),
        started.elapsed().as_secs_f64()
    );
    let running = Instant::now();
    let now = engine.now();
    stream::iter(&payloads)
        .map(|p| {
            let engine = &engine;
            async move { engine.apply_event(&report(p, "RUNNING", now)).await }
        })
        .buffer_unordered(a.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    println!(
        "RUNNING applied to all in {:.1}s",
        running.elapsed().as_secs_f64()
    );
    clock
        .0
        .store(t0 + a.heartbeat_timeout * 6 / 10, Ordering::SeqCst);
    let beats = Instant::now();
    let helper =
        Engine::with_environment(store.clone(), (), engine.config().clone(), clock.clone());
    let (quiet, live) = payloads.split_at(a.stale.min(payloads.len()));
    let beat_at = helper.now().epoch;
    stream::iter(live)
        .map(|p| {
            let helper = helper.clone();
            async move {
                if !a.raw_heartbeats {
                    return Activity::with_engine(p.clone(), helper)
                        .heartbeat()
                        .await
                        .map(|_| ())
                        .map_err(|e| CliError(e.to_string()));
                }
                let store = helper.store();
                let key = decide::activity_key(&p.activity_exec_id, &p.workflow_exec_id);
                let raw = UpdateRequest::new(store.tables().activity_exec(), key)
                    .when(Cond::eq("heartbeat_enabled", AttributeValue::Bool(true)))
                    .set("heartbeat_time_epoch", n(beat_at));
                store
                    .update(raw, false)
                    .await
                    .map(|_| ())
                    .map_err(CliError::from)
            }
        })
        .buffer_unordered(a.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    println!(
        "{} heartbeats {} in {:.1}s; {} activities quiet",
        live.len(),
        if a.raw_heartbeats {
            "as raw updates of heartbeat_time_epoch"
        } else {
            "through the Activity helper"
        },
        beats.elapsed().as_secs_f64(),
        quiet.len()
    );
    let at = t0 + a.heartbeat_timeout + engine.config().report_grace_seconds + 5;
    clock.0.store(at, Ordering::SeqCst);
    store.metrics().take();
    store.metrics().take_capacity();
    let tick = Instant::now();
    let r = engine.monitor_tick(at).await?;
    println!();
    println!(
        "one monitor tick with {} RUNNING, {} quiet ({:.2}s): due items swept {}, timed out {}",
        payloads.len(),
        quiet.len(),
        tick.elapsed().as_secs_f64(),
        r.swept,
        r.timed_out
    );
    let (by_key, rru) = print_reads(store.metrics());
    println!(
        "  the tick read {} due-index keys and {by_key} items by key ({rru:.1} RRU in all), for {} RUNNING activities",
        r.swept,
        payloads.len()
    );
    if r.timed_out != quiet.len() as u64 {
        return Err(CliError(format!(
            "the tick timed out {} activities, expected {}",
            r.timed_out,
            quiet.len()
        )));
    }
    Ok(())
}

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
                ["activity_event_id", "activity_exec_id"]
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
async fn batch_run(engine: &Engine<Recorder>, name: &str) -> Result<f64, CliError> {
    let payloads = start_many(engine, engine.launcher(), name, 1).await?;
    let now = engine.now();
    let mut rows: Vec<ActivityEvent> = payloads.iter().map(|p| report(p, "RUNNING", now)).collect();
    rows.extend(payloads.iter().map(|p| report(p, "COMPLETED", now)));
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
pub async fn batch(g: Global, a: BatchArgs) -> Result<(), CliError> {
    let now = Timestamp::now().epoch;
    let name = format!("bench-batch-{}", a.activities);
    let mut medians = Vec::new();
    for concurrency in [1, a.concurrency] {
        let (engine, _) = bench_engine(&g, now, concurrency).await?;
        register_roots(engine.store(), &name, a.activities, json!({})).await?;
        let mut times = Vec::new();
        for _ in 0..a.runs.max(1) {
            times.push(batch_run(&engine, &name).await?);
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
