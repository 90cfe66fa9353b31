//! Emitting the store's request counters after each invocation, so the cost
//! per activity can be measured (`make bench`).

use std::io::Write;

use crate::store::Metrics;

/// Log the requests counted since the last call (and reset them). When
/// `WHIMBREL_METRICS_FILE` is set, also append them as one JSON line
/// `{"function": ..., "ops": {"UpdateItem": {"requests": n, "items": n}, ...}}`
/// to that file (the local benchmark sums these lines).
pub fn emit(function: &str, metrics: &Metrics) {
    let ops = metrics.take();
    if ops.is_empty() {
        return;
    }
    let line = serde_json::json!({"function": function, "ops": ops});
    tracing::info!(dynamodb_requests = %line, "dynamodb requests");
    if let Ok(path) = std::env::var("WHIMBREL_METRICS_FILE") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}
