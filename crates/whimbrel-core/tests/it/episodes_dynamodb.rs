//! Episodic executions (design.md § 10, issue 24), against DynamoDB Local:
//! a decider consulted as the workflow runs, written with the core's
//! decider helper (`whimbrel_core::deciding`). A polling loop of timers, a
//! branch on a result that waits for a signal, refused answers shown to
//! the next decision and counted, and continue-as-new.

use crate::common;

use std::sync::Arc;

use crate::common::{stream_event, Harness};
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::decider::{Decision, DecisionRequest, DecisionsAnswer, EventKind};
use whimbrel_core::deciding::{self, decisions, ended, lambda_node, schedule, Decider};
use whimbrel_core::handlers;
use whimbrel_core::model::{SignalRow, WorkflowRequest};
use whimbrel_core::plan::DeciderRequest;

/// Register `name` with decider `lambda`, answered in-process by `decider`.
async fn register(h: &Harness, name: &str, lambda: &str, decider: Arc<dyn Decider>) {
    h.register_decider(name, lambda, decider).await;
}

/// Start `name` with `input`; its workflow exec id.
async fn start(h: &Harness, name: &str, input: Value) -> String {
    let req = h.request(name, Some(input));
    h.engine.start_workflow(&req).await.expect("start");
    whimbrel_core::ids::workflow_exec_id(name, &req.workflow_request_id)
}

/// RUNNING, then COMPLETED with `output`, for node `name` of `wf`.
async fn complete(h: &Harness, wf: &str, name: &str, output: Value) {
    let running = h.event(wf, name, "RUNNING");
    h.engine.apply_event(&running).await.unwrap();
    let mut done = h.event(wf, name, "COMPLETED");
    done.output = Some(output);
    h.engine.apply_event(&done).await.unwrap();
}

/// The decision requests `lambda` was invoked with, episodes only.
fn episode_requests(h: &Harness, lambda: &str) -> Vec<DecisionRequest> {
    (h.launcher.decider_requests.lock().unwrap().iter())
        .filter(|(f, p)| f == lambda && p["type"] == "decision")
        .map(|(_, p)| serde_json::from_value(p.clone()).unwrap())
        .collect()
}

/// Check a status; if it is not ready, wait 2 s and check again.
struct Polling;

impl Decider for Polling {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        decisions(vec![schedule(lambda_node(
            "check-1",
            "episode-step",
            json!({"check": 1}),
        ))])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let mut out = vec![];
        for e in ended(request) {
            let node = e.node.as_deref().unwrap_or_default();
            if let Some(k) = node.strip_prefix("check-") {
                let k: u32 = k.parse().unwrap();
                let ready = e.output.as_ref().and_then(|o| o["ready"].as_bool());
                if ready == Some(true) {
                    let done = Decision::CompleteWorkflow {
                        result: json!({"checks": k}),
                    };
                    return decisions(vec![done]);
                }
                out.push(schedule(deciding::timer_node(&format!("wait-{k}"), 2)));
            } else if let Some(k) = node.strip_prefix("wait-") {
                let next = k.parse::<u32>().unwrap() + 1;
                let check = lambda_node(
                    &format!("check-{next}"),
                    "episode-step",
                    json!({"check": next}),
                );
                out.push(schedule(check));
            }
        }
        decisions(out)
    }
}

#[tokio::test]
async fn a_polling_loop_waits_between_checks_and_completes_on_the_fifth() {
    let h = Harness::new().await;
    register(&h, "polling", "polling-decider", Arc::new(Polling)).await;
    let wf = start(&h, "polling", json!({"order": 7})).await;
    assert!(h.workflow(&wf).await.is_episodic());
    for k in 1..=5 {
        let check = format!("check-{k}");
        assert_eq!(
            h.launcher.launches_of(&check).len(),
            1,
            "{check} launched once"
        );
        complete(&h, &wf, &check, json!({"ready": k == 5})).await;
        if k == 5 {
            break;
        }
        let wait = h.activity(&wf, &format!("wait-{k}")).await;
        assert_eq!(wait.state, ActivityState::Running);
        let due = wait
            .timing
            .due_epoch
            .expect("a timer is due at its fire time");
        assert_eq!(due, wait.timing.start_time_epoch + 2);
        h.tick(due).await;
    }
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Completed);
    assert_eq!(done.result, Some(json!({"checks": 5})));
    assert_eq!(done.due_epoch, None, "nothing is owed once it ended");
    // Nine episodes (five checks, four timers), each shown its one event,
    // the workflow's input, and no ended node among the open ones.
    let requests = episode_requests(&h, "polling-decider");
    assert_eq!(requests.len(), 9);
    for (i, r) in requests.iter().enumerate() {
        assert_eq!(r.events.len(), 1, "request {i}: {r:?}");
        assert_eq!(r.events[0].seq, i as u64 + 1);
        assert_eq!(r.input, json!({"order": 7}));
        assert!(
            r.open.is_empty(),
            "request {i} shows an ended node: {:?}",
            r.open
        );
    }
    recorded_for_python(&h, &wf);
}

/// The requests the polling decider was invoked with and its answers,
/// with ids and times made constant: the Python decider's test
/// (`examples/python-decider/test_decider.py`) answers the same requests
/// and must give the same answers. The file is checked in; this test
/// fails when the engine's requests change shape, and writes it again
/// with `WHIMBREL_RECORD_FIXTURES=1`.
fn recorded_for_python(h: &Harness, wf: &str) {
    let requests = h.launcher.decider_requests.lock().unwrap().clone();
    let request_id = requests[0].1["workflow_request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let ids = [
        (wf, "polling::EXEC"),
        (request_id.as_str(), "polling::REQUEST"),
    ];
    let recorded: Vec<Value> = (requests.iter())
        .map(|(_, request)| {
            let answer = deciding::answer(&Polling, request.clone()).unwrap();
            constant(json!({"request": request, "answer": answer}), &ids)
        })
        .collect();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/python-decider/recorded-polling.json"
    );
    let text = serde_json::to_string_pretty(&recorded).unwrap() + "\n";
    if std::env::var("WHIMBREL_RECORD_FIXTURES").as_deref() == Ok("1") {
        std::fs::write(path, &text).unwrap();
    }
    let kept =
        std::fs::read_to_string(path).expect("recorded requests (WHIMBREL_RECORD_FIXTURES=1)");
    assert_eq!(
        kept, text,
        "the decider requests changed: WHIMBREL_RECORD_FIXTURES=1 records them again"
    );
}

/// `v` with every id of `ids` replaced by its stand-in, and every time
/// (`*_epoch`, `fired_at`) 0.
fn constant(v: Value, ids: &[(&str, &str)]) -> Value {
    match v {
        Value::String(s) => Value::String(ids.iter().fold(s, |s, (id, by)| s.replace(id, by))),
        Value::Array(a) => Value::Array(a.into_iter().map(|x| constant(x, ids)).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, x)| {
                    let timed = k.ends_with("epoch") || k == "fired_at";
                    (k, if timed { json!(0) } else { constant(x, ids) })
                })
                .collect(),
        ),
        other => other,
    }
}

/// An order over 100 waits for an `approve` signal; one under ships at
/// once.
struct Orders;

impl Decider for Orders {
    fn start(&self, request: &DeciderRequest) -> DecisionsAnswer {
        let price = lambda_node("price", "pricing", request.input.clone());
        decisions(vec![schedule(price)])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let mut out = vec![];
        for e in ended(request) {
            match e.node.as_deref() {
                Some("price") if e.output.as_ref().unwrap()["total"].as_i64() > Some(100) => {
                    out.push(schedule(deciding::signal_node("approval", "approve")));
                }
                Some("price") | Some("approval") => {
                    out.push(schedule(lambda_node("ship", "shipping", Value::Null)));
                }
                Some("ship") => out.push(Decision::CompleteWorkflow {
                    result: json!({"shipped": true}),
                }),
                _ => {}
            }
        }
        decisions(out)
    }
}

#[tokio::test]
async fn a_branch_on_a_result_waits_for_a_signal_only_over_the_threshold() {
    let h = Harness::new().await;
    register(&h, "orders", "orders-decider", Arc::new(Orders)).await;
    // Under the threshold: ships at once.
    let small = start(&h, "orders", json!({"items": 1})).await;
    complete(&h, &small, "price", json!({"total": 40})).await;
    assert_eq!(h.launcher.launches_of("ship").len(), 1);
    complete(&h, &small, "ship", json!({})).await;
    assert_eq!(h.workflow(&small).await.state, WorkflowState::Completed);
    // Over it: waits for the signal, then ships.
    let big = start(&h, "orders", json!({"items": 9})).await;
    complete(&h, &big, "price", json!({"total": 400})).await;
    let wait = h.activity(&big, "approval").await;
    assert_eq!(wait.state, ActivityState::Running);
    assert_eq!(h.launcher.launches_of("ship").len(), 1, "not shipped yet");
    let row = SignalRow::new(&big, "approve", "s-1", Some(json!({"by": "ana"})));
    h.store.put(&h.store.tables().signal(), &row).await.unwrap();
    let table = h.store.tables().signal();
    let event = stream_event(&table, &["workflow_exec_id", "signal_key"], &[row], 1);
    handlers::client_rows(&h.engine, &event).await.unwrap();
    assert_eq!(h.launcher.launches_of("ship").len(), 2);
    complete(&h, &big, "ship", json!({})).await;
    let done = h.workflow(&big).await;
    assert_eq!(done.state, WorkflowState::Completed);
    assert_eq!(done.result, Some(json!({"shipped": true})));
}

/// Schedules a node depending on one that does not exist, every time.
struct Wrong;

impl Decider for Wrong {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        decisions(vec![schedule(lambda_node("a", "f", Value::Null))])
    }

    fn decide(&self, _: &DecisionRequest) -> DecisionsAnswer {
        let mut b = lambda_node("b", "f", Value::Null);
        b.depends_on = vec!["nowhere".into()];
        decisions(vec![schedule(b)])
    }
}

#[tokio::test]
async fn refused_answers_are_shown_with_their_reason_and_fail_the_workflow_at_the_limit() {
    let h = Harness::new().await;
    register(&h, "wrong", "wrong-decider", Arc::new(Wrong)).await;
    let wf = start(&h, "wrong", Value::Null).await;
    complete(&h, &wf, "a", json!({})).await;
    let requests = episode_requests(&h, "wrong-decider");
    // Refusals 1..4 are committed, each shown to the next decision with
    // the event it refused; the fifth fails the workflow.
    assert_eq!(requests.len(), 5, "{requests:?}");
    let last = &requests[4];
    assert_eq!(
        last.events[0].node.as_deref(),
        Some("a"),
        "the same event again"
    );
    let refused: Vec<_> = last.events[1..]
        .iter()
        .map(|e| e.reason.clone().unwrap())
        .collect();
    assert_eq!(refused.len(), 4);
    assert!(refused[0].contains("nowhere"), "{refused:?}");
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Failed);
    assert!(done.error.unwrap().contains("5 answers refused"));
    assert_eq!(
        h.launcher.launches_of("b").len(),
        0,
        "a refused answer schedules nothing"
    );
}

#[tokio::test]
async fn continue_as_new_starts_the_next_execution_of_the_chain_once() {
    let h = Harness::new().await;
    register(
        &h,
        "chain",
        "chain-decider",
        Arc::new(common::deciders::Chain),
    )
    .await;
    let mut wf = start(&h, "chain", json!({"n": 0})).await;
    for n in 0..3 {
        complete(&h, &wf, "step", json!({})).await;
        let ended = h.workflow(&wf).await;
        assert_eq!(ended.state, WorkflowState::Completed, "execution {n}");
        let Some(next) = ended.continued_as.clone() else {
            assert_eq!(n, 2);
            assert_eq!(ended.result, Some(json!({"n": 2})));
            return;
        };
        // The next execution's request row, as the request stream gives it.
        let request_id = whimbrel_core::ids::continued_request_id(&wf, "chain");
        assert_eq!(
            whimbrel_core::ids::workflow_exec_id("chain", &request_id),
            next
        );
        let key = std::collections::HashMap::from([
            ("workflow_request_id".to_string(), common::sv(&request_id)),
            ("workflow_name".to_string(), common::sv("chain")),
        ]);
        let row: WorkflowRequest = (h.store.get(&h.store.tables().workflow_request(), key).await)
            .unwrap()
            .expect("the next execution's request");
        assert_eq!(row.input, Some(json!({"n": n + 1})));
        let rows = [row];
        h.engine.start_workflow(&rows[0]).await.unwrap();
        let started = h.workflow(&next).await;
        assert_eq!(started.continued_from.as_deref(), Some(wf.as_str()));
        wf = next;
    }
    panic!("the chain did not end");
}

/// Waits for a signal that never comes; on a cancel request, cancels the
/// workflow with a reason of its own. `subscribed: false` is consulted
/// on node ends only.
struct Patient {
    subscribed: bool,
}

impl Decider for Patient {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        let mut answer = decisions(vec![schedule(deciding::signal_node("wait", "never"))]);
        if !self.subscribed {
            answer.decide_on = Some(vec![whimbrel_core::decider::EventKind::ActivityEnded]);
        }
        answer
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let asked = (request.events.iter())
            .find(|e| e.kind == whimbrel_core::decider::EventKind::CancelRequested);
        match asked {
            Some(e) => decisions(vec![Decision::CancelWorkflow {
                reason: Some(format!("decider: {}", e.reason.clone().unwrap_or_default())),
            }]),
            None => decisions(vec![]),
        }
    }
}

/// A cancel request row for `wf`.
fn cancel_request(h: &Harness, name: &str, wf: &str) -> WorkflowRequest {
    WorkflowRequest {
        cancel_workflow_exec_id: Some(wf.into()),
        reason: Some("operator".into()),
        ..h.request(name, None)
    }
}

#[tokio::test]
async fn a_cancel_request_is_an_event_for_a_subscribed_decider_and_ends_the_others() {
    let h = Harness::new().await;
    let decider = Arc::new(Patient { subscribed: true });
    register(&h, "patient", "patient-decider", decider).await;
    let wf = start(&h, "patient", Value::Null).await;
    assert_eq!(h.activity(&wf, "wait").await.state, ActivityState::Running);
    h.engine
        .cancel_workflow(&cancel_request(&h, "patient", &wf))
        .await
        .unwrap();
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Cancelled);
    assert_eq!(done.error.as_deref(), Some("decider: operator"));
    assert_eq!(
        h.activity(&wf, "wait").await.state,
        ActivityState::Cancelled
    );
    assert_eq!(done.due_epoch, None, "its close owes nothing more");

    let decider = Arc::new(Patient { subscribed: false });
    register(&h, "blunt", "blunt-decider", decider).await;
    let wf = start(&h, "blunt", Value::Null).await;
    h.engine
        .cancel_workflow(&cancel_request(&h, "blunt", &wf))
        .await
        .unwrap();
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Cancelled);
    assert_eq!(done.error.as_deref(), Some("operator"));
    assert_eq!(
        h.activity(&wf, "wait").await.state,
        ActivityState::Cancelled
    );
    assert!(
        episode_requests(&h, "blunt-decider").is_empty(),
        "not consulted"
    );
}

/// design.md § 10.9: a decision's nodes are opened and counted by its
/// commit, and put by its effects without a transaction. An execution
/// that ends between the two (here: the start committed decision 1, which
/// schedules `wait`, and died before its effects; then a cancel request
/// ends it) has its close put the nodes its decisions opened, then
/// cancel them as any open node: the count matches the items, and an
/// effect written late finds the node there, ended, and launches nothing.
#[tokio::test]
async fn a_close_before_a_decisions_effects_puts_its_nodes_and_cancels_them() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let h = Harness::new().await;
    let decider = Arc::new(Patient { subscribed: false });
    register(&h, "hasty", "hasty-decider", decider).await;
    let wf = start(&h, "hasty", Value::Null).await;
    // Back to the moment after decision 1's commit: its effects unwritten.
    let wait = whimbrel_core::ids::activity_exec_id(&wf, "wait");
    let client = aws_sdk_dynamodb::Client::new(&common::sdk_config().await);
    let key = |k: &str, v: &str| (k.to_string(), AttributeValue::S(v.into()));
    client
        .delete_item()
        .table_name(h.store.tables().activity_exec())
        .set_key(Some(
            [key("activity_exec_id", &wait), key("workflow_exec_id", &wf)].into(),
        ))
        .send()
        .await
        .unwrap();
    client
        .update_item()
        .table_name(h.store.tables().workflow_exec())
        .set_key(Some(
            [key("workflow_exec_id", &wf), key("workflow_name", "hasty")].into(),
        ))
        .update_expression("REMOVE decisions_applied")
        .send()
        .await
        .unwrap();
    h.engine
        .cancel_workflow(&cancel_request(&h, "hasty", &wf))
        .await
        .unwrap();
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Cancelled);
    assert_eq!(done.activity_count, 1, "counted once, by the commit");
    assert_eq!(done.due_epoch, None, "its close owes nothing more");
    let node = h.activity(&wf, "wait").await;
    assert_eq!(
        node.state,
        ActivityState::Cancelled,
        "put by the close, then cancelled"
    );
    assert_eq!(node.links.scheduled_by, Some(1));
}

/// Naps an hour within a 60 s execution timeout, set by its first answer;
/// on an event it tries to set the timeout again (refused), and on the
/// refusal it does nothing.
struct Deadline;

impl Decider for Deadline {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        DecisionsAnswer {
            execution_timeout_seconds: Some(60),
            ..decisions(vec![
                schedule(deciding::timer_node("nap", 3600)),
                schedule(lambda_node("work", "episode-step", json!({}))),
            ])
        }
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let refused = (request.events.iter()).any(|e| e.kind == EventKind::DecisionRefused);
        DecisionsAnswer {
            execution_timeout_seconds: (!refused).then_some(600),
            ..decisions(vec![])
        }
    }
}

#[tokio::test]
async fn an_episodic_execution_times_out_as_its_first_answer_says() {
    let h = Harness::new().await;
    register(&h, "deadline", "deadline-decider", Arc::new(Deadline)).await;
    let wf = start(&h, "deadline", json!({})).await;
    let w = h.workflow(&wf).await;
    assert!(w.is_episodic());
    assert_eq!(w.execution_timeout_seconds, Some(60));
    let deadline = w.start_time_epoch + 60;
    assert!(
        w.due_epoch.is_some_and(|d| d <= deadline),
        "the monitor looks at it by its deadline: {:?}",
        w.due_epoch
    );
    // A later answer may not move the deadline: refused, with the reason
    // shown to the next decision.
    complete(&h, &wf, "work", json!({})).await;
    let requests = episode_requests(&h, "deadline-decider");
    assert_eq!(requests.len(), 2, "{requests:?}");
    let refused = (requests[1].events.iter())
        .find(|e| e.kind == EventKind::DecisionRefused)
        .and_then(|e| e.reason.clone())
        .expect("the refusal is shown");
    assert!(refused.contains("only the first answer"), "{refused}");
    assert_eq!(h.tick(deadline - 1).await.workflows_timed_out, 0);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
    h.tick(deadline).await;
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Failed);
    let error = done.error.unwrap_or_default();
    assert!(error.starts_with("execution timeout"), "{error}");
    assert_eq!(done.due_epoch, None, "nothing is owed once it ended");
    let nap = h.activity(&wf, "nap").await;
    assert_eq!(nap.state, ActivityState::Cancelled, "its open timer");
}

/// Runs one step within a 60 s execution timeout; its function dies
/// while it decides on the step's end (the decision's invocation lost).
struct DiesDeciding;

impl Decider for DiesDeciding {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        DecisionsAnswer {
            execution_timeout_seconds: Some(60),
            ..decisions(vec![schedule(lambda_node(
                "work",
                "episode-step",
                json!({}),
            ))])
        }
    }

    fn decide(&self, _: &DecisionRequest) -> DecisionsAnswer {
        panic!("the function dies with the decision in flight")
    }
}

/// Issue 42 A.10, "an execution timeout up to one decision attempt late":
/// a decision put in flight 10 s before the deadline whose invocation is
/// lost would be tried again only when its attempt is over (the decider's
/// timeout plus a margin, up to 960 s); the execution must still fail on
/// the first tick after its deadline.
#[tokio::test]
async fn a_decision_lost_in_flight_does_not_hold_off_the_execution_timeout() {
    use futures::FutureExt;
    let h = Harness::new().await;
    register(&h, "dies", "dies-decider", Arc::new(DiesDeciding)).await;
    let from = h.now();
    h.clock.freeze(from);
    let wf = start(&h, "dies", json!({})).await;
    let deadline = h.workflow(&wf).await.start_time_epoch + 60;
    h.clock.freeze(deadline - 10);
    let running = h.event(&wf, "work", "RUNNING");
    h.engine.apply_event(&running).await.unwrap();
    let done = h.event(&wf, "work", "COMPLETED");
    let died = std::panic::AssertUnwindSafe(h.engine.apply_event(&done))
        .catch_unwind()
        .await;
    assert!(died.is_err(), "the decider was not asked");
    let key = whimbrel_core::keys::workflow_key(&wf, "dies");
    let table = h.store.tables().workflow_exec();
    let w: Value = h
        .store
        .get_projected(&table, key, &[])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(w["state"], "RUNNING");
    let attempt_due = w["decision_due_epoch"]
        .as_i64()
        .expect("a decision in flight");
    assert!(attempt_due > deadline, "{attempt_due}, {deadline}");
    h.tick(deadline).await;
    let ended = h.workflow(&wf).await;
    assert_eq!(
        ended.state,
        WorkflowState::Failed,
        "due at {}",
        w["due_epoch"]
    );
    let error = ended.error.unwrap_or_default();
    assert!(error.starts_with("execution timeout"), "{error}");
}

/// Runs `work`, then waits for the signal `approve` (node `approve`),
/// then completes with what the wait took and every signal event it was
/// shown.
struct Approval;

impl Decider for Approval {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        decisions(vec![schedule(lambda_node(
            "work",
            "episode-step",
            json!({}),
        ))])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let ended = |n: &str| (request.events.iter()).find(|e| e.node.as_deref() == Some(n));
        let signals: Vec<Value> = (request.events.iter())
            .filter(|e| e.kind == EventKind::Signal)
            .map(|e| json!(e.signal))
            .collect();
        if !signals.is_empty() {
            return decisions(vec![Decision::FailWorkflow {
                reason: format!("shown signal events {signals:?}"),
            }]);
        }
        match (ended("work"), ended("approve")) {
            (Some(_), _) => decisions(vec![schedule(deciding::signal_node("approve", "approve"))]),
            (_, Some(e)) => decisions(vec![Decision::CompleteWorkflow {
                result: json!({"approved": e.output}),
            }]),
            _ => decisions(vec![]),
        }
    }
}

/// Issue 42 A.10, "a signal delivered both as an event and to a wait that
/// exists only in the commit": decision 2 commits a signal wait, and its
/// effects are held before the wait's item is put; the signal arrives
/// then. It must reach the wait once its item is put, and not also be an
/// event of the log (no node waited, as far as the items showed).
#[tokio::test]
async fn a_signal_for_a_wait_its_decision_committed_but_not_yet_put_is_not_also_an_event() {
    let h = Harness::new().await;
    register(&h, "approval", "approval-decider", Arc::new(Approval)).await;
    let wf = start(&h, "approval", json!({})).await;
    let running = h.event(&wf, "work", "RUNNING");
    h.engine.apply_event(&running).await.unwrap();
    let wait = whimbrel_core::ids::activity_exec_id(&wf, "approve");
    let (held, reached, gate) = common::Stalled::engine_holding_put(&h, &wait);
    let done = h.event(&wf, "work", "COMPLETED");
    let row = SignalRow::new(&wf, "approve", "s-1", Some(json!({"by": "ana"})));
    let meanwhile = async {
        reached.notified().await;
        h.store.put(&h.store.tables().signal(), &row).await.unwrap();
        h.engine.receive_signal(&row).await.unwrap();
        gate.notify_one();
    };
    let (applied, ()) = tokio::join!(held.apply_event(&done), meanwhile);
    applied.unwrap();
    h.tick(h.now() + 5).await;
    let approve = h.activity(&wf, "approve").await;
    assert_eq!(approve.state, ActivityState::Completed);
    let w = h.workflow(&wf).await;
    assert_eq!(
        (w.state, w.error),
        (WorkflowState::Completed, None),
        "the signal was also an event"
    );
    let result = h.engine.workflow_result(&wf, "approval").await.unwrap();
    assert_eq!(result, Some(json!({"approved": {"by": "ana"}})));
}

/// Waits on a long timer, and completes with the first signal it is
/// shown as an event (its decide_on: every kind, by default).
struct Listener;

impl Decider for Listener {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        decisions(vec![schedule(deciding::timer_node("idle", 3600))])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let signal = (request.events.iter()).find(|e| e.kind == EventKind::Signal);
        decisions(
            signal
                .map(|e| Decision::CompleteWorkflow {
                    result: json!({"signal": e.signal, "input": e.output}),
                })
                .into_iter()
                .collect(),
        )
    }
}

/// A client inserts a start request and signals the new execution at once:
/// the signal's stream record may come before the start's, or while the
/// first answer is being asked for. It is kept, and once the first answer
/// commits it is an event of the log, as SWF records a signal to an
/// execution from its start; a wait of its name the first answer scheduled
/// would take it instead.
#[tokio::test]
async fn a_signal_sent_before_the_first_answer_committed_is_an_event() {
    let h = Harness::new().await;
    register(&h, "listener", "listener-decider", Arc::new(Listener)).await;
    let req = h.request("listener", Some(json!({})));
    let wf = whimbrel_core::ids::workflow_exec_id("listener", &req.workflow_request_id);
    let row = SignalRow::new(&wf, "poke", "s-early", Some(json!({"n": 1})));
    h.store.put(&h.store.tables().signal(), &row).await.unwrap();
    let table = h.store.tables().signal();
    let event = stream_event(&table, &["workflow_exec_id", "signal_key"], &[row], 1);
    let (_, sum) = handlers::client_rows(&h.engine, &event).await.unwrap();
    assert_eq!(sum.retried, 0, "the early signal blocks nothing");
    h.engine.start_workflow(&req).await.expect("start");
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Completed, "{:?}", done.error);
    assert_eq!(
        done.result,
        Some(json!({"signal": "poke", "input": {"n": 1}}))
    );
    assert_eq!(
        h.activity(&wf, "idle").await.state,
        ActivityState::Cancelled
    );
}

/// Waits for signal `go` from its first answer; fails the workflow if a
/// `signal` event shows it too, and completes with the wait's output.
struct GoWaiter;

impl Decider for GoWaiter {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        decisions(vec![schedule(deciding::signal_node("wait-go", "go"))])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        if (request.events.iter()).any(|e| e.kind == EventKind::Signal) {
            let twice = Decision::FailWorkflow {
                reason: "go was shown as an event too".into(),
            };
            return decisions(vec![twice]);
        }
        let output = ended(request).find_map(|e| e.output.clone());
        decisions(
            output
                .map(|result| Decision::CompleteWorkflow { result })
                .into_iter()
                .collect(),
        )
    }
}

/// An early signal that decision 1's wait takes is not an event too: the
/// wait is judged from the decision's record, not from the open nodes,
/// which the wait completed at its release has already left.
#[tokio::test]
async fn an_early_signal_a_first_wait_takes_is_not_an_event_too() {
    let h = Harness::new().await;
    register(&h, "go-waiter", "go-decider", Arc::new(GoWaiter)).await;
    let req = h.request("go-waiter", Some(json!({})));
    let wf = whimbrel_core::ids::workflow_exec_id("go-waiter", &req.workflow_request_id);
    let row = SignalRow::new(&wf, "go", "s-early", Some(json!({"n": 2})));
    h.store.put(&h.store.tables().signal(), &row).await.unwrap();
    h.engine.start_workflow(&req).await.expect("start");
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Completed, "{:?}", done.error);
    assert_eq!(done.result, Some(json!({"n": 2})));
}

/// Waits for signal `ok`; a `signal` event (one no wait took) completes
/// the workflow with its input; the wait's own end decides nothing.
struct LateApprover;

impl Decider for LateApprover {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        decisions(vec![schedule(deciding::signal_node("wait-ok", "ok"))])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let late = (request.events.iter()).find(|e| e.kind == EventKind::Signal);
        decisions(
            late.map(|e| Decision::CompleteWorkflow {
                result: json!({"late": e.output}),
            })
            .into_iter()
            .collect(),
        )
    }
}

/// Issue 42 A.2: a wait that has ended (here TIMED_OUT, by a settle that
/// died before it appended the end to the log, so the node is still among
/// the open ones) no longer waits. A signal that comes then is taken by no
/// wait, so it must be an event of the log, not dropped.
#[tokio::test]
async fn a_signal_after_its_only_wait_ended_is_an_event() {
    use whimbrel_core::engine::decide;
    use whimbrel_core::store::UpdateRequest;
    let h = Harness::new().await;
    register(&h, "late", "late-decider", Arc::new(LateApprover)).await;
    let wf = start(&h, "late", json!({})).await;
    assert_eq!(
        h.activity(&wf, "wait-ok").await.state,
        ActivityState::Running
    );
    let id = whimbrel_core::ids::activity_exec_id(&wf, "wait-ok");
    let timed_out = UpdateRequest::new(
        h.store.tables().activity_exec(),
        decide::activity_key(&id, &wf),
    )
    .set("state", common::sv("TIMED_OUT"));
    h.store.update(timed_out).await.expect("raw write");
    let row = SignalRow::new(&wf, "ok", "s-late", Some(json!({"by": "ana"})));
    h.store.put(&h.store.tables().signal(), &row).await.unwrap();
    let table = h.store.tables().signal();
    let event = stream_event(&table, &["workflow_exec_id", "signal_key"], &[row], 1);
    let (_, sum) = handlers::client_rows(&h.engine, &event).await.unwrap();
    assert_eq!((sum.retried, sum.rejected), (0, 0), "{sum:?}");
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Completed, "{:?}", done.error);
    assert_eq!(done.result, Some(json!({"late": {"by": "ana"}})));
}

/// Runs `first`, then `second` once `first` ended, then completes.
struct TwoSteps;

impl Decider for TwoSteps {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        decisions(vec![schedule(lambda_node(
            "first",
            "episode-step",
            json!({}),
        ))])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let ended: Vec<&str> = ended(request).filter_map(|e| e.node.as_deref()).collect();
        if ended.contains(&"second") {
            return decisions(vec![Decision::CompleteWorkflow {
                result: json!("done"),
            }]);
        }
        if ended.contains(&"first") {
            return decisions(vec![schedule(lambda_node(
                "second",
                "episode-step",
                json!({}),
            ))]);
        }
        decisions(vec![])
    }
}

/// Issue 42 B.6: the activity role may UpdateItem any activity item's
/// heartbeat, and an UpdateItem creates the item it names. A heartbeat
/// written first on a node a later decision will schedule (its id is
/// derivable) leaves a stub with no state; the node's put must replace
/// it, not take it for the node and wedge the execution.
#[tokio::test]
async fn a_heartbeat_stub_does_not_take_the_place_of_a_later_node() {
    use whimbrel_core::engine::decide;
    use whimbrel_core::store::UpdateRequest;
    let h = Harness::new().await;
    register(&h, "two", "two-decider", Arc::new(TwoSteps)).await;
    let wf = start(&h, "two", json!({})).await;
    let second = whimbrel_core::ids::activity_exec_id(&wf, "second");
    let stub = UpdateRequest::new(
        h.store.tables().activity_exec(),
        decide::activity_key(&second, &wf),
    )
    .set("heartbeat_time", common::sv("2026-12-06T00:00:00Z"));
    h.store
        .update(stub)
        .await
        .expect("the activity role's write");
    complete(&h, &wf, "first", json!({})).await;
    assert_eq!(h.activity(&wf, "second").await.state, ActivityState::Queued);
    complete(&h, &wf, "second", json!({})).await;
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Completed, "{:?}", done.error);
}

/// Runs `prep`, with a wait for signal `ok` after it; a `signal` event
/// (one no wait took) completes the workflow with its input.
struct PrepThenWait;

impl Decider for PrepThenWait {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        let mut wait = deciding::signal_node("wait-ok", "ok");
        wait.depends_on = vec!["prep".into()];
        decisions(vec![
            schedule(lambda_node("prep", "episode-step", json!({}))),
            schedule(wait),
        ])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let event = (request.events.iter()).find(|e| e.kind == EventKind::Signal);
        decisions(
            event
                .map(|e| Decision::CompleteWorkflow {
                    result: json!({"event": e.output}),
                })
                .into_iter()
                .collect(),
        )
    }
}

/// Issue 42 A.2, the rest: two signals of one name come while their only
/// wait is scheduled but not released yet (its prerequisite runs), so
/// both are kept for it. Its release takes the earliest; the later one,
/// taken by no wait once none of its name waits, must be an event of the
/// log, not left unseen.
#[tokio::test]
async fn a_later_signal_a_release_did_not_take_is_an_event() {
    let h = Harness::new().await;
    register(&h, "prep-wait", "prep-wait-decider", Arc::new(PrepThenWait)).await;
    let wf = start(&h, "prep-wait", json!({})).await;
    assert_eq!(
        h.activity(&wf, "wait-ok").await.state,
        ActivityState::Requested
    );
    let mut first = SignalRow::new(&wf, "ok", "s-1", Some(json!({"n": 1})));
    first.when_epoch = Some(10);
    let mut later = SignalRow::new(&wf, "ok", "s-2", Some(json!({"n": 2})));
    later.when_epoch = Some(20);
    let table = h.store.tables().signal();
    for row in [&first, &later] {
        h.store.put(&table, row).await.unwrap();
    }
    let event = stream_event(
        &table,
        &["workflow_exec_id", "signal_key"],
        &[first, later],
        1,
    );
    let (_, sum) = handlers::client_rows(&h.engine, &event).await.unwrap();
    assert_eq!((sum.retried, sum.rejected), (0, 0), "{sum:?}");
    complete(&h, &wf, "prep", json!({})).await;
    let wait = h.activity(&wf, "wait-ok").await;
    assert_eq!(
        (wait.state, wait.outcome.output),
        (ActivityState::Completed, Some(json!({"n": 1})))
    );
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Completed, "{:?}", done.error);
    assert_eq!(done.result, Some(json!({"event": {"n": 2}})));
}

/// Issue 42 A.4: a hung decider held the invocation that called it past
/// its budget (the activity-event function applying a report, and the
/// monitor's tick, which swept its shard's workflows one after another
/// before the shard's activities, so one execution's decider held back
/// every timer and timeout behind it). A decider call ends at the
/// invocation's deadline (the attempt is deferred and tried again, as a
/// failed call is), and a tick sweeps each due workflow beside the others
/// and beside the activities: a timer due in the same tick fires.
#[tokio::test]
async fn a_hung_decider_holds_no_invocation_past_its_budget_nor_another_items_sweep() {
    use std::time::{Duration, Instant};
    use whimbrel_core::engine::budget;
    let h = Harness::new().await;
    register(&h, "polling", "polling-decider", Arc::new(Polling)).await;
    let slow = start(&h, "polling", json!({})).await;
    h.register(
        "soon",
        json!({"activities": [{"name": "soon", "wait": {"seconds": 2}}]}),
    )
    .await;
    let timer = h.start("soon").await;
    let hang = Duration::from_secs(60);
    (h.launcher.decider_delays.lock().unwrap()).insert("polling-decider".into(), hang);
    let began = Instant::now();
    let report = complete(&h, &slow, "check-1", json!({"ready": false}));
    budget::within(Instant::now() + Duration::from_secs(1), report).await;
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "the report's invocation ran {:?} past a 1 s budget",
        began.elapsed()
    );
    // A tick when both the deferred decision and the timer are due.
    let at = h.now() + 10;
    let began = Instant::now();
    let tick = budget::within(Instant::now() + Duration::from_secs(2), h.tick(at)).await;
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "the tick ran {:?} past a 2 s budget",
        began.elapsed()
    );
    assert_eq!(tick.timers_fired, 1, "{tick:?}");
    assert_eq!(h.workflow(&timer).await.state, WorkflowState::Completed);
    // The decision is owed, not lost: once the decider answers, a tick
    // resumes it and the next check's timer is scheduled.
    assert_eq!(h.workflow(&slow).await.state, WorkflowState::Running);
    h.launcher.decider_delays.lock().unwrap().clear();
    h.tick(at + 10).await;
    let wait = h.activity(&slow, "wait-1").await;
    assert_eq!(wait.state, ActivityState::Running, "{wait:?}");
}

/// A decider that runs `a`, then reaches for a child workflow (`payroll`)
/// and a task list (`payroll-queue`) the orders registration is not
/// allowed.
struct Reacher;

impl Decider for Reacher {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        decisions(vec![schedule(lambda_node("a", "orders-fn", Value::Null))])
    }

    fn decide(&self, _: &DecisionRequest) -> DecisionsAnswer {
        decisions(vec![
            schedule(deciding::child_node("pay", "payroll", Value::Null)),
            schedule(deciding::task_node("drain", "payroll-queue", Value::Null)),
        ])
    }
}

/// Set what the registration `name` allows (as `whimbrel register
/// --allow-…` stores it).
async fn allow_only(h: &Harness, name: &str, allow: whimbrel_core::targets::Allowed) {
    let mut reg = h
        .engine
        .registration_of(name)
        .await
        .unwrap()
        .expect("registered");
    reg.allow = Some(allow);
    let table = h.store.tables().workflow_lambda();
    h.store.put(&table, &reg).await.unwrap();
}

/// Issue 42 B.5: a registration's plans and decisions reached any
/// registered workflow, task list or Lambda of the deployment. With an
/// allow-list, a static plan naming another is refused at its start, and
/// a decision naming one is refused with the reason (shown to the next
/// decision), as any invalid answer is.
#[tokio::test]
async fn a_registration_reaches_only_the_workflows_task_lists_and_lambdas_it_is_allowed() {
    use whimbrel_core::targets::Allowed;
    let h = Harness::new().await;
    let orders = Allowed {
        workflows: Some(vec!["orders-*".into()]),
        task_lists: Some(vec!["orders-*".into()]),
        lambdas: Some(vec!["orders-*".into()]),
    };
    h.register(
        "static-orders",
        json!({"activities": [{"name": "pay", "workflow": "payroll"}]}),
    )
    .await;
    allow_only(&h, "static-orders", orders.clone()).await;
    let wf = h.start("static-orders").await;
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Failed);
    let why = done.error.unwrap_or_default();
    assert!(
        why.contains(
            "workflow \"payroll\" is not among the registration's allowed workflows (orders-*)"
        ),
        "{why}"
    );
    register(&h, "orders", "orders-decider", Arc::new(Reacher)).await;
    allow_only(&h, "orders", orders).await;
    let wf = start(&h, "orders", Value::Null).await;
    assert_eq!(
        h.launcher.launches_of("a").len(),
        1,
        "an allowed Lambda runs"
    );
    complete(&h, &wf, "a", json!({})).await;
    let requests = episode_requests(&h, "orders-decider");
    let last = requests.last().expect("decisions asked");
    let refused = last.events.iter().find_map(|e| e.reason.clone());
    assert!(
        refused
            .as_deref()
            .is_some_and(|r| r.contains("workflow \"payroll\" is not among")),
        "{refused:?}"
    );
    assert!(h.engine.registration_of("payroll").await.unwrap().is_none());
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
}

/// Schedules `width` nodes in its first answer, then answers every
/// request by closing the workflow with the number of ends it has seen.
struct CloseAtOnce {
    width: usize,
    seen: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl Decider for CloseAtOnce {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        decisions(
            (0..self.width)
                .map(|i| {
                    schedule(lambda_node(
                        &format!("n{i}"),
                        "episode-step",
                        json!({"i": i}),
                    ))
                })
                .collect(),
        )
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let mut seen = self.seen.lock().unwrap();
        seen.extend(ended(request).filter_map(|e| e.node.clone()));
        let result = json!({"ended": seen.len()});
        decisions(vec![Decision::CompleteWorkflow { result }])
    }
}

/// docs/limits.md § 4, events per decision request (no test before): 150
/// nodes end while their decider is unavailable; once it answers, its
/// request shows exactly 100 ends, and its close on what it was shown
/// ends the execution: the ends past the window did not arrive while it
/// decided. Before, the close was refused and the next request showed the
/// same 100 ends again, until the fifth refusal failed the execution.
/// A close with ends that did arrive while it decided is still refused
/// (`decider::tests`, `UnhandledEvents`).
#[tokio::test]
async fn a_decision_shows_at_most_100_events_and_may_close_on_them() {
    use whimbrel_core::engine::episodes::MAX_EVENTS_PER_DECISION;
    let h = Harness::new().await;
    let width = MAX_EVENTS_PER_DECISION + 50;
    let decider = Arc::new(CloseAtOnce {
        width,
        seen: Default::default(),
    });
    register(&h, "wide", "wide-decider", decider).await;
    let wf = start(&h, "wide", json!({})).await;
    let answering = decider_down(&h, "wide-decider");
    for i in 0..width {
        complete(&h, &wf, &format!("n{i}"), json!({"i": i})).await;
    }
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
    h.launcher.decider_requests.lock().unwrap().clear();
    decider_up(&h, "wide-decider", answering);
    h.tick(h.now() + 120).await;
    let asked = episode_requests(&h, "wide-decider");
    assert_eq!(asked.len(), 1, "one request, and its close commits");
    let ends = (asked[0].events.iter())
        .filter(|e| e.kind == EventKind::ActivityEnded)
        .count();
    assert_eq!(ends, MAX_EVENTS_PER_DECISION);
    let ended = h.workflow(&wf).await;
    assert_eq!(ended.state, WorkflowState::Completed);
    assert_eq!(
        ended.result,
        Some(json!({"ended": MAX_EVENTS_PER_DECISION}))
    );
}

/// Schedules, in its first answer, `src`, `width` nodes that depend on it
/// and `reduce`, which depends on all of them; closes with `reduce`'s
/// output once it sees its end, and decides nothing before.
struct Links {
    width: usize,
}

impl Decider for Links {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        let names: Vec<String> = (0..self.width).map(|i| format!("m{i}")).collect();
        let mut nodes = vec![lambda_node("src", "episode-step", Value::Null)];
        for name in &names {
            let mut node = lambda_node(name, "episode-step", Value::Null);
            node.depends_on = vec!["src".into()];
            nodes.push(node);
        }
        let mut reduce = lambda_node("reduce", "episode-step", Value::Null);
        reduce.depends_on = names;
        nodes.push(reduce);
        decisions(vec![Decision::Schedule { activities: nodes }])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        match ended(request).find(|e| e.node.as_deref() == Some("reduce")) {
            Some(e) => decisions(vec![Decision::CompleteWorkflow {
                result: e.output.clone().unwrap_or(Value::Null),
            }]),
            None => decisions(vec![]),
        }
    }
}

/// docs/limits.md § 4 (issue 42 D, Open 7): a decided node's links run
/// on DynamoDB at their limit. `src` has `MAX_DECIDED_LINKS` dependents
/// and `reduce` as many prerequisites: every node runs, `reduce` is
/// launched with all 500 outputs, and the execution closes on its end.
/// One more either way is refused with the reason before anything is
/// written: the first answer schedules nothing, and the execution fails.
#[tokio::test]
async fn a_decided_node_runs_with_500_links_each_way_and_501_are_refused() {
    use whimbrel_core::decider::MAX_DECIDED_LINKS;
    let h = Harness::new().await;
    let decider = Arc::new(Links {
        width: MAX_DECIDED_LINKS,
    });
    register(&h, "links", "links-decider", decider).await;
    let wf = start(&h, "links", json!({})).await;
    complete(&h, &wf, "src", json!("src")).await;
    let src = h.activity(&wf, "src").await;
    assert_eq!(src.links.dependents.len(), MAX_DECIDED_LINKS);
    // The decider is down while the nodes end (a decision per end would
    // only make the test slow); their ends wait in the log.
    let answering = decider_down(&h, "links-decider");
    for i in 0..MAX_DECIDED_LINKS {
        complete(&h, &wf, &format!("m{i}"), json!(i)).await;
    }
    let reduce = h.launcher.payload("reduce", 0);
    assert_eq!(reduce.prerequisites.len(), MAX_DECIDED_LINKS);
    complete(&h, &wf, "reduce", json!({"sum": 1})).await;
    decider_up(&h, "links-decider", answering);
    let done = ticked_to_its_end(&h, &wf).await;
    assert_eq!(
        (done.state, done.result),
        (WorkflowState::Completed, Some(json!({"sum": 1})))
    );
    // One past: refused before anything is written.
    let decider = Arc::new(Links {
        width: MAX_DECIDED_LINKS + 1,
    });
    register(&h, "past", "past-decider", decider).await;
    let past = start(&h, "past", json!({})).await;
    let failed = h.workflow(&past).await;
    assert_eq!(failed.state, WorkflowState::Failed, "{failed:?}");
    let why = failed.error.unwrap_or_default();
    assert!(why.contains("at most 500 are allowed"), "{why}");
    assert!(
        h.launcher.launches_of("src").len() == 1,
        "only the first's src"
    );
}

/// Schedules a lambda node of each of `names` in its first answer, and
/// closes with the number of ends once it has seen every one.
struct Named {
    names: Vec<String>,
    seen: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl Decider for Named {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        let nodes = (self.names.iter())
            .map(|n| lambda_node(n, "episode-step", Value::Null))
            .collect();
        decisions(vec![Decision::Schedule { activities: nodes }])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let mut seen = self.seen.lock().unwrap();
        seen.extend(ended(request).filter_map(|e| e.node.clone()));
        if seen.len() < self.names.len() {
            return decisions(vec![]);
        }
        decisions(vec![Decision::CompleteWorkflow {
            result: json!({"ended": seen.len()}),
        }])
    }
}

/// Workflow `wf` once monitor ticks, two minutes apart, have ended it
/// (at most 20).
async fn ticked_to_its_end(h: &Harness, wf: &str) -> whimbrel_core::model::WorkflowExec {
    for _ in 0..20 {
        if h.workflow(wf).await.state.is_terminal() {
            break;
        }
        h.tick(h.now() + 120).await;
    }
    h.workflow(wf).await
}

/// Take decider `lambda` down (every call unavailable) and return what
/// answered, to put back with [`decider_up`].
fn decider_down(h: &Harness, lambda: &str) -> common::DeciderFn {
    let answering = (h.launcher.decider_fns.lock().unwrap()).remove(lambda);
    let down = Err(whimbrel_core::launcher::InvokeError::Unavailable {
        function: lambda.into(),
        message: "TooManyRequestsException".into(),
    });
    (h.launcher.deciders.lock().unwrap()).insert(lambda.into(), down);
    answering.expect("a registered decider")
}

/// Put decider `lambda` back up, answering with `decider`.
fn decider_up(h: &Harness, lambda: &str, decider: common::DeciderFn) {
    (h.launcher.decider_fns.lock().unwrap()).insert(lambda.into(), decider);
}

/// docs/limits.md § 4 (issue 42 A.6 and D, Open 5): an episodic
/// execution runs on DynamoDB with the names of its open nodes at their
/// limit, `MAX_OPEN_NODE_BYTES` (781 names of 128 bytes and one of 32),
/// all open at once; they end while its decider is down, so the workflow
/// item holds every name twice (open, and ended but not yet shown), and
/// the execution closes once its decider has seen every end. A name one
/// byte longer is refused with the reason before anything is written.
#[tokio::test]
async fn open_nodes_named_to_the_limit_run_to_the_end_and_one_byte_more_is_refused() {
    use whimbrel_core::decider::MAX_OPEN_NODE_BYTES;
    use whimbrel_core::plan::MAX_NAME_LEN;
    let names = |extra: usize| {
        let full = MAX_OPEN_NODE_BYTES / MAX_NAME_LEN;
        let mut names: Vec<String> = (0..full).map(|i| format!("{i:0>MAX_NAME_LEN$}")).collect();
        names.push("z".repeat(MAX_OPEN_NODE_BYTES - full * MAX_NAME_LEN + extra));
        names
    };
    let h = Harness::new().await;
    let at = names(0);
    assert_eq!(
        at.iter().map(String::len).sum::<usize>(),
        MAX_OPEN_NODE_BYTES
    );
    let decider = Arc::new(Named {
        names: at.clone(),
        seen: Default::default(),
    });
    register(&h, "named", "named-decider", decider).await;
    let wf = start(&h, "named", json!({})).await;
    let answering = decider_down(&h, "named-decider");
    for name in &at {
        complete(&h, &wf, name, json!(null)).await;
    }
    decider_up(&h, "named-decider", answering);
    let done = ticked_to_its_end(&h, &wf).await;
    assert_eq!(
        (done.state, done.result),
        (WorkflowState::Completed, Some(json!({"ended": at.len()})))
    );
    let decider = Arc::new(Named {
        names: names(1),
        seen: Default::default(),
    });
    register(&h, "past", "past-decider", decider).await;
    let past = start(&h, "past", json!({})).await;
    let failed = h.workflow(&past).await;
    assert_eq!(failed.state, WorkflowState::Failed, "{failed:?}");
    let why = failed.error.unwrap_or_default();
    assert!(
        why.contains(&format!(
            "is {} bytes; at most {MAX_OPEN_NODE_BYTES}",
            MAX_OPEN_NODE_BYTES + 1
        )),
        "{why}"
    );
}
