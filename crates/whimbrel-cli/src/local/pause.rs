//! `--chaos-pause-after-batches N`: a point to kill the runner at that
//! does not depend on timing (tests/e2e-chaos.sh). After its N-th
//! successful stream batch the runner starts no more work (stream
//! batches, schedule ticks, SQS batches), lets the work under way end
//! (the async invokes it accepted included, with their chaos delays and
//! duplicates), logs `CHAOS paused` and waits to be killed. Nothing it
//! accepted is lost with it, and no launch fails on its way down: a kill
//! there costs the same on every run. A kill at a moment of the clock
//! loses whatever the runner held then, each lost launch a relaunch
//! window.
//!
//! Work is counted, not locked: a unit under way never waits on the
//! pause (an engine inside a stream batch may invoke the front, which
//! must answer for the batch to end).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use super::chaos::PREFIX;
use super::Runner;

/// How often the pause looks whether the work under way has ended.
const IDLE_POLL: Duration = Duration::from_millis(20);

/// The pause of one runner (see the module).
#[derive(Debug)]
pub struct Pause {
    /// Pause after this many successful stream batches (`None`: never).
    after: Option<u64>,
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    batches: AtomicU64,
    paused: AtomicBool,
    under_way: AtomicUsize,
}

/// One unit of work under way, counted until dropped.
#[derive(Debug)]
#[must_use = "the work is under way until this is dropped"]
pub struct Work(Option<Arc<State>>);

impl Drop for Work {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            s.under_way.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Pause {
    /// A pause after `after` successful stream batches (`None`: never).
    pub fn new(after: Option<u64>) -> Pause {
        Pause {
            after,
            state: Arc::default(),
        }
    }

    /// Count a unit of work that is under way already (an async invoke
    /// the front accepted): it never waits.
    pub fn work(&self) -> Work {
        if self.after.is_none() {
            return Work(None);
        }
        self.state.under_way.fetch_add(1, Ordering::SeqCst);
        Work(Some(self.state.clone()))
    }

    /// Start a unit of work that starts new work (a stream batch, a
    /// schedule tick, an SQS batch); once paused, this never returns.
    pub async fn start(&self) -> Work {
        let work = self.work();
        // Counted before the flag is read, as the pause sets the flag
        // before it counts: one of the two sees the other.
        if self.state.paused.load(Ordering::SeqCst) {
            drop(work);
            return std::future::pending().await;
        }
        work
    }

    /// One more successful stream batch: the N-th starts the pause.
    pub fn batch_processed(&self) {
        let Some(after) = self.after else { return };
        if self.state.batches.fetch_add(1, Ordering::SeqCst) + 1 != after {
            return;
        }
        warn!(
            batches = after,
            "{PREFIX} pausing: no new work; waiting for the work under way"
        );
        self.state.paused.store(true, Ordering::SeqCst);
        let state = self.state.clone();
        tokio::spawn(async move {
            // The batch that paused is under way until its poller's
            // iteration ends.
            while state.under_way.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(IDLE_POLL).await;
            }
            warn!(
                batches = after,
                "{PREFIX} paused, nothing under way: kill the runner now"
            );
        });
    }
}

impl Runner {
    /// [`Pause::work`], in chaos mode.
    pub(super) fn work(&self) -> Work {
        self.chaos.as_ref().map_or(Work(None), |c| c.pause.work())
    }

    /// [`Pause::start`], in chaos mode.
    pub(super) async fn start_work(&self) -> Work {
        match &self.chaos {
            Some(c) => c.pause.start().await,
            None => Work(None),
        }
    }

    /// [`Pause::batch_processed`], in chaos mode.
    pub(super) fn batch_processed(&self) {
        if let Some(c) = &self.chaos {
            c.pause.batch_processed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn under_way(p: &Pause) -> usize {
        p.state.under_way.load(Ordering::SeqCst)
    }

    fn paused(p: &Pause) -> bool {
        p.state.paused.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn without_a_pause_nothing_is_counted() {
        let p = Pause::new(None);
        let _w = p.start().await;
        let _v = p.work();
        for _ in 0..10 {
            p.batch_processed();
        }
        assert_eq!(under_way(&p), 0);
        assert!(!paused(&p));
    }

    #[tokio::test]
    async fn the_nth_batch_pauses_new_work_not_the_work_under_way() {
        let p = Pause::new(Some(2));
        let batch = p.start().await;
        p.batch_processed();
        assert!(!paused(&p));
        let accepted = p.work();
        p.batch_processed();
        assert!(paused(&p));
        // New work waits for good; work under way goes on and is counted.
        let blocked = tokio::time::timeout(Duration::from_millis(100), p.start()).await;
        assert!(blocked.is_err());
        let carried = p.work();
        assert_eq!(under_way(&p), 3);
        drop((batch, accepted, carried));
        assert_eq!(under_way(&p), 0);
        // Batches past the N-th pause nothing again.
        p.batch_processed();
        assert!(paused(&p));
    }
}
