//! Wake-ups (design.md § 9): a due marker written after the running tick
//! read the due index, and due before the next tick reads it, would wait
//! for that tick. Its writer also sends a wake-up, an SQS message with
//! `DelaySeconds` = the time left, whose mapping has the monitor judge
//! that one item at its second. The marker stays the truth: a lost
//! wake-up costs at most the wait for the next tick, a duplicate finds
//! nothing due.

use serde::{Deserialize, Serialize};

use super::deadline::next_deadline;
use crate::config::EngineConfig;
use crate::model::ActivityExec;

/// Longest `DelaySeconds` SQS takes, seconds ("The maximum is 15 minutes").
pub const MAX_WAKE_DELAY_SECONDS: i64 = 900;

/// The body of a wake-up message on the timer queue (JSON): the activity
/// exec's table key and the due marker it was sent for (epoch seconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeUp {
    /// Hash key of the activity exec.
    pub activity_exec_id: String,
    /// Range key of the activity exec.
    pub workflow_exec_id: String,
    /// The due marker written, epoch seconds.
    pub due_epoch: i64,
}

impl WakeUp {
    /// The delay to send it with, seconds at `now` (epoch seconds):
    /// 0..=[`MAX_WAKE_DELAY_SECONDS`].
    pub fn delay_seconds(&self, now: i64) -> i64 {
        (self.due_epoch - now).clamp(0, MAX_WAKE_DELAY_SECONDS)
    }
}

/// The wake-up `exec` (as written at `now`, epoch seconds) owes: one when
/// the monitor looks ahead (`EngineConfig::monitor_lookahead_seconds` > 0,
/// a tick each look-ahead), the item has a due marker, and the monitor
/// would act on it ([`next_deadline`] plus its [`Deadline::grace`]) before
/// a tick starting now would stop looking, so the tick that runs now may
/// have read the index before the write. Its `due_epoch` is that time.
/// `None` otherwise.
///
/// [`Deadline::grace`]: super::deadline::Deadline::grace
pub fn wake_up_for(exec: &ActivityExec, cfg: &EngineConfig, now: i64) -> Option<WakeUp> {
    let ahead = cfg.monitor_lookahead_seconds;
    exec.timing.due_epoch?;
    let (deadline, kind) = next_deadline(exec, cfg)?;
    let at = deadline.saturating_add(kind.grace(cfg));
    (ahead > 0 && at < now.saturating_add(ahead)).then(|| WakeUp {
        activity_exec_id: exec.activity_exec_id.clone(),
        workflow_exec_id: exec.workflow_exec_id.clone(),
        due_epoch: at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_due_before_the_next_tick_owes_a_wake_up() {
        // Start-to-close at 1020, acted on after the 10 s report grace.
        let mut exec = super::super::tests::running(None, Some(20));
        exec.timing.due_epoch = Some(1020);
        let off = EngineConfig::default();
        assert_eq!(
            wake_up_for(&exec, &off, 1000),
            None,
            "no look-ahead, no queue"
        );
        let cfg = EngineConfig {
            monitor_lookahead_seconds: 60,
            ..EngineConfig::default()
        };
        let w = wake_up_for(&exec, &cfg, 1000).expect("due within the minute");
        assert_eq!(w.delay_seconds(1000), 30);
        assert_eq!(w.delay_seconds(1040), 0);
        assert_eq!(wake_up_for(&exec, &cfg, 970), None, "a tick still reads it");
        exec.timing.due_epoch = None;
        assert_eq!(wake_up_for(&exec, &cfg, 1000), None);
    }
}
