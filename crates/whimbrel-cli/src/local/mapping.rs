//! The stream event source mappings: one task per mapping discovers the
//! stream's shards (DescribeStream, every page) and starts one poller per
//! shard once its parent has been read to its end; each poller delivers its
//! shard's records in order, one batch at a time, as Lambda does.
//!
//! A batch is the oldest `BatchSize` records not processed yet (after the
//! event name filter). What happens to it is decided by the one model of
//! the mapping, [`whimbrel_aws_model::esm`], which the simulation follows
//! too: before each invocation, records older than
//! `MaximumRecordAgeInSeconds` are given up (`RecordAgeExceeded`); after
//! it, a success is processed, a partial batch response processes the
//! records before the lowest failed sequence number and retries the rest,
//! a function error (a timeout and an unreachable instance count as one
//! here) bisects the batch when `BisectBatchOnFunctionError` is on (using
//! no retry) or retries it, and past `MaximumRetryAttempts` the batch is
//! given up (`RetryAttemptsExhausted`). This module does the I/O: stream
//! reads, invocations, waits, checkpoints and the on-failure file.
//!
//! Processed and given-up records advance the shard's checkpoint.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::dynamodb::Event;
use aws_sdk_dynamodbstreams::error::ProvideErrorMetadata;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use aws_smithy_types::error::display::DisplayErrorContext;
use axum::body::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tracing::{error, info, warn};
use whimbrel_aws_model::esm::{Attempts, Backoff, BatchOutcome, GiveUp, GiveUpReason, Next, Step};

use whimbrel_core::redrive::lambda_record;

use super::chaos::PREFIX;
use super::on_failure::{
    append_to, function_arn, on_failure_record, Condition, GivenUp, LastInvocation,
};
use super::shards::{ready_to_start, ShardInfo};
use super::template::{StartingPosition, StreamMapping};
use super::{Outcome, Runner};

/// One event source mapping, settings resolved.
#[derive(Debug, Clone)]
pub struct Mapping {
    /// The local function (binary) name.
    pub function: String,
    /// From the template, flags applied.
    pub settings: StreamMapping,
    /// The function's timeout.
    pub timeout: Duration,
}

/// A record read and not processed yet.
struct Pending {
    record: Record,
    seq: String,
    /// `ApproximateCreationDateTime`, or when it was read if the stream
    /// gives none.
    arrival: DateTime<Utc>,
}

/// Judge one invocation of a batch whose records have the sequence numbers
/// `seqs` (pure): an answer as the model reads it, anything else (an
/// error, a timeout, an unreachable instance) a function error.
pub fn verdict(outcome: &Outcome, seqs: &[&str], report_batch_item_failures: bool) -> BatchOutcome {
    match outcome {
        Outcome::Answered(a) => BatchOutcome::from_answer(a, seqs, report_batch_item_failures),
        _ => BatchOutcome::FunctionError,
    }
}

/// Waits between retries of a failing batch: 200 ms doubling to 2 s (a
/// local stack retries sooner than AWS).
const BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(200),
    max: Duration::from_secs(2),
};

/// The on-failure record's condition for a model's reason.
fn condition(reason: GiveUpReason) -> Condition {
    match reason {
        GiveUpReason::RetryAttemptsExhausted => Condition::RetryAttemptsExhausted,
        GiveUpReason::RecordAgeExceeded => Condition::RecordAgeExceeded,
    }
}

/// One shard's poller: where it is in the shard, what it read and has not
/// processed yet, and the retry state of the batch at its head.
struct ShardPoll<'a> {
    m: &'a Mapping,
    arn: &'a str,
    shard: &'a str,
    iterator: Option<String>,
    /// The shard has ended and everything in it was read.
    closed: bool,
    /// The last sequence number read (filtered-out records included).
    last_read: Option<String>,
    pending: VecDeque<Pending>,
    at: Attempts,
    /// The last invocation of the head batch, for the on-failure record.
    last: Option<LastInvocation>,
    /// Whether the poller started after a checkpoint (a restarted runner)
    /// and the successful batches it delivered so far: what chaos knows
    /// its next batch by.
    resumed: bool,
    delivered: u64,
}

impl ShardPoll<'_> {
    fn batch_size(&self) -> usize {
        self.m.settings.batch_size.max(1)
    }

    /// Queue the records of one GetRecords page that pass the filter.
    fn take(&mut self, records: &[Record]) {
        let now = Utc::now();
        for r in records {
            let Some(seq) = r.dynamodb().and_then(|d| d.sequence_number()) else {
                continue;
            };
            self.last_read = Some(seq.to_string());
            let name = r.event_name().map(|n| n.as_str()).unwrap_or("");
            if let Some(names) = &self.m.settings.event_names {
                if !names.iter().any(|n| n == name) {
                    continue;
                }
            }
            let arrival = r
                .dynamodb()
                .and_then(|d| d.approximate_creation_date_time())
                .and_then(|t| DateTime::from_timestamp(t.secs(), t.subsec_nanos()))
                .unwrap_or(now);
            self.pending.push_back(Pending {
                record: r.clone(),
                seq: seq.to_string(),
                arrival,
            });
        }
    }
}

/// One invocation of the head batch.
struct Invocation {
    /// The event sent, for a chaos redelivery.
    body: Bytes,
    seqs: Vec<String>,
    outcome: Outcome,
    request_id: String,
}

impl Runner {
    /// The table's latest stream ARN, waiting for the table to exist.
    async fn stream_arn(&self, table: &str) -> String {
        loop {
            match self
                .dynamodb
                .describe_table()
                .table_name(table)
                .send()
                .await
            {
                Ok(out) => {
                    if let Some(arn) = out.table().and_then(|t| t.latest_stream_arn()) {
                        return arn.to_string();
                    }
                    warn!(table, "table has no stream; run `whimbrel install`");
                }
                Err(e) => warn!(table, error = %DisplayErrorContext(&e), "waiting for table"),
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// Every shard of the stream (all DescribeStream pages).
    async fn shards(&self, arn: &str) -> Result<Vec<ShardInfo>, String> {
        let mut out = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let r = self
                .streams
                .describe_stream()
                .stream_arn(arn)
                .set_exclusive_start_shard_id(start.clone())
                .send()
                .await
                .map_err(|e| DisplayErrorContext(&e).to_string())?;
            let Some(d) = r.stream_description() else {
                return Ok(out);
            };
            for s in d.shards() {
                if let Some(id) = s.shard_id() {
                    out.push(ShardInfo {
                        id: id.to_string(),
                        parent: s.parent_shard_id().map(str::to_string),
                    });
                }
            }
            match d.last_evaluated_shard_id() {
                Some(last) if Some(last) != start.as_deref() => start = Some(last.to_string()),
                _ => return Ok(out),
            }
        }
    }

    /// One event source mapping: discover shards, poll each in order.
    pub(super) async fn map_stream(self: Arc<Self>, m: Arc<Mapping>) {
        let arn = self.stream_arn(&m.settings.table).await;
        info!(table = %m.settings.table, function = %m.function, stream = %arn,
            batch_size = m.settings.batch_size,
            maximum_retry_attempts = ?m.settings.maximum_retry_attempts,
            maximum_record_age_s = ?m.settings.maximum_record_age.map(|d| d.as_secs()),
            bisect = m.settings.bisect_batch_on_function_error,
            timeout_s = m.timeout.as_secs(),
            "event source mapping started");
        let mut started = HashSet::new();
        let finished: Arc<Mutex<HashSet<String>>> = Arc::default();
        let wake = Arc::new(Notify::new());
        loop {
            match self.shards(&arn).await {
                Ok(shards) => {
                    let done = {
                        let mut f = finished.lock().unwrap_or_else(|p| p.into_inner());
                        for s in &shards {
                            if self.checkpoints.get(&arn, &s.id).is_some_and(|c| c.ended) {
                                f.insert(s.id.clone());
                            }
                        }
                        f.clone()
                    };
                    for id in ready_to_start(&shards, &started, &done) {
                        started.insert(id.clone());
                        let (r, m, arn) = (self.clone(), m.clone(), arn.clone());
                        let (finished, wake) = (finished.clone(), wake.clone());
                        tokio::spawn(async move {
                            r.poll_shard(&m, &arn, &id).await;
                            finished
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(id);
                            // Its children may start now.
                            wake.notify_one();
                        });
                    }
                }
                Err(e) => warn!(table = %m.settings.table, error = %e, "DescribeStream failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                _ = wake.notified() => {}
            }
        }
    }

    /// A shard iterator after `after`, or at the mapping's starting
    /// position. A checkpoint whose record was trimmed falls back to
    /// TRIM_HORIZON.
    async fn iterator(
        &self,
        arn: &str,
        shard: &str,
        after: Option<&str>,
        start: StartingPosition,
    ) -> Option<String> {
        let req = self
            .streams
            .get_shard_iterator()
            .stream_arn(arn)
            .shard_id(shard);
        let req = match (after, start) {
            (Some(seq), _) => req
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(seq),
            (None, StartingPosition::TrimHorizon) => {
                req.shard_iterator_type(ShardIteratorType::TrimHorizon)
            }
            (None, StartingPosition::Latest) => req.shard_iterator_type(ShardIteratorType::Latest),
        };
        match req.send().await {
            Ok(out) => out.shard_iterator().map(str::to_string),
            Err(e) => {
                let trimmed = e
                    .as_service_error()
                    .and_then(|se| se.code())
                    .is_some_and(|c| c == "TrimmedDataAccessException");
                warn!(shard, error = %DisplayErrorContext(&e), "GetShardIterator failed");
                if trimmed && after.is_some() {
                    warn!(
                        shard,
                        "checkpoint trimmed from the stream; reading from TRIM_HORIZON"
                    );
                    return Box::pin(self.iterator(
                        arn,
                        shard,
                        None,
                        StartingPosition::TrimHorizon,
                    ))
                    .await;
                }
                None
            }
        }
    }

    fn checkpoint(&self, arn: &str, shard: &str, seq: Option<&str>, ended: bool) {
        if seq.is_none() && !ended {
            return; // Nothing processed yet.
        }
        if let Err(e) = self.checkpoints.set(arn, shard, seq, ended) {
            error!(shard, error = %e, file = %self.checkpoints.path().display(), "cannot write the checkpoint");
        }
    }

    /// Poll one shard and deliver its records in order until it ends.
    async fn poll_shard(&self, m: &Mapping, arn: &str, shard: &str) {
        let function = m.function.as_str();
        let resume = self.checkpoints.get(arn, shard);
        let mut p = ShardPoll {
            m,
            arn,
            shard,
            iterator: None,
            closed: false,
            resumed: resume.is_some(),
            last_read: resume.and_then(|c| c.sequence_number),
            pending: VecDeque::new(),
            at: Attempts::default(),
            last: None,
            delivered: 0,
        };
        match &p.last_read {
            Some(seq) => {
                info!(%function, shard, after = %seq, "resuming shard after its checkpoint")
            }
            None => info!(%function, shard, start = ?m.settings.starting_position, "reading shard"),
        }
        let idle = Duration::from_millis(self.args.poll_interval_ms);
        loop {
            // One iteration is one unit of work (`--chaos-pause-after-batches`).
            let _work = self.start_work().await;
            if !self.read(&mut p, idle).await {
                continue;
            }
            if p.pending.is_empty() {
                // Everything read so far is processed (or filtered out).
                self.checkpoint(arn, shard, p.last_read.as_deref(), p.closed);
                if p.closed {
                    info!(%function, shard, "shard read to its end");
                    return;
                }
                tokio::time::sleep(idle).await;
                continue;
            }
            if self.expire(&mut p) {
                continue;
            }
            let n = p.at.next_batch(&m.settings, p.pending.len());
            let call = self.invoke_head(&p, n).await;
            let step = self.judge(&mut p, n, &call);
            if let Some(wait) = self.apply(&mut p, step, call).await {
                tokio::time::sleep(wait).await;
            }
        }
    }

    /// Read up to a full batch. False when nothing could be read and the
    /// poller waited: start over.
    async fn read(&self, p: &mut ShardPoll<'_>, idle: Duration) -> bool {
        let want = p.batch_size();
        if !p.closed && p.pending.len() < want && p.iterator.is_none() {
            let start = p.m.settings.starting_position;
            p.iterator = self
                .iterator(p.arn, p.shard, p.last_read.as_deref(), start)
                .await;
            if p.iterator.is_none() && p.pending.is_empty() {
                tokio::time::sleep(idle.max(Duration::from_secs(1))).await;
                return false;
            }
        }
        let Some(it) = p.iterator.clone().filter(|_| p.pending.len() < want) else {
            return true;
        };
        let limit = (want - p.pending.len()).min(1000) as i32;
        match self
            .streams
            .get_records()
            .shard_iterator(it)
            .limit(limit)
            .send()
            .await
        {
            Ok(out) => {
                p.take(out.records());
                p.iterator = out.next_shard_iterator().map(str::to_string);
                p.closed = p.iterator.is_none();
            }
            Err(e) => {
                // Expired or broken iterator (DynamoDB Local: an iterator
                // taken on a shard with no record yet fails with
                // TrimmedDataAccess once another table is written first):
                // re-open after the last record read.
                warn!(shard = p.shard, error = %DisplayErrorContext(&e), "GetRecords failed; reopening the iterator");
                p.iterator = None;
                if p.pending.is_empty() {
                    tokio::time::sleep(idle).await;
                    return false;
                }
            }
        }
        true
    }

    /// Give up the head records past `MaximumRecordAgeInSeconds`, if any
    /// (true): they are not delivered.
    fn expire(&self, p: &mut ShardPoll<'_>) -> bool {
        let now = Utc::now();
        let ages = p
            .pending
            .iter()
            .map(|r| (now - r.arrival).to_std().unwrap_or_default());
        let Some(g) = p.at.expire(&p.m.settings, ages) else {
            return false;
        };
        let last = p.last.take();
        let done = self.give_up(p, g, last);
        self.processed(p, done.as_deref());
        true
    }

    /// Invoke the function with the first `n` pending records.
    async fn invoke_head(&self, p: &ShardPoll<'_>, n: usize) -> Invocation {
        let head = || p.pending.iter().take(n);
        let mut event = Event::default();
        event.records = head()
            .map(|r| lambda_record(&r.record, p.arn, &self.region))
            .collect();
        let body = Bytes::from(serde_json::to_vec(&event).unwrap_or_default());
        self.count(format!("{} (stream batches)", p.m.function));
        let outcome = self.invoke(&p.m.function, body.clone(), p.m.timeout).await;
        Invocation {
            body,
            seqs: head().map(|r| r.seq.clone()).collect(),
            outcome,
            request_id: uuid::Uuid::new_v4().to_string(),
        }
    }

    /// Judge an invocation of `n` records, log it, and ask the model what
    /// comes next.
    fn judge(&self, p: &mut ShardPoll<'_>, n: usize, call: &Invocation) -> Step {
        let (function, shard) = (p.m.function.as_str(), p.shard);
        let refs: Vec<&str> = call.seqs.iter().map(String::as_str).collect();
        let v = verdict(
            &call.outcome,
            &refs,
            p.m.settings.report_batch_item_failures,
        );
        let step = p.at.after(&p.m.settings, n, v);
        match v {
            BatchOutcome::Success => {}
            BatchOutcome::ItemFailures { first_failed } => {
                info!(%function, shard, records = n, retry_from = first_failed, "partial batch failure")
            }
            BatchOutcome::FunctionError => {
                let what = match step.next {
                    Next::GiveUp(_) => "function error; retries used up",
                    Next::Bisect { .. } => "function error; bisecting the batch",
                    _ => "function error; retrying the batch",
                };
                let error = call
                    .outcome
                    .error_payload(&call.request_id)
                    .map(|e| String::from_utf8_lossy(&e).into_owned());
                warn!(%function, shard, records = n, next = ?step.next, error = error.as_deref().unwrap_or(""), "{what}")
            }
            BatchOutcome::InvalidResponse => {
                if let Outcome::Answered(a) = &call.outcome {
                    warn!(%function, shard, answer = %String::from_utf8_lossy(a), "answer is not a partial batch response; retrying the batch");
                }
            }
        }
        step
    }

    /// Do what the model decided: checkpoint the processed prefix, give
    /// records up. The wait before the next invocation, if any.
    async fn apply(&self, p: &mut ShardPoll<'_>, step: Step, call: Invocation) -> Option<Duration> {
        if step.next == Next::Continue {
            // Before the checkpoint, as the first delivery was.
            self.chaos_redeliver(p, &call.seqs, call.body).await;
        }
        if step.processed > 0 {
            p.pending.drain(..step.processed);
            self.processed(p, Some(&call.seqs[step.processed - 1]));
        }
        let last = LastInvocation {
            request_id: call.request_id,
            function_error: (!matches!(call.outcome, Outcome::Answered(_)))
                .then(|| "Unhandled".into()),
        };
        p.last = None;
        match step.next {
            Next::Continue => {
                self.batch_processed();
                None
            }
            Next::GiveUp(g) => {
                let done = self.give_up(p, g, Some(last));
                self.processed(p, done.as_deref());
                None
            }
            Next::Bisect { .. } => {
                p.last = Some(last);
                None
            }
            Next::Retry { retry, .. } => {
                p.last = Some(last);
                Some(BACKOFF.delay(retry))
            }
        }
    }

    /// The head records were processed (or given up), the last of them
    /// `done`: advance the checkpoint, to everything read when nothing is
    /// pending (records filtered out included).
    fn processed(&self, p: &ShardPoll<'_>, done: Option<&str>) {
        let upto = if p.pending.is_empty() {
            p.last_read.as_deref()
        } else {
            done
        };
        if upto.is_some() {
            self.checkpoint(p.arn, p.shard, upto, false);
        }
    }

    /// Send the first `g.records` pending records to the on-failure
    /// destination; the sequence number of the last of them.
    fn give_up(
        &self,
        p: &mut ShardPoll<'_>,
        g: GiveUp,
        last: Option<LastInvocation>,
    ) -> Option<String> {
        let (m, shard) = (p.m, p.shard);
        let k = g.records.min(p.pending.len());
        let given: Vec<GivenUp> = p
            .pending
            .drain(..k)
            .map(|r| GivenUp {
                sequence_number: r.seq,
                arrival: r.arrival,
            })
            .collect();
        let condition = condition(g.reason);
        let record = on_failure_record(
            condition,
            function_arn(&self.region, &m.function),
            p.arn,
            shard,
            &given,
            g.invokes,
            last.as_ref(),
            Utc::now(),
        );
        let file = &self.args.on_failure_file;
        error!(function = %m.function, shard, records = given.len(), condition = ?condition,
            first = %record.batch_info.start_sequence_number, last = %record.batch_info.end_sequence_number,
            file = %file.display(), "batch given up; sent to the on-failure destination");
        if m.settings.on_failure_destination {
            if let Err(e) = append_to(&record, file) {
                error!(error = %e, file = %file.display(), "cannot write the on-failure file");
            }
        }
        if let Some(queue) = &m.settings.on_failure_queue {
            let body = serde_json::to_string(&record).unwrap_or_default();
            if !self.queues.send(queue, &body) {
                error!(queue, "the on-failure queue is not in the template");
            }
        }
        given.last().map(|g| g.sequence_number.clone())
    }

    /// `--chaos`: deliver a successful batch (of the records `seqs`) once
    /// more, as chaos decides for its place among the poller's batches.
    async fn chaos_redeliver(&self, p: &mut ShardPoll<'_>, seqs: &[String], body: Bytes) {
        let Some(chaos) = &self.chaos else { return };
        let (m, shard, batch) = (p.m, p.shard, p.delivered);
        p.delivered += 1;
        if !chaos.stream_duplicate(&m.settings.table, p.resumed, batch) {
            return;
        }
        let (first, last) = (seqs[0].as_str(), seqs[seqs.len() - 1].as_str());
        warn!(function = %m.function, shard, resumed = p.resumed, batch, first, last, "{PREFIX} delivering a successful stream batch again");
        self.count(format!("{} (chaos duplicate batches)", m.function));
        let outcome = self.invoke(&m.function, body, m.timeout).await;
        if !matches!(outcome, Outcome::Answered(_)) {
            warn!(function = %m.function, shard, ?outcome, "{PREFIX} the duplicate delivery failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let ok = |s: &str| Outcome::Answered(Bytes::from(s.to_string()));
        let seqs = ["10", "11", "12"];
        assert_eq!(verdict(&ok(""), &seqs, true), BatchOutcome::Success);
        assert_eq!(
            verdict(
                &ok(r#"{"batchItemFailures": [{"itemIdentifier": "11"}]}"#),
                &seqs,
                true
            ),
            BatchOutcome::ItemFailures { first_failed: 1 }
        );
        assert_eq!(
            verdict(&ok("[1, 2]"), &seqs, true),
            BatchOutcome::InvalidResponse
        );
        // Without ReportBatchItemFailures any answer is success.
        assert_eq!(verdict(&ok("[1, 2]"), &seqs, false), BatchOutcome::Success);
        // A timeout and an unreachable instance are function errors.
        for failed in [
            Outcome::TimedOut(Duration::from_secs(1)),
            Outcome::NotDelivered("refused".into()),
            Outcome::FunctionError(Bytes::new()),
        ] {
            assert_eq!(verdict(&failed, &seqs, true), BatchOutcome::FunctionError);
        }
    }

    #[test]
    fn conditions() {
        assert_eq!(
            condition(GiveUpReason::RetryAttemptsExhausted),
            Condition::RetryAttemptsExhausted
        );
        assert_eq!(
            condition(GiveUpReason::RecordAgeExceeded),
            Condition::RecordAgeExceeded
        );
    }
}
