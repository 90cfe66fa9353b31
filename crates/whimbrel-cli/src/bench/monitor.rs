//! `whimbrel bench-monitor` (`make bench-monitor`): N RUNNING activities
//! heartbeating through the `Activity` helper, S of them gone quiet; one
//! monitor tick, and what it read (it should grow with S, not N).

use std::sync::atomic::Ordering;
use std::time::Instant;
use whimbrel_core::attr;

use clap::Args;
use futures::stream::{self, StreamExt, TryStreamExt};
use serde_json::json;
use whimbrel_core::activity::Activity;
use whimbrel_core::contract::Transition;
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::{decide, Engine};
use whimbrel_core::plan::LaunchPayload;
use whimbrel_core::store::Value as AttributeValue;
use whimbrel_core::store::{n, Cond, Metrics, UpdateRequest};

use super::inproc::{bench_engine, register_roots, report, start_many, Recorder};
use crate::{CliError, Global};

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

/// Register the benchmark's workflow (`--workflow-size` root activities)
/// and start enough workflow executions for `--activities`; returns the
/// launch payloads of their activities.
async fn start_activities(
    engine: &Engine<Recorder>,
    a: &MonitorArgs,
) -> Result<Vec<LaunchPayload>, CliError> {
    let size = a.workflow_size.min(a.activities).max(1);
    let name = format!("bench-monitor-{size}");
    register_roots(
        engine.store(),
        &name,
        size,
        json!({"heartbeat_timeout_seconds": a.heartbeat_timeout, "timeout_seconds": 86_400}),
    )
    .await?;
    let started = Instant::now();
    let workflows = a.activities.div_ceil(size);
    let payloads = start_many(engine, engine.launcher(), &name, workflows).await?;
    println!(
        "started {workflows} workflows of {size}: {} activities launched in {:.1}s",
        payloads.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(payloads)
}

/// Apply the RUNNING event row the `Activity` helper writes for each of
/// `payloads`, `concurrency` at once.
async fn apply_running(
    engine: &Engine<Recorder>,
    helper: &Engine<()>,
    payloads: &[LaunchPayload],
    concurrency: usize,
) -> Result<(), CliError> {
    let running = Instant::now();
    stream::iter(payloads)
        .map(|p| async move {
            let row = report(helper, p, Transition::Running);
            engine.apply_event(&row).await
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    println!(
        "RUNNING applied to all in {:.1}s",
        running.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One heartbeat of the activity launched by `p`: through the `Activity`
/// helper, or with `raw` as an existing client does it (an UpdateItem of
/// `heartbeat_time_epoch` to `beat_at`, nothing else).
async fn heartbeat(
    helper: Engine<()>,
    p: &LaunchPayload,
    raw: bool,
    beat_at: i64,
) -> Result<(), CliError> {
    if !raw {
        return Activity::with_engine(p.clone(), helper)
            .heartbeat()
            .await
            .map(|_| ())
            .map_err(|e| CliError(e.to_string()));
    }
    let store = helper.store();
    let key = decide::activity_key(&p.activity_exec_id, &p.workflow_exec_id);
    let update = UpdateRequest::new(store.tables().activity_exec(), key)
        .when(Cond::eq(
            attr::HEARTBEAT_ENABLED,
            AttributeValue::Bool(true),
        ))
        .set(attr::HEARTBEAT_TIME_EPOCH, n(beat_at));
    store
        .update(update)
        .await
        .map(|_| ())
        .map_err(CliError::from)
}

/// Heartbeat each `live` activity at the clock's time, `--concurrency` at
/// once, and print how long it took (`quiet`: the activities left out).
async fn heartbeat_live(
    helper: &Engine<()>,
    live: &[LaunchPayload],
    quiet: usize,
    a: &MonitorArgs,
) -> Result<(), CliError> {
    let beats = Instant::now();
    let beat_at = helper.now().epoch;
    stream::iter(live)
        .map(|p| heartbeat(helper.clone(), p, a.raw_heartbeats, beat_at))
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
        quiet
    );
    Ok(())
}

/// Run one monitor tick at `at` over `running` RUNNING activities, `quiet`
/// of them stale, and print what it read.
///
/// Errors: a store error, or a tick that did not time out exactly `quiet`.
async fn tick_and_check(
    engine: &Engine<Recorder>,
    at: i64,
    running: usize,
    quiet: usize,
) -> Result<(), CliError> {
    let store = engine.store();
    store.metrics().take();
    store.metrics().take_capacity();
    let tick = Instant::now();
    let r = engine.monitor_tick(at).await?;
    println!();
    println!(
        "one monitor tick with {} RUNNING, {} quiet ({:.2}s): due items swept {}, timed out {}",
        running,
        quiet,
        tick.elapsed().as_secs_f64(),
        r.swept,
        r.timed_out
    );
    let (by_key, rru) = print_reads(store.metrics());
    println!(
        "  the tick read {} due-index keys and {by_key} items by key ({rru:.1} RRU in all), for {} RUNNING activities",
        r.swept,
        running
    );
    if r.timed_out != quiet as u64 {
        return Err(CliError(format!(
            "the tick timed out {} activities, expected {}",
            r.timed_out, quiet
        )));
    }
    Ok(())
}

/// `whimbrel bench-monitor`: set up N RUNNING activities (started,
/// launched and RUNNING through the engine, on a clock the benchmark
/// moves), heartbeat all but S of them through the `Activity` helper
/// after 60 % of the heartbeat timeout, then run one monitor tick past the
/// first deadline and print what it read.
///
/// Errors: a store error, or a tick that did not time out exactly S.
pub async fn run(g: Global, a: MonitorArgs) -> Result<(), CliError> {
    let t0 = Timestamp::now().epoch - 10 * a.heartbeat_timeout;
    let (engine, helper, clock) = bench_engine(&g, t0, a.concurrency).await?;
    let payloads = start_activities(&engine, &a).await?;
    apply_running(&engine, &helper, &payloads, a.concurrency).await?;
    clock
        .0
        .store(t0 + a.heartbeat_timeout * 6 / 10, Ordering::SeqCst);
    let (quiet, live) = payloads.split_at(a.stale.min(payloads.len()));
    heartbeat_live(&helper, live, quiet.len(), &a).await?;
    let at = t0 + a.heartbeat_timeout + engine.config().report_grace_seconds + 5;
    clock.0.store(at, Ordering::SeqCst);
    tick_and_check(&engine, at, payloads.len(), quiet.len()).await
}
