//! The runner's invocation timeline: every invocation it made (stream
//! batches, schedule ticks, sync and async invokes), with its function, the
//! `activity_exec_id` of a launch payload, and its start and end (wall
//! clock, milliseconds since the Unix epoch). Served at
//! `GET /whimbrel/timeline` for `whimbrel bench`'s critical-path figures;
//! the newest [`MAX_SPANS`] are kept, so memory stays bounded.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::Runner;

/// Spans kept; older ones are dropped.
pub const MAX_SPANS: usize = 200_000;

/// One invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    /// The function invoked (local name).
    pub function: String,
    /// The payload's top-level `activity_exec_id` (an activity's launch).
    #[serde(default)]
    pub activity_exec_id: Option<String>,
    /// When the invocation was sent, ms since the epoch.
    pub start_ms: u64,
    /// When it answered (or failed), ms since the epoch.
    pub end_ms: u64,
}

/// The spans, newest last.
#[derive(Debug, Default)]
pub struct Timeline(Mutex<VecDeque<Span>>);

/// Wall clock now, ms since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Timeline {
    /// Record one invocation of `function` with `payload` (JSON or not).
    pub fn record(&self, function: &str, payload: &[u8], start_ms: u64, end_ms: u64) {
        #[derive(Deserialize)]
        struct Launch {
            activity_exec_id: Option<String>,
        }
        let activity_exec_id = serde_json::from_slice::<Launch>(payload)
            .ok()
            .and_then(|l| l.activity_exec_id);
        let mut spans = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if spans.len() >= MAX_SPANS {
            spans.pop_front();
        }
        spans.push_back(Span {
            function: function.into(),
            activity_exec_id,
            start_ms,
            end_ms,
        });
    }

    /// A copy of the spans.
    pub fn spans(&self) -> Vec<Span> {
        let spans = self.0.lock().unwrap_or_else(|p| p.into_inner());
        spans.iter().cloned().collect()
    }
}

/// `GET /whimbrel/timeline`: every span kept.
pub(super) async fn serve(State(runner): State<Arc<Runner>>) -> Json<Vec<Span>> {
    Json(runner.timeline.spans())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_payload_names_its_activity_and_old_spans_go() {
        let t = Timeline::default();
        t.record(
            "noop",
            br#"{"activity_exec_id": "a::1", "attempt": 1}"#,
            10,
            20,
        );
        t.record("whimbrel-activity-event", br#"{"Records": []}"#, 15, 30);
        t.record("x", b"not json", 40, 41);
        let s = t.spans();
        assert_eq!(s[0].activity_exec_id.as_deref(), Some("a::1"));
        assert_eq!((s[0].start_ms, s[0].end_ms), (10, 20));
        assert_eq!(s[1].activity_exec_id, None);
        assert_eq!(s[2].function, "x");
        for i in 0..MAX_SPANS {
            t.record("f", b"{}", i as u64, i as u64);
        }
        let s = t.spans();
        assert_eq!(s.len(), MAX_SPANS);
        assert_eq!(
            (s[0].function.as_str(), s[0].start_ms),
            ("f", 0),
            "the oldest three were dropped"
        );
    }
}
