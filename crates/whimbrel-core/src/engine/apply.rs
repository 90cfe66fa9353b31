//! Applying a transition: an activity's report (an event row, or an event
//! parked earlier) or the engine's / monitor's own decision. One loop for
//! all of them: read, decide (the contract, fencing, parking), write with a
//! condition on the version read, and on success run what the new state
//! owes.

use crate::attr;
use tracing::{info, warn};

pub(crate) use super::decide::report_details;
use super::decide::{self, Details, TransitionStep};
use super::{Applied, Engine, EngineError};
use crate::contract::{self, ActivityState, Actor, Transition};
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{ActivityEvent, ActivityExec, ParkedEvent};
use crate::store::{StoreError, UpdateRequest};

pub use whimbrel_rules::decide::step::Source;

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
    ///
    /// A rejection is remembered on the row ([`decide::mark_rejected`]),
    /// so no later reader judges it again, and a row marked so is
    /// rejected at once. A quarantined item's rejection is not final: its
    /// rows are judged again once it is repaired. When the mark cannot be
    /// written the rejection is [`EngineError::Retry`] instead.
    #[tracing::instrument(skip_all, fields(activity_exec_id = %ev.activity_exec_id, workflow_exec_id = ev.workflow_exec_id.as_deref(), event_id = %ev.activity_event_id, transition = %ev.transition))]
    pub async fn apply_event(&self, ev: &ActivityEvent) -> Result<Applied, EngineError> {
        if let Some(at) = ev.rejected_epoch {
            let why = ev.rejected_reason.as_deref().unwrap_or("no reason kept");
            return Err(EngineError::Rejected(format!(
                "{}: rejected earlier (at {at}): {why}",
                ev.activity_event_id
            )));
        }
        let judged = self.judge_event(ev).await;
        if let Err(e @ EngineError::Rejected(why)) = &judged {
            if !super::is_quarantined(e) {
                self.remember_rejection(ev, why).await?;
            }
        }
        judged
    }

    /// Write on the event row that it was rejected for `why`; a row that
    /// is gone, or marked already, is left as it is.
    async fn remember_rejection(&self, ev: &ActivityEvent, why: &str) -> Result<(), EngineError> {
        let row = (ev.activity_event_id.as_str(), ev.activity_exec_id.as_str());
        let now = self.now().epoch;
        let req = decide::mark_rejected(self.store.tables(), row, why, now);
        match self.store.update(req).await {
            Ok(_) | Err(StoreError::ConditionFailed) => Ok(()),
            Err(e) if e.is_permanent() => {
                warn!(error = %e, "the rejection cannot be kept on the row");
                Ok(())
            }
            Err(e) => Err(EngineError::Retry(format!(
                "{}: rejected, but the rejection is not recorded yet: {e}",
                ev.activity_event_id
            ))),
        }
    }

    /// Judge and apply `ev` (the body of [`Engine::apply_event`]).
    async fn judge_event(&self, ev: &ActivityEvent) -> Result<Applied, EngineError> {
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
            token_hash: ev.attempt_token.as_deref().map(ids::token_hash),
        };
        self.transition(exec, transition, source, &ev.activity_event_id, details)
            .await
    }

    /// Apply `transition` for `source` to `exec` (read earlier; re-read on
    /// contention), then run the side effects of the state reached. If
    /// `event_id` already caused the last change, only the side effects run
    /// again (redelivery). The decision is [`decide::transition_step`]'s;
    /// this loop performs it.
    #[tracing::instrument(skip_all, fields(activity_exec_id = %exec.activity_exec_id, workflow_exec_id = %exec.workflow_exec_id, %transition, event_id))]
    pub(crate) async fn transition(
        &self,
        mut exec: ActivityExec,
        mut transition: Transition,
        source: Source,
        event_id: &str,
        mut details: Details,
    ) -> Result<Applied, EngineError> {
        let generation = exec.generation();
        for _ in 0..MAX_ROUNDS {
            let now = details.at.unwrap_or_else(|| self.now().epoch);
            let ask = (transition, &source, event_id);
            let tables = self.store.tables();
            let step = decide::transition_step(tables, &self.config, &exec, ask, &details, now);
            let round = match step {
                TransitionStep::Redelivered => return self.resume(exec).await,
                TransitionStep::Superseded => return Ok(Applied::State(exec.state)),
                TransitionStep::AlreadyParked => return Ok(Applied::Parked(exec.state)),
                TransitionStep::Reject(why) => return Err(EngineError::Rejected(why)),
                TransitionStep::Park(parked) => self.park(&exec, parked, transition).await?,
                TransitionStep::Retry { at, update } => {
                    self.write_retry(&exec, update, at, now).await?
                }
                TransitionStep::Apply {
                    actor,
                    next,
                    update,
                    count,
                    output_row,
                } => {
                    if let Some(row) = output_row {
                        self.put_output_row(&row).await?;
                    }
                    let applied = Accepted {
                        change: (transition, next, actor),
                        event_id,
                        now,
                    };
                    self.write_transition(&exec, applied, (update, count), &details)
                        .await?
                }
            };
            match round {
                Round::Done(applied) => return Ok(applied),
                Round::Again => {}
                Round::Contended => self.store.pause(10 + (exec.version % 7) * 7).await,
                Round::Restate(t, d) => (transition, details) = (t, d),
            }
            exec = self
                .load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
                .await?;
            if stale_step(&source, generation, &exec) {
                info!(activity_exec_id = %exec.activity_exec_id, %event_id, generation, "an engine step decided on an earlier generation: not applied to the redriven node");
                return Ok(Applied::State(exec.state));
            }
        }
        Err(EngineError::Retry(format!(
            "{}: too much contention applying {transition}",
            exec.activity_exec_id
        )))
    }

    /// A redelivery: resume what the write that applied it owes, parked
    /// events included (the first try may have died); nothing once its
    /// settle ended ([`ActivityExec::settled`]).
    async fn resume(&self, exec: ActivityExec) -> Result<Applied, EngineError> {
        if exec.settled() {
            return Ok(Applied::State(exec.state));
        }
        if !exec.state.is_terminal() && !exec.trail.parked.is_empty() {
            Box::pin(self.apply_parked(exec.clone())).await?;
        }
        super::budget::sliced(super::budget::SETTLE_SLICE, Box::pin(self.settle(&exec))).await?;
        Ok(Applied::State(exec.state))
    }

    /// Park `parked` on `exec`. One too large to park with its output
    /// (parking nests it two levels deeper) is parked by reference, and its
    /// output read back from its event row when it applies.
    async fn park(
        &self,
        exec: &ActivityExec,
        parked: ParkedEvent,
        transition: Transition,
    ) -> Result<Round, EngineError> {
        let with_output = parked.output.is_some();
        let req = decide::park_update(self.store.tables(), exec, &parked);
        let written = match self.store.update(req).await {
            Err(e) if e.is_permanent() && with_output => {
                info!(activity_exec_id = %exec.activity_exec_id, error = %e, "parking the report by reference");
                let by_ref = ParkedEvent {
                    output: None,
                    output_in_row: true,
                    output_sha256: parked.output.as_ref().map(super::payloads::output_digest),
                    ..parked.clone()
                };
                let req = decide::park_update(self.store.tables(), exec, &by_ref);
                self.store.update(req).await
            }
            other => other,
        };
        match written {
            Ok(_) => {
                info!(activity_exec_id = %exec.activity_exec_id, %transition, state = %exec.state, event_id = %parked.activity_event_id, "event parked until its state catches up");
                crate::metrics::transition_parked();
                Ok(Round::Done(Applied::Parked(exec.state)))
            }
            Err(StoreError::ConditionFailed) => Ok(Round::Again),
            Err(e) if e.is_permanent() => Err(EngineError::Rejected(format!(
                "{}: {transition} cannot be parked: {e}",
                exec.activity_exec_id
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Queue the next attempt of a failed one (`update`), and launch it at
    /// once when its backoff (`at`, epoch seconds) has already passed.
    async fn write_retry(
        &self,
        exec: &ActivityExec,
        update: UpdateRequest,
        at: i64,
        now: i64,
    ) -> Result<Round, EngineError> {
        let item = match self.store.update_returning_new(update).await {
            Ok(item) => item,
            Err(StoreError::ConditionFailed) => return Ok(Round::Again),
            Err(StoreError::Conflict) => {
                self.store.pause(10).await;
                return Ok(Round::Again);
            }
            Err(e) => return Err(e.into()),
        };
        info!(activity_exec_id = %exec.activity_exec_id, attempt = exec.attempt.number, next_attempt_epoch = at, "attempt failed; the next attempt is queued");
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
        } else {
            self.send_wake_up(&after).await;
        }
        Ok(Round::Done(Applied::State(ActivityState::Queued)))
    }

    /// Write an accepted transition (with the workflow's end count in one
    /// transaction when given), then run what the state reached owes. A
    /// report DynamoDB refuses for good is restated as a bare failure.
    async fn write_transition(
        &self,
        exec: &ActivityExec,
        applied: Accepted<'_>,
        write: (UpdateRequest, Option<UpdateRequest>),
        details: &Details,
    ) -> Result<Round, EngineError> {
        let (transition, next, actor) = applied.change;
        let written = match write {
            (update, Some(count)) => self
                .store
                .transact(vec![update.into_write(), count.into_write()])
                .await
                .map(|()| None),
            (update, None) => self.store.update_returning_new(update).await,
        };
        let item = match written {
            Ok(item) => item,
            Err(StoreError::ConditionFailed) => return Ok(Round::Again),
            // Another transaction on the workflow item: decide again.
            Err(StoreError::Conflict) => return Ok(Round::Contended),
            Err(e) if e.is_permanent() => return refused_for_good(exec, transition, details, e),
            Err(e) => return Err(e.into()),
        };
        let event_id = applied.event_id;
        info!(activity_exec_id = %exec.activity_exec_id, from = %exec.state, %transition, to = %next, ?actor, event_id, "transition applied");
        crate::metrics::transition_applied();
        let after = match item.map(serde_dynamo::from_item::<_, ActivityExec>) {
            Some(Ok(e)) => e,
            _ => decide::applied_locally(exec.clone(), next, event_id, applied.now, &self.config),
        };
        if !after.state.is_terminal() && !after.trail.parked.is_empty() {
            Box::pin(self.apply_parked(after.clone())).await?;
        }
        super::budget::sliced(super::budget::SETTLE_SLICE, Box::pin(self.settle(&after))).await?;
        Ok(Round::Done(Applied::State(next)))
    }

    /// Apply the first parked event the state now allows (which applies the
    /// next, and so on). Returns whether one was applied.
    pub(crate) async fn apply_parked(&self, exec: ActivityExec) -> Result<bool, EngineError> {
        for p in exec.trail.parked.clone() {
            let Ok(transition) = p.transition.parse::<Transition>() else {
                continue;
            };
            let source = Source::Report {
                attempt: p.attempt,
                token_hash: p.token_hash(),
            };
            if !decide::applicable(&exec, transition, &source) {
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
    /// from its (write-once) event row and checked against the digest taken
    /// when it was parked. A row that is gone, unreadable or overwritten
    /// (TTL, a foreign write) cannot give the output back: recorded as
    /// FAILED `UNSTORABLE`, as a report that cannot be stored is, and an
    /// overwritten one counted (`OutputMismatches`).
    async fn parked_output(
        &self,
        exec: &ActivityExec,
        p: &ParkedEvent,
        transition: Transition,
    ) -> Result<(Transition, Details), EngineError> {
        let key = crate::keys::event_key(&p.activity_event_id, &exec.activity_exec_id);
        let t = self.store.tables().activity_event();
        let row = self
            .store
            .batch_get_each::<ActivityEvent>(&t, vec![key])
            .await?;
        let read = match row.into_iter().next() {
            Some(Ok(ev)) => ev
                .output
                .map(|o| {
                    let expected = p.output_sha256.as_deref();
                    super::payloads::verified(
                        &exec.activity_exec_id,
                        &p.activity_event_id,
                        expected,
                        o,
                    )
                })
                .transpose()
                .map_err(|e| e.to_string()),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("its event row is gone".to_string()),
        };
        match read {
            Ok(output) => {
                let (transition, mut details) = report_details(transition, output, p.error.clone());
                super::payloads::output_by_row(&mut details, &p.activity_event_id);
                Ok((transition, details))
            }
            Err(why) => Ok((
                Transition::Failed,
                Details {
                    error: Some(format!(
                        "UNSTORABLE: parked {transition} has no readable output: {why}"
                    )),
                    ..Details::default()
                },
            )),
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

/// Whether a step of the engine or the monitor, decided on generation
/// `generation` of a node, finds the node of another generation when its
/// write failed a condition and it read the node again: a redrive put the
/// node back to run meanwhile, and forgot the engine's steps of before it,
/// so deciding again would apply a stale step (a timer's Fire, an old
/// child's end, a slot given back) to the new generation. It is dropped
/// instead (issue 42 A.3). An activity's report is fenced by its attempt
/// and token, not by this.
fn stale_step(source: &Source, generation: u32, exec: &ActivityExec) -> bool {
    !matches!(source, Source::Report { .. }) && exec.generation() != generation
}

/// An accepted transition on its way to the store: (transition, state
/// reached, actor), the event that caused it and the time (epoch seconds).
struct Accepted<'a> {
    change: (Transition, ActivityState, Actor),
    event_id: &'a str,
    now: i64,
}

/// What one round of [`Engine::transition`] came to.
enum Round {
    /// Done, with what was applied.
    Done(Applied),
    /// A condition failed: read the item again and decide again.
    Again,
    /// A transaction conflict: pause, read again and decide again.
    Contended,
    /// The report cannot be stored as it is: decide again on this
    /// transition and these details instead.
    Restate(Transition, Details),
}

/// A write DynamoDB refused for good (`e`): a report with a payload is
/// restated as the bare failure that stands for it. If that bare failure
/// is refused too (what the event itself brings, such as its id, is too
/// much), no retry can ever succeed: rejected.
fn refused_for_good(
    exec: &ActivityExec,
    transition: Transition,
    details: &Details,
    e: StoreError,
) -> Result<Round, EngineError> {
    if details.unstorable {
        return Err(EngineError::Rejected(format!(
            "{}: {transition} cannot be stored: {e}",
            exec.activity_exec_id
        )));
    }
    if details.output.is_none() && details.error.is_none() {
        return Err(e.into());
    }
    warn!(activity_exec_id = %exec.activity_exec_id, error = %e, "report cannot be stored as it is; recording a failure instead");
    let (t, d) = decide::unstorable(transition, &e.to_string());
    Ok(Round::Restate(t, d))
}
