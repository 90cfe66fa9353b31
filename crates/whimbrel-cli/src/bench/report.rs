//! What `whimbrel bench` prints once the workflow execution has ended:
//! DynamoDB requests and capacity units per activity, Lambda invocations
//! and GB-seconds per activity, the critical path's latency, and the cost
//! per million activities.

use std::collections::BTreeMap;
use std::time::Duration;

use whimbrel_core::model::ActivityExec;
use whimbrel_core::store::Capacity;

use super::{cost, hops, BenchArgs, FunctionUsage, ENGINE_FUNCTIONS};

/// Print the per-activity tables (requests, capacity, invocations) and
/// sum what the bill needs.
pub(super) fn report(
    by_fn: &BTreeMap<String, FunctionUsage>,
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    activities: u64,
    a: &BenchArgs,
    wall: Duration,
) -> cost::Usage {
    let n = activities.max(1) as f64;
    let mut usage = cost::Usage {
        activities,
        memory_mb: a.memory_mb,
        wall_seconds: wall.as_secs_f64(),
        ..cost::Usage::default()
    };
    print_requests_by_function(by_fn, n, &mut usage);
    print_capacity_by_target(&usage.capacity, n);
    usage.engine_invocations += print_invocations(before, after, n);
    println!(
        "  engine invocations billed per activity: {:.2} (the schedule's are a fixed cost, not counted)",
        usage.engine_invocations as f64 / n
    );
    print_gb_seconds(by_fn, a.memory_mb, n);
    usage
}

/// The capacity a function's requests of operation `op` consumed, over
/// every table and GSI.
fn op_capacity(u: &FunctionUsage, op: &str) -> Capacity {
    u.capacity
        .iter()
        .filter(|(k, _)| k.split(' ').next() == Some(op))
        .fold(Capacity::default(), |t, (_, c)| Capacity {
            read: t.read + c.read,
            write: t.write + c.write,
        })
}

/// DynamoDB operations that write items.
fn is_write(op: &str) -> bool {
    matches!(
        op,
        "PutItem" | "UpdateItem" | "BatchWriteItem" | "TransactWriteItems"
    )
}

/// Print the DynamoDB table by function and operation, per activity, and
/// the items the engine's functions wrote; add each function's capacity
/// and billed seconds to `usage`.
fn print_requests_by_function(
    by_fn: &BTreeMap<String, FunctionUsage>,
    n: f64,
    usage: &mut cost::Usage,
) {
    println!();
    println!("DynamoDB per activity, by function and operation (activities' reports included):");
    println!(
        "  {:<28} {:<20} {:>9} {:>9} {:>9} {:>9}",
        "function", "operation", "requests", "items", "RRU", "WRU"
    );
    let mut engine_writes = 0u64;
    for (f, u) in by_fn {
        for (op, c) in &u.ops {
            let cap = op_capacity(u, op);
            println!(
                "  {:<28} {:<20} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                f,
                op,
                c.requests as f64 / n,
                c.items as f64 / n,
                cap.read / n,
                cap.write / n
            );
            if is_write(op) && ENGINE_FUNCTIONS.contains(&f.as_str()) {
                engine_writes += c.items;
            }
        }
        for (k, c) in &u.capacity {
            let t = usage.capacity.entry(k.clone()).or_default();
            t.read += c.read;
            t.write += c.write;
        }
        usage.billed_seconds += u.billed_seconds;
    }
    println!(
        "  engine write requests per activity: {:.2} (items written by the engine's functions; a transaction's items each count)",
        engine_writes as f64 / n
    );
}

/// Print the capacity per activity by table or GSI (summed over the
/// operations: `capacity` is keyed `"{op} {target}"`).
fn print_capacity_by_target(capacity: &BTreeMap<String, Capacity>, n: f64) {
    println!();
    println!("capacity per activity, by operation and table or GSI (request units):");
    let mut by_target: BTreeMap<&str, Capacity> = BTreeMap::new();
    for (k, c) in capacity {
        let target = k.split_once(' ').map_or(k.as_str(), |(_, t)| t);
        let t = by_target.entry(target).or_default();
        t.read += c.read;
        t.write += c.write;
    }
    for (target, c) in &by_target {
        println!(
            "  {:<70} RRU {:>7.2}  WRU {:>7.2}",
            target,
            c.read / n,
            c.write / n
        );
    }
}

/// Print the Lambda invocations per activity `whimbrel local` counted
/// between `before` and `after`; returns the engine's invocations that
/// are billed (the schedule's are not).
fn print_invocations(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, n: f64) -> u64 {
    println!();
    println!("Lambda invocations per activity (counted by whimbrel local):");
    let mut engine_invocations = 0;
    for (k, v) in after {
        let d = v - before.get(k).copied().unwrap_or(0);
        if d == 0 {
            continue;
        }
        println!("  {:<50} {:>8.2}", k, d as f64 / n);
        let engine = ENGINE_FUNCTIONS.iter().any(|f| k.starts_with(f));
        if engine && !k.contains("(schedule)") {
            engine_invocations += d;
        }
    }
    engine_invocations
}

/// Print each function's GB-seconds per activity at `memory_mb`.
fn print_gb_seconds(by_fn: &BTreeMap<String, FunctionUsage>, memory_mb: u32, n: f64) {
    println!(
        "Lambda GB-seconds per activity (handler durations measured by each function, at {} MB):",
        memory_mb
    );
    for (f, u) in by_fn {
        let gbs = u.billed_seconds * f64::from(memory_mb) / 1024.0;
        println!(
            "  {:<50} {:>10.5} GB-s ({} invocations, {:.1} ms each)",
            f,
            gbs / n,
            u.invocations,
            u.billed_seconds * 1000.0 / u.invocations.max(1) as f64
        );
    }
    println!("  (an activity's own invocation is the work itself, billed as under Step Functions; its GB-s, spent reporting, are counted)");
}

/// Print the latency from a prerequisite's COMPLETED row to its
/// dependent's launch along the critical path, from `whimbrel local`'s
/// timeline of invocations.
pub(super) fn print_critical_path(activities: &[ActivityExec], spans: &[hops::Span]) {
    match hops::critical_path(activities, spans, "whimbrel-activity-event") {
        Some(h) => {
            let at = |q: f64| h.latency_ms[((h.latency_ms.len() - 1) as f64 * q) as usize];
            println!(
                "critical path, a prerequisite's COMPLETED row -> its dependent's launch ({} edges, whimbrel local's timeline): median {} ms, p90 {} ms, max {} ms; stream hops: at most {} per edge",
                h.measured,
                at(0.5),
                at(0.9),
                at(1.0),
                h.max_hops
            );
        }
        None => println!("critical path: no activity with listed prerequisites to measure"),
    }
}

/// Print the cost per million activities, by part, beside Step Functions.
pub(super) fn print_bill(usage: &cost::Usage) {
    let bill = usage.bill();
    println!();
    println!("cost per million activities (list prices, us-east-1, arm64; see `whimbrel_cli` bench/cost.rs):");
    println!(
        "  DynamoDB writes    ${:>8.2}  ({:.2} WRU per activity)",
        bill.writes,
        usage.wru()
    );
    println!(
        "  DynamoDB reads     ${:>8.2}  ({:.2} RRU per activity)",
        bill.reads,
        usage.rru()
    );
    println!("  Lambda requests    ${:>8.2}", bill.requests);
    println!("  Lambda duration    ${:>8.2}", bill.duration);
    println!("  Whimbrel total     ${:>8.2}", bill.total());
    println!(
        "  Step Functions Standard ${:>8.2}  (a Task state per activity, + start and end)",
        bill.sfn_standard
    );
    println!("  Step Functions Express  ${:>8.2}  (one request per workflow, the wall time above at 64 MB)", bill.sfn_express);
}

/// Print the units and the bill per run of the whole workflow (`what`: a
/// redrive), where one run, not one activity, is the unit: the
/// per-activity figures times the workflow's activities.
pub(super) fn print_per_run(usage: &cost::Usage, what: &str) {
    let n = usage.activities.max(1) as f64;
    let bill = usage.bill();
    println!(
        "per {what} (the figures above times {} activities): {:.1} WRU, {:.1} RRU, Whimbrel ${:.2} per million",
        usage.activities,
        usage.wru() * n,
        usage.rru() * n,
        bill.total() * n
    );
}
