//! One transition as one pure step: from the activity item read, the
//! transition asked, who asks and the time, the one outcome the executor
//! performs (contract: Transitions; design.md § 3.7, every step is safe
//! to repeat). The executor writes what the outcome says and, when a
//! condition fails, reads the item again and asks again.

use crate::config::EngineConfig;
use crate::contract::{self, ActivityState, Actor, Transition};
use crate::keys::{self, Tables};
use crate::model::{ActivityExec, ParkedEvent};
use crate::plan::MAX_OUTPUT_BYTES;
use crate::write::UpdateRequest;

use super::{
    cap_error, count_end, report_actor_by_hash, retry_after, retry_update, transition_update,
    Change, Details,
};

/// Who asks for a transition.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// An activity's report: its attempt and token, when it gave them.
    Report {
        /// The attempt the report names (from the launch payload).
        attempt: Option<u32>,
        /// The hash ([`crate::ids::token_hash`]) of the attempt token the
        /// report carries: the token is hashed where the report is read,
        /// so no decision can store it.
        token_hash: Option<String>,
    },
    /// The engine itself (cancel propagation, launch refused, not started).
    Engine,
    /// The heartbeat monitor (TIMED_OUT).
    Monitor,
}

/// What one transition comes to on the item as read.
#[derive(Debug, Clone, PartialEq)]
pub enum TransitionStep {
    /// The event caused the item's last change (a redelivery): resume what
    /// that write owes (parked reports, side effects).
    Redelivered,
    /// The event was applied earlier and superseded since: nothing to do.
    Superseded,
    /// The event is parked already and the state still does not allow it.
    AlreadyParked,
    /// Park the report on the item until its state catches up.
    Park(ParkedEvent),
    /// The contract (or fencing) refuses it for good, with the reason.
    Reject(String),
    /// A failed attempt with attempts left: write `update`, which queues the
    /// next attempt for `at` (epoch seconds).
    Retry {
        /// When the next attempt may launch, epoch seconds.
        at: i64,
        /// The conditional update.
        update: UpdateRequest,
    },
    /// Apply the transition: write `update` (with `count` in the same
    /// transaction when present) and run what `next` owes.
    Apply {
        /// Who the contract took the transition from.
        actor: Actor,
        /// The state reached.
        next: ActivityState,
        /// The activity item's conditional update.
        update: UpdateRequest,
        /// The workflow's end count, for items without a count slot.
        count: Option<UpdateRequest>,
        /// The output row to put before `update` (a COMPLETED whose output
        /// is kept off the item: the engine's copy, which `update` names).
        output_row: Option<Box<crate::model::OutputRow>>,
    },
}

/// The one outcome of `transition` from `source` on `exec` at `now` (epoch
/// seconds), caused by `event_id` with `details`. Pure.
pub fn transition_step(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    ask: (Transition, &Source, &str),
    details: &Details,
    now: i64,
) -> TransitionStep {
    let (transition, source, event_id) = ask;
    if exec.is_last_event(event_id) {
        return TransitionStep::Redelivered;
    }
    let id = &exec.activity_exec_id;
    if super::redrive::applied_before(exec, event_id) {
        return TransitionStep::Superseded;
    }
    let parked = exec
        .trail
        .parked
        .iter()
        .any(|p| p.activity_event_id == event_id);
    if parked && !applicable(exec, transition, source) {
        return TransitionStep::AlreadyParked;
    }
    let (actor, next) = match next_state(exec, transition, source) {
        Ok(decided) => decided,
        Err(Refusal::Park) => return park_step(exec, transition, source, event_id, details),
        Err(Refusal::Reject(why)) => return TransitionStep::Reject(format!("{id}: {why}")),
    };
    let change = Change {
        transition,
        next,
        event_id,
    };
    if let Some(at) = retry_after(exec, &change, details, !details.no_retry, now) {
        let update = retry_update(tables, cfg, exec, &change, details, at, now);
        return TransitionStep::Retry { at, update };
    }
    let update = transition_update(tables, cfg, exec, change, details, now);
    // An item with a count slot is counted by its settle; an older one in
    // the transaction of its terminal write; a decided node nowhere.
    let count = (next.is_terminal()
        && exec.links.count_slot.is_none()
        && exec.links.scheduled_by.is_none())
    .then(|| count_end(tables, exec, next, details.error.as_deref()));
    let output_row = (next == ActivityState::Completed)
        .then(|| crate::payloads::output_row(exec, details))
        .flatten()
        .map(Box::new);
    TransitionStep::Apply {
        actor,
        next,
        update,
        count,
        output_row,
    }
}

/// Why the contract does not take a transition now.
enum Refusal {
    /// Not yet: a report to park until the state catches up.
    Park,
    /// Never, with the reason.
    Reject(String),
}

/// Who takes `transition` and the state it leads to, by the contract table.
fn next_state(
    exec: &ActivityExec,
    transition: Transition,
    source: &Source,
) -> Result<(Actor, ActivityState), Refusal> {
    let (actor, next) = match source {
        Source::Report {
            attempt,
            token_hash,
        } => {
            let actor = report_actor_by_hash(exec, *attempt, token_hash.as_deref())
                .map_err(|r| Refusal::Reject(r.to_string()))?;
            let tokened = exec.attempt.token_hash.is_some();
            let next = contract::next_state_of_report(
                exec.runner.kind(),
                exec.state,
                tokened,
                transition,
                actor,
            );
            (actor, next)
        }
        Source::Engine => (
            Actor::Engine,
            contract::next_state(exec.runner.kind(), exec.state, transition, Actor::Engine),
        ),
        Source::Monitor => (
            Actor::Monitor,
            contract::next_state(exec.runner.kind(), exec.state, transition, Actor::Monitor),
        ),
    };
    match next {
        Ok(next) => Ok((actor, next)),
        Err(e) if e.is_retryable() && matches!(source, Source::Report { .. }) => Err(Refusal::Park),
        Err(e) => Err(Refusal::Reject(e.to_string())),
    }
}

/// Park a report that is not valid yet, once: a client repeating the same
/// report (same transition, attempt and token) adds nothing, and its
/// outputs could overflow the item.
fn park_step(
    exec: &ActivityExec,
    transition: Transition,
    source: &Source,
    event_id: &str,
    details: &Details,
) -> TransitionStep {
    let Source::Report {
        attempt,
        token_hash,
    } = source
    else {
        unreachable!("only reports are parked")
    };
    let same = |p: &ParkedEvent| {
        p.activity_event_id == event_id
            || (p.transition == transition.as_str()
                && p.attempt == *attempt
                && p.token_hash() == *token_hash)
    };
    if exec.trail.parked.iter().any(same) {
        return TransitionStep::AlreadyParked;
    }
    TransitionStep::Park(ParkedEvent {
        activity_event_id: event_id.into(),
        transition: transition.as_str().into(),
        output: details.output.clone(),
        // A large output stays on its row (payloads).
        output_in_row: details.output_event_id.is_some(),
        output_sha256: details.output_sha256.clone(),
        error: details.error.as_deref().map(cap_error),
        attempt: *attempt,
        attempt_token_hash: token_hash.clone(),
        attempt_token: None,
    })
}

/// True when a report of `transition` from `source` would be accepted now
/// (for events that were parked). Engine and monitor decisions always are
/// asked.
pub fn applicable(exec: &ActivityExec, transition: Transition, source: &Source) -> bool {
    let Source::Report {
        attempt,
        token_hash,
    } = source
    else {
        return true;
    };
    report_actor_by_hash(exec, *attempt, token_hash.as_deref())
        .ok()
        .is_some_and(|actor| {
            let tokened = exec.attempt.token_hash.is_some();
            let kind = exec.runner.kind();
            contract::next_state_of_report(kind, exec.state, tokened, transition, actor).is_ok()
        })
}

/// The transition and details of a report, with the size rule applied: a
/// COMPLETED output over [`MAX_OUTPUT_BYTES`] cannot be stored, so the
/// report becomes FAILED with the reason instead of a retry loop.
pub fn report_details(
    transition: Transition,
    output: Option<serde_json::Value>,
    error: Option<String>,
) -> (Transition, Details) {
    let size = output.as_ref().map_or(0, |v| v.to_string().len());
    if transition == Transition::Completed && size > MAX_OUTPUT_BYTES {
        let reason = format!(
            "OUTPUT_TOO_LARGE: COMPLETED output is {size} bytes; at most {MAX_OUTPUT_BYTES} bytes are allowed"
        );
        let details = Details {
            error: Some(reason),
            ..Details::default()
        };
        return (Transition::Failed, details);
    }
    let details = Details {
        output,
        error: error.map(|e| cap_error(&e)),
        ..Details::default()
    };
    (transition, details)
}

/// A report DynamoDB refused for good (e.g. the item would pass 400 KB),
/// given the store's reason: recorded as FAILED with a short reason,
/// without its payload.
pub fn unstorable(transition: Transition, reason: &str) -> (Transition, Details) {
    let msg = crate::history::cut(reason, 300);
    let t = if transition == Transition::Completed {
        Transition::Failed
    } else {
        transition
    };
    let details = Details {
        error: Some(format!(
            "UNSTORABLE: {transition} could not be stored: {msg}"
        )),
        unstorable: true,
        ..Details::default()
    };
    (t, details)
}

/// The item after a transaction that applied `next` (transactions return no
/// item): what the side effects need.
pub fn applied_locally(
    mut exec: ActivityExec,
    next: ActivityState,
    event_id: &str,
    now: i64,
    cfg: &EngineConfig,
) -> ActivityExec {
    exec.state = next;
    exec.version += 1;
    exec.runner.task_list_shard = None;
    exec.trail.last_event_id = Some(event_id.to_string());
    if next.is_terminal() {
        exec.trail.parked.clear();
        exec.timing.end_time_epoch = Some(now);
        exec.timing.due_epoch = Some(now + cfg.settle_grace_seconds);
        exec.timing.due_shard = Some(keys::shard_of(&exec.activity_exec_id));
    }
    exec
}
