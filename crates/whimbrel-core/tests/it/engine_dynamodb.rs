//! The engine against a real DynamoDB API (DynamoDB Local, started by the tests):
//! every contract transition through the real tables, dependency release,
//! fan-in, failure and timeout propagation, redelivery, stream batches, the
//! monitor's due-index sweep, parked early events and fenced attempts.
//!
//! The tests named `finding_N_...` each pin one rule of recovery, fencing
//! or bounds against the real tables (their state after the fact); the
//! number only groups related tests.

use crate::common::{counts, failures, stream_event, terminal_write_only, Harness};
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, Actor, Transition, WorkflowState, TRANSITIONS};
use whimbrel_core::engine::decide::{self, Change, Details, MAX_ERROR_BYTES};
use whimbrel_core::engine::{Applied, EngineError};
use whimbrel_core::handlers;
use whimbrel_core::ids;
use whimbrel_core::launcher::InvokeError;
use whimbrel_core::model::ActivityExec;
use whimbrel_core::store::Value as AttributeValue;
use whimbrel_core::store::{n, s, shard_of, Action, Cond, StoreError, UpdateRequest};

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

/// An UpdateItem of activity `name` of `wf` (test set-up only).
fn activity_update(h: &Harness, wf: &str, name: &str) -> UpdateRequest {
    UpdateRequest::new(
        h.store.tables().activity_exec(),
        decide::activity_key(&ids::activity_exec_id(wf, name), wf),
    )
}

/// An UpdateItem of workflow exec `wf` (test set-up only).
fn workflow_update(h: &Harness, wf: &str) -> UpdateRequest {
    UpdateRequest::new(
        h.store.tables().workflow_exec(),
        decide::workflow_key(wf, ids::name_of(wf).unwrap()),
    )
}

/// Write directly (test set-up: a state the engine never writes this way,
/// or the state a crash leaves behind).
async fn force(h: &Harness, req: UpdateRequest) {
    h.store.update(req).await.expect("forced write");
}

/// Force an activity's state, as launched once (attempt 1, no token), so
/// reports are judged by the contract table alone.
async fn force_state(h: &Harness, wf: &str, name: &str, state: ActivityState) {
    let mut req = activity_update(h, wf, name)
        .set("state", s(state.as_str()))
        .set("attempt", n(1))
        .set("attempt_token_hash", s(ids::token_hash("forced")));
    if state.is_running() {
        req = req.set("start_time_epoch", n(h.now()));
    }
    force(h, req).await;
}

/// The architecture's raw heartbeat: an UpdateItem that only SETs
/// `heartbeat_time_epoch`, conditioned on `heartbeat_enabled = true`.
async fn raw_heartbeat(h: &Harness, wf: &str, name: &str, at: i64) {
    let req = activity_update(h, wf, name)
        .when(Cond::eq("heartbeat_enabled", AttributeValue::Bool(true)))
        .set("heartbeat_time_epoch", n(at));
    force(h, req).await;
}

/// The states of `names` in `wf`.
async fn states(h: &Harness, wf: &str, names: &[&str]) -> Vec<ActivityState> {
    let mut out = vec![];
    for name in names {
        out.push(h.activity(wf, name).await.state);
    }
    out
}

fn count_in_history(x: &ActivityExec, state: ActivityState) -> usize {
    x.trail.history.iter().filter(|e| e.state == state).count()
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
            x.last_event().as_deref(),
            Some(ev.activity_event_id.as_str())
        );
        assert_eq!(x.trail.history.last().map(|e| e.state), Some(*to));
        if to.is_terminal() {
            assert!(
                x.timing.end_time_epoch.is_some(),
                "{from} x {transition}: end time"
            );
            assert!(
                x.timing.due_epoch.is_none() && x.timing.due_shard.is_none(),
                "{from} x {transition}: side effects done, marker cleared"
            );
            let (c, f, x) = h.counted(&wf).await;
            assert_eq!(c + f + x, 1, "{from} x {transition}: counted once");
        } else if *to != ActivityState::Ready {
            // Every non-terminal state after launch has a deadline.
            assert!(
                x.timing.due_epoch.is_some(),
                "{from} x {transition}: deadline"
            );
            assert_eq!(x.timing.due_shard, Some(shard_of(&x.activity_exec_id)));
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
    // x was never launched (REQUESTED, attempt 0): a report of progress is
    // refused at once, not retried and not parked.
    for t in ["RUNNING", "PREPARING", "COMPLETED", "FAILED"] {
        let r = h.engine.apply_event(&h.event(&wf, "x", t)).await;
        assert!(
            matches!(&r, Err(EngineError::Rejected(m)) if m.contains("has no launched attempt")),
            "{t}: {r:?}"
        );
    }
    let x = h.activity(&wf, "x").await;
    assert_eq!(x.state, ActivityState::Requested);
    assert!(x.trail.parked.is_empty());
    // root is launched (QUEUED): COMPLETED is not valid yet -> parked.
    let early = h.event(&wf, "root", "COMPLETED");
    assert_eq!(
        h.engine.apply_event(&early).await.unwrap(),
        Applied::Parked(ActivityState::Queued)
    );
    assert_eq!(
        h.engine.apply_event(&early).await.unwrap(),
        Applied::Parked(ActivityState::Queued),
        "redelivered: still parked"
    );
    assert_eq!(
        h.activity(&wf, "root").await.trail.parked.len(),
        1,
        "parked once"
    );
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
    // An id not in the recommended form still works (existing clients);
    // the parked COMPLETED follows it.
    let mut other = h.event(&wf, "root", "RUNNING");
    other.activity_event_id = "legacy-event-42".into();
    assert_eq!(
        h.engine.apply_event(&other).await.unwrap(),
        Applied::State(ActivityState::Running)
    );
    let root = h.activity(&wf, "root").await;
    assert_eq!(root.state, ActivityState::Completed);
    assert!(root.trail.parked.is_empty());
    assert_eq!(h.launcher.launches_of("x").len(), 1);
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
        let x = h.activity(&wf, "x").await;
        assert_eq!(x.state, end);
        assert!(x.trail.parked.is_empty(), "{end}: nothing parked");
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
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Running);
    assert!(
        w.due_epoch.is_none(),
        "roots launched: start marker cleared"
    );
    let a = h.launcher.launches_of("a");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["input"], json!({"n": 1}));
    assert_eq!(a[0]["attempt"], 1);
    assert_eq!(a[0]["workflow_exec_id"], wf.as_str());
    let token = a[0]["attempt_token"].as_str().expect("attempt token");
    let a_exec = h.activity(&wf, "a").await;
    assert_eq!(a_exec.state, ActivityState::Queued);
    assert_eq!(a_exec.attempt.number, 1);
    assert_eq!(
        a_exec.attempt.token_hash.as_deref(),
        Some(ids::token_hash(token).as_str()),
        "the item keeps the token's hash only"
    );
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Requested);

    // Every event delivered twice.
    for name in ["a", "b", "c", "d"] {
        for t in ["RUNNING", "COMPLETED"] {
            let ev = h.event(&wf, name, t);
            h.engine.apply_event(&ev).await.unwrap();
            h.engine.apply_event(&ev).await.unwrap();
        }
    }
    let mut tokens = vec![];
    for name in ["a", "b", "c", "d"] {
        let launches = h.launcher.launches_of(name);
        assert_eq!(launches.len(), 1, "{name} launched once");
        tokens.push(launches[0]["attempt_token"].as_str().unwrap().to_string());
        let x = h.activity(&wf, name).await;
        assert_eq!(x.state, ActivityState::Completed);
        assert_eq!(x.links.pending_dependency_count, 0, "{name}");
        assert!(x.timing.due_epoch.is_none(), "{name}: nothing owed");
    }
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 4, "one token per attempt");
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
    let (retry, sum) = h.deliver(&running, 1).await;
    assert!(retry.is_empty());
    assert_eq!(counts(&sum), (50, 0, 0, 0, 0));
    // The batch delivered twice.
    for _ in 0..2 {
        let (retry, sum) = h.deliver(&completed, 100).await;
        assert!(retry.is_empty(), "{retry:?}");
        assert_eq!(counts(&sum), (50, 0, 0, 0, 0));
    }
    assert_eq!(h.launcher.launches_of("join").len(), 1);
    let join = h.activity(&wf, "join").await;
    assert_eq!(join.state, ActivityState::Queued);
    assert_eq!(join.attempt.number, 1);
    assert_eq!(join.links.pending_dependency_count, 0);
    // Wider than a join group: released through two groups (32 + 18).
    assert_eq!(join.links.join_groups, Some(2));
    // Its markers go with the claim: at 0 pending they guard nothing.
    assert!(join.links.released_prerequisites.is_empty());
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
        assert!(x.outcome.error.unwrap().contains("ended"), "{name}");
        assert!(x.timing.due_epoch.is_none(), "{name}");
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
    assert_eq!(
        slow.timing.due_epoch,
        Some(slow.timing.start_time_epoch + 30),
        "due at the heartbeat deadline"
    );
    let now = h.now();
    // A heartbeat keeps it alive.
    assert_eq!(
        h.engine.heartbeat(&slow.activity_exec_id).await.unwrap(),
        ActivityState::Running
    );
    let report = h.tick(now + 10).await;
    assert_eq!(report.timed_out, 0);
    // The monitor first looks at the start's deadline (+ the grace) and
    // finds a heartbeat it has not seen, whose time by the client's clock
    // is already past: it cannot tell a clock behind from an activity that
    // stopped, so it counts that heartbeat from now (docs/design.md
    // § 3.10): not yet.
    let hb = h.activity(&wf, "slow").await.timing.heartbeat_time_epoch;
    let first_look = hb + 35;
    let report = h.tick(first_look).await;
    assert_eq!(report.timed_out, 0);
    let slow = h.activity(&wf, "slow").await;
    assert_eq!(slow.state, ActivityState::Running);
    assert_eq!(
        (slow.timing.heartbeat_seen, slow.timing.heartbeat_seen_epoch),
        (Some(hb), Some(first_look))
    );
    assert_eq!(slow.timing.due_epoch, Some(first_look + 30));
    let report = h.tick(first_look + 35).await;
    assert_eq!(report.timed_out, 0, "within the report grace");
    // 30 s after the monitor saw it (+ the grace): timed out.
    let report = h.tick(first_look + 40).await;
    assert_eq!(report.timed_out, 1);
    let slow = h.activity(&wf, "slow").await;
    assert_eq!(slow.state, ActivityState::TimedOut);
    assert!(slow
        .outcome
        .error
        .as_deref()
        .unwrap()
        .contains("no heartbeat for 30s"));
    assert!(
        slow.timing.due_epoch.is_none() && slow.timing.due_shard.is_none(),
        "left the sparse index"
    );
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
    let report = h.tick(first_look + 120).await;
    assert_eq!((report.timed_out, report.settled), (0, 0));
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
    let attempt = h.attempt("w", 0);
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
    assert_eq!(w.timeouts.heartbeat_timeout_seconds, Some(300));
    assert_eq!(
        h.engine.heartbeat(&w.activity_exec_id).await.unwrap(),
        ActivityState::CancelledRunning
    );
    // The activity's own heartbeat (with its token) learns it too, and its
    // own CANCEL ends it.
    assert_eq!(
        attempt.heartbeat().await.unwrap(),
        ActivityState::CancelledRunning
    );
    let id = attempt.cancelled("stopped on request").await.unwrap();
    let ev = h.event_row(&w.activity_exec_id, &id).await;
    assert_eq!(
        h.engine.apply_event(&ev).await.unwrap(),
        Applied::State(ActivityState::Cancelled)
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Cancelled);
}

#[tokio::test]
async fn completed_delivered_before_running_is_parked_then_applied() {
    let h = Harness::new().await;
    h.register("one", chain_plan(&["solo"])).await;
    let wf = h.start("one").await;
    let completed = h.event(&wf, "solo", "COMPLETED");
    let running = h.event(&wf, "solo", "RUNNING");
    // COMPLETED alone: not valid yet, parked on the activity; the batch
    // succeeds (no batch item failure to block the shard).
    let (retry, sum) = h.deliver(std::slice::from_ref(&completed), 10).await;
    assert!(retry.is_empty(), "{retry:?}");
    assert_eq!(counts(&sum), (1, 0, 0, 0, 1));
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(solo.state, ActivityState::Queued);
    assert_eq!(solo.trail.parked.len(), 1);
    assert_eq!(
        solo.trail.parked[0].activity_event_id,
        completed.activity_event_id
    );
    // RUNNING arrives in a later batch: applied, then the parked COMPLETED.
    let (retry, sum) = h.deliver(std::slice::from_ref(&running), 11).await;
    assert!(retry.is_empty(), "{retry:?}");
    assert_eq!(counts(&sum), (1, 0, 0, 0, 0));
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(solo.state, ActivityState::Completed);
    assert!(solo.trail.parked.is_empty());
    assert_eq!(solo.outcome.output, Some(json!({"from": "solo"})));
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    // Both redelivered (as the stream may): nothing changes.
    let version = solo.version;
    let (retry, sum) = h.deliver(&[completed, running], 10).await;
    assert!(retry.is_empty(), "{retry:?}");
    assert_eq!(counts(&sum), (2, 0, 0, 0, 0));
    assert_eq!(h.activity(&wf, "solo").await.version, version);
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
    assert_eq!(counts(&sum), (1, 1, 4, 0, 0));
    assert_eq!(sum.overwritten, 1, "the MODIFY is counted as an overwrite");
    assert_eq!(sum.records.len(), 6);
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
    assert!(w.due_epoch.is_none(), "ended: no marker");
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
        allow: None,
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
    // A decider that cannot be reached: retry, workflow stays REQUESTED
    // with its due marker.
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
    let w = h.workflow(&id).await;
    assert_eq!(w.state, WorkflowState::Requested);
    assert!(w.due_epoch.is_some());
    // Once it answers, the redelivered request starts the workflow.
    h.launcher.deciders.lock().unwrap().insert(
        "flaky-decider".into(),
        Ok(json!({"version": 1, "activities": [{"name": "x", "lambda": "noop"}]})),
    );
    h.engine.start_workflow(&req).await.unwrap();
    let w = h.workflow(&id).await;
    assert_eq!(w.state, WorkflowState::Running);
    assert!(w.due_epoch.is_none());
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
    assert_eq!(a.attempt.number, 1);
    assert!(a.outcome.error.unwrap().starts_with("LAUNCH_FAILED: "));
    assert!(a.timing.due_epoch.is_none());
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Cancelled);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
}

#[tokio::test]
async fn the_monitor_relaunches_an_activity_that_never_starts_then_fails_it() {
    let h = Harness::new().await;
    h.register("one", chain_plan(&["solo", "next"])).await;
    let wf = h.start("one").await;
    let solo = h.activity(&wf, "solo").await;
    // Launch times are opt-in (WHIMBREL_RECORD_LAUNCHES): one write less
    // per launch. The claim's queue time is always there.
    assert!(solo.timing.launched_time_epoch.is_none());
    assert!(solo.timing.queued_time_epoch.is_some());
    let queued = solo.timing.queued_time_epoch.unwrap();
    assert_eq!(
        solo.timing.due_epoch,
        Some(queued + h.config().relaunch_after_seconds),
        "watched until it starts (schedule-to-start)"
    );
    let now = h.now();
    // Not yet: within relaunch_after_seconds.
    assert_eq!(h.tick(now).await.relaunched, 0);
    // The invocation was lost: launched again, twice, as the same attempt
    // with a new launch number and a new token each time.
    for (i, at) in [(2, now + 3600), (3, now + 7200)] {
        let report = h.tick(at).await;
        assert_eq!(report.relaunched, 1);
        let launches = h.launcher.launches_of("solo");
        assert_eq!(launches.len(), i);
        assert_eq!(launches[i - 1]["attempt"], 1);
        assert_eq!(launches[i - 1]["launch"], i);
        assert_ne!(
            launches[i - 1]["attempt_token"],
            launches[i - 2]["attempt_token"]
        );
        let solo = h.activity(&wf, "solo").await;
        assert_eq!(
            (solo.attempt.number, solo.attempt.launches as usize),
            (1, i)
        );
        assert_eq!(solo.state, ActivityState::Queued);
    }
    // Still nothing after max_launch_attempts: it fails with the reason.
    let report = h.tick(now + 10_800).await;
    assert_eq!((report.relaunched, report.not_started), (0, 1));
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(solo.state, ActivityState::Failed);
    assert!(
        solo.outcome
            .error
            .as_deref()
            .unwrap()
            .starts_with("NOT_STARTED: attempt 1 not started after 3 launches"),
        "{:?}",
        solo.outcome.error
    );
    assert!(solo.timing.due_epoch.is_none());
    assert_eq!(h.launcher.launches_of("solo").len(), 3);
    assert_eq!(
        h.activity(&wf, "next").await.state,
        ActivityState::Cancelled
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    // Once it runs, the monitor leaves it alone (until its start-to-close).
    let wf = h.start("one").await;
    h.engine
        .apply_event(&h.event(&wf, "solo", "RUNNING"))
        .await
        .unwrap();
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(
        h.deadline(&solo),
        solo.timing.start_time_epoch + h.config().default_start_to_close_seconds
    );
    let before = h.launcher.launch_count();
    let report = h.tick(solo.timing.start_time_epoch + 3000).await;
    assert_eq!((report.relaunched, report.timed_out), (0, 0));
    assert_eq!(h.launcher.launch_count(), before);
    assert_eq!(h.activity(&wf, "solo").await.state, ActivityState::Running);
    let report = h.tick(solo.timing.start_time_epoch + 3600 + 10).await;
    assert_eq!((report.relaunched, report.timed_out), (0, 1));
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
    assert!(solo.outcome.error.unwrap().contains("output is"));
    assert!(solo.outcome.output.is_none());
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
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
    // What the monitor's TIMED_OUT transaction leaves if the function dies
    // right after it: state, counter and due marker written, nothing else.
    let at = terminal_write_only(
        &h,
        &wf,
        "slow",
        Transition::TimedOut,
        ActivityState::TimedOut,
        &format!(
            "timed-out:{}:{}",
            slow.activity_exec_id, slow.attempt.number
        ),
        Details {
            error: Some("no heartbeat for 30s (heartbeat timeout)".into()),
            ..Details::default()
        },
    )
    .await;
    assert_eq!(
        h.activity(&wf, "after").await.state,
        ActivityState::Requested
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
    // Before the marker (the settle grace at least): not due.
    let report = h.tick(at - 1).await;
    assert_eq!(report.settled, 0);
    let report = h.tick(at + 1).await;
    assert_eq!((report.settled, report.errors), (1, 0));
    assert_eq!(
        h.activity(&wf, "after").await.state,
        ActivityState::Cancelled
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    let slow = h.activity(&wf, "slow").await;
    assert!(slow.timing.due_epoch.is_none() && slow.timing.due_shard.is_none());
    assert_eq!(
        count_in_history(&slow, ActivityState::TimedOut),
        1,
        "no second TIMED_OUT: {:?}",
        slow.trail.history
    );
    // Settled: the next tick finds nothing.
    let report = h.tick(at + 600).await;
    assert_eq!((report.settled, report.timed_out), (0, 0));
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
    // The state a crash leaves between the engine's FAILED write (launch
    // refused) and its side effects.
    let at = terminal_write_only(
        &h,
        &wf,
        "a",
        Transition::Failed,
        ActivityState::Failed,
        &format!("launch-failed:{}:1", a.activity_exec_id),
        Details {
            error: Some("launch failed: cannot invoke noop".into()),
            ..Details::default()
        },
    )
    .await;
    // The request record redelivered changes nothing (a is not launched
    // again); the due marker is what resumes the side effects.
    let launches = h.launcher.launch_count();
    h.engine.start_workflow(&req).await.unwrap();
    assert_eq!(h.launcher.launch_count(), launches);
    let report = h.tick(at + 1).await;
    assert_eq!(report.settled, 1);
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Cancelled);
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Failed);
    assert!(w.error.unwrap().contains("launch failed"));
    assert!(h.activity(&wf, "a").await.timing.due_epoch.is_none());
}

#[tokio::test]
async fn a_redelivered_request_does_not_reset_an_activity_cancelled_meanwhile() {
    let h = Harness::new().await;
    h.register("pair", chain_plan(&["root", "x"])).await;
    let req = h.request("pair", None);
    h.engine.start_workflow(&req).await.unwrap();
    let wf = ids::workflow_exec_id("pair", &req.workflow_request_id);
    // A user may cancel an activity that was never launched.
    assert_eq!(
        h.engine
            .apply_event(&h.event(&wf, "x", "CANCEL"))
            .await
            .unwrap(),
        Applied::State(ActivityState::Cancelled)
    );
    // As if the function had died before moving the workflow to RUNNING.
    force(
        &h,
        workflow_update(&h, &wf).set("state", s(WorkflowState::Requested.as_str())),
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
    let activity = activity_update(&h, &wf, "solo").set("state", s("COMPLETED"));
    let workflow = workflow_update(&h, &wf)
        .when(Cond::not_exists("workflow_exec_id"))
        .act(Action::Add("completed_count".into(), n(1)));
    let r = h
        .store
        .transact(vec![activity.into_write(), workflow.into_write()])
        .await;
    assert!(matches!(r, Err(StoreError::ConditionFailed)), "{r:?}");
    assert_eq!(h.activity(&wf, "solo").await.state, ActivityState::Queued);
    assert_eq!(h.workflow(&wf).await.completed_count, 0);
    // And the tables still work afterwards.
    h.run_to_completion(&wf, "solo").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

#[tokio::test]
async fn the_monitor_applies_a_running_row_still_in_flight_instead_of_relaunching() {
    let h = Harness::new().await;
    h.register("one", chain_plan(&["solo"])).await;
    let wf = h.start("one").await;
    let event_id = h.attempt("solo", 0).running().await.unwrap();
    // The RUNNING row is in the event table, not applied yet (stream lag).
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(solo.state, ActivityState::Queued);
    let report = h.tick(h.now() + 3600).await;
    assert_eq!((report.relaunched, report.reports_applied), (0, 1));
    assert_eq!(h.launcher.launches_of("solo").len(), 1);
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(solo.state, ActivityState::Running);
    assert_eq!(solo.attempt.number, 1);
    assert_eq!(solo.last_event().as_deref(), Some(event_id.as_str()));
    // Then the stream delivers the row: already applied, nothing changes.
    let ev = h.event_row(&solo.activity_exec_id, &event_id).await;
    assert_eq!(
        h.engine.apply_event(&ev).await.unwrap(),
        Applied::State(ActivityState::Running)
    );
    assert_eq!(h.activity(&wf, "solo").await.version, solo.version);
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
    let quiet = h.activity(&wf, "quiet").await;
    let start = quiet.timing.start_time_epoch;
    assert_eq!(
        h.deadline(&quiet),
        start + 100,
        "watched without heartbeats"
    );
    let free = h.activity(&wf, "free").await;
    assert_eq!(
        h.deadline(&free),
        free.timing.start_time_epoch + 3600,
        "no limit given: the default start-to-close"
    );
    let chatty = h.activity(&wf, "chatty").await;
    assert_eq!(h.deadline(&chatty), chatty.timing.start_time_epoch + 30);
    // Well within both limits: nothing.
    assert_eq!(h.tick(start + 20).await.timed_out, 0);
    // Heartbeats keep `chatty` alive, but never past start + 100: at
    // start + 200 it heartbeated 5 s ago.
    raw_heartbeat(&h, &wf, "chatty", chatty.timing.start_time_epoch + 195).await;
    // Past start + 100: both time out, with the start-to-close reason.
    let report = h.tick(start + 200).await;
    assert_eq!(report.timed_out, 2);
    for name in ["quiet", "chatty"] {
        let x = h.activity(&wf, name).await;
        assert_eq!(x.state, ActivityState::TimedOut, "{name}");
        assert!(
            x.outcome
                .error
                .as_deref()
                .unwrap()
                .contains("not finished within 100s"),
            "{name}: {:?}",
            x.outcome.error
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

// ---------------------------------------------------------------------------
// Recovery, fencing and bounds, one rule per test, against the real tables.
// ---------------------------------------------------------------------------

/// Nothing waits on redelivery. A client COMPLETED whose side
/// effects were interrupted (terminal write done, dependents not released)
/// is finished by the monitor from its due marker, with no redelivery.
#[tokio::test]
async fn finding_1_interrupted_completed_is_finished_by_the_monitor_without_redelivery() {
    let h = Harness::new().await;
    h.register("chain", chain_plan(&["a", "b"])).await;
    let wf = h.start("chain").await;
    h.engine
        .apply_event(&h.event(&wf, "a", "RUNNING"))
        .await
        .unwrap();
    // The client's COMPLETED row is written, and the function applying it
    // dies right after the terminal transaction.
    let done = h.event(&wf, "a", "COMPLETED");
    h.put_event(&done).await;
    let at = terminal_write_only(
        &h,
        &wf,
        "a",
        Transition::Completed,
        ActivityState::Completed,
        &done.activity_event_id,
        Details {
            output: done.output.clone(),
            ..Details::default()
        },
    )
    .await;
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Requested);
    // Its end is not counted yet: the count is owed with the release.
    assert_eq!(h.counted(&wf).await, (0, 0, 0));
    // The stream never delivers the row again. Before the settle grace the
    // monitor leaves it to the function; after it, the monitor finishes.
    assert_eq!(h.tick(at - 1).await.settled, 0, "not due yet");
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Requested);
    let report = h.tick(at + 1).await;
    assert_eq!((report.settled, report.errors), (1, 0));
    assert_eq!(h.counted(&wf).await, (1, 0, 0));
    let a = h.activity(&wf, "a").await;
    assert!(
        a.timing.due_epoch.is_none() && a.timing.due_shard.is_none(),
        "settled"
    );
    let b = h.activity(&wf, "b").await;
    assert_eq!(b.state, ActivityState::Queued);
    assert_eq!(b.attempt.number, 1);
    assert_eq!(b.links.pending_dependency_count, 0);
    let launches = h.launcher.launches_of("b");
    assert_eq!(launches.len(), 1);
    assert_eq!(launches[0]["prerequisites"], json!({"a": {"from": "a"}}));
    // Another tick does not launch it again.
    h.tick(at + 62).await;
    assert_eq!(h.launcher.launches_of("b").len(), 1);
    h.run_to_completion(&wf, "b").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

/// Nothing waits on redelivery, for workflows either: a REQUESTED workflow
/// whose decider is unavailable keeps a due marker, and a later monitor
/// tick starts it again from its request row once the decider is
/// reachable; after max_start_attempts it is FAILED.
#[tokio::test]
async fn finding_1_requested_workflow_is_started_by_a_later_monitor_tick() {
    let h = Harness::new().await;
    let reg = whimbrel_core::model::WorkflowLambda {
        workflow_name: "flaky".into(),
        lambda: Some("flaky-decider".into()),
        definition: None,
        allow: None,
    };
    h.store
        .put(&h.store.tables().workflow_lambda(), &reg)
        .await
        .unwrap();
    let unavailable = || {
        Err(InvokeError::Unavailable {
            function: "flaky-decider".into(),
            message: "throttled".into(),
        })
    };
    h.launcher
        .deciders
        .lock()
        .unwrap()
        .insert("flaky-decider".into(), unavailable());
    let req = h.request("flaky", None);
    h.put_request(&req).await;
    let id = ids::workflow_exec_id("flaky", &req.workflow_request_id);
    assert!(matches!(
        h.engine.start_workflow(&req).await,
        Err(EngineError::Retry(_))
    ));
    // A Full Logic API caller's start, without a request row: started
    // again from its exec.
    let rowless = h.request("flaky", Some(json!({"k": 1})));
    let rowless_id = ids::workflow_exec_id("flaky", &rowless.workflow_request_id);
    assert!(h.engine.start_workflow(&rowless).await.is_err());
    let w = h.workflow(&id).await;
    assert_eq!(w.state, WorkflowState::Requested);
    let due = w.due_epoch.expect("a REQUESTED workflow is due");
    assert_eq!(due, w.start_time_epoch + h.config().start_retry_seconds);
    assert_eq!(w.due_shard, Some(shard_of(&id)));
    let due = due.max(h.workflow(&rowless_id).await.due_epoch.expect("due"));
    // The stream gives up on the request record. The first due tick finds
    // the decider still unavailable: counted, tried again later.
    let report = h.tick(due + 1).await;
    assert_eq!((report.restarted, report.errors), (0, 2));
    let w = h.workflow(&id).await;
    assert_eq!(w.state, WorkflowState::Requested);
    assert_eq!(w.start_attempts, 1);
    let due2 = w.due_epoch.expect("still due");
    assert_eq!(due2, due + 1 + h.config().start_retry_seconds);
    // Reachable again: the next due tick starts it.
    h.launcher.deciders.lock().unwrap().insert(
        "flaky-decider".into(),
        Ok(json!({"version": 1, "activities": [{"name": "x", "lambda": "noop"}]})),
    );
    assert_eq!(h.tick(due2 - 5).await.restarted, 0);
    let report = h.tick(due2 + 1).await;
    assert_eq!((report.restarted, report.errors), (2, 0));
    let w = h.workflow(&id).await;
    assert_eq!(w.state, WorkflowState::Running);
    assert!(w.due_epoch.is_none() && w.due_shard.is_none());
    assert_eq!(w.start_attempts, 2);
    assert_eq!(h.activity(&id, "x").await.state, ActivityState::Queued);
    let w = h.workflow(&rowless_id).await;
    assert_eq!(w.state, WorkflowState::Running);
    // The input is on the write-once plan item, with the plan: the exec,
    // updated throughout the run, does not carry it.
    assert_eq!(w.input, None);
    assert!(w.planned_epoch.is_some());
    let recorded = h.engine.load_plan(&rowless_id, "flaky").await.unwrap();
    assert_eq!(recorded.and_then(|p| p.input), Some(json!({"k": 1})));
    assert!(w.due_epoch.is_none());
    assert_eq!(
        h.activity(&rowless_id, "x").await.state,
        ActivityState::Queued
    );
    let launches = h.launcher.launches_of("x");
    assert_eq!(launches.len(), 2, "one launch per workflow");
    // A workflow whose decider never answers is FAILED after
    // max_start_attempts ticks.
    h.launcher
        .deciders
        .lock()
        .unwrap()
        .insert("flaky-decider".into(), unavailable());
    let req = h.request("flaky", None);
    h.put_request(&req).await;
    let id = ids::workflow_exec_id("flaky", &req.workflow_request_id);
    assert!(h.engine.start_workflow(&req).await.is_err());
    let max = h.config().max_start_attempts;
    for _ in 0..=max {
        let due = h.workflow(&id).await.due_epoch.expect("due");
        h.tick(due + 1).await;
    }
    let w = h.workflow(&id).await;
    assert_eq!(w.state, WorkflowState::Failed);
    assert_eq!(w.start_attempts, max);
    assert!(
        w.error
            .as_deref()
            .unwrap()
            .contains(&format!("not started after {max} attempts")),
        "{:?}",
        w.error
    );
    assert!(w.due_epoch.is_none());
}

/// COMPLETED before RUNNING is parked on the item (no batch item
/// failure) and applied when RUNNING arrives; RUNNING (or COMPLETED) for an
/// activity that was never launched is rejected at once.
#[tokio::test]
async fn finding_2_early_completed_is_parked_and_running_for_a_requested_activity_is_rejected() {
    let h = Harness::new().await;
    h.register("chain", chain_plan(&["a", "b", "c"])).await;
    let wf = h.start("chain").await;
    let completed = h.event(&wf, "a", "COMPLETED");
    let (retry, sum) = h.deliver(std::slice::from_ref(&completed), 1).await;
    assert!(retry.is_empty(), "not a batch item failure: {retry:?}");
    assert_eq!(counts(&sum), (1, 0, 0, 0, 1));
    let a = h.activity(&wf, "a").await;
    assert_eq!(a.state, ActivityState::Queued);
    assert_eq!(a.trail.parked.len(), 1);
    assert_eq!(
        a.trail.parked[0].activity_event_id,
        completed.activity_event_id
    );
    assert_eq!(a.trail.parked[0].output, Some(json!({"from": "a"})));
    // RUNNING arrives: applied, and the parked COMPLETED with it.
    let (retry, sum) = h.deliver(&[h.event(&wf, "a", "RUNNING")], 2).await;
    assert!(retry.is_empty());
    assert_eq!(counts(&sum), (1, 0, 0, 0, 0));
    let a = h.activity(&wf, "a").await;
    assert_eq!(a.state, ActivityState::Completed);
    assert!(a.trail.parked.is_empty());
    assert_eq!(a.outcome.output, Some(json!({"from": "a"})));
    assert_eq!(
        a.last_event().as_deref(),
        Some(completed.activity_event_id.as_str())
    );
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Queued);
    assert_eq!(h.launcher.launches_of("b").len(), 1);
    // c was never launched (REQUESTED): RUNNING and COMPLETED are rejected
    // at once, neither retried nor parked.
    let (retry, sum) = h
        .deliver(
            &[h.event(&wf, "c", "RUNNING"), h.event(&wf, "c", "COMPLETED")],
            3,
        )
        .await;
    assert!(retry.is_empty());
    assert_eq!(counts(&sum), (0, 0, 2, 0, 0));
    let c = h.activity(&wf, "c").await;
    assert_eq!(c.state, ActivityState::Requested);
    assert!(c.trail.parked.is_empty());
    assert!(c.trail.history.is_empty());
}

/// Every non-terminal state after launch has a deadline:
/// PREPARING, and RUNNING without heartbeats or timeout_seconds, are timed
/// out by the monitor after the default start-to-close (3600 s), once the
/// report grace has passed.
#[tokio::test]
async fn finding_3_preparing_and_running_without_limits_time_out_at_the_default_start_to_close() {
    let h = Harness::new().await;
    h.register(
        "limits",
        json!({"activities": [
            {"name": "prep", "lambda": "noop"},
            {"name": "run", "lambda": "noop"}
        ]}),
    )
    .await;
    let wf = h.start("limits").await;
    h.engine
        .apply_event(&h.event(&wf, "prep", "PREPARING"))
        .await
        .unwrap();
    h.engine
        .apply_event(&h.event(&wf, "run", "RUNNING"))
        .await
        .unwrap();
    let stc = h.config().default_start_to_close_seconds;
    let grace = h.config().report_grace_seconds;
    assert_eq!(stc, 3600);
    let prep = h.activity(&wf, "prep").await;
    let run = h.activity(&wf, "run").await;
    assert_eq!(prep.state, ActivityState::Preparing);
    assert!(!run.timeouts.heartbeat_enabled && run.timeouts.start_to_close_seconds == Some(stc));
    let prep_due = h.deadline(&prep);
    let run_due = h.deadline(&run);
    assert_eq!(run_due, run.timing.start_time_epoch + stc);
    assert!(prep_due >= run.timing.start_time_epoch - 1 + stc && prep_due <= run_due + 1);
    let last = prep_due.max(run_due);
    // Well before, and then past the deadline but within the report grace.
    for at in [last - 60, last + grace / 2] {
        let report = h.tick(at).await;
        assert_eq!(report.timed_out, 0, "at {at}");
    }
    assert_eq!(
        states(&h, &wf, &["prep", "run"]).await,
        vec![ActivityState::Preparing, ActivityState::Running]
    );
    let report = h.tick(last + grace).await;
    assert_eq!(report.timed_out, 2);
    let prep = h.activity(&wf, "prep").await;
    assert_eq!(prep.state, ActivityState::TimedOut);
    assert!(
        prep.outcome
            .error
            .as_deref()
            .unwrap()
            .contains("PREPARING for more than 3600s"),
        "{:?}",
        prep.outcome.error
    );
    let run = h.activity(&wf, "run").await;
    assert_eq!(run.state, ActivityState::TimedOut);
    assert!(
        run.outcome
            .error
            .as_deref()
            .unwrap()
            .contains("not finished within 3600s"),
        "{:?}",
        run.outcome.error
    );
    assert!(prep.timing.due_epoch.is_none() && run.timing.due_epoch.is_none());
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Failed);
    assert_eq!(w.failed_count, 2);
}

/// Only the claimer of an attempt invokes. A prerequisite's
/// COMPLETED redelivered (concurrently, after a crash between the release
/// and the claim, and again later) invokes the dependent once; a report
/// with a stale or forged token, or for an older attempt, is rejected.
#[tokio::test]
async fn finding_4_redelivered_prerequisite_invokes_once_and_stale_tokens_are_rejected() {
    let h = Harness::new().await;
    h.register("chain", chain_plan(&["a", "b"])).await;
    let wf = h.start("chain").await;
    h.engine
        .apply_event(&h.event(&wf, "a", "RUNNING"))
        .await
        .unwrap();
    let done = h.event(&wf, "a", "COMPLETED");
    // The first try dies after the terminal write and the edge release,
    // before b's claim.
    terminal_write_only(
        &h,
        &wf,
        "a",
        Transition::Completed,
        ActivityState::Completed,
        &done.activity_event_id,
        Details {
            output: done.output.clone(),
            ..Details::default()
        },
    )
    .await;
    let a_id = ids::activity_exec_id(&wf, "a");
    let b_id = ids::activity_exec_id(&wf, "b");
    let release = decide::release_update(h.store.tables(), &b_id, &wf, &a_id);
    h.store.update(release).await.unwrap();
    let b = h.activity(&wf, "b").await;
    assert_eq!(
        (b.state, b.links.pending_dependency_count, b.attempt.number),
        (ActivityState::Requested, 0, 0)
    );
    // Redelivered twice at once, then again through the handler.
    let (r1, r2) = tokio::join!(h.engine.apply_event(&done), h.engine.apply_event(&done));
    assert_eq!(r1.unwrap(), Applied::State(ActivityState::Completed));
    assert_eq!(r2.unwrap(), Applied::State(ActivityState::Completed));
    let (retry, _) = h.deliver(std::slice::from_ref(&done), 1).await;
    assert!(retry.is_empty());
    assert_eq!(h.launcher.launches_of("b").len(), 1, "invoked once");
    let b = h.activity(&wf, "b").await;
    assert_eq!((b.state, b.attempt.number), (ActivityState::Queued, 1));
    assert_eq!(b.links.pending_dependency_count, 0);
    assert_eq!(count_in_history(&b, ActivityState::Queued), 1);

    // Attempt 1 is lost; the monitor claims attempt 2 with a new token.
    let due = b.timing.due_epoch.expect("schedule-to-start");
    let report = h.tick(due + h.config().report_grace_seconds + 1).await;
    assert_eq!(report.relaunched, 1);
    let first = h.launcher.payload("b", 0);
    let second = h.launcher.payload("b", 1);
    assert_eq!((first.attempt, second.attempt), (1, 1));
    assert_eq!((first.launch, second.launch), (1, 2));
    assert_ne!(first.attempt_token, second.attempt_token);
    let b = h.activity(&wf, "b").await;
    assert_eq!(
        b.attempt.token_hash.as_deref(),
        Some(ids::token_hash(second.attempt_token.as_deref().unwrap()).as_str())
    );
    // Reports of the stale launch (its token, with or without the attempt
    // number), a wrong attempt number, and a forged token are rejected; b
    // is unchanged.
    let stale_number = h.attempt_event(&wf, "b", "RUNNING", 0);
    let mut stale_token = h.attempt_event(&wf, "b", "RUNNING", 0);
    stale_token.attempt = Some(2);
    let mut only_stale_token = h.attempt_event(&wf, "b", "RUNNING", 0);
    only_stale_token.attempt = None;
    let mut forged = h.attempt_event(&wf, "b", "RUNNING", 1);
    forged.attempt_token = Some("forged".into());
    for (what, ev, why) in [
        ("launch 1", &stale_number, "does not match"),
        ("attempt 2", &stale_token, "the live attempt is 1"),
        ("token 1 alone", &only_stale_token, "does not match"),
        ("forged", &forged, "does not match"),
    ] {
        let r = h.engine.apply_event(ev).await;
        assert!(
            matches!(&r, Err(EngineError::Rejected(m)) if m.contains(why)),
            "{what}: {r:?}"
        );
    }
    assert!(matches!(
        h.engine
            .heartbeat_attempt(&b_id, first.attempt_token.as_deref())
            .await,
        Err(EngineError::Rejected(_))
    ));
    let late = h.attempt_event(&wf, "b", "COMPLETED", 0);
    assert!(matches!(
        h.engine.apply_event(&late).await,
        Err(EngineError::Rejected(_))
    ));
    let b_now = h.activity(&wf, "b").await;
    assert_eq!(b_now.state, ActivityState::Queued);
    assert_eq!(b_now.version, b.version);
    assert!(
        b_now.trail.parked.is_empty(),
        "a stale report is not parked"
    );
    // The live attempt's reports apply.
    for t in ["RUNNING", "COMPLETED"] {
        h.engine
            .apply_event(&h.attempt_event(&wf, "b", t, 1))
            .await
            .unwrap();
    }
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Completed);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    assert_eq!(h.launcher.launches_of("b").len(), 2);
}

/// At the launch-attempt limit, an activity whose RUNNING row is
/// in the event table (written, not applied) is not FAILED: the monitor
/// applies the RUNNING row (a stale attempt's row is not).
#[tokio::test]
async fn finding_5_at_the_attempt_limit_the_monitor_applies_running_instead_of_failing() {
    let h = Harness::new().await;
    h.register("one", chain_plan(&["solo"])).await;
    let wf = h.start("one").await;
    let cfg = h.config();
    let step = cfg.relaunch_after_seconds + cfg.report_grace_seconds + 1;
    let mut at = h
        .activity(&wf, "solo")
        .await
        .timing
        .queued_time_epoch
        .unwrap();
    for attempt in 2..=cfg.max_launch_attempts {
        at += step;
        assert_eq!(h.tick(at).await.relaunched, 1);
        assert_eq!(h.activity(&wf, "solo").await.attempt.launches, attempt);
    }
    let last = cfg.max_launch_attempts as usize - 1;
    // The last attempt starts and writes RUNNING; so does a stale copy of
    // the first. Neither is delivered by the stream yet.
    let stale = h.attempt("solo", 0).running().await.unwrap();
    let live = h.attempt("solo", last).running().await.unwrap();
    at += step;
    let report = h.tick(at).await;
    assert_eq!(
        (
            report.not_started,
            report.relaunched,
            report.reports_applied
        ),
        (0, 0, 1)
    );
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(solo.state, ActivityState::Running);
    assert_eq!(
        (solo.attempt.number, solo.attempt.launches),
        (1, cfg.max_launch_attempts)
    );
    assert_eq!(solo.last_event().as_deref(), Some(live.as_str()));
    assert!(solo.outcome.error.is_none());
    assert!(!solo
        .trail
        .history
        .iter()
        .any(|e| e.names(&solo.activity_exec_id, &stale)));
    assert_eq!(
        solo.timing.due_epoch,
        Some(solo.timing.start_time_epoch + cfg.default_start_to_close_seconds)
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
    assert_eq!(h.workflow(&wf).await.failed_count, 0);
    assert_eq!(
        h.launcher.launches_of("solo").len(),
        cfg.max_launch_attempts as usize
    );
}

/// A FAILED event with a 1 MB error is applied with a capped
/// error, directly and through the stream handler (no retry loop).
#[tokio::test]
async fn finding_6_failed_with_a_1mb_error_is_applied_with_a_capped_error() {
    let h = Harness::new().await;
    h.register(
        "big",
        json!({"activities": [
            {"name": "direct", "lambda": "noop"},
            {"name": "streamed", "lambda": "noop"}
        ]}),
    )
    .await;
    let wf = h.start("big").await;
    let huge = "e".repeat(1 << 20);
    for name in ["direct", "streamed"] {
        h.engine
            .apply_event(&h.event(&wf, name, "RUNNING"))
            .await
            .unwrap();
    }
    let mut failed = h.event(&wf, "direct", "FAILED");
    failed.error = Some(huge.clone());
    assert_eq!(
        h.engine.apply_event(&failed).await.unwrap(),
        Applied::State(ActivityState::Failed)
    );
    let mut failed = h.event(&wf, "streamed", "FAILED");
    failed.error = Some(huge.clone());
    let (retry, sum) = h.deliver(std::slice::from_ref(&failed), 1).await;
    assert!(retry.is_empty(), "no retry loop: {retry:?}");
    assert_eq!(counts(&sum), (1, 0, 0, 0, 0));
    for name in ["direct", "streamed"] {
        let x = h.activity(&wf, name).await;
        assert_eq!(x.state, ActivityState::Failed, "{name}");
        let e = x.outcome.error.unwrap();
        assert!(e.starts_with("eeee"), "{name}");
        assert!(e.contains("bytes cut"), "{name}: {}", &e[e.len() - 40..]);
        assert!(e.len() <= MAX_ERROR_BYTES, "{name}: {} bytes", e.len());
        assert!(x.timing.due_epoch.is_none(), "{name}: side effects done");
    }
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Failed);
    assert_eq!(w.failed_count, 2);
    let e = w.error.unwrap();
    assert!(e.starts_with("activity "), "{}", &e[..40]);
    assert!(e.len() <= MAX_ERROR_BYTES, "{} bytes", e.len());
}

/// CANCELLED_RUNNING ends only by the live attempt's own CANCEL
/// (with its token), or by the monitor's TIMED_OUT after the cancel grace;
/// a second tokenless user CANCEL is rejected.
#[tokio::test]
async fn finding_7_a_second_tokenless_cancel_does_not_end_cancelled_running() {
    let h = Harness::new().await;
    h.register(
        "cancel",
        json!({"activities": [
            {"name": "acks", "lambda": "noop"},
            {"name": "silent", "lambda": "noop"}
        ]}),
    )
    .await;
    let wf = h.start("cancel").await;
    for name in ["acks", "silent"] {
        h.engine
            .apply_event(&h.attempt_event(&wf, name, "RUNNING", 0))
            .await
            .unwrap();
        h.engine
            .apply_event(&h.event(&wf, name, "CANCEL"))
            .await
            .unwrap();
        let x = h.activity(&wf, name).await;
        assert_eq!(x.state, ActivityState::CancelledRunning, "{name}");
        // A second user CANCEL, without the token: rejected.
        let again = h.engine.apply_event(&h.event(&wf, name, "CANCEL")).await;
        assert!(
            matches!(&again, Err(EngineError::Rejected(m)) if m.contains("Client")),
            "{name}: {again:?}"
        );
        let y = h.activity(&wf, name).await;
        assert_eq!(y.state, ActivityState::CancelledRunning, "{name}");
        assert_eq!(y.version, x.version, "{name}");
    }
    // The attempt's own CANCEL (its token) ends it.
    let ack = h.attempt("acks", 0).cancelled("stopped").await.unwrap();
    let ev = h.event_row(&ids::activity_exec_id(&wf, "acks"), &ack).await;
    let (retry, sum) = h.deliver(&[ev], 1).await;
    assert!(retry.is_empty());
    assert_eq!(counts(&sum), (1, 0, 0, 0, 0));
    let acks = h.activity(&wf, "acks").await;
    assert_eq!(acks.state, ActivityState::Cancelled);
    assert!(acks.timing.due_epoch.is_none());
    // The one that never acknowledges is timed out after the cancel grace.
    let silent = h.activity(&wf, "silent").await;
    let due = h.deadline(&silent);
    let cfg = h.config();
    assert!(due <= h.now() + cfg.cancel_grace_seconds);
    let report = h.tick(due + 1).await;
    assert_eq!(report.timed_out, 0, "within the report grace");
    let report = h.tick(due + cfg.report_grace_seconds).await;
    assert_eq!(report.timed_out, 1);
    let silent = h.activity(&wf, "silent").await;
    assert_eq!(silent.state, ActivityState::TimedOut);
    assert!(
        silent
            .outcome
            .error
            .as_deref()
            .unwrap()
            .contains("cancel not acknowledged"),
        "{:?}",
        silent.outcome.error
    );
    let w = h.workflow(&wf).await;
    assert_eq!(
        (w.failed_count, w.cancelled_count),
        (1, 1),
        "each counted once"
    );
    assert_eq!(w.state, WorkflowState::Failed);
}

/// An activity heartbeating only by the architecture's raw
/// UpdateItem of `heartbeat_time_epoch` is not timed out: the monitor moves
/// its deadline; and the TIMED_OUT write is conditioned on
/// `heartbeat_time_epoch`, so a heartbeat landing after the monitor's read
/// wins.
#[tokio::test]
async fn finding_8_raw_heartbeat_updates_keep_an_activity_alive() {
    let h = Harness::new().await;
    h.register(
        "hb",
        json!({"activities": [{"name": "w", "lambda": "noop", "heartbeat_timeout_seconds": 30}]}),
    )
    .await;
    let wf = h.start("hb").await;
    h.engine
        .apply_event(&h.attempt_event(&wf, "w", "RUNNING", 0))
        .await
        .unwrap();
    let start = h.activity(&wf, "w").await.timing.start_time_epoch;
    assert_eq!(
        h.activity(&wf, "w").await.timing.due_epoch,
        Some(start + 30)
    );
    // The activity heartbeats only with raw UpdateItems; every tick finds
    // it due by its marker, and each time a fresh heartbeat keeps it alive.
    for k in 1..=4 {
        let at = start + 100 * k;
        raw_heartbeat(&h, &wf, "w", at - 5).await;
        let report = h.tick(at).await;
        assert_eq!((report.timed_out, report.errors), (0, 0), "tick {k}");
        let w = h.activity(&wf, "w").await;
        assert_eq!(w.state, ActivityState::Running, "tick {k}");
        assert_eq!(
            w.timing.due_epoch,
            Some(at - 5 + 30),
            "tick {k}: deadline moved"
        );
    }
    // A heartbeat that lands between the monitor's read and its write: the
    // TIMED_OUT transaction (built from the stale read) is refused.
    let at = start + 1000;
    let stale = h.activity(&wf, "w").await;
    let update = decide::transition_update(
        h.store.tables(),
        &h.config(),
        &stale,
        Change {
            transition: Transition::TimedOut,
            next: ActivityState::TimedOut,
            event_id: &format!(
                "timed-out:{}:{}",
                stale.activity_exec_id, stale.attempt.number
            ),
        },
        &Details {
            error: Some("no heartbeat for 30s (heartbeat timeout)".into()),
            at: Some(at),
            stale_before: Some(at - 30),
            ..Details::default()
        },
        at,
    );
    let count = decide::count_end(
        h.store.tables(),
        &stale,
        ActivityState::TimedOut,
        Some("no heartbeat"),
    );
    raw_heartbeat(&h, &wf, "w", at - 1).await;
    let r = h
        .store
        .transact(vec![update.into_write(), count.into_write()])
        .await;
    assert!(matches!(r, Err(StoreError::ConditionFailed)), "{r:?}");
    assert_eq!(h.activity(&wf, "w").await.state, ActivityState::Running);
    assert_eq!(h.workflow(&wf).await.failed_count, 0);
    // The monitor itself agrees: alive at `at`.
    let report = h.tick(at).await;
    assert_eq!(report.timed_out, 0);
    // When the raw heartbeats stop, it is timed out.
    let report = h.tick(at + 60).await;
    assert_eq!(report.timed_out, 1);
    let w = h.activity(&wf, "w").await;
    assert_eq!(w.state, ActivityState::TimedOut);
    assert!(w
        .outcome
        .error
        .as_deref()
        .unwrap()
        .contains("no heartbeat for 30s"));
}

/// A COMPLETED row written before the deadline but not yet
/// delivered by the stream wins over the monitor's timeout.
#[tokio::test]
async fn finding_10_completed_written_before_the_deadline_wins_over_the_timeout() {
    let h = Harness::new().await;
    h.register(
        "late",
        json!({"activities": [
            {"name": "work", "lambda": "noop", "timeout_seconds": 100},
            {"name": "next", "lambda": "noop", "depends_on": ["work"]}
        ]}),
    )
    .await;
    let wf = h.start("late").await;
    let attempt = h.attempt("work", 0);
    let work_id = ids::activity_exec_id(&wf, "work");
    let running = attempt.running().await.unwrap();
    h.engine
        .apply_event(&h.event_row(&work_id, &running).await)
        .await
        .unwrap();
    let work = h.activity(&wf, "work").await;
    assert_eq!(
        work.timing.due_epoch,
        Some(work.timing.start_time_epoch + 100)
    );
    // Written well before the deadline; the stream has not delivered it.
    let done = attempt.completed(json!({"words": 42})).await.unwrap();
    let report = h.tick(work.timing.start_time_epoch + 200).await;
    assert_eq!((report.timed_out, report.reports_applied), (0, 1));
    let work = h.activity(&wf, "work").await;
    assert_eq!(work.state, ActivityState::Completed);
    assert_eq!(work.outcome.output, Some(json!({"words": 42})));
    assert!(work.outcome.error.is_none());
    assert_eq!(count_in_history(&work, ActivityState::TimedOut), 0);
    assert_eq!(h.launcher.launches_of("next").len(), 1);
    assert_eq!(
        h.launcher.payload("next", 0).prerequisites["work"],
        json!({"words": 42})
    );
    assert_eq!(h.counted(&wf).await, (1, 0, 0));
    // The stream delivers the row at last: already applied.
    let (retry, sum) = h.deliver(&[h.event_row(&work_id, &done).await], 1).await;
    assert!(retry.is_empty());
    assert_eq!(counts(&sum), (1, 0, 0, 0, 0));
    assert_eq!(h.activity(&wf, "work").await.version, work.version);
    assert_eq!(h.launcher.launches_of("next").len(), 1);
}

// ---------------------------------------------------------------------------
// Around the findings: combinations the real tables must also get right.
// ---------------------------------------------------------------------------

/// A function that applies RUNNING and dies before the parked COMPLETED
/// leaves a RUNNING activity with a COMPLETED parked on it. With no
/// redelivery, the monitor applies the parked report at the RUNNING
/// deadline instead of timing the activity out.
#[tokio::test]
async fn a_completed_parked_behind_a_running_write_that_died_is_applied_by_the_monitor_soon() {
    let h = Harness::new().await;
    h.register(
        "p",
        json!({"activities": [
            {"name": "solo", "lambda": "noop", "timeout_seconds": 100},
            {"name": "next", "lambda": "noop", "depends_on": ["solo"]}
        ]}),
    )
    .await;
    let wf = h.start("p").await;
    let completed = h.event(&wf, "solo", "COMPLETED");
    assert_eq!(
        h.engine.apply_event(&completed).await.unwrap(),
        Applied::Parked(ActivityState::Queued)
    );
    // RUNNING applied by hand (the engine's own write), then the crash.
    let running = h.event(&wf, "solo", "RUNNING");
    let solo = h.activity(&wf, "solo").await;
    let change = Change {
        transition: Transition::Running,
        next: ActivityState::Running,
        event_id: &running.activity_event_id,
    };
    let now = h.now();
    let update = decide::transition_update(
        h.store.tables(),
        &h.config(),
        &solo,
        change,
        &Details::default(),
        now,
    );
    h.store.update(update).await.unwrap();
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(solo.state, ActivityState::Running);
    assert_eq!(solo.trail.parked.len(), 1, "COMPLETED still parked");
    // The parked event is owed: the marker comes up after the settle grace,
    // not at the RUNNING deadline (now + 100).
    let due = solo.timing.due_epoch.expect("due marker");
    assert_eq!(due, now + h.config().settle_grace_seconds.min(100));
    let report = h.tick(due + 1).await;
    assert_eq!((report.timed_out, report.reports_applied), (0, 1));
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(solo.state, ActivityState::Completed);
    assert!(solo.trail.parked.is_empty());
    assert_eq!(solo.outcome.output, Some(json!({"from": "solo"})));
    assert_eq!(h.launcher.launches_of("next").len(), 1);
}

/// A parked COMPLETED whose RUNNING is never delivered by the stream (the
/// row is in the event table): the monitor, at the schedule-to-start
/// deadline, applies RUNNING from the event table and the parked COMPLETED
/// with it, instead of relaunching.
#[tokio::test]
async fn a_parked_completed_whose_running_row_is_never_delivered_is_applied_by_the_monitor() {
    let h = Harness::new().await;
    h.register("one", chain_plan(&["solo"])).await;
    let wf = h.start("one").await;
    let attempt = h.attempt("solo", 0);
    let solo_id = ids::activity_exec_id(&wf, "solo");
    let running = attempt.running().await.unwrap();
    let done = attempt.completed(json!({"n": 7})).await.unwrap();
    // The stream delivers only the COMPLETED row (the RUNNING one is on
    // another shard, which gives up).
    let (retry, sum) = h.deliver(&[h.event_row(&solo_id, &done).await], 1).await;
    assert!(retry.is_empty());
    assert_eq!(counts(&sum), (1, 0, 0, 0, 1));
    let due = h.activity(&wf, "solo").await.timing.due_epoch.unwrap();
    let report = h.tick(due + h.config().report_grace_seconds).await;
    assert_eq!(report.relaunched, 0);
    assert!(report.reports_applied >= 1, "{report:?}");
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(solo.state, ActivityState::Completed);
    assert_eq!(solo.outcome.output, Some(json!({"n": 7})));
    assert!(solo
        .trail
        .history
        .iter()
        .any(|e| e.names(&solo.activity_exec_id, &running)));
    assert_eq!(h.launcher.launches_of("solo").len(), 1);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

/// Design 3.5: a running activity learns of a cancel from its heartbeat
/// and then has the cancel grace to acknowledge it, whatever its RUNNING
/// deadline was (the monitor last moved it 25 s ahead here): the activity
/// heartbeats every few seconds and is cancelled 210 s after it started.
#[tokio::test]
async fn a_heartbeating_activity_in_cancelled_running_gets_its_cancel_grace() {
    let h = Harness::new().await;
    h.register(
        "hb",
        json!({"activities": [{"name": "w", "lambda": "noop", "heartbeat_timeout_seconds": 30}]}),
    )
    .await;
    let wf = h.start("hb").await;
    let attempt = h.attempt("w", 0);
    h.engine
        .apply_event(&h.attempt_event(&wf, "w", "RUNNING", 0))
        .await
        .unwrap();
    let start = h.activity(&wf, "w").await.timing.start_time_epoch;
    // Alive for 200 s by heartbeats (the monitor moves its deadline).
    for k in 1..=2 {
        h.clock.set(start + 100 * k - 5);
        assert_eq!(attempt.heartbeat().await.unwrap(), ActivityState::Running);
        assert_eq!(h.tick(start + 100 * k).await.timed_out, 0);
    }
    // A user cancels it at start + 210.
    h.clock.set(start + 210);
    h.engine
        .apply_event(&h.event(&wf, "w", "CANCEL"))
        .await
        .unwrap();
    // The activity learns it at its next heartbeat and winds down,
    // heartbeating.
    h.clock.set(start + 230);
    assert_eq!(
        attempt.heartbeat().await.unwrap(),
        ActivityState::CancelledRunning
    );
    let report = h.tick(start + 240).await;
    let w = h.activity(&wf, "w").await;
    assert_eq!(
        (report.timed_out, w.state),
        (0, ActivityState::CancelledRunning),
        "heartbeated 10 s ago, cancelled 30 s ago (grace 300 s): {:?}, due {:?}",
        w.outcome.error,
        w.timing.due_epoch
    );
    let grace = h.config().cancel_grace_seconds;
    // The clock is real time: the cancel applied at start + 210 or a
    // second or two later; its grace counts from when it applied.
    let cancelled = w.trail.history.last().expect("history").at_epoch;
    assert!(
        (start + 210..=start + 212).contains(&cancelled),
        "{cancelled}"
    );
    assert_eq!(w.timing.due_epoch, Some(cancelled + grace));
    // Not acknowledged within the grace (+ the report grace): timed out.
    let report = h.tick(cancelled + grace + 5).await;
    assert_eq!(report.timed_out, 0);
    let report = h.tick(cancelled + grace + 10).await;
    assert_eq!(report.timed_out, 1);
    assert_eq!(h.activity(&wf, "w").await.state, ActivityState::TimedOut);
}

/// An early COMPLETED written three times (a client retrying its report,
/// each row with a new id) for an activity with a large input: every copy
/// of the output is parked on the item. The report rule says an output
/// within MAX_OUTPUT_BYTES is stored; the activity must not FAILED before
/// it ran.
#[tokio::test]
async fn repeated_early_completed_rows_do_not_fail_an_activity_with_a_large_input() {
    let h = Harness::new().await;
    h.register(
        "large",
        json!({"activities": [
            {"name": "solo", "lambda": "noop", "input": "i".repeat(140_000)}
        ]}),
    )
    .await;
    let wf = h.start("large").await;
    assert_eq!(h.activity(&wf, "solo").await.state, ActivityState::Queued);
    let output = json!("o".repeat(99_000));
    let copies: Vec<_> = (0..3)
        .map(|_| {
            let mut ev = h.event(&wf, "solo", "COMPLETED");
            ev.output = Some(output.clone());
            ev
        })
        .collect();
    let (retry, _) = h.deliver(&copies, 1).await;
    assert!(retry.is_empty());
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(
        solo.state,
        ActivityState::Queued,
        "not ended before RUNNING: {:?}",
        solo.outcome.error
    );
    h.deliver(&[h.event(&wf, "solo", "RUNNING")], 10).await;
    let solo = h.activity(&wf, "solo").await;
    assert_eq!(
        solo.state,
        ActivityState::Completed,
        "{:?}",
        solo.outcome.error
    );
    // Neither payload is on the item (engine::payloads): the input is on
    // its input row, the output on the engine's output row.
    assert_eq!(
        (solo.runner.input.as_ref(), solo.outcome.output.as_ref()),
        (None, None)
    );
    assert!(solo.runner.input_ref.is_some() && solo.outcome.output_ref.is_some());
    // The stored plan keeps the input once too: on the row, by its key.
    let stored = h.engine.load_plan(&wf, "large").await.unwrap().unwrap();
    let planned = &stored.plan.activities[0];
    assert_eq!(
        (planned.input.as_ref(), planned.input_ref.as_ref()),
        (None, solo.runner.input_ref.as_ref())
    );
    assert_eq!(
        h.engine.input_of(&solo).await.unwrap(),
        json!("i".repeat(140_000))
    );
    let outputs = h.engine.outputs_of(vec![solo]).await.unwrap();
    assert_eq!(outputs["solo"], output);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

/// `whimbrel cancel` accepts a REQUESTED workflow: a workflow whose
/// decider is unreachable is cancelled as a whole, the monitor leaves
/// it alone, and a start that comes late cannot store a plan any more.
#[tokio::test]
async fn a_requested_workflow_is_cancelled_as_a_whole() {
    let h = Harness::new().await;
    let reg = whimbrel_core::model::WorkflowLambda {
        workflow_name: "late".into(),
        lambda: Some("late-decider".into()),
        definition: None,
        allow: None,
    };
    h.store
        .put(&h.store.tables().workflow_lambda(), &reg)
        .await
        .unwrap();
    h.launcher.deciders.lock().unwrap().insert(
        "late-decider".into(),
        Err(InvokeError::Unavailable {
            function: "late-decider".into(),
            message: "throttled".into(),
        }),
    );
    let req = h.request("late", None);
    h.put_request(&req).await;
    let id = ids::workflow_exec_id("late", &req.workflow_request_id);
    assert!(h.engine.start_workflow(&req).await.is_err());
    assert_eq!(h.workflow(&id).await.state, WorkflowState::Requested);
    let state = h
        .engine
        .cancel_requested_workflow(&id, "late", "not needed")
        .await
        .unwrap();
    assert_eq!(state, WorkflowState::Cancelled);
    let w = h.workflow(&id).await;
    assert_eq!(w.state, WorkflowState::Cancelled);
    assert_eq!(w.error.as_deref(), Some("not needed"));
    assert!(w.due_epoch.is_none(), "no obligation left");
    // The decider answers now; a redelivered request changes nothing.
    h.launcher.deciders.lock().unwrap().insert(
        "late-decider".into(),
        Ok(json!({"activities": [{"name": "a", "lambda": "noop"}]})),
    );
    let again = h.engine.start_workflow(&req).await.unwrap();
    assert_eq!(again, Applied::Workflow(WorkflowState::Cancelled));
    assert!(h.workflow(&id).await.planned_epoch.is_none());
    assert!(h.engine.load_plan(&id, "late").await.unwrap().is_none());
    assert_eq!(h.tick(w.start_time_epoch + 3600).await.restarted, 0);
    assert!(h.launcher.launches_of("a").is_empty());
}

/// A plan under the JSON size bound that is larger as a DynamoDB
/// item (numbers cost more there than in JSON) fails the workflow with the
/// reason at once: no write that can never succeed, no retry, no second
/// decider call.
#[tokio::test]
async fn finding_6_a_plan_whose_inputs_pass_an_item_is_stored_with_them_on_their_rows() {
    let h = Harness::new().await;
    let reg = whimbrel_core::model::WorkflowLambda {
        workflow_name: "big".into(),
        lambda: Some("big-decider".into()),
        definition: None,
        allow: None,
    };
    h.store
        .put(&h.store.tables().workflow_lambda(), &reg)
        .await
        .unwrap();
    // Two activities, each with 70,000 numbers: about 140 KB of JSON each
    // (the plan is under its 300 KB bound), about 210 KB each as an item.
    let numbers = vec![1; 70_000];
    let plan = json!({"activities": [
        {"name": "a", "lambda": "noop", "input": numbers},
        {"name": "b", "lambda": "noop", "input": numbers}
    ]});
    assert!(plan.to_string().len() < whimbrel_core::plan::MAX_PLAN_BYTES);
    h.launcher
        .deciders
        .lock()
        .unwrap()
        .insert("big-decider".into(), Ok(plan));
    let req = h.request("big", None);
    // Once a failure (one item could not hold it); then two parts, each
    // sized as DynamoDB counts it (a JSON-sized slicing put both in one
    // 420 KB part and failed the workflow; `engine::plans` unit tests keep
    // that rule). Now each input is kept once, on its input row (about
    // 210 KB as an item), and the plan is one small item naming them.
    assert_eq!(
        h.engine.start_workflow(&req).await.unwrap(),
        Applied::Workflow(WorkflowState::Running)
    );
    let id = ids::workflow_exec_id("big", &req.workflow_request_id);
    let stored = h.engine.load_plan(&id, "big").await.unwrap().expect("plan");
    assert_eq!(stored.parts, None);
    assert_eq!(stored.plan.activities.len(), 2);
    assert!(stored
        .plan
        .activities
        .iter()
        .all(|a| a.input.is_none() && a.input_ref.is_some()));
    assert_eq!(h.launcher.payload("a", 0).input, json!(numbers));
    assert_eq!(h.launcher.launches_of("a").len(), 1);
    // Redelivered: nothing more happens.
    assert_eq!(
        h.engine.start_workflow(&req).await.unwrap(),
        Applied::Workflow(WorkflowState::Running)
    );
    assert_eq!(h.launcher.launches_of("a").len(), 1);
}

/// `RowRetentionDays`: the activity helper's report rows carry
/// `expires_at_epoch` (the TTL attribute of the write-once tables) when
/// retention is on, and none when it is off (the row is kept).
#[tokio::test]
async fn report_rows_carry_the_ttl_attribute_when_retention_is_on() {
    use whimbrel_core::activity::Activity;
    use whimbrel_core::engine::{Engine, EngineConfig};
    let h = Harness::new().await;
    h.register("r", chain_plan(&["a"])).await;
    let wf = h.start("r").await;
    let id = ids::activity_exec_id(&wf, "a");
    for days in [None, Some(7)] {
        let config = EngineConfig {
            row_retention_seconds: days.map(|d: i64| d * 86_400),
            ..h.config()
        };
        let engine = Engine::with_environment(h.store.clone(), (), config, h.clock.clone());
        let activity = Activity::with_engine(h.launcher.payload("a", 0), engine);
        let event_id = activity
            .report(Transition::Running, None, None)
            .await
            .unwrap();
        let row = h.event_row(&id, &event_id).await;
        // Counted from the report's own time (the clock is real time, so
        // a time read here may be a second earlier).
        let reported = row.when_epoch.expect("when_epoch").floor() as i64;
        let expected = days.map(|d| reported + d * 86_400);
        assert_eq!(row.expires_at_epoch, expected, "retention {days:?}");
    }
}

/// Launch times are opt-in: with `record_launches` (WHIMBREL_RECORD_LAUNCHES)
/// the engine writes `launched_time` once Lambda accepted the Invoke; without
/// it (the default) that write is not made.
#[tokio::test]
async fn launch_times_are_written_only_when_asked_for() {
    use whimbrel_core::engine::{Engine, EngineConfig};
    let mut h = Harness::new().await;
    h.register("l", chain_plan(&["a"])).await;
    let wf = h.start("l").await;
    let plain = h.activity(&wf, "a").await;
    assert!(plain.timing.launched_time_epoch.is_none() && plain.timing.launched_time.is_none());
    let config = EngineConfig {
        record_launches: true,
        ..h.config()
    };
    h.engine =
        Engine::with_environment(h.store.clone(), h.launcher.clone(), config, h.clock.clone());
    // The clock is real time: the launch's second lies between these two.
    let before = h.now();
    let wf = h.start("l").await;
    let after = h.now();
    let recorded = h.activity(&wf, "a").await;
    let launched = recorded
        .timing
        .launched_time_epoch
        .expect("launched_time_epoch");
    assert!(
        (before..=after).contains(&launched),
        "{before} <= {launched} <= {after}"
    );
    assert!(recorded.timing.launched_time.is_some());
}

/// A start that dies between storing the plan item and marking the exec
/// planned: the next start (a redelivery, the monitor) finds the stored
/// plan, marks the exec with it and runs it, without asking the decider
/// again (here a call would fail the workflow: the decider is gone).
#[tokio::test]
async fn a_plan_stored_by_a_start_that_died_before_marking_the_exec_is_replayed() {
    let h = Harness::new().await;
    let reg = whimbrel_core::model::WorkflowLambda {
        workflow_name: "crashy".into(),
        lambda: Some("crashy-decider".into()),
        definition: None,
        allow: None,
    };
    h.store
        .put(&h.store.tables().workflow_lambda(), &reg)
        .await
        .unwrap();
    h.launcher.deciders.lock().unwrap().insert(
        "crashy-decider".into(),
        Err(InvokeError::Unavailable {
            function: "crashy-decider".into(),
            message: "throttled".into(),
        }),
    );
    let req = h.request("crashy", Some(json!({"k": 2})));
    assert!(matches!(
        h.engine.start_workflow(&req).await,
        Err(EngineError::Retry(_))
    ));
    let id = ids::workflow_exec_id("crashy", &req.workflow_request_id);
    assert!(h.workflow(&id).await.planned_epoch.is_none());
    // What the dead start left: its plan item, and nothing on the exec.
    let recorded = whimbrel_core::model::WorkflowPlan {
        workflow_exec_id: id.clone(),
        workflow_name: "crashy".into(),
        plan: serde_json::from_value(json!({"activities": [{"name": "stored", "lambda": "noop"}]}))
            .unwrap(),
        input: Some(json!({"k": 2})),
        recorded_epoch: h.now() - 1,
        parts: None,
        episodic: None,
    };
    h.store
        .put(&h.store.tables().workflow_plan(), &recorded)
        .await
        .unwrap();
    h.launcher.deciders.lock().unwrap().clear();
    assert_eq!(
        h.engine.start_workflow(&req).await.unwrap(),
        Applied::Workflow(WorkflowState::Running)
    );
    let w = h.workflow(&id).await;
    assert_eq!(w.planned_epoch, Some(recorded.recorded_epoch));
    assert_eq!(w.activity_count, 1);
    assert_eq!(w.input, None, "the input is on the plan item");
    assert_eq!(h.activity(&id, "stored").await.state, ActivityState::Queued);
    assert_eq!(h.launcher.launches_of("stored").len(), 1);
    // Redelivered once more: nothing new.
    h.engine.start_workflow(&req).await.unwrap();
    assert_eq!(h.launcher.launches_of("stored").len(), 1);
}

/// A decider that fails for good, slowly: while it is being asked, another
/// start of the same workflow (the first start redelivered, or the
/// monitor's restart) stores its plan and marks the exec planned, as a
/// start does before it creates the activity items.
struct SlowFailingDecider {
    store: whimbrel_core::store::Store,
    plan: whimbrel_core::model::WorkflowPlan,
}

impl whimbrel_core::launcher::Launcher for SlowFailingDecider {
    async fn invoke_sync(&self, function: &str, _: &Value) -> Result<Value, InvokeError> {
        let t = self.store.tables();
        self.store
            .put(&t.workflow_plan(), &self.plan)
            .await
            .unwrap();
        let (id, name) = (&self.plan.workflow_exec_id, &self.plan.workflow_name);
        let mut exec: whimbrel_core::model::WorkflowExec = self
            .store
            .get(&t.workflow_exec(), decide::workflow_key(id, name))
            .await
            .unwrap()
            .expect("exec");
        exec.planned_epoch = Some(self.plan.recorded_epoch);
        exec.activity_count = self.plan.plan.activities.len() as u64;
        self.store.put(&t.workflow_exec(), &exec).await.unwrap();
        Err(InvokeError::FunctionError {
            function: function.into(),
            message: "decider crashed".into(),
        })
    }

    async fn invoke_async(&self, function: &str, _: &Value) -> Result<(), InvokeError> {
        panic!("a start whose decider failed launched {function}");
    }
}

/// A start whose decider fails for good must not fail a workflow that
/// another start planned meanwhile: that start goes on to create and
/// launch the activities, which a FAILED workflow would strand REQUESTED
/// with no due marker.
#[tokio::test]
async fn a_start_whose_decider_failed_leaves_a_workflow_planned_meanwhile_to_its_planner() {
    use whimbrel_core::engine::{Engine, Environment};
    use whimbrel_core::model::{WorkflowLambda, WorkflowPlan};
    let h = Harness::new().await;
    let reg = WorkflowLambda {
        workflow_name: "raced".into(),
        lambda: Some("raced-decider".into()),
        definition: None,
        allow: None,
    };
    let t = h.store.tables();
    h.store.put(&t.workflow_lambda(), &reg).await.unwrap();
    let plan = chain_plan(&["a", "b"]);
    h.launcher
        .deciders
        .lock()
        .unwrap()
        .insert("raced-decider".into(), Ok(plan.clone()));
    let req = h.request("raced", None);
    let wf = ids::workflow_exec_id("raced", &req.workflow_request_id);
    let racer = SlowFailingDecider {
        store: h.store.clone(),
        plan: WorkflowPlan {
            workflow_exec_id: wf.clone(),
            workflow_name: "raced".into(),
            plan: serde_json::from_value(plan).unwrap(),
            input: None,
            recorded_epoch: h.clock.now().epoch,
            parts: None,
            episodic: None,
        },
    };
    let loser = Engine::with_environment(h.store.clone(), racer, h.config(), h.clock.clone());
    let applied = loser.start_workflow(&req).await.unwrap();
    assert_ne!(applied, Applied::Workflow(WorkflowState::Failed));
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Requested);
    // The planner goes on from its stored plan.
    h.engine.start_workflow(&req).await.unwrap();
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
    assert_eq!(h.launcher.launches_of("a").len(), 1);
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Requested);
}

/// A cancel request is one row of `whimbrel_workflow_request`, applied from
/// that table's stream, and works where the deployment requires tokens: a
/// running workflow's activities are cancelled and it ends CANCELLED once
/// the running one acknowledges; a request for an ended or unknown
/// workflow is rejected in the same batch without holding up the others.
#[tokio::test]
async fn a_cancel_request_row_cancels_a_running_workflow_with_tokens_required() {
    use whimbrel_core::engine::Engine;
    use whimbrel_core::model::WorkflowRequest;
    let h = Harness::new().await;
    let config = whimbrel_core::engine::EngineConfig {
        require_tokens: true,
        ..h.config()
    };
    let engine =
        Engine::with_environment(h.store.clone(), h.launcher.clone(), config, h.clock.clone());
    h.register("c", chain_plan(&["a", "b"])).await;
    let req = h.request("c", None);
    engine.start_workflow(&req).await.unwrap();
    let wf = ids::workflow_exec_id("c", &req.workflow_request_id);
    engine
        .apply_event(&h.attempt_event(&wf, "a", "RUNNING", 0))
        .await
        .unwrap();
    // A tokenless CANCEL row, as clients wrote before, is refused here.
    assert!(engine
        .apply_event(&h.event(&wf, "a", "CANCEL"))
        .await
        .is_err());
    let cancel = |target: &str| WorkflowRequest {
        cancel_workflow_exec_id: Some(target.into()),
        reason: Some("changed my mind".into()),
        ..h.request("c", None)
    };
    let unknown = ids::workflow_exec_id("c", "c::no-such-request");
    let rows = [cancel(&wf), cancel(&unknown)];
    let table = h.store.tables().workflow_request();
    let keys = ["workflow_request_id", "workflow_name"];
    let batch = stream_event(&table, &keys, &rows, 1);
    let (resp, summary) = handlers::workflow_requests(&engine, &batch).await.unwrap();
    assert!(failures(&resp).is_empty());
    assert_eq!((summary.applied, summary.rejected), (1, 1));
    let a = h.activity(&wf, "a").await;
    assert_eq!(a.state, ActivityState::CancelledRunning);
    assert_eq!(a.outcome.error.as_deref(), Some("changed my mind"));
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Cancelled);
    // Redelivered: nothing more happens.
    handlers::workflow_requests(&engine, &batch).await.unwrap();
    assert_eq!(
        h.activity(&wf, "a").await.state,
        ActivityState::CancelledRunning
    );
    engine
        .apply_event(&h.attempt_event(&wf, "a", "CANCEL", 0))
        .await
        .unwrap();
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Cancelled);
    // Once ended, a cancel request is rejected with the reason.
    let late = [cancel(&wf)];
    let batch = stream_event(&table, &keys, &late, 10);
    let (resp, summary) = handlers::workflow_requests(&engine, &batch).await.unwrap();
    assert!(failures(&resp).is_empty());
    assert_eq!(summary.rejected, 1);
}

/// Issue 42 D (docs/limits.md § 2, Open 11): every JSON value the API
/// admits as input (a workflow's, an activity's in its plan, a signal's)
/// nests at most 24 levels, so each fits where the engine stores it
/// (DynamoDB stores 32 levels; a registered plan's inputs sit 4 levels
/// down). At the limit each runs to its end; past it each is refused with
/// the reason. Before, a workflow input of 32 levels rejected its request
/// with DynamoDB's text (no execution said why), and a plan input of 29
/// could not be registered.
#[tokio::test]
async fn inputs_nested_to_the_limit_run_and_deeper_ones_are_refused_with_the_reason() {
    use whimbrel_core::payloads::MAX_JSON_DEPTH;
    let h = Harness::new().await;
    let nested = |d: usize| (1..d).fold(json!({"a": 1}), |v, _| json!({ "a": v }));
    let deep = |d| json!({"activities": [{"name": "solo", "lambda": "f", "input": nested(d)}]});
    h.register("at", deep(MAX_JSON_DEPTH)).await;
    let req = h.request("at", Some(nested(MAX_JSON_DEPTH)));
    h.engine.start_workflow(&req).await.unwrap();
    let wf = ids::workflow_exec_id("at", &req.workflow_request_id);
    h.run_to_completion(&wf, "solo").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    assert_eq!(h.launcher.payload("solo", 0).input, nested(MAX_JSON_DEPTH));

    let req = h.request("at", Some(nested(MAX_JSON_DEPTH + 1)));
    let applied = h.engine.start_workflow(&req).await.unwrap();
    assert_eq!(applied, Applied::Workflow(WorkflowState::Failed));
    let w = h
        .workflow(&ids::workflow_exec_id("at", &req.workflow_request_id))
        .await;
    let why = w.error.unwrap_or_default();
    assert!(
        why.contains("workflow input nests 25 levels; at most 24"),
        "{why}"
    );

    h.register("past", deep(MAX_JSON_DEPTH + 1)).await;
    let req = h.request("past", None);
    h.engine.start_workflow(&req).await.unwrap();
    let w = h
        .workflow(&ids::workflow_exec_id("past", &req.workflow_request_id))
        .await;
    assert_eq!(w.state, WorkflowState::Failed);
    let why = w.error.unwrap_or_default();
    assert!(
        why.contains("input of activity \"solo\" nests 25 levels"),
        "{why}"
    );
}

/// Issue 42 D (docs/limits.md § 2): a COMPLETED workflow's result gathers
/// its sinks' outputs when there are at most 100 sinks and the result is
/// at most 64,000 bytes of JSON; past either, it stays on the sinks
/// (`result_in_activities`), and the workflow completes all the same.
#[tokio::test]
async fn the_result_gathers_up_to_100_sinks_and_64000_bytes_and_past_either_stays_on_them() {
    use whimbrel_core::engine::outcome::MAX_RESULT_SINKS;
    use whimbrel_core::plan::MAX_RESULT_BYTES;
    let h = Harness::new().await;
    let wide = |n: usize| {
        let acts: Vec<Value> = (0..n)
            .map(|i| json!({"name": format!("s{i:03}"), "lambda": "noop"}))
            .collect();
        json!({ "activities": acts })
    };
    for (name, sinks) in [("at", MAX_RESULT_SINKS), ("past", MAX_RESULT_SINKS + 1)] {
        h.register(name, wide(sinks)).await;
        let wf = h.start(name).await;
        for i in 0..sinks {
            h.run_to_completion(&wf, &format!("s{i:03}")).await;
        }
        let w = h.workflow(&wf).await;
        assert_eq!(w.state, WorkflowState::Completed, "{name}");
        let gathered = w
            .result
            .as_ref()
            .and_then(|r| r.as_object())
            .map(|r| r.len());
        match name {
            "at" => assert_eq!((gathered, w.result_in_activities), (Some(sinks), None)),
            _ => assert_eq!((gathered, w.result_in_activities), (None, Some(true))),
        }
    }
    // One sink `x` whose output makes a result of exactly the limit: `{"x":"…"}`
    // is the string's characters plus 8 bytes.
    h.register(
        "bytes",
        json!({"activities": [{"name": "x", "lambda": "noop"}]}),
    )
    .await;
    for (extra, gathered) in [(0, true), (1, false)] {
        let wf = h.start("bytes").await;
        let text = "r".repeat(MAX_RESULT_BYTES - 8 + extra);
        h.engine
            .apply_event(&h.event(&wf, "x", "RUNNING"))
            .await
            .unwrap();
        let mut done = h.event(&wf, "x", "COMPLETED");
        done.output = Some(json!(text));
        h.engine.apply_event(&done).await.unwrap();
        let w = h.workflow(&wf).await;
        assert_eq!(w.state, WorkflowState::Completed);
        match gathered {
            true => assert_eq!(
                w.result.map(|r| r.to_string().len()),
                Some(MAX_RESULT_BYTES)
            ),
            false => assert_eq!((w.result, w.result_in_activities), (None, Some(true))),
        }
    }
}

/// Issue 42 D (docs/limits.md § 2): the start refuses an activity whose
/// item could not hold all its policy's attempts' history besides an
/// inline output and the reserve, with the reason; one byte less runs to
/// its end. The item is grown by a `retry_on` entry of `len` bytes (its
/// policy is copied onto the item), under 100 attempts. Before, the
/// refusal was written only while no plan was stored, and the start
/// stores its plan first: the workflow stayed REQUESTED, with no reason.
#[tokio::test]
async fn an_activity_item_at_the_start_limit_runs_and_one_byte_more_is_refused() {
    let h = Harness::new().await;
    let start = |len: usize| {
        let h = &h;
        async move {
            let retry = json!({"max_attempts": 100, "retry_on": ["e".repeat(len)]});
            let name = format!("item{len}");
            h.register(
                &name,
                json!({"activities": [{"name": "x", "lambda": "f", "retry": retry}]}),
            )
            .await;
            let req = h.request(&name, None);
            let started = h.engine.start_workflow(&req).await;
            let wf = ids::workflow_exec_id(&name, &req.workflow_request_id);
            started.expect("a start judges the item, never errs");
            let w = h.workflow(&wf).await;
            (wf, w)
        }
    };
    // The longest entry that still starts: search, then check both sides.
    let (mut fits, mut refused) = (1, 250_000);
    assert_eq!(start(refused).await.1.state, WorkflowState::Failed);
    while refused - fits > 1 {
        let mid = (fits + refused) / 2;
        match start(mid).await.1.state {
            WorkflowState::Failed => refused = mid,
            _ => fits = mid,
        }
    }
    let (wf, w) = start(fits).await;
    assert_eq!(w.state, WorkflowState::Running);
    h.run_to_completion(&wf, "x").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    let (_, w) = start(fits + 1).await;
    let why = w.error.unwrap_or_default();
    assert!(
        why.contains(
            "with an inline output and the history of its attempts; DynamoDB stores at most 409600"
        ),
        "{why}"
    );
    assert!(
        why.contains(&format!("{}", 409_601)) || why.contains("bytes,"),
        "{why}"
    );
}
