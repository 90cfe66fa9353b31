//! The engine against a real DynamoDB API (DynamoDB Local, started by the tests):
//! every contract transition through the real tables, dependency release,
//! fan-in, failure and timeout propagation, redelivery, stream batches.

mod common;

use std::collections::HashMap;

use common::{failures, stream_event, Harness};
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, Actor, WorkflowState, TRANSITIONS};
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::{Applied, EngineError};
use whimbrel_core::handlers;
use whimbrel_core::ids;
use whimbrel_core::launcher::InvokeError;
use whimbrel_core::store::{n, s, UpdateRequest};

fn chain_plan(names: &[&str]) -> Value {
    let acts: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let deps: Vec<&str> = if i == 0 { vec![] } else { vec![names[i - 1]] };
            json!({"name": a, "lambda": "noop", "depends_on": deps})
        })
        .collect();
    json!({"version": 1, "activities": acts})
}

/// Force an activity's state (test set-up only: the engine never does this).
async fn force_state(h: &Harness, wf: &str, name: &str, state: ActivityState) {
    let id = ids::activity_exec_id(wf, name);
    let key = HashMap::from([
        ("activity_exec_id".to_string(), s(&id)),
        ("workflow_exec_id".to_string(), s(wf)),
    ]);
    let mut req = UpdateRequest::new(h.store.tables().activity_exec(), key)
        .name("#st", "state")
        .value(":s", s(state.as_str()));
    req.update = "SET #st = :s".into();
    if state.is_running() {
        req = req.value(":now", n(Timestamp::now().epoch));
        req.update.push_str(", start_time_epoch = :now");
    }
    h.store.update(req, false).await.unwrap();
}

#[tokio::test]
async fn every_client_transition_of_the_contract_through_real_tables() {
    let h = Harness::new().await;
    h.register("pair", chain_plan(&["root", "x"])).await;
    for (from, transition, to, actors) in TRANSITIONS {
        if !actors.allows(Actor::Client) {
            continue;
        }
        let wf = h.start("pair").await;
        force_state(&h, &wf, "x", *from).await;
        let ev = h.event(&wf, "x", transition.as_str());
        let got = h.engine.apply_event(&ev).await;
        assert!(
            matches!(got, Ok(Applied::State(s)) if s == *to),
            "{from} x {transition}: {got:?}"
        );
        let x = h.activity(&wf, "x").await;
        assert_eq!(x.state, *to, "{from} x {transition}");
        assert_eq!(
            x.last_event_id.as_deref(),
            Some(ev.activity_event_id.as_str())
        );
        assert_eq!(x.history.last().map(|e| e.state), Some(*to));
        if to.is_terminal() {
            assert!(
                x.end_time_epoch.is_some(),
                "{from} x {transition}: end time"
            );
            let w = h.workflow(&wf).await;
            assert_eq!(
                w.completed_count + w.failed_count + w.cancelled_count,
                1,
                "{from} x {transition}: counted once"
            );
        }
        // The same record again changes nothing.
        let again = h.engine.apply_event(&ev).await;
        assert!(
            matches!(again, Ok(Applied::State(s)) if s == *to),
            "{again:?}"
        );
        assert_eq!(h.activity(&wf, "x").await.version, x.version);
    }
}

#[tokio::test]
async fn rejected_and_not_yet_transitions() {
    let h = Harness::new().await;
    h.register("pair", chain_plan(&["root", "x"])).await;
    let wf = h.start("pair").await;
    // x is REQUESTED: COMPLETED is not valid yet -> retry.
    let r = h.engine.apply_event(&h.event(&wf, "x", "COMPLETED")).await;
    assert!(matches!(r, Err(EngineError::Retry(_))), "{r:?}");
    // Clients may not request QUEUED or TIMED_OUT.
    let r = h.engine.apply_event(&h.event(&wf, "x", "QUEUED")).await;
    assert!(matches!(r, Err(EngineError::Rejected(_))), "{r:?}");
    let r = h
        .engine
        .apply_event(&h.event(&wf, "root", "TIMED_OUT"))
        .await;
    assert!(matches!(r, Err(EngineError::Rejected(_))), "{r:?}");
    // Unknown transition, unknown activity, malformed event id.
    let r = h.engine.apply_event(&h.event(&wf, "x", "EXPLODE")).await;
    assert!(matches!(r, Err(EngineError::Rejected(m)) if m.contains("EXPLODE")));
    let r = h.engine.apply_event(&h.event(&wf, "nope", "RUNNING")).await;
    assert!(matches!(r, Err(EngineError::Rejected(m)) if m.contains("unknown activity")));
    let mut bad = h.event(&wf, "x", "RUNNING");
    bad.activity_event_id = "".into();
    assert!(matches!(
        h.engine.apply_event(&bad).await,
        Err(EngineError::Rejected(_))
    ));
    // An id not in the recommended form still works (existing clients).
    let mut other = h.event(&wf, "root", "RUNNING");
    other.activity_event_id = "legacy-event-42".into();
    assert_eq!(
        h.engine.apply_event(&other).await.unwrap(),
        Applied::State(ActivityState::Running)
    );
    // Terminal states accept nothing.
    for end in [
        ActivityState::Completed,
        ActivityState::Failed,
        ActivityState::Cancelled,
        ActivityState::TimedOut,
    ] {
        force_state(&h, &wf, "x", end).await;
        for t in ["RUNNING", "COMPLETED", "FAILED", "CANCEL", "PREPARING"] {
            let r = h.engine.apply_event(&h.event(&wf, "x", t)).await;
            assert!(
                matches!(r, Err(EngineError::Rejected(_))),
                "{end} x {t}: {r:?}"
            );
        }
        assert_eq!(h.activity(&wf, "x").await.state, end);
    }
}

#[tokio::test]
async fn diamond_runs_to_completed_and_releases_each_edge_once_under_redelivery() {
    let h = Harness::new().await;
    h.register(
        "diamond",
        json!({"activities": [
            {"name": "a", "lambda": "noop", "input": {"n": 1}},
            {"name": "b", "lambda": "noop", "depends_on": ["a"]},
            {"name": "c", "lambda": "noop", "depends_on": ["a"]},
            {"name": "d", "lambda": "noop", "depends_on": ["b", "c"]}
        ]}),
    )
    .await;
    let wf = h.start("diamond").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
    let a = h.launcher.launches_of("a");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["input"], json!({"n": 1}));
    assert_eq!(a[0]["attempt"], 1);
    assert_eq!(a[0]["workflow_exec_id"], wf.as_str());
    assert_eq!(h.activity(&wf, "a").await.state, ActivityState::Queued);
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Requested);

    // Every event delivered twice.
    for name in ["a", "b", "c", "d"] {
        for t in ["RUNNING", "COMPLETED"] {
            let ev = h.event(&wf, name, t);
            h.engine.apply_event(&ev).await.unwrap();
            h.engine.apply_event(&ev).await.unwrap();
        }
    }
    for name in ["a", "b", "c", "d"] {
        assert_eq!(
            h.launcher.launches_of(name).len(),
            1,
            "{name} launched once"
        );
        let x = h.activity(&wf, name).await;
        assert_eq!(x.state, ActivityState::Completed);
        assert_eq!(x.pending_dependency_count, 0, "{name}");
    }
    let d = h.launcher.launches_of("d");
    assert_eq!(
        d[0]["prerequisites"],
        json!({"b": {"from": "b"}, "c": {"from": "c"}})
    );
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Completed);
    assert_eq!(
        (w.completed_count, w.failed_count, w.cancelled_count),
        (4, 0, 0)
    );
    // The whole workflow request delivered again changes nothing.
    let req_count = h.launcher.launch_count();
    let wf_again = h.workflow(&wf).await;
    let req = whimbrel_core::model::WorkflowRequest {
        workflow_request_id: wf_again.workflow_request_id.clone().unwrap(),
        ..h.request("diamond", None)
    };
    assert_eq!(
        h.engine.start_workflow(&req).await.unwrap(),
        Applied::Workflow(WorkflowState::Completed)
    );
    assert_eq!(h.launcher.launch_count(), req_count);
}

#[tokio::test]
async fn fan_in_of_50_completing_in_one_batch_launches_the_dependent_once() {
    let h = Harness::new().await;
    let mut acts: Vec<Value> = (0..50)
        .map(|i| json!({"name": format!("p{i}"), "lambda": "noop"}))
        .collect();
    let all: Vec<String> = (0..50).map(|i| format!("p{i}")).collect();
    acts.push(json!({"name": "join", "lambda": "noop", "depends_on": all}));
    h.register("fanin", json!({"activities": acts})).await;
    let wf = h.start("fanin").await;
    assert_eq!(h.launcher.launch_count(), 50);
    let running: Vec<_> = (0..50)
        .map(|i| h.event(&wf, &format!("p{i}"), "RUNNING"))
        .collect();
    let completed: Vec<_> = (0..50)
        .map(|i| h.event(&wf, &format!("p{i}"), "COMPLETED"))
        .collect();
    let (resp, sum) = handlers::activity_events(&h.engine, &h.event_batch(&running, 1))
        .await
        .unwrap();
    assert!(failures(&resp).is_empty());
    assert_eq!(sum.applied, 50);
    let batch = h.event_batch(&completed, 100);
    // The batch delivered twice.
    for _ in 0..2 {
        let (resp, sum) = handlers::activity_events(&h.engine, &batch).await.unwrap();
        assert!(failures(&resp).is_empty(), "{resp:?}");
        assert_eq!(sum.applied, 50);
    }
    assert_eq!(h.launcher.launches_of("join").len(), 1);
    let join = h.activity(&wf, "join").await;
    assert_eq!(join.state, ActivityState::Queued);
    assert_eq!(join.pending_dependency_count, 0);
    assert_eq!(
        h.launcher.launches_of("join")[0]["prerequisites"]
            .as_object()
            .unwrap()
            .len(),
        50
    );
}

#[tokio::test]
async fn failed_cancels_everything_downstream_and_fails_the_workflow() {
    let h = Harness::new().await;
    h.register(
        "fail",
        json!({"activities": [
            {"name": "a", "lambda": "noop"},
            {"name": "ok", "lambda": "noop"},
            {"name": "b", "lambda": "noop", "depends_on": ["a"]},
            {"name": "c", "lambda": "noop", "depends_on": ["b", "ok"]},
            {"name": "d", "lambda": "noop", "depends_on": ["a"]}
        ]}),
    )
    .await;
    let wf = h.start("fail").await;
    h.run_to_completion(&wf, "ok").await;
    h.engine
        .apply_event(&h.event(&wf, "a", "RUNNING"))
        .await
        .unwrap();
    let failed = h.event(&wf, "a", "FAILED");
    h.engine.apply_event(&failed).await.unwrap();
    h.engine.apply_event(&failed).await.unwrap();
    for name in ["b", "c", "d"] {
        let x = h.activity(&wf, name).await;
        assert_eq!(x.state, ActivityState::Cancelled, "{name}");
        assert!(x.error.unwrap().contains("ended"), "{name}");
    }
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Failed);
    assert_eq!(
        (w.completed_count, w.failed_count, w.cancelled_count),
        (1, 1, 3)
    );
    assert!(w.error.unwrap().contains("activity a FAILED: a broke"));
    assert!(h.launcher.launches_of("b").is_empty());
}

#[tokio::test]
async fn heartbeat_timeout_found_by_the_monitor_propagates_like_failed() {
    let h = Harness::new().await;
    h.register(
        "hb",
        json!({"activities": [
            {"name": "slow", "lambda": "noop", "heartbeat_timeout_seconds": 30},
            {"name": "after", "lambda": "noop", "depends_on": ["slow"]}
        ]}),
    )
    .await;
    let wf = h.start("hb").await;
    assert_eq!(
        h.launcher.launches_of("slow")[0]["heartbeat_timeout_seconds"],
        30
    );
    h.engine
        .apply_event(&h.event(&wf, "slow", "RUNNING"))
        .await
        .unwrap();
    let slow = h.activity(&wf, "slow").await;
    assert!(slow.heartbeat_shard.is_some());
    let now = Timestamp::now().epoch;
    // A heartbeat keeps it alive.
    assert_eq!(
        h.engine.heartbeat(&slow.activity_exec_id).await.unwrap(),
        ActivityState::Running
    );
    let report = h.engine.monitor_tick(now + 10).await.unwrap();
    assert_eq!(report.timed_out, 0);
    // 30 s without a heartbeat: timed out.
    let report = h.engine.monitor_tick(now + 60).await.unwrap();
    assert_eq!(report.timed_out, 1);
    let slow = h.activity(&wf, "slow").await;
    assert_eq!(slow.state, ActivityState::TimedOut);
    assert!(slow.heartbeat_shard.is_none(), "left the sparse index");
    assert_eq!(
        h.activity(&wf, "after").await.state,
        ActivityState::Cancelled
    );
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Failed);
    assert!(w.error.unwrap().contains("TIMED_OUT"));
    // The activity learns it timed out on its next heartbeat; its late
    // COMPLETED is rejected.
    assert_eq!(
        h.engine.heartbeat(&slow.activity_exec_id).await.unwrap(),
        ActivityState::TimedOut
    );
    let late = h
        .engine
        .apply_event(&h.event(&wf, "slow", "COMPLETED"))
        .await;
    assert!(matches!(late, Err(EngineError::Rejected(_))));
    // A second tick finds nothing.
    assert_eq!(h.engine.monitor_tick(now + 120).await.unwrap().timed_out, 0);
}

#[tokio::test]
async fn cancel_while_running_is_seen_at_the_next_heartbeat() {
    let h = Harness::new().await;
    h.register(
        "c",
        json!({"activities": [{"name": "w", "lambda": "noop", "heartbeat_enabled": true}]}),
    )
    .await;
    let wf = h.start("c").await;
    h.engine
        .apply_event(&h.event(&wf, "w", "RUNNING"))
        .await
        .unwrap();
    h.engine
        .apply_event(&h.event(&wf, "w", "CANCEL"))
        .await
        .unwrap();
    let w = h.activity(&wf, "w").await;
    assert_eq!(w.state, ActivityState::CancelledRunning);
    assert_eq!(w.heartbeat_timeout_seconds, Some(300));
    assert_eq!(
        h.engine.heartbeat(&w.activity_exec_id).await.unwrap(),
        ActivityState::CancelledRunning
    );
    h.engine
        .apply_event(&h.event(&wf, "w", "CANCEL"))
        .await
        .unwrap();
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Cancelled);
}

#[tokio::test]
async fn completed_delivered_before_running_is_retried_then_applied() {
    let h = Harness::new().await;
    h.register("one", chain_plan(&["solo"])).await;
    let wf = h.start("one").await;
    let completed = h.event(&wf, "solo", "COMPLETED");
    let running = h.event(&wf, "solo", "RUNNING");
    // COMPLETED alone: not valid yet, reported as a batch item failure.
    let b1 = h.event_batch(std::slice::from_ref(&completed), 10);
    let (resp, _) = handlers::activity_events(&h.engine, &b1).await.unwrap();
    assert_eq!(failures(&resp), vec!["10"]);
    assert_eq!(h.activity(&wf, "solo").await.state, ActivityState::Queued);
    // Redelivered from its sequence number, with the RUNNING that followed.
    let b2 = h.event_batch(&[completed.clone(), running.clone()], 10);
    let (resp, _) = handlers::activity_events(&h.engine, &b2).await.unwrap();
    assert_eq!(failures(&resp), vec!["10"]);
    assert_eq!(h.activity(&wf, "solo").await.state, ActivityState::Running);
    let (resp, sum) = handlers::activity_events(&h.engine, &b2).await.unwrap();
    assert!(failures(&resp).is_empty(), "{resp:?}");
    assert_eq!(sum.applied, 2);
    assert_eq!(
        h.activity(&wf, "solo").await.state,
        ActivityState::Completed
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

#[tokio::test]
async fn malformed_and_foreign_records_are_rejected_while_valid_ones_apply() {
    let h = Harness::new().await;
    h.register("one", chain_plan(&["solo"])).await;
    let wf = h.start("one").await;
    let good = h.event(&wf, "solo", "RUNNING");
    let unknown = h.event(&wf, "solo", "EXPLODE");
    let mut batch = h.event_batch(&[unknown, good], 1);
    let recs = batch["Records"].as_array_mut().unwrap();
    let mut foreign = recs[1].clone();
    foreign["eventSourceARN"] =
        json!("arn:aws:dynamodb:us-east-1:000000000000:table/orders/stream/x");
    let mut malformed = recs[1].clone();
    malformed["dynamodb"]["NewImage"]
        .as_object_mut()
        .unwrap()
        .remove("transition");
    let mut modify = recs[1].clone();
    modify["eventName"] = json!("MODIFY");
    recs.insert(0, malformed);
    recs.insert(0, foreign);
    recs.insert(0, modify);
    recs.insert(0, json!({"not": "a record"}));
    let (resp, sum) = handlers::activity_events(&h.engine, &batch).await.unwrap();
    assert!(failures(&resp).is_empty(), "{resp:?}");
    assert_eq!(sum.applied, 1);
    assert_eq!(sum.skipped, 1);
    assert_eq!(sum.rejected, 4);
    assert_eq!(h.activity(&wf, "solo").await.state, ActivityState::Running);
    // A payload that is not a stream event at all is an invocation error.
    assert!(handlers::activity_events(&h.engine, &json!({"hello": 1}))
        .await
        .is_err());
}

#[tokio::test]
async fn workflow_request_failures_are_recorded_on_the_workflow() {
    let h = Harness::new().await;
    // Unknown workflow.
    let req = h.request("nobody", None);
    assert_eq!(
        h.engine.start_workflow(&req).await.unwrap(),
        Applied::Workflow(WorkflowState::Failed)
    );
    let w = h
        .workflow(&ids::workflow_exec_id("nobody", &req.workflow_request_id))
        .await;
    assert!(w.error.unwrap().contains("not registered"));
    // Invalid plan (cycle) from a static definition.
    h.register(
        "cyclic",
        json!({"activities": [
            {"name": "a", "lambda": "f", "depends_on": ["b"]},
            {"name": "b", "lambda": "f", "depends_on": ["a"]}
        ]}),
    )
    .await;
    let wf = h.start("cyclic").await;
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Failed);
    assert!(w.error.unwrap().contains("cycle"));
    // A decider that answers with an error.
    let reg = |name: &str, lambda: &str| whimbrel_core::model::WorkflowLambda {
        workflow_name: name.into(),
        lambda: Some(lambda.into()),
        definition: None,
    };
    let t = h.store.tables().workflow_lambda();
    h.store.put(&t, &reg("bad", "bad-decider")).await.unwrap();
    h.launcher.deciders.lock().unwrap().insert(
        "bad-decider".into(),
        Err(InvokeError::FunctionError {
            function: "bad-decider".into(),
            message: "boom".into(),
        }),
    );
    let wf = h.start("bad").await;
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Failed);
    assert!(w.error.unwrap().contains("boom"));
    // A decider that cannot be reached: retry, workflow stays REQUESTED.
    h.store
        .put(&t, &reg("flaky", "flaky-decider"))
        .await
        .unwrap();
    h.launcher.deciders.lock().unwrap().insert(
        "flaky-decider".into(),
        Err(InvokeError::Unavailable {
            function: "flaky-decider".into(),
            message: "throttled".into(),
        }),
    );
    let req = h.request("flaky", None);
    assert!(matches!(
        h.engine.start_workflow(&req).await,
        Err(EngineError::Retry(_))
    ));
    let id = ids::workflow_exec_id("flaky", &req.workflow_request_id);
    assert_eq!(h.workflow(&id).await.state, WorkflowState::Requested);
    // Once it answers, the redelivered request starts the workflow.
    h.launcher.deciders.lock().unwrap().insert(
        "flaky-decider".into(),
        Ok(json!({"version": 1, "activities": [{"name": "x", "lambda": "noop"}]})),
    );
    h.engine.start_workflow(&req).await.unwrap();
    assert_eq!(h.workflow(&id).await.state, WorkflowState::Running);
    assert_eq!(h.launcher.launches_of("x").len(), 1);
    // Full Logic API: a `manual` row is skipped by the stream handler and
    // started in-process by its writer.
    let mut manual = h.request("flaky", None);
    manual.manual = Some(true);
    let table = h.store.tables().workflow_request();
    let batch = stream_event(
        &table,
        &["workflow_request_id", "workflow_name"],
        std::slice::from_ref(&manual),
        1,
    );
    let (_, sum) = handlers::workflow_requests(&h.engine, &batch)
        .await
        .unwrap();
    assert_eq!(sum.skipped, 1);
    let id = ids::workflow_exec_id("flaky", &manual.workflow_request_id);
    assert!(
        h.engine.load_workflow(&id, "flaky").await.is_err(),
        "not started by the handler"
    );
    assert_eq!(
        h.engine.start_workflow(&manual).await.unwrap(),
        Applied::Workflow(WorkflowState::Running)
    );
    assert_eq!(h.workflow(&id).await.state, WorkflowState::Running);
}

#[tokio::test]
async fn a_launch_lambda_rejects_fails_the_activity() {
    let h = Harness::new().await;
    h.register(
        "missing",
        json!({"activities": [
            {"name": "a", "lambda": "missing-function"},
            {"name": "b", "lambda": "noop", "depends_on": ["a"]}
        ]}),
    )
    .await;
    let wf = h.start("missing").await;
    let a = h.activity(&wf, "a").await;
    assert_eq!(a.state, ActivityState::Failed);
    assert!(a.error.unwrap().contains("launch failed"));
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Cancelled);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
}

#[tokio::test]
async fn the_monitor_relaunches_an_activity_that_never_starts_then_fails_it() {
    let h = Harness::new().await;
    h.register("one", chain_plan(&["solo", "next"])).await;
    let wf = h.start("one").await;
    let solo = h.activity(&wf, "solo").await;
    assert!(solo.launched_time_epoch.is_some());
    assert!(solo.launch_shard.is_some(), "watched until it starts");
    let now = Timestamp::now().epoch;
    // Not yet: within queued_redrive_seconds.
    assert_eq!(h.engine.monitor_tick(now).await.unwrap().relaunched, 0);
    // The invocation was lost: launched again, twice, with a new attempt.
    for (i, at) in [(2, now + 3600), (3, now + 7200)] {
        let report = h.engine.monitor_tick(at).await.unwrap();
        assert_eq!(report.relaunched, 1);
        let launches = h.launcher.launches_of("solo");
        assert_eq!(launches.len(), i);
        assert_eq!(launches[i - 1]["attempt"], i);
    }
    // Still nothing after max_launch_attempts: it fails with the reason.
    h.engine.monitor_tick(now + 10_800).await.unwrap();
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(solo.state, ActivityState::Failed);
    assert!(solo.error.unwrap().contains("not started after 3 launches"));
    assert!(solo.launch_shard.is_none());
    assert_eq!(
        h.activity(&wf, "next").await.state,
        ActivityState::Cancelled
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    // Once it runs, the monitor leaves it alone.
    let wf = h.start("one").await;
    h.engine
        .apply_event(&h.event(&wf, "solo", "RUNNING"))
        .await
        .unwrap();
    assert!(h.activity(&wf, "solo").await.launch_shard.is_none());
    let before = h.launcher.launch_count();
    h.engine.monitor_tick(now + 3600).await.unwrap();
    assert_eq!(h.launcher.launch_count(), before);
}

#[tokio::test]
async fn oversized_input_and_output_fail_with_the_reason() {
    let h = Harness::new().await;
    h.register("one", chain_plan(&["solo"])).await;
    let big = "x".repeat(whimbrel_core::plan::MAX_WORKFLOW_INPUT_BYTES + 1);
    let req = h.request("one", Some(json!({ "text": big })));
    assert_eq!(
        h.engine.start_workflow(&req).await.unwrap(),
        Applied::Workflow(WorkflowState::Failed)
    );
    let w = h
        .workflow(&ids::workflow_exec_id("one", &req.workflow_request_id))
        .await;
    assert!(w.error.unwrap().contains("workflow input is"));
    assert!(w.input.is_none());

    let wf = h.start("one").await;
    h.engine
        .apply_event(&h.event(&wf, "solo", "RUNNING"))
        .await
        .unwrap();
    let mut done = h.event(&wf, "solo", "COMPLETED");
    done.output = Some(json!("y".repeat(whimbrel_core::plan::MAX_OUTPUT_BYTES + 1)));
    assert_eq!(
        h.engine.apply_event(&done).await.unwrap(),
        Applied::State(ActivityState::Failed)
    );
    let solo = h.activity(&wf, "solo").await;
    assert!(solo.error.unwrap().contains("output is"));
    assert!(solo.output.is_none());
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
}

/// Set attributes of an item directly (test set-up: simulating the state a
/// crash leaves behind).
async fn force(
    h: &Harness,
    table: String,
    key: Vec<(&str, &str)>,
    update: &str,
    values: Vec<(&str, aws_sdk_dynamodb::types::AttributeValue)>,
) {
    let key = key
        .into_iter()
        .map(|(k, v)| (k.to_string(), s(v)))
        .collect();
    let mut req = UpdateRequest::new(table, key).name("#st", "state");
    for (k, v) in values {
        req = req.value(k, v);
    }
    req.update = update.into();
    h.store.update(req, false).await.unwrap();
}

/// Leave what a terminal transaction leaves when the function dies right
/// after it: the activity's state and last event (plus `extra` SET clauses
/// bound to `:x`), the workflow's failed counter, and no side effects.
async fn interrupt_after_terminal_write(
    h: &Harness,
    wf: &str,
    workflow_name: &str,
    activity_exec_id: &str,
    state: ActivityState,
    event_id: String,
    extra: Option<(&str, aws_sdk_dynamodb::types::AttributeValue)>,
) {
    let mut update = "SET #st = :t, last_event_id = :e".to_string();
    let mut values = vec![(":t", s(state.as_str())), (":e", s(event_id))];
    if let Some((clause, value)) = extra {
        update.push_str(", ");
        update.push_str(clause);
        values.push((":x", value));
    }
    force(
        h,
        h.store.tables().activity_exec(),
        vec![
            ("activity_exec_id", activity_exec_id),
            ("workflow_exec_id", wf),
        ],
        &update,
        values,
    )
    .await;
    force(
        h,
        h.store.tables().workflow_exec(),
        vec![("workflow_exec_id", wf), ("workflow_name", workflow_name)],
        "ADD failed_count :one",
        vec![(":one", n(1))],
    )
    .await;
}

#[tokio::test]
async fn a_monitor_timeout_whose_side_effects_were_interrupted_is_resumed_by_the_next_tick() {
    let h = Harness::new().await;
    h.register(
        "hb",
        json!({"activities": [
            {"name": "slow", "lambda": "noop", "heartbeat_timeout_seconds": 30},
            {"name": "after", "lambda": "noop", "depends_on": ["slow"]}
        ]}),
    )
    .await;
    let wf = h.start("hb").await;
    h.engine
        .apply_event(&h.event(&wf, "slow", "RUNNING"))
        .await
        .unwrap();
    let slow = h.activity(&wf, "slow").await;
    // What the TIMED_OUT transaction leaves if the function dies right
    // after it: state and counter written, markers kept, nothing else.
    interrupt_after_terminal_write(
        &h,
        &wf,
        "hb",
        &slow.activity_exec_id,
        ActivityState::TimedOut,
        format!(
            "heartbeat-monitor:{}:{}",
            slow.activity_exec_id, slow.heartbeat_time_epoch
        ),
        None,
    )
    .await;
    assert_eq!(
        h.activity(&wf, "after").await.state,
        ActivityState::Requested
    );
    let report = h
        .engine
        .monitor_tick(Timestamp::now().epoch + 60)
        .await
        .unwrap();
    assert_eq!(report.errors, 0);
    assert_eq!(
        h.activity(&wf, "after").await.state,
        ActivityState::Cancelled
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    let slow = h.activity(&wf, "slow").await;
    assert!(slow.heartbeat_shard.is_none() && slow.heartbeat_deadline_epoch.is_none());
    assert_eq!(
        slow.history.len(),
        2,
        "no second TIMED_OUT: {:?}",
        slow.history
    );
}

#[tokio::test]
async fn a_refused_launch_whose_side_effects_were_interrupted_is_resumed() {
    let h = Harness::new().await;
    h.register(
        "missing",
        json!({"activities": [
            {"name": "a", "lambda": "noop"},
            {"name": "b", "lambda": "noop", "depends_on": ["a"]}
        ]}),
    )
    .await;
    let req = h.request("missing", None);
    h.engine.start_workflow(&req).await.unwrap();
    let wf = ids::workflow_exec_id("missing", &req.workflow_request_id);
    let a = h.activity(&wf, "a").await;
    // The state a crash leaves between the engine's FAILED write (markers
    // kept) and its side effects.
    interrupt_after_terminal_write(
        &h,
        &wf,
        "missing",
        &a.activity_exec_id,
        ActivityState::Failed,
        format!("launch-failed:{}:1", a.activity_exec_id),
        Some(("launch_shard = :x", n(0))),
    )
    .await;
    // The request record is redelivered: the roots' resume settles `a`.
    h.engine.start_workflow(&req).await.unwrap();
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Cancelled);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    assert!(h.activity(&wf, "a").await.launch_shard.is_none());
}

#[tokio::test]
async fn a_redelivered_request_does_not_reset_an_activity_cancelled_meanwhile() {
    let h = Harness::new().await;
    h.register("pair", chain_plan(&["root", "x"])).await;
    let req = h.request("pair", None);
    h.engine.start_workflow(&req).await.unwrap();
    let wf = ids::workflow_exec_id("pair", &req.workflow_request_id);
    h.engine
        .apply_event(&h.event(&wf, "x", "CANCEL"))
        .await
        .unwrap();
    // As if the function had died before moving the workflow to RUNNING.
    force(
        &h,
        h.store.tables().workflow_exec(),
        vec![("workflow_exec_id", &wf), ("workflow_name", "pair")],
        "SET #st = :r",
        vec![(":r", s("REQUESTED"))],
    )
    .await;
    h.engine.start_workflow(&req).await.unwrap();
    let x = h.activity(&wf, "x").await;
    assert_eq!(
        x.state,
        ActivityState::Cancelled,
        "not re-created as REQUESTED"
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
    assert_eq!(h.launcher.launches_of("root").len(), 1);
}

#[tokio::test]
async fn a_cancelled_transaction_applies_nothing() {
    // The engine's exactly-once counting relies on it.
    let h = Harness::new().await;
    h.register("one", chain_plan(&["solo"])).await;
    let wf = h.start("one").await;
    let solo = h.activity(&wf, "solo").await;
    let activity = UpdateRequest {
        update: "SET #st = :s".into(),
        ..UpdateRequest::new(
            h.store.tables().activity_exec(),
            HashMap::from([
                ("activity_exec_id".to_string(), s(&solo.activity_exec_id)),
                ("workflow_exec_id".to_string(), s(&wf)),
            ]),
        )
        .name("#st", "state")
        .value(":s", s("COMPLETED"))
    };
    let workflow = UpdateRequest {
        update: "ADD completed_count :one".into(),
        condition: Some("attribute_not_exists(workflow_exec_id)".into()),
        ..UpdateRequest::new(
            h.store.tables().workflow_exec(),
            HashMap::from([
                ("workflow_exec_id".to_string(), s(&wf)),
                ("workflow_name".to_string(), s("one")),
            ]),
        )
        .value(":one", n(1))
    };
    let r = h.store.transact_update(vec![activity, workflow]).await;
    assert!(
        matches!(r, Err(whimbrel_core::store::StoreError::ConditionFailed)),
        "{r:?}"
    );
    assert_eq!(h.activity(&wf, "solo").await.state, ActivityState::Queued);
    assert_eq!(h.workflow(&wf).await.completed_count, 0);
    // And the tables still work afterwards.
    h.run_to_completion(&wf, "solo").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

#[tokio::test]
async fn an_activity_that_acknowledged_its_launch_is_not_relaunched_while_its_running_event_waits()
{
    let h = Harness::new().await;
    h.register("one", chain_plan(&["solo"])).await;
    let wf = h.start("one").await;
    let payload: whimbrel_core::plan::LaunchPayload =
        serde_json::from_value(h.launcher.launches_of("solo")[0].clone()).unwrap();
    let activity = whimbrel_core::activity::Activity::new(
        payload,
        h.store.clone(),
        whimbrel_core::engine::EngineConfig {
            table_prefix: h.store.tables().prefix.clone(),
            ..Default::default()
        },
    );
    let event_id = activity.running().await.unwrap();
    // The RUNNING row is in the event table, not applied yet (stream lag).
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(solo.state, ActivityState::Queued);
    assert!(solo.launch_shard.is_none(), "launch acknowledged");
    let report = h
        .engine
        .monitor_tick(Timestamp::now().epoch + 3600)
        .await
        .unwrap();
    assert_eq!(report.relaunched, 0);
    assert_eq!(h.launcher.launches_of("solo").len(), 1);
    // Then the event arrives and applies as usual.
    let key = HashMap::from([
        ("activity_event_id".to_string(), s(&event_id)),
        ("activity_exec_id".to_string(), s(&solo.activity_exec_id)),
    ]);
    let ev: whimbrel_core::model::ActivityEvent = h
        .store
        .get(&h.store.tables().activity_event(), key)
        .await
        .unwrap()
        .unwrap();
    h.engine.apply_event(&ev).await.unwrap();
    assert_eq!(h.activity(&wf, "solo").await.state, ActivityState::Running);
}

#[tokio::test]
async fn a_start_to_close_timeout_times_out_a_running_activity_with_or_without_heartbeats() {
    let h = Harness::new().await;
    h.register(
        "stc",
        json!({"activities": [
            {"name": "quiet", "lambda": "noop", "timeout_seconds": 100},
            {"name": "chatty", "lambda": "noop", "timeout_seconds": 100, "heartbeat_timeout_seconds": 30},
            {"name": "free", "lambda": "noop"}
        ]}),
    )
    .await;
    let wf = h.start("stc").await;
    assert_eq!(h.launcher.launches_of("quiet")[0]["timeout_seconds"], 100);
    for name in ["quiet", "chatty", "free"] {
        h.engine
            .apply_event(&h.event(&wf, name, "RUNNING"))
            .await
            .unwrap();
    }
    let start = h.activity(&wf, "quiet").await.start_time_epoch;
    assert!(
        h.activity(&wf, "quiet").await.heartbeat_shard.is_some(),
        "watched without heartbeats"
    );
    assert!(
        h.activity(&wf, "free").await.heartbeat_shard.is_none(),
        "no limit, not watched"
    );
    let chatty = h.activity(&wf, "chatty").await;
    assert_eq!(
        chatty.heartbeat_deadline_epoch,
        Some(chatty.start_time_epoch + 30)
    );
    // Well within both limits: nothing.
    assert_eq!(
        h.engine.monitor_tick(start + 20).await.unwrap().timed_out,
        0
    );
    // Heartbeats keep `chatty` alive, but never past start + 100.
    h.engine.heartbeat(&chatty.activity_exec_id).await.unwrap();
    let d = h
        .activity(&wf, "chatty")
        .await
        .heartbeat_deadline_epoch
        .unwrap();
    assert!(
        d <= chatty.start_time_epoch + 100 && d >= Timestamp::now().epoch + 29,
        "{d}"
    );
    // Past start + 100: both time out, with the start-to-close reason.
    let report = h.engine.monitor_tick(start + 200).await.unwrap();
    assert_eq!(report.timed_out, 2);
    for name in ["quiet", "chatty"] {
        let x = h.activity(&wf, name).await;
        assert_eq!(x.state, ActivityState::TimedOut, "{name}");
        assert!(
            x.error.unwrap().contains("not finished within 100s"),
            "{name}"
        );
    }
    assert_eq!(h.activity(&wf, "free").await.state, ActivityState::Running);
    // The workflow ends once `free` does, FAILED by the timeouts.
    h.engine
        .apply_event(&h.event(&wf, "free", "COMPLETED"))
        .await
        .unwrap();
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
}
