//! The episodic paths of each function (design.md § 10), for the grants
//! test: what a start, a cancel request, an activity's end, a signal and
//! the monitor do to an execution whose decider is consulted as it runs.

use std::sync::Arc;

use serde_json::{json, Value};
use whimbrel_core::decider::{Decision, DecisionRequest, DecisionsAnswer, EventKind};
use whimbrel_core::deciding::{self, decisions, lambda_node, schedule, Decider};
use whimbrel_core::model::{SignalRow, WorkflowLambda, WorkflowRequest};
use whimbrel_core::plan::DeciderRequest;

use crate::common::{stream_event, Harness};

/// A decider that walks every decision kind: `first`, then `second`
/// (depending on the ended `first`) with a marker, then continue-as-new;
/// a `tick` timer for input `{"timer": true}`; a cancel request cancels,
/// a signal is recorded.
struct Walk;

impl Decider for Walk {
    fn start(&self, request: &DeciderRequest) -> DecisionsAnswer {
        if request.input["timer"] == json!(true) {
            return decisions(vec![schedule(deciding::timer_node("tick", 1))]);
        }
        let marker = Decision::RecordMarker {
            name: "began".into(),
            details: json!({"at": "start"}),
        };
        decisions(vec![
            schedule(lambda_node("first", "f", Value::Null)),
            marker,
        ])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let mut out = vec![];
        for e in &request.events {
            match (e.kind, e.node.as_deref()) {
                (EventKind::CancelRequested, _) => {
                    return decisions(vec![Decision::CancelWorkflow { reason: None }])
                }
                (EventKind::Signal, _) => out.push(Decision::RecordMarker {
                    name: "signalled".into(),
                    details: e.output.clone().unwrap_or(Value::Null),
                }),
                (_, Some("first")) => {
                    let mut second = lambda_node("second", "f", Value::Null);
                    second.depends_on = vec!["first".into()];
                    out.push(schedule(second));
                }
                (_, Some("second")) => {
                    return decisions(vec![Decision::ContinueAsNew {
                        input: json!({"n": 1}),
                    }])
                }
                (_, Some("tick")) => {
                    out.push(schedule(lambda_node("after-tick", "f", Value::Null)))
                }
                _ => {}
            }
        }
        decisions(out)
    }
}

/// Register `ep` with the walking decider.
pub async fn register(h: &Harness) {
    let item = WorkflowLambda {
        workflow_name: "ep".into(),
        lambda: Some("ep-decider".into()),
        definition: None,
        allow: None,
    };
    h.clients
        .put(&h.clients.tables().workflow_lambda(), &item)
        .await
        .unwrap();
    let answer = |payload: Value| Ok(deciding::answer(&Walk, payload).unwrap());
    h.launcher
        .decider_fns
        .lock()
        .unwrap()
        .insert("ep-decider".into(), Arc::new(answer));
}

/// The request start of `ep` with `input`, and its exec id.
pub fn request(h: &Harness, input: Value) -> (WorkflowRequest, String) {
    let req = h.request("ep", Some(input));
    let id = whimbrel_core::ids::workflow_exec_id("ep", &req.workflow_request_id);
    (req, id)
}

/// The workflow-request function's episodic paths: a start, whose first
/// answer schedules and records a marker, then a cancel request its
/// decider answers by cancelling.
pub async fn workflow_request_paths(h: &Harness) {
    register(h).await;
    let (req, id) = request(h, Value::Null);
    super::calls(h);
    let table = h.store.tables().workflow_request();
    let keys = ["workflow_request_id", "workflow_name"];
    let event = stream_event(&table, &keys, &[req], 100);
    whimbrel_core::handlers::workflow_requests(&h.engine, &event)
        .await
        .unwrap();
    assert_eq!(h.activity(&id, "first").await.state.as_str(), "QUEUED");
    let cancel = WorkflowRequest {
        cancel_workflow_exec_id: Some(id.clone()),
        ..h.request("ep", None)
    };
    let event = stream_event(&table, &keys, &[cancel], 110);
    whimbrel_core::handlers::workflow_requests(&h.engine, &event)
        .await
        .unwrap();
    assert_eq!(h.workflow(&id).await.state.as_str(), "CANCELLED");
}

/// The activity-event function's episodic paths: node ends that schedule
/// a dependent of an ended node and continue as new, and a signal no node
/// waits for.
pub async fn activity_event_paths(h: &Harness) {
    register(h).await;
    let (req, id) = request(h, Value::Null);
    h.engine.start_workflow(&req).await.unwrap();
    let signal = SignalRow::new(&id, "nudge", "s1", Some(json!({"x": 1})));
    h.clients
        .put(&h.clients.tables().signal(), &signal)
        .await
        .unwrap();
    super::calls(h);
    let table = h.store.tables().signal();
    let event = stream_event(&table, &["workflow_exec_id", "signal_key"], &[signal], 120);
    whimbrel_core::handlers::client_rows(&h.engine, &event)
        .await
        .unwrap();
    for (k, name) in ["first", "second"].iter().enumerate() {
        let evs = [
            h.event(&id, name, "RUNNING"),
            h.event(&id, name, "COMPLETED"),
        ];
        let (retry, _) = h.deliver(&evs, 130 + 10 * k as u64).await;
        assert!(retry.is_empty(), "{retry:?}");
    }
    let ended = h.workflow(&id).await;
    assert_eq!(ended.state.as_str(), "COMPLETED");
    assert!(ended.continued_as.is_some());
}

/// The monitor's episodic paths: a timer node fired, its end appended and
/// decided on, a node scheduled and launched by the decision.
pub async fn heartbeat_monitor_paths(h: &Harness) {
    register(h).await;
    let (req, id) = request(h, json!({"timer": true}));
    h.engine.start_workflow(&req).await.unwrap();
    let due = h.activity(&id, "tick").await.timing.due_epoch.unwrap();
    super::calls(h);
    h.tick(due).await;
    assert_eq!(h.activity(&id, "after-tick").await.state.as_str(), "QUEUED");
}
