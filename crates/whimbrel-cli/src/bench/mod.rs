//! `whimbrel bench`: run one registered workflow on the local stack and
//! report what it cost, measured rather than estimated:
//! * DynamoDB requests and the capacity units DynamoDB reported consumed
//!   (`ReturnConsumedCapacity: INDEXES`), per operation and per table or
//!   GSI, by every function, the activities' own reports included (each
//!   function appends a line per invocation to `WHIMBREL_METRICS_FILE`);
//! * Lambda invocations (counted by `whimbrel local`) and GB-seconds (the
//!   handler durations the functions measured, at the template's memory);
//! * wall time from the request row insert to the workflow's end;
//! * the cost per million activities at list prices ([`cost`]), beside
//!   Step Functions Standard and Express for the same workflow.

pub mod batch;
mod cost;
mod hops;
mod inproc;
pub mod monitor;
mod report;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use whimbrel_core::attr;

use clap::Args;
use serde_json::Value;
use whimbrel_core::store::{Capacity, OpCount, Store};

use crate::{insert_request, store_for, CliError, Global};

/// Options of `whimbrel bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// The registered workflow to run.
    workflow: String,
    /// Input (JSON) for the request.
    #[arg(long)]
    input: Option<String>,
    /// The metrics file the functions append to (WHIMBREL_METRICS_FILE).
    #[arg(long, default_value = ".stack/metrics.jsonl")]
    metrics_file: PathBuf,
    /// `whimbrel local`'s front, for invocation counters.
    #[arg(long, default_value = "http://127.0.0.1:9001")]
    front: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_seconds: u64,
    /// Memory of the functions, MB (template.yaml Globals `MemorySize`),
    /// for GB-seconds.
    #[arg(long, default_value_t = 256)]
    memory_mb: u32,
    /// Instead of starting the workflow, redrive this FAILED or CANCELLED
    /// execution of it (design.md § 9.4) and measure the redrive: from its
    /// request row to the workflow's end again.
    #[arg(long, value_name = "WORKFLOW_EXEC_ID")]
    redrive: Option<String>,
}

/// The functions of the engine (the others are activities).
const ENGINE_FUNCTIONS: &[&str] = &[
    "whimbrel-workflow-request",
    "whimbrel-activity-event",
    "whimbrel-heartbeat-monitor",
];

/// `GET {front}{path}` of `whimbrel local` as JSON, through hyper's
/// client (already in the tree for the AWS SDK).
async fn get_json<T: serde::de::DeserializeOwned>(front: &str, path: &str) -> Result<T, CliError> {
    use http_body_util::{BodyExt, Empty};
    let unreachable = |e: &dyn std::fmt::Display| {
        CliError(format!("cannot reach whimbrel local at {front}: {e}"))
    };
    let uri: hyper::Uri = format!("{}{path}", front.trim_end_matches('/'))
        .parse()
        .map_err(|e| CliError(format!("--front {front}: {e}")))?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<axum::body::Bytes>>();
    let response = client.get(uri).await.map_err(|e| unreachable(&e))?;
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| unreachable(&e))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| CliError(format!("bad answer from {path}: {e}")))
}

/// `whimbrel local`'s invocation counters (`GET /whimbrel/invocations`).
async fn counters(front: &str) -> Result<BTreeMap<String, u64>, CliError> {
    get_json(front, "/whimbrel/invocations").await
}

/// What one function's invocations appended to the metrics file.
#[derive(Debug, Default)]
struct FunctionUsage {
    ops: BTreeMap<String, OpCount>,
    capacity: BTreeMap<String, Capacity>,
    invocations: u64,
    /// Handler durations, each rounded up to 1 ms as Lambda bills, seconds.
    billed_seconds: f64,
}

/// The lines after the first `skip` of the metrics file, summed by
/// function; and how many lines there are.
fn read_metrics(path: &PathBuf, skip: usize) -> (usize, BTreeMap<String, FunctionUsage>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut by_fn: BTreeMap<String, FunctionUsage> = BTreeMap::new();
    for l in lines.iter().skip(skip) {
        let Ok(v) = serde_json::from_str::<Value>(l) else {
            continue;
        };
        let f = v["function"].as_str().unwrap_or("?").to_string();
        let e = by_fn.entry(f).or_default();
        e.invocations += 1;
        e.billed_seconds += v["duration_ms"].as_f64().unwrap_or(0.0).ceil() / 1000.0;
        if let Ok(ops) = serde_json::from_value::<BTreeMap<String, OpCount>>(v["ops"].clone()) {
            for (op, c) in ops {
                let t = e.ops.entry(op).or_default();
                t.requests += c.requests;
                t.items += c.items;
            }
        }
        if let Ok(cap) = serde_json::from_value::<BTreeMap<String, Capacity>>(v["capacity"].clone())
        {
            for (k, c) in cap {
                let t = e.capacity.entry(k).or_default();
                t.read += c.read;
                t.write += c.write;
            }
        }
    }
    (lines.len(), by_fn)
}

/// Poll the workflow execution item until it is terminal, and, for a
/// redrive, has taken redrive request `redrive` (until then it is still
/// the FAILED or CANCELLED it was); one GetItem a poll, so polling adds
/// little load to the local DynamoDB the run is measured on.
///
/// Errors: not ended `--timeout-seconds` after `t0`.
async fn wait_for_workflow_end(
    store: &Store,
    a: &BenchArgs,
    workflow_exec_id: &str,
    redrive: Option<&str>,
    t0: Instant,
) -> Result<(), CliError> {
    let key = std::collections::HashMap::from([
        (
            attr::WORKFLOW_EXEC_ID.to_string(),
            whimbrel_core::store::s(workflow_exec_id),
        ),
        (
            attr::WORKFLOW_NAME.to_string(),
            whimbrel_core::store::s(&a.workflow),
        ),
    ]);
    loop {
        if t0.elapsed() > Duration::from_secs(a.timeout_seconds) {
            return Err(CliError(format!(
                "{workflow_exec_id} did not finish in {}s",
                a.timeout_seconds
            )));
        }
        let wf: Option<whimbrel_core::model::WorkflowExec> = store
            .get(&store.tables().workflow_exec(), key.clone())
            .await
            .unwrap_or(None);
        let taken =
            |w: &whimbrel_core::model::WorkflowExec| redrive.is_none_or(|r| w.redriven_by(r));
        if wf.is_some_and(|w| w.state.is_terminal() && taken(&w)) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Run the benchmark and print the report.
pub async fn run(g: Global, a: BenchArgs) -> Result<(), CliError> {
    let store = store_for(&g).await;
    let input = a
        .input
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| CliError(format!("--input is not JSON: {e}")))?;
    let (skip, _) = read_metrics(&a.metrics_file, 0);
    let before = counters(&a.front).await?;
    let t0 = Instant::now();
    let (redrive_id, wf_id) = match &a.redrive {
        Some(id) => (
            Some(crate::insert_redrive_request(&store, &a.workflow, id).await?),
            id.clone(),
        ),
        None => (
            None,
            insert_request(&store, &a.workflow, input, "whimbrel bench")
                .await?
                .1,
        ),
    };
    wait_for_workflow_end(&store, &a, &wf_id, redrive_id.as_deref(), t0).await?;
    let wall = t0.elapsed();
    let snap = crate::status::snapshot(&store, &wf_id).await?;
    // Let the last invocations append their metrics.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, by_fn) = read_metrics(&a.metrics_file, skip);
    let after = counters(&a.front).await?;

    let activities = snap.activities.len() as u64;
    println!(
        "workflow {} {} ({} activities)",
        wf_id, snap.workflow.state, activities
    );
    let what = if a.redrive.is_some() {
        "redrive request insert"
    } else {
        "request insert"
    };
    println!(
        "wall time, {what} -> {}: {:.2}s",
        snap.workflow.state,
        wall.as_secs_f64()
    );
    let usage = report::report(&by_fn, &before, &after, activities, &a, wall);
    println!();
    if a.redrive.is_some() {
        // The timeline's first launch of each activity is the first run's.
        println!("critical path: not measured for a redrive");
    } else {
        let spans: Vec<hops::Span> = get_json(&a.front, "/whimbrel/timeline").await?;
        report::print_critical_path(&snap.activities, &spans);
    }
    report::print_bill(&usage);
    if a.redrive.is_some() {
        report::print_per_run(&usage, "redrive");
    }
    if snap.workflow.state != whimbrel_core::contract::WorkflowState::Completed {
        return Err(CliError(format!("workflow ended {}", snap.workflow.state)));
    }
    Ok(())
}

#[cfg(test)]
mod counter_tests {
    use super::counters;

    #[tokio::test]
    async fn counters_are_read_from_the_front_over_http() {
        let app = axum::Router::new().route(
            "/whimbrel/invocations",
            axum::routing::get(|| async { axum::Json(serde_json::json!({"whimbrel-noop": 3})) }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let got = counters(&format!("http://{addr}")).await.unwrap();
        assert_eq!(got.get("whimbrel-noop"), Some(&3));
        let down = counters("http://127.0.0.1:1").await.unwrap_err();
        assert!(down.0.contains("cannot reach whimbrel local"), "{}", down.0);
    }
}
