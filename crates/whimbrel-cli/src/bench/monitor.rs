//! `whimbrel bench-monitor` (`make bench-monitor`): N RUNNING activities
//! heartbeating through the `Activity` helper, S of them gone quiet; one
//! monitor tick, and what it read (issue 7, target 4).

use std::sync::atomic::Ordering;
use std::time::Instant;
use whimbrel_core::attr;

use clap::Args;
use futures::stream::{self, StreamExt, TryStreamExt};
use serde_json::json;
use whimbrel_core::activity::Activity;
use whimbrel_core::contract::Transition;
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::decide;
use whimbrel_core::store::Value as AttributeValue;
use whimbrel_core::store::{n, Cond, Metrics, UpdateRequest};

use super::inproc::{bench_engine, register_roots, report, start_many};
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
    stream::iter(&payloads)
        .map(|p| {
            let (engine, helper) = (&engine, &helper);
            async move {
                let row = report(helper, p, Transition::Running);
                engine.apply_event(&row).await
            }
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
                    .when(Cond::eq(
                        attr::HEARTBEAT_ENABLED,
                        AttributeValue::Bool(true),
                    ))
                    .set(attr::HEARTBEAT_TIME_EPOCH, n(beat_at));
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
