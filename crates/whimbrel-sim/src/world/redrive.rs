//! The stream-redrive path as `template.yaml` deploys it: each batch a
//! stream mapping gives up on becomes an on-failure record on the
//! `StreamFailureQueue` (the one model of an SQS queue,
//! [`whimbrel_aws_model::sqs`], which `whimbrel local` follows too), whose
//! SQS event source mapping invokes the redrive function's real handler
//! ([`whimbrel_core::redrive::given_up_batches`]) with the records read
//! back from the simulated stream. A message not fully applied returns
//! after the visibility timeout; past `maxReceiveCount` it moves to the
//! dead-letter queue, and only then are its rows excused from liveness
//! ([`Sim::lost`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use whimbrel_aws_model::esm::{GiveUp, GiveUpReason};
use whimbrel_aws_model::sqs::{self, Invocation, Message, Queue, QueueConfig, SqsMapping};
use whimbrel_core::handlers::BatchSummary;
use whimbrel_core::redrive::{
    self, BatchInfo, Condition, OnFailureRecord, RedriveError, RequestContext, ResponseContext,
    StreamReader,
};

use super::esm::{row_id, stream_record};
use super::{Clock, Sim};
use crate::shared::lock;

/// What one redrive invocation answered: its partial batch response and
/// each message's batch summary; `Err` for an invocation error.
type Answer = Result<(Value, Vec<BatchSummary>), String>;

/// The on-failure queue, its mapping, and the redrive invocation in flight.
pub(super) struct FailureQueue {
    queue: Queue,
    mapping: SqsMapping,
    /// The row ids of each message's records.
    rows: HashMap<String, Vec<String>>,
    /// The invocation in flight and the messages it was given.
    inflight: Option<(u64, Vec<Message>)>,
    answers: Arc<Mutex<HashMap<u64, Answer>>>,
    sent: u64,
}

impl FailureQueue {
    /// The queue and mapping of `template.yaml`.
    pub(super) fn new((mapping, config): (SqsMapping, QueueConfig)) -> Self {
        FailureQueue {
            queue: Queue::new(config),
            mapping,
            rows: HashMap::new(),
            inflight: None,
            answers: Arc::default(),
            sent: 0,
        }
    }

    /// Nothing waits on the queue and no redrive runs.
    pub(super) fn is_idle(&self) -> bool {
        self.inflight.is_none() && self.queue.is_empty()
    }
}

/// The records of each shard (by shard id), read back as DynamoDB Streams
/// would answer.
struct SimStream(HashMap<String, Vec<Value>>);

impl StreamReader for SimStream {
    async fn read_range(&self, info: &BatchInfo) -> Result<Vec<Value>, RedriveError> {
        let Some(shard) = self.0.get(&info.shard_id) else {
            return Err(RedriveError::Read {
                shard: info.shard_id.clone(),
                start: info.start_sequence_number.clone(),
                reason: "ResourceNotFoundException (simulated)".into(),
            });
        };
        let seq = |v: &Value| {
            v["dynamodb"]["SequenceNumber"]
                .as_str()
                .and_then(|s| s.parse::<u64>().ok())
        };
        let (start, end) = (
            info.start_sequence_number.parse::<u64>().ok(),
            info.end_sequence_number.parse::<u64>().ok(),
        );
        Ok(shard
            .iter()
            .filter(|r| seq(r) >= start && seq(r) <= end)
            .cloned()
            .collect())
    }
}

/// The on-failure record of `count` records of shard `shard`, sequence
/// numbers `first..=last`, of `table`.
fn on_failure(
    g: &GiveUp,
    shard: usize,
    (first, last): (u64, u64),
    count: usize,
    table: &str,
) -> OnFailureRecord {
    OnFailureRecord {
        request_context: RequestContext {
            request_id: format!("sim-{shard}-{first}"),
            function_arn: "arn:aws:lambda:us-east-1:000000000000:function:sim".into(),
            condition: match g.reason {
                GiveUpReason::RetryAttemptsExhausted => Condition::RetryAttemptsExhausted,
                GiveUpReason::RecordAgeExceeded => Condition::RecordAgeExceeded,
            },
            approximate_invoke_count: g.invokes,
        },
        response_context: ResponseContext {
            status_code: 200,
            executed_version: "$LATEST".into(),
            function_error: None,
        },
        version: "1.0".into(),
        timestamp: String::new(),
        batch_info: BatchInfo {
            shard_id: format!("shard-{shard}"),
            start_sequence_number: first.to_string(),
            end_sequence_number: last.to_string(),
            approximate_arrival_of_first_record: String::new(),
            approximate_arrival_of_last_record: String::new(),
            batch_size: count,
            stream_arn: super::esm::stream_arn(table),
        },
    }
}

impl Sim {
    /// Send the on-failure record of records `start..end` of shard `i`
    /// (given up for `g`) to the on-failure queue.
    pub(super) fn send_on_failure(&mut self, i: usize, start: usize, end: usize, g: &GiveUp) {
        let shard = &self.shards[i];
        let records = &shard.records[start..end];
        let (first, last) = (records[0].0.sequence, records[end - start - 1].0.sequence);
        let rec = on_failure(g, i, (first, last), end - start, &shard.table);
        let rows = records.iter().filter_map(|(r, _)| row_id(r)).collect();
        let now_ms = lock(&self.world).now as u64 * 1000;
        let q = &mut self.failures;
        q.sent += 1;
        let id = format!("m{}", q.sent);
        let body = serde_json::to_string(&rec).expect("json");
        q.queue.send(&id, &body, now_ms);
        q.rows.insert(id, rows);
    }

    /// The SQS mapping's poll: take what moved to the dead-letter queue or
    /// expired off the queue, and invoke the redrive function with the
    /// next batch of visible messages, one invocation at a time.
    pub(super) fn poll_failure_queue(&mut self) {
        self.finish_redrive();
        if self.failures.inflight.is_some() {
            return;
        }
        let now_ms = lock(&self.world).now as u64 * 1000;
        let max = self.failures.mapping.batch_size;
        let got = self.failures.queue.receive(now_ms, max);
        for m in got.dead_lettered.iter().chain(&got.expired) {
            let rows = self.failures.rows.remove(&m.id).unwrap_or_default();
            self.log(format!(
                "on-failure message {} dead-lettered: {rows:?}",
                m.id
            ));
            self.lost.extend(rows);
        }
        if !got.batch.is_empty() {
            self.invoke_redrive(got.batch);
        }
    }

    fn invoke_redrive(&mut self, batch: Vec<Message>) {
        let payload = sqs::sqs_event(
            &batch,
            "arn:aws:sqs:us-east-1:0:StreamFailureQueue",
            "us-east-1",
        );
        // What DynamoDB Streams holds of the shards the messages name.
        let records: HashMap<String, Vec<Value>> = batch
            .iter()
            .filter_map(|m| serde_json::from_str::<OnFailureRecord>(&m.body).ok())
            .filter_map(|r| {
                let i: usize = r.batch_info.shard_id.strip_prefix("shard-")?.parse().ok()?;
                let records = self.shards.get(i)?.records.iter();
                let records = records.map(|(r, at)| stream_record(r, *at)).collect();
                Some((r.batch_info.shard_id, records))
            })
            .collect();
        let (inv, engine) = self.engine(true, Clock::Engine, Some("whimbrel-stream-redrive"));
        let answers = self.failures.answers.clone();
        let slot = Arc::new(Mutex::new(0u64));
        let id_slot = slot.clone();
        let task = self.exec.spawn(inv, async move {
            let r = redrive::given_up_batches(&engine, &SimStream(records), &payload).await;
            let answer = r.map_err(|e| e.to_string()).map(|(response, done)| {
                let response = serde_json::to_value(response).expect("json");
                (
                    response,
                    done.into_iter().flatten().map(|d| d.summary).collect(),
                )
            });
            let id = *id_slot.lock().unwrap();
            answers.lock().unwrap().insert(id, answer);
        });
        *slot.lock().unwrap() = task;
        let ids: Vec<&str> = batch.iter().map(|m| m.id.as_str()).collect();
        self.log(format!("redrive {ids:?}"));
        self.failures.inflight = Some((task, batch));
    }

    /// A deleted message's rows must each have been decided by now (an
    /// outcome that is not a retry), else the redrive let go of a row it
    /// did not apply: a violation.
    fn check_decided(&self, id: &str, rows: &[String]) {
        use whimbrel_core::handlers::Outcome;
        for row in rows {
            let decided = self
                .outcomes
                .get(row)
                .is_some_and(|o| o.iter().any(|o| !matches!(o, Outcome::Retry(_))));
            if !decided {
                lock(&self.world).violations.push(format!(
                    "on-failure message {id} was deleted though its row {row} was never decided"
                ));
            }
        }
    }

    /// The bound on a given-up row's effect (design.md § 8.6): an on-failure
    /// message is applied, or dead-lettered, within `maxReceiveCount` + 1
    /// visibility timeouts of being sent; a violation if one is older.
    pub(super) fn overdue_redrives(&self, now: i64) -> Option<String> {
        let q = &self.failures.queue;
        let receives = q.config.redrive.as_ref().map_or(1, |r| r.max_receive_count);
        let bound = u64::from(receives + 1) * q.config.visibility_timeout.as_secs();
        let oldest = q.oldest_sent_ms()? / 1000;
        let age = u64::try_from(now).unwrap_or(0).saturating_sub(oldest);
        (age > bound).then(|| {
            format!("an on-failure message waits {age}s on the queue, over its bound of {bound}s")
        })
    }

    /// After the redrive invocation ended: delete what it applied, note
    /// each record's outcome.
    fn finish_redrive(&mut self) {
        let Some((task, _)) = &self.failures.inflight else {
            return;
        };
        if self.exec.alive(*task) {
            return;
        }
        let (task, batch) = self.failures.inflight.take().expect("in flight");
        let answer = self.failures.answers.lock().unwrap().remove(&task);
        let outcome = match answer {
            Some(Ok((response, summaries))) => {
                for s in summaries {
                    self.note_outcomes(&s);
                }
                Invocation::Answered(response)
            }
            _ => Invocation::FunctionError,
        };
        for id in sqs::to_delete(&self.failures.mapping, &batch, &outcome) {
            self.failures.queue.delete(&id);
            let rows = self.failures.rows.remove(&id).unwrap_or_default();
            self.check_decided(&id, &rows);
            self.stats.redriven += 1;
        }
    }
}
