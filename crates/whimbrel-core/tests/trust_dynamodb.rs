//! Trust between activities, against a real DynamoDB API (DynamoDB Local,
//! started by the tests): what one holder of the activity role can write
//! (event rows, heartbeats) cannot change another activity's outcome, its
//! deadlines, or the rows the engine reads back (docs/design.md § 3.10).

mod common;

use common::Harness;
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::engine::payloads;
use whimbrel_core::engine::{decide, QUARANTINED};
use whimbrel_core::handlers;
use whimbrel_core::model::ActivityEvent;
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

/// A large output is bound to its activity by its SHA-256 when it applies.
/// Its row overwritten afterwards (the MODIFY record is filtered out, so
/// nothing else notices) is detected on every read: the dependent is not
/// launched with it, and once the row holds what was applied again, the
/// launch goes ahead with the real output.
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
    assert_eq!(
        p.outcome.output_event_id.as_ref(),
        Some(&done.activity_event_id)
    );
    assert_eq!(
        p.outcome.output_sha256,
        Some(payloads::output_digest(&large("p")))
    );

    overwrite(&h, &done, large("forged")).await;
    // Its MODIFY record is counted and logged, never applied.
    let mut modify = h.event_batch(&[done.clone()], 10);
    modify["Records"][0]["eventName"] = json!("MODIFY");
    let (_, sum) = handlers::activity_events(&h.engine, &modify).await.unwrap();
    assert_eq!((sum.overwritten, sum.skipped, sum.applied), (1, 1, 0));
    let read = h.engine.outputs_of(vec![p.clone()]).await;
    assert!(
        read.is_err(),
        "a tampered output is never returned: {read:?}"
    );
    let direct = payloads::outputs_of(&h.store, vec![p.clone()]).await;
    assert!(matches!(direct, Err(StoreError::Mismatch(_))), "{direct:?}");
    // q completes: d is released, but its launch cannot read p's output.
    let mut q_done = h.event(&wf, "q", "COMPLETED");
    q_done.output = Some(json!("q"));
    h.deliver(&[h.event(&wf, "q", "RUNNING")], 3).await;
    let (retry, _) = h.deliver(std::slice::from_ref(&q_done), 4).await;
    assert_eq!(retry.len(), 1, "the launch is retried, not made");
    assert!(h.launcher.launches_of("d").is_empty());

    // The row restored (say from a backup): the monitor's relaunch of the
    // claimed attempt launches d with what p reported.
    overwrite(&h, &done, large("p")).await;
    assert_eq!(h.activity(&wf, "d").await.state, ActivityState::Queued);
    let report = h.tick(h.now() + 3600).await;
    assert_eq!(report.relaunched, 1, "{report:?}");
    let launched = h.launcher.launches_of("d");
    assert_eq!(launched.len(), 1);
    assert_eq!(launched[0]["prerequisites"]["p"], large("p"));
}

/// A sink's output overwritten between its report and the workflow's end
/// never becomes the workflow's result: the end is retried until the row
/// holds what was applied.
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
    assert_eq!(retry.len(), 1, "the end is retried");
    assert_eq!(h.activity(&wf, "s").await.state, ActivityState::Completed);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);

    overwrite(&h, &done, large("s")).await;
    let (retry, _) = h.deliver(std::slice::from_ref(&done), 3).await;
    assert!(retry.is_empty());
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
    h.store.update(req, false).await.expect("raw write");
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
