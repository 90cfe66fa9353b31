//! The stream event source mappings: one task per mapping discovers the
//! stream's shards (DescribeStream, every page) and starts one poller per
//! shard once its parent has been read to its end; each poller delivers its
//! shard's records in order, one batch at a time, as Lambda does.
//!
//! A batch is the oldest `BatchSize` records not processed yet (after the
//! event name filter). Before each invocation, records older than
//! `MaximumRecordAgeInSeconds` are given up (`RecordAgeExceeded`). Then:
//! * success: the batch is processed;
//! * partial batch response: the records before the lowest failed sequence
//!   number are processed, the rest retried (an unknown identifier fails the
//!   whole batch);
//! * function error, timeout, unreachable instance: with bisect, a batch of
//!   two or more is split and its first half tried (not a retry); a single
//!   record, or without bisect, is retried;
//! * an answer that is not a partial batch response: retried whole;
//! * after `MaximumRetryAttempts` retries the batch is given up
//!   (`RetryAttemptsExhausted`).
//!
//! Processed and given-up records advance the shard's checkpoint.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::dynamodb::{Event, EventRecord, StreamRecord, StreamViewType};
use aws_lambda_events::event::streams::DynamoDbEventResponse;
use aws_sdk_dynamodbstreams::error::ProvideErrorMetadata;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use aws_smithy_types::error::display::DisplayErrorContext;
use axum::body::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tracing::{error, info, warn};

use super::chaos::PREFIX;
use super::on_failure::{function_arn, Condition, GivenUp, LastInvocation, OnFailureRecord};
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

/// A stream record as the Lambda event source mapping delivers it.
pub(crate) fn lambda_record(r: &Record, stream_arn: &str, region: &str) -> EventRecord {
    let mut out = EventRecord::default();
    out.aws_region = r.aws_region().unwrap_or(region).to_string();
    out.event_id = r.event_id().unwrap_or_default().to_string();
    out.event_name = r
        .event_name()
        .map(|o| o.as_str().to_string())
        .unwrap_or_default();
    out.event_source = Some("aws:dynamodb".into());
    out.event_version = Some(r.event_version().unwrap_or("1.1").to_string());
    out.event_source_arn = Some(stream_arn.to_string());
    let mut c = StreamRecord::default();
    if let Some(sr) = r.dynamodb() {
        if let Some(t) = sr.approximate_creation_date_time() {
            c.approximate_creation_date_time =
                chrono::DateTime::from_timestamp(t.secs(), 0).unwrap_or_default();
        }
        c.keys = sr.keys().cloned().unwrap_or_default().into();
        c.new_image = sr.new_image().cloned().unwrap_or_default().into();
        c.old_image = sr.old_image().cloned().unwrap_or_default().into();
        c.sequence_number = sr.sequence_number().map(str::to_string);
        c.size_bytes = sr.size_bytes().unwrap_or(0);
        c.stream_view_type = Some(StreamViewType::NewImage);
    }
    out.change = c;
    out
}

/// A record read and not processed yet.
struct Pending {
    record: Record,
    seq: String,
    /// `ApproximateCreationDateTime`, or when it was read if the stream
    /// gives none.
    arrival: DateTime<Utc>,
}

/// What one invocation of a batch of `n` records came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every record processed.
    Success,
    /// Records before this index processed, the rest failed.
    PartialFrom(usize),
    /// A function error, timeout or unreachable instance.
    FunctionError,
    /// An answer that is not a partial batch response.
    Invalid,
}

/// Judge an answer (pure). `seqs` are the batch's sequence numbers.
pub fn verdict(outcome: &Outcome, seqs: &[&str], report_batch_item_failures: bool) -> Verdict {
    let answer = match outcome {
        Outcome::Answered(a) => a,
        _ => return Verdict::FunctionError,
    };
    if !report_batch_item_failures {
        return Verdict::Success;
    }
    // An empty answer is success; one that is not a partial batch response
    // fails the whole batch, as on AWS.
    if answer.iter().all(u8::is_ascii_whitespace) || answer.as_ref() == b"null" {
        return Verdict::Success;
    }
    let Ok(resp) = serde_json::from_slice::<DynamoDbEventResponse>(answer) else {
        return Verdict::Invalid;
    };
    let first = resp
        .batch_item_failures
        .iter()
        .map(|f| {
            f.item_identifier
                .as_deref()
                .and_then(|id| seqs.iter().position(|s| *s == id))
                // An unknown or missing identifier fails the whole batch.
                .unwrap_or(0)
        })
        .min();
    match first {
        None => Verdict::Success,
        Some(i) => Verdict::PartialFrom(i),
    }
}

/// Waits between retries of a failing batch: 100 ms doubling to 2 s.
fn backoff(retries: u32) -> Duration {
    Duration::from_millis((100u64 << retries.min(5)).min(2_000))
}

/// The retry state of the batch at the head of a shard.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Attempts {
    /// Failures counted against `MaximumRetryAttempts`.
    pub failures: u32,
    /// Invocations that included the head records.
    pub invokes: u32,
    /// The last of them.
    pub last: Option<LastInvocation>,
    /// Records of the head batch once invoked: a retried batch keeps its
    /// records (records read meanwhile wait for the next batch), a bisected
    /// one shrinks. `None`: the next batch takes up to `BatchSize`.
    pub batch: Option<usize>,
}

/// What the poller does after one invocation of the head batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The first this many records are processed.
    pub processed: usize,
    /// Then this many are given up (`RetryAttemptsExhausted`), with the
    /// invocation count and last invocation to report.
    pub give_up: Option<(usize, u32, Option<LastInvocation>)>,
    /// Wait this long before the next invocation (a retry).
    pub wait: Option<Duration>,
}

impl Attempts {
    /// Record one invocation of the first `n` records (the head batch),
    /// its `verdict`, and say what to do next (pure). The batch is
    /// bounded: bisecting halves it without using up a retry, every other
    /// failure uses one, and past `MaximumRetryAttempts` it is given up.
    pub fn after(
        &mut self,
        verdict: &Verdict,
        n: usize,
        settings: &StreamMapping,
        last: LastInvocation,
    ) -> Step {
        self.invokes += 1;
        let mut step = Step {
            processed: 0,
            give_up: None,
            wait: None,
        };
        match verdict {
            Verdict::Success => {
                *self = Attempts::default();
                step.processed = n;
                return step;
            }
            Verdict::PartialFrom(i) => {
                if *i > 0 {
                    // The records before the first failure are done; the
                    // rest is retried as a batch that already failed once.
                    step.processed = *i;
                    *self = Attempts {
                        invokes: 1,
                        ..Attempts::default()
                    };
                }
                self.batch = Some(n - i);
                self.last = Some(LastInvocation {
                    function_error: None,
                    ..last
                });
            }
            Verdict::FunctionError => {
                self.last = Some(last);
                if settings.bisect_batch_on_function_error && n > 1 {
                    self.batch = Some(n / 2);
                    return step;
                }
                self.batch = Some(n);
            }
            Verdict::Invalid => {
                self.batch = Some(n);
                self.last = Some(LastInvocation {
                    function_error: None,
                    ..last
                });
            }
        }
        self.failures += 1;
        if settings
            .maximum_retry_attempts
            .is_some_and(|max| self.failures > max)
        {
            let k = self.batch.unwrap_or(n);
            step.give_up = Some((k, self.invokes, self.last.clone()));
            *self = Attempts::default();
        } else {
            step.wait = Some(backoff(self.failures));
        }
        step
    }
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
        let s = &m.settings;
        let function = m.function.as_str();
        let batch_size = s.batch_size.max(1);
        let idle = Duration::from_millis(self.args.poll_interval_ms);
        let resume = self.checkpoints.get(arn, shard);
        let mut last_read: Option<String> = resume.and_then(|c| c.sequence_number);
        match &last_read {
            Some(seq) => {
                info!(%function, shard, after = %seq, "resuming shard after its checkpoint")
            }
            None => info!(%function, shard, start = ?s.starting_position, "reading shard"),
        }
        let mut iterator = None;
        let mut closed = false;
        let mut pending: VecDeque<Pending> = VecDeque::new();
        let mut at = Attempts::default();
        loop {
            // Read up to a full batch.
            if !closed && pending.len() < batch_size && iterator.is_none() {
                iterator = self
                    .iterator(arn, shard, last_read.as_deref(), s.starting_position)
                    .await;
                if iterator.is_none() && pending.is_empty() {
                    tokio::time::sleep(idle.max(Duration::from_secs(1))).await;
                    continue;
                }
            }
            if let Some(it) = iterator.clone().filter(|_| pending.len() < batch_size) {
                match self
                    .streams
                    .get_records()
                    .shard_iterator(it)
                    .limit((batch_size - pending.len()).min(1000) as i32)
                    .send()
                    .await
                {
                    Ok(out) => {
                        let now = Utc::now();
                        for r in out.records() {
                            let Some(seq) = r.dynamodb().and_then(|d| d.sequence_number()) else {
                                continue;
                            };
                            last_read = Some(seq.to_string());
                            let name = r.event_name().map(|n| n.as_str()).unwrap_or("");
                            if let Some(names) = &s.event_names {
                                if !names.iter().any(|n| n == name) {
                                    continue;
                                }
                            }
                            let arrival = r
                                .dynamodb()
                                .and_then(|d| d.approximate_creation_date_time())
                                .and_then(|t| DateTime::from_timestamp(t.secs(), t.subsec_nanos()))
                                .unwrap_or(now);
                            pending.push_back(Pending {
                                record: r.clone(),
                                seq: seq.to_string(),
                                arrival,
                            });
                        }
                        iterator = out.next_shard_iterator().map(str::to_string);
                        closed = iterator.is_none();
                    }
                    Err(e) => {
                        // Expired or broken iterator (DynamoDB Local: an
                        // iterator taken on a shard with no record yet fails
                        // with TrimmedDataAccess once another table is
                        // written first): re-open after the last record read.
                        warn!(shard, error = %DisplayErrorContext(&e), "GetRecords failed; reopening the iterator");
                        iterator = None;
                        if pending.is_empty() {
                            tokio::time::sleep(idle).await;
                            continue;
                        }
                    }
                }
            }
            if pending.is_empty() {
                // Everything read so far is processed (or filtered out).
                self.checkpoint(arn, shard, last_read.as_deref(), closed);
                if closed {
                    info!(%function, shard, "shard read to its end");
                    return;
                }
                tokio::time::sleep(idle).await;
                continue;
            }

            // Records past their maximum age are not delivered.
            if let Some(max) = s.maximum_record_age {
                let now = Utc::now();
                let expired = pending
                    .iter()
                    .take_while(|p| (now - p.arrival).to_std().unwrap_or_default() > max)
                    .count();
                if expired > 0 {
                    let invokes = if at.last.is_some() { at.invokes } else { 0 };
                    let done = self.give_up(
                        m,
                        arn,
                        shard,
                        &mut pending,
                        (expired, invokes, at.last.clone()),
                        Condition::RecordAgeExceeded,
                    );
                    // What is left of the batch starts afresh.
                    at = Attempts::default();
                    self.processed(arn, shard, &pending, done.as_deref(), last_read.as_deref());
                    continue;
                }
            }

            let n = at.batch.unwrap_or(batch_size).min(pending.len());
            let mut event = Event::default();
            event.records = pending
                .iter()
                .take(n)
                .map(|p| lambda_record(&p.record, arn, &self.region))
                .collect();
            let body = Bytes::from(serde_json::to_vec(&event).unwrap_or_default());
            let request_id = uuid::Uuid::new_v4().to_string();
            self.count(format!("{function} (stream batches)"));
            let outcome = self.invoke(function, body.clone(), m.timeout).await;
            let seqs: Vec<String> = pending.iter().take(n).map(|p| p.seq.clone()).collect();
            let refs: Vec<&str> = seqs.iter().map(String::as_str).collect();
            let v = verdict(&outcome, &refs, s.report_batch_item_failures);
            let error = outcome
                .error_payload(&request_id)
                .map(|e| String::from_utf8_lossy(&e).into_owned());
            let last = LastInvocation {
                request_id,
                function_error: Some("Unhandled".into()),
            };
            let step = at.after(&v, n, s, last);
            match &v {
                Verdict::Success => {
                    self.chaos_redeliver(m, arn, shard, &seqs[0], &seqs[n - 1], body)
                        .await;
                }
                Verdict::PartialFrom(i) => {
                    info!(%function, shard, records = n, retry_from = i, "partial batch failure")
                }
                Verdict::FunctionError => {
                    let what = match (&step.give_up, step.wait) {
                        (Some(_), _) => "function error; retries used up",
                        (None, None) => "function error; bisecting the batch",
                        (None, Some(_)) => "function error; retrying the batch",
                    };
                    warn!(%function, shard, records = n, failures = at.failures, error = error.as_deref().unwrap_or(""), "{what}")
                }
                Verdict::Invalid => {
                    if let Outcome::Answered(a) = &outcome {
                        warn!(%function, shard, answer = %String::from_utf8_lossy(a), "answer is not a partial batch response; retrying the batch");
                    }
                }
            }
            if step.processed > 0 {
                pending.drain(..step.processed);
                let done = &seqs[step.processed - 1];
                self.processed(arn, shard, &pending, Some(done), last_read.as_deref());
            }
            if let Some(give_up) = step.give_up {
                let done = self.give_up(
                    m,
                    arn,
                    shard,
                    &mut pending,
                    give_up,
                    Condition::RetryAttemptsExhausted,
                );
                self.processed(arn, shard, &pending, done.as_deref(), last_read.as_deref());
            }
            if let Some(wait) = step.wait {
                tokio::time::sleep(wait).await;
            }
        }
    }

    /// The head records were processed (or given up), the last of them
    /// `done`: advance the checkpoint, to everything read when nothing is
    /// pending (records filtered out included).
    fn processed(
        &self,
        arn: &str,
        shard: &str,
        pending: &VecDeque<Pending>,
        done: Option<&str>,
        last_read: Option<&str>,
    ) {
        let upto = if pending.is_empty() { last_read } else { done };
        if upto.is_some() {
            self.checkpoint(arn, shard, upto, false);
        }
    }

    /// Send the first `k` pending records to the on-failure destination.
    #[allow(clippy::too_many_arguments)]
    fn give_up(
        &self,
        m: &Mapping,
        arn: &str,
        shard: &str,
        pending: &mut VecDeque<Pending>,
        (k, invokes, last): (usize, u32, Option<LastInvocation>),
        condition: Condition,
    ) -> Option<String> {
        let given: Vec<GivenUp> = pending
            .drain(..k.min(pending.len()))
            .map(|p| GivenUp {
                sequence_number: p.seq,
                arrival: p.arrival,
            })
            .collect();
        let record = OnFailureRecord::new(
            condition,
            function_arn(&self.region, &m.function),
            arn,
            shard,
            &given,
            invokes,
            last.as_ref(),
            Utc::now(),
        );
        let file = &self.args.on_failure_file;
        error!(function = %m.function, shard, records = given.len(), condition = ?condition,
            first = %record.batch_info.start_sequence_number, last = %record.batch_info.end_sequence_number,
            file = %file.display(), "batch given up; sent to the on-failure destination");
        if m.settings.on_failure_destination {
            if let Err(e) = record.append_to(file) {
                error!(error = %e, file = %file.display(), "cannot write the on-failure file");
            }
        }
        given.last().map(|g| g.sequence_number.clone())
    }

    /// `--chaos`: deliver a successful batch once more.
    async fn chaos_redeliver(
        &self,
        m: &Mapping,
        arn: &str,
        shard: &str,
        first: &str,
        last: &str,
        body: Bytes,
    ) {
        let Some(chaos) = &self.chaos else { return };
        if !chaos.stream_duplicate(arn, shard, first, last) {
            return;
        }
        warn!(function = %m.function, shard, first, last, "{PREFIX} delivering a successful stream batch again");
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
    use crate::local::template::StartingPosition;

    fn settings(retries: Option<u32>, bisect: bool) -> StreamMapping {
        StreamMapping {
            table: "t".into(),
            batch_size: 100,
            maximum_retry_attempts: retries,
            maximum_record_age: None,
            bisect_batch_on_function_error: bisect,
            report_batch_item_failures: true,
            event_names: None,
            starting_position: StartingPosition::TrimHorizon,
            on_failure_destination: true,
        }
    }

    fn call(n: u32) -> LastInvocation {
        LastInvocation {
            request_id: format!("r{n}"),
            function_error: Some("Unhandled".into()),
        }
    }

    /// Invoke the head batch of `pending` records with a function that
    /// always fails until something is given up; the invocations made.
    fn until_given_up(s: &StreamMapping, pending: usize) -> (u32, Step, Vec<usize>) {
        let mut at = Attempts::default();
        let mut sizes = Vec::new();
        for i in 1..=10_000 {
            let n = at.batch.unwrap_or(s.batch_size).min(pending);
            sizes.push(n);
            let step = at.after(&Verdict::FunctionError, n, s, call(i));
            if step.give_up.is_some() {
                return (i, step, sizes);
            }
        }
        panic!("never given up");
    }

    #[test]
    fn a_failing_batch_is_bisected_then_bounded() {
        // 100 → 50 → 25 → 12 → 6 → 3 → 1 (bisecting uses no retry), then
        // the single record is tried 1 + 10 times.
        let (invokes, step, sizes) = until_given_up(&settings(Some(10), true), 100);
        assert_eq!(invokes, 6 + 11);
        assert_eq!(&sizes[..7], [100, 50, 25, 12, 6, 3, 1]);
        assert!(sizes[7..].iter().all(|n| *n == 1));
        let (k, count, last) = step.give_up.unwrap();
        assert_eq!(k, 1);
        assert_eq!(count, 17);
        assert_eq!(last.unwrap().request_id, "r17");
    }

    #[test]
    fn without_bisect_the_whole_batch_is_retried_then_given_up() {
        let (invokes, step, sizes) = until_given_up(&settings(Some(10), false), 40);
        assert_eq!(invokes, 11);
        assert!(sizes.iter().all(|n| *n == 40));
        assert_eq!(step.give_up.unwrap().0, 40);
        // A retried batch keeps its records: records read meanwhile wait.
        let mut at = Attempts::default();
        at.after(&Verdict::Invalid, 3, &settings(Some(10), false), call(1));
        assert_eq!(at.batch, Some(3));
        assert_eq!(at.last.unwrap().function_error, None);
    }

    #[test]
    fn retries_wait_and_infinite_retries_never_give_up() {
        let s = settings(None, false);
        let mut at = Attempts::default();
        for i in 1..=1000 {
            let step = at.after(&Verdict::FunctionError, 5, &s, call(i));
            assert_eq!(step.give_up, None);
            assert!(step.wait.unwrap() <= Duration::from_secs(2));
        }
    }

    #[test]
    fn partial_failures_process_the_prefix() {
        let s = settings(Some(0), true);
        let mut at = Attempts::default();
        // 3 of 10 done; MaximumRetryAttempts 0: the other 7 are given up.
        let step = at.after(&Verdict::PartialFrom(3), 10, &s, call(1));
        assert_eq!(step.processed, 3);
        let (k, invokes, last) = step.give_up.unwrap();
        assert_eq!((k, invokes), (7, 1));
        assert_eq!(last.unwrap().function_error, None);
        assert_eq!(at, Attempts::default());
        // With retries left, the rest is retried as one batch.
        let s = settings(Some(2), true);
        let step = at.after(&Verdict::PartialFrom(4), 10, &s, call(2));
        assert_eq!((step.processed, step.give_up.is_none()), (4, true));
        assert_eq!((at.batch, at.failures), (Some(6), 1));
        let step = at.after(&Verdict::Success, 6, &s, call(3));
        assert_eq!(step.processed, 6);
        assert_eq!(at, Attempts::default());
    }

    #[test]
    fn verdicts() {
        let ok = |s: &str| Outcome::Answered(Bytes::from(s.to_string()));
        let seqs = ["10", "11", "12"];
        assert_eq!(verdict(&ok(""), &seqs, true), Verdict::Success);
        assert_eq!(verdict(&ok("null"), &seqs, true), Verdict::Success);
        assert_eq!(
            verdict(&ok(r#"{"batchItemFailures": []}"#), &seqs, true),
            Verdict::Success
        );
        assert_eq!(
            verdict(
                &ok(
                    r#"{"batchItemFailures": [{"itemIdentifier": "12"}, {"itemIdentifier": "11"}]}"#
                ),
                &seqs,
                true
            ),
            Verdict::PartialFrom(1)
        );
        assert_eq!(
            verdict(
                &ok(r#"{"batchItemFailures": [{"itemIdentifier": "99"}]}"#),
                &seqs,
                true
            ),
            Verdict::PartialFrom(0)
        );
        assert_eq!(verdict(&ok("[1, 2]"), &seqs, true), Verdict::Invalid);
        // Without ReportBatchItemFailures any answer is success.
        assert_eq!(verdict(&ok("[1, 2]"), &seqs, false), Verdict::Success);
        assert_eq!(
            verdict(&Outcome::TimedOut(Duration::from_secs(1)), &seqs, true),
            Verdict::FunctionError
        );
        assert_eq!(
            verdict(&Outcome::NotDelivered("refused".into()), &seqs, true),
            Verdict::FunctionError
        );
        assert_eq!(
            verdict(&Outcome::FunctionError(Bytes::new()), &seqs, true),
            Verdict::FunctionError
        );
    }
}
