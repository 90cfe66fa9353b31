//! Child workflows (design.md § 9.5), against DynamoDB Local: a `workflow`
//! node requests its child once (a derived id), ends as the child ends
//! (COMPLETED with its result, FAILED with its reason), and a failing
//! parent cancels its other children unless they are abandoned; a child
//! whose end did not reach its parent (a writer died) is told by the
//! monitor; nesting deeper than the limit fails every ancestor.

use crate::common;

use crate::common::{stream_event, Harness};
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::engine::Engine;
use whimbrel_core::handlers;
use whimbrel_core::ids;
use whimbrel_core::model::{ActivityExec, ParentLink, WorkflowRequest};
use whimbrel_core::plan::MAX_CHILD_DEPTH;

/// `parent`: prepare, then two children (`thumbs`, cancelled with the
/// parent; `audit`, abandoned), then publish.
fn parent() -> Value {
    json!({"activities": [
        {"name": "prepare", "lambda": "f"},
        {"name": "thumbs", "workflow": "thumbs", "input": {"n": 3},
         "depends_on": ["prepare"]},
        {"name": "audit", "workflow": "audit", "parent_close": "abandon",
         "depends_on": ["prepare"]},
        {"name": "publish", "lambda": "f", "depends_on": ["thumbs", "audit"]},
    ]})
}

fn one(lambda: &str) -> Value {
    json!({"activities": [{"name": "work", "lambda": lambda}]})
}

/// The request row the node `node` of `wf` put for its child.
async fn child_request(h: &Harness, node: &ActivityExec) -> Option<WorkflowRequest> {
    let (id, _) = node.child_ids().expect("a child node");
    let key = std::collections::HashMap::from([
        ("workflow_request_id".to_string(), common::sv(&id)),
        (
            "workflow_name".to_string(),
            common::sv(&node.runner.runs.child().unwrap().workflow_name),
        ),
    ]);
    h.store
        .get(&h.store.tables().workflow_request(), key)
        .await
        .unwrap()
}

/// Deliver the request rows as the workflow-request function's stream
/// batch would; returns (applied, rejected, retried).
async fn deliver_requests(h: &Harness, rows: &[WorkflowRequest], seq: u64) -> (u64, u64, u64) {
    let table = h.store.tables().workflow_request();
    let event = stream_event(&table, &["workflow_request_id", "workflow_name"], rows, seq);
    let (resp, sum) = handlers::workflow_requests(&h.engine, &event)
        .await
        .unwrap();
    assert_eq!(common::failures(&resp).len() as u64, sum.retried);
    (sum.applied, sum.rejected, sum.retried)
}

/// Start the children of `wf`'s nodes `names` from their request rows;
/// returns their exec ids.
async fn start_children(h: &Harness, wf: &str, names: &[&str], seq: u64) -> Vec<String> {
    let mut rows = vec![];
    for n in names {
        let node = h.activity(wf, n).await;
        assert_eq!(node.state, ActivityState::Running, "{n}");
        rows.push(child_request(h, &node).await.expect("child requested"));
    }
    deliver_requests(h, &rows, seq).await;
    rows.iter()
        .map(|r| ids::workflow_exec_id(&r.workflow_name, &r.workflow_request_id))
        .collect()
}

#[tokio::test]
async fn a_child_node_starts_its_child_once_and_completes_with_its_result() {
    let h = Harness::new().await;
    h.register("parent", parent()).await;
    h.register("thumbs", one("thumbnailer")).await;
    h.register("audit", one("auditor")).await;
    let wf = h.start("parent").await;
    h.run_to_completion(&wf, "prepare").await;
    let node = h.activity(&wf, "thumbs").await;
    let row = child_request(&h, &node).await.expect("requested");
    assert_eq!(row.input, Some(json!({"n": 3})));
    let link = row.parent.clone().expect("parent link");
    assert_eq!(
        (link.workflow_exec_id.as_str(), link.depth),
        (wf.as_str(), 1)
    );
    let kids = start_children(&h, &wf, &["thumbs", "audit"], 1).await;
    // The same rows again (a redelivery) start nothing more.
    let rows = [row.clone()];
    deliver_requests(&h, &rows, 3).await;
    let child = h.workflow(&kids[0]).await;
    assert_eq!(child.parent, Some(link));
    assert_eq!(child.state, WorkflowState::Running);
    assert_eq!(h.launcher.launches_of("work").len(), 2);
    h.run_to_completion(&kids[0], "work").await;
    assert_eq!(h.workflow(&kids[0]).await.state, WorkflowState::Completed);
    assert_eq!(h.workflow(&kids[0]).await.due_epoch, None, "told");
    let done = h.activity(&wf, "thumbs").await;
    assert_eq!(done.state, ActivityState::Completed);
    let result = h.workflow(&kids[0]).await.result.expect("result");
    assert_eq!(done.outcome.output, Some(result));
    h.run_to_completion(&kids[1], "work").await;
    assert_eq!(
        h.activity(&wf, "audit").await.state,
        ActivityState::Completed
    );
    assert_eq!(h.launcher.launches_of("publish").len(), 1);
    h.run_to_completion(&wf, "publish").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

#[tokio::test]
async fn a_failed_child_fails_its_node_and_the_parent_cancels_its_other_children() {
    let h = Harness::new().await;
    h.register("parent", parent()).await;
    h.register("thumbs", one("thumbnailer")).await;
    h.register("audit", one("auditor")).await;
    let wf = h.start("parent").await;
    h.run_to_completion(&wf, "prepare").await;
    let kids = start_children(&h, &wf, &["thumbs", "audit"], 1).await;
    // `audit`'s child fails: its node FAILS with the child's reason.
    let (run, fail) = (
        h.event(&kids[1], "work", "RUNNING"),
        h.event(&kids[1], "work", "FAILED"),
    );
    h.engine.apply_event(&run).await.unwrap();
    h.engine.apply_event(&fail).await.unwrap();
    let audit = h.activity(&wf, "audit").await;
    assert_eq!(audit.state, ActivityState::Failed);
    let why = audit.outcome.error.clone().unwrap_or_default();
    assert!(
        why.contains(&format!("child workflow {} ended FAILED", kids[1])),
        "{why}"
    );
    // The other child node is cancelled at once, and cancels its child
    // with a cancel request row.
    let thumbs = h.activity(&wf, "thumbs").await;
    assert_eq!(thumbs.state, ActivityState::Cancelled);
    let cancel_id = ids::child_cancel_request_id("thumbs", &kids[0]);
    let key = std::collections::HashMap::from([
        ("workflow_request_id".to_string(), common::sv(&cancel_id)),
        ("workflow_name".to_string(), common::sv("thumbs")),
    ]);
    let cancel: WorkflowRequest = h
        .store
        .get(&h.store.tables().workflow_request(), key)
        .await
        .unwrap()
        .expect("cancel request");
    assert_eq!(
        cancel.cancel_workflow_exec_id.as_deref(),
        Some(kids[0].as_str())
    );
    deliver_requests(&h, &[cancel], 5).await;
    let work = h.activity(&kids[0], "work").await;
    assert!(
        matches!(
            work.state,
            ActivityState::Cancelled | ActivityState::CancelledRunning
        ),
        "{:?}",
        work.state
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
}

#[tokio::test]
async fn an_abandoned_child_runs_on_and_a_lost_report_is_told_by_the_monitor() {
    let h = Harness::new().await;
    h.register("parent", parent()).await;
    h.register("thumbs", one("thumbnailer")).await;
    h.register("audit", one("auditor")).await;
    let wf = h.start("parent").await;
    h.run_to_completion(&wf, "prepare").await;
    let kids = start_children(&h, &wf, &["thumbs", "audit"], 1).await;
    let (run, fail) = (
        h.event(&kids[0], "work", "RUNNING"),
        h.event(&kids[0], "work", "FAILED"),
    );
    h.engine.apply_event(&run).await.unwrap();
    h.engine.apply_event(&fail).await.unwrap();
    assert_eq!(h.activity(&wf, "thumbs").await.state, ActivityState::Failed);
    // `audit`'s node is cancelled with the failing parent, but its child
    // is abandoned: it runs on, and its end reaches no one.
    assert_eq!(
        h.activity(&wf, "audit").await.state,
        ActivityState::Cancelled
    );
    assert_eq!(h.workflow(&kids[1]).await.state, WorkflowState::Running);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    h.run_to_completion(&kids[1], "work").await;
    assert_eq!(h.workflow(&kids[1]).await.state, WorkflowState::Completed);
    assert_eq!(
        h.workflow(&kids[1]).await.due_epoch,
        None,
        "told no one, once"
    );
    assert_eq!(
        h.activity(&wf, "audit").await.state,
        ActivityState::Cancelled
    );

    // A child whose finisher died before it told its parent: its end
    // keeps its due marker, and the monitor tells it.
    let wf2 = h.start("parent").await;
    h.run_to_completion(&wf2, "prepare").await;
    let kids2 = start_children(&h, &wf2, &["thumbs", "audit"], 7).await;
    h.run_to_completion(&kids2[0], "work").await;
    assert_eq!(
        h.activity(&wf2, "thumbs").await.state,
        ActivityState::Completed
    );
    // `audit`'s child ended FAILED by a writer that died before it told
    // its parent: the child keeps its due marker.
    let node = h.activity(&wf2, "audit").await;
    let child = h.workflow(&kids2[1]).await;
    h.engine
        .store()
        .put(
            &h.store.tables().workflow_exec(),
            &whimbrel_core::model::WorkflowExec {
                state: WorkflowState::Failed,
                error: Some("lost".into()),
                due_epoch: Some(h.now()),
                due_shard: Some(whimbrel_core::keys::shard_of(&kids2[1])),
                ..child
            },
        )
        .await
        .unwrap();
    assert_eq!(node.state, ActivityState::Running);
    h.tick(h.now() + 1).await;
    let audit = h.activity(&wf2, "audit").await;
    assert_eq!(audit.state, ActivityState::Failed, "told by the monitor");
    assert!(audit.outcome.error.unwrap_or_default().contains("lost"));
    assert_eq!(h.workflow(&kids2[1]).await.due_epoch, None);
}

#[tokio::test]
async fn nesting_deeper_than_the_limit_fails_every_ancestor() {
    let h = Harness::new().await;
    // A workflow that starts itself.
    h.register(
        "again",
        json!({"activities": [{"name": "deeper", "workflow": "again"}]}),
    )
    .await;
    let top = h.start("again").await;
    let mut chain = vec![top.clone()];
    for depth in 1..=MAX_CHILD_DEPTH + 1 {
        let wf = chain.last().unwrap().clone();
        let kid = start_children(&h, &wf, &["deeper"], u64::from(depth) * 10).await;
        chain.push(kid[0].clone());
    }
    let deepest = h.workflow(chain.last().unwrap()).await;
    assert_eq!(deepest.state, WorkflowState::Failed);
    let why = deepest.error.unwrap_or_default();
    assert!(why.contains("depth 9 exceeds the limit of 8"), "{why}");
    for id in &chain {
        let wf = h.workflow(id).await;
        assert_eq!(wf.state, WorkflowState::Failed, "{id}");
    }
    assert!(h
        .workflow(&top)
        .await
        .error
        .unwrap_or_default()
        .contains("child workflow"));
}

#[tokio::test]
async fn a_child_whose_node_was_cancelled_before_it_started_never_runs() {
    let h = Harness::new().await;
    h.register("parent", parent()).await;
    h.register("thumbs", one("thumbnailer")).await;
    h.register("audit", one("auditor")).await;
    let wf = h.start("parent").await;
    h.run_to_completion(&wf, "prepare").await;
    let rows = [
        child_request(&h, &h.activity(&wf, "thumbs").await)
            .await
            .unwrap(),
        child_request(&h, &h.activity(&wf, "audit").await)
            .await
            .unwrap(),
    ];
    // The parent is cancelled before either child started.
    let cancel = WorkflowRequest {
        cancel_workflow_exec_id: Some(wf.clone()),
        ..h.request("parent", None)
    };
    h.engine.cancel_workflow(&cancel).await.unwrap();
    assert_eq!(
        h.activity(&wf, "thumbs").await.state,
        ActivityState::Cancelled
    );
    // The node's cancel request comes first: refused, no child exists.
    let kid = ids::workflow_exec_id("thumbs", &rows[0].workflow_request_id);
    let cancel_id = ids::child_cancel_request_id("thumbs", &kid);
    let key = std::collections::HashMap::from([
        ("workflow_request_id".to_string(), common::sv(&cancel_id)),
        ("workflow_name".to_string(), common::sv("thumbs")),
    ]);
    let cancel_row: WorkflowRequest = h
        .store
        .get(&h.store.tables().workflow_request(), key)
        .await
        .unwrap()
        .expect("the node's cancel request");
    assert_eq!(deliver_requests(&h, &[cancel_row], 1).await, (0, 1, 0));
    // Then the child's request: it ends CANCELLED at once, nothing runs;
    // the abandoned one runs on.
    deliver_requests(&h, &rows, 2).await;
    let child = h.workflow(&kid).await;
    assert_eq!(child.state, WorkflowState::Cancelled);
    assert!(child
        .error
        .unwrap_or_default()
        .contains("ended CANCELLED before it started"));
    let kept = ids::workflow_exec_id("audit", &rows[1].workflow_request_id);
    assert_eq!(h.workflow(&kept).await.state, WorkflowState::Running);
    assert_eq!(
        h.launcher.launches_of("work").len(),
        1,
        "only the abandoned child's"
    );
}

/// `solo` (one node, a `thumbs` child) started, and its child's only
/// activity FAILED: (the parent's exec id, the child's).
async fn solo_whose_child_failed(h: &Harness) -> (String, String) {
    h.register(
        "solo",
        json!({"activities": [{"name": "thumbs", "workflow": "thumbs", "input": {"n": 1}}]}),
    )
    .await;
    h.register("thumbs", one("thumbnailer")).await;
    let wf = h.start("solo").await;
    let kid = start_children(h, &wf, &["thumbs"], 1).await.remove(0);
    for t in ["RUNNING", "FAILED"] {
        h.engine
            .apply_event(&h.event(&kid, "work", t))
            .await
            .unwrap();
    }
    (wf, kid)
}

#[tokio::test]
async fn a_redriven_parent_starts_a_new_child_for_a_node_whose_child_failed() {
    let h = Harness::new().await;
    let (wf, old) = solo_whose_child_failed(&h).await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    let redrive = WorkflowRequest {
        redrive_workflow_exec_id: Some(wf.clone()),
        ..h.request("solo", None)
    };
    h.engine.redrive_workflow(&redrive).await.unwrap();
    // The node runs again and names a new child: the old one ended.
    let node = h.activity(&wf, "thumbs").await;
    assert_eq!(node.state, ActivityState::Running);
    let new = start_children(&h, &wf, &["thumbs"], 3).await.remove(0);
    assert_ne!(new, old, "the redriven node took its old child");
    assert_eq!(h.workflow(&new).await.state, WorkflowState::Running);
    let parent = h.workflow(&new).await.parent.expect("linked");
    assert_eq!(parent.workflow_exec_id, wf);
    h.run_to_completion(&new, "work").await;
    assert_eq!(
        h.activity(&wf, "thumbs").await.state,
        ActivityState::Completed
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    // The old child stays FAILED and told no one again.
    assert_eq!(h.workflow(&old).await.state, WorkflowState::Failed);
}

/// A child's redrive waits while its end still owes its parent the report
/// (its due marker stays until the node is told): a redrive applied in
/// between ran the child again, and the report, decided on the end it had
/// read, then failed the node while the child ran (torture seed 204646 at
/// d8d79bc: `a1: FAILED while its child is Some(Running)`). Once the
/// monitor has told the parent, the redrive is applied.
#[tokio::test]
async fn a_childs_redrive_waits_until_its_end_has_reached_its_parent() {
    use whimbrel_core::engine::EngineError;
    let h = Harness::new().await;
    let (wf, kid) = solo_whose_child_failed(&h).await;
    // As the child's end leaves it before its report has run (the
    // writer died between the two): FAILED, its due marker owed.
    let child = h.workflow(&kid).await;
    assert_eq!(child.state, WorkflowState::Failed);
    let due = h.now();
    let key = whimbrel_core::keys::workflow_key(&kid, "thumbs");
    let owed = whimbrel_core::store::UpdateRequest::new(h.store.tables().workflow_exec(), key)
        .set("due_epoch", whimbrel_core::store::n(due as u64))
        .set(
            "due_shard",
            whimbrel_core::store::n(u64::from(whimbrel_core::keys::shard_of(&kid))),
        );
    h.store.update(owed).await.unwrap();
    let redrive = WorkflowRequest {
        redrive_workflow_exec_id: Some(kid.clone()),
        ..h.request("thumbs", None)
    };
    match h.engine.redrive_workflow(&redrive).await {
        Err(EngineError::Retry(why)) => assert!(why.contains("its parent"), "{why}"),
        other => panic!("redriven while its end owes its parent: {other:?}"),
    }
    assert_eq!(h.workflow(&kid).await.state, WorkflowState::Failed);
    // The monitor tells the parent (the node had its end already) and the
    // marker goes; the redrive then runs the child again.
    h.tick(due).await;
    assert_eq!(h.workflow(&kid).await.due_epoch, None);
    h.engine.redrive_workflow(&redrive).await.unwrap();
    assert_eq!(h.workflow(&kid).await.state, WorkflowState::Running);
    assert_eq!(h.activity(&wf, "thumbs").await.state, ActivityState::Failed);
}

/// docs/limits.md § 5: a child's input runs at 64,000 bytes and fails
/// its child (and so its node and parent) at 64,001; a child's result
/// becomes its node's output at 100,000 bytes and fails the node with the
/// reason at 100,001. Each run to its end on DynamoDB.
#[tokio::test]
async fn a_childs_input_and_result_run_at_their_limits_and_fail_just_past_them() {
    let h = Harness::new().await;
    h.register("kid", one("kid-work")).await;
    // `{"p":"…"}` is 8 bytes and its text.
    let sized = |bytes: usize| json!({"p": "x".repeat(bytes - 8)});
    for (name, input_bytes) in [("at", 64_000), ("past", 64_001)] {
        let node = json!({"name": "child", "workflow": "kid", "input": sized(input_bytes)});
        h.register(name, json!({"activities": [node]})).await;
    }
    let mut kids = vec![];
    for (name, seq) in [("at", 1), ("past", 2)] {
        let wf = h.start(name).await;
        kids.push((
            wf.clone(),
            start_children(&h, &wf, &["child"], seq).await[0].clone(),
        ));
    }
    let ((at, at_kid), (past, past_kid)) = (kids[0].clone(), kids[1].clone());
    assert_eq!(h.workflow(&past_kid).await.state, WorkflowState::Failed);
    let why = h.workflow(&past_kid).await.error.unwrap_or_default();
    assert!(
        why.contains("workflow input is 64001 bytes; at most 64000"),
        "{why}"
    );
    assert_eq!(h.workflow(&past).await.state, WorkflowState::Failed);
    assert_eq!(h.workflow(&at_kid).await.state, WorkflowState::Running);
    // The result: `{"work":…}` around the activity's output, 9 bytes.
    let finish = |kid: String, result_bytes: usize| {
        let h = &h;
        async move {
            let run = h.event(&kid, "work", "RUNNING");
            h.engine.apply_event(&run).await.unwrap();
            let mut done = h.event(&kid, "work", "COMPLETED");
            done.output = Some(sized(result_bytes - 9));
            h.engine.apply_event(&done).await.unwrap();
            let result = h.engine.workflow_result(&kid, "kid").await.unwrap();
            assert_eq!(result.expect("result").to_string().len(), result_bytes);
        }
    };
    finish(at_kid.clone(), 100_000).await;
    let node = h.activity(&at, "child").await;
    assert_eq!(node.state, ActivityState::Completed);
    let result = h.engine.workflow_result(&at_kid, "kid").await.unwrap();
    let output = h.engine.outputs_of(vec![node]).await.unwrap();
    assert_eq!(output.get("child"), result.as_ref(), "the node's output");
    assert_eq!(h.workflow(&at).await.state, WorkflowState::Completed);
    let over = {
        h.register(
            "over",
            json!({"activities": [{"name": "child", "workflow": "kid"}]}),
        )
        .await;
        let wf = h.start("over").await;
        let kid = start_children(&h, &wf, &["child"], 3).await[0].clone();
        finish(kid, 100_001).await;
        wf
    };
    let node = h.activity(&over, "child").await;
    assert_eq!(node.state, ActivityState::Failed);
    let why = node.outcome.error.unwrap_or_default();
    assert!(
        why.contains("its result is 100001 bytes; a node's output holds at most 100000"),
        "{why}"
    );
    assert_eq!(h.workflow(&over).await.state, WorkflowState::Failed);
}

/// Registers `tree`, which starts `mid`, which starts two `leaf`s: three
/// executions below the root.
async fn register_tree(h: &Harness) {
    h.register(
        "tree",
        json!({"activities": [{"name": "k", "workflow": "mid"}]}),
    )
    .await;
    h.register(
        "mid",
        json!({"activities": [
            {"name": "x", "workflow": "leaf"}, {"name": "y", "workflow": "leaf"}]}),
    )
    .await;
    h.register("leaf", one("work")).await;
}

/// An engine on `h`'s tables whose deployment lets a tree start `budget`
/// executions below its root.
fn budget_engine(h: &Harness, budget: u64) -> Engine<common::RecordingLauncher> {
    let config = whimbrel_core::engine::EngineConfig {
        max_tree_executions: budget,
        ..h.config()
    };
    Engine::with_environment(h.store.clone(), h.launcher.clone(), config, h.clock.clone())
}

/// Run the tree of [`register_tree`] from its start row `req` with
/// `engine`, each child's request applied twice; returns the states of
/// the root, `mid` and both leaves, and the second leaf's exec.
async fn run_tree(
    h: &Harness,
    engine: &Engine<common::RecordingLauncher>,
    req: &WorkflowRequest,
) -> (Vec<WorkflowState>, String) {
    engine.start_workflow(req).await.unwrap();
    let root = ids::workflow_exec_id("tree", &req.workflow_request_id);
    let start = |wf: String, node: &'static str| async move {
        let row = child_request(h, &h.activity(&wf, node).await)
            .await
            .unwrap();
        engine.start_workflow(&row).await.unwrap();
        engine.start_workflow(&row).await.unwrap();
        ids::workflow_exec_id(&row.workflow_name, &row.workflow_request_id)
    };
    let mid = start(root.clone(), "k").await;
    let leaves = [start(mid.clone(), "x").await, start(mid.clone(), "y").await];
    for leaf in &leaves {
        if h.workflow(leaf).await.state == WorkflowState::Running {
            h.run_to_completion(leaf, "work").await;
        }
    }
    let ends: Vec<WorkflowState> = [&root, &mid, &leaves[0], &leaves[1]]
        .iter()
        .map(|id| async { h.workflow(id).await.state })
        .collect::<futures::future::JoinAll<_>>()
        .await;
    (ends, leaves[1].clone())
}

/// docs/limits.md § 5 (issue 42 B.6): a workflow tree starts at most the
/// deployment's `max_tree_executions` below its root, children at every
/// depth counted on the root. `tree` starts `mid`, which starts two
/// `leaf`s: three below the root. With a budget of 3 the tree runs to
/// COMPLETED; with 2 the second leaf fails at its start with the reason,
/// and so do its parent and the root. A start applied again counts once.
#[tokio::test]
async fn a_tree_runs_at_its_budget_of_executions_and_the_next_child_fails() {
    let h = Harness::new().await;
    register_tree(&h).await;
    for budget in [3, 2] {
        let engine = budget_engine(&h, budget);
        let (ends, second_leaf) = run_tree(&h, &engine, &h.request("tree", None)).await;
        if budget == 3 {
            assert!(
                ends.iter().all(|s| *s == WorkflowState::Completed),
                "{ends:?}"
            );
            continue;
        }
        let failed = h.workflow(&second_leaf).await;
        assert_eq!(failed.state, WorkflowState::Failed);
        let why = failed.error.unwrap_or_default();
        assert!(
            why.contains("has started 2 executions below its root; at most 2"),
            "{why}"
        );
        assert_eq!(
            ends[..3],
            [
                WorkflowState::Failed,
                WorkflowState::Failed,
                WorkflowState::Completed
            ]
        );
    }
}

/// Issue 42 B.6, a client as adversary: a request row's parent link is
/// the engine's to write, but a client may write one. Rows naming a
/// victim tree's root (as the parent, or as the root of its own
/// workflow's node) must spend none of that tree's budget, nor start a
/// workflow that spends it later: the victim, with a budget of exactly
/// its three executions, runs to COMPLETED, and each forged execution
/// fails at its start with the reason.
#[tokio::test]
async fn request_rows_with_forged_parent_links_spend_nothing_of_a_trees_budget() {
    let h = Harness::new().await;
    register_tree(&h).await;
    let engine = budget_engine(&h, 3);
    let victim = h.request("tree", None);
    let root = ids::workflow_exec_id("tree", &victim.workflow_request_id);
    engine.start_workflow(&victim).await.unwrap();
    let own = h.start("tree").await;
    let (k, own_k) = (h.activity(&root, "k").await, h.activity(&own, "k").await);
    let forged = |name: &str, node: &ActivityExec, depth: u32| WorkflowRequest {
        parent: Some(ParentLink {
            workflow_exec_id: node.workflow_exec_id.clone(),
            workflow_name: node.workflow_name.clone(),
            activity_exec_id: node.activity_exec_id.clone(),
            depth,
            root: Some(root.clone()),
        }),
        ..h.request(name, None)
    };
    let rows = [
        forged("mid", &k, 1),
        forged("leaf", &k, 2),
        forged("mid", &own_k, 1),
        forged("leaf", &own_k, 1),
    ];
    for row in &rows {
        engine.start_workflow(row).await.unwrap();
        let exec = ids::workflow_exec_id(&row.workflow_name, &row.workflow_request_id);
        let wf = h.workflow(&exec).await;
        assert_eq!(wf.state, WorkflowState::Failed, "{}", row.workflow_name);
        let why = wf.error.unwrap_or_default();
        assert!(why.contains("names no node that starts it"), "{why}");
    }
    let (ends, _) = run_tree(&h, &engine, &victim).await;
    assert!(
        ends.iter().all(|s| *s == WorkflowState::Completed),
        "{ends:?}"
    );
}

/// Issue 42 A.3 and C.3, a targeted interleaving on DynamoDB: a child's
/// FAILED end is on its way to its node (read RUNNING, its write held);
/// meanwhile the parent is cancelled and redriven, and the node runs
/// again in a new generation with a new child. The held end then lands:
/// it must not fail the new generation's node (the old child's end is a
/// step of the generation it read). The new child's end completes the
/// node and the parent, and the old child owes no one a report.
#[tokio::test]
async fn an_old_childs_end_stalled_across_a_redrive_does_not_end_the_new_node() {
    let h = Harness::new().await;
    h.register(
        "solo",
        json!({"activities": [{"name": "thumbs", "workflow": "thumbs"}]}),
    )
    .await;
    h.register("thumbs", one("thumbnailer")).await;
    let wf = h.start("solo").await;
    let old = start_children(&h, &wf, &["thumbs"], 1).await.remove(0);
    h.engine
        .apply_event(&h.event(&old, "work", "RUNNING"))
        .await
        .unwrap();
    let node = h.activity(&wf, "thumbs").await;
    let (child_engine, reached, gate) = common::Stalled::engine(&h, &node.activity_exec_id);
    let failed = h.event(&old, "work", "FAILED");
    let meanwhile = async {
        reached.notified().await;
        let cancel = WorkflowRequest {
            cancel_workflow_exec_id: Some(wf.clone()),
            ..h.request("solo", None)
        };
        h.engine.cancel_workflow(&cancel).await.unwrap();
        let redrive = WorkflowRequest {
            redrive_workflow_exec_id: Some(wf.clone()),
            ..h.request("solo", None)
        };
        h.engine.redrive_workflow(&redrive).await.unwrap();
        assert_eq!(
            h.activity(&wf, "thumbs").await.state,
            ActivityState::Running
        );
        gate.notify_one();
    };
    let (applied, ()) = tokio::join!(child_engine.apply_event(&failed), meanwhile);
    applied.unwrap();
    assert_eq!(
        h.activity(&wf, "thumbs").await.state,
        ActivityState::Running,
        "the old child's end ended the redriven node"
    );
    let new = start_children(&h, &wf, &["thumbs"], 3).await.remove(0);
    assert_ne!(new, old);
    h.run_to_completion(&new, "work").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    h.tick(h.now() + 600).await;
    let old_wf = h.workflow(&old).await;
    assert_eq!(old_wf.state, WorkflowState::Failed);
    assert_eq!(old_wf.due_epoch, None, "the old child still owes a report");
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

/// Issue 42 B.6, with a function that dies between two writes: the start
/// of a row with a forged parent link creates its execution, and dies
/// before it fails it. The monitor's restart must fail it with the reason
/// too, not plan it: it would then start children that count on the
/// tree its link names.
#[tokio::test]
async fn a_forged_start_that_died_before_failing_its_execution_is_failed_by_the_monitor() {
    let h = Harness::new().await;
    register_tree(&h).await;
    let wf = h.start("tree").await;
    let k = h.activity(&wf, "k").await;
    let row = WorkflowRequest {
        parent: Some(ParentLink {
            workflow_exec_id: wf.clone(),
            workflow_name: "tree".into(),
            activity_exec_id: k.activity_exec_id.clone(),
            depth: 1,
            root: Some(wf.clone()),
        }),
        ..h.request("mid", None)
    };
    let exec = ids::workflow_exec_id("mid", &row.workflow_request_id);
    let (engine, reached, _gate) = common::Stalled::engine_on(&h, "workflow_exec_id", &exec);
    tokio::select! {
        _ = engine.start_workflow(&row) => panic!("the start did not write its execution's end"),
        () = reached.notified() => {}
    }
    assert_eq!(h.workflow(&exec).await.state, WorkflowState::Requested);
    h.tick(h.now() + 3600).await;
    let forged = h.workflow(&exec).await;
    assert_eq!(forged.state, WorkflowState::Failed);
    let why = forged.error.unwrap_or_default();
    assert!(why.contains("names no node that starts it"), "{why}");
}
