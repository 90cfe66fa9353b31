//! The simulation's episodic decider (design.md § 10): a Lambda that
//! runs rounds of nodes, one round at a time, and keeps its progress in a
//! marker, as a user's decider would. It answers through the core's own
//! decider helper ([`whimbrel_core::deciding::answer`]), draws its
//! choices from the world's episode stream
//! ([`crate::shared::Shared::episode_rng`]), and is not deterministic: two
//! attempts of one decision may answer differently, and only the one in
//! flight may commit.
//!
//! Each answer is kept ([`Given`]) for the checks of `check/episodes.rs`:
//! what a committed decision recorded must be an answer the decider gave
//! to that attempt, and only committed answers may take effect.

use std::sync::Mutex;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use whimbrel_core::contract::ActivityState;
use whimbrel_core::decider::{Decision, DecisionRequest, DecisionsAnswer, EventKind};
use whimbrel_core::deciding::{self, Decider};
use whimbrel_core::plan::{DeciderRequest, ParentClose, PlannedActivity, MAX_NAME_LEN};

use crate::world::{SIGNAL_NAMES, TASK_LIST};

/// The marker the decider keeps its progress in: `{"round": r}`.
pub const PROGRESS_MARKER: &str = "progress";

/// One episodic workflow's decider, as drawn at set-up.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeSpec {
    /// Rounds of nodes per execution (1 to 4).
    pub rounds: u64,
    /// Nodes per round (1 to 3).
    pub width: usize,
    /// Executions after the first, each by `continue_as_new` (0 to 2).
    pub continues: u64,
    /// Whether the decider is consulted on cancel requests (else a cancel
    /// request ends the execution at once).
    pub on_cancel: bool,
    /// The child workflows its rounds may start (a node in seven that
    /// would run a Lambda starts one instead, drawn from the extra episode
    /// stream); none by [`EpisodeSpec::draw`].
    pub children: Vec<String>,
    /// The execution timeout its first answer sets, seconds; none by
    /// [`EpisodeSpec::draw`].
    pub execution_timeout: Option<i64>,
    /// A wide first round instead of a drawn one (issue 42 C.1): `fan`,
    /// then this many nodes of 128-byte names that each depend on it,
    /// then `join`, which depends on them all; at 500, the most
    /// dependents and prerequisites a decided node keeps. None by
    /// [`EpisodeSpec::draw`].
    pub wide: Option<usize>,
}

impl EpisodeSpec {
    /// Draw a spec from `r`.
    pub fn draw(r: &mut impl Rng) -> EpisodeSpec {
        EpisodeSpec {
            rounds: r.gen_range(1..=4),
            width: r.gen_range(1..=3),
            continues: r.gen_range(0..=2),
            on_cancel: r.gen_bool(0.7),
            children: vec![],
            execution_timeout: None,
            wide: None,
        }
    }

    /// The result of the chain's last execution when it completes.
    pub fn result(&self) -> Value {
        json!({"rounds": self.rounds, "continued": self.continues})
    }
}

/// A wide first round ([`EpisodeSpec::wide`]): `fan`, `width` Lambda
/// nodes of 128-byte names depending on it, and `join` depending on them
/// all.
fn wide_round(width: usize) -> Vec<PlannedActivity> {
    let step = |name: &str, deps: Vec<String>| PlannedActivity {
        depends_on: deps,
        ..deciding::lambda_node(name, "sim-activity", json!({"wide": width}))
    };
    let names: Vec<String> = (0..width)
        .map(|i| format!("w{i:04}{}", "n".repeat(MAX_NAME_LEN - 5)))
        .collect();
    let mut nodes = vec![step("fan", vec![])];
    nodes.extend(names.iter().map(|n| step(n, vec!["fan".into()])));
    nodes.push(step("join", names));
    nodes
}

/// An answer the decider gave.
#[derive(Debug, Clone)]
pub struct Given {
    /// The execution.
    pub workflow_exec_id: String,
    /// The attempt asked (`(exec)::d(n)::a(k)`); the first answer's is
    /// decision 1's first attempt.
    pub decision_id: String,
    /// The answer's decisions, as JSON (what the record keeps).
    pub decisions: Value,
    /// Whether it was meant to be refused.
    pub invalid: bool,
    /// The event seqs the request showed.
    pub seqs: Vec<u64>,
    /// World time it was given.
    pub at: i64,
}

/// The decider for one request: the spec, the episode stream, and the
/// extra episode stream its child nodes are drawn from.
struct SimDecider<'a> {
    spec: &'a EpisodeSpec,
    rng: Mutex<&'a mut ChaCha8Rng>,
    extra: Mutex<&'a mut ChaCha8Rng>,
    invalid: Mutex<bool>,
}

/// The random streams an answer draws from: the world's episode stream,
/// and its extra episode stream for the child nodes it schedules
/// ([`EpisodeSpec::children`]).
pub struct Streams<'a> {
    /// Every choice but child nodes.
    pub episode: &'a mut ChaCha8Rng,
    /// Which nodes start a child, and how.
    pub extra: &'a mut ChaCha8Rng,
}

/// Answer `payload` (either request type) for `spec`, drawing from
/// `streams`: the answer's JSON, and what to keep of it.
///
/// Errors: the payload is not a decider request.
pub fn answer(
    spec: &EpisodeSpec,
    payload: &Value,
    streams: Streams<'_>,
    now: i64,
) -> Result<(Value, Given), String> {
    let rng = streams.episode;
    let malformed = rng.gen_bool(0.02) && payload["type"] == "decision";
    let decider = SimDecider {
        spec,
        rng: Mutex::new(rng),
        extra: Mutex::new(streams.extra),
        invalid: Mutex::new(false),
    };
    let mut out = deciding::answer(&decider, payload.clone()).map_err(|e| e.to_string())?;
    let mut invalid = *decider.invalid.lock().expect("lock");
    if malformed {
        // Not an answer's shape at all: refused with the parse error.
        out = json!({"decisions": [{"type": "launch_rockets"}]});
        invalid = true;
    }
    let exec = payload["workflow_exec_id"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let decision_id = attempt_asked(payload);
    let seqs = (payload["events"].as_array().into_iter().flatten())
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    let given = Given {
        workflow_exec_id: exec,
        decision_id,
        decisions: out["decisions"].clone(),
        invalid,
        seqs,
        at: now,
    };
    Ok((out, given))
}

/// The attempt `payload` asks for: its `decision_id`, or for the start's
/// request the first attempt of decision 1 (whose record names it so).
pub fn attempt_asked(payload: &Value) -> String {
    let exec = payload["workflow_exec_id"].as_str().unwrap_or("");
    payload["decision_id"]
        .as_str()
        .map_or_else(|| format!("{exec}::d1::a1"), str::to_string)
}

impl SimDecider<'_> {
    fn draw<T>(&self, f: impl FnOnce(&mut ChaCha8Rng) -> T) -> T {
        f(&mut self.rng.lock().expect("lock"))
    }

    /// Round `round`'s nodes: activities on the Lambda or the task list,
    /// timers and signal waits with a timeout; some depend on one before
    /// them in the round.
    fn round_nodes(&self, round: u64) -> Vec<PlannedActivity> {
        if let (1, Some(width)) = (round, self.spec.wide) {
            return wide_round(width);
        }
        (0..self.spec.width)
            .map(|i| {
                let name = format!("r{round}n{i}");
                let (kind, dep, secs, signal) = self.draw(|r| {
                    let kind = r.gen_range(0..100);
                    let dep = (i > 0 && r.gen_bool(0.4)).then(|| r.gen_range(0..i));
                    let signal = SIGNAL_NAMES[r.gen_range(0..SIGNAL_NAMES.len())];
                    (kind, dep, r.gen_range(0..=90), signal)
                });
                let input = json!({"round": round, "i": i});
                let mut node = match kind {
                    0..=54 => self.lambda_or_child(&name, input),
                    55..=74 => deciding::task_node(&name, TASK_LIST, input),
                    75..=89 => deciding::timer_node(&name, secs),
                    _ => PlannedActivity {
                        start_to_close_seconds: Some(60 + secs * 5),
                        ..deciding::signal_node(&name, signal)
                    },
                };
                node.depends_on = dep.map(|d| format!("r{round}n{d}")).into_iter().collect();
                node
            })
            .collect()
    }

    /// A node running the activity Lambda, or (one in seven, when the
    /// spec names child workflows) starting one of them, closed with its
    /// parent or abandoned.
    fn lambda_or_child(&self, name: &str, input: Value) -> PlannedActivity {
        let children = &self.spec.children;
        let child = (!children.is_empty())
            .then(|| {
                let mut r = self.extra.lock().expect("lock");
                r.gen_bool(1.0 / 7.0).then(|| {
                    let workflow = &children[r.gen_range(0..children.len())];
                    let close = [ParentClose::Cancel, ParentClose::Abandon][r.gen_range(0..2)];
                    (workflow.clone(), close)
                })
            })
            .flatten();
        match child {
            Some((workflow, close)) => PlannedActivity {
                parent_close: Some(close),
                ..deciding::child_node(name, &workflow, input)
            },
            None => deciding::lambda_node(name, "sim-activity", input),
        }
    }

    /// The decisions that start round `round`, or end the execution after
    /// the last one (`continued` executions before this one).
    fn next_round(&self, round: u64, continued: u64) -> Vec<Decision> {
        if round > self.spec.rounds {
            return vec![if continued < self.spec.continues {
                Decision::ContinueAsNew {
                    input: json!({"continued": continued + 1}),
                }
            } else {
                Decision::CompleteWorkflow {
                    result: self.spec.result(),
                }
            }];
        }
        vec![
            Decision::Schedule {
                activities: self.round_nodes(round),
            },
            Decision::RecordMarker {
                name: PROGRESS_MARKER.into(),
                details: json!({"round": round}),
            },
        ]
    }

    /// One answer in seven while nodes are open: a node of this round
    /// that depends on one scheduled by an earlier decision and still open
    /// (linked to it; released or cancelled by it, whichever ended first),
    /// named after the first event this decision saw (unique: no two
    /// accepted decisions see the same first event).
    fn extra_node(&self, request: &DecisionRequest, round: u64) -> Option<Decision> {
        let first = request.events.first()?.seq;
        let pick = self.draw(|r| {
            r.gen_bool(1.0 / 7.0)
                .then(|| r.gen_range(0..request.open.len()))
        })?;
        let name = format!("x{first}");
        let input = json!({"round": round, "extra": first});
        let mut node = deciding::lambda_node(&name, "sim-activity", input);
        node.depends_on = vec![request.open[pick].name.clone()];
        Some(deciding::schedule(node))
    }

    /// An answer the engine must refuse: a node that depends on one the
    /// execution does not have.
    fn invalid(&self) -> Vec<Decision> {
        *self.invalid.lock().expect("lock") = true;
        let mut node = deciding::timer_node("refused", 1);
        node.depends_on = vec!["no-such-node".into()];
        vec![deciding::schedule(node)]
    }
}

impl Decider for SimDecider<'_> {
    fn start(&self, request: &DeciderRequest) -> DecisionsAnswer {
        let continued = request.input["continued"].as_u64().unwrap_or(0);
        let mut answer = deciding::decisions(self.next_round(1, continued));
        let mut kinds = vec![EventKind::ActivityEnded, EventKind::Signal];
        if self.spec.on_cancel {
            kinds.push(EventKind::CancelRequested);
        }
        answer.decide_on = Some(kinds);
        answer.execution_timeout_seconds = self.spec.execution_timeout;
        answer
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let continued = request.input["continued"].as_u64().unwrap_or(0);
        let round = request
            .markers
            .get(PROGRESS_MARKER)
            .map_or(0, |m| m["round"].as_u64().unwrap_or(0));
        let events = &request.events;
        if let Some(e) = events.iter().find(|e| e.kind == EventKind::CancelRequested) {
            let reason = format!(
                "the decider cancels: {}",
                e.reason.clone().unwrap_or_default()
            );
            return deciding::decisions(vec![Decision::CancelWorkflow {
                reason: Some(reason),
            }]);
        }
        let (invalid, fail_on_failure, cancel_one, note) = self.draw(|r| {
            (
                r.gen_bool(0.05),
                r.gen_bool(0.3),
                r.gen_bool(0.1),
                r.gen_bool(0.2),
            )
        });
        if invalid {
            return deciding::decisions(self.invalid());
        }
        let failed = deciding::ended(request).find(|e| {
            matches!(
                e.state,
                Some(ActivityState::Failed | ActivityState::TimedOut)
            )
        });
        if let (Some(e), true) = (failed, fail_on_failure) {
            let node = e.node.clone().unwrap_or_default();
            return deciding::decisions(vec![Decision::FailWorkflow {
                reason: format!("node {node} did not complete"),
            }]);
        }
        if request.open.is_empty() {
            return deciding::decisions(self.next_round(round + 1, continued));
        }
        let mut decisions = vec![];
        if cancel_one {
            let pick = self.draw(|r| r.gen_range(0..request.open.len()));
            decisions.push(Decision::Cancel {
                names: vec![request.open[pick].name.clone()],
            });
        }
        if note {
            // Every fourth near the largest details a marker may keep
            // (issue 42 C.1; `MAX_MARKER_BYTES`, shown in every request).
            let pad = if events.len() % 4 == 3 { 31_000 } else { 0 };
            decisions.push(Decision::RecordMarker {
                name: "seen".into(),
                details: json!({"events": events.len(), "pad": "m".repeat(pad)}),
            });
        }
        decisions.extend(self.extra_node(request, round));
        deciding::decisions(decisions)
    }
}
