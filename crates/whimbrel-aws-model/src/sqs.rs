//! An Amazon SQS standard queue and the Lambda SQS event source mapping
//! that drains it, modelled with no I/O and no clock (the caller passes
//! `now`, milliseconds since the Unix epoch), so that `whimbrel local` and
//! the simulation run the stream-redrive function's queue by the same
//! rules.
//!
//! The rules, as the AWS guides give them:
//!
//! * Visibility: "When a consumer receives and processes a message from a
//!   queue, the message remains in the queue… Amazon SQS sets a visibility
//!   timeout, a period of time during which Amazon SQS prevents all
//!   consumers from receiving and processing the message"; a message not
//!   deleted becomes visible again when it ends
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html>).
//! * Redrive policy: "maxReceiveCount – The number of times a consumer can
//!   receive a message from a source queue before it's moved to a
//!   dead-letter queue" ("when the ReceiveCount for a message exceeds the
//!   maxReceiveCount for a queue, Amazon SQS moves the message to a
//!   dead-letter queue")
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html>).
//! * `MessageRetentionPeriod`: a message older than it is deleted.
//! * The Lambda mapping: "If your function successfully processes the
//!   batch, Lambda deletes the messages from the queue"; on an error
//!   "the messages become visible again after the visibility timeout".
//!   With `ReportBatchItemFailures`, "Lambda treats a batch as a complete
//!   success if your function returns … an empty batchItemFailures list,
//!   a null batchItemFailures list, an empty EventResponse, a null
//!   EventResponse", and "as a complete failure if your function returns
//!   … an invalid JSON response, an empty string itemIdentifier, a null
//!   itemIdentifier, an itemIdentifier with a bad key name, an
//!   itemIdentifier value with a message ID that doesn't exist"
//!   (<https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>).
//!
//! What the guides leave open, decided here: a standard queue delivers
//! visible messages oldest first (AWS promises no order: best-effort); a
//! message moved to the dead-letter queue keeps its id and body; the
//! receipt handle is the message id and its receive count.

use std::time::Duration;

use serde_json::{json, Value};

/// AWS's default `VisibilityTimeout`, seconds.
pub const AWS_DEFAULT_VISIBILITY_TIMEOUT_SECONDS: u64 = 30;
/// AWS's default `MessageRetentionPeriod`, seconds (4 days).
pub const AWS_DEFAULT_RETENTION_SECONDS: u64 = 345_600;
/// AWS's default `BatchSize` of an SQS event source mapping.
pub const AWS_DEFAULT_SQS_BATCH_SIZE: usize = 10;

/// A queue's `RedrivePolicy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedrivePolicy {
    /// The dead-letter queue's logical id (`deadLetterTargetArn:
    /// !GetAtt <Queue>.Arn`).
    pub dead_letter_queue: String,
    /// Receives before a message moves there (`maxReceiveCount`).
    pub max_receive_count: u32,
}

/// An `AWS::SQS::Queue`'s settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// The logical id.
    pub logical_id: String,
    /// `VisibilityTimeout` (AWS default 30 s).
    pub visibility_timeout: Duration,
    /// `MessageRetentionPeriod` (AWS default 4 days).
    pub message_retention: Duration,
    /// `RedrivePolicy`, if any.
    pub redrive: Option<RedrivePolicy>,
}

impl QueueConfig {
    /// AWS's defaults, for the queue `logical_id`.
    pub fn new(logical_id: &str) -> Self {
        QueueConfig {
            logical_id: logical_id.into(),
            visibility_timeout: Duration::from_secs(AWS_DEFAULT_VISIBILITY_TIMEOUT_SECONDS),
            message_retention: Duration::from_secs(AWS_DEFAULT_RETENTION_SECONDS),
            redrive: None,
        }
    }
}

/// An SQS event source mapping (an `Events` entry of `Type: SQS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsMapping {
    /// The queue's logical id (`Queue: !GetAtt <Queue>.Arn`).
    pub queue: String,
    /// Most messages per invocation (`BatchSize`, AWS default 10).
    pub batch_size: usize,
    /// `FunctionResponseTypes: [ReportBatchItemFailures]`.
    pub report_batch_item_failures: bool,
}

/// Longest `DelaySeconds` of a message, seconds (SendMessage: "The maximum
/// is 15 minutes").
pub const MAX_DELAY_SECONDS: u64 = 900;

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `MessageId` (the caller's: a UUID).
    pub id: String,
    /// The body.
    pub body: String,
    /// `SentTimestamp`, ms since the epoch.
    pub sent_ms: u64,
    /// `ApproximateReceiveCount`.
    pub receive_count: u32,
    /// `ApproximateFirstReceiveTimestamp`, ms, once received.
    pub first_receive_ms: Option<u64>,
    /// Invisible until then, ms.
    pub visible_at_ms: u64,
}

impl Message {
    /// The receipt handle of its latest receive.
    pub fn receipt_handle(&self) -> String {
        format!("{}#{}", self.id, self.receive_count)
    }
}

/// What one ReceiveMessage did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Received {
    /// The messages received (now invisible for the visibility timeout).
    pub batch: Vec<Message>,
    /// Messages past `maxReceiveCount`, taken off the queue: the caller
    /// sends them to the dead-letter queue.
    pub dead_lettered: Vec<Message>,
    /// Messages older than the retention period, deleted.
    pub expired: Vec<Message>,
}

/// A standard queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Queue {
    /// Its settings.
    pub config: QueueConfig,
    messages: Vec<Message>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Queue {
    /// An empty queue.
    pub fn new(config: QueueConfig) -> Self {
        Queue {
            config,
            messages: Vec::new(),
        }
    }

    /// SendMessage: `body` as message `id` at `now_ms`, visible at once.
    pub fn send(&mut self, id: &str, body: &str, now_ms: u64) {
        self.send_delayed(id, body, now_ms, 0);
    }

    /// SendMessage with `DelaySeconds` = `delay_seconds` (at most
    /// [`MAX_DELAY_SECONDS`]): "Messages that you send to the queue remain
    /// invisible to consumers for the duration of the delay period" (SQS
    /// Developer Guide, Amazon SQS message timers); it is not received
    /// before `now_ms` + the delay.
    pub fn send_delayed(&mut self, id: &str, body: &str, now_ms: u64, delay_seconds: u64) {
        let delay = delay_seconds.min(MAX_DELAY_SECONDS) * 1000;
        self.messages.push(Message {
            id: id.into(),
            body: body.into(),
            sent_ms: now_ms,
            receive_count: 0,
            first_receive_ms: None,
            visible_at_ms: now_ms + delay,
        });
    }

    /// ReceiveMessage of at most `max` visible messages at `now_ms`, oldest
    /// first; expired and dead-lettered ones are taken off on the way.
    pub fn receive(&mut self, now_ms: u64, max: usize) -> Received {
        let mut out = Received::default();
        let retention = ms(self.config.message_retention);
        let visibility = ms(self.config.visibility_timeout);
        let max_receives = self.config.redrive.as_ref().map(|r| r.max_receive_count);
        let mut kept = Vec::with_capacity(self.messages.len());
        for mut m in std::mem::take(&mut self.messages) {
            if now_ms.saturating_sub(m.sent_ms) >= retention {
                out.expired.push(m);
            } else if m.visible_at_ms > now_ms || out.batch.len() >= max {
                kept.push(m);
            } else if max_receives.is_some_and(|n| m.receive_count >= n) {
                out.dead_lettered.push(m);
            } else {
                m.receive_count += 1;
                m.first_receive_ms.get_or_insert(now_ms);
                m.visible_at_ms = now_ms + visibility;
                out.batch.push(m.clone());
                kept.push(m);
            }
        }
        self.messages = kept;
        out
    }

    /// DeleteMessage of message `id`; whether it was there.
    pub fn delete(&mut self, id: &str) -> bool {
        let before = self.messages.len();
        self.messages.retain(|m| m.id != id);
        self.messages.len() < before
    }

    /// When the next message becomes visible, ms (`None`: the queue is
    /// empty).
    pub fn next_visible_ms(&self) -> Option<u64> {
        self.messages.iter().map(|m| m.visible_at_ms).min()
    }

    /// When the oldest message on the queue was sent, ms.
    pub fn oldest_sent_ms(&self) -> Option<u64> {
        self.messages.iter().map(|m| m.sent_ms).min()
    }

    /// Messages on the queue, visible or not.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the queue holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

/// How one invocation of the mapping's function ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Invocation {
    /// It answered (the answer's JSON; `Value::Null` for none).
    Answered(Value),
    /// A function error, a timeout or a crash.
    FunctionError,
}

/// The ids of `batch` the mapping deletes after `outcome` (the rest become
/// visible again after the visibility timeout): all on a success, none on
/// a function error or an invalid partial batch response, all but the
/// named ones on a valid one (module docs).
pub fn to_delete(mapping: &SqsMapping, batch: &[Message], outcome: &Invocation) -> Vec<String> {
    let all = || batch.iter().map(|m| m.id.clone()).collect();
    let answer = match outcome {
        Invocation::FunctionError => return vec![],
        Invocation::Answered(_) if !mapping.report_batch_item_failures => return all(),
        Invocation::Answered(a) => a,
    };
    let failures = match answer {
        Value::Null => return all(),
        Value::Object(o) => match o.get("batchItemFailures") {
            None | Some(Value::Null) => return all(),
            Some(Value::Array(f)) => f,
            Some(_) => return vec![],
        },
        _ => return vec![],
    };
    let mut keep = Vec::new();
    for f in failures {
        match f.get("itemIdentifier").and_then(Value::as_str) {
            Some(id) if batch.iter().any(|m| m.id == id) => keep.push(id),
            _ => return vec![],
        }
    }
    batch
        .iter()
        .filter(|m| !keep.contains(&m.id.as_str()))
        .map(|m| m.id.clone())
        .collect()
}

/// The SQS event JSON the mapping invokes its function with, for `batch`
/// received from the queue `queue_arn` in `region` (the shape of
/// `aws_lambda_events::event::sqs::SqsEvent`; string attributes, ms
/// timestamps). `md5OfBody` is left out: it would need an MD5 library,
/// and Whimbrel does not read it.
pub fn sqs_event(batch: &[Message], queue_arn: &str, region: &str) -> Value {
    let records: Vec<Value> = batch
        .iter()
        .map(|m| {
            json!({
                "messageId": m.id,
                "receiptHandle": m.receipt_handle(),
                "body": m.body,
                "attributes": {
                    "ApproximateReceiveCount": m.receive_count.to_string(),
                    "SentTimestamp": m.sent_ms.to_string(),
                    "SenderId": "AROAWHIMBRELLOCAL",
                    "ApproximateFirstReceiveTimestamp":
                        m.first_receive_ms.unwrap_or(m.sent_ms).to_string(),
                },
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            })
        })
        .collect();
    json!({ "Records": records })
}

#[cfg(test)]
mod tests;
