//! The writes of an episodic execution (design.md § 10.2, § 10.3): an
//! event appended to its ordered log once, one decision in flight at a
//! time, and a commit that applies at most once. Each write is
//! conditioned on what was read, so a step run twice, late or after a
//! crash changes nothing the first run did not.

use crate::keys::WorkflowRef;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::attr;
use crate::contract::WorkflowState;
use crate::decider::EventKind;
use crate::keys::Tables;
use crate::write::{av, n, s, Action, Cond, Item, UpdateRequest, Write};

/// Longest attempt of a decision, seconds: the decider's synchronous
/// Invoke (at most Lambda's 900 s) and the commit. The executor gives an
/// attempt its decider's function timeout plus [`ATTEMPT_MARGIN_SECONDS`],
/// at most this; an attempt in flight longer is taken to be lost and
/// tried again.
pub const DECISION_ATTEMPT_SECONDS: i64 = 960;

/// What an attempt is given beyond its decider's function timeout, for
/// the request's reads and the commit, seconds.
pub const ATTEMPT_MARGIN_SECONDS: i64 = 60;

/// Longest backoff between a decision's attempts, seconds.
pub const MAX_DECISION_BACKOFF_SECONDS: i64 = 60;

/// The episode attributes of a workflow exec, read by projection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EpisodeState {
    /// The log's last event ([`attr::EVENT_SEQ`]).
    #[serde(default)]
    pub event_seq: u64,
    /// The last event a committed decision saw ([`attr::DECIDED_SEQ`]).
    #[serde(default)]
    pub decided_seq: u64,
    /// Decisions committed ([`attr::DECISION_COUNT`]).
    #[serde(default)]
    pub decision_count: u64,
    /// Answers refused in a row ([`attr::DECISION_REFUSALS`]).
    #[serde(default)]
    pub decision_refusals: u32,
    /// The decision in flight ([`attr::DECISION_ID`]), if any.
    #[serde(default)]
    pub decision_id: Option<String>,
    /// Its attempt, from 1.
    #[serde(default)]
    pub decision_attempt: u32,
    /// When it is tried again, epoch seconds.
    #[serde(default)]
    pub decision_due_epoch: Option<i64>,
    /// When its first attempt started, epoch seconds.
    #[serde(default)]
    pub decision_first_epoch: Option<i64>,
    /// The last decision whose effects are written
    /// ([`attr::DECISIONS_APPLIED`]).
    #[serde(default)]
    pub decisions_applied: u64,
    /// The events the decider is consulted on ([`attr::DECIDE_ON`]);
    /// absent on an execution that is not episodic.
    #[serde(default)]
    pub decide_on: Option<Vec<EventKind>>,
    /// The execution's state (absent only in a test's item).
    #[serde(default)]
    pub state: Option<WorkflowState>,
    /// The decision that closed it ([`attr::CLOSED_BY_DECISION`]).
    #[serde(default)]
    pub closed_by_decision: Option<u64>,
    /// Its nodes not ended ([`attr::OPEN_NODES`]).
    #[serde(default, with = "serde_dynamo::string_set")]
    pub open_nodes: Vec<String>,
    /// Its node ends no accepted decision has seen, as
    /// [`ended_entry`]s ([`attr::ENDED_EVENTS`]).
    #[serde(default, with = "serde_dynamo::string_set")]
    pub ended_events: Vec<String>,
    /// Its nodes ([`attr::ACTIVITY_COUNT`]).
    #[serde(default)]
    pub activity_count: u64,
    /// Its decider ([`attr::DECIDER`]).
    #[serde(default)]
    pub decider: Option<String>,
    /// When it started, epoch seconds.
    #[serde(default)]
    pub start_time_epoch: i64,
    /// Its execution timeout, seconds.
    #[serde(default)]
    pub execution_timeout_seconds: Option<i64>,
    /// When the monitor looks at it next ([`attr::DUE_EPOCH`]), epoch
    /// seconds.
    #[serde(default)]
    pub due_epoch: Option<i64>,
}

impl EpisodeState {
    /// The number of the decision in flight, or of the next one.
    pub fn decision_number(&self) -> u64 {
        self.decision_count + 1
    }

    /// Its execution deadline, epoch seconds ([`super::workflow::deadline_after`]).
    pub fn deadline(&self) -> Option<i64> {
        super::workflow::deadline_after(self.start_time_epoch, self.execution_timeout_seconds)
    }

    /// The due marker for something the execution owes at `at` (epoch
    /// seconds): `at`, or its execution deadline when that comes first,
    /// so the monitor fails the execution on its second whatever a
    /// decision in flight or deferred does (issue 42 A.10).
    pub fn marker_at(&self, at: i64) -> i64 {
        self.deadline().map_or(at, |d| d.min(at))
    }

    /// Events no committed decision has seen.
    pub fn has_new_events(&self) -> bool {
        self.event_seq > self.decided_seq
    }

    /// A committed decision's effects are not all written yet: they come
    /// before the next decision, which must see them.
    pub fn effects_owed(&self) -> bool {
        self.decisions_applied < self.decision_count
    }

    /// The attributes read by projection.
    pub const ATTRIBUTES: [&'static str; 19] = [
        attr::EVENT_SEQ,
        attr::DECIDED_SEQ,
        attr::DECISION_COUNT,
        attr::DECISION_REFUSALS,
        attr::DECISION_ID,
        attr::DECISION_ATTEMPT,
        attr::DECISION_DUE_EPOCH,
        attr::DECISION_FIRST_EPOCH,
        attr::DECISIONS_APPLIED,
        attr::DECIDE_ON,
        attr::STATE,
        attr::CLOSED_BY_DECISION,
        attr::OPEN_NODES,
        attr::ENDED_EVENTS,
        attr::ACTIVITY_COUNT,
        attr::DECIDER,
        attr::START_TIME_EPOCH,
        attr::EXECUTION_TIMEOUT_SECONDS,
        attr::DUE_EPOCH,
    ];

    /// RUNNING, its first answer committed (decision 1), and not closed by
    /// a decision: an event may be appended. Before decision 1 no event is
    /// taken, so none can start a decision that races the first answer.
    pub fn takes_events(&self) -> bool {
        self.state == Some(WorkflowState::Running)
            && self.decision_count > 0
            && self.closed_by_decision.is_none()
    }

    /// The node ends logged at places `from..=to` ([`ended_entry`]s), by
    /// place.
    pub fn ended_between(&self, from: u64, to: u64) -> Vec<(u64, &str)> {
        let mut ends: Vec<(u64, &str)> = (self.ended_events.iter())
            .filter_map(|e| parse_ended_entry(e))
            .filter(|(seq, _)| (from..=to).contains(seq))
            .collect();
        ends.sort();
        ends
    }
}

/// The entry of [`attr::ENDED_EVENTS`] that logs node `node`'s end at
/// place `seq`: `(seq, 10 digits):(node)`.
pub fn ended_entry(seq: u64, node: &str) -> String {
    format!("{seq:010}:{node}")
}

/// The place and node of an [`ended_entry`]; `None` for any other text.
pub fn parse_ended_entry(entry: &str) -> Option<(u64, &str)> {
    let (seq, node) = entry.split_once(':')?;
    Some((seq.parse().ok()?, node))
}

/// One event of an execution's log, as stored on `whimbrel_decision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeEvent {
    /// The execution.
    pub workflow_exec_id: String,
    /// `event#(seq)` ([`event_log_key`]).
    pub log_key: String,
    /// Its place in the log, from 1.
    pub seq: u64,
    /// What happened.
    pub kind: EventKind,
    /// When, epoch seconds.
    pub at_epoch: i64,
    /// Its source, which makes it one event however often it is appended:
    /// `ended:(activity exec id)`, `signal:(signal key)`,
    /// `cancel:(request id)`, `refused:(decision id)`.
    pub source: String,
    /// What the decider is shown of it (an end's state, output or error, a
    /// signal's name and input, a reason).
    #[serde(default)]
    pub details: Value,
}

/// The range key of event `seq`: `event#` and 10 digits, so the log
/// sorts in order.
pub fn event_log_key(seq: u64) -> String {
    format!("event#{seq:010}")
}

/// The range key of the marker that makes `source` one event.
pub fn source_log_key(source: &str) -> String {
    format!("event-id#{source}")
}

/// The range key of committed decision `number`.
pub fn decision_log_key(number: u64) -> String {
    format!("decision#{number:010}")
}

/// The id of attempt `attempt` of decision `number`:
/// `(workflow_exec_id)::d(number)::a(attempt)`.
pub fn decision_id(workflow_exec_id: &str, number: u64, attempt: u32) -> String {
    format!("{workflow_exec_id}::d{number}::a{attempt}")
}

/// The `whimbrel_decision` item `log_key` of `workflow_exec_id`, with
/// `value`'s fields (a struct's) beside its key.
pub(super) fn log_item<T: Serialize>(workflow_exec_id: &str, log_key: String, value: &T) -> Item {
    let mut item = match av(value) {
        crate::write::Value::M(m) => m,
        _ => Item::new(),
    };
    item.insert(attr::WORKFLOW_EXEC_ID.into(), s(workflow_exec_id));
    item.insert(attr::LOG_KEY.into(), s(log_key));
    item
}

/// The put of a new `whimbrel_decision` item: never over one.
pub(super) fn put_new(t: &Tables, item: Item) -> Write {
    Write::Put {
        table: t.decision(),
        item,
        cond: Some(Cond::not_exists(attr::LOG_KEY)),
    }
}

/// The put of the engine's copy of signal `row` on `whimbrel_decision`
/// (the row's fields under [`crate::model::signal_copy_log_key`]): never
/// over one, so the first applied stands (issue 42 B.3).
pub fn signal_copy_put(t: &Tables, row: &crate::model::SignalRow) -> Write {
    let key = crate::model::signal_copy_log_key(&row.signal_key);
    put_new(t, log_item(&row.workflow_exec_id, key, row))
}

/// The range key of the item on `whimbrel_decision` that counts the
/// signals an execution keeps ([`signal_admit`]).
pub const SIGNALS_KEPT_LOG_KEY: &str = "signals-kept";

/// The update that counts signal `row` among those its execution keeps,
/// before the engine copies it (issue 42 B.4): `ADD kept {h}` on the
/// execution's [`SIGNALS_KEPT_LOG_KEY`] item, `h` its
/// [`signal_kept_mark`], under the condition that the set
/// is absent, holds fewer than
/// [`crate::model::MAX_SIGNALS_PER_EXECUTION`] signals, or holds `h`
/// already (a record applied again counts once). A false condition is
/// the signal past the limit, refused. The set stays under 1.4 KB.
pub fn signal_admit(t: &Tables, row: &crate::model::SignalRow) -> UpdateRequest {
    let mark = signal_kept_mark(&row.signal_key);
    let h = crate::write::Value::Ss(vec![mark.clone()]);
    let key = Item::from([
        (attr::WORKFLOW_EXEC_ID.into(), s(&row.workflow_exec_id)),
        (attr::LOG_KEY.into(), s(SIGNALS_KEPT_LOG_KEY)),
    ]);
    let cap = crate::model::MAX_SIGNALS_PER_EXECUTION as u64;
    UpdateRequest::new(t.decision(), key)
        .act(Action::Add(attr::SIGNALS_KEPT.into(), h.clone()))
        .when(Cond::Or(vec![
            Cond::not_exists(attr::SIGNALS_KEPT),
            Cond::SizeLt(attr::SIGNALS_KEPT.into(), cap),
            Cond::Contains(attr::SIGNALS_KEPT.into(), s(mark)),
        ]))
}

/// The range key of the item on `whimbrel_decision`, under a tree's root,
/// that counts the executions started below it ([`count_in_tree`]).
pub const TREE_LOG_KEY: &str = "tree";

/// The update that counts one more execution started below root
/// `root` (a workflow exec id): `ADD started 1` on the root's
/// [`TREE_LOG_KEY`] item, under the condition that fewer than `max` were
/// (issue 42 B.6). Written in one transaction with the child's exec, so
/// a start counts once however often it is applied; a false condition is
/// the child past its tree's budget.
pub fn count_in_tree(t: &Tables, root: &str, max: u64) -> UpdateRequest {
    let key = Item::from([
        (attr::WORKFLOW_EXEC_ID.into(), s(root)),
        (attr::LOG_KEY.into(), s(TREE_LOG_KEY)),
    ]);
    UpdateRequest::new(t.decision(), key)
        .act(Action::Add(attr::TREE_STARTED.into(), n(1)))
        .when(Cond::Or(vec![
            Cond::not_exists(attr::TREE_STARTED),
            Cond::lt(attr::TREE_STARTED, n(max)),
        ]))
}

/// How the signals-kept set names signal `signal_key`: the first 12 hex
/// digits of its SHA-256 (short, so 100 fit in under 1.4 KB).
pub fn signal_kept_mark(signal_key: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(signal_key.as_bytes()))[..12].to_string()
}

/// An update of the workflow exec `wf` (id, name).
pub(super) fn workflow_update(t: &Tables, wf: WorkflowRef<'_>) -> UpdateRequest {
    UpdateRequest::new(t.workflow_exec(), wf.key())
}

/// `update` of the workflow exec `wf` (read as `state`) putting attempt
/// `attempt` of a decision in flight under `id`, over at `due` (epoch
/// seconds), when the workflow is due too, or at its execution deadline
/// if that comes first ([`EpisodeState::marker_at`]).
fn in_flight(
    update: UpdateRequest,
    (wf, state): (WorkflowRef<'_>, &EpisodeState),
    id: &str,
    attempt: u32,
    due: i64,
) -> UpdateRequest {
    let update = update
        .set(attr::DECISION_ID, s(id))
        .set(attr::DECISION_ATTEMPT, n(attempt))
        .set(attr::DECISION_DUE_EPOCH, n(due))
        .when(running());
    due_at(update, wf.exec_id, state.marker_at(due))
}

/// The workflow's due marker at `at` (epoch seconds): the monitor looks at
/// the execution then (design.md § 10.3). An episode write only ever
/// moves it earlier than what it owes; the monitor's visit arms it again
/// for the execution deadline.
pub(super) fn due_at(req: UpdateRequest, workflow_exec_id: &str, at: i64) -> UpdateRequest {
    req.set(attr::DUE_EPOCH, n(at))
        .set(attr::DUE_SHARD, n(crate::keys::shard_of(workflow_exec_id)))
}

/// The execution is RUNNING.
pub(super) fn running() -> Cond {
    Cond::eq(attr::STATE, s(WorkflowState::Running.as_str()))
}

/// `attr = v`, or its absence when `v` is 0 (a counter never written).
pub(crate) fn counter_is(attr: &str, v: u64) -> Cond {
    match v {
        0 => Cond::not_exists(attr),
        v => Cond::eq(attr, n(v)),
    }
}

/// `update` of the workflow exec read as `state`, also moving its log
/// from `state.event_seq` to `event`'s place, only while the execution is
/// RUNNING and not closed by a decision. The due marker is the caller's:
/// an append that starts a decision makes it due when the attempt is over
/// ([`append_event`]); one that does not leaves it where the decision in
/// flight, or the one whose effects are owed, put it.
fn with_next_event(
    update: UpdateRequest,
    state: &EpisodeState,
    event: &EpisodeEvent,
) -> UpdateRequest {
    update
        .set(attr::EVENT_SEQ, n(event.seq))
        .when(running())
        .when(Cond::exists(attr::DECISION_COUNT))
        .when(Cond::not_exists(attr::CLOSED_BY_DECISION))
        .when(counter_is(attr::EVENT_SEQ, state.event_seq))
}

/// The put of `event` at the log's next place, only if new.
fn event_put(t: &Tables, event: &EpisodeEvent) -> Write {
    put_new(
        t,
        log_item(&event.workflow_exec_id, event.log_key.clone(), event),
    )
}

/// The put of the marker that makes `event`'s source one event, only if
/// new (every source but a node's end: [`append_node_end`]).
fn source_put(t: &Tables, event: &EpisodeEvent) -> Write {
    let marker = serde_json::json!({ "seq": event.seq });
    let key = source_log_key(&event.source);
    put_new(t, log_item(&event.workflow_exec_id, key, &marker))
}

/// The event after the last of the log of `workflow_exec_id` read as
/// `state`.
fn next_event(
    workflow_exec_id: &str,
    state: &EpisodeState,
    kind: EventKind,
    source: &str,
    at_epoch: i64,
    details: Value,
) -> EpisodeEvent {
    EpisodeEvent {
        workflow_exec_id: workflow_exec_id.to_string(),
        log_key: event_log_key(state.event_seq + 1),
        seq: state.event_seq + 1,
        kind,
        at_epoch,
        source: source.to_string(),
        details,
    }
}

/// An event to append: what happened, its source (which makes it one
/// event however often it is appended: [`EpisodeEvent::source`]), when
/// (epoch seconds), and what the decider is shown of it.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    /// What happened.
    pub kind: EventKind,
    /// Its source.
    pub source: &'a str,
    /// When, epoch seconds.
    pub at_epoch: i64,
    /// What the decider is shown.
    pub details: Value,
}

/// When an append may start the next decision: the appender's clock
/// (epoch seconds) and the attempt's length (seconds, as
/// [`start_decision`]'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartAt {
    /// Now, epoch seconds.
    pub now: i64,
    /// The attempt's length, seconds.
    pub attempt_seconds: i64,
}

/// An append's event, its writes (all or none: one UpdateItem for a
/// node's end, a transaction otherwise), and the decision it starts, if
/// any (the attempt's id).
#[derive(Debug, Clone)]
pub struct Appended {
    /// The event, at the log's next place.
    pub event: EpisodeEvent,
    /// The writes, all or none (one UpdateItem for a node's end).
    pub writes: Vec<Write>,
    /// The decision attempt the same write starts.
    pub started: Option<String>,
}

/// The append of `event` to the log of the RUNNING execution `wf` (id,
/// name) read as `state`: one transaction (design.md § 10.2). With `start`,
/// and when `state` has no decision in flight and no effects owed, the
/// same write starts the next decision (attempt 1, as
/// [`start_decision`]'s, conditioned alike) and makes the workflow due
/// when that attempt is over: an appender that dies before its decider
/// answers leaves the attempt to the monitor then (design.md § 10.9).
/// A failed transaction means the source was appended already (its marker
/// exists: done), or another write won the place or the start (read
/// again, retry), or the execution ended (nothing to tell).
pub fn append_event(
    t: &Tables,
    wf: WorkflowRef<'_>,
    state: &EpisodeState,
    event: NewEvent<'_>,
    start: Option<StartAt>,
) -> Appended {
    let mut appended = append_to_log(t, wf, state, event, start, None);
    appended.writes.push(source_put(t, &appended.event));
    appended
}

/// The append of node `node`'s end (an `activity_ended` event from
/// [`ended_source`]), as [`append_event`]'s but one UpdateItem of the
/// workflow item (design.md § 10.9): the end is logged in its
/// [`attr::ENDED_EVENTS`] ([`ended_entry`]), not as an `event#` item (the
/// node's item holds what the decider is shown of it), and the node
/// leaves the open nodes ([`attr::OPEN_NODES`]) in the same write,
/// conditioned on it being there: that condition, not a source marker,
/// makes the end one event (a node leaves the open nodes only here).
pub fn append_node_end(
    t: &Tables,
    wf: WorkflowRef<'_>,
    state: &EpisodeState,
    node: &str,
    (at_epoch, details): (i64, Value),
    start: Option<StartAt>,
) -> Appended {
    let source = ended_source(wf.exec_id, node);
    let event = NewEvent {
        kind: EventKind::ActivityEnded,
        source: &source,
        at_epoch,
        details,
    };
    append_to_log(t, wf, state, event, start, Some(node))
}

/// The source of node `node`'s end in execution `workflow_exec_id`: a
/// node ends once (an episodic execution is not redriven).
pub fn ended_source(workflow_exec_id: &str, node: &str) -> String {
    format!(
        "ended:{}",
        crate::ids::activity_exec_id(workflow_exec_id, node)
    )
}

/// The node whose end `source` is ([`ended_source`]), if it is one: such
/// a source has no marker; the node's absence from the open nodes says it
/// was appended.
pub fn ended_node(source: &str) -> Option<&str> {
    crate::ids::name_of(source.strip_prefix("ended:")?)
}

/// [`append_event`]'s workflow update and event put, starting the next
/// decision when `start` allows it (without `start`, due at the event's
/// time if a decision is owed and none is in flight); for `ended`, the
/// end of that node, logged on the workflow item and taken out of the
/// open nodes, only while it is there.
fn append_to_log(
    t: &Tables,
    wf: WorkflowRef<'_>,
    state: &EpisodeState,
    e: NewEvent<'_>,
    start: Option<StartAt>,
    ended: Option<&str>,
) -> Appended {
    let event = next_event(wf.exec_id, state, e.kind, e.source, e.at_epoch, e.details);
    let mut update = with_next_event(workflow_update(t, wf), state, &event);
    if let Some(node) = ended {
        let set = crate::write::Value::Ss(vec![node.to_string()]);
        let entry = crate::write::Value::Ss(vec![ended_entry(event.seq, node)]);
        update = update
            .act(Action::Delete(attr::OPEN_NODES.into(), set))
            .act(Action::Add(attr::ENDED_EVENTS.into(), entry))
            .when(Cond::Contains(attr::OPEN_NODES.into(), s(node)));
    }
    let startable = state.decision_id.is_none() && !state.effects_owed();
    let mut started = None;
    match start {
        Some(at) if startable => {
            let (id, starting) = first_attempt(update, wf, state, at);
            update = starting;
            started = Some(id);
        }
        // A decision is owed and none will be started here: the monitor
        // starts it at once if the appender dies first.
        None if startable => update = due_at(update, wf.exec_id, event.at_epoch),
        // What covers the event is the decision in flight, or the one
        // whose effects are owed, as read: only while it still is, or the
        // rest may have removed the marker (review of § 10.9's change).
        _ => update = update.when(covered_by(state)),
    }
    let mut writes = vec![update.into_write()];
    if ended.is_none() {
        writes.push(event_put(t, &event));
    }
    Appended {
        event,
        writes,
        started,
    }
}

/// What an append that starts nothing relies on, as read in `state`: the
/// decision in flight (its id), or else the committed decision whose
/// effects are owed (`decisions_applied` below `decision_count`). Its end
/// moves the due marker or starts the next decision, which sees the event.
fn covered_by(state: &EpisodeState) -> Cond {
    match &state.decision_id {
        Some(id) => Cond::eq(attr::DECISION_ID, s(id.clone())),
        None => counter_is(attr::DECISIONS_APPLIED, state.decisions_applied),
    }
}

/// `update` of the workflow exec `wf` read as `state` also starting
/// attempt 1 of decision `state.decision_number()` at `at.now`: only
/// while none is in flight, no decision committed since the read (a stale
/// append would start a committed number again), and every committed
/// decision's effects are written. The workflow is due when the attempt is over.
fn first_attempt(
    update: UpdateRequest,
    wf: WorkflowRef<'_>,
    state: &EpisodeState,
    at: StartAt,
) -> (String, UpdateRequest) {
    let id = decision_id(wf.exec_id, state.decision_number(), 1);
    let due = at.now + at.attempt_seconds.min(DECISION_ATTEMPT_SECONDS);
    let update = in_flight(update, (wf, state), &id, 1, due)
        .set(attr::DECISION_FIRST_EPOCH, n(at.now))
        .when(Cond::not_exists(attr::DECISION_ID))
        .when(counter_is(attr::DECISION_COUNT, state.decision_count))
        .when(counter_is(attr::DECISIONS_APPLIED, state.decision_count));
    (id, update)
}

/// Start decision `state.decision_number()` at `now`, attempt 1, given
/// `attempt_seconds` (its decider's timeout plus
/// [`ATTEMPT_MARGIN_SECONDS`], at most [`DECISION_ATTEMPT_SECONDS`]),
/// when the log has events no decision saw, none is in flight and every
/// committed decision's effects are written: conditioned on all of that
/// as read (`first_attempt`). The workflow is due when the attempt is
/// over. Returns its id and the write; `None` when there is nothing to
/// start.
pub fn start_decision(
    t: &Tables,
    wf: WorkflowRef<'_>,
    state: &EpisodeState,
    now: i64,
    attempt_seconds: i64,
) -> Option<(String, UpdateRequest)> {
    let first_committed = state.decision_count > 0;
    if state.decision_id.is_some()
        || !state.has_new_events()
        || state.effects_owed()
        || !first_committed
    {
        return None;
    }
    let at = StartAt {
        now,
        attempt_seconds,
    };
    let update = workflow_update(t, wf).when(counter_is(attr::DECIDED_SEQ, state.decided_seq));
    Some(first_attempt(update, wf, state, at))
}

/// The wait before attempt `attempt + 1` of a decision whose attempt
/// `attempt` failed: 1 s doubling, at most
/// [`MAX_DECISION_BACKOFF_SECONDS`].
pub fn decision_backoff(attempt: u32) -> i64 {
    1_i64
        .checked_shl(attempt.saturating_sub(1).min(16))
        .unwrap_or(i64::MAX)
        .min(MAX_DECISION_BACKOFF_SECONDS)
}

/// Start the next attempt of the decision in flight at `now`, given
/// `attempt_seconds` (as [`start_decision`]'s): its last attempt errored
/// and its backoff is over, or it was lost. A new id, so a late answer of
/// the old attempt commits nothing. Conditioned on the old id and on the
/// execution RUNNING; `None` when none is in flight.
pub fn retry_decision(
    t: &Tables,
    wf: WorkflowRef<'_>,
    state: &EpisodeState,
    now: i64,
    attempt_seconds: i64,
) -> Option<(String, UpdateRequest)> {
    let old = state.decision_id.as_deref()?;
    let attempt = state.decision_attempt.max(1) + 1;
    let id = decision_id(wf.exec_id, state.decision_number(), attempt);
    let due = now + attempt_seconds.min(DECISION_ATTEMPT_SECONDS);
    let req = in_flight(workflow_update(t, wf), (wf, state), &id, attempt, due)
        .when(Cond::eq(attr::DECISION_ID, s(old)));
    Some((id, req))
}

/// The attempt in flight failed at `now` (the decider errored, was
/// throttled, or answered what is not an answer): its next attempt is
/// due after [`decision_backoff`], and the workflow with it (or at its
/// execution deadline, if that comes first). Conditioned
/// on its id and on the execution RUNNING.
pub fn defer_decision(
    t: &Tables,
    wf: WorkflowRef<'_>,
    state: &EpisodeState,
    now: i64,
) -> Option<UpdateRequest> {
    let id = state.decision_id.as_deref()?;
    let due = now + decision_backoff(state.decision_attempt.max(1));
    let req = workflow_update(t, wf)
        .set(attr::DECISION_DUE_EPOCH, n(due))
        .when(running())
        .when(Cond::eq(attr::DECISION_ID, s(id)));
    Some(due_at(req, wf.exec_id, state.marker_at(due)))
}

/// What a committed decision records on its `decision#(number)` item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// The attempt's id.
    pub decision_id: String,
    /// The first event it saw.
    pub from_seq: u64,
    /// The last event it saw.
    pub to_seq: u64,
    /// When it committed, epoch seconds.
    pub decided_epoch: i64,
    /// The decisions, as validated (`[]` for a refused answer).
    pub decisions: Value,
    /// Why the answer was refused; absent when it was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The events the decider is consulted on from now, when the answer
    /// changed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decide_on: Option<Vec<EventKind>>,
    /// The node ends it saw ([`ended_entry`]s, taken out of
    /// [`attr::ENDED_EVENTS`] as it commits); empty for a refused answer,
    /// which sees them again next time. Filled by [`commit_decision`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ended: Vec<String>,
    /// For a close: the events there were when its request was built, when
    /// more than it was shown (those past its window of 100 did not arrive
    /// while the decider decided, so they do not hold the close back:
    /// [`commit_decision`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_seq: Option<u64>,
}

/// The commit of the decision in flight (`state`, re-read just before;
/// its attempt `record.decision_id`) at `record.decided_epoch`: one
/// transaction of the workflow, conditioned on the execution RUNNING and
/// on that attempt still being in flight, and the decision's record,
/// conditioned on being new (design.md § 10.3).
///
/// - Accepted: the events up to `record.to_seq` are decided and the
///   refusal count is cleared; the nodes it schedules are opened
///   ([`super::decided::open_scheduled`]), their items put by the effects; the node ends among them leave
///   [`attr::ENDED_EVENTS`] for the record's `ended`. The due marker stays where the attempt's
///   start put it (when the attempt is over): the committer writes the
///   effects next, and if it dies first the monitor finds them owed then
///   (design.md § 10.9: one marker move per episode instead of four).
///   `closes` (the answer ends the execution): only while no event came
///   after those there were when its request was built (`known_seq`, or
///   `to_seq`), and none is appended after it.
/// - Refused (`record.refused`): the events it saw stay undecided, so the
///   next decision sees them again, with a `decision_refused` event
///   appended after them; the refusal is counted. `closes` is ignored.
pub fn commit_decision(
    t: &Tables,
    wf: WorkflowRef<'_>,
    state: &EpisodeState,
    record: &DecisionRecord,
    closes: bool,
) -> Vec<Write> {
    let number = state.decision_number();
    let mut update = workflow_update(t, wf)
        .set(attr::DECISION_COUNT, n(number))
        .when(running())
        .when(Cond::eq(attr::DECISION_ID, s(record.decision_id.clone())));
    for a in [
        attr::DECISION_ID,
        attr::DECISION_ATTEMPT,
        attr::DECISION_DUE_EPOCH,
        attr::DECISION_FIRST_EPOCH,
    ] {
        update = update.remove(a);
    }
    let mut writes = vec![];
    let mut record = record.clone();
    match record.refused.clone() {
        Some(reason) => {
            let event = next_event(
                wf.exec_id,
                state,
                EventKind::DecisionRefused,
                &format!("refused:{}", record.decision_id),
                record.decided_epoch,
                serde_json::json!({ "reason": reason }),
            );
            // Nothing to apply: its effects are written as it commits.
            // Due at once: the refusal is an event the next decision sees.
            update = with_next_event(update, state, &event)
                .act(Action::Add(attr::DECISION_REFUSALS.into(), n(1)))
                .set(attr::DECISIONS_APPLIED, n(number));
            update = due_at(update, wf.exec_id, record.decided_epoch);
            writes.extend([event_put(t, &event), source_put(t, &event)]);
        }
        None => {
            update = update
                .set(attr::DECIDED_SEQ, n(record.to_seq))
                .set(attr::DECISION_REFUSALS, n(0));
            let names = super::decided::scheduled_names(&record.decisions);
            update = super::decided::open_scheduled(update, &names);
            record.ended = (state.ended_between(record.from_seq, record.to_seq))
                .into_iter()
                .map(|(seq, node)| ended_entry(seq, node))
                .collect();
            if !record.ended.is_empty() {
                let seen = crate::write::Value::Ss(record.ended.clone());
                update = update.act(Action::Delete(attr::ENDED_EVENTS.into(), seen));
            }
            if let Some(kinds) = &record.decide_on {
                update = update.set(attr::DECIDE_ON, av(kinds));
            }
            if closes {
                let known = record.known_seq.unwrap_or(record.to_seq);
                update = update
                    .set(attr::CLOSED_BY_DECISION, n(number))
                    .when(counter_is(attr::EVENT_SEQ, known));
            }
        }
    }
    writes.insert(0, update.into_write());
    writes.push(put_new(
        t,
        log_item(wf.exec_id, decision_log_key(number), &record),
    ));
    writes
}

/// True when a refusal now would be the `max_refusals`th in a row
/// ([`crate::decider::DEFAULT_MAX_REFUSALS`]): the workflow fails with
/// its reason instead (design.md § 10.3).
pub fn refusals_exhausted(state: &EpisodeState, max_refusals: u32) -> bool {
    state.decision_refusals.saturating_add(1) >= max_refusals
}

/// What the monitor does with an episodic execution at `now` (design.md
/// § 10.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionVerdict {
    /// No event waits and no decision is in flight.
    Idle,
    /// Events wait and no decision is in flight: start one.
    Start,
    /// A decision is in flight until then (epoch seconds).
    Wait(i64),
    /// The attempt in flight is past its deadline: start the next.
    Retry,
    /// The decision has been tried for `timeout_seconds`: fail the
    /// workflow with this reason.
    GiveUp(String),
}

/// The monitor's verdict on `state` at `now`, with the registration's
/// decision timeout (seconds from a decision's first attempt): an
/// attempt in flight is waited for until its due time, even past the
/// timeout (it may still commit); only then is the decision given up,
/// or tried again.
pub fn decision_verdict(state: &EpisodeState, now: i64, timeout_seconds: i64) -> DecisionVerdict {
    if state.decision_id.is_none() {
        return match state.has_new_events() {
            true => DecisionVerdict::Start,
            false => DecisionVerdict::Idle,
        };
    }
    if let Some(due) = state.decision_due_epoch.filter(|due| now < *due) {
        return DecisionVerdict::Wait(due);
    }
    let first = state.decision_first_epoch.unwrap_or(now);
    if now >= first.saturating_add(timeout_seconds) {
        return DecisionVerdict::GiveUp(format!(
            "decider failed: no decision committed in {timeout_seconds} s ({} attempts)",
            state.decision_attempt
        ));
    }
    DecisionVerdict::Retry
}
