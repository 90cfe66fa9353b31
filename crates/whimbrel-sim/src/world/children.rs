//! Child workflows (design.md § 9.5) in the schedules: some nodes of the
//! plans start a registered child workflow, whose own small plan (a
//! Lambda or two that run, fail or die as every activity does, a timer,
//! now and then a child of its own) runs through the same request stream,
//! mappings and faults as the workflows users start: the engine's request
//! rows (a node's start, its parent close's cancel) are INSERTs of
//! `whimbrel_workflow_request` like any other, delivered late, twice or
//! given up and redriven, by invocations that may die between writes.
//! One schedule in a few dozen has a workflow that starts itself
//! ([`RECURSIVE`]), which nests until the depth limit fails its deepest
//! start. When the schedule registered the episodic child
//! ([`EPISODIC_CHILD`], `episodes.rs`), some child nodes start it: a
//! chain of executions continued as new.
//!
//! Everything here is drawn from the world's child stream
//! ([`crate::shared::Shared::child_rng`]): a schedule whose plans start no
//! child draws everything else as it did.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use whimbrel_core::attr;
use whimbrel_core::model::WorkflowLambda;

use super::episodes::EPISODIC_CHILD;
use super::Sim;
use crate::shared::lock;

/// The child workflows registered in every schedule: each may start the
/// ones before it (`kid1` a `kid0`, `kid2` either), so nesting ends.
pub const CHILD_WORKFLOWS: [&str; 3] = ["kid0", "kid1", "kid2"];

/// A workflow whose one node starts itself: it nests until a start deeper
/// than `MAX_CHILD_DEPTH` fails, and the failure reaches every ancestor.
pub const RECURSIVE: &str = "recur";

/// Share of the plans' nodes (neither timers nor signal waits) that start
/// a child workflow.
const CHILD_NODE_SHARE: f64 = 0.12;

/// Share of the child nodes of the top-level plans that start
/// [`RECURSIVE`].
const RECURSIVE_SHARE: f64 = 0.03;

/// Share of the other child nodes of the top-level plans that start
/// [`EPISODIC_CHILD`] when it is registered.
const EPISODIC_CHILD_NODE_SHARE: f64 = 0.25;

/// A child workflow node named `name`, waiting for `depends_on`, that
/// starts `workflow` with an input drawn from `r` (one in three too large
/// for the activity item: it goes by its input row), and perhaps a
/// `parent_close` (absent means `cancel`).
fn child_node(r: &mut ChaCha8Rng, name: &Value, depends_on: &Value, workflow: &str) -> Value {
    let mut input = json!({"node": name, "k": r.gen_range(0..1000)});
    if r.gen_bool(0.3) {
        input["pad"] = json!("c".repeat(300));
    }
    let mut node = json!({
        "name": name,
        "depends_on": depends_on,
        "workflow": workflow,
        "input": input,
    });
    match r.gen_range(0..3) {
        0 => {}
        1 => node["parent_close"] = json!("cancel"),
        _ => node["parent_close"] = json!("abandon"),
    }
    node
}

/// A Lambda node `a{i}` of child workflow `workflow`: maybe a retry
/// policy, a heartbeat timeout, or a task list instead of the Lambda.
fn lambda_node(r: &mut ChaCha8Rng, workflow: &str, i: usize, depends_on: Vec<String>) -> Value {
    let mut a = json!({
        "name": format!("a{i}"),
        "lambda": "sim-activity",
        "depends_on": depends_on,
        "input": {"workflow": workflow, "i": i},
    });
    if r.gen_bool(0.4) {
        a[attr::RETRY] = super::scenario::retry(r);
    }
    if r.gen_bool(0.4) {
        a["heartbeat_timeout_seconds"] = json!(r.gen_range(30..=120));
    }
    if r.gen_bool(0.2) {
        a.as_object_mut().expect("object").remove(attr::LAMBDA);
        a["task_list"] = json!(super::scenario::TASK_LIST);
    }
    a
}

/// The plan of child workflow `CHILD_WORKFLOWS[level]`: one or two
/// nodes, the second perhaps after the first: Lambdas mostly, a timer of
/// up to ten minutes, or (from `kid1` on) a child of a workflow before it;
/// tokens required one plan in two, an execution timeout one in ten.
fn child_plan(r: &mut ChaCha8Rng, level: usize) -> Value {
    let workflow = CHILD_WORKFLOWS[level];
    let n = r.gen_range(1..=2);
    let acts: Vec<Value> = (0..n)
        .map(|i| {
            let depends_on: Vec<String> = if i == 1 && r.gen_bool(0.5) {
                vec!["a0".into()]
            } else {
                vec![]
            };
            match r.gen_range(0..10) {
                0..=2 if level > 0 => {
                    let kid = CHILD_WORKFLOWS[r.gen_range(0..level)];
                    child_node(r, &json!(format!("a{i}")), &json!(depends_on), kid)
                }
                3 => json!({
                    "name": format!("a{i}"),
                    "depends_on": depends_on,
                    "wait": {"seconds": r.gen_range(0..=600)},
                }),
                _ => lambda_node(r, workflow, i, depends_on),
            }
        })
        .collect();
    let mut plan = json!({"version": 1, "activities": acts, "require_tokens": r.gen_bool(0.5)});
    if r.gen_bool(0.1) {
        plan["execution_timeout_seconds"] = json!(r.gen_range(300..=3000));
    }
    plan
}

/// The plan of [`RECURSIVE`]: one node that starts it again.
fn recursive_plan(r: &mut ChaCha8Rng) -> Value {
    let node = child_node(r, &json!("again"), &json!([]), RECURSIVE);
    json!({"version": 1, "activities": [node]})
}

impl Sim {
    /// Turn some nodes of `acts` that are neither timers nor signal waits
    /// into child workflow nodes, drawn from the world's child stream: a
    /// node of the top-level plans starts one of [`CHILD_WORKFLOWS`], or
    /// now and then [`RECURSIVE`]; when the schedule registered
    /// [`EPISODIC_CHILD`], one of the others in four starts it instead
    /// (drawn from the extra episode stream).
    pub(super) fn with_children(&self, acts: Vec<Value>) -> Vec<Value> {
        let mut world = lock(&self.world);
        let episodic = world.episodes.contains_key(EPISODIC_CHILD);
        let world = &mut *world;
        let (r, chain) = (&mut world.child_rng, &mut world.episode_extra_rng);
        acts.into_iter()
            .map(|a| {
                let waits = a.get("wait").is_some() || a.get("signal").is_some();
                if waits || !r.gen_bool(CHILD_NODE_SHARE) {
                    return a;
                }
                let workflow = if r.gen_bool(RECURSIVE_SHARE) {
                    RECURSIVE
                } else {
                    CHILD_WORKFLOWS[r.gen_range(0..CHILD_WORKFLOWS.len())]
                };
                let workflow = if workflow != RECURSIVE
                    && episodic
                    && chain.gen_bool(EPISODIC_CHILD_NODE_SHARE)
                {
                    EPISODIC_CHILD
                } else {
                    workflow
                };
                child_node(r, &a["name"], &a["depends_on"], workflow)
            })
            .collect()
    }

    /// Register [`CHILD_WORKFLOWS`] and [`RECURSIVE`], each as a
    /// definition or (one in three) behind the decider, their plans
    /// drawn from the child stream.
    pub(super) fn register_children(&mut self) {
        for level in 0..=CHILD_WORKFLOWS.len() {
            let (name, plan, by_decider) = {
                let mut world = lock(&self.world);
                let r = &mut world.child_rng;
                let (name, plan) = match CHILD_WORKFLOWS.get(level) {
                    Some(name) => (*name, child_plan(r, level)),
                    None => (RECURSIVE, recursive_plan(r)),
                };
                (name.to_string(), plan, r.gen_bool(1.0 / 3.0))
            };
            let tokens = plan[attr::REQUIRE_TOKENS].as_bool().unwrap_or(false);
            self.require_tokens.insert(name.clone(), tokens);
            self.register(&name, plan, by_decider);
        }
    }

    /// Register workflow `name` with `plan`: as its definition, or behind
    /// the simulated decider.
    pub(super) fn register(&mut self, name: &str, plan: Value, by_decider: bool) {
        let reg = if by_decider {
            lock(&self.world).deciders.insert(name.to_string(), plan);
            WorkflowLambda {
                workflow_name: name.to_string(),
                lambda: Some("sim-decider".into()),
                definition: None,
                allow: None,
            }
        } else {
            WorkflowLambda {
                workflow_name: name.to_string(),
                lambda: None,
                definition: Some(serde_json::from_value(plan).expect("plan shape")),
                allow: None,
            }
        };
        self.put_raw(
            &self.tables.workflow_lambda(),
            serde_dynamo::to_item(&reg).expect("item"),
        );
    }
}
