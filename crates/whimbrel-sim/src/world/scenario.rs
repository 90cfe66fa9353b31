//! What a schedule is made of: random workflow plans (DAGs with
//! heartbeats and timeouts), registered as definitions or behind a
//! decider; requests; users who cancel.

use whimbrel_core::attr;

use rand::Rng;
use serde_json::{json, Value};
use whimbrel_core::ids;
use whimbrel_core::model::WorkflowRequest;

use super::Sim;
use crate::check::cancels::CancelRequest;
use crate::shared::lock;

/// The task list the simulation's workers serve.
pub const TASK_LIST: &str = "sim-list";

/// The names of the signals plans wait for and users send.
pub const SIGNAL_NAMES: [&str; 3] = ["approve", "go", "ack"];

/// A random retry policy.
pub(super) fn retry(r: &mut impl Rng) -> Value {
    let rate = [1.0, 2.0, 3.0][r.gen_range(0..3)];
    let mut p = json!({
        "max_attempts": r.gen_range(1..=3),
        "interval_seconds": r.gen_range(0..=60),
        "backoff_rate": rate,
    });
    if r.gen_bool(0.3) {
        p["jitter"] = json!("FULL");
    }
    if r.gen_bool(0.3) {
        p["no_retry_on"] = json!(["Fatal"]);
    }
    if r.gen_bool(0.2) {
        p["retry_on"] = json!(["Busy", "TIMED_OUT", "NOT_STARTED"]);
    }
    p
}

/// The main draws of a plan's activities, in the order the main stream
/// draws them (that order is part of every schedule): how many, their
/// prerequisites, heartbeat timeouts, start-to-close timeouts, and the
/// rest (retry policy, task list, schedule timeouts).
struct Drawn {
    n: usize,
    edges: Vec<Vec<usize>>,
    hb: Vec<Option<i64>>,
    stc: Vec<Option<i64>>,
    extra: Vec<Value>,
}

impl Drawn {
    /// Draw a plan of at most `max` activities.
    fn new(r: &mut impl Rng, max: usize) -> Self {
        let n = r.gen_range(1..=max);
        let edges: Vec<Vec<usize>> = (0..n)
            .map(|i| (0..i).filter(|_| r.gen_bool(0.4)).collect())
            .collect();
        let hb: Vec<Option<i64>> = (0..n)
            .map(|_| r.gen_bool(0.5).then(|| r.gen_range(30..=120)))
            .collect();
        let stc: Vec<Option<i64>> = (0..n)
            .map(|_| r.gen_bool(0.3).then(|| r.gen_range(120..=600)))
            .collect();
        let extra: Vec<Value> = (0..n).map(|_| extra(r)).collect();
        Drawn {
            n,
            edges,
            hb,
            stc,
            extra,
        }
    }

    /// Activity `a{i}` of workflow `name`, as drawn.
    fn activity(&self, name: &str, i: usize) -> Value {
        let mut a = json!({
            "name": format!("a{i}"),
            "lambda": "sim-activity",
            "depends_on": self.edges[i].iter().map(|d| format!("a{d}")).collect::<Vec<_>>(),
            "input": {"workflow": name, "i": i},
        });
        // Every third input is too large for the activity item: it
        // goes by its input row (engine::payloads).
        if i % 3 == 1 {
            a["input"]["pad"] = json!("p".repeat(300));
        }
        if let Some(t) = self.hb[i] {
            a["heartbeat_timeout_seconds"] = json!(t);
        }
        if let Some(t) = self.stc[i] {
            a["timeout_seconds"] = json!(t);
        }
        for (k, v) in self.extra[i].as_object().into_iter().flatten() {
            a[k] = v.clone();
        }
        if a.get(attr::TASK_LIST).is_some() {
            a.as_object_mut().expect("object").remove(attr::LAMBDA);
        }
        a
    }
}

/// The optional fields of one activity: a retry policy, a task list,
/// schedule-to-start and schedule-to-close timeouts.
fn extra(r: &mut impl Rng) -> Value {
    let mut x = json!({});
    if r.gen_bool(0.4) {
        x[attr::RETRY] = retry(r);
    }
    if r.gen_bool(0.3) {
        x["task_list"] = json!(TASK_LIST);
    }
    if r.gen_bool(0.2) {
        x["schedule_to_start_seconds"] = json!(r.gen_range(30..=300));
    }
    if r.gen_bool(0.15) {
        x["schedule_to_close_seconds"] = json!(r.gen_range(200..=2000));
    }
    x
}

impl Sim {
    /// The plan of top-level workflow `name`: activities drawn from the
    /// main stream, some turned into timers, signal waits and child
    /// workflows (each from its own stream), and the plan's settings.
    pub(super) fn plan(&self, name: &str) -> Value {
        let max = self.params.max_activities.max(1);
        let drawn = self.rng(|r| Drawn::new(r, max));
        let acts: Vec<Value> = (0..drawn.n).map(|i| drawn.activity(name, i)).collect();
        let acts = self.with_timers(acts);
        let acts = self.with_signals(acts);
        let acts = self.with_children(acts);
        self.plan_settings(acts)
    }

    /// A plan of `acts` with its settings: tokens required or not, a
    /// default retry policy and an execution timeout (main stream), and a
    /// concurrency limit on a fifth of the plans (design.md § 9.3), drawn
    /// from the node stream so the main draws stay as they were.
    fn plan_settings(&self, acts: Vec<Value>) -> Value {
        let (tokens, default_retry, deadline) = self.rng(|r| {
            (
                r.gen_bool(0.5),
                r.gen_bool(0.2).then(|| retry(r)),
                r.gen_bool(0.15).then(|| r.gen_range(300..=3000)),
            )
        });
        let mut plan = json!({"version": 1, "activities": acts, "require_tokens": tokens});
        if let Some(p) = default_retry {
            plan[attr::RETRY] = p;
        }
        if let Some(t) = deadline {
            plan["execution_timeout_seconds"] = json!(t);
        }
        let limit = {
            let mut world = lock(&self.world);
            let r = &mut world.node_rng;
            r.gen_bool(0.2).then(|| r.gen_range(1..=3))
        };
        if let Some(m) = limit {
            plan["max_concurrency"] = json!(m);
        }
        plan
    }

    /// Turn some nodes of `acts` into timers (design.md § 9.1), drawn from
    /// the world's node stream: a wait of 0 to 15 minutes, or an `until`
    /// up to 20 minutes after the world's start, or already past.
    fn with_timers(&self, acts: Vec<Value>) -> Vec<Value> {
        let mut world = lock(&self.world);
        let r = &mut world.node_rng;
        acts.into_iter()
            .map(|a| {
                if !r.gen_bool(0.15) {
                    return a;
                }
                let wait = if r.gen_bool(0.6) {
                    json!({"seconds": r.gen_range(0..=900)})
                } else {
                    let at = super::START + r.gen_range(-300..=1200);
                    let until = chrono::DateTime::from_timestamp(at, 0).expect("in range");
                    json!({"until": until.to_rfc3339()})
                };
                json!({"name": a["name"], "depends_on": a["depends_on"], "wait": wait})
            })
            .collect()
    }

    /// Turn some of the nodes of `acts` that are not timers into signal
    /// waits (design.md § 9.2), drawn from the world's signal stream: one
    /// of [`SIGNAL_NAMES`], with a timeout of 1 to 30 minutes, or none
    /// (it waits as long as its workflow).
    fn with_signals(&self, acts: Vec<Value>) -> Vec<Value> {
        let mut world = lock(&self.world);
        let r = &mut world.signal_rng;
        acts.into_iter()
            .map(|a| {
                if a.get("wait").is_some() || !r.gen_bool(0.1) {
                    return a;
                }
                let name = SIGNAL_NAMES[r.gen_range(0..SIGNAL_NAMES.len())];
                let mut node =
                    json!({"name": a["name"], "depends_on": a["depends_on"], "signal": name});
                if r.gen_bool(0.6) {
                    node["timeout_seconds"] = json!(r.gen_range(60..=1800));
                }
                node
            })
            .collect()
    }

    pub(super) fn setup(&mut self) {
        self.set_up_episodic_child();
        for w in 0..self.params.workflows {
            let name = format!("wf{w}");
            let plan = self.plan(&name);
            {
                let mut world = lock(&self.world);
                self.signals.note_plan(&name, &plan, &mut world.signal_rng);
            }
            self.require_tokens.insert(
                name.clone(),
                plan[attr::REQUIRE_TOKENS].as_bool().unwrap_or(false),
            );
            let by_decider = self.rng(|r| r.gen_bool(0.3));
            self.register(&name, plan, by_decider);
        }
        self.register_children();
        self.set_up_limits();
    }

    pub(super) fn start_workflow(&mut self, w: usize) {
        let seed = self.rng(|r| r.gen::<u64>());
        self.put_start_request(format!("wf{w}"), seed);
    }

    /// Insert the start request of workflow `name`, its id derived from
    /// `seed` (drawn by the caller from its own stream).
    pub(super) fn put_start_request(&mut self, name: String, seed: u64) -> String {
        let request = WorkflowRequest {
            workflow_request_id: ids::derived_id(&name, &seed.to_string()),
            ..self.request(name)
        };
        self.log(format!("request {}", request.workflow_request_id));
        self.put_raw(
            &self.tables.workflow_request(),
            serde_dynamo::to_item(&request).expect("item"),
        );
        request.workflow_request_id
    }

    /// A request row of workflow `name`, written now, with no id yet: the
    /// attributes `whimbrel start` writes, every other one absent (read
    /// from JSON, so that an attribute added to requests later is absent
    /// here too).
    pub(super) fn request(&self, name: String) -> WorkflowRequest {
        let now = lock(&self.world).now;
        let mut row = json!({
            "workflow_request_id": "",
            "workflow_name": name,
            "when_epoch": now as f64,
            "source": "sim",
        });
        if let Some(at) = self.cfg.row_expiry(now) {
            row[attr::EXPIRES_AT_EPOCH] = json!(at);
        }
        serde_json::from_value(row).expect("a request row")
    }

    /// Insert a request to cancel `wf` (docs/contract.md § 6).
    fn cancel_request(&mut self, wf: &str) {
        let seed = self.rng(|r| r.gen::<u64>());
        let name = ids::name_of(wf).unwrap_or_default().to_string();
        let request = WorkflowRequest {
            workflow_request_id: ids::derived_id(&name, &format!("cancel-{seed}")),
            cancel_workflow_exec_id: Some(wf.to_string()),
            reason: Some("cancelled by a user".into()),
            source: Some("sim user".into()),
            ..self.request(name)
        };
        self.log(format!(
            "user requests the cancel of {wf}: {}",
            request.workflow_request_id
        ));
        self.cancels.insert(
            request.workflow_request_id.clone(),
            CancelRequest {
                workflow_exec_id: wf.to_string(),
                applied_at: None,
            },
        );
        self.put_raw(
            &self.tables.workflow_request(),
            serde_dynamo::to_item(&request).expect("item"),
        );
    }

    /// A user cancels a workflow: mostly by a cancel request row, as
    /// `whimbrel cancel` does, else as older clients did, with tokenless
    /// `CANCEL` rows for its activities.
    pub(super) fn user_cancel(&mut self) {
        let (inv, engine) = self.engine(false, super::Clock::Client, None);
        let wfs = self.checker.workflow_ids(&self.mem, &self.tables);
        if wfs.is_empty() {
            return;
        }
        let pick = self.rng(|r| r.gen_range(0..wfs.len()));
        let wf = wfs[pick].clone();
        if self.rng(|r| r.gen_bool(0.7)) {
            return self.cancel_request(&wf);
        }
        self.log(format!("user cancels {wf} by CANCEL rows"));
        let world = self.world.clone();
        self.exec.spawn(inv, async move {
            let _ = crate::users::cancel(&engine, &world, &wf).await;
        });
    }
}
