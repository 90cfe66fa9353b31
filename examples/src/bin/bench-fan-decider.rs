//! The decider of the wide fan-out/fan-in benchmarks (`make bench`):
//! answers a `workflow_started` request with `start` → `width` parallel
//! no-ops → `join` (`whimbrel_examples::fan_plan`; input `{"width": N,
//! "input_bytes": B}`). The activities run `BENCH_NOOP_LAMBDA` (set by
//! template.yaml), or the bare `whimbrel-noop` binary locally.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use whimbrel_core::plan::{DeciderRequest, Plan};

#[tokio::main]
async fn main() -> Result<(), Error> {
    whimbrel_core::telemetry::init_lambda();
    let noop = std::env::var("BENCH_NOOP_LAMBDA").unwrap_or_else(|_| "whimbrel-noop".into());
    let noop = &noop;
    lambda_runtime::run(service_fn(move |e: LambdaEvent<DeciderRequest>| async move {
        let plan: Plan = whimbrel_examples::fan_plan(&e.payload.input, noop);
        tracing::info!(workflow_exec_id = %e.payload.workflow_exec_id, activities = plan.activities.len(), "planned");
        Ok::<_, Error>(plan)
    }))
    .await
}
