//! `whimbrel-heartbeat-monitor`: on an EventBridge schedule, times out
//! activities whose heartbeat went stale, re-drives lost launches and fires
//! timers; fed by the timer queue, judges the items its wake-ups name at
//! their second (see `whimbrel_core::handlers::monitor_event`).

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    whimbrel_core::telemetry::init_lambda();
    whimbrel_core::metrics::init("whimbrel-heartbeat-monitor");
    let engine = whimbrel_core::engine_from_env().await?;
    let engine = &engine;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        // The function's timeout, less a reserve: long loops stop starting
        // work past it and leave the rest owed (engine::budget).
        let result = whimbrel_core::engine::budget::within_lambda(
            event.context.deadline,
            whimbrel_core::metrics::measured(
                "whimbrel-heartbeat-monitor",
                engine.store().metrics(),
                whimbrel_core::handlers::monitor_event(engine, &event.payload),
            ),
        )
        .await;
        let report = result?;
        Ok::<_, Error>(report)
    }))
    .await
}
