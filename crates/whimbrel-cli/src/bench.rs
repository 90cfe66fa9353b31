//! `whimbrel bench`: run one registered workflow on the local stack and
//! report what it cost, measured rather than estimated: DynamoDB requests
//! per activity by operation (counted by the engine's store and appended by
//! each function to `WHIMBREL_METRICS_FILE`), Lambda invocations per
//! activity (counted by `whimbrel local`), and wall time from the request
//! row insert to the workflow's end.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::Value;
use whimbrel_core::store::{Metrics, OpCount};

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
}

/// On-demand prices used for the cost line (USD, us-east-1, per million).
const WRITE_REQUEST_UNIT: f64 = 0.625;
const READ_REQUEST_UNIT: f64 = 0.125;
const LAMBDA_REQUEST: f64 = 0.20;

/// `whimbrel local`'s invocation counters (`GET /whimbrel/invocations`),
/// through hyper's client (already in the tree for the AWS SDK).
async fn counters(front: &str) -> Result<BTreeMap<String, u64>, CliError> {
    use http_body_util::{BodyExt, Empty};
    let unreachable = |e: &dyn std::fmt::Display| {
        CliError(format!("cannot reach whimbrel local at {front}: {e}"))
    };
    let uri: hyper::Uri = format!("{}/whimbrel/invocations", front.trim_end_matches('/'))
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
    serde_json::from_slice(&body).map_err(|e| CliError(format!("bad counters: {e}")))
}

fn read_metrics(
    path: &PathBuf,
    skip: usize,
) -> (usize, BTreeMap<String, BTreeMap<String, OpCount>>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut by_fn: BTreeMap<String, BTreeMap<String, OpCount>> = BTreeMap::new();
    for l in lines.iter().skip(skip) {
        let Ok(v) = serde_json::from_str::<Value>(l) else {
            continue;
        };
        let f = v["function"].as_str().unwrap_or("?").to_string();
        let Ok(ops) = serde_json::from_value::<BTreeMap<String, OpCount>>(v["ops"].clone()) else {
            continue;
        };
        let e = by_fn.entry(f).or_default();
        for (op, c) in ops {
            let t = e.entry(op).or_default();
            t.requests += c.requests;
            t.items += c.items;
        }
    }
    (lines.len(), by_fn)
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
    let (_, wf_id) = insert_request(&store, &a.workflow, input, "whimbrel bench").await?;
    // Poll the workflow exec item only (one GetItem), so polling adds little
    // load to the local DynamoDB the run is measured on.
    let key = std::collections::HashMap::from([
        (
            "workflow_exec_id".to_string(),
            whimbrel_core::store::s(&wf_id),
        ),
        (
            "workflow_name".to_string(),
            whimbrel_core::store::s(&a.workflow),
        ),
    ]);
    loop {
        if t0.elapsed() > Duration::from_secs(a.timeout_seconds) {
            return Err(CliError(format!(
                "{wf_id} did not finish in {}s",
                a.timeout_seconds
            )));
        }
        let wf: Option<whimbrel_core::model::WorkflowExec> = store
            .get(&store.tables().workflow_exec(), key.clone())
            .await
            .unwrap_or(None);
        if wf.is_some_and(|w| w.state.is_terminal()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let wall = t0.elapsed();
    let snap = crate::status::snapshot(&store, &wf_id).await?;
    // Let the last invocations append their metrics.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, by_fn) = read_metrics(&a.metrics_file, skip);
    let after = counters(&a.front).await?;
    let n = snap.activities.len().max(1) as f64;

    println!(
        "workflow {} {} ({} activities)",
        wf_id,
        snap.workflow.state,
        snap.activities.len()
    );
    println!(
        "wall time, request insert -> {}: {:.2}s",
        snap.workflow.state,
        wall.as_secs_f64()
    );
    println!();
    println!("DynamoDB requests per activity, by operation (engine functions only):");
    println!(
        "  {:<30} {:<20} {:>10} {:>10}",
        "function", "operation", "requests", "items"
    );
    let mut total: BTreeMap<String, OpCount> = BTreeMap::new();
    for (f, ops) in &by_fn {
        for (op, c) in ops {
            println!(
                "  {:<30} {:<20} {:>10.2} {:>10.2}",
                f,
                op,
                c.requests as f64 / n,
                c.items as f64 / n
            );
            let t = total.entry(op.clone()).or_default();
            t.requests += c.requests;
            t.items += c.items;
        }
    }
    let writes = Metrics::write_items(&total) as f64 / n;
    let wru = total
        .iter()
        .map(|(op, c)| match op.as_str() {
            "TransactWriteItems" => 2 * c.items,
            "PutItem" | "UpdateItem" | "BatchWriteItem" => c.items,
            _ => 0,
        })
        .sum::<u64>() as f64
        / n;
    let rru = total
        .iter()
        .map(|(op, c)| match op.as_str() {
            "GetItem" | "BatchGetItem" => c.items,
            "Query" => c.requests,
            _ => 0,
        })
        .sum::<u64>() as f64
        / n;
    let scans = total.get("Scan").map_or(0, |c| c.requests);
    println!("  write items per activity: {writes:.2}  (write request units: {wru:.2}; Scan requests: {scans})");
    println!();
    println!("Lambda invocations per activity:");
    let mut invocations = 0.0;
    for (k, v) in &after {
        let d = v - before.get(k).copied().unwrap_or(0);
        if d > 0 {
            println!("  {:<50} {:>8.2}", k, d as f64 / n);
            if !k.contains("(schedule)") {
                invocations += d as f64;
            }
        }
    }
    let inv = invocations / n;
    println!("  total (without the schedule): {inv:.2}");
    println!();
    let cost = wru * WRITE_REQUEST_UNIT + rru * READ_REQUEST_UNIT + inv * LAMBDA_REQUEST;
    println!(
        "on-demand cost per million activities: ${cost:.2} (DynamoDB writes ${:.2}, reads ${:.2}, Lambda requests ${:.2}; Lambda duration and storage not included)",
        wru * WRITE_REQUEST_UNIT,
        rru * READ_REQUEST_UNIT,
        inv * LAMBDA_REQUEST
    );
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
