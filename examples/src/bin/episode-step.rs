//! The episodic examples' activity (`whimbrel_examples::episodes`):
//! reports RUNNING, then COMPLETED with what its node asks for (a status
//! check, an order's price, an echo).

use whimbrel_core::activity::Reporter;
use whimbrel_core::lambda::{serve, Error};
use whimbrel_core::plan::LaunchPayload;

async fn handle(reporter: &Reporter, payload: LaunchPayload) -> Result<(), Error> {
    let activity = reporter.activity(payload);
    activity.running().await?;
    let p = &activity.payload;
    let output = whimbrel_examples::episodes::step_output(&p.activity_name, &p.input);
    activity.completed(output).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let reporter = Reporter::from_env().await?;
    let reporter = &reporter;
    // Counted like the engine's functions (`whimbrel bench`): what an
    // activity's own reports cost is part of what an activity costs.
    serve(
        "episode-step",
        reporter.metrics(),
        |payload: LaunchPayload, _| handle(reporter, payload),
    )
    .await
}
