//! A child workflow that continues as new (design.md § 9.5, § 10.6),
//! against DynamoDB Local: its parent's node waits on the chain, not on
//! its first execution. The node moves to each next execution in the
//! continue's transaction (`child_run`), the continued executions report
//! nothing, and the chain's last end (its result) ends the node. A
//! parent's cancel closes the execution the node waits on now; a node
//! cancelled before its child continues ends the child instead of letting
//! an unwatched next execution run.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use crate::common::deciders::Chain;
use crate::common::Harness;
use serde_json::json;
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::ids;
use whimbrel_core::model::WorkflowRequest;

/// Register the chain ([`Chain`]) and a parent whose node `kid` runs it
/// as its child; start the parent: its exec id, its node running.
async fn parent(h: &Harness) -> String {
    h.register_decider("chain", "chain-decider", Arc::new(Chain))
        .await;
    let plan = json!({"activities": [
        {"name": "kid", "workflow": "chain", "input": {"n": 0}},
        {"name": "after", "lambda": "f", "depends_on": ["kid"]},
    ]});
    h.register("parent", plan).await;
    let wf = h.start("parent").await;
    assert_eq!(h.activity(&wf, "kid").await.state, ActivityState::Running);
    wf
}

/// The request row `id` of workflow `name`.
async fn request_row(h: &Harness, id: &str, name: &str) -> Option<WorkflowRequest> {
    let key = HashMap::from([
        ("workflow_request_id".to_string(), common::sv(id)),
        ("workflow_name".to_string(), common::sv(name)),
    ]);
    let table = h.store.tables().workflow_request();
    h.store.get(&table, key).await.unwrap()
}

/// Start the node's first child from its request row; its exec id.
async fn start_first(h: &Harness, wf: &str) -> String {
    let node = h.activity(wf, "kid").await;
    let (request_id, exec_id) = node.child_ids().expect("a child node");
    let row = request_row(h, &request_id, "chain")
        .await
        .expect("requested");
    h.engine.start_workflow(&row).await.unwrap();
    exec_id
}

/// Complete `kid`'s step, so its decider answers; if it continued as new,
/// start the next execution from its request row and return its id.
async fn step(h: &Harness, kid: &str) -> Option<String> {
    let running = h.event(kid, "step", "RUNNING");
    h.engine.apply_event(&running).await.unwrap();
    let done = h.event(kid, "step", "COMPLETED");
    h.engine.apply_event(&done).await.unwrap();
    let ended = h.workflow(kid).await;
    let next = ended.continued_as.clone()?;
    let request_id = ids::continued_request_id(kid, "chain");
    let row = request_row(h, &request_id, "chain").await.expect("next");
    assert_eq!(row.parent, ended.parent, "the next keeps the parent link");
    h.engine.start_workflow(&row).await.unwrap();
    Some(next)
}

#[tokio::test]
async fn a_child_that_continues_as_new_ends_its_node_with_the_chains_last_execution() {
    let h = Harness::new().await;
    let wf = parent(&h).await;
    let mut kid = start_first(&h, &wf).await;
    for n in 0..2 {
        let next = step(&h, &kid).await.expect("continued as new");
        let node = h.activity(&wf, "kid").await;
        assert_eq!(node.state, ActivityState::Running, "execution {n}");
        assert_eq!(node.current_child().as_deref(), Some(next.as_str()));
        let ended = h.workflow(&kid).await;
        assert_eq!(ended.due_epoch, None, "a continued execution owes nothing");
        assert_eq!(h.launcher.launches_of("after").len(), 0);
        assert_eq!(h.workflow(&next).await.state, WorkflowState::Running);
        kid = next;
    }
    assert_eq!(step(&h, &kid).await, None, "the last one completes");
    let node = h.activity(&wf, "kid").await;
    assert_eq!(node.state, ActivityState::Completed);
    assert_eq!(node.outcome.output, Some(json!({"n": 2})));
    assert_eq!(h.launcher.launches_of("after").len(), 1);
}

#[tokio::test]
async fn a_parents_cancel_closes_the_execution_its_node_waits_on_now() {
    let h = Harness::new().await;
    let wf = parent(&h).await;
    let first = start_first(&h, &wf).await;
    let now = step(&h, &first).await.expect("continued as new");
    let mut cancel = h.request("parent", None);
    cancel.cancel_workflow_exec_id = Some(wf.clone());
    h.engine.cancel_workflow(&cancel).await.unwrap();
    assert_eq!(h.activity(&wf, "kid").await.state, ActivityState::Cancelled);
    let id = ids::child_cancel_request_id("chain", &now);
    let row = request_row(&h, &id, "chain").await.expect("cancel request");
    assert_eq!(row.cancel_workflow_exec_id.as_deref(), Some(now.as_str()));
    h.engine.cancel_workflow(&row).await.unwrap();
    assert_eq!(h.workflow(&now).await.state, WorkflowState::Cancelled);
}

#[tokio::test]
async fn a_child_whose_node_was_cancelled_ends_cancelled_instead_of_continuing() {
    let h = Harness::new().await;
    let wf = parent(&h).await;
    let kid = start_first(&h, &wf).await;
    let mut cancel = h.request("parent", None);
    cancel.cancel_workflow_exec_id = Some(wf.clone());
    h.engine.cancel_workflow(&cancel).await.unwrap();
    // The node's cancel request for `kid` is not delivered yet when its
    // decider answers `continue_as_new`.
    assert_eq!(step(&h, &kid).await, None, "no next execution");
    let ended = h.workflow(&kid).await;
    assert_eq!(ended.state, WorkflowState::Cancelled);
    let why = ended.error.unwrap_or_default();
    assert!(why.contains("before it continued as new"), "{why}");
    let next_request = ids::continued_request_id(&kid, "chain");
    assert!(request_row(&h, &next_request, "chain").await.is_none());
}

#[tokio::test]
async fn a_continue_whose_next_request_id_is_taken_fails_the_execution_instead_of_retrying() {
    let h = Harness::new().await;
    h.register_decider("chain", "chain-decider", Arc::new(Chain))
        .await;
    let start = h.request("chain", Some(json!({"n": 0})));
    h.engine.start_workflow(&start).await.unwrap();
    let kid = ids::workflow_exec_id("chain", &start.workflow_request_id);
    // Someone who may insert request rows takes the derived next id.
    let mut squatter = h.request("chain", Some(json!({"n": 99})));
    squatter.workflow_request_id = ids::continued_request_id(&kid, "chain");
    let table = h.store.tables().workflow_request();
    h.store.put(&table, &squatter).await.unwrap();
    assert_eq!(step(&h, &kid).await, None, "no next execution");
    let ended = h.workflow(&kid).await;
    assert_eq!(ended.state, WorkflowState::Failed);
    let why = ended.error.unwrap_or_default();
    assert!(
        why.contains("is taken by a row the engine did not write"),
        "{why}"
    );
}
