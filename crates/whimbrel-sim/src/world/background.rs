//! What DynamoDB does in the background: GSIs catching up with the table,
//! out of order across items and now and then far behind, and TTL deleting
//! expired rows.

use rand::Rng;

use super::{Sim, GSI_LAG_SECONDS};
use crate::shared::lock;

/// The state of the GSIs' lag.
#[derive(Debug, Default)]
pub(super) struct IndexLag {
    /// When the GSIs last caught up completely.
    synced: i64,
    /// Until when they do not catch up at all (a lag past the report
    /// grace), world time.
    stalled_until: i64,
    /// Every such stall: (from, until), world time.
    pub stalls: Vec<(i64, i64)>,
}

impl IndexLag {
    /// Lag that starts at `now`, caught up.
    pub(super) fn new(now: i64) -> Self {
        IndexLag {
            synced: now,
            ..IndexLag::default()
        }
    }
}

impl Sim {
    /// The background work due once the clock moved to `now`: the GSIs
    /// catch up at random, at the latest `GSI_LAG_SECONDS` after their last
    /// catch-up (DynamoDB's usual sub-second lag, below the engine's report
    /// grace), unless stalled: with [`crate::shared::Faults::gsi_stall`]
    /// they stop for 15 s to 2 minutes, past the report grace. TTL runs now
    /// and then.
    pub(super) fn background(&mut self, now: i64) {
        let mut w = lock(&self.world);
        let p = w.faults.gsi_stall;
        if now >= self.index_lag.stalled_until && w.chance(p) {
            let until = now + w.rng.gen_range(15..=120);
            w.exercise("GSI lag past the report grace");
            w.log(format!("GSIs stall until {until}"));
            self.index_lag.stalled_until = until;
            self.index_lag.stalls.push((now, until));
        }
        let stalled = now < self.index_lag.stalled_until;
        let catch_up = now - self.index_lag.synced >= GSI_LAG_SECONDS || w.rng.gen_bool(0.3);
        // TTL deletes expired rows some time after their expiry (up to
        // half an hour here; AWS says typically within two days), never
        // before.
        let ttl = (self.cfg.row_retention_seconds.is_some() && w.rng.gen_bool(0.05))
            .then(|| now - w.rng.gen_range(0..1800));
        drop(w);
        if catch_up && !stalled {
            self.mem.propagate(usize::MAX);
            self.index_lag.synced = now;
        }
        if let Some(cut) = ttl {
            self.ttl_deletes(cut);
        }
    }

    /// One pending change of each GSI appears, the oldest of a random item
    /// (not a global prefix: items' changes appear out of order), unless
    /// the GSIs are stalled.
    pub(super) fn propagate_some(&mut self) {
        let mut w = lock(&self.world);
        if w.now < self.index_lag.stalled_until {
            return;
        }
        self.mem.propagate_any(&mut |n| w.rng.gen_range(0..n));
    }

    /// DynamoDB TTL on the write-once tables (template.yaml
    /// `TimeToLiveSpecification` on `expires_at_epoch`), signals included:
    /// delete the rows that expired before `cut`.
    fn ttl_deletes(&mut self, cut: i64) {
        for table in [
            self.tables.activity_event(),
            self.tables.workflow_request(),
            self.tables.signal(),
        ] {
            let gone = self
                .mem
                .expire(&table, whimbrel_core::attr::EXPIRES_AT_EPOCH, cut);
            if !gone.is_empty() {
                let mut w = lock(&self.world);
                for _ in &gone {
                    w.exercise("rows deleted by TTL");
                }
                w.log(format!("TTL deletes {} rows of {table}", gone.len()));
            }
        }
    }
}
