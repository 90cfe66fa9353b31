//! Applying a transition: an activity's report (an event row, or an event
//! parked earlier) or the engine's / monitor's own decision. One loop for
//! all of them: read, decide (the contract, fencing, parking), write with a
//! condition on the version read, and on success run what the new state
//! owes.

use crate::attr;
use tracing::{info, warn};

use super::decide::{self, Details};
use super::{Applied, Engine, EngineError};
use crate::contract::{self, ActivityState, Actor, Transition};
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{ActivityEvent, ActivityExec, ParkedEvent};
use crate::plan::MAX_OUTPUT_BYTES;
use crate::store::{s, StoreError};

/// Who asks for a transition.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    /// An activity's report: its attempt and token, when it gave them.
    Report {
        attempt: Option<u32>,
        token: Option<String>,
    },
    /// The engine itself (cancel propagation, launch refused, not started).
    Engine,
    /// The heartbeat monitor (TIMED_OUT).
    Monitor,
}

/// Rounds of read-decide-write before contention is reported as "retry".
const MAX_ROUNDS: usize = 12;

impl<L: Launcher> Engine<L> {
    /// Apply a `whimbrel_activity_event` row (contract: Simple Lambda API,
    /// "Update Activity State"), then its side effects.
    ///
    /// An event that is not valid *yet* (COMPLETED before RUNNING was
    /// applied) is parked on the activity and applied when its state
    /// catches up ([`Applied::Parked`]). A report from a stale attempt, or
    /// without the token the activity requires, is refused.
    ///
    /// A Full Logic API client (event row with `manual = true`) calls this
    /// itself and retries it with the same event until it returns `Ok` or
    /// `Rejected`.
    ///
    /// Errors: [`EngineError::Rejected`] for an unknown transition, a
    /// malformed id, an unknown activity, a transition the contract never
    /// allows from the current state, a never-launched activity, or a stale
    /// attempt; [`EngineError::Retry`] for an unavailable store.
    #[tracing::instrument(skip_all, fields(activity_exec_id = %ev.activity_exec_id, workflow_exec_id = ev.workflow_exec_id.as_deref(), event_id = %ev.activity_event_id, transition = %ev.transition))]
    pub async fn apply_event(&self, ev: &ActivityEvent) -> Result<Applied, EngineError> {
        let transition: Transition = ev
            .transition
            .parse()
            .map_err(|e: contract::UnknownName| EngineError::Rejected(e.to_string()))?;
        let recommended = ids::check_id(
            attr::ACTIVITY_EVENT_ID,
            attr::ACTIVITY_EXEC_ID,
            &ev.activity_event_id,
            &ev.activity_exec_id,
        )
        .map_err(|e| EngineError::Rejected(e.to_string()))?;
        if !recommended {
            info!(activity_event_id = %ev.activity_event_id, "event id is not (activity_exec_id)::(uuid); accepted");
        }
        let exec = self
            .find_activity(&ev.activity_exec_id)
            .await?
            .ok_or_else(|| {
                EngineError::Rejected(format!("unknown activity exec {}", ev.activity_exec_id))
            })?;
        let (transition, mut details) =
            report_details(transition, ev.output.clone(), ev.error.clone());
        super::payloads::output_by_reference(&mut details, ev);
        let source = Source::Report {
            attempt: ev.attempt,
            token: ev.attempt_token.clone(),
        };
        self.transition(exec, transition, source, &ev.activity_event_id, details)
            .await
    }

    /// Apply `transition` for `source` to `exec` (read earlier; re-read on
    /// contention), then run the side effects of the state reached. If
    /// `event_id` already caused the last change, only the side effects run
    /// again (redelivery).
    #[tracing::instrument(skip_all, fields(activity_exec_id = %exec.activity_exec_id, workflow_exec_id = %exec.workflow_exec_id, %transition, event_id))]
    pub(crate) async fn transition(
        &self,
        mut exec: ActivityExec,
        transition: Transition,
        source: Source,
        event_id: &str,
        details: Details,
    ) -> Result<Applied, EngineError> {
        let mut transition = transition;
        let mut details = details;
        for _ in 0..MAX_ROUNDS {
            if exec.is_last_event(event_id) {
                // A redelivery: resume what the write that applied it owes,
                // parked events included (the first try may have died).
                if !exec.state.is_terminal() && !exec.parked.is_empty() {
                    Box::pin(self.apply_parked(exec.clone())).await?;
                }
                self.settle(&exec).await?;
                return Ok(Applied::State(exec.state));
            }
            if exec
                .history
                .iter()
                .any(|h| h.names(&exec.activity_exec_id, event_id))
            {
                // Applied earlier and superseded since: nothing to redo.
                return Ok(Applied::State(exec.state));
            }
            if exec.parked.iter().any(|p| p.activity_event_id == event_id)
                && !self.applicable(&exec, transition, &source)
            {
                return Ok(Applied::Parked(exec.state));
            }
            let (actor, next) = match &source {
                Source::Report { attempt, token } => {
                    let actor =
                        decide::report_actor(&exec, *attempt, token.as_deref()).map_err(|r| {
                            EngineError::Rejected(format!("{}: {r}", exec.activity_exec_id))
                        })?;
                    (
                        actor,
                        contract::next_state_of_report(
                            exec.state,
                            exec.attempt_token_hash.is_some(),
                            transition,
                            actor,
                        ),
                    )
                }
                Source::Engine => (
                    Actor::Engine,
                    contract::next_state(exec.state, transition, Actor::Engine),
                ),
                Source::Monitor => (
                    Actor::Monitor,
                    contract::next_state(exec.state, transition, Actor::Monitor),
                ),
            };
            let next = match next {
                Ok(next) => next,
                Err(e) if e.is_retryable() && matches!(source, Source::Report { .. }) => {
                    let Source::Report { attempt, token } = &source else {
                        unreachable!()
                    };
                    // One parked copy per report: a client repeating the
                    // same report (same transition, attempt and token) adds
                    // nothing, and its outputs could overflow the item.
                    let same = |p: &ParkedEvent| {
                        p.activity_event_id == event_id
                            || (p.transition == transition.as_str()
                                && p.attempt == *attempt
                                && p.attempt_token == *token)
                    };
                    if exec.parked.iter().any(same) {
                        return Ok(Applied::Parked(exec.state));
                    }
                    let parked = ParkedEvent {
                        activity_event_id: event_id.into(),
                        transition: transition.as_str().into(),
                        output: details.output.clone(),
                        // A large output stays on its row (payloads).
                        output_in_row: details.output_event_id.is_some(),
                        error: details.error.as_deref().map(decide::cap_error),
                        attempt: *attempt,
                        attempt_token: token.clone(),
                    };
                    let req = decide::park_update(self.store.tables(), &exec, &parked);
                    match self.store.update(req, false).await {
                        Ok(_) => {
                            info!(activity_exec_id = %exec.activity_exec_id, %transition, state = %exec.state, event_id, "event parked until its state catches up");
                            crate::metrics::transition_parked();
                            return Ok(Applied::Parked(exec.state));
                        }
                        Err(StoreError::ConditionFailed) => {
                            exec = self
                                .load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
                                .await?;
                            continue;
                        }
                        Err(e) if e.is_permanent() && parked.output.is_some() => {
                            // Too large or too deep to park with its output
                            // (parking nests it two levels deeper): park the
                            // reference, and read the output back from the
                            // event row when it applies.
                            let by_ref = ParkedEvent {
                                output: None,
                                output_in_row: true,
                                ..parked
                            };
                            let req = decide::park_update(self.store.tables(), &exec, &by_ref);
                            match self.store.update(req, false).await {
                                Ok(_) => {
                                    info!(activity_exec_id = %exec.activity_exec_id, %transition, state = %exec.state, event_id, error = %e, "event parked by reference until its state catches up");
                                    crate::metrics::transition_parked();
                                    return Ok(Applied::Parked(exec.state));
                                }
                                Err(StoreError::ConditionFailed) => {
                                    exec = self
                                        .load_activity(
                                            &exec.activity_exec_id,
                                            &exec.workflow_exec_id,
                                        )
                                        .await?;
                                    continue;
                                }
                                Err(e) if e.is_permanent() => {
                                    return Err(EngineError::Rejected(format!(
                                        "{}: {transition} cannot be parked: {e}",
                                        exec.activity_exec_id
                                    )));
                                }
                                Err(e) => return Err(e.into()),
                            }
                        }
                        Err(e) if e.is_permanent() => {
                            return Err(EngineError::Rejected(format!(
                                "{}: {transition} cannot be parked: {e}",
                                exec.activity_exec_id
                            )));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => {
                    return Err(EngineError::Rejected(format!(
                        "{}: {e}",
                        exec.activity_exec_id
                    )));
                }
            };
            let now = details.at.unwrap_or_else(|| self.now().epoch);
            let tables = self.store.tables();
            let change = decide::Change {
                transition,
                next,
                event_id,
            };
            if let Some(at) = decide::retry_after(&exec, &change, &details, !details.no_retry, now)
            {
                let req =
                    decide::retry_update(tables, &self.config, &exec, &change, &details, at, now);
                match self.store.update(req, true).await {
                    Ok(item) => {
                        info!(activity_exec_id = %exec.activity_exec_id, %transition, attempt = exec.attempt, next_attempt_epoch = at, event_id, "attempt failed; the next attempt is queued");
                        crate::metrics::transition_retried();
                        let after = match item.map(serde_dynamo::from_item::<_, ActivityExec>) {
                            Some(Ok(e)) => e,
                            _ => {
                                self.load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
                                    .await?
                            }
                        };
                        if at <= now {
                            Box::pin(self.launch_attempt(after)).await?;
                        }
                        return Ok(Applied::State(ActivityState::Queued));
                    }
                    Err(StoreError::ConditionFailed) => {}
                    Err(StoreError::Conflict) => self.store.pause(10).await,
                    Err(e) => return Err(e.into()),
                }
                exec = self
                    .load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
                    .await?;
                continue;
            }
            let update =
                decide::transition_update(tables, &self.config, &exec, change, &details, now);
            // An item with a count slot is counted by its settle
            // (engine::counting); an older one in this transaction.
            let written = if next.is_terminal() && exec.count_slot.is_none() {
                let count = decide::count_end(tables, &exec, next, details.error.as_deref());
                self.store
                    .transact(vec![update.into_write(), count.into_write()])
                    .await
                    .map(|()| None)
            } else {
                self.store.update(update, true).await
            };
            match written {
                Ok(item) => {
                    info!(activity_exec_id = %exec.activity_exec_id, from = %exec.state, %transition, to = %next, ?actor, event_id, "transition applied");
                    crate::metrics::transition_applied();
                    let after = match item.map(serde_dynamo::from_item::<_, ActivityExec>) {
                        Some(Ok(e)) => e,
                        _ => applied_locally(exec, next, event_id, now, &self.config),
                    };
                    if !after.state.is_terminal() && !after.parked.is_empty() {
                        Box::pin(self.apply_parked(after.clone())).await?;
                    }
                    self.settle(&after).await?;
                    return Ok(Applied::State(next));
                }
                Err(StoreError::ConditionFailed) => {}
                Err(StoreError::Conflict) => {
                    // Another transaction on the workflow item: decide again.
                    self.store.pause(10 + (exec.version % 7) * 7).await;
                }
                Err(e) if e.is_permanent() && details.unstorable => {
                    // Even the bare failure cannot be stored (what the
                    // event itself brings, such as its id, is too much):
                    // no retry can ever succeed.
                    return Err(EngineError::Rejected(format!(
                        "{}: {transition} cannot be stored: {e}",
                        exec.activity_exec_id
                    )));
                }
                Err(e)
                    if e.is_permanent()
                        && (details.output.is_some() || details.error.is_some()) =>
                {
                    warn!(activity_exec_id = %exec.activity_exec_id, error = %e, "report cannot be stored as it is; recording a failure instead");
                    (transition, details) = unstorable(transition, &e);
                }
                Err(e) => return Err(e.into()),
            }
            exec = self
                .load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
                .await?;
        }
        Err(EngineError::Retry(format!(
            "{}: too much contention applying {transition}",
            exec.activity_exec_id
        )))
    }

    /// True when a report of `transition` from `source` would be accepted
    /// now (for events that were parked).
    fn applicable(&self, exec: &ActivityExec, transition: Transition, source: &Source) -> bool {
        let Source::Report { attempt, token } = source else {
            return true;
        };
        decide::report_actor(exec, *attempt, token.as_deref())
            .ok()
            .is_some_and(|actor| {
                contract::next_state_of_report(
                    exec.state,
                    exec.attempt_token_hash.is_some(),
                    transition,
                    actor,
                )
                .is_ok()
            })
    }

    /// Apply the first parked event the state now allows (which applies the
    /// next, and so on). Returns whether one was applied.
    pub(crate) async fn apply_parked(&self, exec: ActivityExec) -> Result<bool, EngineError> {
        for p in exec.parked.clone() {
            let Ok(transition) = p.transition.parse::<Transition>() else {
                continue;
            };
            let source = Source::Report {
                attempt: p.attempt,
                token: p.attempt_token.clone(),
            };
            if !self.applicable(&exec, transition, &source) {
                continue;
            }
            let (transition, details) = if p.output_in_row {
                self.parked_output(&exec, &p, transition).await?
            } else {
                (
                    transition,
                    Details {
                        output: p.output.clone(),
                        error: p.error.clone(),
                        ..Details::default()
                    },
                )
            };
            info!(activity_exec_id = %exec.activity_exec_id, event_id = %p.activity_event_id, %transition, "applying a parked event");
            match self
                .transition(exec, transition, source, &p.activity_event_id, details)
                .await
            {
                Ok(_) => return Ok(true),
                Err(EngineError::Rejected(_)) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// The details of an event parked by reference: its output read back
    /// from its (write-once) event row. A row that is gone or unreadable
    /// (TTL, a foreign write) cannot give the output back: recorded as
    /// FAILED `UNSTORABLE`, as a report that cannot be stored is.
    async fn parked_output(
        &self,
        exec: &ActivityExec,
        p: &ParkedEvent,
        transition: Transition,
    ) -> Result<(Transition, Details), EngineError> {
        let key = std::collections::HashMap::from([
            (attr::ACTIVITY_EVENT_ID.to_string(), s(&p.activity_event_id)),
            (
                attr::ACTIVITY_EXEC_ID.to_string(),
                s(&exec.activity_exec_id),
            ),
        ]);
        let t = self.store.tables().activity_event();
        let row = self
            .store
            .batch_get_each::<ActivityEvent>(&t, vec![key])
            .await?;
        match row.into_iter().next() {
            Some(Ok(ev)) => {
                let (transition, mut details) =
                    report_details(transition, ev.output, p.error.clone());
                super::payloads::output_by_row(&mut details, &p.activity_event_id);
                Ok((transition, details))
            }
            other => {
                let why = match other {
                    Some(Err(e)) => e.to_string(),
                    _ => "its event row is gone".to_string(),
                };
                Ok((
                    Transition::Failed,
                    Details {
                        error: Some(format!(
                            "UNSTORABLE: parked {transition} has no readable output: {why}"
                        )),
                        ..Details::default()
                    },
                ))
            }
        }
    }

    /// A transition the engine or the monitor decides (cancel propagation,
    /// launch refused, not started, timed out), with `details.error` as the
    /// reason. One the contract refuses by now (the activity moved on
    /// meanwhile) is not an error: `Ok(None)`.
    pub(crate) async fn decree(
        &self,
        exec: ActivityExec,
        transition: Transition,
        source: Source,
        event_id: &str,
        details: Details,
    ) -> Result<Option<ActivityState>, EngineError> {
        match Box::pin(self.transition(exec, transition, source, event_id, details)).await {
            Ok(Applied::State(s)) => Ok(Some(s)),
            Ok(_) | Err(EngineError::Rejected(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The transition and details of a report, with the size rule applied: a
/// COMPLETED output over [`MAX_OUTPUT_BYTES`] cannot be stored, so the
/// report becomes FAILED with the reason instead of a retry loop.
pub(crate) fn report_details(
    transition: Transition,
    output: Option<serde_json::Value>,
    error: Option<String>,
) -> (Transition, Details) {
    let size = output.as_ref().map_or(0, |v| v.to_string().len());
    if transition == Transition::Completed && size > MAX_OUTPUT_BYTES {
        let reason = format!(
            "OUTPUT_TOO_LARGE: COMPLETED output is {size} bytes; at most {MAX_OUTPUT_BYTES} bytes are allowed"
        );
        return (
            Transition::Failed,
            Details {
                error: Some(reason),
                ..Details::default()
            },
        );
    }
    (
        transition,
        Details {
            output,
            error: error.map(|e| decide::cap_error(&e)),
            ..Details::default()
        },
    )
}

/// A report DynamoDB refused for good (e.g. the item would pass 400 KB):
/// recorded as FAILED with a short reason, without its payload.
fn unstorable(transition: Transition, e: &StoreError) -> (Transition, Details) {
    let mut msg = e.to_string();
    msg.truncate(300);
    let t = if transition == Transition::Completed {
        Transition::Failed
    } else {
        transition
    };
    (
        t,
        Details {
            error: Some(format!(
                "UNSTORABLE: {transition} could not be stored: {msg}"
            )),
            unstorable: true,
            ..Details::default()
        },
    )
}

/// The item after a transaction that applied `next` (transactions return no
/// item): what the side effects need.
fn applied_locally(
    mut exec: ActivityExec,
    next: ActivityState,
    event_id: &str,
    now: i64,
    cfg: &super::EngineConfig,
) -> ActivityExec {
    exec.state = next;
    exec.version += 1;
    exec.task_list_shard = None;
    exec.last_event_id = Some(event_id.to_string());
    if next.is_terminal() {
        exec.parked.clear();
        exec.end_time_epoch = Some(now);
        exec.due_epoch = Some(now + cfg.settle_grace_seconds);
        exec.due_shard = Some(crate::store::shard_of(&exec.activity_exec_id));
    }
    exec
}
