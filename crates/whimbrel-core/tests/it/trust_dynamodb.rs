//! Trust between activities, against a real DynamoDB API (DynamoDB Local,
//! started by the tests): what one holder of the activity role can write
//! (event rows, heartbeats) cannot change another activity's outcome, its
//! deadlines, or the rows the engine reads back (docs/design.md § 3.10).

use crate::common;

use crate::common::Harness;
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::engine::payloads;
use whimbrel_core::engine::{decide, QUARANTINED};
use whimbrel_core::handlers;
use whimbrel_core::model::{ActivityEvent, WorkflowRequest};
use whimbrel_core::store::{StoreError, UpdateRequest, Value as AttributeValue};

/// A payload too large to keep on the activity item, so it stays on its
/// COMPLETED event row (engine::payloads).
fn large(who: &str) -> Value {
    json!({"who": who, "pad": "x".repeat(payloads::INLINE_PAYLOAD_BYTES)})
}

/// Overwrite the event row `ev` with `output` (a PutItem on its key, as any
/// holder of the activity role may do).
async fn overwrite(h: &Harness, ev: &ActivityEvent, output: Value) {
    let forged = ActivityEvent {
        output: Some(output),
        ..ev.clone()
    };
    let table = h.store.tables().activity_event();
    h.store.put(&table, &forged).await.expect("overwrite");
}

/// Deliver RUNNING then `completed` for activity `name` of `wf`.
async fn run_to(h: &Harness, wf: &str, name: &str, completed: &ActivityEvent, seq: u64) {
    h.deliver(&[h.event(wf, name, "RUNNING")], seq).await;
    let (retry, _) = h.deliver(std::slice::from_ref(completed), seq + 1).await;
    assert!(retry.is_empty(), "{name}'s COMPLETED applied");
}

/// A large output is copied to a row only the engine writes when it
/// applies, and bound to its activity by its SHA-256. Its event row
/// overwritten afterwards (anyone who may report may put event rows)
/// changes nothing: the MODIFY record is counted, and the dependent is
/// launched with what p reported. An item completed before outputs were
/// copied reads its output from the event row, and there the digest
/// detects the overwrite.
#[tokio::test]
async fn an_overwritten_output_never_reaches_a_dependent() {
    let h = Harness::new().await;
    let plan = json!({"activities": [
        {"name": "p", "lambda": "noop"},
        {"name": "q", "lambda": "noop"},
        {"name": "d", "lambda": "noop", "depends_on": ["p", "q"]},
    ]});
    h.register("bound", plan).await;
    let wf = h.start("bound").await;
    let mut done = h.event(&wf, "p", "COMPLETED");
    done.output = Some(large("p"));
    run_to(&h, &wf, "p", &done, 1).await;
    let p = h.activity(&wf, "p").await;
    let digest = payloads::output_digest(&large("p"));
    assert_eq!(p.outcome.output_sha256.as_ref(), Some(&digest));
    assert_eq!(
        p.outcome.output_ref,
        Some(whimbrel_core::ids::output_row_key(&wf, &digest))
    );
    assert_eq!(
        (
            p.outcome.output.as_ref(),
            p.outcome.output_event_id.as_ref()
        ),
        (None, None)
    );

    overwrite(&h, &done, large("forged")).await;
    // Its MODIFY record is counted and logged, never applied.
    let mut modify = h.event_batch(&[done.clone()], 10);
    modify["Records"][0]["eventName"] = json!("MODIFY");
    let (_, sum) = handlers::activity_events(&h.engine, &modify).await.unwrap();
    assert_eq!((sum.overwritten, sum.skipped, sum.applied), (1, 1, 0));
    let read = h.engine.outputs_of(vec![p.clone()]).await.unwrap();
    assert_eq!(read["p"], large("p"), "the copy, not the row");
    // An item of an earlier version names the row: the digest catches it.
    let mut legacy = p.clone();
    legacy.outcome.output_ref = None;
    legacy.outcome.output_event_id = Some(done.activity_event_id.clone());
    let direct = payloads::outputs_of(&h.store, vec![legacy]).await;
    assert!(matches!(direct, Err(StoreError::Mismatch(_))), "{direct:?}");

    // q completes: d is launched at once, with what p reported.
    let mut q_done = h.event(&wf, "q", "COMPLETED");
    q_done.output = Some(json!("q"));
    h.deliver(&[h.event(&wf, "q", "RUNNING")], 3).await;
    let (retry, _) = h.deliver(std::slice::from_ref(&q_done), 4).await;
    assert!(retry.is_empty(), "{retry:?}");
    let launched = h.launcher.launches_of("d");
    assert_eq!(launched.len(), 1);
    assert_eq!(launched[0]["prerequisites"]["p"], large("p"));
}

/// A sink's event row overwritten after it was written never becomes the
/// workflow's result: the stream record carries the row as it was
/// inserted, the engine applies that and copies it, and the result is
/// read from the copy.
#[tokio::test]
async fn an_overwritten_output_never_becomes_the_result() {
    let h = Harness::new().await;
    h.register(
        "sink",
        json!({"activities": [{"name": "s", "lambda": "noop"}]}),
    )
    .await;
    let wf = h.start("sink").await;
    let mut done = h.event(&wf, "s", "COMPLETED");
    done.output = Some(large("s"));
    h.deliver(&[h.event(&wf, "s", "RUNNING")], 1).await;
    // Written, then overwritten before its stream record is processed.
    h.put_event(&done).await;
    overwrite(&h, &done, large("forged")).await;
    let (retry, _) = h.deliver(std::slice::from_ref(&done), 2).await;
    assert!(retry.is_empty(), "{retry:?}");
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    let result = h.engine.workflow_result(&wf, "sink").await.unwrap();
    assert_eq!(result, Some(json!({"s": large("s")})));
}

/// A large COMPLETED that arrives before RUNNING is parked by reference
/// with its digest; its row overwritten while it waits is not applied as
/// the output: the report counts as one that cannot be stored (FAILED
/// `UNSTORABLE`, retried by the activity's policy).
#[tokio::test]
async fn an_output_overwritten_while_parked_is_not_applied() {
    let h = Harness::new().await;
    h.register(
        "early",
        json!({"activities": [{"name": "e", "lambda": "noop"}]}),
    )
    .await;
    let wf = h.start("early").await;
    let mut done = h.event(&wf, "e", "COMPLETED");
    done.output = Some(large("e"));
    let (retry, _) = h.deliver(std::slice::from_ref(&done), 1).await;
    assert!(retry.is_empty());
    let parked = h.activity(&wf, "e").await.trail.parked;
    assert_eq!(parked.len(), 1);
    assert!(parked[0].output.is_none() && parked[0].output_in_row);
    assert_eq!(
        parked[0].output_sha256,
        Some(payloads::output_digest(&large("e")))
    );

    overwrite(&h, &done, large("forged")).await;
    h.deliver(&[h.event(&wf, "e", "RUNNING")], 2).await;
    let e = h.activity(&wf, "e").await;
    assert_ne!(e.state, ActivityState::Completed);
    let error = e.outcome.error.unwrap_or_default();
    assert!(
        error.contains("UNSTORABLE") && error.contains("SHA-256"),
        "{error}"
    );
    assert!(e.outcome.output.is_none() && e.outcome.output_event_id.is_none());
}

/// Set `attr` of activity `name`'s item to `value`, as a raw UpdateItem by
/// someone other than the engine.
async fn scribble(h: &Harness, wf: &str, name: &str, attr: &str, value: AttributeValue) {
    let id = whimbrel_core::ids::activity_exec_id(wf, name);
    let req = UpdateRequest::new(
        h.store.tables().activity_exec(),
        decide::activity_key(&id, wf),
    )
    .set(attr, value);
    h.store.update(req).await.expect("raw write");
}

/// What the activity role may write of another activity's item is its
/// heartbeat time (contract: Heartbeat), nothing the monitor's index or the
/// engine's fencing reads. Garbage there reads as "no heartbeat": the item
/// stays readable, its reports apply, and its deadline stays the engine's.
#[tokio::test]
async fn a_heartbeat_cannot_poison_or_unmark_another_activity() {
    use whimbrel_core::activity::HEARTBEAT_WRITES;
    for owned in [
        "due_epoch",
        "due_shard",
        "version",
        "state",
        "attempt_token_hash",
    ] {
        assert!(
            !HEARTBEAT_WRITES.contains(&owned),
            "{owned} is the engine's"
        );
    }
    let h = Harness::new().await;
    let plan = json!({"activities": [
        {"name": "victim", "lambda": "noop", "heartbeat_timeout_seconds": 60, "timeout_seconds": 3600},
    ]});
    h.register("beats", plan).await;
    let wf = h.start("beats").await;
    h.deliver(&[h.event(&wf, "victim", "RUNNING")], 1).await;
    let marked = h.activity(&wf, "victim").await.timing.due_epoch;
    assert!(marked.is_some());
    scribble(
        &h,
        &wf,
        "victim",
        "heartbeat_time_epoch",
        AttributeValue::S("soon".into()),
    )
    .await;
    scribble(
        &h,
        &wf,
        "victim",
        "heartbeat_time",
        AttributeValue::S("never".into()),
    )
    .await;
    let victim = h.activity(&wf, "victim").await;
    assert_eq!(
        victim.timing.heartbeat_time_epoch, -1,
        "read as no heartbeat"
    );
    assert_eq!(victim.timing.due_epoch, marked, "still marked");
    // The monitor still times it out when its heartbeat deadline passes.
    let report = h.tick(marked.unwrap() + 60).await;
    assert_eq!((report.timed_out, report.errors), (1, 0), "{report:?}");
    assert_eq!(
        h.activity(&wf, "victim").await.state,
        ActivityState::TimedOut
    );
}

/// A heartbeat UpdateItem under an activity's hash key with another range
/// key creates a stray item beside the activity's (the activity role may
/// update heartbeat attributes on any key). Reports carry only the hash
/// key, so the engine finds the activity by a Query on it: the stray must
/// not be taken for the activity, nor make it unreadable (found by the
/// simulation's hostile heartbeat writes, seed 8 at the commit that added
/// them: the COMPLETED was quarantined and the activity timed out).
#[tokio::test]
async fn a_stray_item_under_an_activity_hash_key_does_not_wedge_it() {
    let h = Harness::new().await;
    let plan = json!({"activities": [{"name": "a", "lambda": "noop"}]});
    h.register("stray", plan).await;
    let wf = h.start("stray").await;
    let id = whimbrel_core::ids::activity_exec_id(&wf, "a");
    // Range keys before and after the real one, so that either order of
    // the Query's items is tried.
    for other in ["!", "~"] {
        let req = UpdateRequest::new(
            h.store.tables().activity_exec(),
            decide::activity_key(&id, &format!("{other}{wf}{other}x")),
        )
        .set(
            "heartbeat_time_epoch",
            AttributeValue::N(h.now().to_string()),
        );
        h.store.update(req).await.expect("raw write");
    }
    let (retry, sum) = h
        .deliver(
            &[h.event(&wf, "a", "RUNNING"), h.event(&wf, "a", "COMPLETED")],
            1,
        )
        .await;
    assert!(retry.is_empty(), "{retry:?}");
    assert_eq!((sum.applied, sum.rejected), (2, 0), "{sum:?}");
    assert_eq!(h.activity(&wf, "a").await.state, ActivityState::Completed);
}

/// An item a writer beyond the activity role broke (a `version` of the
/// wrong type) cannot be read as an activity. It is quarantined: its
/// records are rejected with the reason, not retried, so the stream flows
/// on; a monitor tick skips it, counted, and sweeps the rest.
#[tokio::test]
async fn an_unreadable_item_is_quarantined_and_the_stream_flows_on() {
    let h = Harness::new().await;
    let plan = json!({"activities": [
        {"name": "broken", "lambda": "noop", "heartbeat_timeout_seconds": 60},
        {"name": "fine", "lambda": "noop", "heartbeat_timeout_seconds": 60},
    ]});
    h.register("q", plan).await;
    let wf = h.start("q").await;
    let running = [
        h.event(&wf, "broken", "RUNNING"),
        h.event(&wf, "fine", "RUNNING"),
    ];
    h.deliver(&running, 1).await;
    scribble(&h, &wf, "broken", "version", AttributeValue::S("x".into())).await;
    let done = [
        h.event(&wf, "broken", "COMPLETED"),
        h.event(&wf, "fine", "COMPLETED"),
    ];
    let (retry, sum) = h.deliver(&done, 3).await;
    assert!(retry.is_empty(), "nothing blocks the shard: {retry:?}");
    assert_eq!((sum.applied, sum.rejected), (1, 1), "{sum:?}");
    let rejected = sum.records.iter().find_map(|r| match &r.outcome {
        handlers::Outcome::Rejected(why) => Some(why.clone()),
        _ => None,
    });
    assert!(rejected.unwrap_or_default().starts_with(QUARANTINED));
    assert_eq!(
        h.activity(&wf, "fine").await.state,
        ActivityState::Completed
    );
    // The monitor skips it and goes on.
    let report = h.tick(h.now() + 3600).await;
    assert_eq!((report.quarantined, report.errors), (1, 0), "{report:?}");
}

/// A plan may invoke only the deployment's launch targets, never one of the
/// engine's own functions: a plan (or a decider) naming one fails the
/// workflow with the reason, before anything is invoked.
#[tokio::test]
async fn a_plan_naming_a_function_outside_the_launch_targets_fails_with_the_reason() {
    use whimbrel_core::engine::{Engine, EngineConfig};
    use whimbrel_core::targets::LaunchTargets;
    let mut h = Harness::new().await;
    let config = EngineConfig {
        launch_targets: LaunchTargets {
            allowed: vec!["whimbrel-task-*".into()],
            engine_functions: vec!["whimbrel-task-engine".into()],
            ..LaunchTargets::default()
        },
        ..h.config()
    };
    h.engine =
        Engine::with_environment(h.store.clone(), h.launcher.clone(), config, h.clock.clone());
    for (name, lambda, why) in [
        (
            "own",
            "whimbrel-task-engine",
            "is one of the engine's own functions",
        ),
        (
            "far",
            "payroll",
            "is not among the deployment's launch targets",
        ),
    ] {
        let plan = json!({"activities": [
            {"name": "fine", "lambda": "whimbrel-task-noop"},
            {"name": "bad", "lambda": lambda, "depends_on": ["fine"]},
        ]});
        h.register(name, plan).await;
        let wf = h.start(name).await;
        let w = h.workflow(&wf).await;
        assert_eq!(w.state, WorkflowState::Failed, "{name}");
        let error = w.error.unwrap_or_default();
        assert!(
            error.contains(&format!("activity \"bad\": lambda \"{lambda}\" {why}")),
            "{error}"
        );
    }
    assert_eq!(h.launcher.launch_count(), 0, "nothing was invoked");
}

/// A row the stream rejected stays rejected. Attempt 1 of a retried
/// activity is invoked twice (Lambda's async invoke is at-least-once);
/// the duplicate reports COMPLETED, tokenless as the reference clients
/// write, while attempt 2 waits its backoff, and the stream rejects it.
/// Attempt 2's invoke is then lost. The monitor, looking for reports
/// still in flight before it relaunches, must not apply attempt 1's
/// rejected row to attempt 2: it relaunches attempt 2.
#[tokio::test]
async fn a_row_the_stream_rejected_is_never_applied_by_the_monitor() {
    let h = Harness::new().await;
    let plan = json!({"activities": [
        {"name": "flaky", "lambda": "noop",
         "retry": {"max_attempts": 2, "interval_seconds": 30}},
    ]});
    h.register("rejected", plan).await;
    let wf = h.start("rejected").await;
    let mut failed = h.event(&wf, "flaky", "FAILED");
    failed.error = Some("Busy".into());
    let (retry, _) = h.deliver(&[failed], 1).await;
    assert!(retry.is_empty());
    let a = h.activity(&wf, "flaky").await;
    assert_eq!((a.state, a.attempt.number), (ActivityState::Queued, 2));

    let mut late = h.event(&wf, "flaky", "COMPLETED");
    late.output = Some(json!({"from": "attempt 1's duplicate"}));
    let (retry, sum) = h.deliver(&[late.clone()], 2).await;
    assert!(retry.is_empty());
    assert_eq!(sum.rejected, 1, "attempt 1's late row: {sum:?}");

    let next = a.timing.next_attempt_epoch.expect("backoff");
    assert_eq!(h.tick(next).await.retries_launched, 1);
    assert_eq!(h.launcher.launches_of("flaky").len(), 2);
    // Attempt 2's invoke is lost: nothing reports. Past its relaunch
    // deadline the monitor relaunches it.
    let a = h.activity(&wf, "flaky").await;
    let at = h.deadline(&a) + h.config().report_grace_seconds + 1;
    let report = h.tick(at).await;
    let a = h.activity(&wf, "flaky").await;
    assert_ne!(
        a.state,
        ActivityState::Completed,
        "the rejected row completed attempt 2: {report:?}"
    );
    assert_eq!(report.relaunched, 1, "{report:?}");
    assert_eq!(h.launcher.launches_of("flaky").len(), 3);
    assert!(
        a.trail.parked.is_empty(),
        "nothing of attempt 1 waits for attempt 2: {:?}",
        a.trail.parked
    );
    // Attempt 2 runs: it is RUNNING, not completed by attempt 1's output.
    let (retry, _) = h.deliver(&[h.event(&wf, "flaky", "RUNNING")], 3).await;
    assert!(retry.is_empty());
    assert_eq!(h.activity(&wf, "flaky").await.state, ActivityState::Running);
    // The rejection is kept on the row, so no later sweep judges it again.
    let row = h
        .event_row(&late.activity_exec_id, &late.activity_event_id)
        .await;
    assert!(row.rejected_epoch.is_some(), "the rejection is on the row");
    assert!(
        row.rejected_reason
            .as_deref()
            .unwrap_or("")
            .contains("no launched attempt"),
        "{:?}",
        row.rejected_reason
    );
    // That write's MODIFY record is the engine's own: skipped, and not
    // counted as an overwrite.
    let mut modify = h.event_batch(&[row], 20);
    modify["Records"][0]["eventName"] = json!("MODIFY");
    let (_, sum) = handlers::activity_events(&h.engine, &modify).await.unwrap();
    assert_eq!((sum.skipped, sum.overwritten), (1, 0), "{sum:?}");
}

/// An event row's key, as the event index gives it.
#[derive(serde::Deserialize)]
struct EventKey {
    activity_event_id: String,
    activity_exec_id: String,
}

/// How many of activity `id`'s event rows carry their rejection.
async fn marked(h: &Harness, id: &str) -> usize {
    let key = whimbrel_core::store::KeyCond {
        hash: ("activity_exec_id".into(), common::sv(id)),
        range: None,
    };
    let keys: Vec<EventKey> = h
        .store
        .query(
            &h.store.tables().activity_event(),
            Some(whimbrel_core::store::INDEX_EVENTS_BY_ACTIVITY),
            key,
        )
        .await
        .unwrap();
    let mut n = 0;
    for k in keys {
        let row = h.event_row(&k.activity_exec_id, &k.activity_event_id).await;
        n += usize::from(row.rejected_epoch.is_some());
    }
    n
}

/// A flood of junk rows for one activity bounds each sweep's work: a
/// sweep judges at most `IN_FLIGHT_PER_SWEEP` of its rows, each rejection
/// is kept on its row so it is never judged again, no deadline acts while
/// rows are left, and the real report behind the junk is reached.
#[tokio::test]
async fn junk_rows_for_one_activity_are_judged_once_and_a_bounded_number_per_sweep() {
    use whimbrel_core::engine::monitor::IN_FLIGHT_PER_SWEEP;
    let h = Harness::new().await;
    h.register(
        "junk",
        json!({"activities": [{"name": "a", "lambda": "noop"}]}),
    )
    .await;
    let wf = h.start("junk").await;
    let junk = IN_FLIGHT_PER_SWEEP * 2 + 10;
    for _ in 0..junk {
        let mut ev = h.event(&wf, "a", "COMPLETED");
        (ev.attempt, ev.when_epoch) = (Some(99), Some(0.0));
        h.put_event(&ev).await;
    }
    for t in ["RUNNING", "COMPLETED"] {
        h.put_event(&h.event(&wf, "a", t)).await;
    }
    let a = h.activity(&wf, "a").await;
    let mut at = h.deadline(&a) + h.config().report_grace_seconds + 1;
    for sweep in 1..=2 {
        let report = h.tick(at).await;
        let a = h.activity(&wf, "a").await;
        assert_eq!(a.state, ActivityState::Queued, "sweep {sweep}: {report:?}");
        assert_eq!(report.timed_out + report.relaunched, 0, "{report:?}");
        assert_eq!(
            marked(&h, &a.activity_exec_id).await,
            sweep * IN_FLIGHT_PER_SWEEP
        );
        at += 60;
    }
    h.tick(at).await;
    assert_eq!(marked(&h, &a.activity_exec_id).await, junk);
    let a = h.activity(&wf, "a").await;
    assert_eq!(a.state, ActivityState::Completed, "the real rows applied");
}

/// Delete the event row `ev` as DynamoDB TTL would once its
/// `expires_at_epoch` passed (`RowRetentionDays`).
async fn expire(ev: &ActivityEvent, table: &str) {
    let sdk = common::sdk_config().await;
    let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.into());
    aws_sdk_dynamodb::Client::new(&sdk)
        .delete_item()
        .table_name(table)
        .key("activity_event_id", s(&ev.activity_event_id))
        .key("activity_exec_id", s(&ev.activity_exec_id))
        .send()
        .await
        .expect("delete the row");
}

/// An output kept off the activity item outlives the event row that
/// reported it. With `RowRetentionDays` set, TTL may delete a COMPLETED
/// row while the workflow still runs; the engine copied the output to a
/// row of its own when it applied it, so a dependent launched later, the
/// activity helper and the workflow's result all still get it.
#[tokio::test]
async fn an_output_outlives_its_event_row() {
    let h = Harness::new().await;
    let plan = json!({"activities": [
        {"name": "p", "lambda": "noop"},
        {"name": "q", "lambda": "noop"},
        {"name": "d", "lambda": "noop", "depends_on": ["p", "q"]},
        {"name": "s", "lambda": "noop"},
    ]});
    h.register("kept", plan).await;
    let wf = h.start("kept").await;
    let mut done = h.event(&wf, "p", "COMPLETED");
    (done.output, done.expires_at_epoch) = (Some(large("p")), Some(h.now() + 1));
    run_to(&h, &wf, "p", &done, 1).await;
    let mut sink = h.event(&wf, "s", "COMPLETED");
    (sink.output, sink.expires_at_epoch) = (Some(large("s")), Some(h.now() + 1));
    run_to(&h, &wf, "s", &sink, 3).await;
    let table = h.store.tables().activity_event();
    expire(&done, &table).await;
    expire(&sink, &table).await;

    // q completes: d is launched with p's output, read from the copy.
    let q_done = h.event(&wf, "q", "COMPLETED");
    run_to(&h, &wf, "q", &q_done, 5).await;
    let launches = h.launcher.launches_of("d");
    assert_eq!(launches.len(), 1, "d launched once");
    let payload = h.launcher.payload("d", 0);
    let helper = whimbrel_core::activity::Activity::with_engine(
        payload,
        whimbrel_core::engine::Engine::with_environment(
            h.store.clone(),
            (),
            h.config(),
            h.clock.clone(),
        ),
    );
    let outputs = helper.prerequisite_outputs().await.expect("outputs");
    assert_eq!(outputs.get("p"), Some(&large("p")));

    // d completes: the workflow's result has s's output, from its copy.
    let d_done = h.event(&wf, "d", "COMPLETED");
    run_to(&h, &wf, "d", &d_done, 7).await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    let result = h.engine.workflow_result(&wf, "kept").await.unwrap();
    let result = result.expect("a result");
    assert_eq!(result["s"], large("s"), "{result}");
    assert_eq!(result["d"], json!({"from": "d"}));
}

/// Issue 42 B.2: where tokens are required, a tokenless CANCEL row ends no
/// node, not even one that runs no code (a timer, a signal wait): it is
/// rejected with its reason and the nodes run on. A cancel request still
/// cancels them, as the engine.
#[tokio::test]
async fn a_tokenless_cancel_ends_no_node_where_tokens_are_required() {
    let h = Harness::new().await;
    h.register(
        "guarded",
        json!({"require_tokens": true, "activities": [
            {"name": "nap", "wait": {"seconds": 3600}},
            {"name": "approval", "signal": "approve", "timeout_seconds": 3600}
        ]}),
    )
    .await;
    let wf = h.start("guarded").await;
    for name in ["nap", "approval"] {
        assert_eq!(h.activity(&wf, name).await.state, ActivityState::Running);
    }
    let cancels = [
        h.event(&wf, "nap", "CANCEL"),
        h.event(&wf, "approval", "CANCEL"),
    ];
    let (retry, sum) = h.deliver(&cancels, 1).await;
    assert!(retry.is_empty(), "{retry:?}");
    assert_eq!(common::counts(&sum).2, 2, "both rejected: {sum:?}");
    for (ev, name) in cancels.iter().zip(["nap", "approval"]) {
        let node = h.activity(&wf, name).await;
        assert_eq!(node.state, ActivityState::Running, "{name} runs on");
        let row = h
            .event_row(&ev.activity_exec_id, &ev.activity_event_id)
            .await;
        let reason = row.rejected_reason.unwrap_or_default();
        assert!(reason.contains("requires the attempt token"), "{reason}");
    }
    let cancel = WorkflowRequest {
        cancel_workflow_exec_id: Some(wf.clone()),
        reason: Some("operator".into()),
        ..h.request("guarded", None)
    };
    h.engine.cancel_workflow(&cancel).await.unwrap();
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Cancelled);
    for name in ["nap", "approval"] {
        assert_eq!(h.activity(&wf, name).await.state, ActivityState::Cancelled);
    }
}

/// Issue 42 B.5: a client whose grant is scoped to `orders::*` puts rows
/// under its own prefix that name another workflow: a start of `payroll`,
/// and a cancel and a redrive of a `payroll` execution. Each is rejected
/// with its reason, nothing of payroll starts or changes, and a row of its
/// own workflow still starts it.
#[tokio::test]
async fn a_client_scoped_to_one_workflow_cannot_start_or_cancel_another() {
    let h = Harness::new().await;
    let nap = json!({"activities": [{"name": "nap", "wait": {"seconds": 3600}}]});
    h.register("orders", nap.clone()).await;
    h.register("payroll", nap).await;
    let victim = h.start("payroll").await;
    let scoped = |name: &str| WorkflowRequest {
        workflow_request_id: whimbrel_core::ids::new_id("orders"),
        ..h.request(name, None)
    };
    let start = scoped("payroll");
    let cancel = WorkflowRequest {
        cancel_workflow_exec_id: Some(victim.clone()),
        ..scoped("payroll")
    };
    let redrive = WorkflowRequest {
        redrive_workflow_exec_id: Some(victim.clone()),
        ..scoped("payroll")
    };
    let own = scoped("orders");
    let rows = [start.clone(), cancel, redrive, own.clone()];
    let table = h.store.tables().workflow_request();
    let keys = ["workflow_request_id", "workflow_name"];
    let batch = common::stream_event(&table, &keys, &rows, 1);
    let (resp, sum) = handlers::workflow_requests(&h.engine, &batch)
        .await
        .unwrap();
    assert!(common::failures(&resp).is_empty());
    assert_eq!((sum.applied, sum.rejected), (1, 3), "{sum:?}");
    let forged = whimbrel_core::ids::workflow_exec_id("payroll", &start.workflow_request_id);
    assert!(h.engine.load_workflow(&forged, "payroll").await.is_err());
    assert_eq!(h.workflow(&victim).await.state, WorkflowState::Running);
    assert_eq!(
        h.activity(&victim, "nap").await.state,
        ActivityState::Running
    );
    let mine = whimbrel_core::ids::workflow_exec_id("orders", &own.workflow_request_id);
    assert_eq!(h.workflow(&mine).await.state, WorkflowState::Running);
}

/// One raw HTTP exchange with `endpoint` (`http://host:port`): `request`
/// sent as is, the response's head (status line and headers) returned,
/// lower-cased.
fn http_head(endpoint: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let addr = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    conn.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = conn.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_lowercase();
    text.split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Issue 42 B.6: "DynamoDB Local on the local stack answers any browser
/// origin (CORS)", so a page the developer opens could read and write the
/// stack's tables. Shown not to happen with DynamoDB Local as
/// scripts/dynamodb-local.sh starts it: neither the preflight (which a
/// browser sends first, the API's `X-Amz-Target` header not being a
/// simple one) nor the request itself answers with
/// `Access-Control-Allow-Origin`, so a browser refuses the call.
#[test]
fn dynamodb_local_gives_no_browser_origin_access() {
    let endpoint = common::dynamodb_endpoint();
    let host = endpoint.trim_start_matches("http://");
    let preflight = format!(
        "OPTIONS / HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: x-amz-target,content-type,authorization\r\nConnection: close\r\n\r\n"
    );
    let head = http_head(&endpoint, &preflight);
    assert!(head.starts_with("http/1.1"), "{head}");
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    let body = "{}";
    let call = format!(
        "POST / HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Type: application/x-amz-json-1.0\r\nAuthorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let head = http_head(&endpoint, &call);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains("access-control-allow-origin"), "{head}");
}
