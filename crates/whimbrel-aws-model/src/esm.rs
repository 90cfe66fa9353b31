//! The decisions of a DynamoDB stream event source mapping: what happens to
//! the batch at the head of a shard after one invocation, and which records
//! are too old to deliver. Pure: the caller reads the stream, invokes the
//! function, waits and checkpoints (`whimbrel local` against DynamoDB Local,
//! the simulation against its in-memory model) and asks here what to do
//! next, so both follow the same rules.
//!
//! The rules, as the AWS Lambda developer guide gives them:
//!
//! * Bisection does not use up retries. "For function errors, you can also
//!   configure BisectBatchOnFunctionError, which splits a failed batch into
//!   two smaller batches, isolating bad records and avoiding timeouts.
//!   Splitting batches doesn't consume the retry quota."
//!   (<https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>).
//!   So with `MaximumRetryAttempts` = N, a failing batch of 100 records is
//!   split 100 → 50 → 25 → 12 → 6 → 3 → 1 without a retry counted, and a
//!   record that fails alone is invoked 1 + N times, then given up
//!   (`RetryAttemptsExhausted`).
//! * `MaximumRetryAttempts` -1 is infinite: "failed records are retried
//!   until the record expires"
//!   (<https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html>).
//! * Partial batch responses: "If the batchItemFailures array contains
//!   multiple items, Lambda uses the record with the lowest sequence number
//!   as the checkpoint. Lambda then retries all records starting from that
//!   checkpoint." An empty or null list, or an empty or null response, is
//!   a complete success; a missing or unknown identifier a complete failure.
//!   "If your invocation fails and BisectBatchOnFunctionError is turned on,
//!   the batch is bisected regardless of your ReportBatchItemFailures
//!   setting."
//!   (<https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html>).
//! * `MaximumRecordAgeInSeconds`: records older than that are not delivered
//!   but given up (`RecordAgeExceeded`), before the invocation.
//!
//! What the guide leaves open, decided here: retrying the rest of a batch
//! after a partial failure counts as a retry (there is nothing to split at);
//! an answer that is not a partial batch response fails the whole batch
//! like a partial failure at its first record (it is not a function error,
//! so it is not bisected); after a bisected half succeeds, the records after
//! it are batched afresh (up to `BatchSize`) rather than as the other half;
//! a split is retried at once, a counted retry after a [`Backoff`].

use std::time::Duration;

use serde_json::Value;

use crate::template::StreamMapping;

/// What one invocation of a batch came to, as the mapping judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOutcome {
    /// Every record is processed.
    Success,
    /// A partial batch response: the records before index `first_failed`
    /// (in batch order; the record with the lowest failed sequence number,
    /// 0 when an identifier is missing or not in the batch) are processed,
    /// that one and the rest failed.
    ItemFailures {
        /// Index in the batch of the first record to retry.
        first_failed: usize,
    },
    /// The function failed: it returned an error, crashed or timed out.
    FunctionError,
    /// With `ReportBatchItemFailures`, an answer that is not a partial batch
    /// response: the whole batch failed, though not with a function error
    /// (it is retried whole, never bisected).
    InvalidResponse,
}

impl BatchOutcome {
    /// The outcome of a partial batch response. `batch`: the sequence
    /// numbers of the batch's records, in batch order; `failed`: the
    /// `itemIdentifier` of each `batchItemFailures` entry (`None`: missing
    /// or null). No failures is a success.
    pub fn item_failures<'a, S: AsRef<str>>(
        batch: &[S],
        failed: impl IntoIterator<Item = Option<&'a str>>,
    ) -> BatchOutcome {
        let first = failed
            .into_iter()
            .map(|id| {
                id.and_then(|id| batch.iter().position(|s| s.as_ref() == id))
                    // A missing or unknown identifier fails the whole batch.
                    .unwrap_or(0)
            })
            .min();
        match first {
            None => BatchOutcome::Success,
            Some(i) => BatchOutcome::ItemFailures { first_failed: i },
        }
    }

    /// The outcome of a function's answer (its response payload, JSON)
    /// to a batch whose records have the sequence numbers `batch`. Without
    /// `ReportBatchItemFailures` any answer is a success; with it, the
    /// answer is read as `{"batchItemFailures": [{"itemIdentifier": "<seq>"}]}`.
    pub fn from_answer<S: AsRef<str>>(
        answer: &[u8],
        batch: &[S],
        report_batch_item_failures: bool,
    ) -> BatchOutcome {
        if !report_batch_item_failures || answer.iter().all(u8::is_ascii_whitespace) {
            return BatchOutcome::Success;
        }
        let Ok(v) = serde_json::from_slice::<Value>(answer) else {
            return BatchOutcome::InvalidResponse;
        };
        let failures = match &v {
            Value::Null => return BatchOutcome::Success,
            Value::Object(o) => o.get("batchItemFailures").unwrap_or(&Value::Null),
            _ => return BatchOutcome::InvalidResponse,
        };
        let failures = match failures {
            Value::Null => return BatchOutcome::Success,
            Value::Array(a) => a,
            _ => return BatchOutcome::InvalidResponse,
        };
        if failures.iter().any(|f| !f.is_object()) {
            return BatchOutcome::InvalidResponse;
        }
        let ids = failures.iter().map(|f| f["itemIdentifier"].as_str());
        BatchOutcome::item_failures(batch, ids)
    }
}

/// Why records were given up: the `condition` of the on-failure record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUpReason {
    /// Retries past `MaximumRetryAttempts`.
    RetryAttemptsExhausted,
    /// Older than `MaximumRecordAgeInSeconds`, not delivered.
    RecordAgeExceeded,
}

/// Records given up: sent to the on-failure destination (when the mapping
/// has one) and checkpointed past, as if processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiveUp {
    /// How many: the first this many records not processed yet.
    pub records: usize,
    /// Invocations that included them (0: never invoked), the on-failure
    /// record's `approximateInvokeCount`.
    pub invokes: u32,
    /// Why.
    pub reason: GiveUpReason,
}

/// What happens to the rest of the head batch after one invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing of the batch is left: the next batch takes up to `BatchSize`
    /// records, at once.
    Continue,
    /// Retry the first `records` records not processed yet, as one batch
    /// (records read meanwhile wait), after [`Backoff::delay`]`(retry)`.
    Retry {
        /// Records in the retried batch.
        records: usize,
        /// Which retry this is, from 1 (at most `MaximumRetryAttempts`).
        retry: u32,
    },
    /// Split the batch: invoke its first half, `records` records, at once.
    /// Uses no retry.
    Bisect {
        /// Records in the half invoked next.
        records: usize,
    },
    /// Retries used up: give records up.
    GiveUp(GiveUp),
}

/// What the mapping does after one invocation of the head batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The first this many records of the batch are processed: the
    /// checkpoint moves past them.
    pub processed: usize,
    /// Then, for the records after them.
    pub next: Next,
}

/// The retry state of the batch at the head of a shard. Starts (and
/// returns, once the batch is done or given up) at `Attempts::default()`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Attempts {
    /// Failures counted against `MaximumRetryAttempts`: each is followed by
    /// a retry until there are more than that many. Splits count none.
    pub failures: u32,
    /// Invocations that included the head records.
    pub invokes: u32,
    /// Records in the head batch once it failed: a retried batch keeps its
    /// records, a bisected one halves. `None`: the next batch takes up to
    /// `BatchSize`.
    pub batch: Option<usize>,
}

impl Attempts {
    /// How many records the next invocation delivers when `available`
    /// records are read and not processed yet.
    pub fn next_batch(&self, settings: &StreamMapping, available: usize) -> usize {
        self.batch
            .unwrap_or(settings.batch_size.max(1))
            .min(available)
    }

    /// Before an invocation: the oldest records past
    /// `MaximumRecordAgeInSeconds` are given up (`RecordAgeExceeded`).
    /// `ages`: how old each record not processed yet is (now minus its
    /// `ApproximateCreationDateTime`), oldest first. What is left of the
    /// batch starts afresh.
    pub fn expire(
        &mut self,
        settings: &StreamMapping,
        ages: impl IntoIterator<Item = Duration>,
    ) -> Option<GiveUp> {
        let max = settings.maximum_record_age?;
        let records = ages.into_iter().take_while(|age| *age > max).count();
        if records == 0 {
            return None;
        }
        let invokes = self.invokes;
        *self = Attempts::default();
        Some(GiveUp {
            records,
            invokes,
            reason: GiveUpReason::RecordAgeExceeded,
        })
    }

    /// After an invocation of the first `n` (≥ 1) records not processed
    /// yet, which came to `outcome`: record it and say what happens next.
    pub fn after(&mut self, settings: &StreamMapping, n: usize, outcome: BatchOutcome) -> Step {
        self.invokes += 1;
        let processed = match outcome {
            BatchOutcome::ItemFailures { first_failed } if first_failed < n => first_failed,
            BatchOutcome::Success | BatchOutcome::ItemFailures { .. } => {
                *self = Attempts::default();
                return Step {
                    processed: n,
                    next: Next::Continue,
                };
            }
            BatchOutcome::FunctionError if settings.bisect_batch_on_function_error && n > 1 => {
                self.batch = Some(n / 2);
                return Step {
                    processed: 0,
                    next: Next::Bisect { records: n / 2 },
                };
            }
            BatchOutcome::FunctionError | BatchOutcome::InvalidResponse => 0,
        };
        if processed > 0 {
            // The rest is retried as a batch that failed once.
            *self = Attempts {
                invokes: 1,
                ..Attempts::default()
            };
        }
        let rest = n - processed;
        self.batch = Some(rest);
        self.failures += 1;
        let next = if settings
            .maximum_retry_attempts
            .is_some_and(|max| self.failures > max)
        {
            let invokes = self.invokes;
            *self = Attempts::default();
            Next::GiveUp(GiveUp {
                records: rest,
                invokes,
                reason: GiveUpReason::RetryAttemptsExhausted,
            })
        } else {
            Next::Retry {
                records: rest,
                retry: self.failures,
            }
        };
        Step { processed, next }
    }
}

/// The waits between retries of a failing batch: `first` before the first
/// retry, doubling each retry, at most `max`. AWS does not document its
/// own; each caller picks a scale (milliseconds locally, seconds of
/// simulated time in the simulation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Before the first retry.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Backoff {
    /// The wait before retry number `retry` (from 1, as [`Next::Retry`]
    /// gives it).
    pub fn delay(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(31);
        self.first.saturating_mul(1u32 << doublings).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(retries: Option<u32>, bisect: bool) -> StreamMapping {
        StreamMapping {
            batch_size: 100,
            maximum_retry_attempts: retries,
            bisect_batch_on_function_error: bisect,
            report_batch_item_failures: true,
            ..StreamMapping::default()
        }
    }

    /// A shard of `records` records whose function fails every batch that
    /// holds record `poison`, driven through the model as a mapping does.
    struct Run {
        /// Records processed, in order.
        processed: Vec<usize>,
        /// Records given up, with their invocation count.
        given_up: Vec<(usize, u32)>,
        /// The size of each invocation's batch.
        sizes: Vec<usize>,
    }

    fn run(s: &StreamMapping, records: usize, poison: usize) -> Run {
        let mut pending: Vec<usize> = (0..records).collect();
        let mut at = Attempts::default();
        let mut out = Run {
            processed: vec![],
            given_up: vec![],
            sizes: vec![],
        };
        while !pending.is_empty() {
            assert!(out.sizes.len() < 10_000, "never ends");
            let n = at.next_batch(s, pending.len());
            out.sizes.push(n);
            let outcome = if pending[..n].contains(&poison) {
                BatchOutcome::FunctionError
            } else {
                BatchOutcome::Success
            };
            let step = at.after(s, n, outcome);
            out.processed.extend(pending.drain(..step.processed));
            if let Next::GiveUp(g) = step.next {
                assert_eq!(g.reason, GiveUpReason::RetryAttemptsExhausted);
                out.given_up
                    .extend(pending.drain(..g.records).map(|r| (r, g.invokes)));
            }
        }
        out
    }

    #[test]
    fn bisection_does_not_use_up_retries() {
        // AWS: "Splitting batches doesn't consume the retry quota."
        for n in [0, 1, 3, 10] {
            let s = settings(Some(n), true);
            let r = run(&s, 100, 0);
            // 100 → 50 → 25 → 12 → 6 → 3 → 1: six splits, no retry used;
            // then the record alone: its first invocation and N retries.
            assert_eq!(&r.sizes[..7], [100, 50, 25, 12, 6, 3, 1], "N = {n}");
            let alone = r.sizes[6..].iter().take_while(|k| **k == 1).count();
            assert_eq!(alone as u32, 1 + n, "N = {n}");
            assert_eq!(r.given_up, [(0, 6 + 1 + n)], "N = {n}");
            // Everything else is processed, in order.
            assert_eq!(r.processed, (1..100).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_bad_record_in_the_middle_is_isolated_and_alone_given_up() {
        let s = settings(Some(2), true);
        let r = run(&s, 8, 5);
        // [0..8) fails → [0..4) ok → [4..8) fails → [4..6) fails → [4] ok
        // → [5..8) fails → [5] fails alone 1 + 2 times → [6..8) ok.
        assert_eq!(r.sizes, [8, 4, 4, 2, 1, 3, 1, 1, 1, 2]);
        // Invocations since the batch last started afresh (after [4] went
        // through): [5..8) once, then [5] three times.
        assert_eq!(r.given_up, [(5, 4)]);
        assert_eq!(r.processed, [0, 1, 2, 3, 4, 6, 7]);
    }

    #[test]
    fn a_split_is_retried_at_once_a_counted_retry_after_a_backoff() {
        let s = settings(Some(10), true);
        let mut at = Attempts::default();
        let step = at.after(&s, 4, BatchOutcome::FunctionError);
        assert_eq!(step.next, Next::Bisect { records: 2 });
        assert_eq!((at.failures, at.batch), (0, Some(2)));
        at.after(&s, 2, BatchOutcome::FunctionError);
        let step = at.after(&s, 1, BatchOutcome::FunctionError);
        assert_eq!(
            step.next,
            Next::Retry {
                records: 1,
                retry: 1
            }
        );
    }

    #[test]
    fn without_bisect_the_whole_batch_is_retried_then_given_up() {
        let r = run(&settings(Some(10), false), 40, 39);
        assert_eq!(r.sizes, [40; 11]);
        assert_eq!(r.given_up.len(), 40);
        assert!(r.given_up.iter().all(|(_, invokes)| *invokes == 11));
        // A retried batch keeps its records: records read meanwhile wait.
        let mut at = Attempts::default();
        let step = at.after(&settings(Some(10), true), 3, BatchOutcome::InvalidResponse);
        assert_eq!(
            step.next,
            Next::Retry {
                records: 3,
                retry: 1
            }
        );
        assert_eq!(at.next_batch(&settings(Some(10), true), 50), 3);
    }

    #[test]
    fn infinite_retries_never_give_up() {
        for bisect in [false, true] {
            let s = settings(None, bisect);
            let mut at = Attempts::default();
            for i in 1..=10_000u32 {
                let n = at.next_batch(&s, 5);
                match at.after(&s, n, BatchOutcome::FunctionError).next {
                    Next::Retry { retry, .. } => assert!(retry >= 1),
                    Next::Bisect { .. } => assert!(i < 5),
                    other => panic!("{other:?} after {i} invocations"),
                }
            }
            assert_eq!(at.invokes, 10_000);
        }
    }

    #[test]
    fn partial_batch_item_failures_advance_past_the_prefix() {
        let s = settings(Some(2), true);
        let mut at = Attempts::default();
        // 4 of 10 done: the other 6 are retried as one batch that failed
        // once (not bisected: there is nothing to split at).
        let step = at.after(&s, 10, BatchOutcome::ItemFailures { first_failed: 4 });
        assert_eq!(step.processed, 4);
        assert_eq!(
            step.next,
            Next::Retry {
                records: 6,
                retry: 1
            }
        );
        assert_eq!((at.batch, at.failures, at.invokes), (Some(6), 1, 1));
        // The first of them fails again twice: retries used up.
        at.after(&s, 6, BatchOutcome::ItemFailures { first_failed: 0 });
        let step = at.after(&s, 6, BatchOutcome::ItemFailures { first_failed: 0 });
        assert_eq!(step.processed, 0);
        assert_eq!(
            step.next,
            Next::GiveUp(GiveUp {
                records: 6,
                invokes: 3,
                reason: GiveUpReason::RetryAttemptsExhausted
            })
        );
        assert_eq!(at, Attempts::default());
        // MaximumRetryAttempts 0: the rest is given up at once, the prefix
        // still processed.
        let step = at.after(
            &settings(Some(0), true),
            10,
            BatchOutcome::ItemFailures { first_failed: 3 },
        );
        assert_eq!(step.processed, 3);
        assert!(matches!(step.next, Next::GiveUp(g) if g.records == 7 && g.invokes == 1));
        // A success ends the batch.
        let step = at.after(&s, 5, BatchOutcome::Success);
        assert_eq!((step.processed, step.next), (5, Next::Continue));
        assert_eq!(at, Attempts::default());
    }

    #[test]
    fn record_age_gives_up_the_old_records() {
        let s = StreamMapping {
            maximum_record_age: Some(Duration::from_secs(60)),
            ..settings(Some(10), true)
        };
        let mut at = Attempts::default();
        at.after(&s, 4, BatchOutcome::FunctionError);
        let ages = [61, 90, 60, 500].map(Duration::from_secs);
        // Oldest first, up to the first young enough (60 s is not past 60).
        let g = at.expire(&s, ages).unwrap();
        assert_eq!(
            g,
            GiveUp {
                records: 2,
                invokes: 1,
                reason: GiveUpReason::RecordAgeExceeded
            }
        );
        // What is left starts afresh.
        assert_eq!(at, Attempts::default());
        assert_eq!(at.expire(&s, [Duration::from_secs(60)]), None);
        // -1: records never age out.
        let forever = settings(Some(10), true);
        assert_eq!(at.expire(&forever, [Duration::from_secs(1 << 40)]), None);
    }

    #[test]
    fn answers() {
        let seqs = ["10", "11", "12"];
        let judge = |a: &str| BatchOutcome::from_answer(a.as_bytes(), &seqs, true);
        assert_eq!(judge(""), BatchOutcome::Success);
        assert_eq!(judge("null"), BatchOutcome::Success);
        assert_eq!(judge("{}"), BatchOutcome::Success);
        assert_eq!(
            judge(r#"{"batchItemFailures": null}"#),
            BatchOutcome::Success
        );
        assert_eq!(judge(r#"{"batchItemFailures": []}"#), BatchOutcome::Success);
        assert_eq!(
            judge(r#"{"batchItemFailures": [{"itemIdentifier": "12"}, {"itemIdentifier": "11"}]}"#),
            BatchOutcome::ItemFailures { first_failed: 1 }
        );
        for unknown in [r#""99""#, r#""""#, "null"] {
            let a = format!(r#"{{"batchItemFailures": [{{"itemIdentifier": {unknown}}}]}}"#);
            assert_eq!(judge(&a), BatchOutcome::ItemFailures { first_failed: 0 });
        }
        assert_eq!(judge("[1, 2]"), BatchOutcome::InvalidResponse);
        assert_eq!(
            judge(r#"{"batchItemFailures": 3}"#),
            BatchOutcome::InvalidResponse
        );
        assert_eq!(judge("not json"), BatchOutcome::InvalidResponse);
        // Without ReportBatchItemFailures any answer is a success.
        assert_eq!(
            BatchOutcome::from_answer(b"[1, 2]", &seqs, false),
            BatchOutcome::Success
        );
    }

    #[test]
    fn backoff_doubles_to_its_cap() {
        let b = Backoff {
            first: Duration::from_millis(200),
            max: Duration::from_secs(2),
        };
        let waits: Vec<u128> = (1..=6).map(|r| b.delay(r).as_millis()).collect();
        assert_eq!(waits, [200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(2));
    }
}
