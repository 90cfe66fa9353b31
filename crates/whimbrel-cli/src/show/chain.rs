//! `whimbrel show` of an episodic execution (design.md § 10): its
//! decisions among its nodes' transitions, and the other runs of its
//! continue-as-new chain (§ 10.6), first to last.

use std::collections::HashSet;

use whimbrel_core::attr;
use whimbrel_core::decider::Decision;
use whimbrel_core::engine::decide::episodes::DecisionRecord;
use whimbrel_core::model::WorkflowExec;
use whimbrel_core::store::{s, Cmp, KeyCond, Store};

use super::{hms, Actor, Row};
use crate::status::{self, Snapshot};
use crate::CliError;

/// Most runs `show` follows each way from the one asked for: a chain is
/// read one execution at a time.
pub const MAX_RUNS: usize = 1_000;

/// The runs of the chain `snap` belongs to, first to last: back through
/// `continued_from`, forward through `continued_as` (at most [`MAX_RUNS`]
/// each way, each run once). A run that no longer exists (expired, say)
/// ends the walk that way.
///
/// Errors: DynamoDB's, as [`status::snapshot`] gives them.
pub async fn chain(store: &Store, snap: Snapshot) -> Result<Vec<Snapshot>, CliError> {
    let mut seen = HashSet::from([snap.workflow.workflow_exec_id.clone()]);
    let mut before = walk(
        store,
        snap.workflow.continued_from.clone(),
        &mut seen,
        |w| w.continued_from.clone(),
    )
    .await?;
    before.reverse();
    let next = snap.workflow.continued_as.clone();
    before.push(snap);
    before.extend(walk(store, next, &mut seen, |w| w.continued_as.clone()).await?);
    Ok(before)
}

/// The runs from `first` on, each giving the next by `next`, until one is
/// missing, seen before, or [`MAX_RUNS`] were read.
async fn walk(
    store: &Store,
    first: Option<String>,
    seen: &mut HashSet<String>,
    next: impl Fn(&WorkflowExec) -> Option<String>,
) -> Result<Vec<Snapshot>, CliError> {
    let mut runs = vec![];
    let mut id = first;
    while let Some(exec) = id
        .take()
        .filter(|i| runs.len() < MAX_RUNS && seen.insert(i.clone()))
    {
        let run = match status::snapshot(store, &exec).await {
            Ok(run) => run,
            Err(CliError(m)) if m.starts_with(status::NO_EXEC) => break,
            Err(e) => return Err(e),
        };
        id = next(&run.workflow);
        runs.push(run);
    }
    Ok(runs)
}

/// The committed decisions of `workflow_exec_id`, in order (none for an
/// execution that is not episodic).
///
/// Errors: DynamoDB's.
pub async fn decisions(
    store: &Store,
    workflow_exec_id: &str,
) -> Result<Vec<DecisionRecord>, CliError> {
    let key = KeyCond {
        hash: (attr::WORKFLOW_EXEC_ID.into(), s(workflow_exec_id)),
        range: Some((attr::LOG_KEY.into(), Cmp::BeginsWith, s("decision#"))),
    };
    Ok(store.query(&store.tables().decision(), None, key).await?)
}

/// A decision's line: `(decision k)`, committed or refused, by the
/// decider, with what it decided (`schedule r1n0 r1n1; record_marker
/// progress`) or why it was refused.
pub fn decision_row(number: usize, r: &DecisionRecord) -> Row {
    let (to, error) = match &r.refused {
        Some(reason) => ("REFUSED", Some(reason.clone())),
        None => ("COMMITTED", None),
    };
    let decisions: Vec<Decision> = serde_json::from_value(r.decisions.clone()).unwrap_or_default();
    let detail = decisions.iter().map(summary).collect::<Vec<_>>().join("; ");
    Row {
        time: hms(r.decided_epoch),
        epoch: r.decided_epoch,
        activity: Some(format!("(decision {number})")),
        transition: to.into(),
        from: None,
        to: to.into(),
        actor: Actor::Decider,
        detail: Some(if detail.is_empty() {
            "nothing".into()
        } else {
            detail
        }),
        event_id: Some(r.decision_id.clone()),
        attempt: None,
        error,
        next_attempt_epoch: None,
        inferred_time: false,
    }
}

/// One decision in a few words.
fn summary(d: &Decision) -> String {
    match d {
        Decision::Schedule { activities } => {
            let names: Vec<&str> = activities.iter().map(|a| a.name.as_str()).collect();
            format!("schedule {}", names.join(" "))
        }
        Decision::Cancel { names } => format!("cancel {}", names.join(" ")),
        Decision::RecordMarker { name, .. } => format!("record_marker {name}"),
        Decision::CompleteWorkflow { .. } => "complete_workflow".into(),
        Decision::FailWorkflow { reason } => format!("fail_workflow: {reason}"),
        Decision::CancelWorkflow { .. } => "cancel_workflow".into(),
        Decision::ContinueAsNew { .. } => "continue_as_new".into(),
    }
}

/// `rows` (a run's timeline, in time order) with `decisions` placed by
/// their time: after the transitions of the same second (the ends a
/// decision saw come before it), before the workflow's end.
pub fn with_decisions(rows: Vec<Row>, decisions: &[DecisionRecord]) -> Vec<Row> {
    let mut out = rows;
    for (k, r) in decisions.iter().enumerate() {
        let row = decision_row(k + 1, r);
        let at = out
            .iter()
            .position(|x| x.epoch > row.epoch || (x.epoch == row.epoch && is_end(x)))
            .unwrap_or(out.len());
        out.insert(at, row);
    }
    out
}

/// The workflow's own end row.
fn is_end(r: &Row) -> bool {
    r.activity.is_none() && r.from.is_some() && r.detail.as_deref() == Some(attr::ENDED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(
        k: u64,
        at: i64,
        decisions: serde_json::Value,
        refused: Option<&str>,
    ) -> DecisionRecord {
        DecisionRecord {
            decision_id: format!("w::u::d{k}::a1"),
            from_seq: k - 1,
            to_seq: k - 1,
            decided_epoch: at,
            decisions,
            refused: refused.map(str::to_string),
            decide_on: None,
            ended: vec![],
            known_seq: None,
        }
    }

    fn row(activity: Option<&str>, epoch: i64, detail: Option<&str>) -> Row {
        Row {
            time: hms(epoch),
            epoch,
            activity: activity.map(str::to_string),
            transition: "X".into(),
            from: Some("RUNNING".into()),
            to: "COMPLETED".into(),
            actor: Actor::Engine,
            detail: detail.map(str::to_string),
            event_id: None,
            attempt: None,
            error: None,
            next_attempt_epoch: None,
            inferred_time: false,
        }
    }

    /// Each decision after the transitions of its second, the closing one
    /// before the workflow's end of the same second; a refusal shows its
    /// reason.
    #[test]
    fn decisions_are_placed_by_time_before_the_workflow_end() {
        let rows = vec![
            row(Some("a"), 10, None),
            row(Some("b"), 20, None),
            row(None, 20, Some(attr::ENDED)),
        ];
        let decisions = [
            record(
                1,
                5,
                json!([{"type": "schedule", "activities": [{"name": "a", "lambda": "f"}, {"name": "b", "lambda": "f"}]}]),
                None,
            ),
            record(
                2,
                10,
                json!([]),
                Some("decision 0: cancel of unknown node \"z\""),
            ),
            record(
                3,
                20,
                json!([{"type": "record_marker", "name": "m", "details": 1}, {"type": "complete_workflow", "result": null}]),
                None,
            ),
        ];
        let out = with_decisions(rows, &decisions);
        let seen: Vec<String> = out
            .iter()
            .map(|r| {
                format!(
                    "{} {} {}",
                    r.activity.as_deref().unwrap_or("-"),
                    r.to,
                    r.detail.as_deref().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                "(decision 1) COMMITTED schedule a b",
                "a COMPLETED ",
                "(decision 2) REFUSED nothing",
                "b COMPLETED ",
                "(decision 3) COMMITTED record_marker m; complete_workflow",
                "- COMPLETED ended",
            ]
        );
        assert_eq!(
            out[2].error.as_deref(),
            Some("decision 0: cancel of unknown node \"z\"")
        );
        assert_eq!(out[0].actor, Actor::Decider);
        assert_eq!(out[0].event_id.as_deref(), Some("w::u::d1::a1"));
    }
}
