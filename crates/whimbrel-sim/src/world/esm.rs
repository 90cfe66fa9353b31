//! The event source mappings of the two stream tables, as
//! `template.yaml` configures them: shards in order per item, batches,
//! partial batch responses (resume from the lowest failed sequence number),
//! bisection and backoff on function errors, bounded retries and record
//! age, then the on-failure destination.

use std::sync::{Arc, Mutex};
use whimbrel_core::attr;

use serde_json::{json, Value};
use whimbrel_core::handlers::{self, Outcome};
use whimbrel_core::store::memory::StreamRecord;
use whimbrel_core::store::Item;

use super::{Sim, STREAM_SHARDS};
use crate::shared::{lock, World};

impl Sim {
    pub(super) fn drain_streams(&mut self) {
        let now = lock(&self.world).now;
        for rec in self.mem.drain_stream() {
            let key = rec
                .keys
                .values()
                .filter_map(whimbrel_core::store::as_s)
                .cloned()
                .collect::<Vec<_>>()
                .join("|");
            let h = key
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
            let base = if rec.table == self.tables.workflow_request() {
                0
            } else {
                STREAM_SHARDS
            };
            let shard = (base + h % STREAM_SHARDS) as usize;
            self.shards[shard].records.push((rec, now));
        }
    }

    /// Deliver the next batch of shard `i`, as its event source mapping.
    pub(super) fn deliver(&mut self, i: usize) {
        let now = lock(&self.world).now;
        let shard = &mut self.shards[i];
        if shard.inflight.is_some() || shard.cursor >= shard.records.len() || now < shard.not_before
        {
            return;
        }
        // MaximumRecordAgeInSeconds: too old, to the on-failure destination.
        while shard.cursor < shard.records.len()
            && now - shard.records[shard.cursor].1 > self.esm.maximum_record_age_seconds
        {
            self.lost.extend(row_id(&shard.records[shard.cursor].0));
            shard.cursor += 1;
            self.stats.on_failure += 1;
        }
        let end = (shard.cursor + shard.limit).min(shard.records.len());
        if shard.cursor >= end {
            return;
        }
        if now < shard.poisoned_until {
            self.stats.crashes += 1;
            self.log(format!("shard {i}: function error (broken)"));
            let len = end - self.shards[i].cursor;
            self.retry_or_give_up(i, len);
            return;
        }
        let batch: Vec<Value> = shard.records[shard.cursor..end]
            .iter()
            .map(|(r, at)| stream_record(r, *at))
            .collect();
        let len = batch.len();
        let table = shard.table.clone();
        let payload = json!({ "Records": batch });
        let (inv, engine) = self.engine(true);
        let results = self.results.clone();
        let requests = table == self.tables.workflow_request();
        let id_slot = Arc::new(Mutex::new(0u64));
        let slot = id_slot.clone();
        let task = self.exec.spawn(inv, async move {
            let r = if requests {
                handlers::workflow_requests(&engine, &payload).await
            } else {
                handlers::activity_events(&engine, &payload).await
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
        self.log(format!(
            "deliver {table} shard {i} [{}..{end})",
            self.shards[i].cursor
        ));
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
        match result {
            Some(Ok(summary)) => {
                let mut failed: Vec<u64> = vec![];
                for r in &summary.records {
                    if let Some(k) = &r.key {
                        self.outcomes
                            .entry(k.clone())
                            .or_default()
                            .push(r.outcome.clone());
                    }
                    if matches!(r.outcome, Outcome::Retry(_)) {
                        failed.extend(r.sequence.as_deref().and_then(|s| s.parse::<u64>().ok()));
                    }
                }
                // The mapping resumes from the lowest failed sequence number.
                let first_failed = failed.into_iter().min().map(|s| s.to_string());
                let shard = &mut self.shards[i];
                match first_failed {
                    None => {
                        shard.attempts = 0;
                        shard.limit = self.esm.batch_size;
                        if !dup {
                            shard.cursor += len;
                        }
                    }
                    Some(seq) => {
                        let at = shard.records[shard.cursor..shard.cursor + len]
                            .iter()
                            .position(|(r, _)| r.sequence.to_string() == seq)
                            .unwrap_or(0);
                        shard.cursor += at;
                        let line = format!(
                            "shard {i}: batch item failure at {seq}, retry from {}",
                            shard.cursor
                        );
                        self.log(line);
                        self.retry_or_give_up(i, len - at);
                    }
                }
            }
            // A crash, a timeout or an error: a function error, retried
            // with bisection.
            _ => {
                self.stats.crashes += 1;
                self.shards[i].limit = (len / 2).max(1);
                self.retry_or_give_up(i, len);
            }
        }
    }

    pub(super) fn retry_or_give_up(&mut self, i: usize, len: usize) {
        let now = lock(&self.world).now;
        let shard = &mut self.shards[i];
        shard.attempts += 1;
        // Lambda backs off between retries of a stream batch (exponentially,
        // up to minutes).
        shard.not_before = now + (1i64 << shard.attempts.min(8));
        if shard.attempts > self.esm.maximum_retry_attempts {
            let end = (shard.cursor + len).min(shard.records.len());
            let lost = end - shard.cursor;
            for (r, _) in &shard.records[shard.cursor..end] {
                self.lost.extend(row_id(r));
            }
            shard.cursor = end;
            shard.attempts = 0;
            shard.limit = self.esm.batch_size;
            self.stats.on_failure += lost as u64;
            let line = format!("shard {i}: retries exhausted, {lost} records to on-failure");
            self.log(line);
        }
    }
}

/// The row id a stream record carries.
pub(super) fn row_id(r: &StreamRecord) -> Option<String> {
    [attr::ACTIVITY_EVENT_ID, attr::WORKFLOW_REQUEST_ID]
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

/// A DynamoDB stream record as Lambda delivers it (aws_lambda_events shape).
fn stream_record(r: &StreamRecord, at: i64) -> Value {
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
        "eventSourceARN": format!("arn:aws:dynamodb:us-east-1:000000000000:table/{}/stream/2026-11-22T00:00:00.000", r.table)
    })
}
