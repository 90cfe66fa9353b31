//! A no-op activity for benchmarks and tests: reports RUNNING then
//! COMPLETED with `{"attempt": N}`. With `{"fail_attempts": K, "error":
//! "Name"}` as its input, attempts 1..=K report FAILED with the error
//! `Name: attempt N of K fails` instead (retries end to end). With
//! `{"output_bytes": B}` its output carries `"pad"`, B bytes (benchmarks
//! of 1 KB outputs; at most 90,000). With `{"sleep_ms": M}` it runs M
//! milliseconds between RUNNING and its end (at most 60,000), so that
//! tests can watch activities in flight.

use serde_json::json;
use whimbrel_core::activity::Reporter;
use whimbrel_core::lambda::{serve, Error};
use whimbrel_core::plan::LaunchPayload;

async fn handle(reporter: &Reporter, payload: LaunchPayload) -> Result<(), Error> {
    let fail_attempts = payload.input["fail_attempts"].as_u64().unwrap_or(0);
    let name = payload.input["error"]
        .as_str()
        .unwrap_or("Failed")
        .to_string();
    let attempt = payload.attempt;
    let output_bytes = payload.input["output_bytes"].as_u64().unwrap_or(0);
    let input = payload.input.clone();
    let activity = reporter.activity(payload);
    activity.running().await?;
    let sleep_ms = payload_sleep_ms(&input);
    if sleep_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(sleep_ms)).await;
    }
    if u64::from(attempt) <= fail_attempts {
        activity
            .failed(format!(
                "{name}: attempt {attempt} of {fail_attempts} fails"
            ))
            .await?;
    } else {
        let pad = payload_pad(output_bytes);
        let output = match pad {
            Some(pad) => json!({"attempt": attempt, "pad": pad}),
            None => json!({"attempt": attempt}),
        };
        activity.completed(output).await?;
    }
    Ok(())
}

/// The run time asked for (`sleep_ms`), at most 60,000 ms.
fn payload_sleep_ms(input: &serde_json::Value) -> u64 {
    input["sleep_ms"].as_u64().unwrap_or(0).min(60_000)
}

/// The output padding asked for, at most 90,000 bytes (within the
/// engine's 100,000-byte output limit).
fn payload_pad(bytes: u64) -> Option<String> {
    (bytes > 0).then(|| "x".repeat(bytes.min(90_000) as usize))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let reporter = Reporter::from_env().await?;
    let reporter = &reporter;
    // Counted like the engine's functions (`whimbrel bench`): what an
    // activity's own reports cost is part of what an activity costs.
    serve(
        "whimbrel-noop",
        reporter.metrics(),
        |payload: LaunchPayload, _| handle(reporter, payload),
    )
    .await
}
