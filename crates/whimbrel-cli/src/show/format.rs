//! How `whimbrel show` prints a timeline: a table, or JSON.

use serde_json::{json, Value};

use super::{hms, Actor, Row};
use crate::status::Snapshot;

/// The table's text for a row's cause: `engine (launch)`, `worker w-1`,
/// `client event 6f1f…` (the event row's own uuid).
fn cause_text(r: &Row) -> String {
    let mut text = r.actor.as_str().to_string();
    match (&r.detail, r.actor, &r.event_id) {
        (Some(d), Actor::Worker, _) => text.push_str(&format!(" {d}")),
        (Some(d), _, _) => text.push_str(&format!(" ({d})")),
        (None, Actor::Client, Some(id)) => {
            // An event row id is (activity_exec_id)::(uuid): the row's
            // activity is on the line already.
            let short = id.rsplit("::").next().unwrap_or(id);
            text.push_str(&format!(" event {short}"));
        }
        _ => {}
    }
    text
}

/// The error column: the error, and for a retried attempt when the next
/// one is due.
fn error_text(r: &Row) -> String {
    let mut text = r.error.clone().unwrap_or_default();
    if let Some(next) = r.next_attempt_epoch {
        text = format!("{}: {text} (next attempt at {})", r.transition, hms(next));
    }
    text
}

/// `whimbrel show` as a table: a header line, then one line per row.
pub fn render(snap: &Snapshot, rows: &[Row]) -> String {
    let w = &snap.workflow;
    let started = chrono::DateTime::from_timestamp(w.start_time_epoch, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default();
    let mut out = format!(
        "workflow {}  {}  started {started}, {} activities",
        w.workflow_exec_id, w.state, w.activity_count
    );
    if let Some(from) = &w.continued_from {
        out.push_str(&format!(", continued from {from}"));
    }
    if let Some(to) = &w.continued_as {
        out.push_str(&format!(", continued as {to}"));
    }
    out.push('\n');
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.time.clone(),
                r.activity.clone().unwrap_or_else(|| "(workflow)".into()),
                format!("{} → {}", r.from.as_deref().unwrap_or("-"), r.to),
                cause_text(r),
                r.attempt.map(|a| a.to_string()).unwrap_or_default(),
                error_text(r),
            ]
        })
        .collect();
    let header = ["TIME", "ACTIVITY", "FROM → TO", "CAUSE", "ATTEMPT", "ERROR"].map(String::from);
    let mut width = [0usize; 6];
    for line in std::iter::once(&header).chain(&cells) {
        for (w, cell) in width.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for line in std::iter::once(&header).chain(&cells) {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            if i == 5 {
                text.push_str(cell);
            } else {
                let pad = width[i] - cell.chars().count();
                text.push_str(cell);
                text.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// `whimbrel show --output json`: the workflow's summary and the rows.
pub fn as_json(snap: &Snapshot, rows: &[Row]) -> Value {
    let w = &snap.workflow;
    json!({
        "workflow_exec_id": w.workflow_exec_id,
        "workflow_name": w.workflow_name,
        "state": w.state,
        "start_time_epoch": w.start_time_epoch,
        "end_time_epoch": w.end_time_epoch,
        "error": w.error,
        "activity_count": w.activity_count,
        "continued_from": w.continued_from,
        "continued_as": w.continued_as,
        "timeline": rows,
    })
}
