//! `whimbrel local --warm N`: before the front listens and the mappings
//! poll, invoke every function of the template, so the stack is up only
//! once every function answers, so the first workflow does not wait for
//! process starts (`whimbrel instances` started them, or `cargo lambda
//! watch` starts them now). A function fed by a stream gets an empty
//! batch (`{"Records": []}`), a scheduled one a Scheduled Event (one
//! monitor tick), each once; every other function (deciders, activities)
//! gets `{"whimbrel_warm_up": true}` N times at once, so N of its
//! instances run. Those answer with an error, as they should for a
//! payload that is not theirs; only whether the process answered counts.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use futures::future::join_all;
use serde_json::json;
use tracing::{info, warn};

use super::{scheduled_event, Outcome, Runner};

/// The warm-up payload of a function and how many at once.
fn warm_up(runner: &Runner, f: &super::template::FunctionConfig, n: usize) -> (Bytes, usize) {
    if !f.stream_mappings.is_empty() {
        (Bytes::from(json!({"Records": []}).to_string()), 1)
    } else if f.scheduled {
        (Bytes::from(scheduled_event(&runner.region).to_string()), 1)
    } else {
        (
            Bytes::from(json!({"whimbrel_warm_up": true}).to_string()),
            n.max(1),
        )
    }
}

impl Runner {
    /// Invoke every function of the template (see the module), `n`
    /// instances of each activity or decider, and log how long it took.
    pub(super) async fn warm(self: &Arc<Self>, n: usize) {
        let started = Instant::now();
        let calls = self.template.functions.values().flat_map(|f| {
            let (payload, k) = warm_up(self, f, n);
            let timeout = self.timeout(&f.binary);
            (0..k).map(move |_| {
                let (runner, binary, payload) = (self.clone(), f.binary.clone(), payload.clone());
                async move {
                    let outcome = runner.invoke(&binary, payload, timeout).await;
                    (binary, outcome)
                }
            })
        });
        let outcomes = join_all(calls).await;
        let unreachable: Vec<&String> = outcomes
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::NotDelivered(_) | Outcome::TimedOut(_)))
            .map(|(f, _)| f)
            .collect();
        if !unreachable.is_empty() {
            warn!(functions = ?unreachable, "warm-up: not answered; their first invocations start them");
        }
        info!(
            invocations = outcomes.len(),
            seconds = started.elapsed().as_secs_f64(),
            "warm-up done"
        );
    }
}
