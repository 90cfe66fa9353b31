//! The critical path of `whimbrel bench`: for every
//! activity with prerequisites (listed on its exec; a wide join keeps its
//! own in the plan and is left out), from the end of the invocation of
//! its last prerequisite (which wrote its COMPLETED row just before) to
//! the async Invoke of the activity's launch, both read off `whimbrel
//! local`'s invocation timeline (`GET /whimbrel/timeline`).
//!
//! The stream hops on that path are the activity-event invocations that
//! started within it: the one that applied the COMPLETED record, released
//! the dependent and launched it is the only one (0 when the stream
//! delivered the row before the prerequisite's own invocation returned).
//! An engine that needed a second stream record to launch would show 2.

use std::collections::HashMap;

use whimbrel_core::model::ActivityExec;

pub use crate::local::timeline::Span;

/// The critical-path figures of one workflow run.
#[derive(Debug, Clone, PartialEq)]
pub struct Hops {
    /// Edges measured (activities with listed prerequisites).
    pub measured: usize,
    /// Milliseconds from the last prerequisite's end to the launch,
    /// sorted (negative: launched before that invocation had returned).
    pub latency_ms: Vec<i64>,
    /// The most activity-event invocations started on one such path.
    pub max_hops: usize,
}

/// The figures for `activities` from `spans`; `stream_function` is the
/// activity-event function's name. `None` when nothing was measurable.
pub fn critical_path(
    activities: &[ActivityExec],
    spans: &[Span],
    stream_function: &str,
) -> Option<Hops> {
    let mut first_launch: HashMap<&str, &Span> = HashMap::new();
    for s in spans {
        if let Some(id) = s.activity_exec_id.as_deref() {
            first_launch
                .entry(id)
                .and_modify(|f| {
                    if s.start_ms < f.start_ms {
                        *f = s;
                    }
                })
                .or_insert(s);
        }
    }
    let streams: Vec<u64> = spans
        .iter()
        .filter(|s| s.function == stream_function)
        .map(|s| s.start_ms)
        .collect();
    let (mut latency_ms, mut max_hops) = (Vec::new(), 0);
    for a in activities
        .iter()
        .filter(|a| !a.links.prerequisites.is_empty())
    {
        let Some(launch) = first_launch.get(a.activity_exec_id.as_str()) else {
            continue;
        };
        let done = a
            .links
            .prerequisites
            .iter()
            .filter_map(|p| first_launch.get(p.as_str()).map(|s| s.end_ms))
            .max();
        let Some(done) = done else { continue };
        latency_ms.push(launch.start_ms as i64 - done as i64);
        let hops = streams
            .iter()
            .filter(|t| **t >= done && **t <= launch.start_ms)
            .count();
        max_hops = max_hops.max(hops);
    }
    latency_ms.sort_unstable();
    (!latency_ms.is_empty()).then_some(Hops {
        measured: latency_ms.len(),
        latency_ms,
        max_hops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(f: &str, id: Option<&str>, start: u64, end: u64) -> Span {
        Span {
            function: f.into(),
            activity_exec_id: id.map(str::to_string),
            start_ms: start,
            end_ms: end,
        }
    }

    fn exec(id: &str, prerequisites: &[&str]) -> ActivityExec {
        serde_json::from_value(serde_json::json!({
            "activity_exec_id": id, "workflow_exec_id": "w::1", "workflow_name": "w", "lambda": "f",
            "activity_name": id, "state": "COMPLETED", "heartbeat_enabled": false,
            "heartbeat_time_epoch": 0, "start_time_epoch": 0,
            "prerequisites": prerequisites,
        }))
        .unwrap()
    }

    #[test]
    fn one_stream_invocation_between_a_prerequisite_and_its_dependent_is_one_hop() {
        let acts = [exec("a", &[]), exec("b", &["a"]), exec("c", &["b"])];
        let one = [
            span("noop", Some("a"), 0, 100),
            span("event", None, 120, 160),
            span("noop", Some("b"), 150, 250),
            span("event", None, 260, 300),
            span("noop", Some("c"), 290, 400),
        ];
        let h = critical_path(&acts, &one, "event").unwrap();
        assert_eq!(h.measured, 2);
        assert_eq!(h.latency_ms, vec![40, 50]);
        assert_eq!(h.max_hops, 1);
        // An engine that took a second stream record before the launch.
        let two = [
            span("noop", Some("a"), 0, 100),
            span("event", None, 120, 160),
            span("event", None, 170, 210),
            span("noop", Some("b"), 200, 250),
        ];
        assert_eq!(
            critical_path(&acts[..2], &two, "event").unwrap().max_hops,
            2
        );
        assert_eq!(critical_path(&acts[..1], &two, "event"), None);
    }
}
