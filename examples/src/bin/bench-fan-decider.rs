//! The decider of the wide fan-out/fan-in benchmarks (`make bench`):
//! answers a `workflow_started` request with `start` → `width` parallel
//! no-ops → `join` (`whimbrel_examples::fan_plan`; input `{"width": N,
//! "input_bytes": B}`). The activities run `BENCH_NOOP_LAMBDA` (set by
//! template.yaml), or the bare `whimbrel-noop` binary locally.

use whimbrel_core::lambda::{serve, Error};
use whimbrel_core::plan::{DeciderRequest, Plan};
use whimbrel_core::store::Metrics;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let noop = std::env::var("BENCH_NOOP_LAMBDA").unwrap_or_else(|_| "whimbrel-noop".into());
    let noop = &noop;
    serve("bench-fan-decider", &Metrics::default(), |req: DeciderRequest, _| async move {
        let plan: Plan = whimbrel_examples::fan_plan(&req.input, noop);
        tracing::info!(workflow_exec_id = %req.workflow_exec_id, activities = plan.activities.len(), "planned");
        Ok::<_, Error>(plan)
    })
    .await
}
