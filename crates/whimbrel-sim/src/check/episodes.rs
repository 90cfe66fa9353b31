//! The invariants of episodic executions (design.md § 10), one for each
//! promise of § 10.2–10.3, checked on what `whimbrel_decision` and the
//! execution items hold and on the answers the simulation's decider gave
//! ([`crate::episodes::Given`]).
//!
//! Safety, after every step:
//! - **the log**: events `1..=event_seq` each stored once, in place, each
//!   from a source appended once (its source marker names its place);
//! - **each event is seen by exactly one decision**: the accepted
//!   decisions' ranges follow each other with no gap and no overlap up
//!   to `decided_seq` (a refused one sees the same events again, and
//!   commits nothing);
//! - **a redelivered answer commits nothing**: decisions `1..=count` are
//!   recorded once each, each by an answer the decider gave to that very
//!   attempt, with its decisions; an answer meant to be refused never is
//!   accepted;
//! - **effects at most once, and only of committed answers**: every node
//!   a decision scheduled is named by that accepted decision, as it was
//!   answered (kind, target, input);
//! - **one decision in flight**: the decider is never asked decision `n`
//!   once it committed, nor before decision `n - 1` did.
//!
//! Liveness, at the end: every committed decision's effects are written
//! (nothing in flight, every node it scheduled exists, the latest
//! marker kept); **no event is lost between decisions**: an execution
//! the decider completed or continued (it does so only with no node
//! open) saw the end of every node in a decision, and no event came
//! after its last; a completed chain's result is its decider's; a
//! continued execution has exactly one successor, which names it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use whimbrel_core::attr;
use whimbrel_core::decider::Decision;
use whimbrel_core::engine::decide::episodes::{self, DecisionRecord, EpisodeEvent, EpisodeState};
use whimbrel_core::model::{
    signal_copy_log_key, ActivityExec, SignalRow, WorkflowExec, MAX_SIGNALS_PER_EXECUTION,
};
use whimbrel_core::plan::PlannedActivity;
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::{Item, Tables};

use crate::episodes::{EpisodeSpec, Given};

/// What the checker remembers of episodes between looks.
#[derive(Debug, Default)]
pub struct Seen {
    /// Asks of the decider already checked.
    asks: usize,
    /// (execution, decision number) committed at the last look, and the
    /// attempt that committed it.
    committed: HashMap<(String, u64), u32>,
    /// The decider's answers so far ([`Given`]) in [`normal`] form, in
    /// order: an answer never changes, so each is normalized once.
    normals: Vec<Value>,
}

/// A decision record's decisions: as recorded, parsed (none when they do
/// not parse), and in [`normal`] form.
#[derive(Debug, Clone)]
pub(super) struct Decided {
    of: Value,
    list: Vec<Decision>,
    normal: Value,
}

impl Decided {
    fn of(decisions: &Value) -> Self {
        Decided {
            of: decisions.clone(),
            list: serde_json::from_value(decisions.clone()).unwrap_or_default(),
            normal: normal(decisions),
        }
    }
}

/// One episodic execution as stored.
#[derive(Debug, Clone)]
pub(super) struct Log {
    pub exec: WorkflowExec,
    pub state: EpisodeState,
    pub events: BTreeMap<u64, Arc<EpisodeEvent>>,
    /// Source → the place its marker names.
    pub sources: HashMap<String, u64>,
    pub records: BTreeMap<u64, Arc<DecisionRecord>>,
    /// Each record's decisions as read, parsed and as the engine would
    /// record them ([`normal`]), kept from the read ([`Log::decided`]).
    pub decided: BTreeMap<u64, Arc<Decided>>,
    /// Marker name → (details, decision that wrote it).
    pub markers: HashMap<String, (Value, u64)>,
}

fn text(item: &Item, key: &str) -> String {
    match item.get(key) {
        Some(whimbrel_core::store::Value::S(v)) => v.clone(),
        _ => String::new(),
    }
}

/// An episodic execution's item, read as its exec and episode state;
/// `None` for any other item.
fn read_episodic(_: &str, item: &Item) -> Option<(WorkflowExec, EpisodeState)> {
    let exec = serde_dynamo::from_item::<_, WorkflowExec>(item.clone()).ok()?;
    let state = serde_dynamo::from_item::<_, EpisodeState>(item.clone()).ok()?;
    exec.is_episodic().then_some((exec, state))
}

/// One item of `whimbrel_decision`, read: its execution, its log key,
/// and what it holds (or why it does not parse).
type ReadEntry = (String, String, Result<Entry, String>);

/// What one item of `whimbrel_decision` holds, by its log key's prefix.
#[derive(Debug, Clone)]
enum Entry {
    /// `event#<seq>`.
    Event(u64, Arc<EpisodeEvent>),
    /// `event-id#<source>`: the place its marker names.
    Source(String, u64),
    /// `decision#<n>`, with its decisions read.
    Record(u64, Arc<DecisionRecord>, Arc<Decided>),
    /// `marker#…`: name, details, the decision that wrote it.
    Marker(String, Value, u64),
    /// `signal#<signal_key>`: the engine's copy of a signal.
    SignalCopy(Box<SignalRow>),
    /// `signals-kept`: the marks of the signals the execution keeps.
    SignalsKept(Vec<String>),
    /// Any other key.
    Other,
}

fn read_entry(_: &str, item: &Item) -> ReadEntry {
    let key = text(item, attr::LOG_KEY);
    let entry = entry_of(&key, item.clone()).map_err(|e| e.to_string());
    (text(item, attr::WORKFLOW_EXEC_ID), key, entry)
}

fn entry_of(key: &str, item: Item) -> Result<Entry, serde_dynamo::Error> {
    let number = |p: &str| key.trim_start_matches(p).parse::<u64>().unwrap_or(0);
    Ok(if key.starts_with("event#") {
        Entry::Event(number("event#"), Arc::new(serde_dynamo::from_item(item)?))
    } else if let Some(source) = key.strip_prefix("event-id#") {
        let at: Value = serde_dynamo::from_item(item)?;
        Entry::Source(source.to_string(), at["seq"].as_u64().unwrap_or(0))
    } else if key.starts_with("decision#") {
        let r: DecisionRecord = serde_dynamo::from_item(item)?;
        let decided = Decided::of(&r.decisions);
        Entry::Record(number("decision#"), Arc::new(r), Arc::new(decided))
    } else if key.starts_with("marker#") {
        let m: Value = serde_dynamo::from_item(item)?;
        let by = m["decision"].as_u64().unwrap_or(0);
        let name = m["name"].as_str().unwrap_or("").into();
        Entry::Marker(name, m["details"].clone(), by)
    } else if key == episodes::SIGNALS_KEPT_LOG_KEY {
        let kept: Value = serde_dynamo::from_item(item)?;
        let marks = kept[attr::SIGNALS_KEPT]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Entry::SignalsKept(
            marks
                .iter()
                .filter_map(|m| m.as_str().map(String::from))
                .collect(),
        )
    } else if key.starts_with("signal#") {
        Entry::SignalCopy(Box::new(serde_dynamo::from_item(item)?))
    } else {
        Entry::Other
    })
}

/// Every episodic execution's log, with a violation for each item of
/// `whimbrel_decision` that does not parse.
pub(super) fn logs(mem: &MemoryBackend, t: &Tables) -> (Vec<Log>, Vec<String>) {
    let mut logs: BTreeMap<String, Log> = BTreeMap::new();
    for (exec, state) in mem
        .decoded(&t.workflow_exec(), read_episodic)
        .into_iter()
        .flatten()
    {
        let log = Log {
            exec,
            state,
            events: BTreeMap::new(),
            sources: HashMap::new(),
            records: BTreeMap::new(),
            decided: BTreeMap::new(),
            markers: HashMap::new(),
        };
        logs.insert(log.exec.workflow_exec_id.clone(), log);
    }
    let mut bad = vec![];
    let (mut copies, mut kept) = (vec![], HashMap::new());
    for (exec, key, entry) in mem.decoded(&t.decision(), read_entry) {
        // The engine's copy of a signal (issue 42 B.3), and the marks of
        // those kept (B.4): of any execution, or of none yet.
        if let Ok(Entry::SignalCopy(row)) = &entry {
            if row.workflow_exec_id != exec || signal_copy_log_key(&row.signal_key) != key {
                bad.push(format!("{exec}: signal copy {key} is not its signal's"));
            }
            copies.push((exec, row.signal_key.clone()));
            continue;
        }
        if let Ok(Entry::SignalsKept(marks)) = entry {
            kept.insert(exec, marks);
            continue;
        }
        // A tree's count of the executions started below its root (issue
        // 42 B.6): of any root.
        if key == episodes::TREE_LOG_KEY {
            continue;
        }
        let Some(log) = logs.get_mut(&exec) else {
            bad.push(format!("decision item {key} of no episodic execution"));
            continue;
        };
        match entry {
            Ok(entry) => log.take(entry),
            Err(e) => bad.push(format!(
                "{}: item {key} does not parse ({e})",
                log.exec.workflow_exec_id
            )),
        }
    }
    bad.extend(signals_kept(&copies, &kept));
    for log in logs.values_mut() {
        bad.extend(log.take_node_ends());
    }
    (logs.into_values().collect(), bad)
}

impl Log {
    fn take(&mut self, entry: Entry) {
        match entry {
            Entry::Event(seq, e) => {
                self.events.insert(seq, e);
            }
            Entry::Source(source, seq) => {
                self.sources.insert(source, seq);
            }
            Entry::Record(n, r, decided) => {
                self.records.insert(n, r);
                self.decided.insert(n, decided);
            }
            Entry::Marker(name, details, by) => {
                self.markers.insert(name, (details, by));
            }
            Entry::Other | Entry::SignalCopy(_) | Entry::SignalsKept(_) => {}
        }
    }

    /// The node ends logged on the workflow item (design.md § 10.9): those
    /// accepted decisions saw, from their records, and those waiting, from
    /// [`attr::ENDED_EVENTS`], as events of the log; a violation for each
    /// place held twice or entry that does not parse.
    fn take_node_ends(&mut self) -> Vec<String> {
        use whimbrel_core::engine::decide::episodes as ep;
        let recorded = self.records.values().flat_map(|r| r.ended.iter());
        let entries: Vec<String> = recorded
            .chain(self.state.ended_events.iter())
            .cloned()
            .collect();
        let mut bad = vec![];
        for entry in entries {
            let Some((seq, node)) = ep::parse_ended_entry(&entry) else {
                bad.push(format!("{}: ended entry {entry} does not parse", self.id()));
                continue;
            };
            let event = EpisodeEvent {
                workflow_exec_id: self.id().to_string(),
                log_key: ep::event_log_key(seq),
                seq,
                kind: whimbrel_core::decider::EventKind::ActivityEnded,
                at_epoch: 0,
                source: ep::ended_source(self.id(), node),
                details: Value::Null,
            };
            if self.events.insert(seq, Arc::new(event)).is_some() {
                bad.push(format!("{}: event {seq} logged twice ({entry})", self.id()));
            }
        }
        bad
    }

    fn id(&self) -> &str {
        &self.exec.workflow_exec_id
    }

    /// The accepted decisions, by number.
    fn accepted(&self) -> impl Iterator<Item = (&u64, &DecisionRecord)> {
        (self.records.iter())
            .filter(|(_, r)| r.refused.is_none())
            .map(|(k, r)| (k, &**r))
    }

    /// The nodes the accepted decisions scheduled: name → (decision, node).
    pub(super) fn scheduled(&self) -> HashMap<String, (u64, PlannedActivity)> {
        let mut out = HashMap::new();
        for (k, r) in self.accepted() {
            for d in &self.decided(*k, r).list {
                if let Decision::Schedule { activities } = d {
                    for a in activities {
                        out.insert(a.name.clone(), (*k, a.clone()));
                    }
                }
            }
        }
        out
    }

    /// The accepted decisions' decisions, in order.
    fn decisions(&self) -> Vec<(u64, Decision)> {
        self.accepted()
            .flat_map(|(k, r)| {
                let list = self.decided(*k, r).list.clone();
                list.into_iter().map(move |d| (*k, d))
            })
            .collect()
    }

    /// Decision `k`'s decisions (record `r`'s), as kept from the read, or
    /// read again when the record holds others (a test's edit).
    fn decided(&self, k: u64, r: &DecisionRecord) -> std::borrow::Cow<'_, Decided> {
        match self.decided.get(&k) {
            Some(d) if d.of == r.decisions => std::borrow::Cow::Borrowed(&**d),
            _ => std::borrow::Cow::Owned(Decided::of(&r.decisions)),
        }
    }
}

/// The inputs of decided nodes: (execution, node name) → input, as their
/// accepted decisions gave them.
pub(super) fn decided_inputs(logs: &[Log]) -> HashMap<(String, String), Value> {
    let mut out = HashMap::new();
    for log in logs {
        for (name, (_, a)) in log.scheduled() {
            out.insert((log.id().to_string(), name), a.input.unwrap_or_default());
        }
    }
    out
}

/// The log's events: each in place, each source once, each marker naming
/// its event, nothing past `event_seq`.
fn event_violations(log: &Log) -> Vec<String> {
    let id = log.id();
    let mut v = vec![];
    let want: Vec<u64> = (1..=log.state.event_seq).collect();
    let have: Vec<u64> = log.events.keys().copied().collect();
    if want != have {
        v.push(format!(
            "{id}: event_seq {} but events {have:?}",
            log.state.event_seq
        ));
    }
    let mut sources = HashSet::new();
    for (seq, e) in &log.events {
        if e.seq != *seq || !sources.insert(e.source.clone()) {
            v.push(format!(
                "{id}: event {seq} ({}) out of place or appended twice",
                e.source
            ));
        }
        // A node's end has no marker: its open node made it one event.
        let ended = whimbrel_core::engine::decide::episodes::ended_node(&e.source).is_some();
        if !ended && log.sources.get(&e.source) != Some(seq) {
            v.push(format!(
                "{id}: event {seq}'s source {} has no marker naming it",
                e.source
            ));
        }
    }
    v
}

/// Decisions `1..=decision_count` recorded once each; the accepted ones'
/// ranges cover `1..=decided_seq` with no gap and no overlap.
fn record_violations(log: &Log) -> Vec<String> {
    let id = log.id();
    let mut v = vec![];
    let want: Vec<u64> = (1..=log.state.decision_count).collect();
    let have: Vec<u64> = log.records.keys().copied().collect();
    if want != have {
        v.push(format!(
            "{id}: decision_count {} but records {have:?}",
            log.state.decision_count
        ));
    }
    let mut decided = 0;
    for (k, r) in &log.records {
        if !r.decision_id.starts_with(&format!("{id}::d{k}::")) {
            v.push(format!(
                "{id}: decision {k} recorded by attempt {}",
                r.decision_id
            ));
        }
        let seen_any = r.to_seq >= r.from_seq && r.to_seq > 0;
        if seen_any && r.from_seq != decided + 1 {
            v.push(format!(
                "{id}: decision {k} saw events {}..={} but {decided} were decided before it",
                r.from_seq, r.to_seq
            ));
        }
        if r.refused.is_none() && seen_any {
            decided = r.to_seq;
        }
    }
    if decided != log.state.decided_seq {
        v.push(format!(
            "{id}: decided_seq {} but the accepted decisions saw {decided}",
            log.state.decided_seq
        ));
    }
    v.extend(ended_violations(log));
    v
}

/// Node ends logged on the workflow item (design.md § 10.2): each record
/// lists only ends among the events it saw (none when refused), and an
/// end still waiting comes after every decided event; otherwise an end
/// was taken by a decision that did not see it, or left behind by one
/// that did.
fn ended_violations(log: &Log) -> Vec<String> {
    use whimbrel_core::engine::decide::episodes::parse_ended_entry;
    let id = log.id();
    let mut v = vec![];
    for (k, r) in &log.records {
        let outside = (r.ended.iter())
            .filter_map(|e| parse_ended_entry(e))
            .filter(|(seq, _)| r.refused.is_some() || !(r.from_seq..=r.to_seq).contains(seq));
        for (seq, node) in outside {
            v.push(format!(
                "{id}: decision {k} took node {node}'s end ({seq}), which it did not see ({}..={})",
                r.from_seq, r.to_seq
            ));
        }
    }
    let decided = log.state.decided_seq;
    let stale = (log.state.ended_events.iter())
        .filter_map(|e| parse_ended_entry(e))
        .filter(|(seq, _)| *seq <= decided);
    for (seq, node) in stale {
        v.push(format!(
            "{id}: node {node}'s end ({seq}) still waits, though decisions saw up to {decided}"
        ));
    }
    v
}

/// Each record is an answer the decider gave to that attempt: its
/// decisions as given, never one meant to be refused.
fn answer_violations(log: &Log, given: &HashMap<&str, Vec<(&Given, &Value)>>) -> Vec<String> {
    let id = log.id();
    let mut v = vec![];
    for (k, r) in &log.records {
        let answers = given
            .get(r.decision_id.as_str())
            .cloned()
            .unwrap_or_default();
        if answers.is_empty() {
            v.push(format!(
                "{id}: decision {k} committed {} which the decider never answered",
                r.decision_id
            ));
            continue;
        }
        let shown = shown_events(r);
        if !answers.iter().any(|(g, _)| g.seqs == shown) {
            v.push(format!(
                "{id}: decision {k} ({}) recorded events {shown:?}, which its request did not show",
                r.decision_id
            ));
        }
        if r.refused.is_some() {
            continue;
        }
        let recorded = log.decided(*k, r);
        let same = |(g, normal): &(&Given, &Value)| {
            **normal == recorded.normal && !g.invalid && g.seqs == shown
        };
        if !answers.iter().any(same) {
            v.push(format!(
                "{id}: decision {k} ({}) committed {} which no valid answer to it gave",
                r.decision_id, r.decisions
            ));
        }
    }
    v
}

/// The events a decision's record says it saw, in order (none for the
/// first answer, which saw the start).
fn shown_events(r: &DecisionRecord) -> Vec<u64> {
    if r.to_seq >= r.from_seq && r.to_seq > 0 {
        (r.from_seq..=r.to_seq).collect()
    } else {
        vec![]
    }
}

/// Decisions' JSON as the engine would record it.
fn normal(decisions: &Value) -> Value {
    serde_json::from_value::<Vec<Decision>>(decisions.clone())
        .ok()
        .and_then(|d| serde_json::to_value(d).ok())
        .unwrap_or(Value::Null)
}

/// Every node of the execution that a decision scheduled is named by that
/// accepted decision, with its kind, target and input.
fn node_violations(log: &Log, acts: &[&ActivityExec]) -> Vec<String> {
    let scheduled = log.scheduled();
    let mut v = vec![];
    for a in acts {
        let Some(by) = a.links.scheduled_by else {
            v.push(format!(
                "{}: node {} was scheduled by no decision",
                log.id(),
                a.activity_name
            ));
            continue;
        };
        match scheduled.get(&a.activity_name) {
            Some((k, node)) if *k == by => {
                let mut prerequisites: Vec<String> = (node.depends_on.iter())
                    .map(|d| whimbrel_core::ids::activity_exec_id(log.id(), d))
                    .collect();
                prerequisites.sort();
                let mut stored_prerequisites = a.links.prerequisites.clone();
                stored_prerequisites.sort();
                let answered = (node.kind(), target(node), prerequisites);
                let stored = (
                    a.runner.kind(),
                    a.runner.target_name(),
                    stored_prerequisites,
                );
                if stored != answered {
                    v.push(format!(
                        "{}: node {} is {stored:?}, answered {answered:?}",
                        log.id(),
                        a.activity_name
                    ));
                }
            }
            _ => v.push(format!(
                "{}: node {} claims decision {by}, which did not schedule it",
                log.id(),
                a.activity_name
            )),
        }
    }
    v
}

/// A node's target as its answer gave it (`ActivityExec::target_name`'s).
fn target(node: &PlannedActivity) -> Option<String> {
    use whimbrel_core::kind::NodeKind;
    match node.kind() {
        NodeKind::Timer => None,
        NodeKind::Signal => node.signal.clone(),
        NodeKind::Child => node.workflow.clone(),
        NodeKind::TaskList => node.task_list.clone(),
        NodeKind::Lambda => Some(node.lambda.clone()),
    }
}

impl super::Checker {
    /// The safety invariants of episodes (module docs), on the tables as
    /// they are now (`acts`: their activity items, as
    /// [`super::activities`] reads them) and the decider's answers and
    /// asks so far.
    pub fn episode_safety(
        &mut self,
        mem: &MemoryBackend,
        t: &Tables,
        acts: &[Arc<ActivityExec>],
        given: &[Given],
        asks: &[String],
    ) -> Vec<String> {
        let (logs, mut v) = logs(mem, t);
        let known = self.episodes.normals.len();
        (self.episodes.normals).extend(
            given[known.min(given.len())..]
                .iter()
                .map(|g| normal(&g.decisions)),
        );
        let by_id = answers_by_id(given, &self.episodes.normals);
        for log in &logs {
            let mine: Vec<&ActivityExec> = (acts.iter())
                .filter(|a| a.workflow_exec_id == log.id())
                .map(|a| &**a)
                .collect();
            v.extend(event_violations(log));
            v.extend(record_violations(log));
            v.extend(answer_violations(log, &by_id));
            v.extend(node_violations(log, &mine));
        }
        v.extend(self.episodes.ask_violations(&logs, asks));
        v
    }
}

/// The answers given, by the attempt asked.
/// with each one's decisions in [`normal`] form (`normals`, in the
/// order of `given`).
fn answers_by_id<'a>(
    given: &'a [Given],
    normals: &'a [Value],
) -> HashMap<&'a str, Vec<(&'a Given, &'a Value)>> {
    let mut by_id: HashMap<&str, Vec<(&Given, &Value)>> = HashMap::new();
    for (g, n) in given.iter().zip(normals) {
        by_id
            .entry(g.decision_id.as_str())
            .or_default()
            .push((g, n));
    }
    by_id
}

impl Seen {
    /// The decider asked (`asks`, attempt ids in order) for decision `n`
    /// of an execution after `n - 1` had committed, by now; and never for
    /// an attempt of `n` as new as the one that had committed it at the
    /// last look (an older attempt's ask may come late: its invocation
    /// stalled past its attempt, which was tried again and committed).
    /// The start's ask (decision 1) may come again after it committed: a
    /// start run twice asks twice, and its write-once plan item keeps the
    /// first answer (seed 2245).
    fn ask_violations(&mut self, logs: &[Log], asks: &[String]) -> Vec<String> {
        let mut v = vec![];
        let now: HashMap<(String, u64), u32> = logs
            .iter()
            .flat_map(|l| {
                let attempt = |r: &DecisionRecord| parse_attempt(&r.decision_id).map_or(0, |a| a.2);
                (l.records.iter()).map(move |(k, r)| ((l.id().to_string(), *k), attempt(r)))
            })
            .collect();
        for ask in &asks[self.asks.min(asks.len())..] {
            let Some((exec, n, attempt)) = parse_attempt(ask) else {
                v.push(format!("the decider was asked with attempt id {ask}"));
                continue;
            };
            if let Some(c) = self
                .committed
                .get(&(exec.clone(), n))
                .filter(|c| n > 1 && attempt >= **c)
            {
                v.push(format!(
                    "{exec}: the decider was asked {ask} after attempt {c} committed decision {n}"
                ));
            }
            if n > 1 && !now.contains_key(&(exec.clone(), n - 1)) {
                v.push(format!(
                    "{exec}: the decider was asked {ask} before decision {} committed",
                    n - 1
                ));
            }
        }
        self.asks = asks.len();
        self.committed = now;
        v
    }
}

/// `(exec)::d(n)::a(k)` → (exec, n, k).
fn parse_attempt(id: &str) -> Option<(String, u64, u32)> {
    let (rest, k) = id.rsplit_once("::a")?;
    let (exec, n) = rest.rsplit_once("::d")?;
    Some((exec.to_string(), n.parse().ok()?, k.parse().ok()?))
}

/// What the end-of-run checks of episodes read.
pub struct EndOfRun<'a> {
    /// The episodic deciders, by workflow name.
    pub specs: &'a HashMap<String, EpisodeSpec>,
    /// Users' cancel requests by row id.
    pub cancels: &'a HashMap<String, super::cancels::CancelRequest>,
}

/// The executions whose decider is consulted on cancel requests: a
/// request is an event for it, not a cancel.
pub(super) fn cancels_decided(wfs: &[WorkflowExec]) -> HashSet<&str> {
    use whimbrel_core::decider::EventKind;
    (wfs.iter())
        .filter(|w| (w.decide_on.iter().flatten()).any(|k| *k == EventKind::CancelRequested))
        .map(|w| w.workflow_exec_id.as_str())
        .collect()
}

/// A cancel request the stream applied to an execution whose decider is
/// consulted on them is an event, unless the execution had ended or been
/// closed first; the simulation's decider cancels on seeing one, so an
/// accepted decision that saw it ended the execution CANCELLED.
fn cancel_violations(log: &Log, end: &EndOfRun<'_>) -> Vec<String> {
    let id = log.id();
    let mut v = vec![];
    for (row, c) in end.cancels {
        if c.workflow_exec_id != id || c.applied_at.is_none() {
            continue;
        }
        let Some(seq) = log.sources.get(&format!("cancel:{row}")) else {
            // Applied before the decision that closed it (engine clocks
            // are off by two seconds at most, the stream's batch by the
            // world's steps): it was lost.
            let closed_at = (log.state.closed_by_decision)
                .and_then(|k| log.records.get(&k))
                .map(|r| r.decided_epoch);
            if closed_at.is_some_and(|at| at > c.applied_at.unwrap_or(0) + 5) {
                v.push(format!(
                    "{id}: the cancel request {row} was applied at {:?}, before the close at {closed_at:?}, but is no event",
                    c.applied_at
                ));
            }
            continue;
        };
        if *seq <= log.state.decided_seq
            && log.exec.state != whimbrel_core::contract::WorkflowState::Cancelled
        {
            v.push(format!(
                "{id}: a decision saw the cancel request {row} but it ended {}",
                log.exec.state
            ));
        }
    }
    v
}

impl super::Checker {
    /// The liveness invariants of episodes (module docs), at the end.
    pub fn episode_liveness(
        &self,
        mem: &MemoryBackend,
        t: &Tables,
        end: &EndOfRun<'_>,
    ) -> Vec<String> {
        let (logs, mut v) = logs(mem, t);
        let (acts, _) = super::activities(mem, t);
        let execs = super::workflows(mem, t);
        for log in &logs {
            v.extend(cancel_violations(log, end));
            v.extend(early_signal_violations(log, &self.signals));
            let mine: Vec<&ActivityExec> = (acts.iter())
                .filter(|a| a.workflow_exec_id == log.id())
                .map(|a| &**a)
                .collect();
            v.extend(count_violations(log, &mine));
            let Some(closed_by) = log.state.closed_by_decision else {
                v.extend(unclosed_violations(log));
                continue;
            };
            v.extend(effects_written(log, &mine));
            let Some((_, close)) = log
                .decisions()
                .into_iter()
                .rev()
                .find(|(k, _)| *k == closed_by)
            else {
                v.push(format!(
                    "{}: closed by decision {closed_by}, which closes nothing",
                    log.id()
                ));
                continue;
            };
            v.extend(close_violations(log, &close, &mine, &execs, end));
        }
        v
    }
}

/// A signal no node waits for ([`crate::world::NUDGE`]), written before
/// decision 1 committed (first seen more than five seconds before its
/// engine-clock time: clocks are off by two at most), is an event of the
/// log when a later decision committed (design.md § 10.2, "Signals before
/// the first decision"): its stream record found the execution taking no
/// event yet, so decision 1's effects append it, and they come before
/// decision 2. (An execution that ended during those effects takes no
/// event, and has no decision 2: seed 807, cancelled as its start ran.)
fn early_signal_violations(log: &Log, signals: &super::signals::Seen) -> Vec<String> {
    let (Some(first), true) = (log.records.get(&1), log.state.decision_count >= 2) else {
        return vec![];
    };
    let id = log.id();
    (signals.sent_to(id, crate::world::NUDGE))
        .filter(|(row, seen)| {
            let early = seen.is_some_and(|at| at + 5 < first.decided_epoch);
            let source = format!("signal:{}", row.signal_key);
            early && row.invalid().is_none() && !log.sources.contains_key(&source)
        })
        .map(|(row, seen)| {
            format!(
                "{id}: signal {:?}, sent by {seen:?} before decision 1 committed at {}, is no event of the log",
                row.signal_key, first.decided_epoch
            )
        })
        .collect()
}

/// An episodic execution counts its nodes (`activity_count`, each
/// created once) and no end: its nodes are counted nowhere (design.md §
/// 10.7), so no count can end it.
fn count_violations(log: &Log, acts: &[&ActivityExec]) -> Vec<String> {
    let w = &log.exec;
    let mut v = vec![];
    if w.activity_count != acts.len() as u64 {
        v.push(format!(
            "{}: activity_count {} but {} nodes",
            log.id(),
            w.activity_count,
            acts.len()
        ));
    }
    let counts = (w.completed_count, w.failed_count, w.cancelled_count);
    if counts != (0, 0, 0) {
        v.push(format!("{}: its nodes were counted {counts:?}", log.id()));
    }
    v
}

/// An execution no decision closed ended otherwise: FAILED (its decider
/// failed, refused too often, or its execution timeout, which its first
/// answer set and which had passed) or CANCELLED (a cancel request its
/// decider is not consulted on), never COMPLETED.
fn unclosed_violations(log: &Log) -> Vec<String> {
    let w = &log.exec;
    let timed_out = (w.error.as_deref()).is_some_and(|e| e.starts_with("execution timeout"));
    match w.state {
        whimbrel_core::contract::WorkflowState::Completed => {
            vec![format!("{}: COMPLETED, but by no decision", log.id())]
        }
        _ if timed_out && !super::liveness::ended_by_execution_timeout(w) => vec![format!(
            "{}: ended {} by an execution timeout of {:?} s before its deadline (started {}, ended {:?})",
            log.id(),
            w.state,
            w.execution_timeout_seconds,
            w.start_time_epoch,
            w.end_time_epoch
        )],
        _ => vec![],
    }
}

/// Every accepted decision's effects are written: marked applied up to
/// the closing decision, every node it scheduled exists, each marker
/// holds its latest value. (The closing decision's own mark only gates a
/// next decision, which a closed execution never has: a closer that died
/// after the close leaves it unwritten, with nothing owed.)
fn effects_written(log: &Log, acts: &[&ActivityExec]) -> Vec<String> {
    let id = log.id();
    let mut v = vec![];
    if log.state.decisions_applied + 1 < log.state.decision_count {
        v.push(format!(
            "{id}: {} decisions but the effects of {} written",
            log.state.decision_count, log.state.decisions_applied
        ));
    }
    for name in log.scheduled().keys() {
        if !acts.iter().any(|a| &a.activity_name == name) {
            v.push(format!("{id}: node {name} was scheduled but never created"));
        }
    }
    let mut latest: HashMap<String, (Value, u64)> = HashMap::new();
    for (k, d) in log.decisions() {
        if let Decision::RecordMarker { name, details } = d {
            latest.insert(name, (details, k));
        }
    }
    for (name, kept) in &latest {
        if log.markers.get(name) != Some(kept) {
            v.push(format!(
                "{id}: marker {name} is {:?}, not {kept:?}",
                log.markers.get(name)
            ));
        }
    }
    v
}

/// The execution ended as its closing decision said; one the decider
/// completed or continued (with no node open) lost no event.
fn close_violations(
    log: &Log,
    close: &Decision,
    acts: &[&ActivityExec],
    execs: &[WorkflowExec],
    end: &EndOfRun<'_>,
) -> Vec<String> {
    use whimbrel_core::contract::WorkflowState as S;
    let id = log.id();
    let mut v = vec![];
    let (want, lossless) = match close {
        Decision::CompleteWorkflow { result } => {
            let spec = end.specs.get(&log.exec.workflow_name);
            if spec.map(EpisodeSpec::result).as_ref() != Some(result) {
                v.push(format!(
                    "{id}: completed with {result}, not its decider's result"
                ));
            }
            if log.exec.result.as_ref() != Some(result) {
                v.push(format!(
                    "{id}: result {:?}, not the decision's {result}",
                    log.exec.result
                ));
            }
            (S::Completed, true)
        }
        // A child whose node closed it before it continued ends
        // CANCELLED, with no successor (check/children.rs checks the node).
        Decision::ContinueAsNew { .. } if super::children::closed_before_continue(&log.exec) => {
            (S::Cancelled, false)
        }
        Decision::ContinueAsNew { .. } => {
            v.extend(successor_violations(log, execs));
            (S::Completed, true)
        }
        Decision::FailWorkflow { .. } => (S::Failed, false),
        _ => (S::Cancelled, false),
    };
    if log.exec.state != want {
        v.push(format!(
            "{id}: closed by {close:?} but ended {}",
            log.exec.state
        ));
    }
    // The events there were when the close's request was built; those
    // past its window did not hold it back (`DecisionRecord::known_seq`).
    let known = (log.state.closed_by_decision)
        .and_then(|k| log.records.get(&k))
        .and_then(|r| r.known_seq)
        .unwrap_or(log.state.decided_seq);
    if log.state.event_seq != known {
        v.push(format!(
            "{id}: events up to {} but decisions saw {}: one came after the close",
            log.state.event_seq, log.state.decided_seq
        ));
    }
    if lossless {
        v.extend(lost_events(log, acts));
    }
    v
}

/// Every node's end is an event no later than the last decided one.
fn lost_events(log: &Log, acts: &[&ActivityExec]) -> Vec<String> {
    let id = log.id();
    let mut v = vec![];
    for a in acts {
        let source = whimbrel_core::engine::decide::episodes::ended_source(id, &a.activity_name);
        let appended = log.events.values().find(|e| e.source == source);
        match appended.map(|e| &e.seq) {
            Some(seq) if *seq <= log.state.decided_seq => {}
            other => v.push(format!(
                "{id}: node {} ended {} but no decision saw its end ({other:?})",
                a.activity_name, a.state
            )),
        }
    }
    v
}

/// A continued execution names one successor, which names it back (an
/// execution of any kind: a successor whose decider could not be reached
/// fails before it is episodic).
fn successor_violations(log: &Log, execs: &[WorkflowExec]) -> Vec<String> {
    let id = log.id();
    let from_me: Vec<&str> = (execs.iter())
        .filter(|w| w.continued_from.as_deref() == Some(id))
        .map(|w| w.workflow_exec_id.as_str())
        .collect();
    match (&log.exec.continued_as, from_me.as_slice()) {
        (Some(next), [one]) if next == one => vec![],
        (next, found) => vec![format!(
            "{id}: continued as {next:?} but {found:?} continue it"
        )],
    }
}

/// Decided nodes that depend on a node an earlier decision scheduled.
fn linked_across(mem: &MemoryBackend, t: &Tables) -> u64 {
    let acts = super::activities(mem, t).0;
    let by: HashMap<&str, Option<u64>> = (acts.iter())
        .map(|a| (a.activity_exec_id.as_str(), a.links.scheduled_by))
        .collect();
    let across = |a: &&Arc<ActivityExec>| {
        (a.links.prerequisites.iter()).any(|p| {
            by.get(p.as_str())
                .is_some_and(|k| k.is_some() && *k < a.links.scheduled_by)
        })
    };
    acts.iter()
        .filter(|a| a.links.scheduled_by.is_some())
        .filter(across)
        .count() as u64
}

/// What the schedule's episodic executions did, for its statistics:
/// executions, decisions committed and refused, executions continued as
/// new and completed, events appended.
pub fn episode_counts(mem: &MemoryBackend, t: &Tables) -> Vec<(&'static str, u64)> {
    let logs = logs(mem, t).0;
    let count = |f: &dyn Fn(&Log) -> u64| logs.iter().map(f).sum::<u64>();
    vec![
        ("episodic executions", logs.len() as u64),
        ("decisions committed", count(&|l| l.records.len() as u64)),
        (
            "decisions refused",
            count(&|l| l.records.values().filter(|r| r.refused.is_some()).count() as u64),
        ),
        (
            "executions continued as new",
            count(&|l| u64::from(l.exec.continued_as.is_some())),
        ),
        ("episode events", count(&|l| l.state.event_seq)),
        (
            "signals sent with the start shown as events",
            count(&|l| {
                let nudge = format!("signal:{}#", crate::world::NUDGE);
                l.sources.keys().filter(|k| k.starts_with(&nudge)).count() as u64
            }),
        ),
        (
            "decided nodes linked to an earlier decision's",
            linked_across(mem, t),
        ),
    ]
}

#[cfg(test)]
#[path = "episodes_tests.rs"]
mod tests;

/// Issue 42 B.4: an execution keeps at most
/// [`MAX_SIGNALS_PER_EXECUTION`] signals, and the engine copies only a
/// signal it counted among them.
fn signals_kept(copies: &[(String, String)], kept: &HashMap<String, Vec<String>>) -> Vec<String> {
    let mut bad: Vec<String> = (kept.iter())
        .filter(|(_, marks)| marks.len() > MAX_SIGNALS_PER_EXECUTION)
        .map(|(exec, marks)| {
            format!(
                "{exec}: {} signals kept; at most {MAX_SIGNALS_PER_EXECUTION}",
                marks.len()
            )
        })
        .collect();
    for (exec, key) in copies {
        let mark = episodes::signal_kept_mark(key);
        if !kept.get(exec).is_some_and(|m| m.contains(&mark)) {
            bad.push(format!(
                "{exec}: signal {key} copied but not counted among those kept"
            ));
        }
    }
    bad
}
