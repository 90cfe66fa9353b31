//! `plan_validate`: arbitrary bytes as a plan (what a decider returns or a
//! `definition` stores): `serde_json::from_slice::<Plan>` → `validate()` →
//! for a valid plan, the items it becomes (`engine::decide::activity_items`).
//!
//! Must never panic. Checked:
//! * every retry policy in the plan that validates on its own (the plan's,
//!   each activity's, and each activity's over the plan's) gives a delay in
//!   `0..=MAX_DELAY_SECONDS` (and within its own `max_delay_seconds`) for
//!   any attempt and any jitter unit; an invalid one still does not panic;
//! * a valid plan yields exactly one activity exec (REQUESTED, named,
//!   with a well-formed unique id) per planned activity, in order, and one
//!   dependency edge per prerequisite; prerequisites, dependents and the
//!   pending count agree with the plan; each merged retry policy is valid;
//! * every item (activity execs, edges, the workflow exec holding the plan)
//!   converts to a DynamoDB item and reads back as its type, and the plan
//!   read back from the workflow item (what a redelivered request replays)
//!   is still valid and yields the same activity ids.

#![no_main]

use std::collections::{HashMap, HashSet};

use libfuzzer_sys::fuzz_target;
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::{decide, EngineConfig};
use whimbrel_core::ids;
use whimbrel_core::model::{ActivityExec, ActivityExecDependency, WorkflowExec, WorkflowPlan};
use whimbrel_core::plan::{Plan, MAX_HEARTBEAT_TIMEOUT_SECONDS};
use whimbrel_core::retry::{self, RetryPolicy, MAX_ATTEMPTS, MAX_DELAY_SECONDS};
use whimbrel_core::store::Item;

fn check_policy(p: &RetryPolicy, who: &str) {
    let valid = p.validate().is_ok();
    let cap = p.max_delay_seconds.unwrap_or(MAX_DELAY_SECONDS);
    for failed in [0, 1, 2, 3, 7, 31, 64, p.attempts(), MAX_ATTEMPTS, u32::MAX] {
        for unit in [
            0.0,
            0.5,
            1.0,
            retry::jitter_unit(who, failed),
            -1.0,
            2.0,
            f64::NAN,
        ] {
            let d = p.delay_seconds(failed, unit);
            if valid {
                assert!(
                    (0..=MAX_DELAY_SECONDS).contains(&d) && d <= cap,
                    "{who}: delay {d}s after attempt {failed} (unit {unit}) of the valid policy {p:?}"
                );
            }
        }
    }
}

fn workflow(plan: &Plan) -> WorkflowExec {
    WorkflowExec {
        parent: None,
        redrive_count: None,
        redriving: None,
        redrives: vec![],
        slots_used: None,
        decide_on: None,
        decider: None,
        continued_from: None,
        continued_as: None,
        workflow_exec_id: ids::workflow_exec_id("fuzz", "fuzz::request"),
        workflow_name: "fuzz".into(),
        state: WorkflowState::Running,
        workflow_request_id: Some("fuzz::request".into()),
        start_time: Timestamp::from_epoch(1_795_306_411).date_list(),
        start_time_epoch: 1_795_306_411,
        end_time: None,
        end_time_epoch: None,
        input: None,
        planned_epoch: Some(1_795_306_411),
        execution_timeout_seconds: plan.execution_timeout_seconds,
        activity_count: plan.activities.len() as u64,
        completed_count: 0,
        failed_count: 0,
        cancelled_count: 0,
        error: None,
        source: None,
        due_epoch: None,
        due_shard: None,
        start_attempts: 0,
        result: None,
        result_in_activities: None,
    }
}

fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(what: &str, v: &T) -> T {
    let item: Item = match serde_dynamo::to_item(v) {
        Ok(i) => i,
        Err(e) => panic!("{what} is not a DynamoDB item: {e}"),
    };
    match serde_dynamo::from_item(item) {
        Ok(v) => v,
        Err(e) => panic!("{what} does not read back from its item: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(plan) = serde_json::from_slice::<Plan>(data) else {
        return;
    };
    if let Some(p) = &plan.retry {
        check_policy(p, "plan");
    }
    for a in &plan.activities {
        if let Some(own) = &a.retry {
            check_policy(own, &a.name);
            if let Some(dflt) = &plan.retry {
                check_policy(&own.over(dflt), &a.name);
            }
        }
    }
    if plan.validate().is_err() {
        return;
    }
    let cfg = EngineConfig::default();
    let wf = workflow(&plan);
    let (execs, edges) = decide::activity_items(&wf, &plan, &cfg);
    assert_eq!(execs.len(), plan.activities.len(), "one exec per activity");
    let prereqs: usize = plan.activities.iter().map(|a| a.depends_on.len()).sum();
    assert_eq!(edges.len(), prereqs, "one edge per prerequisite");

    let id_of: HashMap<&str, &str> = execs
        .iter()
        .map(|x| (x.activity_name.as_str(), x.activity_exec_id.as_str()))
        .collect();
    assert_eq!(id_of.len(), execs.len(), "activity names are unique");
    let unique: HashSet<&str> = execs.iter().map(|x| x.activity_exec_id.as_str()).collect();
    assert_eq!(unique.len(), execs.len(), "activity exec ids are unique");
    let dependents = plan.dependents();
    for (a, x) in plan.activities.iter().zip(&execs) {
        assert_eq!(x.activity_name, a.name);
        assert_eq!(x.state, ActivityState::Requested);
        assert_eq!(x.workflow_exec_id, wf.workflow_exec_id);
        assert_eq!(
            ids::check_id(
                "activity_exec_id",
                "activity_name",
                &x.activity_exec_id,
                &a.name
            ),
            Ok(true),
            "{}",
            x.activity_exec_id
        );
        let want: Vec<&str> = a.depends_on.iter().map(|p| id_of[p.as_str()]).collect();
        assert_eq!(x.links.prerequisites, want, "{}: prerequisites", a.name);
        assert_eq!(x.links.pending_dependency_count, a.depends_on.len() as u64);
        let mut waiting: Vec<&str> = dependents
            .get(a.name.as_str())
            .into_iter()
            .flatten()
            .map(|d| id_of[d])
            .collect();
        // A wide fan-out keeps them in the plan: derived as the engine does.
        let derived = x.links.dependents_in_plan.map(|count| {
            let (d, _) = whimbrel_core::engine::items::planned_dependents(
                &wf.workflow_exec_id,
                &plan,
                &a.name,
                &cfg,
            );
            assert_eq!(d.len(), count as usize, "{}: dependents_in_plan", a.name);
            assert!(
                x.links.dependents.is_empty(),
                "{}: a wide fan-out lists none",
                a.name
            );
            d
        });
        let listed = derived.as_ref().unwrap_or(&x.links.dependents);
        let mut got: Vec<&str> = listed.iter().map(String::as_str).collect();
        waiting.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, waiting, "{}: dependents", a.name);
        if let Some(r) = &x.attempt.retry {
            assert!(r.attempts() > 1, "{}: a one-attempt policy is kept", a.name);
            assert_eq!(r.validate(), Ok(()), "{}: merged policy", a.name);
            check_policy(r, &x.activity_exec_id);
        }
        if x.timeouts.heartbeat_enabled {
            let t = x.timeouts.heartbeat_timeout_seconds.expect("heartbeat timeout");
            assert!((1..=MAX_HEARTBEAT_TIMEOUT_SECONDS).contains(&t), "{t}");
        }
        assert!(x.timeouts.start_to_close_seconds.is_some_and(|t| t > 0));
        let back: ActivityExec = round_trip(&format!("activity exec {}", a.name), x);
        assert_eq!(back.activity_exec_id, x.activity_exec_id);
        assert_eq!(back.links.prerequisites, x.links.prerequisites);
    }
    let mut edge_keys = HashSet::new();
    for e in &edges {
        assert!(
            edge_keys.insert(e.activity_exec_dependency.as_str()),
            "edge keys unique"
        );
        assert_eq!(e.workflow_exec_id, wf.workflow_exec_id);
        let waiting = execs
            .iter()
            .find(|x| x.activity_exec_id == e.activity_exec_id)
            .expect("an edge's waiting activity is in the plan");
        assert!(waiting
            .links.prerequisites
            .contains(&e.prerequisite_activity_exec_id));
        let _: ActivityExecDependency = round_trip("edge", e);
    }
    let item = WorkflowPlan {
        workflow_exec_id: wf.workflow_exec_id.clone(),
        workflow_name: wf.workflow_name.clone(),
        plan: plan.clone(),
        input: None,
        recorded_epoch: 1_795_306_411,
        parts: None,
        episodic: None,
    };
    // Stored as DynamoDB would hold it: one item, or a head and parts that
    // give the activity list back in order.
    let (head, parts) =
        whimbrel_core::engine::plans::split(&item, Default::default()).expect("a valid plan is storable");
    let mut stored: WorkflowPlan = round_trip("workflow plan item", &head);
    if !parts.is_empty() {
        assert_eq!(
            stored.parts.as_ref().map(|p| p.count as usize),
            Some(parts.len())
        );
        stored.plan.activities = parts
            .iter()
            .flat_map(|p| round_trip("workflow plan part", p).activities)
            .collect();
    }
    let replayed = stored.plan;
    assert_eq!(
        replayed.validate(),
        Ok(()),
        "the stored plan is still valid"
    );
    let (again, edges_again) = decide::activity_items(&wf, &replayed, &cfg);
    let ids: Vec<&str> = execs.iter().map(|x| x.activity_exec_id.as_str()).collect();
    let ids_again: Vec<&str> = again.iter().map(|x| x.activity_exec_id.as_str()).collect();
    assert_eq!(
        ids, ids_again,
        "the replayed plan yields the same activities"
    );
    assert_eq!(edges.len(), edges_again.len());
});
