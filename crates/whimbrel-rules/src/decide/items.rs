//! The items a plan becomes: one activity exec (REQUESTED) per planned
//! activity and one dependency edge per prerequisite. Pure: the same plan
//! always yields the same items (ids derived from the workflow exec id and
//! the activity names).
//!
//! A wide join (more prerequisites than `EngineConfig::join_group_size`)
//! keeps no list of its prerequisites and counts join groups instead: each
//! prerequisite learns its group from `join_slots`, so that no write grows
//! with the prerequisites.
//!
//! A wide fan-out (more dependents than `EngineConfig::fan_out_list_max`)
//! keeps no list of its dependents either: `dependents_in_plan` gives
//! their number, and [`planned_dependents`] derives them (and their join
//! slots) from the stored plan when it ends, so no item grows with the
//! fan-out and no update of it pays for the list.

use std::collections::{BTreeMap, HashMap};

use crate::config::EngineConfig;
use crate::contract::ActivityState;
use crate::ids;
use crate::kind::NodeKind;
use crate::model::{
    ActivityExec, ActivityExecDependency, Attempt, ChildRunner, GroupSlot, Links, Outcome, Runner,
    Runs, Timeouts, Timing, Trail, WorkflowExec,
};
use crate::plan::{Plan, PlannedActivity, WaitSpec};
use crate::retry::RetryPolicy;

/// The activity exec items (REQUESTED) and dependency edges for a plan.
/// Pure: the same plan always yields the same items.
pub fn activity_items(
    wf: &WorkflowExec,
    plan: &Plan,
    config: &EngineConfig,
) -> (Vec<ActivityExec>, Vec<ActivityExecDependency>) {
    let id_of: HashMap<&str, String> = plan
        .activities
        .iter()
        .map(|a| {
            (
                a.name.as_str(),
                ids::activity_exec_id(&wf.workflow_exec_id, &a.name),
            )
        })
        .collect();
    let dependents = plan.dependents();
    let mut slots = join_slots(plan, &id_of, config);
    let group_size = group_size(config);
    let total = plan.activities.len();
    let closes_children = plan.closes_children();
    let mut execs = Vec::with_capacity(total);
    let mut edges = Vec::new();
    for (index, a) in plan.activities.iter().enumerate() {
        let id = id_of[a.name.as_str()].clone();
        let prerequisites: Vec<String> = a
            .depends_on
            .iter()
            .map(|p| id_of[p.as_str()].clone())
            .collect();
        edges.extend(edges_of(wf, &id, &prerequisites));
        let waiting = dependents
            .get(a.name.as_str())
            .map_or(&[][..], Vec::as_slice);
        let wide_fan_out = waiting.len() > fan_out_list_max(config);
        let links = PlanLinks {
            count_slot: count_slot(index, group_size, total),
            join_slots: if wide_fan_out {
                BTreeMap::new()
            } else {
                slots.remove(a.name.as_str()).unwrap_or_default()
            },
            dependents: if wide_fan_out {
                vec![]
            } else {
                waiting.iter().map(|d| id_of[d].clone()).collect()
            },
            dependents_in_plan: wide_fan_out.then_some(waiting.len() as u32),
            prerequisites,
            group_size,
            max_concurrency: plan.max_concurrency.filter(|_| a.kind().runs_code()),
            plan_index: index as u32,
            closes_children,
        };
        execs.push(requested_item(wf, plan, a, config, id, links));
    }
    debug_assert!(
        links_agree(&execs),
        "a dependent that does not name its prerequisite"
    );
    (execs, edges)
}

/// Boundary check (debug builds: the tests and the simulation): the two
/// halves of each link agree. Every dependent an item lists (computed
/// from [`Plan::dependents`]) names it among its prerequisites (computed
/// from its own `depends_on`), unless that dependent is a wide join, which
/// keeps its prerequisites in join groups instead.
fn links_agree(execs: &[ActivityExec]) -> bool {
    let by_id: HashMap<&str, &ActivityExec> = execs
        .iter()
        .map(|e| (e.activity_exec_id.as_str(), e))
        .collect();
    execs.iter().all(|e| {
        e.links.dependents.iter().all(|d| {
            by_id.get(d.as_str()).is_some_and(|d| {
                d.links.join_groups.is_some() || d.links.prerequisites.contains(&e.activity_exec_id)
            })
        })
    })
}

/// How one activity of a plan is linked to the others, before its item
/// decides how to keep the links ([`PlanLinks::into_links`]).
struct PlanLinks {
    /// Its count group (design.md § 3.3): plan order, `group_size` each.
    count_slot: GroupSlot,
    /// The join groups its end releases, by dependent.
    join_slots: BTreeMap<String, GroupSlot>,
    /// The exec ids of its dependents, when listed on the item.
    dependents: Vec<String>,
    /// How many dependents it has, when they are too many to list.
    dependents_in_plan: Option<u32>,
    /// The exec ids of its prerequisites, in plan order.
    prerequisites: Vec<String>,
    /// Prerequisites per join group.
    group_size: usize,
    /// The plan's `max_concurrency`, for a node that runs code.
    max_concurrency: Option<u32>,
    /// Its index in the plan.
    plan_index: u32,
    /// Its plan has child nodes, cancelled when an activity fails.
    closes_children: bool,
}

impl PlanLinks {
    /// The item's links: a wide join (more prerequisites than
    /// `group_size`) keeps no list and counts its join groups instead.
    fn into_links(self) -> Links {
        let count = self.prerequisites.len();
        let join_groups = (count > self.group_size).then(|| count.div_ceil(self.group_size) as u32);
        Links {
            pending_dependency_count: join_groups.map_or(count as u64, u64::from),
            prerequisites: if join_groups.is_some() {
                vec![]
            } else {
                self.prerequisites
            },
            join_groups,
            count_slot: Some(self.count_slot),
            join_slots: self.join_slots,
            dependents: self.dependents,
            dependents_in_plan: self.dependents_in_plan,
            released_through: None,
            released_prerequisites: vec![],
            max_concurrency: self.max_concurrency,
            plan_index: self.max_concurrency.map(|_| self.plan_index),
            slot_held: false,
            target_limit: None,
            target_slot_held: false,
            target_slot_adopted: false,
            closes_children: self.closes_children,
            scheduled_by: None,
        }
    }
}

/// The count slot of the activity at `index` of a plan of `total`.
fn count_slot(index: usize, group_size: usize, total: usize) -> GroupSlot {
    let group = index / group_size;
    GroupSlot {
        group: group as u32,
        size: group_size.min(total - group * group_size) as u32,
    }
}

/// The dependency edges of activity `id` on its `prerequisites`.
fn edges_of(wf: &WorkflowExec, id: &str, prerequisites: &[String]) -> Vec<ActivityExecDependency> {
    let edge = |(i, p): (usize, &String)| ActivityExecDependency {
        activity_exec_dependency: ids::dependency_id(id, i),
        activity_exec_id: id.to_string(),
        prerequisite_activity_exec_id: p.clone(),
        workflow_exec_id: wf.workflow_exec_id.clone(),
    };
    prerequisites.iter().enumerate().map(edge).collect()
}

/// The activity's retry policy: its own over the plan's default; none when
/// it allows a single attempt, or for a timer or a signal wait (nothing
/// runs to fail).
fn retry_of(a: &PlannedActivity, plan: &Plan) -> Option<RetryPolicy> {
    if !a.kind().runs_code() {
        return None;
    }
    match (&a.retry, &plan.retry) {
        (Some(own), Some(dflt)) => Some(own.over(dflt)),
        (own, dflt) => own.clone().or_else(|| dflt.clone()),
    }
    .filter(|r| r.attempts() > 1)
}

/// What runs planned activity `a` of `wf` (validation gave it exactly one
/// kind): a child's depth and tree root come from `wf`'s parent link.
fn runs_of(a: &PlannedActivity, wf: &WorkflowExec) -> Runs {
    match a.kind() {
        NodeKind::Lambda => Runs::Lambda {
            function: a.lambda.clone(),
        },
        NodeKind::TaskList => Runs::TaskList {
            list: a.task_list.clone().unwrap_or_default(),
        },
        NodeKind::Timer => Runs::Timer {
            seconds: a.wait.as_ref().and_then(|w| w.seconds),
            until_epoch: a.wait.as_ref().and_then(WaitSpec::until_epoch),
        },
        NodeKind::Signal => Runs::Signal {
            name: a.signal.clone().unwrap_or_default(),
        },
        NodeKind::Child => Runs::Child(ChildRunner {
            workflow_name: a.workflow.clone().unwrap_or_default(),
            depth: wf.parent.as_ref().map_or(0, |p| p.depth) + 1,
            root: wf.parent.as_ref().map(|p| p.tree_root().to_string()),
            parent_close: a.parent_close.unwrap_or_default(),
        }),
    }
}

/// The REQUESTED item of planned activity `a`, exec id `id`.
fn requested_item(
    wf: &WorkflowExec,
    plan: &Plan,
    a: &PlannedActivity,
    config: &EngineConfig,
    id: String,
    links: PlanLinks,
) -> ActivityExec {
    ActivityExec {
        activity_exec_id: id,
        workflow_exec_id: wf.workflow_exec_id.clone(),
        workflow_name: wf.workflow_name.clone(),
        activity_name: a.name.clone(),
        state: ActivityState::Requested,
        version: 0,
        runner: Runner {
            runs: runs_of(a, wf),
            input: a.input.clone().filter(crate::payloads::inline),
            // A stored plan names the row; a plan stored before inputs went
            // by reference (or not stored) still has the input.
            input_ref: a
                .input_ref
                .clone()
                .or_else(|| crate::payloads::input_ref(&wf.workflow_exec_id, a.input.as_ref())),
            ..Runner::default()
        },
        attempt: Attempt {
            retry: retry_of(a, plan),
            require_tokens: requires_tokens(a, plan, config),
            ..Attempt::default()
        },
        timeouts: match a.kind() {
            NodeKind::Timer | NodeKind::Child => Timeouts::default(),
            // Its one timeout; absent, it waits as long as the workflow.
            NodeKind::Signal => Timeouts {
                start_to_close_seconds: a.start_to_close_seconds,
                ..Timeouts::default()
            },
            NodeKind::Lambda | NodeKind::TaskList => timeouts_of(a, config),
        },
        timing: Timing::default(),
        links: links.into_links(),
        outcome: Outcome::default(),
        trail: Trail::default(),
    }
}

/// Whether reports of planned activity `a` must carry the live attempt's
/// token: the deployment's setting (`WHIMBREL_REQUIRE_TOKENS`) is a floor.
/// Where it does not require them, the activity's own `require_tokens`
/// decides, else the plan's; where it does, neither can lift it, so a plan
/// never opens its activities to reports forged by a holder of the
/// activity role (docs/contract.md § 2). Nodes that run no code (a timer,
/// a signal wait, a child workflow) are no exception: they take no report
/// but CANCEL, and no attempt token is ever minted for them, so where
/// tokens are required no row of the activity role can end them; cancel
/// requests and decisions still do, as the engine (issue 42 B.2).
fn requires_tokens(a: &PlannedActivity, plan: &Plan, config: &EngineConfig) -> bool {
    config.require_tokens || a.require_tokens.or(plan.require_tokens).unwrap_or(false)
}

/// The timeouts of planned activity `a`: its own, or the engine's defaults.
fn timeouts_of(a: &PlannedActivity, config: &EngineConfig) -> Timeouts {
    // An explicit `heartbeat_enabled` wins; otherwise a timeout enables.
    let heartbeat_enabled = a
        .heartbeat_enabled
        .unwrap_or(a.heartbeat_timeout_seconds.is_some());
    Timeouts {
        schedule_to_start_seconds: a
            .schedule_to_start_seconds
            .or(config.default_schedule_to_start_seconds),
        schedule_to_close_seconds: a
            .schedule_to_close_seconds
            .or(config.default_schedule_to_close_seconds),
        heartbeat_enabled,
        heartbeat_timeout_seconds: heartbeat_enabled.then(|| {
            a.heartbeat_timeout_seconds
                .unwrap_or(config.default_heartbeat_timeout_seconds)
        }),
        // Stored even when defaulted: a worker computes its claim's
        // deadline from the item alone (docs/workers.md).
        start_to_close_seconds: Some(
            a.start_to_close_seconds
                .unwrap_or(config.default_start_to_close_seconds),
        ),
    }
}

fn fan_out_list_max(config: &EngineConfig) -> usize {
    config.fan_out_list_max.min(crate::plan::FAN_OUT_LIST_MAX)
}

fn group_size(config: &EngineConfig) -> usize {
    config
        .join_group_size
        .clamp(1, crate::plan::JOIN_GROUP_SIZE)
}

/// For each prerequisite of a wide join (by name), the join group it counts
/// toward in each wide join that waits for it (by activity exec id).
fn join_slots<'a>(
    plan: &'a Plan,
    id_of: &HashMap<&str, String>,
    config: &EngineConfig,
) -> HashMap<&'a str, BTreeMap<String, GroupSlot>> {
    let group_size = group_size(config);
    let mut slots: HashMap<&str, BTreeMap<String, GroupSlot>> = HashMap::new();
    for a in plan
        .activities
        .iter()
        .filter(|a| a.depends_on.len() > group_size)
    {
        let n = a.depends_on.len();
        for (i, p) in a.depends_on.iter().enumerate() {
            let group = i / group_size;
            let size = group_size.min(n - group * group_size);
            slots.entry(p.as_str()).or_default().insert(
                id_of[a.name.as_str()].clone(),
                GroupSlot {
                    group: group as u32,
                    size: size as u32,
                },
            );
        }
    }
    slots
}

/// The dependents (activity exec ids, in plan order) and join slots of
/// the activity `name` of workflow exec `workflow_exec_id`, derived from
/// its plan as [`activity_items`] derives them: what a wide fan-out
/// (`dependents_in_plan`) keeps off its item. Pure.
pub fn planned_dependents(
    workflow_exec_id: &str,
    plan: &Plan,
    name: &str,
    config: &EngineConfig,
) -> (Vec<String>, BTreeMap<String, GroupSlot>) {
    let id_of: HashMap<&str, String> = plan
        .activities
        .iter()
        .map(|a| {
            (
                a.name.as_str(),
                ids::activity_exec_id(workflow_exec_id, &a.name),
            )
        })
        .collect();
    let dependents = plan
        .dependents()
        .get(name)
        .into_iter()
        .flatten()
        .map(|d| id_of[d].clone())
        .collect();
    let slots = join_slots(plan, &id_of, config)
        .remove(name)
        .unwrap_or_default();
    (dependents, slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens_of(plan: serde_json::Value, deployment: bool) -> Vec<bool> {
        let wf = super::super::tests::workflow();
        let plan: Plan = serde_json::from_value(plan).unwrap();
        let config = EngineConfig {
            require_tokens: deployment,
            ..EngineConfig::default()
        };
        let (items, _) = activity_items(&wf, &plan, &config);
        items.iter().map(|a| a.attempt.require_tokens).collect()
    }

    #[test]
    fn the_deployments_token_requirement_is_a_floor_no_plan_lifts() {
        let plan = serde_json::json!({"require_tokens": false, "activities": [
            {"name": "a", "lambda": "f"},
            {"name": "b", "lambda": "f", "require_tokens": false},
            {"name": "c", "lambda": "f", "require_tokens": true},
        ]});
        assert_eq!(tokens_of(plan.clone(), true), [true, true, true]);
        assert_eq!(tokens_of(plan, false), [false, false, true]);
        let plan = serde_json::json!({"require_tokens": true, "activities": [
            {"name": "a", "lambda": "f"},
            {"name": "b", "lambda": "f", "require_tokens": false},
        ]});
        assert_eq!(tokens_of(plan, false), [true, false]);
    }
}

#[cfg(test)]
mod links_tests {
    use super::*;

    fn item(id: &str, prerequisites: &[&str], dependents: &[&str]) -> ActivityExec {
        let mut e = crate::decide::tests::running(None, None);
        e.activity_exec_id = id.into();
        e.links.prerequisites = prerequisites.iter().map(|p| p.to_string()).collect();
        e.links.dependents = dependents.iter().map(|d| d.to_string()).collect();
        e
    }

    #[test]
    fn the_boundary_check_catches_a_link_only_one_side_names() {
        let a = item("a", &[], &["b"]);
        assert!(links_agree(&[a.clone(), item("b", &["a"], &[])]));
        assert!(
            !links_agree(&[a.clone(), item("b", &[], &[])]),
            "b forgot a"
        );
        assert!(!links_agree(std::slice::from_ref(&a)), "b is not an item");
        let mut join = item("b", &[], &[]);
        join.links.join_groups = Some(2);
        assert!(
            links_agree(&[a, join]),
            "a wide join keeps its prerequisites in groups"
        );
    }
}
