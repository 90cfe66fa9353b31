//! Least privilege, both ways (who can write what):
//! * every DynamoDB call a function's code makes, on DynamoDB Local along
//!   its paths, is in that function's list in `src/grants.rs`;
//! * `template.yaml` grants each function exactly its list (plus the
//!   platform's actions): a call without a grant, or a grant without a
//!   listed call, fails;
//! * the same for an activity (`ActivityPolicy`), a task-list
//!   worker (`TaskListWorkerPolicy`, whose poll is limited to its
//!   `TaskLists` by `dynamodb:LeadingKeys` on the key format the code
//!   queries) and a signal sender (`SignalSenderPolicy`), and each may use
//!   the tables' KMS key when one is set.

use crate::common;
mod grants_episodic;

use std::collections::{BTreeMap, BTreeSet};

use crate::common::{stream_event, Harness};
use serde_json::json;
use serde_yaml::Value as Y;
use whimbrel_core::grants::{self, Grant};
use whimbrel_core::handlers;
use whimbrel_core::model::{SignalRow, WorkflowExec, WorkflowRequest};
use whimbrel_core::store::Store;

type Calls = BTreeSet<(String, String, Option<String>)>;

/// The calls recorded since the last take, tables without their prefix.
fn calls(h: &Harness) -> Calls {
    calls_of(&h.store, h)
}

/// The calls `store` recorded since the last take (on `h`'s tables).
fn calls_of(store: &Store, h: &Harness) -> Calls {
    let prefix = h
        .store
        .tables()
        .workflow_exec()
        .replace("workflow_exec", "");
    store
        .metrics()
        .take_calls()
        .into_iter()
        .map(|c| {
            (
                c.action.to_string(),
                c.table.trim_start_matches(&prefix).to_string(),
                c.index,
            )
        })
        .collect()
}

fn listed(list: &[Grant]) -> Calls {
    list.iter()
        .map(|g| (g.action.into(), g.table.into(), g.index.map(String::from)))
        .collect()
}

fn diamond() -> serde_json::Value {
    json!({"activities": [
        {"name": "a", "lambda": "f", "timeout_seconds": 100},
        // An input too large for the activity item: put on an input row.
        {"name": "b", "lambda": "f", "depends_on": ["a"], "input": {"pad": "x".repeat(300)}},
        {"name": "c", "lambda": "f", "depends_on": ["a"], "heartbeat_timeout_seconds": 30},
        {"name": "d", "lambda": "f", "depends_on": ["b", "c"]}
    ]})
}

/// A root that waits for signal `approve` (for at most 60 s), and an
/// activity after it.
fn approval() -> serde_json::Value {
    json!({"activities": [
        {"name": "approval", "signal": "approve", "timeout_seconds": 60},
        {"name": "after", "lambda": "f", "depends_on": ["approval"]}
    ]})
}

/// `a`, then `kid`: a child workflow of `c` (design.md § 9.5).
fn with_child() -> serde_json::Value {
    json!({"activities": [
        {"name": "a", "lambda": "f"},
        {"name": "kid", "workflow": "c", "depends_on": ["a"]},
    ]})
}

/// Register `c` (one Lambda activity), `pc` ([`with_child`]) and `pr`
/// (a root child node of `c`).
async fn register_children(h: &Harness) {
    h.register("c", json!({"activities": [{"name": "w", "lambda": "f"}]}))
        .await;
    h.register("pc", with_child()).await;
    h.register(
        "pr",
        json!({"activities": [{"name": "kid", "workflow": "c"}]}),
    )
    .await;
}

/// A request row at the child id of `wf`'s node `kid` that the engine did
/// not write (a client's put, not the engine's call): the node's release
/// finds it, reads it back, and fails the node.
async fn squat_child(h: &Harness, wf: &str) {
    let node = whimbrel_core::ids::activity_exec_id(wf, "kid");
    let row = WorkflowRequest {
        workflow_request_id: whimbrel_core::ids::child_request_id("c", &node, 0),
        ..h.request("c", Some(json!("not the parent's")))
    };
    h.clients
        .put(&h.clients.tables().workflow_request(), &row)
        .await
        .unwrap();
}

/// Whether `wf`'s node `kid` requested its child (RUNNING) or found its
/// request id taken (FAILED).
async fn kid_state(h: &Harness, wf: &str) -> String {
    h.activity(wf, "kid").await.state.as_str().to_string()
}

/// A stream event of `whimbrel_signal` INSERTs for `rows`.
fn signal_batch(h: &Harness, rows: &[SignalRow], seq: u64) -> serde_json::Value {
    stream_event(
        &h.store.tables().signal(),
        &["workflow_exec_id", "signal_key"],
        rows,
        seq,
    )
}

/// Two roots run by Lambda `lim`, whose target limit of 1 (design.md
/// § 9.3) is set here (through the clients' store's engine calls, which
/// are discarded): one takes the slot, the other waits for it.
async fn register_limited(h: &Harness) {
    h.register(
        "lim",
        json!({"activities": [{"name": "x", "lambda": "lim"}, {"name": "y", "lambda": "lim"}]}),
    )
    .await;
    h.engine.set_target_limit("lambda:lim", 1).await.unwrap();
    calls(h);
}

/// The root of `lim` workflow `wf` that holds the slot, and the other.
async fn holder(h: &Harness, wf: &str) -> (&'static str, &'static str) {
    match h.activity(wf, "x").await.links.target_slot_held {
        true => ("x", "y"),
        false => ("y", "x"),
    }
}

/// The other root of `wf` was handed the slot its holder gave back.
async fn handed_on(h: &Harness, wf: &str, waiter: &str) {
    let w = h.activity(wf, waiter).await;
    assert!(w.links.target_slot_held, "{waiter} did not get the slot");
    let l = h.engine.target_limit("lambda:lim").await.unwrap().unwrap();
    assert_eq!((l.slots_used(), l.slot_waiters.len()), (1, 0));
}

/// `JOIN_GROUP_SIZE + 1` roots and a wide join waiting for them all.
fn wide() -> serde_json::Value {
    let n = whimbrel_core::plan::JOIN_GROUP_SIZE + 1;
    let mut acts: Vec<serde_json::Value> = (0..n)
        .map(|i| json!({"name": format!("p{i}"), "lambda": "f"}))
        .collect();
    let deps: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
    acts.push(json!({"name": "join", "lambda": "f", "depends_on": deps}));
    json!({"activities": acts})
}

async fn deliver_events(h: &Harness, evs: &[whimbrel_core::model::ActivityEvent], seq: u64) {
    let (retry, _) = h.deliver(evs, seq).await;
    assert!(retry.is_empty(), "{retry:?}");
}

/// Put back the due marker of `name`'s ended activity (through the
/// clients' store, so the write is not counted among the engine's calls):
/// its settle owed again, as a function that died before clearing the
/// marker leaves it. A redelivery then resumes the settle; one of an
/// activity with no marker does nothing (`ActivityExec::settled`).
async fn owe_settle_again(h: &Harness, wf: &str, name: &str) {
    use whimbrel_core::store::{n, UpdateRequest};
    let a = h.activity(wf, name).await;
    let key = whimbrel_core::keys::activity_key(&a.activity_exec_id, wf);
    let shard = whimbrel_core::keys::shard_of(&a.activity_exec_id);
    let req = UpdateRequest::new(h.clients.tables().activity_exec(), key)
        .set(whimbrel_core::attr::DUE_EPOCH, n(h.now()))
        .set(whimbrel_core::attr::DUE_SHARD, n(shard));
    h.clients.update(req).await.unwrap();
}

/// Whether `ev`'s row carries its rejection (read through the clients'
/// store, so the read is not counted among the engine's calls).
async fn rejection_kept(h: &Harness, ev: &whimbrel_core::model::ActivityEvent) -> bool {
    let key = whimbrel_core::keys::event_key(&ev.activity_event_id, &ev.activity_exec_id);
    let row: whimbrel_core::model::ActivityEvent = h
        .clients
        .get(&h.clients.tables().activity_event(), key)
        .await
        .unwrap()
        .expect("row");
    row.rejected_epoch.is_some()
}

/// Make activity `name`'s item look as an earlier version completed it:
/// its large output named by its event row `row` (`output_event_id`), not
/// by the engine's copy, so readers take the path items of that version
/// need.
async fn completed_before_copies(h: &Harness, wf: &str, name: &str, row: &str) {
    use whimbrel_core::store::UpdateRequest;
    let a = h.activity(wf, name).await;
    let key = whimbrel_core::keys::activity_key(&a.activity_exec_id, wf);
    let req = UpdateRequest::new(h.clients.tables().activity_exec(), key)
        .remove("output_ref")
        .set("output_event_id", common::sv(row));
    h.clients.update(req).await.unwrap();
}

/// The workflow-request function's paths: a new request, the same record
/// delivered again, a root whose function does not exist (its launch is
/// refused for good: FAILED and counted), and roots that wait for a
/// signal sent before the workflow started (delivered at its release):
/// one whose dependent then launches with its output, and one whose large
/// input (an output row) ends the workflow with its result.
async fn workflow_request_calls() -> Calls {
    let h = Harness::new().await;
    h.register("d", diamond()).await;
    h.register(
        "m",
        json!({"activities": [{"name": "r", "lambda": "missing-function"}]}),
    )
    .await;
    h.register("s", approval()).await;
    h.register(
        "sole",
        json!({"activities": [{"name": "approval", "signal": "approve"}]}),
    )
    .await;
    let req = h.request("d", Some(json!({"n": 1})));
    let req_id = req.workflow_request_id.clone();
    let missing = h.request("m", None);
    let signalled = h.request("s", None);
    let s_id = whimbrel_core::ids::workflow_exec_id("s", &signalled.workflow_request_id);
    // The signal is sent first (a client's put: not the engine's call).
    h.store
        .put(
            &h.store.tables().signal(),
            &SignalRow::new(&s_id, "approve", "s1", Some(json!({"ok": true}))),
        )
        .await
        .unwrap();
    let sole = h.request("sole", None);
    let sole_id = whimbrel_core::ids::workflow_exec_id("sole", &sole.workflow_request_id);
    // Two workflows whose root is a child node: one requests its child,
    // the other finds its child's request id taken.
    register_children(&h).await;
    let (parent, squatted) = (h.request("pr", None), h.request("pr", None));
    let parent_id = whimbrel_core::ids::workflow_exec_id("pr", &parent.workflow_request_id);
    let squatted_id = whimbrel_core::ids::workflow_exec_id("pr", &squatted.workflow_request_id);
    squat_child(&h, &squatted_id).await;
    let large = json!({"pad": "x".repeat(300)});
    h.store
        .put(
            &h.store.tables().signal(),
            &SignalRow::new(&sole_id, "approve", "s1", Some(large.clone())),
        )
        .await
        .unwrap();
    // As if a concurrent start (the monitor's) had counted the refused
    // root already: this start reads the group back.
    let m_id = whimbrel_core::ids::workflow_exec_id("m", &missing.workflow_request_id);
    let counted = whimbrel_core::model::CountGroup {
        activity_exec_dependency: whimbrel_core::ids::count_group_id(&m_id, 0),
        workflow_exec_id: m_id,
        ended: vec!["r".into()],
        failed_count: 1,
        ..Default::default()
    };
    h.store
        .put(&h.store.tables().activity_exec_dependency(), &counted)
        .await
        .unwrap();
    register_limited(&h).await;
    let limited = h.request("lim", None);
    let limited_id = whimbrel_core::ids::workflow_exec_id("lim", &limited.workflow_request_id);
    calls(&h);
    let event = stream_event(
        &h.store.tables().workflow_request(),
        &["workflow_request_id", "workflow_name"],
        &[req, missing, signalled, sole, parent, squatted, limited],
        1,
    );
    for _ in 0..2 {
        handlers::workflow_requests(&h.engine, &event)
            .await
            .unwrap();
    }
    let approval = h.activity(&s_id, "approval").await;
    assert_eq!(approval.state.as_str(), "COMPLETED");
    assert_eq!(approval.outcome.output, Some(json!({"ok": true})));
    assert_eq!(h.activity(&s_id, "after").await.state.as_str(), "QUEUED");
    assert_eq!(
        h.launcher.payload("after", 0).prerequisites["approval"],
        json!({"ok": true})
    );
    // The large input is kept on an output row; the result reads it back.
    let sole_wf = h.workflow(&sole_id).await;
    assert_eq!(sole_wf.state.as_str(), "COMPLETED");
    assert!(h
        .activity(&sole_id, "approval")
        .await
        .outcome
        .output_ref
        .is_some());
    assert_eq!(sole_wf.result, Some(json!({"approval": large})));
    assert_eq!(kid_state(&h, &parent_id).await, "RUNNING");
    assert_eq!(kid_state(&h, &squatted_id).await, "FAILED");
    let (held, waiting) = holder(&h, &limited_id).await;
    assert!(
        !h.activity(&limited_id, waiting)
            .await
            .links
            .target_slot_held
    );
    assert_eq!(h.activity(&limited_id, held).await.state.as_str(), "QUEUED");
    // A cancel request for the running one: its activities are cancelled
    // (and the child node's child with them).
    let d_id = whimbrel_core::ids::workflow_exec_id("d", &req_id);
    let cancel = WorkflowRequest {
        cancel_workflow_exec_id: Some(d_id.clone()),
        ..h.request("d", None)
    };
    let cancel_parent = WorkflowRequest {
        cancel_workflow_exec_id: Some(parent_id.clone()),
        ..h.request("pr", None)
    };
    let event = stream_event(
        &h.store.tables().workflow_request(),
        &["workflow_request_id", "workflow_name"],
        &[cancel, cancel_parent],
        10,
    );
    handlers::workflow_requests(&h.engine, &event)
        .await
        .unwrap();
    assert_eq!(h.activity(&d_id, "a").await.state.as_str(), "CANCELLED");
    assert_eq!(kid_state(&h, &parent_id).await, "CANCELLED");
    let made = calls(&h);
    grants_episodic::workflow_request_paths(&h).await;
    made.union(&calls(&h)).cloned().collect()
}

/// The stream-redrive function's paths: `redrive::apply_records` hands
/// each given-up record to the handler of its stream, so its calls are
/// the two stream functions' (`tests/it/redrive_dynamodb.rs` runs it).
async fn stream_redrive_calls() -> Calls {
    let mut all = workflow_request_calls().await;
    all.extend(activity_event_calls().await);
    all
}

/// The activity-event function's paths: reports that release, launch with
/// prerequisites' outputs, park, and finish the workflow with its result.
async fn activity_event_calls() -> Calls {
    let h = Harness::new().await;
    h.register("d", diamond()).await;
    let wf = h.start("d").await;
    calls(&h);
    deliver_events(
        &h,
        &[
            h.attempt_event(&wf, "a", "COMPLETED", 0),
            h.attempt_event(&wf, "a", "RUNNING", 0),
        ],
        1,
    )
    .await;
    for name in ["b", "c"] {
        // b's output is too large for its item: the engine copies it, and
        // d's launch reads the copy back.
        let mut done = h.event(&wf, name, "COMPLETED");
        if name == "b" {
            done.output = Some(json!({"pad": "x".repeat(300)}));
        }
        deliver_events(&h, &[h.event(&wf, name, "RUNNING"), done], 10).await;
    }
    deliver_events(
        &h,
        &[h.event(&wf, "d", "RUNNING"), h.event(&wf, "d", "COMPLETED")],
        20,
    )
    .await;
    assert_eq!(h.workflow(&wf).await.state.as_str(), "COMPLETED");
    // A report for an ended activity is rejected, and the rejection kept
    // on its row.
    let late = h.event(&wf, "d", "FAILED");
    deliver_events(&h, std::slice::from_ref(&late), 25).await;
    assert!(rejection_kept(&h, &late).await);
    let made = calls(&h);
    // A failure cancels the dependents (each read before its cancel).
    let failing = h.start("d").await;
    calls(&h);
    let a_fails = [
        h.event(&failing, "a", "RUNNING"),
        h.event(&failing, "a", "FAILED"),
    ];
    deliver_events(&h, &a_fails, 30).await;
    assert_eq!(h.workflow(&failing).await.state.as_str(), "FAILED");
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // An early COMPLETED whose output is too deep to park with it: parked
    // by reference, its output read back from the event row after RUNNING.
    let deep = h.start("d").await;
    let mut output = json!("leaf");
    for i in 0..31 {
        output = json!({ format!("d{i}"): output });
    }
    // The third launch of an `a` (after those of `wf` and `failing`).
    let mut done = h.attempt_event(&deep, "a", "COMPLETED", 2);
    done.output = Some(output.clone());
    h.put_event(&done).await;
    calls(&h);
    let (retry, sum) = h.deliver(std::slice::from_ref(&done), 40).await;
    assert!(retry.is_empty() && sum.parked == 1, "{retry:?} {sum:?}");
    deliver_events(&h, &[h.attempt_event(&deep, "a", "RUNNING", 2)], 41).await;
    let a = h.activity(&deep, "a").await;
    assert_eq!(
        (a.state.as_str(), a.outcome.error.as_deref()),
        ("COMPLETED", None)
    );
    assert_eq!(a.outcome.output, Some(output));
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // A wide join: its prerequisites release join groups (one COMPLETED
    // delivered again, its settle still owed as if its function had died
    // before clearing the marker, reads its group back), the join launches
    // with their outputs through the plan.
    h.register("w", wide()).await;
    let w = h.start("w").await;
    calls(&h);
    for i in 0..=whimbrel_core::plan::JOIN_GROUP_SIZE {
        let name = format!("p{i}");
        let done = h.event(&w, &name, "COMPLETED");
        let evs = [h.event(&w, &name, "RUNNING"), done.clone()];
        deliver_events(&h, &evs, 50 + 10 * i as u64).await;
        if i == 0 {
            owe_settle_again(&h, &w, &name).await;
            deliver_events(&h, &[done], 55).await;
        }
    }
    assert_eq!(h.activity(&w, "join").await.state.as_str(), "QUEUED");
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // A signal for a running signal wait, through the function's entry
    // point: the node completes with its input, and `after` launches.
    h.register("s", approval()).await;
    let s = h.start("s").await;
    assert_eq!(h.activity(&s, "approval").await.state.as_str(), "RUNNING");
    let row = SignalRow::new(&s, "approve", "s1", Some(json!({"ok": true})));
    h.clients
        .put(&h.clients.tables().signal(), &row)
        .await
        .unwrap();
    calls(&h);
    let (resp, sum) = handlers::client_rows(&h.engine, &signal_batch(&h, &[row], 200))
        .await
        .unwrap();
    assert!(
        resp.batch_item_failures.is_empty() && sum.applied == 1,
        "{sum:?}"
    );
    let approval = h.activity(&s, "approval").await;
    assert_eq!(approval.state.as_str(), "COMPLETED");
    assert_eq!(approval.outcome.output, Some(json!({"ok": true})));
    assert_eq!(h.activity(&s, "after").await.state.as_str(), "QUEUED");
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // A signal wait released by a report reads the signals kept for it.
    h.register(
        "rs",
        json!({"activities": [
            {"name": "a", "lambda": "f"},
            {"name": "approval", "signal": "approve", "depends_on": ["a"]}
        ]}),
    )
    .await;
    let rs = h.start("rs").await;
    let row = SignalRow::new(&rs, "approve", "early", Some(json!("early")));
    h.clients
        .put(&h.clients.tables().signal(), &row)
        .await
        .unwrap();
    calls(&h);
    deliver_events(
        &h,
        &[h.event(&rs, "a", "RUNNING"), h.event(&rs, "a", "COMPLETED")],
        300,
    )
    .await;
    let approval = h.activity(&rs, "approval").await;
    assert_eq!(approval.state.as_str(), "COMPLETED");
    assert_eq!(approval.outcome.output, Some(json!("early")));
    assert_eq!(h.workflow(&rs).await.state.as_str(), "COMPLETED");
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // A report that ends the holder of a target's slot: given back, and
    // handed to the root that waited.
    register_limited(&h).await;
    let lim = h.start("lim").await;
    let (held, waiting) = holder(&h, &lim).await;
    calls(&h);
    deliver_events(
        &h,
        &[
            h.event(&lim, held, "RUNNING"),
            h.event(&lim, held, "COMPLETED"),
        ],
        350,
    )
    .await;
    handed_on(&h, &lim, waiting).await;
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // An episodic execution's node ends and a signal (design.md § 10).
    grants_episodic::activity_event_paths(&h).await;
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    made.union(&child_release_calls(&h, 400, false).await)
        .cloned()
        .collect()
}

/// A report (`tick`: the monitor's apply of one in flight) that releases
/// a child node: one requests its child, the other finds its child's
/// request id taken; then the child's end reaches the first.
async fn child_release_calls(h: &Harness, seq: u64, tick: bool) -> Calls {
    register_children(h).await;
    // Reports carry the attempts' tokens: `a`'s launches so far come first.
    let base = h.launcher.launches_of("a").len();
    let (kid, squatted) = (h.start("pc").await, h.start("pc").await);
    squat_child(h, &squatted).await;
    for (i, wf) in [&kid, &squatted].into_iter().enumerate() {
        h.engine
            .apply_event(&h.attempt_event(wf, "a", "RUNNING", base + i))
            .await
            .unwrap();
    }
    calls(h);
    let mut owed = 0;
    for (i, wf) in [&kid, &squatted].into_iter().enumerate() {
        let done = h.attempt_event(wf, "a", "COMPLETED", base + i);
        if !tick {
            deliver_events(h, &[done], seq + i as u64).await;
            continue;
        }
        // Written by a function that died before its settle: the
        // monitor's settle releases the child node.
        owed = common::terminal_write_only(
            h,
            wf,
            "a",
            whimbrel_core::contract::Transition::Completed,
            whimbrel_core::contract::ActivityState::Completed,
            "died",
            Default::default(),
        )
        .await;
    }
    if tick {
        let report = h.tick(owed).await;
        assert_eq!(report.settled, 2, "{report:?}");
    }
    let made = calls(h);
    assert_eq!(kid_state(h, &kid).await, "RUNNING");
    assert_eq!(kid_state(h, &squatted).await, "FAILED");
    made
}

/// The heartbeat monitor's paths: restart a REQUESTED workflow from its
/// request row, apply a report in flight, time out, relaunch, settle.
async fn heartbeat_monitor_calls() -> Calls {
    let h = Harness::new().await;
    h.register("d", diamond()).await;
    // A request the workflow-request function never got to.
    let req: WorkflowRequest = h.request("d", None);
    h.put_request(&req).await;
    let id = whimbrel_core::ids::workflow_exec_id("d", &req.workflow_request_id);
    let now = h.now();
    let stuck = WorkflowExec {
        slots_used: None,
        redrive_count: None,
        redrives: vec![],
        redriving: None,
        decide_on: None,
        decider: None,
        continued_from: None,
        continued_as: None,
        parent: None,
        workflow_exec_id: id.clone(),
        workflow_name: "d".into(),
        state: whimbrel_core::contract::WorkflowState::Requested,
        workflow_request_id: Some(req.workflow_request_id.clone()),
        start_time: whimbrel_core::dates::Timestamp::from_epoch(now).date_list(),
        start_time_epoch: now,
        end_time: None,
        end_time_epoch: None,
        input: None,
        planned_epoch: None,
        execution_timeout_seconds: None,
        activity_count: 0,
        completed_count: 0,
        failed_count: 0,
        cancelled_count: 0,
        error: None,
        source: None,
        due_epoch: Some(now),
        due_shard: Some(whimbrel_core::store::shard_of(&id)),
        start_attempts: 0,
        result: None,
        result_in_activities: None,
    };
    h.store
        .put(&h.store.tables().workflow_exec(), &stuck)
        .await
        .unwrap();
    // A workflow whose `a` ran and wrote COMPLETED the stream never
    // delivered, and whose `c` will time out.
    let wf = h.start("d").await;
    h.engine
        .apply_event(&h.attempt_event(&wf, "a", "RUNNING", 0))
        .await
        .unwrap();
    // Its output is too large for the item: the monitor copies it, and
    // the launches of b and c read the copy back.
    let mut done = h.attempt_event(&wf, "a", "COMPLETED", 0);
    done.output = Some(json!({"pad": "x".repeat(300)}));
    h.put_event(&done).await;
    // A stale attempt's row in flight for `c`: rejected when `c` is due,
    // and the rejection kept.
    let mut stale = h.event(&wf, "c", "COMPLETED");
    stale.attempt = Some(99);
    h.put_event(&stale).await;
    calls(&h);
    let report = h.tick(now + 5).await;
    assert_eq!(report.restarted, 1, "{report:?}");
    let a = h.activity(&wf, "a").await;
    let report = h.tick(a.timing.due_epoch.unwrap() + 200).await;
    assert!(report.reports_applied >= 1, "{report:?}");
    let c = h.activity(&wf, "c").await;
    let report = h.tick(c.timing.due_epoch.unwrap() + 200).await;
    assert!(rejection_kept(&h, &stale).await);
    assert!(report.relaunched + report.timed_out >= 1, "{report:?}");
    let made = calls(&h);
    // A wide join whose last prerequisite's COMPLETED and group release
    // were written by a function that died before the join's release: the
    // tick settles it, reading the group back.
    h.register("w", wide()).await;
    let w = h.start("w").await;
    let last = format!("p{}", whimbrel_core::plan::JOIN_GROUP_SIZE);
    for i in 0..whimbrel_core::plan::JOIN_GROUP_SIZE {
        h.run_to_completion(&w, &format!("p{i}")).await;
    }
    h.engine
        .apply_event(&h.event(&w, &last, "RUNNING"))
        .await
        .unwrap();
    let owed = common::terminal_write_only(
        &h,
        &w,
        &last,
        whimbrel_core::contract::Transition::Completed,
        whimbrel_core::contract::ActivityState::Completed,
        "died",
        Default::default(),
    )
    .await;
    let join_id = whimbrel_core::ids::activity_exec_id(&w, "join");
    let group =
        whimbrel_core::engine::decide::join_release_update(h.store.tables(), &join_id, 1, &last);
    h.store.update(group).await.unwrap();
    calls(&h);
    let report = h.tick(owed).await;
    assert_eq!(report.settled, 1, "{report:?}");
    assert_eq!(h.activity(&w, "join").await.state.as_str(), "QUEUED");
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // A signal wait whose timeout passes with no signal: the monitor reads
    // the signals of its name once more, then times it out.
    h.register("s", approval()).await;
    let s = h.start("s").await;
    let waiting = h.activity(&s, "approval").await;
    assert_eq!(waiting.state.as_str(), "RUNNING");
    calls(&h);
    let report = h.tick(h.deadline(&waiting) + 200).await;
    assert!(report.timed_out >= 1, "{report:?}");
    assert_eq!(h.activity(&s, "approval").await.state.as_str(), "TIMED_OUT");
    assert_eq!(h.workflow(&s).await.state.as_str(), "FAILED");
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // The same, with a signal written before the deadline whose record
    // was not applied: the monitor reads it whole, counts it among those
    // kept, copies it and delivers it (issue 42 B.4).
    let s = h.start("s").await;
    let waiting = h.activity(&s, "approval").await;
    let row = SignalRow::new(&s, "approve", "late-record", Some(json!("yes")));
    (h.clients.put(&h.clients.tables().signal(), &row).await).unwrap();
    calls(&h);
    h.tick(h.deadline(&waiting) + 200).await;
    assert_eq!(h.activity(&s, "approval").await.state.as_str(), "COMPLETED");
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // The holder of a target's slot ended by a function that died before
    // its settle: the tick gives the slot back and hands it on.
    register_limited(&h).await;
    let lim = h.start("lim").await;
    let (held, waiting) = holder(&h, &lim).await;
    h.engine
        .apply_event(&h.event(&lim, held, "RUNNING"))
        .await
        .unwrap();
    let owed = common::terminal_write_only(
        &h,
        &lim,
        held,
        whimbrel_core::contract::Transition::Completed,
        whimbrel_core::contract::ActivityState::Completed,
        "died",
        Default::default(),
    )
    .await;
    calls(&h);
    h.tick(owed).await;
    handed_on(&h, &lim, waiting).await;
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // An episodic execution's timer, fired and decided on.
    grants_episodic::heartbeat_monitor_paths(&h).await;
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    made.union(&child_release_calls(&h, 0, true).await)
        .cloned()
        .collect()
}

/// An activity's own calls through the helper: report, heartbeat, read
/// prerequisites' outputs carried by reference.
async fn activity_calls() -> Calls {
    let h = Harness::new().await;
    h.register(
        "one",
        json!({"activities": [{"name": "a", "lambda": "f", "heartbeat_timeout_seconds": 30}]}),
    )
    .await;
    let wf = h.start("one").await;
    let act = h.attempt("a", 0);
    h.engine
        .apply_event(&h.attempt_event(&wf, "a", "RUNNING", 0))
        .await
        .unwrap();
    calls(&h);
    act.running().await.unwrap();
    assert_eq!(
        act.heartbeat().await.unwrap(),
        whimbrel_core::contract::ActivityState::Running
    );
    // An output too large for the activity item: kept on its event row.
    let output = json!({"ok": "x".repeat(300)});
    let row = act.completed(output.clone()).await.unwrap();
    let made = calls(&h);
    // The engine applies the report (its calls are not the activity's)...
    let done = h
        .event_row(&h.activity(&wf, "a").await.activity_exec_id, &row)
        .await;
    h.engine.apply_event(&done).await.unwrap();
    calls(&h);
    // ...and a join launched with `a`'s output by reference reads it back.
    let mut payload = act.payload.clone();
    payload.prerequisites_by_reference = vec!["a".into()];
    let join = whimbrel_core::activity::Activity::new(payload, h.store.clone(), h.config());
    let outputs = join.prerequisite_outputs().await.unwrap();
    assert_eq!(outputs["a"], output);
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // An item completed before outputs were copied: read from its row.
    completed_before_copies(&h, &wf, "a", &row).await;
    calls(&h);
    assert_eq!(join.prerequisite_outputs().await.unwrap()["a"], output);
    made.union(&calls(&h)).cloned().collect()
}

/// A signal sender's calls (`engine::signals::send_signal`, as `whimbrel
/// signal` runs it): a conditional PutItem of a signal row, and the same
/// id sent again (refused: the first row stands).
async fn signal_sender_calls() -> Calls {
    use whimbrel_core::engine::signals::send_signal;
    let h = Harness::new().await;
    h.register("s", approval()).await;
    let wf = h.start("s").await;
    calls(&h);
    let row = SignalRow::new(&wf, "approve", "s1", Some(json!({"ok": true})));
    assert!(send_signal(&h.store, &row).await.unwrap());
    assert!(!send_signal(&h.store, &row).await.unwrap());
    calls(&h)
}

/// Run `task` as a wide join's payload carries outputs, `a`'s by
/// reference: the worker reads it before its handler runs, which sees
/// `want`, and reports COMPLETED.
async fn by_reference(
    worker: &whimbrel_core::worker::Worker,
    mut task: whimbrel_core::activity::Activity,
    want: &serde_json::Value,
) {
    task.payload.prerequisites.clear();
    task.payload.prerequisites_by_reference = vec!["a".into()];
    let mut stats = whimbrel_core::worker::WorkerStats::default();
    let handler = |p: whimbrel_core::plan::LaunchPayload| async move {
        (p.prerequisites.get("a") == Some(want))
            .then(|| json!("done"))
            .ok_or_else(|| format!("prerequisites {:?}", p.prerequisites))
    };
    worker.run_task(&task, &handler, &mut stats).await;
    assert_eq!((stats.completed, stats.failed), (1, 0));
}

/// A task-list worker's calls (`Worker`, as `whimbrel worker` runs it),
/// and those of the claim function it claims through (an engine over a
/// store of its own, as the function is): claim a task whose input is on
/// an input row, heartbeat, report COMPLETED with an output kept on its
/// event row; then claim its dependent, whose launch payload reads that
/// output back.
async fn worker_calls() -> (Calls, Calls) {
    use whimbrel_core::worker::{Claimer, Worker, WorkerOptions};
    let h = Harness::new().await;
    h.register(
        "tl",
        json!({"activities": [
            {"name": "a", "task_list": "pool", "heartbeat_timeout_seconds": 30,
             "input": {"pad": "x".repeat(300)}},
            {"name": "b", "task_list": "pool", "depends_on": ["a"]},
            {"name": "c", "task_list": "pool", "depends_on": ["a"]}
        ]}),
    )
    .await;
    let wf = h.start("tl").await;
    let engine = whimbrel_core::engine::Engine::with_environment(
        h.store.clone(),
        (),
        h.config(),
        h.clock.clone(),
    );
    let claims = Store::new(
        aws_sdk_dynamodb::Client::new(&common::sdk_config().await),
        h.store.tables().clone(),
    );
    let function = whimbrel_core::engine::Engine::with_environment(
        claims.clone(),
        (),
        h.config(),
        h.clock.clone(),
    );
    let worker = Worker::new(engine, "pool", "w1", WorkerOptions::default())
        .claiming_with(Claimer::Engine(Box::new(function)));
    calls(&h);
    let a = worker.claim().await.unwrap().expect("a claimed");
    assert_eq!(a.payload.input, json!({"pad": "x".repeat(300)}));
    assert_eq!(
        a.heartbeat().await.unwrap(),
        whimbrel_core::contract::ActivityState::Running
    );
    // An output too large for the activity item: kept on its event row.
    let output = json!({"ok": "x".repeat(300)});
    let row = a.completed(output.clone()).await.unwrap();
    let made = calls(&h);
    // The engine applies the report (its calls are not the worker's) and
    // offers `b` to the list.
    let done = h
        .event_row(&h.activity(&wf, "a").await.activity_exec_id, &row)
        .await;
    h.engine.apply_event(&done).await.unwrap();
    calls(&h);
    let b = worker.claim().await.unwrap().expect("b claimed");
    assert_eq!(b.payload.prerequisites["a"], output);
    by_reference(&worker, b, &output).await;
    let made: Calls = made.union(&calls(&h)).cloned().collect();
    // An item completed before outputs were copied: read from its row.
    completed_before_copies(&h, &wf, "a", &row).await;
    calls(&h);
    let c = worker.claim().await.unwrap().expect("c claimed");
    assert_eq!(c.payload.prerequisites["a"], output);
    by_reference(&worker, c, &output).await;
    let made = made.union(&calls(&h)).cloned().collect();
    (made, calls_of(&claims, &h))
}

/// Issue 42 B.3: a signal sender's grant was PutItem on any key of the
/// signal table, scoped only if an account thought to add a condition.
/// `SignalSenderPolicy` now takes its scope from `SignalWorkflows`, a
/// parameter with no default (a deployer says which workflows, `*` for
/// all): the signal row's hash key, the workflow exec id, must start with
/// one of their `name::`.
#[test]
fn the_signal_sender_policy_is_scoped_by_a_required_parameter() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml"))
        .unwrap();
    let t: Y = serde_yaml::from_str(&text).unwrap();
    let param = &t["Parameters"]["SignalWorkflows"];
    assert_eq!(param["Type"].as_str(), Some("CommaDelimitedList"));
    assert!(param.get("Default").is_none(), "required: no default");
    let all = &t["Resources"]["SignalSenderPolicy"]["Properties"]["PolicyDocument"]["Statement"];
    let s = (all.as_sequence().unwrap().iter())
        .find(|s| s["Sid"].as_str() == Some("SendSignals"))
        .expect("SendSignals");
    assert_eq!(s["Action"].as_str(), Some("dynamodb:PutItem"));
    assert_scoped_by_workflow("SignalSenderPolicy", s);
}

/// `statement`'s `dynamodb:LeadingKeys`, evaluated for a parameter list
/// of workflow names, admit exactly the keys that start with one of
/// their `name::` (IAM wildcards in the names).
fn assert_scoped_by_workflow(policy: &str, statement: &Y) {
    let keys = &statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"];
    for (workflows, key, ok) in [
        (&["orders"][..], "orders::4d3f", true),
        (&["orders"][..], "payroll::4d3f", false),
        (&["orders"][..], "ordersx::4d3f", false),
        (&["orders"][..], "orders-4d3f", false),
        (&["pay-*"][..], "pay-eu::4d3f", true),
        (&["*"][..], "anything::4d3f", true),
    ] {
        let patterns = eval_list(keys, workflows);
        assert_eq!(
            patterns.iter().any(|p| like(p, key)),
            ok,
            "{policy} with workflows {workflows:?} ({patterns:?}) and key {key}"
        );
    }
}

/// Evaluates the intrinsics a list-valued policy condition is built with
/// (`!Split`, `!Sub` with a map, `!Join`, `!Ref TaskLists`), `TaskLists`
/// standing for `lists`.
fn eval_list(v: &Y, lists: &[&str]) -> Vec<String> {
    match v {
        Y::Tagged(t) if t.tag == "!Split" => {
            let args = t.value.as_sequence().unwrap();
            let sep = args[0].as_str().unwrap();
            eval_str(&args[1], lists)
                .split(sep)
                .map(String::from)
                .collect()
        }
        Y::Tagged(t)
            if t.tag == "!Ref"
                && matches!(
                    t.value.as_str(),
                    Some("TaskLists" | "ClientWorkflows" | "SignalWorkflows")
                ) =>
        {
            lists.iter().map(|l| l.to_string()).collect()
        }
        Y::Sequence(s) => s.iter().map(|x| eval_str(x, lists)).collect(),
        v => panic!("cannot evaluate {v:?}"),
    }
}

fn eval_str(v: &Y, lists: &[&str]) -> String {
    match v {
        Y::String(s) => s.clone(),
        Y::Tagged(t) if t.tag == "!Join" => {
            let args = t.value.as_sequence().unwrap();
            eval_list(&args[1], lists).join(args[0].as_str().unwrap())
        }
        Y::Tagged(t) if t.tag == "!Sub" => {
            let args = t.value.as_sequence().unwrap();
            let mut text = args[0].as_str().unwrap().to_string();
            for (k, x) in args[1].as_mapping().unwrap() {
                let k = format!("${{{}}}", k.as_str().unwrap());
                text = text.replace(&k, &eval_str(x, lists));
            }
            text
        }
        v => panic!("cannot evaluate {v:?}"),
    }
}

/// IAM's `StringLike`: `*` any characters, `?` one.
fn like(pattern: &str, s: &str) -> bool {
    match pattern.chars().next() {
        None => s.is_empty(),
        Some('*') => (0..=s.len())
            .filter(|i| s.is_char_boundary(*i))
            .any(|i| like(&pattern[1..], &s[i..])),
        Some(c) => {
            let mut rest = s.chars();
            match rest.next() {
                Some(d) if c == '?' || c == d => like(&pattern[c.len_utf8()..], rest.as_str()),
                _ => false,
            }
        }
    }
}

/// The claim function serves only the `TaskLists`: its
/// `WHIMBREL_CLAIM_TASK_LISTS` is the parameter joined with commas, and
/// [`ClaimScope`] of that value allows a list exactly when IAM's
/// `StringLike` would match it against one of the entries.
fn check_task_list_scope(template: &Y, problems: &mut Vec<String>) {
    use whimbrel_core::worker::ClaimScope;
    let env = &template["Resources"]["TaskClaimFunction"]["Properties"]["Environment"]["Variables"]
        ["WHIMBREL_CLAIM_TASK_LISTS"];
    let joined = match env {
        Y::Tagged(t) if t.tag == "!Join" => t.value.clone(),
        other => panic!("WHIMBREL_CLAIM_TASK_LISTS is not !Join: {other:?}"),
    };
    assert_eq!(joined[0].as_str(), Some(","));
    assert!(
        matches!(&joined[1], Y::Tagged(t) if t.tag == "!Ref" && t.value.as_str() == Some("TaskLists")),
        "WHIMBREL_CLAIM_TASK_LISTS joins {:?}, not TaskLists",
        joined[1]
    );
    assert_eq!(
        template["Parameters"]["TaskLists"]["Default"].as_str(),
        Some("*")
    );
    let cases: [(&[&str], &str, bool); 7] = [
        (&["pool"], "pool", true),
        (&["pool"], "pool2", false),
        (&["pool"], "other", false),
        (&["images", "pool"], "pool", true),
        (&["img-*"], "img-small", true),
        (&["img-*"], "im", false),
        (&["*"], "anything.at_all-1", true),
    ];
    for (lists, list, allowed) in cases {
        let scope = ClaimScope::parse(&lists.join(","));
        let iam = lists.iter().any(|p| like(p, list));
        if scope.allows(list) != allowed || iam != allowed {
            problems.push(format!(
                "TaskLists={lists:?}: the claim function {} {list} (IAM StringLike: {iam})",
                if allowed { "refuses" } else { "allows" }
            ));
        }
    }
}

/// Issue 42 B.1: a worker could rewrite any activity item (its role held
/// an unconditioned UpdateItem on `activity_exec`, and its claim set the
/// token hash), so it could forge any task's report. Now it claims through
/// the engine's claim function: its policy is the activity role's,
/// statement for statement, plus the invoke of that function alone; it
/// neither queries the task-list index nor writes an attribute beyond the
/// heartbeat's.
#[test]
fn a_worker_writes_no_activity_item_beyond_its_heartbeat() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml"))
        .unwrap();
    let t: Y = serde_yaml::from_str(&text).unwrap();
    let statements = |policy: &str| -> Vec<Y> {
        t["Resources"][policy]["Properties"]["PolicyDocument"]["Statement"]
            .as_sequence()
            .unwrap()
            .clone()
    };
    let worker = statements("TaskListWorkerPolicy");
    let (invoke, rest): (Vec<Y>, Vec<Y>) = worker
        .into_iter()
        .partition(|s| s["Action"].as_str() == Some("lambda:InvokeFunction"));
    assert_eq!(rest, statements("ActivityPolicy"));
    assert_eq!(invoke.len(), 1, "one invoke statement");
    assert!(
        matches!(&invoke[0]["Resource"], Y::Tagged(r) if r.tag == "!GetAtt" && r.value.as_str() == Some("TaskClaimFunction.Arn")),
        "the worker may invoke the claim function only: {:?}",
        invoke[0]["Resource"]
    );
    assert_eq!(
        attributes(&Y::Sequence(rest), "HeartbeatWrite"),
        whimbrel_core::activity::HEARTBEAT_WRITES.map(String::from)
    );
}

/// The `dynamodb:Attributes` list of the statement `sid` in `statements`.
fn attributes(statements: &Y, sid: &str) -> Vec<String> {
    statements
        .as_sequence()
        .unwrap()
        .iter()
        .find(|s| s["Sid"].as_str() == Some(sid))
        .unwrap_or_else(|| panic!("no statement {sid}"))["Condition"]["ForAllValues:StringEquals"]
        ["dynamodb:Attributes"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// A role's or a SAM function's policy statements as (action, table,
/// index) for DynamoDB table and index resources, and the other actions.
fn granted(
    template: &Y,
    tables: &BTreeMap<String, String>,
    statements: &Y,
) -> (Calls, BTreeSet<String>) {
    let mut dynamo = Calls::new();
    let mut other = BTreeSet::new();
    let list = |v: &Y| -> Vec<Y> {
        match v {
            Y::Sequence(s) => s.clone(),
            v => vec![v.clone()],
        }
    };
    for st in list(statements) {
        // `!If [Condition, statement, !Ref AWS::NoValue]`: the statement
        // as granted when the condition holds.
        let st = match &st {
            Y::Tagged(t) if t.tag == "!If" => t.value[1].clone(),
            st => st.clone(),
        };
        let actions: Vec<String> = list(&st["Action"])
            .iter()
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        for r in list(&st["Resource"]) {
            // (logical table, index) of a table or index ARN; None for any
            // other resource (streams, functions, queues, "*").
            let target: Option<(String, Option<String>)> = match &r {
                Y::Tagged(t) if t.tag == "!GetAtt" => {
                    let s = t.value.as_str().unwrap_or_default();
                    s.strip_suffix(".Arn").map(|l| (l.to_string(), None))
                }
                Y::Tagged(t) if t.tag == "!Sub" => {
                    let s = t.value.as_str().unwrap_or_default();
                    s.strip_prefix("${")
                        .and_then(|s| s.split_once(".Arn}/index/"))
                        .map(|(l, i)| (l.to_string(), Some(i.to_string())))
                }
                _ => None,
            };
            for a in &actions {
                match &target {
                    Some((logical, index)) if a.starts_with("dynamodb:") => {
                        let table = tables.get(logical).unwrap_or_else(|| panic!("{logical}"));
                        dynamo.insert((a.clone(), table.clone(), index.clone()));
                    }
                    _ => drop(other.insert(a.clone())),
                }
            }
        }
    }
    let _ = template;
    (dynamo, other)
}

#[tokio::test]
async fn each_function_is_granted_exactly_the_calls_its_code_makes() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml"))
        .unwrap();
    let t: Y = serde_yaml::from_str(&text).unwrap();
    let resources = &t["Resources"];
    let mut tables = BTreeMap::new();
    for (k, v) in resources.as_mapping().unwrap() {
        if v["Type"].as_str() == Some("AWS::DynamoDB::Table") {
            if let Y::Tagged(name) = &v["Properties"]["TableName"] {
                let s = name.value.as_str().unwrap();
                tables.insert(
                    k.as_str().unwrap().to_string(),
                    s.trim_start_matches("${TablePrefix}").to_string(),
                );
            }
        }
    }
    let role = |name: &str| {
        let mut all = Vec::new();
        // Customer managed policies of the stack (`!Ref <Policy>`).
        for arn in resources[name]["Properties"]["ManagedPolicyArns"]
            .as_sequence()
            .unwrap()
        {
            if let Y::Tagged(t) = arn {
                if t.tag == "!Ref" {
                    let policy = &resources[t.value.as_str().unwrap()]["Properties"];
                    all.extend(
                        policy["PolicyDocument"]["Statement"]
                            .as_sequence()
                            .unwrap()
                            .clone(),
                    );
                }
            }
        }
        for p in resources[name]["Properties"]["Policies"]
            .as_sequence()
            .unwrap()
        {
            all.extend(
                p["PolicyDocument"]["Statement"]
                    .as_sequence()
                    .unwrap()
                    .clone(),
            );
        }
        Y::Sequence(all)
    };
    let sam = |name: &str| {
        let mut all = Vec::new();
        for p in resources[name]["Properties"]["Policies"]
            .as_sequence()
            .unwrap()
        {
            all.extend(p["Statement"].as_sequence().unwrap().clone());
        }
        Y::Sequence(all)
    };
    let redrive_grants = grants::stream_redrive();
    // Each role's paths on tables of their own, all at once (DynamoDB
    // Local answers one while it works on another).
    let (request, event, redrive, monitor, activity, (worker, claim), signaller) = tokio::join!(
        workflow_request_calls(),
        activity_event_calls(),
        stream_redrive_calls(),
        heartbeat_monitor_calls(),
        activity_calls(),
        worker_calls(),
        signal_sender_calls(),
    );
    let cases = [
        (
            "whimbrel-workflow-request",
            role("WorkflowRequestRole"),
            grants::WORKFLOW_REQUEST,
            request,
        ),
        (
            "whimbrel-activity-event",
            role("ActivityEventRole"),
            grants::ACTIVITY_EVENT,
            event,
        ),
        (
            // It applies records through the handlers of both streams.
            "whimbrel-stream-redrive",
            role("StreamRedriveRole"),
            &redrive_grants[..],
            redrive,
        ),
        (
            "whimbrel-heartbeat-monitor",
            sam("HeartbeatMonitorFunction"),
            grants::HEARTBEAT_MONITOR,
            monitor,
        ),
        (
            "an activity (ActivityPolicy)",
            resources["ActivityPolicy"]["Properties"]["PolicyDocument"]["Statement"].clone(),
            grants::ACTIVITY,
            activity,
        ),
        (
            "a task-list worker (TaskListWorkerPolicy)",
            resources["TaskListWorkerPolicy"]["Properties"]["PolicyDocument"]["Statement"].clone(),
            grants::WORKER,
            worker,
        ),
        (
            "whimbrel-task-claim",
            sam("TaskClaimFunction"),
            grants::TASK_CLAIM,
            claim,
        ),
        (
            "a signal sender (SignalSenderPolicy)",
            resources["SignalSenderPolicy"]["Properties"]["PolicyDocument"]["Statement"].clone(),
            grants::SIGNAL_SENDER,
            signaller,
        ),
    ];
    // The activity's heartbeat touches only the attributes its role allows.
    let policy = &resources["ActivityPolicy"]["Properties"]["PolicyDocument"]["Statement"];
    let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        attributes(policy, "HeartbeatRead"),
        own(&whimbrel_core::activity::HEARTBEAT_READS)
    );
    assert_eq!(
        attributes(policy, "HeartbeatWrite"),
        own(&whimbrel_core::activity::HEARTBEAT_WRITES)
    );
    assert_eq!(
        attributes(policy, "ReadPrerequisiteOutputs"),
        own(&whimbrel_core::activity::PREREQUISITE_READS)
    );
    assert_eq!(
        attributes(policy, "ReadOutputRows"),
        own(&whimbrel_core::engine::payloads::OUTPUT_ROW_READS)
    );
    assert_eq!(
        attributes(policy, "ReadOutputCopies"),
        own(&whimbrel_core::engine::payloads::OUTPUT_COPY_READS)
    );
    // The engine's write to an event row is its rejection mark alone.
    for statements in [role("ActivityEventRole"), sam("HeartbeatMonitorFunction")] {
        assert_eq!(
            attributes(&statements, "KeepRejections"),
            own(&whimbrel_core::engine::decide::REJECTION_WRITES)
        );
    }
    let platform: BTreeSet<String> = grants::PLATFORM
        .iter()
        .map(|(_, a)| a.to_string())
        .collect();
    let kms_actions: BTreeSet<String> = grants::PLATFORM
        .iter()
        .filter(|(scope, _)| *scope == "kms")
        .map(|(_, a)| a.to_string())
        .collect();
    let mut problems = Vec::new();
    for (function, statements, list, made) in cases {
        let list = listed(list);
        for c in made.difference(&list) {
            problems.push(format!(
                "{function}: the code calls {c:?}, which src/grants.rs does not list"
            ));
        }
        for c in list.difference(&made) {
            problems.push(format!(
                "{function}: src/grants.rs lists {c:?}, which no path of the test called"
            ));
        }
        let (dynamo, other) = granted(&t, &tables, &statements);
        for c in list.difference(&dynamo) {
            problems.push(format!(
                "{function}: {c:?} is listed but template.yaml does not grant it"
            ));
        }
        for c in dynamo.difference(&list) {
            problems.push(format!(
                "{function}: template.yaml grants {c:?}, which the code never calls"
            ));
        }
        for a in other.difference(&platform) {
            problems.push(format!("{function}: template.yaml grants {a}, which neither the code nor the platform needs"));
        }
        // Each touches tables: with KmsKeyArn it must be able to use the key.
        let kms: BTreeSet<String> = other
            .iter()
            .filter(|a| a.starts_with("kms:"))
            .cloned()
            .collect();
        if kms != kms_actions {
            problems.push(format!(
                "{function}: template.yaml grants {kms:?} on the table key, not {kms_actions:?}"
            ));
        }
    }
    check_task_list_scope(&t, &mut problems);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Issue 42 B.6: the engine's own functions are never a launch target
/// (`WHIMBREL_ENGINE_FUNCTIONS`, `targets.rs`). Every function of the
/// template that is not a launch target (no `FunctionName` under
/// `LaunchTargetPrefix`) must be on that list, as the name CloudFormation
/// gives it (`{stack}-{LogicalId}-{suffix}`); the redrive function was not.
#[test]
fn every_engine_function_of_the_template_is_excluded_from_the_targets() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml"))
        .unwrap();
    let t: Y = serde_yaml::from_str(&text).unwrap();
    let Y::Tagged(list) =
        &t["Globals"]["Function"]["Environment"]["Variables"]["WHIMBREL_ENGINE_FUNCTIONS"]
    else {
        panic!("WHIMBREL_ENGINE_FUNCTIONS is not a !Sub");
    };
    let patterns: Vec<String> = (list.value.as_str().unwrap().split(','))
        .map(|p| p.replace("${AWS::StackName}", "stack"))
        .collect();
    let mut engine = vec![];
    for (k, v) in t["Resources"].as_mapping().unwrap() {
        let target = match &v["Properties"]["FunctionName"] {
            Y::Tagged(n) => n.value.as_str().unwrap().contains("${LaunchTargetPrefix}"),
            _ => false,
        };
        if v["Type"].as_str() == Some("AWS::Serverless::Function") && !target {
            engine.push(k.as_str().unwrap().to_string());
        }
    }
    assert!(engine.len() >= 4, "{engine:?}");
    for logical in engine {
        let deployed = format!("stack-{logical}-AB12CD34");
        assert!(
            patterns.iter().any(|p| like(p, &deployed)),
            "{logical} ({deployed}) may be named as a launch target: {patterns:?}"
        );
    }
}

/// Issue 42 B.5: the template ships a client policy scoped to the
/// `ClientWorkflows` (the request key's `name::` prefix, which the engine
/// requires to be the row's workflow_name) that writes only a start's
/// attributes, and an operator policy of its own for cancels and
/// redrives; neither may write a child's `parent` link, which only the
/// engine writes.
#[test]
fn the_client_policies_scope_starts_and_keep_cancels_apart() {
    use whimbrel_core::model::WorkflowRequest;
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml"))
        .unwrap();
    let t: Y = serde_yaml::from_str(&text).unwrap();
    let statement = |policy: &str, sid: &str| -> Y {
        let all = &t["Resources"][policy]["Properties"]["PolicyDocument"]["Statement"];
        (all.as_sequence().unwrap().iter())
            .find(|s| s["Sid"].as_str() == Some(sid))
            .unwrap_or_else(|| panic!("{policy}: statement {sid}"))
            .clone()
    };
    let start = WorkflowRequest {
        workflow_request_id: "orders::4d3f6f3e-5b6a-4c1e-9a53-2f0c8d1e7b10".into(),
        workflow_name: "orders".into(),
        when: Some(whimbrel_core::dates::DateList(vec![
            2026.0, 12.0, 6.0, 0.0, 0.0, 0.0,
        ])),
        when_epoch: Some(1.0),
        source: Some("client".into()),
        manual: None,
        input: Some(serde_json::json!({"n": 1})),
        expires_at_epoch: Some(2),
        cancel_workflow_exec_id: None,
        reason: None,
        parent: None,
        redrive_workflow_exec_id: None,
    };
    let cancel = WorkflowRequest {
        cancel_workflow_exec_id: Some("orders::x".into()),
        reason: Some("operator".into()),
        ..start.clone()
    };
    let redrive = WorkflowRequest {
        redrive_workflow_exec_id: Some("orders::x".into()),
        ..start.clone()
    };
    let child = WorkflowRequest {
        parent: Some(
            serde_json::from_value(serde_json::json!({"workflow_exec_id": "p::1",
            "workflow_name": "p", "activity_exec_id": "n::p::1", "depth": 1}))
            .unwrap(),
        ),
        ..start.clone()
    };
    let names = |r: &WorkflowRequest| -> Vec<String> {
        let item: serde_dynamo::Item = serde_dynamo::to_item(r).unwrap();
        item.keys().cloned().collect()
    };
    for (policy, sid, allowed) in [
        ("WorkflowClientPolicy", "StartWorkflows", vec![&start]),
        (
            "WorkflowOperatorPolicy",
            "OperateWorkflows",
            vec![&start, &cancel, &redrive],
        ),
    ] {
        let s = statement(policy, sid);
        assert_eq!(s["Action"].as_str(), Some("dynamodb:PutItem"), "{policy}");
        let attrs: Vec<String> = (s["Condition"]["ForAllValues:StringEquals"]
            ["dynamodb:Attributes"])
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        for row in [&start, &cancel, &redrive, &child] {
            let fits = names(row).iter().all(|n| attrs.contains(n));
            assert_eq!(fits, allowed.contains(&row), "{policy}: {:?}", names(row));
        }
        assert_scoped_by_workflow(policy, &s);
    }
    assert_eq!(
        t["Parameters"]["ClientWorkflows"]["Default"].as_str(),
        Some("*")
    );
}
