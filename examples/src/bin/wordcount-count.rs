//! The wordcount `count` activity: reports RUNNING, counts its chunk line by
//! line while heartbeating, and reports COMPLETED with `{"counts": {...}}`
//! (or FAILED when its input says `"fail": true`, for the failure demo).

use std::time::{Duration, Instant};

use serde_json::json;
use whimbrel_core::activity::Reporter;
use whimbrel_core::contract::{ActivityState, Transition};
use whimbrel_core::lambda::{serve, Error};
use whimbrel_core::plan::LaunchPayload;

/// Pause between slices so the demo shows activities running side by side.
const SLICE_PAUSE: Duration = Duration::from_millis(150);

async fn handle(reporter: &Reporter, payload: LaunchPayload) -> Result<(), Error> {
    let activity = reporter.activity(payload);
    activity.running().await?;
    let text = activity.payload.input["text"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if activity.payload.input["fail"].as_bool() == Some(true) {
        activity
            .failed("simulated failure: this chunk was asked to fail")
            .await?;
        return Ok(());
    }
    let mut counts = std::collections::HashMap::new();
    let mut last_beat = Instant::now();
    let lines: Vec<&str> = text.lines().collect();
    for (i, slice) in lines.chunks(20).enumerate() {
        for (w, c) in whimbrel_examples::count(&slice.join("\n")) {
            *counts.entry(w).or_insert(0u64) += c;
        }
        if i < 8 {
            tokio::time::sleep(SLICE_PAUSE).await;
        }
        if last_beat.elapsed() >= Duration::from_millis(500) {
            last_beat = Instant::now();
            match activity.heartbeat().await? {
                ActivityState::CancelledRunning => {
                    activity
                        .report(
                            Transition::Cancel,
                            None,
                            Some("cancelled while counting".into()),
                        )
                        .await?;
                    return Ok(());
                }
                // Cancelled or timed out by the engine: stop; no report is
                // accepted any more.
                ActivityState::TimedOut | ActivityState::Cancelled => return Ok(()),
                _ => {}
            }
        }
    }
    activity.completed(json!({ "counts": counts })).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let reporter = Reporter::from_env().await?;
    let reporter = &reporter;
    // Counted like the engine's functions (`whimbrel bench`): what an
    // activity's own reports cost is part of what an activity costs.
    serve(
        "wordcount-count",
        reporter.metrics(),
        |payload: LaunchPayload, _| handle(reporter, payload),
    )
    .await
}
