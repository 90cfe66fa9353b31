//! `whimbrel-heartbeat-monitor`: on an EventBridge schedule, times out
//! activities whose heartbeat went stale, re-drives lost launches and fires
//! timers; fed by the timer queue, judges the items its wake-ups name at
//! their second (see `whimbrel_core::handlers::monitor_event`).

use serde_json::Value;
use whimbrel_core::lambda::{serve, Error};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let engine = whimbrel_core::engine_from_env().await?;
    let engine = &engine;
    serve(
        "whimbrel-heartbeat-monitor",
        engine.store().metrics(),
        |event: Value, _| async move {
            Ok::<_, Error>(whimbrel_core::handlers::monitor_event(engine, &event).await?)
        },
    )
    .await
}
