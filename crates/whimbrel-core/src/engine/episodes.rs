//! The executor of episodic executions (design.md § 10): events appended
//! to the execution's log, one decision at a time (start, request, the
//! decider's synchronous Invoke, judgement, commit), and the monitor's
//! verdicts. The writes are `decide::episodes`'; the request a decider is
//! shown is built in `episodes/request.rs`; the effects of a committed
//! decision are [`super::decided`]'s.

use serde_json::Value;
use tracing::{info, warn};
use whimbrel_rules::keys::WorkflowRef;

use super::{Engine, EngineError};
use crate::attr;
use crate::contract::WorkflowState;
use crate::decider::{self, DeciderAnswer, Decision, DecisionContext, DecisionsAnswer, EventKind};
use crate::launcher::Launcher;
use crate::model::ActivityExec;
use crate::plan::Plan;
use crate::store::{s, StoreError};
use whimbrel_rules::decide::episodes::{
    self, Appended, DecisionRecord, DecisionVerdict, EpisodeState, StartAt,
};

/// Most events one decision is shown: the rest wait for the next one
/// (and a closing answer is refused while they do).
pub const MAX_EVENTS_PER_DECISION: usize = 100;

mod request;
pub(crate) use request::ended_details;

/// Tries of an append or a commit that lost a race for the workflow item.
const WRITE_TRIES: u32 = 8;

/// Rounds of decisions one call drives before leaving the rest to the
/// next event or the monitor.
const DECISION_ROUNDS: u32 = 16;

/// What an append did ([`Engine::append_only`]).
pub(crate) enum Append {
    /// The execution takes no event: ended, closed by a decision, not
    /// episodic, or before its first answer committed.
    NotTaken,
    /// The event was in the log already (its source's marker).
    Logged,
    /// Appended now; `started` names the decision the write started.
    Appended {
        /// The decision id put in flight by the append, if any.
        started: Option<String>,
    },
}

/// An answer as judged: the decisions to commit, or why it is refused.
pub(crate) struct Judged {
    answer: Option<DecisionsAnswer>,
    refused: Option<String>,
}

impl<L: Launcher> Engine<L> {
    /// The episode attributes of workflow exec `wf` (id, name).
    ///
    /// Errors: [`EngineError::Retry`] when it is not there (yet).
    pub(crate) async fn episode_state(
        &self,
        wf: WorkflowRef<'_>,
    ) -> Result<EpisodeState, EngineError> {
        self.store
            .get_projected(
                &self.store.tables().workflow_exec(),
                wf.key(),
                &EpisodeState::ATTRIBUTES,
            )
            .await?
            .ok_or_else(|| EngineError::Retry(format!("workflow exec {} not found", wf.exec_id)))
    }

    /// Append the event `build` makes from the state read to the log of
    /// `wf`, once for its `source` (design.md § 10.2), then drive its
    /// decisions, first the one the append started, if any (no further
    /// once that one's effects rested the execution). `build` is
    /// given the state and when the append may start the next decision.
    /// Returns false when the execution takes no event (ended, closed by a
    /// decision, or not episodic).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable or the
    /// append lost [`WRITE_TRIES`] races in a row.
    pub(crate) async fn append_to_log<F>(
        &self,
        wf: WorkflowRef<'_>,
        source: &str,
        build: F,
    ) -> Result<bool, EngineError>
    where
        F: Fn(&EpisodeState, StartAt) -> Appended,
    {
        let started = match self.append_only(wf, source, build).await? {
            Append::NotTaken => return Ok(false),
            Append::Logged => return Ok(true),
            Append::Appended { started } => started,
        };
        let rested = match &started {
            Some(id) => self.run_started(wf, id).await?,
            None => false,
        };
        // At rest, nothing came since: what comes later starts its own
        // decision.
        if !rested {
            self.drive_decisions(wf).await?;
        }
        Ok(true)
    }

    /// Run decision `id` of `wf`, which an append put in flight, if it
    /// still is; returns whether its effects rested the execution.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn run_started(
        &self,
        wf: WorkflowRef<'_>,
        id: &str,
    ) -> Result<bool, EngineError> {
        let state = self.episode_state(wf).await?;
        if state.decision_id.as_deref() != Some(id) {
            return Ok(false);
        }
        Box::pin(self.run_decision(wf, &state, id)).await
    }

    /// The append of [`Engine::append_to_log`] alone: the event written
    /// once for its `source`, no decision run or driven (the caller does,
    /// or is itself applying owed effects, which a later drive follows).
    ///
    /// Errors: as [`Engine::append_to_log`]'s.
    pub(crate) async fn append_only<F>(
        &self,
        wf: WorkflowRef<'_>,
        source: &str,
        build: F,
    ) -> Result<Append, EngineError>
    where
        F: Fn(&EpisodeState, StartAt) -> Appended,
    {
        for _ in 0..WRITE_TRIES {
            let state = self.episode_state(wf).await?;
            if !state.takes_events() || state.decide_on.is_none() {
                return Ok(Append::NotTaken);
            }
            let at = StartAt {
                now: self.now().epoch,
                attempt_seconds: self.config.decisions.attempt_seconds,
            };
            let appended = build(&state, at);
            let event = &appended.event;
            match self.store.write_all(appended.writes.clone()).await {
                Ok(()) => {
                    info!(workflow_exec_id = wf.exec_id, seq = event.seq, kind = ?event.kind, "event appended");
                    return Ok(Append::Appended {
                        started: appended.started,
                    });
                }
                Err(StoreError::ConditionFailed | StoreError::Conflict) => {
                    // Appended before: its write left a decision started
                    // or covered (design.md § 10.3, the due marker).
                    if self.logged(wf, source).await? {
                        return Ok(Append::Logged);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::Retry(format!(
            "{}: appending {source} lost {WRITE_TRIES} races",
            wf.exec_id
        )))
    }

    /// The event from `source` is in the log of `wf`: its marker exists,
    /// or (a node's end, which has none) the node is no longer open.
    async fn logged(&self, wf: WorkflowRef<'_>, source: &str) -> Result<bool, EngineError> {
        if let Some(node) = episodes::ended_node(source) {
            let state = self.episode_state(wf).await?;
            return Ok(!state.open_nodes.iter().any(|n| n == node));
        }
        let key = crate::store::Item::from([
            (attr::WORKFLOW_EXEC_ID.into(), s(wf.exec_id)),
            (attr::LOG_KEY.into(), s(episodes::source_log_key(source))),
        ]);
        let marker: Option<Value> = self.store.get(&self.store.tables().decision(), key).await?;
        Ok(marker.is_some())
    }

    /// The end of `exec`, a node scheduled by a decision, as an
    /// `activity_ended` event of its execution's log (the settle's
    /// obligation, under the node's due marker).
    pub(crate) async fn append_node_end(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let wf = WorkflowRef::new(&exec.workflow_exec_id, &exec.workflow_name);
        let details = ended_details(exec);
        let at = exec
            .timing
            .end_time_epoch
            .unwrap_or_else(|| self.now().epoch);
        let source = episodes::ended_source(wf.exec_id, &exec.activity_name);
        let t = self.store.tables();
        let node = exec.activity_name.as_str();
        self.append_to_log(wf, &source, |state, start| {
            let end = (at, details.clone());
            episodes::append_node_end(t, wf, state, node, end, Some(start))
        })
        .await
        .map(|_| ())
    }

    /// Drive the decisions of `wf` while it has work for them: effects of
    /// a committed decision first, then a decision on events not seen
    /// (started here only if no other is in flight), its retry when its
    /// attempt is over, or the workflow's failure once its decision timed
    /// out (`decide::episodes::decision_verdict`).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn drive_decisions(&self, wf: WorkflowRef<'_>) -> Result<(), EngineError> {
        for _ in 0..DECISION_ROUNDS {
            let state = self.episode_state(wf).await?;
            if state.state != Some(WorkflowState::Running) || state.decide_on.is_none() {
                return Ok(());
            }
            if state.effects_owed() {
                let number = state.decisions_applied + 1;
                if Box::pin(self.apply_decision(wf, number, &state)).await? {
                    return Ok(());
                }
                continue;
            }
            let now = self.now().epoch;
            let settings = self.config.decisions;
            let started = match episodes::decision_verdict(&state, now, settings.timeout_seconds) {
                DecisionVerdict::Idle => return self.rest(wf, &state).await,
                DecisionVerdict::Wait(_) => return Ok(()),
                DecisionVerdict::GiveUp(reason) => {
                    let id = state.decision_id.clone().unwrap_or_default();
                    return Box::pin(self.fail_decision(wf, &id, &reason)).await;
                }
                DecisionVerdict::Start => {
                    let t = self.store.tables();
                    episodes::start_decision(t, wf, &state, now, settings.attempt_seconds)
                }
                DecisionVerdict::Retry => {
                    let t = self.store.tables();
                    episodes::retry_decision(t, wf, &state, now, settings.attempt_seconds)
                }
            };
            let Some((id, update)) = started else {
                return Ok(());
            };
            match self.store.update(update).await {
                Ok(_) => {
                    if Box::pin(self.run_decision(wf, &state, &id)).await? {
                        return Ok(());
                    }
                }
                Err(StoreError::ConditionFailed) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The monitor's visit of the RUNNING episodic execution `wf` whose
    /// due marker came up: a start that died before its first decision
    /// committed is run again (returns true); otherwise its decisions are
    /// driven.
    ///
    /// Errors: as [`Self::drive_decisions`].
    pub(crate) async fn resume_episodic(
        &self,
        wf: crate::model::WorkflowExec,
        now: i64,
    ) -> Result<bool, EngineError> {
        let key = WorkflowRef::new(&wf.workflow_exec_id, &wf.workflow_name);
        if self.episode_state(key).await?.decision_count == 0 {
            return self.restart_workflow(wf, now).await;
        }
        self.drive_decisions(key).await.map(|()| false)
    }

    /// Nothing owed as read in `state`: the due marker of `wf` goes back
    /// to its execution deadline, unless a write came since; no write when
    /// it is there already.
    async fn rest(&self, wf: WorkflowRef<'_>, state: &EpisodeState) -> Result<(), EngineError> {
        let t = self.store.tables();
        let Some(update) = whimbrel_rules::decide::decided::idle_due(t, wf, state) else {
            return Ok(());
        };
        match self.store.update(update).await {
            Ok(_) | Err(StoreError::ConditionFailed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Attempt `id` of a decision, started on `state`: the request, the
    /// decider's answer (an error defers the attempt), its judgement and
    /// commit, and its effects. Returns true when its effects rested the
    /// execution ([`Self::apply_decision`]): nothing is left to drive.
    async fn run_decision(
        &self,
        wf: WorkflowRef<'_>,
        state: &EpisodeState,
        id: &str,
    ) -> Result<bool, EngineError> {
        let (request, to_seq) = self.decision_request(wf, state, id).await?;
        let decider = state.decider.clone().unwrap_or_default();
        let payload = serde_json::to_value(&request).expect("serializable");
        let began = std::time::Instant::now();
        let answer = match self.invoke_decider(&decider, &payload).await {
            Ok(answer) => answer,
            Err(why) => {
                warn!(workflow_exec_id = wf.exec_id, decision_id = id, error = %why, "decider failed; the decision is tried again after its backoff");
                let now = self.now().epoch;
                let current = self.episode_state(wf).await?;
                // Only this attempt is deferred: a late error of an attempt
                // retried meanwhile leaves the one in flight alone.
                if current.decision_id.as_deref() != Some(id) {
                    return Ok(false);
                }
                if let Some(defer) =
                    episodes::defer_decision(self.store.tables(), wf, &current, now)
                {
                    match self.store.update(defer).await {
                        Ok(_) | Err(StoreError::ConditionFailed) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                return Ok(false);
            }
        };
        crate::metrics::decision_latency(began.elapsed());
        let from = state.decided_seq + 1;
        // The events there were when the request was built: those past
        // its window of 100 were not shown, but did not arrive while the
        // decider decided.
        let known = state.event_seq.max(to_seq);
        self.commit_answer(wf, id, (from, to_seq), known, answer)
            .await
    }

    /// The decider's answer, or why there is none.
    async fn invoke_decider(&self, decider: &str, payload: &Value) -> Result<Value, String> {
        if let Some(why) = self.config.launch_targets.refusal(decider) {
            return Err(format!("decider refused: {why}"));
        }
        // Within the invocation's budget (issue 42 A.4): a hung decider
        // holds no function past its timeout; the attempt is deferred and
        // tried again, as after an error.
        match super::budget::before_deadline(self.launcher.invoke_sync(decider, payload)).await {
            Some(answer) => answer.map_err(|e| e.to_string()),
            None => Err(format!(
                "{decider} did not answer within the invocation's time budget"
            )),
        }
    }

    /// Judge and commit `answer` of attempt `id`, which saw the events
    /// `seen` (first, last) of the `known` there were when its request was
    /// built, then write its effects, judged at rest by the state the
    /// commit left (`decided::committed_state`). Returns true when they
    /// rested the execution.
    async fn commit_answer(
        &self,
        wf: WorkflowRef<'_>,
        id: &str,
        seen: (u64, u64),
        known: u64,
        answer: Value,
    ) -> Result<bool, EngineError> {
        for _ in 0..WRITE_TRIES {
            let state = self.episode_state(wf).await?;
            if state.decision_id.as_deref() != Some(id) {
                info!(
                    workflow_exec_id = wf.exec_id,
                    decision_id = id,
                    "answer of an attempt no longer in flight: not committed"
                );
                return Ok(false);
            }
            let judged = self.judge(wf, &state, known, answer.clone()).await?;
            let max = self.config.decisions.max_refusals;
            if let Some(reason) = judged.refused.as_deref() {
                warn!(workflow_exec_id = wf.exec_id, decision_id = id, %reason, "decision refused");
                if episodes::refusals_exhausted(&state, max) {
                    let why = format!(
                        "decider failed: {max} answers refused in a row; the last: {reason}"
                    );
                    return self.fail_decision(wf, id, &why).await.map(|()| false);
                }
            }
            let closes = judged.answer.as_ref().is_some_and(DecisionsAnswer::closes);
            let record = decision_record(id, (seen, known), self.now().epoch, &judged);
            let writes =
                episodes::commit_decision(self.store.tables(), wf, &state, &record, closes);
            match self.store.transact(writes).await {
                Ok(()) if judged.refused.is_some() => return Ok(false),
                Ok(()) => {
                    let number = state.decision_number();
                    let mut known =
                        whimbrel_rules::decide::decided::committed_state(&state, &record);
                    if closes {
                        known.closed_by_decision = Some(number);
                    }
                    return Box::pin(self.apply_decision(wf, number, &known)).await;
                }
                Err(StoreError::ConditionFailed | StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::Retry(format!(
            "{}: commit of {id} lost {WRITE_TRIES} races",
            wf.exec_id
        )))
    }

    /// `answer` judged against the execution as it is (design.md § 10.5):
    /// its shape, its decisions against the nodes it names (a close only
    /// while no event came after the `known` its request was built on:
    /// events past the request's window of 100 do not hold a close back,
    /// or a decider that closes on what it was shown was refused the same
    /// request again and again, and failed at the fifth), and its
    /// targets against the deployment's launch targets and what the
    /// registration allows (read as it is now: an operator's narrowing
    /// holds for executions already running).
    async fn judge(
        &self,
        WorkflowRef {
            exec_id: workflow_exec_id,
            name: workflow_name,
        }: WorkflowRef<'_>,
        state: &EpisodeState,
        known: u64,
        answer: Value,
    ) -> Result<Judged, EngineError> {
        let refuse = |why: String| Judged {
            answer: None,
            refused: Some(why),
        };
        let answer = match DeciderAnswer::from_value(answer) {
            Ok(DeciderAnswer::Decisions(a)) => a,
            Ok(DeciderAnswer::Plan(_)) => return Ok(refuse(
                "a plan answers only the workflow_started request; a decision request is answered with {\"decisions\": [...]}".into(),
            )),
            Err(e) => return Ok(refuse(format!("not an answer: {e}"))),
        };
        let names = decider::names_in(&answer);
        let nodes = self.nodes_named(workflow_exec_id, names.iter()).await?;
        let ctx = DecisionContext {
            state_by_name: nodes.iter().map(|(n, a)| (n.clone(), a.state)).collect(),
            dependents_by_name: (nodes.iter())
                .map(|(n, a)| (n.clone(), a.links.dependents.len()))
                .collect(),
            node_count: state.activity_count as usize,
            open_bytes: state.open_nodes.iter().map(String::len).sum(),
            open_count: state.open_nodes.len(),
            markers: if records_markers(&answer) {
                self.markers(workflow_exec_id).await?.into_keys().collect()
            } else {
                Default::default()
            },
            unseen_events: state.event_seq > known,
            now: self.now().epoch,
            first: false,
        };
        if let Err(why) = decider::validate(&answer, &ctx) {
            return Ok(refuse(why.to_string()));
        }
        let planned = scheduled(&answer);
        // Read only for an answer that schedules a node.
        let allow = match planned.activities.is_empty() {
            true => None,
            false => self
                .registration_of(workflow_name)
                .await?
                .and_then(|r| r.allow),
        };
        let targets = &self.config.launch_targets;
        if let Some(why) = crate::targets::plan_refusal(&planned, targets, allow.as_ref()) {
            return Ok(refuse(why));
        }
        Ok(Judged {
            answer: Some(answer),
            refused: None,
        })
    }
}

/// Whether `answer` records a marker (its judge then reads the names in
/// use, [`decider::MAX_MARKERS`]).
fn records_markers(answer: &DecisionsAnswer) -> bool {
    (answer.decisions.iter()).any(|d| matches!(d, Decision::RecordMarker { .. }))
}

/// Every node `answer` schedules, as one plan (for the launch targets).
pub(crate) fn scheduled(answer: &DecisionsAnswer) -> Plan {
    Plan::of(
        answer
            .decisions
            .iter()
            .flat_map(|d| match d {
                decider::Decision::Schedule { activities } => activities.clone(),
                _ => vec![],
            })
            .collect(),
    )
}

/// What decision attempt `id`, which saw `seen` (first, last event) of the
/// `known` there were when its request was built, records when it commits
/// at `now` (a close keeps `known` when it is more than it saw).
fn decision_record(
    id: &str,
    (seen, known): ((u64, u64), u64),
    now: i64,
    judged: &Judged,
) -> DecisionRecord {
    let answer = judged.answer.as_ref();
    let closes = answer.is_some_and(DecisionsAnswer::closes);
    DecisionRecord {
        decision_id: id.to_string(),
        from_seq: seen.0,
        to_seq: seen.1,
        decided_epoch: now,
        decisions: answer
            .map(|a| serde_json::to_value(&a.decisions).unwrap_or(Value::Null))
            .unwrap_or_else(|| Value::Array(vec![])),
        refused: judged.refused.clone(),
        decide_on: answer.and_then(|a| a.decide_on.clone()),
        ended: vec![],
        known_seq: (closes && known > seen.1).then_some(known),
    }
}

/// The event kinds an episodic execution is consulted on when its first
/// answer does not say (design.md § 10.1): all of them.
pub fn every_event_kind() -> Vec<EventKind> {
    vec![
        EventKind::ActivityEnded,
        EventKind::Signal,
        EventKind::CancelRequested,
    ]
}
