//! The event source mappings of the three stream tables, as
//! `template.yaml` configures them: shards in order per item and batches;
//! every decision after an invocation (partial batch responses resume from
//! the lowest failed sequence number, bisection on function errors, retries
//! and their backoff, record age, giving records up to the on-failure
//! destination) is taken by the one model of the mapping,
//! [`whimbrel_aws_model::esm`], which `whimbrel local` follows too.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use whimbrel_aws_model::esm::{Attempts, Backoff, BatchOutcome, GiveUp, Next};
use whimbrel_core::attr;

use serde_json::{json, Value};
use whimbrel_core::handlers::{self, BatchSummary, Outcome};
use whimbrel_core::store::memory::StreamRecord;
use whimbrel_core::store::Item;

use super::Sim;
use crate::shared::{lock, World};

/// Shards of each stream.
pub(super) const STREAM_SHARDS: u64 = 2;

/// The shards of the requests' and the activity events' streams, which
/// the world's main draws pick from (those of the signals' stream come
/// after them: `signals.rs`).
pub(super) const MAIN_SHARDS: usize = 2 * STREAM_SHARDS as usize;

/// The stream-enabled tables, in the order of their shards.
pub(super) fn stream_tables(tables: &whimbrel_core::store::Tables) -> [String; 3] {
    [
        tables.workflow_request(),
        tables.activity_event(),
        tables.signal(),
    ]
}

/// Waits between retries of a failing batch, in simulated time: 2 s
/// doubling to 256 s (Lambda backs off exponentially, up to minutes).
const BACKOFF: Backoff = Backoff {
    first: Duration::from_secs(2),
    max: Duration::from_secs(256),
};

impl Sim {
    pub(super) fn drain_streams(&mut self) {
        let now = lock(&self.world).now;
        for rec in self.mem.drain_stream() {
            // The key's values in the order of their names (a map's own
            // order is not the same from one run to the next).
            let mut keys: Vec<_> = rec.keys.iter().collect();
            keys.sort_by(|a, b| a.0.cmp(b.0));
            let key = keys
                .into_iter()
                .filter_map(|(_, v)| whimbrel_core::store::as_s(v))
                .cloned()
                .collect::<Vec<_>>()
                .join("|");
            let h = key
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
            let base = stream_tables(&self.tables)
                .iter()
                .position(|t| *t == rec.table);
            let base = base.expect("a stream-enabled table") as u64 * STREAM_SHARDS;
            let shard = (base + h % STREAM_SHARDS) as usize;
            if rec.table == self.tables.workflow_request() {
                self.trace_request(&rec, shard);
            }
            self.shards[shard].records.push((rec, now));
        }
    }

    /// Trace a record of the request stream (a user's start, cancel or
    /// redrive, or the engine's: a child's start, a parent close's cancel) going
    /// to shard `shard`; its outcomes are traced too.
    fn trace_request(&mut self, rec: &StreamRecord, shard: usize) {
        let Some(id) = row_id(rec) else { return };
        let text = |k: &str| {
            rec.new_image
                .get(k)
                .and_then(whimbrel_core::store::as_s)
                .cloned()
        };
        let what = match (
            text("cancel_workflow_exec_id"),
            text(attr::REDRIVE_WORKFLOW_EXEC_ID),
            rec.new_image.get(attr::PARENT),
        ) {
            (Some(wf), _, _) => format!("cancel of {wf}"),
            (None, Some(wf), _) => format!("redrive of {wf}"),
            (None, None, parent) => {
                let name = text(attr::WORKFLOW_NAME).unwrap_or_default();
                let exec = whimbrel_core::ids::workflow_exec_id(&name, &id);
                let whose = if parent.is_some() { "a child's" } else { "a" };
                format!("{whose} start of {exec}")
            }
        };
        self.log(format!("request row {id} ({what}) to shard {shard}"));
        self.request_rows.insert(id);
    }

    /// The model's retry state of shard `i`. The shard keeps the failures
    /// counted and the size of its head batch; the simulation reports no
    /// invocation counts.
    fn attempts(&self, i: usize) -> Attempts {
        let shard = &self.shards[i];
        Attempts {
            failures: shard.attempts,
            invokes: 0,
            batch: Some(shard.limit),
        }
    }

    fn set_attempts(&mut self, i: usize, at: Attempts) {
        let shard = &mut self.shards[i];
        shard.attempts = at.failures;
        shard.limit = at.batch.unwrap_or(self.esm.batch_size);
    }

    /// Deliver the next batch of shard `i`, as its event source mapping.
    pub(super) fn deliver(&mut self, i: usize) {
        let now = lock(&self.world).now;
        let shard = &self.shards[i];
        if shard.inflight.is_some() || shard.cursor >= shard.records.len() || now < shard.not_before
        {
            return;
        }
        self.expire(i, now);
        let shard = &self.shards[i];
        let available = shard.records.len() - shard.cursor;
        let len = self.attempts(i).next_batch(&self.esm, available);
        if len == 0 {
            return;
        }
        let (start, end) = (shard.cursor, shard.cursor + len);
        if now < shard.poisoned_until {
            self.stats.crashes += 1;
            self.log(format!("shard {i}: function error (broken)"));
            self.decide(i, len, BatchOutcome::FunctionError, false);
            return;
        }
        let batch: Vec<Value> = shard.records[start..end]
            .iter()
            .map(|(r, at)| stream_record(r, *at))
            .collect();
        let table = shard.table.clone();
        let payload = json!({ "Records": batch });
        // The activity-event function is mapped to the streams of the
        // activity events and of the signals (its handler routes a batch
        // by its records' stream ARN, as the deployed function does).
        let requests = table == self.tables.workflow_request();
        let function = if requests {
            "whimbrel-workflow-request"
        } else {
            "whimbrel-activity-event"
        };
        let (inv, engine) = self.engine(true, super::Clock::Engine, Some(function));
        let results = self.results.clone();
        let id_slot = Arc::new(Mutex::new(0u64));
        let slot = id_slot.clone();
        let task = self.exec.spawn(inv, async move {
            let r = if requests {
                handlers::workflow_requests(&engine, &payload).await
            } else {
                handlers::client_rows(&engine, &payload).await
            };
            let id = *slot.lock().unwrap();
            results
                .lock()
                .unwrap()
                .insert(id, r.map(|(_, s)| s).map_err(|e| e.to_string()));
        });
        *id_slot.lock().unwrap() = task;
        self.shards[i].inflight = Some((task, len));
        self.stats.batches += 1;
        self.log(format!("deliver {table} shard {i} [{start}..{end})"));
    }

    /// `MaximumRecordAgeInSeconds`: the oldest records, too old, go to the
    /// on-failure destination undelivered.
    fn expire(&mut self, i: usize, now: i64) {
        let mut at = self.attempts(i);
        let shard = &self.shards[i];
        let ages = shard.records[shard.cursor..]
            .iter()
            .map(|(_, t)| Duration::from_secs(u64::try_from(now - t).unwrap_or(0)));
        if let Some(g) = at.expire(&self.esm, ages) {
            self.set_attempts(i, at);
            self.give_up(i, g);
        }
    }

    /// Handle the end of a shard's in-flight invocation.
    pub(super) fn finish_batch(&mut self, i: usize) {
        let Some((task, len)) = self.shards[i].inflight else {
            return;
        };
        if self.exec.alive(task) {
            return;
        }
        self.shards[i].inflight = None;
        let result = self.results.lock().unwrap().remove(&task);
        let dup = {
            let mut w = lock(&self.world);
            let p = w.faults.dup_batch;
            w.chance(p)
        };
        let outcome = match result {
            Some(Ok(summary)) => self.judge(i, len, &summary),
            // A crash, a timeout or an error: a function error.
            _ => {
                self.stats.crashes += 1;
                BatchOutcome::FunctionError
            }
        };
        if let BatchOutcome::ItemFailures { first_failed } = outcome {
            let from = self.shards[i].cursor + first_failed;
            self.log(format!("shard {i}: batch item failure, retry from {from}"));
        }
        self.decide(i, len, outcome, dup);
    }

    /// Note each record's outcome; the batch's is the partial batch
    /// response the handler answered (a record to retry is a batch item
    /// failure).
    fn judge(&mut self, i: usize, len: usize, summary: &BatchSummary) -> BatchOutcome {
        self.note_outcomes(summary);
        let failed: Vec<Option<&str>> = summary
            .records
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Retry(_)))
            .map(|r| r.sequence.as_deref())
            .collect();
        let shard = &self.shards[i];
        let batch: Vec<String> = shard.records[shard.cursor..shard.cursor + len]
            .iter()
            .map(|(r, _)| r.sequence.to_string())
            .collect();
        BatchOutcome::item_failures(&batch, failed)
    }

    /// Note each record's outcome by its row id (stream batches and
    /// redrives alike).
    pub(super) fn note_outcomes(&mut self, summary: &BatchSummary) {
        let now = lock(&self.world).now;
        for r in &summary.records {
            if let Some(k) = &r.key {
                if let Some(c) = self.cancels.get_mut(k) {
                    if r.outcome == Outcome::Applied && c.applied_at.is_none() {
                        // When the engine was done with the record, not
                        // the batch's end: a redrive applied in between
                        // came after the cancel (seed 2524).
                        c.applied_at = Some(r.finished_epoch.map_or(now, |f| f.min(now)));
                    }
                }
                if self.request_rows.contains(k) {
                    let done = r.finished_epoch.map(|f| format!(" (done at {f})"));
                    let line = format!(
                        "request row {k}: {:?}{}",
                        r.outcome,
                        done.unwrap_or_default()
                    );
                    lock(&self.world).log(line);
                }
                self.outcomes
                    .entry(k.clone())
                    .or_default()
                    .push(r.outcome.clone());
                self.touched.push(k.clone());
            }
        }
    }

    /// Do what the model decides after an invocation of the first `len`
    /// records of shard `i`. `dup`: a successful batch is delivered again
    /// (not checkpointed).
    fn decide(&mut self, i: usize, len: usize, outcome: BatchOutcome, dup: bool) {
        let now = lock(&self.world).now;
        let mut at = self.attempts(i);
        let step = at.after(&self.esm, len, outcome);
        self.set_attempts(i, at);
        if !(dup && step.next == Next::Continue) {
            self.shards[i].cursor += step.processed;
        }
        match step.next {
            Next::Continue => {}
            Next::Retry { records, retry } => {
                let wait = BACKOFF.delay(retry).as_secs() as i64;
                self.shards[i].not_before = now + wait;
                self.log(format!(
                    "shard {i}: retry {retry} of {records} records in {wait}s"
                ));
            }
            Next::Bisect { records } => {
                self.log(format!("shard {i}: bisected, {records} records next"));
            }
            Next::GiveUp(g) => self.give_up(i, g),
        }
    }

    /// Send the first `g.records` records of shard `i` to the on-failure
    /// destination (`redrive.rs`).
    fn give_up(&mut self, i: usize, g: GiveUp) {
        let shard = &self.shards[i];
        let (start, end) = (
            shard.cursor,
            (shard.cursor + g.records).min(shard.records.len()),
        );
        let lost = end - start;
        if lost > 0 {
            self.send_on_failure(i, start, end, &g);
        }
        self.shards[i].cursor = end;
        self.stats.on_failure += lost as u64;
        let reason = g.reason;
        self.log(format!(
            "shard {i}: {reason:?}, {lost} records to on-failure"
        ));
    }
}

/// The row id a stream record carries (a signal's is its `signal_key`,
/// as the handler reports it).
pub(super) fn row_id(r: &StreamRecord) -> Option<String> {
    [
        attr::ACTIVITY_EVENT_ID,
        attr::WORKFLOW_REQUEST_ID,
        attr::SIGNAL_KEY,
    ]
    .iter()
    .find_map(|k| {
        r.new_image
            .get(*k)
            .and_then(whimbrel_core::store::as_s)
            .cloned()
    })
}

pub(super) fn lock_now(world: &World) -> i64 {
    // Only called while no other lock is held by the caller's expression.
    world.try_lock().map(|w| w.now).unwrap_or(i64::MAX)
}

/// The ARN of `table`'s stream.
pub(super) fn stream_arn(table: &str) -> String {
    format!("arn:aws:dynamodb:us-east-1:000000000000:table/{table}/stream/2026-11-22T00:00:00.000")
}

/// A DynamoDB stream record as Lambda delivers it (aws_lambda_events shape).
pub(super) fn stream_record(r: &StreamRecord, at: i64) -> Value {
    let json =
        |item: &Item| serde_json::to_value(serde_dynamo::Item::from(item.clone())).expect("json");
    json!({
        "eventID": format!("e{}", r.sequence),
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": at as f64,
            "Keys": json(&r.keys),
            "NewImage": json(&r.new_image),
            "SequenceNumber": r.sequence.to_string(),
            "SizeBytes": 100,
            "StreamViewType": "NEW_IMAGE"
        },
        "eventSourceARN": stream_arn(&r.table)
    })
}
