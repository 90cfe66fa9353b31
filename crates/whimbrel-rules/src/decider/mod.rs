//! An episodic decider's answer and the rules that accept or refuse it
//! (design.md § 10): the decisions, as SWF's, and their validation against
//! the execution's state, whole, before any of it is written. A refused
//! answer commits nothing but its refusal, whose reason the next decision
//! is shown (design.md § 10.3).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::ActivityState;
use crate::plan::{
    valid_name, Plan, PlanError, PlannedActivity, MAX_NAME_LEN, MAX_RESULT_BYTES,
    MAX_TIMEOUT_SECONDS, MAX_WORKFLOW_INPUT_BYTES, SHAPE_VERSION,
};

/// Most decisions in one answer.
pub const MAX_DECISIONS: usize = 1_000;

/// Largest marker's `details`, bytes of JSON: markers are shown to every
/// later decision, so they stay small.
pub const MAX_MARKER_BYTES: usize = 32_000;

/// Largest answer, bytes of its decisions' JSON: the committed record
/// keeps it in one item of `whimbrel_decision` (DynamoDB's 400 KB, less
/// room for the record's other attributes).
pub const MAX_ANSWER_BYTES: usize = 350_000;

/// Most bytes of names of the nodes open at once in an episodic execution:
/// they are kept on the workflow item (`open_nodes`, and `ended_events`
/// once they end, until a decision sees them), which also holds the
/// input and the result (64,000 bytes each), within DynamoDB's 400 KB
/// (issue 42 A.6; docs/limits.md § 4): 781 names of 128 bytes; their
/// count is bounded too, by [`MAX_OPEN_NODES`].
pub const MAX_OPEN_NODE_BYTES: usize = 100_000;

/// Most nodes open at once in an episodic execution. Every decision
/// request shows each open node's view (a name ≤ 128 bytes, a target ≤
/// 170, its kind, state, attempt and fire time: ≤ 430 bytes of JSON), so
/// 5,000 make at most 2.15 MB, and with 50 markers of 32,000 bytes, the
/// input and one event the request stays within its 5,000,000 bytes
/// (`request::MAX_REQUEST_BYTES`) and Lambda's 6 MB (issue 42 A.5;
/// docs/limits.md § 4, Open 2). Names of 10 bytes would otherwise allow
/// 10,000, whose views could pass 6 MB.
pub const MAX_OPEN_NODES: usize = 5_000;

/// Most marker names per execution: every marker is sent in every
/// decision request, so 50 of at most [`MAX_MARKER_BYTES`] keep the
/// request within [`request::MAX_REQUEST_BYTES`] with its other parts
/// (issue 42 A.10, docs/limits.md § 4). A marker recorded again under its
/// name replaces its value and adds none.
pub const MAX_MARKERS: usize = 50;

/// Most prerequisites of one decided node, and most nodes that depend on
/// one node of an episodic execution: a decided node keeps both lists on
/// its item (`prerequisites`, `dependents`: activity exec ids of up to 166
/// bytes), with no join groups as a static plan's wide joins have, so
/// 2 × 500 ids (166,000 bytes) keep it well within DynamoDB's 400 KB with
/// its history and payload references (issue 42 A.1; docs/limits.md § 4).
/// Wider joins: a static plan, or a child workflow per part.
pub const MAX_DECIDED_LINKS: usize = 500;

/// Refused answers in a row after which the workflow fails with the last
/// reason (design.md § 10.3).
pub const DEFAULT_MAX_REFUSALS: u32 = 5;

/// What a decider answers: a plan (the whole workflow, never consulted
/// again: shapes.md § 2) or decisions (an episodic execution, design.md
/// § 10.1).
#[derive(Debug, Clone, PartialEq)]
pub enum DeciderAnswer {
    /// `{"activities": [...]}`: a static plan.
    Plan(Plan),
    /// `{"decisions": [...]}`: this episode's decisions.
    Decisions(DecisionsAnswer),
}

impl DeciderAnswer {
    /// Read an answer: decisions when it has a `decisions` field, else a
    /// plan.
    ///
    /// Errors: the answer's JSON is not of the shape its field says.
    pub fn from_value(v: Value) -> Result<Self, serde_json::Error> {
        if v.get("decisions").is_some() {
            serde_json::from_value(v).map(DeciderAnswer::Decisions)
        } else {
            serde_json::from_value(v).map(DeciderAnswer::Plan)
        }
    }
}

/// One episode's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionsAnswer {
    /// Shape version; absent means [`SHAPE_VERSION`].
    #[serde(default = "default_version")]
    pub version: u32,
    /// The decisions, applied in order. Empty: nothing to do until the
    /// next event.
    pub decisions: Vec<Decision>,
    /// The events to be consulted on from now; absent keeps the last
    /// answer's (the first answer's default: every kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decide_on: Option<Vec<EventKind>>,
    /// The execution's timeout, seconds, 1..=[`MAX_TIMEOUT_SECONDS`]
    /// (counted from its start, as a plan's `execution_timeout_seconds`:
    /// retries.md § 5): when it passes, the execution ends FAILED and its
    /// open nodes are cancelled. Only the first answer (to
    /// `workflow_started`) sets it; each execution of a chain continued as
    /// new sets its own. A later answer that gives it is refused
    /// ([`DecisionRefusal::ExecutionTimeout`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_timeout_seconds: Option<i64>,
}

impl DecisionsAnswer {
    /// True when its last decision ends the execution.
    pub fn closes(&self) -> bool {
        self.decisions.last().is_some_and(Decision::closes)
    }
}

fn default_version() -> u32 {
    SHAPE_VERSION
}

/// The events a decider may be consulted on (design.md § 10.1). A refused
/// decision is always shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A node ended: an activity, a timer firing, a signal wait, a child.
    ActivityEnded,
    /// A signal no node waited for.
    Signal,
    /// A cancel request for the workflow.
    CancelRequested,
    /// The last answer was refused (shown whatever `decide_on` says).
    DecisionRefused,
}

/// One decision (design.md § 10.5), tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Decision {
    /// Schedule plan nodes of any kind (an activity, a `wait` timer, a
    /// `signal` wait, a child `workflow`), each with a name new to the
    /// execution, depending on nodes scheduled before or here.
    Schedule {
        /// The nodes, in the activity shape of a plan.
        activities: Vec<PlannedActivity>,
    },
    /// Cancel nodes not ended, by name (a timer or a signal wait too).
    Cancel {
        /// The nodes' names.
        names: Vec<String>,
    },
    /// Keep a named JSON value, shown to every later decision (the latest
    /// per name).
    RecordMarker {
        /// `[A-Za-z0-9_.-]`, at most [`MAX_NAME_LEN`].
        name: String,
        /// At most [`MAX_MARKER_BYTES`] of JSON.
        #[serde(default)]
        details: Value,
    },
    /// End the workflow COMPLETED with `result`.
    CompleteWorkflow {
        /// At most [`MAX_RESULT_BYTES`] of JSON.
        #[serde(default)]
        result: Value,
    },
    /// End the workflow FAILED with `reason`.
    FailWorkflow {
        /// The workflow's `error`.
        reason: String,
    },
    /// End the workflow CANCELLED.
    CancelWorkflow {
        /// Why, kept as the workflow's `error`.
        #[serde(default)]
        reason: Option<String>,
    },
    /// End this execution and start the next of its chain with `input`
    /// (design.md § 10.6).
    ContinueAsNew {
        /// At most [`MAX_WORKFLOW_INPUT_BYTES`] of JSON.
        #[serde(default)]
        input: Value,
    },
}

impl Decision {
    /// True for a decision that ends the execution.
    pub fn closes(&self) -> bool {
        matches!(
            self,
            Decision::CompleteWorkflow { .. }
                | Decision::FailWorkflow { .. }
                | Decision::CancelWorkflow { .. }
                | Decision::ContinueAsNew { .. }
        )
    }
}

/// What an answer is judged against, as read at its commit.
#[derive(Debug, Clone, Default)]
pub struct DecisionContext {
    /// The execution's nodes the answer names (scheduled, depended on or
    /// cancelled), at least: their states by name. A name absent is new
    /// to the execution ([`names_in`] lists those to read).
    pub state_by_name: HashMap<String, ActivityState>,
    /// How many nodes the execution has ([`crate::attr::ACTIVITY_COUNT`]).
    pub node_count: usize,
    /// Bytes of the names of its open nodes ([`crate::attr::OPEN_NODES`]),
    /// bounded by [`MAX_OPEN_NODE_BYTES`].
    pub open_bytes: usize,
    /// How many nodes are open, bounded by [`MAX_OPEN_NODES`].
    pub open_count: usize,
    /// The names of the markers it has recorded (read only when the
    /// answer records one), at most [`MAX_MARKERS`].
    pub markers: std::collections::BTreeSet<String>,
    /// Events were appended after those this decision was shown.
    pub unseen_events: bool,
    /// How many dependents each node the answer names has already (its
    /// `dependents` list; absent: none), bounded by [`MAX_DECIDED_LINKS`].
    pub dependents_by_name: HashMap<String, usize>,
    /// Now, epoch seconds (a timer's `until` is judged against it).
    pub now: i64,
    /// The answer is the execution's first (to `workflow_started`): only
    /// it may set `execution_timeout_seconds`.
    pub first: bool,
}

/// Why an answer is refused: the reason recorded and shown to the next
/// decision (design.md § 10.3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionRefusal {
    /// Unsupported shape version.
    #[error("decisions version {0} is not supported (expected {SHAPE_VERSION})")]
    Version(u32),
    /// More than [`MAX_DECISIONS`].
    #[error("{0} decisions; at most {MAX_DECISIONS} are allowed in one answer")]
    TooMany(usize),
    /// A `schedule` with no node.
    #[error("decision {0}: schedule has no activities")]
    ScheduleNothing(usize),
    /// The nodes scheduled break a plan rule (design.md § 4), judged with
    /// the execution's nodes: a name used before is a duplicate.
    #[error("decision {index}: {error}")]
    Schedule {
        /// The decision's index in the answer.
        index: usize,
        /// The plan rule broken.
        error: PlanError,
    },
    /// A cancel of a node the execution does not have.
    #[error("decision {index}: cancel of unknown node {name:?}")]
    CancelUnknown {
        /// The decision's index.
        index: usize,
        /// The name.
        name: String,
    },
    /// A prerequisite that ended other than COMPLETED: the node could
    /// never be released.
    #[error(
        "decision {index}: activity {activity:?} depends on {prerequisite:?}, which ended {state}"
    )]
    PrerequisiteEnded {
        /// The decision's index.
        index: usize,
        /// The node scheduled.
        activity: String,
        /// Its prerequisite.
        prerequisite: String,
        /// The state the prerequisite ended in.
        state: ActivityState,
    },
    /// A cancel of a node that has ended.
    #[error("decision {index}: node {name:?} has ended; it cannot be cancelled")]
    CancelEnded {
        /// The decision's index.
        index: usize,
        /// The name.
        name: String,
    },
    /// A bad marker name, or details too large.
    #[error("decision {index}: marker {name:?} needs a name of 1-{MAX_NAME_LEN} characters of A-Z a-z 0-9 _ . - and at most {MAX_MARKER_BYTES} bytes of details")]
    BadMarker {
        /// The decision's index.
        index: usize,
        /// The name given.
        name: String,
    },
    /// A closing decision not last, or a second one.
    #[error("decision {0} ends the workflow but is not the last decision")]
    CloseNotLast(usize),
    /// A closing decision while events arrived during the decision (SWF's
    /// `UNHANDLED_DECISION`).
    #[error("events arrived while the decider decided; decide on them before ending the workflow")]
    UnhandledEvents,
    /// An `execution_timeout_seconds` out of bounds, or given after the
    /// first answer.
    #[error("execution_timeout_seconds is {value}: {why}")]
    ExecutionTimeout {
        /// The value given.
        value: i64,
        /// Why it is refused.
        why: String,
    },
    /// A marker past [`MAX_MARKERS`] names.
    #[error("decision {index}: marker {name:?} would be the execution's marker number {count}; at most {MAX_MARKERS} are allowed (record again under a name in use to replace its value)")]
    TooManyMarkers {
        /// The decision's index.
        index: usize,
        /// The new marker's name.
        name: String,
        /// The markers it would make.
        count: usize,
    },
    /// More nodes open at once than [`MAX_OPEN_NODES`].
    #[error("decision {index}: {count} nodes would be open at once; at most {MAX_OPEN_NODES} are allowed (each is shown in every decision request)")]
    TooManyOpen {
        /// The decision's index in the answer.
        index: usize,
        /// The nodes that would be open.
        count: usize,
    },
    /// A decided node past [`MAX_DECIDED_LINKS`] prerequisites, or a node
    /// past that many dependents.
    #[error("decision {index}: activity {name:?} would have {count} {what}; at most {MAX_DECIDED_LINKS} are allowed for a decided node (a wider join needs a static plan or child workflows)")]
    TooManyLinks {
        /// The decision's index.
        index: usize,
        /// The node.
        name: String,
        /// `prerequisites` or `dependents`.
        what: &'static str,
        /// How many it would have.
        count: usize,
    },
    /// A result, input or reason out of bounds.
    #[error("decision {index}: {what} is {size} bytes; at most {max} are allowed")]
    TooLarge {
        /// The decision's index.
        index: usize,
        /// What is too large.
        what: &'static str,
        /// Its size, bytes of JSON.
        size: usize,
        /// The limit, bytes.
        max: usize,
    },
    /// A result, input or marker's details nested deeper than
    /// [`crate::payloads::MAX_JSON_DEPTH`].
    #[error("decision {index}: {why}")]
    TooDeep {
        /// The decision's index.
        index: usize,
        /// The reason (`payloads::too_deep`).
        why: String,
    },
}

/// An answer's `execution_timeout_seconds` of `value`, in the first answer
/// when `first`: within 1..=[`MAX_TIMEOUT_SECONDS`], and in the first
/// answer only (the deadline is set once, when the execution is planned).
fn execution_timeout(value: i64, first: bool) -> Result<(), DecisionRefusal> {
    let why = if !first {
        "only the first answer (to workflow_started) sets the execution timeout".to_string()
    } else if !(1..=MAX_TIMEOUT_SECONDS).contains(&value) {
        format!("it must be within 1..={MAX_TIMEOUT_SECONDS} seconds")
    } else {
        return Ok(());
    };
    Err(DecisionRefusal::ExecutionTimeout { value, why })
}

/// Judge `answer` whole against `ctx` (design.md § 10.5): every decision
/// valid, nodes scheduled as a plan would be, cancels of open nodes, at
/// most one closing decision, last, and none while events went unseen.
///
/// Errors: the first [`DecisionRefusal`] found.
pub fn validate(answer: &DecisionsAnswer, ctx: &DecisionContext) -> Result<(), DecisionRefusal> {
    if answer.version != SHAPE_VERSION {
        return Err(DecisionRefusal::Version(answer.version));
    }
    if answer.decisions.len() > MAX_DECISIONS {
        return Err(DecisionRefusal::TooMany(answer.decisions.len()));
    }
    if let Some(value) = answer.execution_timeout_seconds {
        execution_timeout(value, ctx.first)?;
    }
    let size = serde_json::to_string(&answer.decisions).map_or(0, |j| j.len());
    if size > MAX_ANSWER_BYTES {
        return Err(DecisionRefusal::TooLarge {
            index: answer.decisions.len(),
            what: "the answer",
            size,
            max: MAX_ANSWER_BYTES,
        });
    }
    let scheduled: usize = (answer.decisions.iter())
        .map(|d| match d {
            Decision::Schedule { activities } => activities.len(),
            _ => 0,
        })
        .sum();
    if ctx.node_count + scheduled > crate::plan::MAX_ACTIVITIES {
        return Err(DecisionRefusal::Schedule {
            index: 0,
            error: PlanError::TooManyActivities(ctx.node_count + scheduled),
        });
    }
    open_bytes_within(answer, ctx.open_bytes)?;
    open_count_within(answer, ctx.open_count)?;
    markers_within(answer, &ctx.markers)?;
    links_within(answer, &ctx.dependents_by_name)?;
    let last = answer.decisions.len().saturating_sub(1);
    let mut names = ctx.state_by_name.clone();
    for (index, d) in answer.decisions.iter().enumerate() {
        if d.closes() && index != last {
            return Err(DecisionRefusal::CloseNotLast(index));
        }
        if d.closes() && ctx.unseen_events {
            return Err(DecisionRefusal::UnhandledEvents);
        }
        check_one(index, d, &mut names, ctx.now)?;
    }
    Ok(())
}

/// The names of the nodes `answer` schedules, added to the `open` bytes of
/// names open already, within [`MAX_OPEN_NODE_BYTES`].
///
/// Errors: [`DecisionRefusal::TooLarge`] at the schedule decision that
/// passes the limit.
fn open_bytes_within(answer: &DecisionsAnswer, open: usize) -> Result<(), DecisionRefusal> {
    let mut size = open;
    for (index, d) in answer.decisions.iter().enumerate() {
        if let Decision::Schedule { activities } = d {
            size += activities.iter().map(|a| a.name.len()).sum::<usize>();
            if size > MAX_OPEN_NODE_BYTES {
                return Err(DecisionRefusal::TooLarge {
                    index,
                    what: "the list of open nodes (their names)",
                    size,
                    max: MAX_OPEN_NODE_BYTES,
                });
            }
        }
    }
    Ok(())
}

/// The nodes `answer` schedules, added to those open already (`open`),
/// within [`MAX_OPEN_NODES`] (issue 42 A.5: each is shown in every
/// decision request).
///
/// Errors: [`DecisionRefusal::TooManyOpen`] at the first decision past it.
fn open_count_within(answer: &DecisionsAnswer, open: usize) -> Result<(), DecisionRefusal> {
    let mut count = open;
    for (index, d) in answer.decisions.iter().enumerate() {
        if let Decision::Schedule { activities } = d {
            count += activities.len();
            if count > MAX_OPEN_NODES {
                return Err(DecisionRefusal::TooManyOpen { index, count });
            }
        }
    }
    Ok(())
}

/// The marker names `answer` records, added to those recorded already
/// (`known`), within [`MAX_MARKERS`].
///
/// Errors: [`DecisionRefusal::TooManyMarkers`] at the first new name past
/// it.
fn markers_within(
    answer: &DecisionsAnswer,
    known: &std::collections::BTreeSet<String>,
) -> Result<(), DecisionRefusal> {
    let mut names = known.clone();
    for (index, d) in answer.decisions.iter().enumerate() {
        if let Decision::RecordMarker { name, .. } = d {
            if names.insert(name.clone()) && names.len() > MAX_MARKERS {
                return Err(DecisionRefusal::TooManyMarkers {
                    index,
                    name: name.clone(),
                    count: names.len(),
                });
            }
        }
    }
    Ok(())
}

/// Each node `answer` schedules depends on at most [`MAX_DECIDED_LINKS`]
/// nodes, and each node depended on has at most that many dependents,
/// counting those it has (`known`) and the answer's.
///
/// Errors: [`DecisionRefusal::TooManyLinks`] at the decision that passes
/// either.
fn links_within(
    answer: &DecisionsAnswer,
    known: &HashMap<String, usize>,
) -> Result<(), DecisionRefusal> {
    let mut dependents = known.clone();
    for (index, d) in answer.decisions.iter().enumerate() {
        let Decision::Schedule { activities } = d else {
            continue;
        };
        for a in activities {
            let too_many = |name: &str, what, count| DecisionRefusal::TooManyLinks {
                index,
                name: name.into(),
                what,
                count,
            };
            let distinct: std::collections::BTreeSet<&String> = a.depends_on.iter().collect();
            if distinct.len() > MAX_DECIDED_LINKS {
                return Err(too_many(&a.name, "prerequisites", distinct.len()));
            }
            for p in distinct {
                let count = dependents.entry(p.clone()).or_default();
                *count += 1;
                if *count > MAX_DECIDED_LINKS {
                    return Err(too_many(p, "dependents", *count));
                }
            }
        }
    }
    Ok(())
}

/// Every node name `answer` refers to: scheduled, depended on, or
/// cancelled. The executor reads these nodes' states for
/// [`DecisionContext::state_by_name`], so judging an answer costs what
/// the answer names, not what the execution has.
pub fn names_in(answer: &DecisionsAnswer) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for d in &answer.decisions {
        match d {
            Decision::Schedule { activities } => {
                for a in activities {
                    names.insert(a.name.clone());
                    names.extend(a.depends_on.iter().cloned());
                }
            }
            Decision::Cancel { names: cancel } => names.extend(cancel.iter().cloned()),
            _ => {}
        }
    }
    names
}

/// One decision against the nodes as the answer's earlier decisions left
/// them (`names`: name → state), which a `schedule` extends and a
/// `cancel` ends.
fn check_one(
    index: usize,
    d: &Decision,
    names: &mut HashMap<String, ActivityState>,
    now: i64,
) -> Result<(), DecisionRefusal> {
    let too_large = |what, v: &Value, max| {
        let size = v.to_string().len();
        (size > max).then_some(DecisionRefusal::TooLarge {
            index,
            what,
            size,
            max,
        })
    };
    let deep = |what: &str, v: &Value| {
        let why = crate::payloads::too_deep(what, v)?;
        Some(DecisionRefusal::TooDeep { index, why })
    };
    let nested = match d {
        Decision::RecordMarker { details, .. } => deep("marker details", details),
        Decision::CompleteWorkflow { result } => deep("result", result),
        Decision::ContinueAsNew { input } => deep("input", input),
        _ => None,
    };
    if let Some(refused) = nested {
        return Err(refused);
    }
    let refused = match d {
        Decision::Schedule { activities } => return schedule(index, activities, names, now),
        Decision::Cancel { names: cancel } => return cancels(index, cancel, names),
        Decision::RecordMarker { name, details } => (!valid_name(name)
            || details.to_string().len() > MAX_MARKER_BYTES)
            .then(|| DecisionRefusal::BadMarker {
                index,
                name: name.clone(),
            }),
        Decision::CompleteWorkflow { result } => too_large("result", result, MAX_RESULT_BYTES),
        Decision::ContinueAsNew { input } => too_large("input", input, MAX_WORKFLOW_INPUT_BYTES),
        Decision::FailWorkflow { .. } | Decision::CancelWorkflow { .. } => None,
    };
    refused.map_or(Ok(()), Err)
}

/// A `schedule`: its nodes validated as a plan together with every node
/// the execution has (as stand-ins that run code), so a name used before
/// is a duplicate, a prerequisite must exist, and the execution stays
/// within [`crate::plan::MAX_ACTIVITIES`]; and no prerequisite may have
/// ended other than COMPLETED.
fn schedule(
    index: usize,
    activities: &[PlannedActivity],
    names: &mut HashMap<String, ActivityState>,
    now: i64,
) -> Result<(), DecisionRefusal> {
    if activities.is_empty() {
        return Err(DecisionRefusal::ScheduleNothing(index));
    }
    let refused = |error| DecisionRefusal::Schedule { index, error };
    let earlier = names.keys().map(|name| PlannedActivity {
        name: name.clone(),
        lambda: "scheduled-earlier".into(),
        ..PlannedActivity::default()
    });
    let together = Plan::of(earlier.chain(activities.iter().cloned()).collect());
    together.validate().map_err(refused)?;
    Plan::of(activities.to_vec())
        .check_at(now)
        .map_err(refused)?;
    for a in activities {
        let ended = |p: &&String| {
            names
                .get(*p)
                .filter(|s| s.is_terminal() && **s != ActivityState::Completed)
        };
        if let Some((p, state)) = a.depends_on.iter().find_map(|p| ended(&p).map(|s| (p, *s))) {
            return Err(DecisionRefusal::PrerequisiteEnded {
                index,
                activity: a.name.clone(),
                prerequisite: p.clone(),
                state,
            });
        }
    }
    names.extend(
        activities
            .iter()
            .map(|a| (a.name.clone(), ActivityState::Requested)),
    );
    Ok(())
}

/// A `cancel`: each name a node not ended (a name listed twice in one
/// `cancel` is cancelled once; a later `cancel` of it is refused, as of
/// any ended node).
fn cancels(
    index: usize,
    cancel: &[String],
    names: &mut HashMap<String, ActivityState>,
) -> Result<(), DecisionRefusal> {
    for name in cancel {
        match names.get(name) {
            None => {
                return Err(DecisionRefusal::CancelUnknown {
                    index,
                    name: name.clone(),
                })
            }
            Some(s) if s.is_terminal() => {
                return Err(DecisionRefusal::CancelEnded {
                    index,
                    name: name.clone(),
                })
            }
            Some(_) => {}
        }
    }
    for name in cancel {
        names.insert(name.clone(), ActivityState::Cancelled);
    }
    Ok(())
}

pub mod request;

pub use request::{DecisionRequest, EventView, NodeView};

#[cfg(test)]
mod tests;
