//! What the functions measure, in one place: the engine's counters as
//! CloudWatch Embedded Metric Format (namespace [`NAMESPACE`], through the
//! `metrics` facade and the maintained `metrics_cloudwatch_embedded`
//! backend, flushed to stdout after each invocation, where Lambda's log
//! pipeline turns them into metrics), and the store's request counters
//! (`make bench`).
//!
//! Outside a Lambda (tests, the CLI, the simulation) no recorder is
//! installed and every call below is a no-op.

use std::io::Write;
use std::sync::OnceLock;

use crate::store::Metrics;

/// CloudWatch namespace of every Whimbrel metric (template.yaml's
/// dashboard and alarms read it).
pub const NAMESPACE: &str = "Whimbrel";

static EMF: OnceLock<&'static metrics_cloudwatch_embedded::Collector> = OnceLock::new();

/// The environment variable naming the stack (template.yaml sets it to
/// `AWS::StackName`): every metric carries it as the `Stack` dimension, so
/// two stacks in one account keep their metrics apart.
pub const STACK_VAR: &str = "WHIMBREL_STACK";

/// Install the EMF recorder for `function` (a `function` property, not a
/// dimension). Every metric's dimensions are `Stack` (from [`STACK_VAR`],
/// when set), plus `Kind` on `Timeouts` and `Reason` on
/// `TransitionsRejected`: exactly the sets template.yaml's dashboard and
/// alarms read. Call once from a Lambda `main`; later calls do nothing.
pub fn init(function: &str) {
    if EMF.get().is_some() {
        return;
    }
    let mut builder = metrics_cloudwatch_embedded::Builder::new().cloudwatch_namespace(NAMESPACE);
    if let Some(stack) = std::env::var(STACK_VAR).ok().filter(|s| !s.is_empty()) {
        builder = builder.with_dimension("Stack", stack);
    }
    match builder.init() {
        Ok(c) => {
            c.set_property("function", function.to_string());
            let _ = EMF.set(c);
        }
        Err(e) => tracing::warn!(error = %e, "metrics recorder not installed"),
    }
}

/// A transition was applied (a report, or the engine's or monitor's own).
pub fn transition_applied() {
    ::metrics::counter!("TransitionsApplied").increment(1);
}

/// A report arrived before its state allowed it and was parked.
pub fn transition_parked() {
    ::metrics::counter!("TransitionsParked").increment(1);
}

/// An output read back from its event row did not match the digest stored
/// when it was applied: the row was overwritten, and its content not used
/// (template.yaml alarms on it).
pub fn output_mismatch() {
    ::metrics::counter!("OutputMismatches").increment(1);
}

/// A MODIFY stream record: a request or event row was written again under
/// an id already used (the log names the table and key; template.yaml
/// alarms on it).
pub fn row_overwritten() {
    ::metrics::counter!("RowsOverwritten").increment(1);
}

/// The monitor skipped an item it cannot read as its type
/// ([`crate::engine::QUARANTINED`]).
pub fn item_quarantined() {
    ::metrics::counter!("ItemsQuarantined").increment(1);
}

/// A failed attempt was sent back to QUEUED for a retry.
pub fn transition_retried() {
    ::metrics::counter!("TransitionsRetried").increment(1);
}

/// A record was rejected; `reason` is classified into a few stable kinds
/// ([`reject_kind`]) so the `Reason` dimension stays small.
pub fn transition_rejected(reason: &str) {
    ::metrics::counter!("TransitionsRejected", "Reason" => reject_kind(reason)).increment(1);
}

/// A stable kind for a rejection reason (the engine's texts).
pub fn reject_kind(reason: &str) -> &'static str {
    const KINDS: [(&str, &str); 10] = [
        ("quarantined", "Quarantined"),
        ("unknown transition", "UnknownTransition"),
        ("unknown activity exec", "UnknownActivity"),
        ("token", "Fenced"),
        ("live attempt is", "Fenced"),
        ("terminal state", "Terminal"),
        ("has no launched attempt", "NotLaunched"),
        ("may not be requested", "Forbidden"),
        ("is not allowed from", "NotAllowed"),
        ("not a valid", "Malformed"),
    ];
    KINDS
        .iter()
        .find(|(needle, _)| reason.contains(needle))
        .map_or("Other", |(_, kind)| kind)
}

/// The monitor timed an activity out; `kind` names the deadline.
pub fn timeout(kind: &'static str) {
    ::metrics::counter!("Timeouts", "Kind" => kind).increment(1);
}

/// A timer fired (design.md § 9.1), `lateness_seconds` after its fire
/// time (`TimersFired`, `TimerLatenessSeconds`).
pub fn timer_fired(lateness_seconds: i64) {
    ::metrics::counter!("TimersFired").increment(1);
    ::metrics::histogram!("TimerLatenessSeconds").record(lateness_seconds.max(0) as f64);
}

/// A decider answered an episode's request after `elapsed`
/// (`DecisionLatencyMs`, design.md § 10.3).
pub fn decision_latency(elapsed: std::time::Duration) {
    ::metrics::histogram!("DecisionLatencyMs").record(elapsed.as_secs_f64() * 1000.0);
}

/// A child workflow node requested its child (design.md § 9.5,
/// `ChildrenStarted`).
pub fn child_started() {
    ::metrics::counter!("ChildrenStarted").increment(1);
}

/// A child workflow's end reached its node (design.md § 9.5,
/// `ChildrenEnded`).
pub fn child_ended() {
    ::metrics::counter!("ChildrenEnded").increment(1);
}

/// A signal completed a signal wait (design.md § 9.2, `SignalsDelivered`).
pub fn signal_delivered() {
    ::metrics::counter!("SignalsDelivered").increment(1);
}

/// A signal row was received from the stream (`SignalsReceived`), or
/// rejected with a logged reason (`SignalsRejected`).
pub fn signal_received(rejected: bool) {
    let name = if rejected {
        "SignalsRejected"
    } else {
        "SignalsReceived"
    };
    ::metrics::counter!(name).increment(1);
}

/// An activity's slot of its plan's `max_concurrency` was given back
/// (design.md § 9.3, `SlotsFreed`).
pub fn slot_freed() {
    ::metrics::counter!("SlotsFreed").increment(1);
}

/// A wake-up was sent to the timer queue (`WakeUpsSent`).
pub fn wake_up_sent() {
    ::metrics::counter!("WakeUpsSent").increment(1);
}

/// A launch that never started was launched again.
pub fn relaunch() {
    ::metrics::counter!("Relaunches").increment(1);
}

/// A Lambda refused a launch for good.
pub fn launch_failure() {
    ::metrics::counter!("LaunchFailures").increment(1);
}

/// The monitor swept `n` due obligations, the oldest `age` seconds past
/// its due time.
pub fn swept(n: u64, oldest_age_seconds: i64) {
    ::metrics::counter!("ObligationsSwept").increment(n);
    ::metrics::gauge!("OldestObligationAgeSeconds").set(oldest_age_seconds.max(0) as f64);
}

/// A workflow ended after `seconds`.
pub fn workflow_duration(seconds: i64) {
    ::metrics::histogram!("WorkflowDurationSeconds").record(seconds.max(0) as f64);
}

/// `n` given-up stream records were read back and applied by the redrive
/// function ([`crate::redrive`]).
pub fn redriven(n: usize) {
    ::metrics::counter!("RecordsRedriven").increment(n as u64);
}

/// A stream batch of `n` records was handled.
pub fn batch_size(n: usize) {
    ::metrics::histogram!("BatchSize").record(n as f64);
}

/// After an invocation that took `elapsed` (its handler's duration): flush
/// the EMF document to stdout, and log the requests and consumed capacity
/// counted since the last call (and reset them). When
/// `WHIMBREL_METRICS_FILE` is set, also append them as one JSON line
/// `{"function": ..., "duration_ms": ..., "ops": {"UpdateItem": {"requests":
/// n, "items": n}, ...}, "capacity": {"UpdateItem whimbrel_activity_exec":
/// {"read": 0.0, "write": 2.0}, ...}}` to that file (the local benchmark
/// sums these lines).
pub fn emit(function: &str, metrics: &Metrics, elapsed: std::time::Duration) {
    let _ = flush_to(std::io::stdout());
    emit_requests(function, metrics, elapsed);
}

/// Run one invocation's handler, timed, then [`emit`] what it did, whether
/// it succeeded or not: what every function's main wraps its handler in.
/// Returns the handler's result.
pub async fn measured<T>(
    function: &str,
    metrics: &Metrics,
    handler: impl std::future::Future<Output = T>,
) -> T {
    let started = std::time::Instant::now();
    let result = handler.await;
    emit(function, metrics, started.elapsed());
    result
}

/// Write the EMF document of what was recorded since the last flush (one
/// JSON line, nothing when no recorder is installed) to `out`.
///
/// Errors: the writer's.
pub fn flush_to(out: impl std::io::Write) -> std::io::Result<()> {
    match EMF.get() {
        Some(c) => c.flush(out),
        None => Ok(()),
    }
}

fn emit_requests(function: &str, metrics: &Metrics, elapsed: std::time::Duration) {
    let ops = metrics.take();
    let capacity = metrics.take_capacity();
    let line = serde_json::json!({
        "function": function,
        "duration_ms": elapsed.as_secs_f64() * 1000.0,
        "ops": ops,
        "capacity": capacity,
    });
    if !ops.is_empty() {
        tracing::info!(dynamodb_requests = %line, "dynamodb requests");
    }
    if let Ok(path) = std::env::var("WHIMBREL_METRICS_FILE") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            // One write(2) of the whole line: with O_APPEND, lines of
            // processes appending at once do not interleave (`writeln!`
            // on a File may split a line into several writes).
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_counters_are_flushed_as_embedded_metric_format() {
        init("test-function");
        transition_applied();
        timeout("Heartbeat");
        transition_rejected("unknown transition \"DONE\"");
        let mut out = Vec::new();
        flush_to(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let doc: serde_json::Value =
            serde_json::from_str(text.lines().next().expect("one EMF line")).unwrap();
        let aws = &doc["_aws"]["CloudWatchMetrics"];
        assert!(aws.to_string().contains("\"Whimbrel\""), "{text}");
        assert!(
            text.contains("TransitionsApplied") && text.contains("Timeouts"),
            "{text}"
        );
        assert!(text.contains("\"UnknownTransition\""), "{text}");
        assert_eq!(doc["function"], "test-function");
    }

    #[test]
    fn rejection_reasons_fall_into_few_kinds() {
        assert_eq!(
            reject_kind("unknown transition \"DONE\""),
            "UnknownTransition"
        );
        assert_eq!(
            reject_kind("a::b: attempt token does not match the live attempt (stale or forged)"),
            "Fenced"
        );
        assert_eq!(
            reject_kind(
                "a::b: activity is in terminal state COMPLETED; transition X can never apply"
            ),
            "Terminal"
        );
        assert_eq!(reject_kind("something new"), "Other");
    }
}
