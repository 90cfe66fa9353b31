//! What an episodic decider is shown (design.md § 10.4): the request of
//! one decision attempt, built from the workflow item's episode state
//! (its new events, at most [`MAX_EVENTS_PER_DECISION`] and within
//! `decider::request::MAX_REQUEST_BYTES`), the markers and the open
//! nodes, each as the decider sees it.

use std::collections::BTreeMap;
use whimbrel_rules::keys::WorkflowRef;

use serde_json::Value;

use super::MAX_EVENTS_PER_DECISION;
use crate::attr;
use crate::decider::{self, DecisionRequest, EventKind, EventView, NodeView};
use crate::engine::{Engine, EngineError};
use crate::launcher::Launcher;
use crate::model::ActivityExec;
use crate::store::{s, Cmp, KeyCond};
use whimbrel_rules::decide::episodes::{self, EpisodeEvent, EpisodeState};

impl<L: Launcher> Engine<L> {
    /// The request of attempt `id` on `state` (design.md § 10.4), and the
    /// last event it shows.
    pub(super) async fn decision_request(
        &self,
        wf: WorkflowRef<'_>,
        state: &EpisodeState,
        id: &str,
    ) -> Result<(DecisionRequest, u64), EngineError> {
        let input = self
            .load_plan(wf.exec_id, wf.name)
            .await?
            .and_then(|p| p.input)
            .unwrap_or(Value::Null);
        let mut request = DecisionRequest::new(wf.exec_id, wf.name, id, input);
        request.events = self.new_events(wf.exec_id, state).await?;
        request.markers = self.markers(wf.exec_id).await?;
        let open = self
            .nodes_named(wf.exec_id, state.open_nodes.iter())
            .await?;
        request.open = open.values().map(node_view).collect();
        // Within Lambda's 6 MB: fewer events, the rest for the next one.
        request.fit(whimbrel_rules::decider::request::MAX_REQUEST_BYTES);
        let to_seq = request.events.last().map_or(state.decided_seq, |e| e.seq);
        Ok((request, to_seq))
    }

    /// The events of the log of `workflow_exec_id` after `state`'s last
    /// decided one, in order, at most [`MAX_EVENTS_PER_DECISION`]: node
    /// ends from the workflow item's [`attr::ENDED_EVENTS`] (shown as
    /// their nodes' items say), the rest from `whimbrel_decision`, read
    /// only when some are not node ends (design.md § 10.2).
    async fn new_events(
        &self,
        workflow_exec_id: &str,
        state: &EpisodeState,
    ) -> Result<Vec<EventView>, EngineError> {
        // The places shown: at most the first 100 after the last decided.
        let first = state.decided_seq + 1;
        let last = (state.event_seq).min(state.decided_seq + MAX_EVENTS_PER_DECISION as u64);
        if last < first {
            return Ok(vec![]);
        }
        let ends = state.ended_between(first, last);
        let mut views = self.node_ends(workflow_exec_id, &ends).await?;
        // Exactly the logged events of those places: more would read past
        // them, into the `event-id#` markers sorted after the events.
        let logged = (last - first + 1) as usize - ends.len();
        if logged > 0 {
            let key = KeyCond {
                hash: (attr::WORKFLOW_EXEC_ID.into(), s(workflow_exec_id)),
                range: Some((
                    attr::LOG_KEY.into(),
                    Cmp::Ge,
                    s(episodes::event_log_key(first)),
                )),
            };
            let items: Vec<EpisodeEvent> = self
                .store
                .query_first(&self.store.tables().decision(), None, key, logged as i32)
                .await?;
            views.extend(items.into_iter().map(event_view));
        }
        views.sort_by_key(|e| e.seq);
        // Only the events that follow the last decided one with no gap (a
        // page cut short leaves the rest to the next decision).
        let dense = (views.iter().enumerate())
            .take_while(|(i, e)| e.seq == first + *i as u64 && e.seq <= last)
            .count();
        views.truncate(dense);
        Ok(views)
    }

    /// The node ends `ends` (place, node) of `workflow_exec_id` as the
    /// decider sees them, from the nodes' items.
    ///
    /// Errors: [`EngineError::Retry`] when a node is not there.
    async fn node_ends(
        &self,
        workflow_exec_id: &str,
        ends: &[(u64, &str)],
    ) -> Result<Vec<EventView>, EngineError> {
        let names: Vec<String> = ends.iter().map(|(_, n)| n.to_string()).collect();
        let nodes = self.nodes_named(workflow_exec_id, names.iter()).await?;
        let mut views = vec![];
        for (seq, name) in ends {
            let exec = nodes.get(*name).ok_or_else(|| {
                EngineError::Retry(format!("{workflow_exec_id}: ended node {name} not found"))
            })?;
            views.push(event_view(EpisodeEvent {
                workflow_exec_id: workflow_exec_id.to_string(),
                log_key: episodes::event_log_key(*seq),
                seq: *seq,
                kind: EventKind::ActivityEnded,
                at_epoch: (exec.timing.end_time_epoch).unwrap_or_else(|| self.now().epoch),
                source: episodes::ended_source(workflow_exec_id, name),
                details: ended_details(exec),
            }));
        }
        Ok(views)
    }

    /// The markers of `workflow_exec_id`, the latest value per name.
    pub(super) async fn markers(
        &self,
        workflow_exec_id: &str,
    ) -> Result<BTreeMap<String, Value>, EngineError> {
        let key = KeyCond {
            hash: (attr::WORKFLOW_EXEC_ID.into(), s(workflow_exec_id)),
            range: Some((attr::LOG_KEY.into(), Cmp::BeginsWith, s("marker#"))),
        };
        #[derive(serde::Deserialize)]
        struct Marker {
            name: String,
            #[serde(default)]
            details: Value,
        }
        let markers: Vec<Marker> = self
            .store
            .query(&self.store.tables().decision(), None, key)
            .await?;
        Ok(markers.into_iter().map(|m| (m.name, m.details)).collect())
    }

    /// The nodes of `workflow_exec_id` with these names that exist, by
    /// name (strongly consistent; [`Engine::activities_with_ids`]).
    pub(crate) async fn nodes_named<'a>(
        &self,
        workflow_exec_id: &str,
        names: impl Iterator<Item = &'a String>,
    ) -> Result<BTreeMap<String, ActivityExec>, EngineError> {
        let ids = names.map(|n| crate::ids::activity_exec_id(workflow_exec_id, n));
        let found = self.activities_with_ids(workflow_exec_id, ids).await?;
        Ok(found
            .into_iter()
            .map(|a| (a.activity_name.clone(), a))
            .collect())
    }
}

/// What the decider is shown of node `exec`'s end: its name, state, and
/// output inline (up to `decider::request::MAX_INLINE_BYTES`) or by
/// reference (the node's activity exec id), and its error.
pub(crate) fn ended_details(exec: &ActivityExec) -> Value {
    let mut details = serde_json::json!({
        "node": exec.activity_name,
        "state": exec.state,
    });
    let inline = exec
        .outcome
        .output
        .clone()
        .filter(|o| o.to_string().len() <= decider::request::MAX_INLINE_BYTES);
    if let Some(output) = inline {
        details["output"] = output;
    } else if exec.outcome.output.is_some() || exec.outcome.output_ref.is_some() {
        details["output_ref"] = Value::String(exec.activity_exec_id.clone());
    }
    if let Some(error) = &exec.outcome.error {
        details["reason"] = Value::String(error.clone());
    }
    details
}

/// A logged event as the decider sees it: its details' fields beside its
/// place, kind and time.
fn event_view(e: EpisodeEvent) -> EventView {
    let mut view = EventView::new(e.seq, e.kind, e.at_epoch);
    let field = |k: &str| e.details.get(k).cloned();
    let text = |k: &str| field(k).and_then(|v| v.as_str().map(str::to_string));
    view.node = text("node");
    view.state = field("state").and_then(|v| serde_json::from_value(v).ok());
    view.output = field("output");
    view.output_ref = text("output_ref");
    view.reason = text("reason");
    view.signal = text("signal");
    view
}

/// An open node as the decider sees it.
fn node_view(a: &ActivityExec) -> NodeView {
    let kind = a.runner.kind();
    NodeView {
        name: a.activity_name.clone(),
        kind: kind.field().to_string(),
        state: a.state,
        attempt: a.attempt.number,
        target: a.runner.target_name(),
        fires_epoch: a.runner.runs.timer().and_then(|(_, until)| until),
    }
}
