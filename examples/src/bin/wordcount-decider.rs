//! The wordcount decider: answers a `workflow_started` request with a plan
//! of N parallel `count` activities and one `merge` (design.md § 4).
//! Function names come from `WORDCOUNT_COUNT_LAMBDA` / `WORDCOUNT_MERGE_LAMBDA`
//! (set by template.yaml), or the bare binary names locally.

use whimbrel_core::lambda::{serve, Error};
use whimbrel_core::plan::{DeciderRequest, Plan};
use whimbrel_core::store::Metrics;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let count =
        std::env::var("WORDCOUNT_COUNT_LAMBDA").unwrap_or_else(|_| "wordcount-count".into());
    let merge =
        std::env::var("WORDCOUNT_MERGE_LAMBDA").unwrap_or_else(|_| "wordcount-merge".into());
    let (count, merge) = (&count, &merge);
    serve("wordcount-decider", &Metrics::default(), |req: DeciderRequest, _| async move {
        let plan: Plan = whimbrel_examples::wordcount_plan(&req.input, count, merge);
        tracing::info!(workflow_exec_id = %req.workflow_exec_id, activities = plan.activities.len(), "planned");
        Ok::<_, Error>(plan)
    })
    .await
}
