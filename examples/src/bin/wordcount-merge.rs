//! The wordcount `merge` activity: sums its prerequisites' counts and
//! reports COMPLETED with the top words (`{"top": [[word, n], ...],
//! "total_words": n, "distinct_words": n}`).

use std::collections::HashMap;

use serde_json::json;
use whimbrel_core::activity::Reporter;
use whimbrel_core::lambda::{serve, Error};
use whimbrel_core::plan::LaunchPayload;

async fn handle(reporter: &Reporter, payload: LaunchPayload) -> Result<(), Error> {
    let activity = reporter.activity(payload);
    activity.running().await?;
    let mut total: HashMap<String, u64> = HashMap::new();
    for output in activity.payload.prerequisites.values() {
        if let Some(counts) = output["counts"].as_object() {
            for (w, c) in counts {
                *total.entry(w.clone()).or_default() += c.as_u64().unwrap_or(0);
            }
        }
    }
    let k = activity.payload.input["top"].as_u64().unwrap_or(20) as usize;
    let top = whimbrel_examples::top(&total, k);
    activity
        .completed(json!({
            "top": top,
            "total_words": total.values().sum::<u64>(),
            "distinct_words": total.len(),
            "chunks": activity.payload.prerequisites.len(),
        }))
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let reporter = Reporter::from_env().await?;
    let reporter = &reporter;
    // Counted like the engine's functions (`whimbrel bench`): what an
    // activity's own reports cost is part of what an activity costs.
    serve(
        "wordcount-merge",
        reporter.metrics(),
        |payload: LaunchPayload, _| handle(reporter, payload),
    )
    .await
}
