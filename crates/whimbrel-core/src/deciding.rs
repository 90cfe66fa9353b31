//! A Rust decider for episodic workflows (design.md § 10; shapes.md § 7):
//! a [`Decider`] is a function from what the execution is now (its open
//! nodes, markers and the events no decision has seen) to decisions. No
//! history is replayed, so a decider need not be deterministic: it may
//! read the clock, call services, or change between deploys, and whatever
//! it answers is judged against the state as it then is.
//!
//! [`answer`] reads either request a decider receives (the start's
//! `workflow_started` and each episode's `decision`) and writes the
//! answer's JSON; a Lambda main wraps it in `lambda_runtime::service_fn`
//! (`examples/src/bin/polling-decider.rs`). A large output shown by
//! reference (`output_ref`) is read with [`output_of_ref`].

use serde_json::Value;

use crate::decider::{Decision, DecisionRequest, DecisionsAnswer, EventKind, EventView};
use crate::plan::{DeciderRequest, PlannedActivity, SHAPE_VERSION};
use crate::store::Store;

/// An episodic decider.
pub trait Decider: Send + Sync {
    /// The first decisions, on the `workflow_started` request (its input
    /// and ids).
    fn start(&self, request: &DeciderRequest) -> DecisionsAnswer;

    /// An episode's decisions, on what the execution is now and the
    /// events since the last decision.
    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer;
}

/// Why a payload could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum DeciderError {
    /// Neither a `workflow_started` nor a `decision` request.
    #[error("not a decider request: {0}")]
    Request(String),
}

/// Answer `payload`, a decider request of either type, with `decider`:
/// the JSON of its [`DecisionsAnswer`].
///
/// Errors: [`DeciderError::Request`] when `payload` is not a request.
pub fn answer(decider: &dyn Decider, payload: Value) -> Result<Value, DeciderError> {
    let kind = payload.get("type").and_then(Value::as_str).unwrap_or("");
    let answer = match kind {
        crate::decider::request::DECISION_REQUEST_TYPE => {
            let request: DecisionRequest = serde_json::from_value(payload)
                .map_err(|e| DeciderError::Request(e.to_string()))?;
            decider.decide(&request)
        }
        "workflow_started" => {
            let request: DeciderRequest = serde_json::from_value(payload)
                .map_err(|e| DeciderError::Request(e.to_string()))?;
            decider.start(&request)
        }
        other => return Err(DeciderError::Request(format!("type {other:?}"))),
    };
    Ok(serde_json::to_value(answer).expect("an answer serializes"))
}

/// An answer of `decisions`, keeping the events it is consulted on.
pub fn decisions(decisions: Vec<Decision>) -> DecisionsAnswer {
    DecisionsAnswer {
        version: SHAPE_VERSION,
        decisions,
        decide_on: None,
        execution_timeout_seconds: None,
    }
}

/// A `schedule` decision of one node.
pub fn schedule(node: PlannedActivity) -> Decision {
    Decision::Schedule {
        activities: vec![node],
    }
}

/// A node running Lambda `lambda` with `input`.
pub fn lambda_node(name: &str, lambda: &str, input: Value) -> PlannedActivity {
    PlannedActivity {
        name: name.into(),
        lambda: lambda.into(),
        input: (input != Value::Null).then_some(input),
        ..PlannedActivity::default()
    }
}

/// A node on task list `task_list` with `input`.
pub fn task_node(name: &str, task_list: &str, input: Value) -> PlannedActivity {
    PlannedActivity {
        task_list: Some(task_list.into()),
        ..lambda_node(name, "", input)
    }
}

/// A timer node that fires `seconds` after it is scheduled.
pub fn timer_node(name: &str, seconds: i64) -> PlannedActivity {
    PlannedActivity {
        name: name.into(),
        wait: Some(crate::kind::WaitSpec {
            seconds: Some(seconds),
            until: None,
        }),
        ..PlannedActivity::default()
    }
}

/// A node that waits for signal `signal`.
pub fn signal_node(name: &str, signal: &str) -> PlannedActivity {
    PlannedActivity {
        name: name.into(),
        signal: Some(signal.into()),
        ..PlannedActivity::default()
    }
}

/// A child workflow node (design.md § 9.5) that starts registered
/// workflow `workflow` with `input`, and cancels it when the node is
/// cancelled (`parent_close` absent: `cancel`). Its end (the child's
/// chain's last, when the child continues as new) ends the node.
pub fn child_node(name: &str, workflow: &str, input: Value) -> PlannedActivity {
    PlannedActivity {
        name: name.into(),
        workflow: Some(workflow.into()),
        input: (input != Value::Null).then_some(input),
        ..PlannedActivity::default()
    }
}

/// The ends of nodes among `request`'s new events, in order.
pub fn ended(request: &DecisionRequest) -> impl Iterator<Item = &EventView> {
    request
        .events
        .iter()
        .filter(|e| e.kind == EventKind::ActivityEnded)
}

/// The output of an ended node shown by reference (`output_ref`, the
/// node's activity exec id), read from the store.
///
/// Errors: the store's; a missing node reads as `Null`.
pub async fn output_of_ref(
    store: &Store,
    output_ref: &str,
) -> Result<Value, crate::engine::EngineError> {
    let table = store.tables().activity_exec();
    let key = crate::store::KeyCond {
        hash: (
            crate::attr::ACTIVITY_EXEC_ID.into(),
            crate::store::s(output_ref),
        ),
        range: None,
    };
    let execs: Vec<crate::model::ActivityExec> = store.query(&table, None, key).await?;
    let outputs = crate::engine::payloads::outputs_of(store, execs).await?;
    Ok(outputs.into_values().next().unwrap_or(Value::Null))
}
