//! The episodic examples' activity (`whimbrel_examples::episodes`):
//! reports RUNNING, then COMPLETED with what its node asks for (a status
//! check, an order's price, an echo).

use lambda_runtime::{service_fn, Error, LambdaEvent};
use whimbrel_core::activity::Reporter;
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
    whimbrel_core::telemetry::init_lambda();
    let reporter = Reporter::from_env().await?;
    let reporter = &reporter;
    lambda_runtime::run(service_fn(
        move |e: LambdaEvent<LaunchPayload>| async move {
            // Counted like whimbrel-noop's (`whimbrel bench`): an activity's
            // own reports are part of what an activity costs, so the
            // episodic chain is priced as the static one is.
            whimbrel_core::metrics::measured(
                "episode-step",
                reporter.metrics(),
                handle(reporter, e.payload),
            )
            .await
        },
    ))
    .await
}
