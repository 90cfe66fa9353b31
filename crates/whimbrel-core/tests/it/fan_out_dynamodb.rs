//! Wide workflows against a real DynamoDB API (DynamoDB Local, started by
//! the tests): a wide fan-out keeps its dependents in the plan,
//! not on its item, and still launches each exactly once; a plan larger
//! than a DynamoDB item is stored in write-once parts under a head and
//! read back whole.

use crate::common::Harness;
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::engine::decide;
use whimbrel_core::engine::plans::split;
use whimbrel_core::engine::PlanParting;
use whimbrel_core::ids;
use whimbrel_core::model::{WorkflowLambda, WorkflowPlan, WorkflowPlanPart};
use whimbrel_core::plan::{Plan, FAN_OUT_LIST_MAX};
use whimbrel_core::store::{s, Item};

/// Roots of the plans in parts below: enough that their plan passes
/// DynamoDB's 400 KB item (about 2.4 KB each: [`roots`]).
const ROOTS: usize = 320;

/// `n` roots `{prefix}{i}`, each about 2.4 KB of plan: an input of about
/// 250 bytes (tagged `tag`), small enough to stay in the plan (a larger one
/// is kept on its input row only), and a retry policy naming 20 errors
/// never to retry. So the plan is larger than an item by what its
/// activities say, as a wide plan's is, with few enough activities that
/// running them all through DynamoDB Local stays quick.
fn roots(prefix: &str, tag: &str, n: usize) -> Vec<Value> {
    let pad = "x".repeat(200);
    let never: Vec<String> = (0..20)
        .map(|k| format!("Error{k}{}", "E".repeat(94)))
        .collect();
    (0..n)
        .map(|i| {
            json!({"name": format!("{prefix}{i}"), "lambda": "noop",
                   "input": {"tag": tag, "i": i, "pad": pad},
                   "retry": {"no_retry_on": never}})
        })
        .collect()
}

/// `start` → `width` parallel `work-i` → `join` (waits for all of them).
fn fan(width: usize) -> Value {
    let mut acts = vec![json!({"name": "start", "lambda": "noop"})];
    let works: Vec<String> = (0..width).map(|i| format!("work-{i}")).collect();
    for w in &works {
        acts.push(json!({"name": w, "lambda": "noop", "depends_on": ["start"]}));
    }
    acts.push(json!({"name": "join", "lambda": "noop", "depends_on": works}));
    json!({"version": 1, "activities": acts})
}

#[tokio::test]
async fn a_wide_fan_out_keeps_its_dependents_in_the_plan_and_launches_each_once() {
    let h = Harness::new().await;
    let width = FAN_OUT_LIST_MAX + 8;
    h.register("fan", fan(width)).await;
    let wf = h.start("fan").await;
    let start = h.activity(&wf, "start").await;
    assert!(
        start.links.dependents.is_empty(),
        "{:?}",
        start.links.dependents
    );
    assert_eq!(start.links.dependents_in_plan, Some(width as u32));
    assert!(start.links.join_slots.is_empty());
    // A narrow prerequisite of the wide join still lists it, with its slot.
    let w0 = h.activity(&wf, "work-0").await;
    let join_id = ids::activity_exec_id(&wf, "join");
    assert_eq!(w0.links.dependents, vec![join_id.clone()]);
    assert!(w0.links.join_slots.contains_key(&join_id));

    // start COMPLETED, delivered twice through the stream: every work
    // activity is launched once.
    let done = h.event(&wf, "start", "COMPLETED");
    let (retry, _) = h
        .deliver(&[h.event(&wf, "start", "RUNNING"), done.clone()], 1)
        .await;
    assert!(retry.is_empty(), "{retry:?}");
    let (retry, _) = h.deliver(&[done], 10).await;
    assert!(retry.is_empty(), "{retry:?}");
    for i in 0..width {
        let name = format!("work-{i}");
        assert_eq!(h.launcher.launches_of(&name).len(), 1, "{name}");
        assert_eq!(h.activity(&wf, &name).await.state, ActivityState::Queued);
    }
    for i in 0..width {
        h.run_to_completion(&wf, &format!("work-{i}")).await;
    }
    assert_eq!(h.launcher.launches_of("join").len(), 1);
    h.run_to_completion(&wf, "join").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

#[tokio::test]
async fn a_failed_wide_fan_out_cancels_the_dependents_its_plan_names() {
    let h = Harness::new().await;
    let width = FAN_OUT_LIST_MAX + 1;
    h.register("fan", fan(width)).await;
    let wf = h.start("fan").await;
    h.engine
        .apply_event(&h.event(&wf, "start", "RUNNING"))
        .await
        .unwrap();
    h.engine
        .apply_event(&h.event(&wf, "start", "FAILED"))
        .await
        .unwrap();
    for name in (0..width)
        .map(|i| format!("work-{i}"))
        .chain(["join".into()])
    {
        assert_eq!(
            h.activity(&wf, &name).await.state,
            ActivityState::Cancelled,
            "{name}"
        );
    }
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    assert_eq!(h.launcher.launch_count(), 1);
}

#[tokio::test]
async fn a_plan_larger_than_an_item_is_stored_in_parts_and_read_back_whole() {
    let h = Harness::new().await;
    // Many roots with inputs small enough to stay in the plan (a larger
    // one is kept on its input row, not in the plan): about 750 KB of
    // plan, more than DynamoDB's 400 KB item, and one sink.
    let mut acts = roots("big-", "", ROOTS);
    let roots: Vec<String> = (0..ROOTS).map(|i| format!("big-{i}")).collect();
    acts.push(json!({"name": "sink", "lambda": "noop", "depends_on": roots}));
    let plan = json!({"version": 1, "activities": acts});
    // A plan this large comes from a decider (a static definition lives
    // on the workflow_lambda item, within 400 KB).
    let reg = WorkflowLambda {
        workflow_name: "big".into(),
        lambda: Some("big-decider".into()),
        definition: None,
        allow: None,
    };
    h.store
        .put(&h.store.tables().workflow_lambda(), &reg)
        .await
        .unwrap();
    h.launcher
        .deciders
        .lock()
        .unwrap()
        .insert("big-decider".into(), Ok(plan.clone()));
    let req = h.request("big", None);
    h.engine.start_workflow(&req).await.expect("start");
    let wf = ids::workflow_exec_id("big", &req.workflow_request_id);

    // The head names the parts and holds no activity; each part is its
    // own item, keyed by the digest.
    let table = h.store.tables().workflow_plan();
    let head: WorkflowPlan = h
        .store
        .get(&table, decide::workflow_key(&wf, "big"))
        .await
        .unwrap()
        .expect("head item");
    assert!(head.plan.activities.is_empty());
    let parts = head.parts.clone().expect("stored in parts");
    assert!(parts.count >= 3, "{} parts", parts.count);
    for k in 0..parts.count {
        let mut key = Item::new();
        key.insert(
            "workflow_exec_id".into(),
            s(ids::plan_part_key(&wf, &parts.digest, k)),
        );
        key.insert("workflow_name".into(), s("big"));
        let part: WorkflowPlanPart = h.store.get(&table, key).await.unwrap().expect("part");
        assert_eq!(part.part, k);
    }
    // Read back whole, equal to the registered plan.
    let loaded = h.engine.load_plan(&wf, "big").await.unwrap().expect("plan");
    let want: Plan = serde_json::from_value(plan).unwrap();
    assert_eq!(loaded.plan, want);
    assert_eq!(h.workflow(&wf).await.activity_count, ROOTS as u64 + 1);

    // A redelivered start replays the stored plan; nothing is launched
    // twice, and the workflow runs to the end (its result comes from the
    // sinks named by the plan, read through the parts).
    h.engine
        .start_workflow(&req)
        .await
        .expect("redelivered start");
    assert_eq!(
        h.engine.load_plan(&wf, "big").await.unwrap().unwrap().plan,
        want
    );
    assert_eq!(h.launcher.launch_count(), ROOTS);
    for (k, chunk) in (0..ROOTS).collect::<Vec<_>>().chunks(100).enumerate() {
        for t in ["RUNNING", "COMPLETED"] {
            let evs: Vec<_> = chunk
                .iter()
                .map(|i| h.event(&wf, &format!("big-{i}"), t))
                .collect();
            let seq = (k * 1_000 + usize::from(t == "COMPLETED") * 500) as u64;
            let (retry, _) = h.deliver(&evs, seq).await;
            assert!(retry.is_empty(), "{retry:?}");
        }
    }
    assert_eq!(h.launcher.launches_of("sink").len(), 1);
    h.run_to_completion(&wf, "sink").await;
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Completed);
    assert!(done.result.is_some());
}

#[tokio::test]
async fn a_start_that_died_among_its_plan_parts_is_finished_by_the_next() {
    let h = Harness::new().await;
    // Many roots with inputs kept in the plan: a plan in parts.
    let acts = |tag: &str| roots("r", tag, ROOTS);
    let plan = json!({"version": 1, "activities": acts("won")});
    let reg = WorkflowLambda {
        workflow_name: "big".into(),
        lambda: Some("big-decider".into()),
        definition: None,
        allow: None,
    };
    h.store
        .put(&h.store.tables().workflow_lambda(), &reg)
        .await
        .unwrap();
    h.launcher
        .deciders
        .lock()
        .unwrap()
        .insert("big-decider".into(), Ok(plan.clone()));
    let req = h.request("big", None);
    let wf = ids::workflow_exec_id("big", &req.workflow_request_id);
    let table = h.store.tables().workflow_plan();
    let as_stored = |plan: Value| WorkflowPlan {
        workflow_exec_id: wf.clone(),
        workflow_name: "big".into(),
        plan: serde_json::from_value(plan).unwrap(),
        input: None,
        recorded_epoch: 1,
        parts: None,
        episodic: None,
    };
    // What two dead starts left: every part of another plan (a decider
    // that answered differently), and the first part of this one; no head.
    let (_, other) = split(
        &as_stored(json!({"version": 1, "activities": acts("lost")})),
        PlanParting::default(),
    )
    .unwrap();
    let (_, mine) = split(&as_stored(plan.clone()), PlanParting::default()).unwrap();
    assert!(mine.len() >= 2);
    for p in other.iter().chain(mine.iter().take(1)) {
        assert!(h
            .store
            .put_new(&table, "workflow_exec_id", p)
            .await
            .unwrap());
    }
    // The next start writes the rest and the head, and reads its own plan.
    h.engine.start_workflow(&req).await.expect("start");
    let stored = h.engine.load_plan(&wf, "big").await.unwrap().expect("plan");
    let want: Plan = serde_json::from_value(plan).unwrap();
    assert_eq!(stored.plan, want);
    assert_eq!(stored.parts.map(|p| p.count as usize), Some(mine.len()));
    for i in 0..4 {
        let name = format!("r{i}");
        assert_eq!(h.launcher.launches_of(&name).len(), 1, "{name}");
        assert_eq!(h.launcher.payload(&name, 0).input["tag"], "won");
    }
}

/// Issue 42 A.9: the COMPLETED of a 10,000-wide fan-out's root released
/// every dependent in one invocation, ran past the function's timeout, and
/// was retried whole (its batch bisected down to that one record, which
/// timed out again), so its stream shard stayed blocked. Now a release
/// stops starting dependents once the invocation's budget is spent and
/// leaves the rest owed: the COMPLETED is applied, its due marker stays,
/// and the monitor's tick, with a budget of its own, releases the rest,
/// each dependent once, resuming after the chunks recorded as released
/// (`released_through`).
#[tokio::test]
async fn a_release_cut_by_its_budget_is_owed_and_finished_by_the_monitor() {
    use whimbrel_core::engine::budget;
    use whimbrel_core::engine::release::RELEASE_CHUNK;
    let h = Harness::new().await;
    let width = RELEASE_CHUNK + 44;
    h.register("fan", fan(width)).await;
    let wf = h.start("fan").await;
    let spent = std::time::Instant::now();
    budget::within(spent, h.run_to_completion(&wf, "start")).await;
    let start = h.activity(&wf, "start").await;
    assert_eq!(start.state, ActivityState::Completed);
    assert!(start.timing.due_epoch.is_some(), "its settle is owed");
    // Handed back at once, not when the settle grace (60 s) ends: the
    // next tick resumes it (at 2,000 wide a root's dependents launched a
    // median 75 s after its COMPLETED, make bench 2026-12-07).
    assert!(
        start.timing.due_epoch <= Some(h.now()),
        "{:?} is not due now ({})",
        start.timing.due_epoch,
        h.now()
    );
    let launched = |h: &Harness| {
        (0..width)
            .filter(|i| !h.launcher.launches_of(&format!("work-{i}")).is_empty())
            .count()
    };
    assert_eq!(launched(&h), 0, "the release stopped at the budget");
    // As if a first invocation had released the first chunk and been cut:
    // the monitor resumes after it.
    let key = decide::activity_key(&start.activity_exec_id, &wf);
    let mark = whimbrel_core::store::UpdateRequest::new(h.store.tables().activity_exec(), key).set(
        "released_through",
        whimbrel_core::store::n(RELEASE_CHUNK as u64),
    );
    h.store.update(mark).await.unwrap();
    let due = start.timing.due_epoch.unwrap();
    h.tick(due).await;
    assert_eq!(
        launched(&h),
        width - RELEASE_CHUNK,
        "resumed after the recorded chunk"
    );
    let start = h.activity(&wf, "start").await;
    assert_eq!(start.timing.due_epoch, None, "settled");
    assert_eq!(start.links.released_through, Some(width as u64));
    for i in RELEASE_CHUNK..width {
        assert_eq!(
            h.launcher.launches_of(&format!("work-{i}")).len(),
            1,
            "work-{i}"
        );
    }
    // A tick whose own budget is spent judges nothing: the launches an
    // hour old are left due, not launched again.
    let report = budget::within(spent, h.tick(due + 3600)).await;
    assert_eq!((report.errors, report.relaunched), (0, 0), "{report:?}");
    assert_eq!(report.shards_left, 7, "{report:?}");
    assert_eq!(
        h.launcher.launches_of(&format!("work-{}", width - 1)).len(),
        1
    );
}

/// Issue 42 A.9: the monitor's ticks overlap (every 5 s locally, every
/// minute on AWS, each up to its function's timeout), and every tick that
/// found an owed wide release worked on it from the same recorded chunk:
/// at 2,000 wide the monitor read 12 activity items per activity, and at
/// 10,000 its ticks ran into their timeout (make bench, 2026-12-07). A
/// settle longer than one chunk is taken in hand first: its due marker
/// moves to when the holder's invocation has surely ended, conditioned on
/// the marker read, so a second tick leaves it to its holder.
#[tokio::test]
async fn two_ticks_that_find_one_owed_wide_release_work_on_it_once() {
    use whimbrel_core::engine::budget;
    use whimbrel_core::engine::release::RELEASE_CHUNK;
    let h = Harness::new().await;
    let width = RELEASE_CHUNK + 44;
    h.register("fan", fan(width)).await;
    let wf = h.start("fan").await;
    budget::within(std::time::Instant::now(), h.run_to_completion(&wf, "start")).await;
    let due = h
        .activity(&wf, "start")
        .await
        .timing
        .due_epoch
        .expect("owed");
    let (a, b) = tokio::join!(h.tick(due + 1), h.tick(due + 1));
    assert_eq!(a.settled + b.settled, 1, "one holder: {a:?} {b:?}");
    assert_eq!(a.errors + b.errors, 0, "{a:?} {b:?}");
    let start = h.activity(&wf, "start").await;
    assert_eq!(start.timing.due_epoch, None, "settled");
    for i in 0..width {
        let name = format!("work-{i}");
        assert_eq!(h.launcher.launches_of(&name).len(), 1, "{name}");
    }
}

/// Issue 42 C.1: a settle cut by its function's timeout and run again
/// pays only for what is left. `fan` FAILED; its settle cancels its 200
/// dependents, then dies on the write that would clear its own marker
/// (held by [`common::Stalled`] and dropped: the function is stopped).
/// The monitor's restart of that settle finds every dependent CANCELLED
/// by this very step with nothing owed (no due marker), so it writes none
/// of them again: a couple of batched reads and the marker's clear. Before,
/// the restart re-ran each dependent's settle, so a settle wider than one
/// invocation's time re-did its done part on every restart and never got
/// further (seed 821 of the simulation, 500 dependents).
#[tokio::test]
async fn a_restarted_settle_does_not_redo_the_dependents_it_ended() {
    const WIDE: usize = 200;
    let h = Harness::new().await;
    let mut activities = vec![json!({"name": "fan", "lambda": "noop"})];
    activities.extend(
        (0..WIDE)
            .map(|i| json!({"name": format!("d{i:03}"), "lambda": "noop", "depends_on": ["fan"]})),
    );
    h.register("wide-cancel", json!({ "activities": activities }))
        .await;
    let wf = h.start("wide-cancel").await;
    let owed = crate::common::terminal_write_only(
        &h,
        &wf,
        "fan",
        whimbrel_core::contract::Transition::Failed,
        ActivityState::Failed,
        "died",
        Default::default(),
    )
    .await;
    let fan = h.activity(&wf, "fan").await;
    let (monitor, reached, _gate) = crate::common::Stalled::engine(&h, &fan.activity_exec_id);
    h.clock.freeze(owed);
    tokio::select! {
        r = monitor.monitor_tick(owed) => panic!("the fan's marker was not written: {r:?}"),
        () = reached.notified() => {}
    }
    for i in 0..WIDE {
        let d = h.activity(&wf, &format!("d{i:03}")).await;
        assert_eq!(d.state, ActivityState::Cancelled, "{}", d.activity_name);
        assert_eq!(d.timing.due_epoch, None, "{}: settled", d.activity_name);
    }
    assert!(h.activity(&wf, "fan").await.timing.due_epoch.is_some());

    h.store.metrics().take();
    let report = h.tick(owed).await;
    let ops = h.store.metrics().take();
    assert_eq!(report.settled, 1, "{report:?}");
    assert_eq!(h.activity(&wf, "fan").await.timing.due_epoch, None);
    // Besides the tick's Query of each due-index shard (the same for any
    // width): the batched reads of the dependents and a few calls for the
    // fan itself and its workflow; before, 2 GetItem and 2 UpdateItem per
    // dependent (404 of each).
    let requests: u64 = (ops.iter())
        .filter(|(op, _)| op.as_str() != "Query")
        .map(|(_, o)| o.requests)
        .sum();
    assert!(
        requests <= 12,
        "the restart wrote its done part again: {ops:?}"
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
}
