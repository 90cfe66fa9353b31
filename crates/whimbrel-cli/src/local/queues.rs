//! The template's SQS queues and their Lambda event source mappings
//! (`Type: SQS` events), as AWS runs them, by the one model of both,
//! [`whimbrel_aws_model::sqs`], which the simulation follows too:
//! visibility timeout, receive counts, the redrive policy to a dead-letter
//! queue, retention, `BatchSize`, and partial batch responses
//! (`ReportBatchItemFailures`).
//!
//! Here the stream mappings' on-failure records go to the
//! `StreamFailureQueue`, and its mapping invokes the stream-redrive
//! function. The queues live in this process (a restart empties them: the
//! on-failure file keeps every record, for `whimbrel replay`); a message
//! moved to a dead-letter queue is also appended to `--dead-letter-file`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use tracing::{error, info, warn};
use whimbrel_aws_model::sqs::{self, Invocation, Queue, Received, SqsMapping};
use whimbrel_aws_model::template::Template;

use super::timeline::now_ms;
use super::{Outcome, Runner};

/// Every queue of the template, by logical id.
#[derive(Debug, Default)]
pub(crate) struct Queues(Mutex<BTreeMap<String, Queue>>);

impl Queues {
    /// The template's queues, empty; `visibility` overrides every queue's
    /// `VisibilityTimeout` (`--visibility-timeout-seconds`).
    pub(crate) fn new(template: &Template, visibility: Option<u64>) -> Self {
        let queues = template
            .queues
            .iter()
            .map(|(id, c)| {
                let mut c = c.clone();
                if let Some(s) = visibility {
                    c.visibility_timeout = Duration::from_secs(s);
                }
                (id.clone(), Queue::new(c))
            })
            .collect();
        Queues(Mutex::new(queues))
    }

    fn with<T>(&self, queue: &str, f: impl FnOnce(&mut Queue) -> T) -> Option<T> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(queue)
            .map(f)
    }

    /// SendMessage of `body` to `queue`; false when the template has no
    /// such queue.
    pub(crate) fn send(&self, queue: &str, body: &str) -> bool {
        self.send_delayed(queue, body, 0).is_some()
    }

    /// SendMessage of `body` to `queue` with `DelaySeconds` = `delay`;
    /// the message id, or `None` when the template has no such queue.
    pub(crate) fn send_delayed(&self, queue: &str, body: &str, delay: u64) -> Option<String> {
        let id = uuid::Uuid::new_v4().to_string();
        self.with(queue, |q| q.send_delayed(&id, body, now_ms(), delay))
            .map(|()| id)
    }

    fn receive(&self, queue: &str, max: usize) -> (Received, Option<u64>) {
        self.with(queue, |q| (q.receive(now_ms(), max), q.next_visible_ms()))
            .unwrap_or_default()
    }

    fn delete(&self, queue: &str, ids: &[String]) {
        self.with(queue, |q| {
            for id in ids {
                q.delete(id);
            }
        });
    }
}

/// The ARN of queue `name` (its logical id locally).
fn queue_arn(region: &str, name: &str) -> String {
    format!("arn:aws:sqs:{region}:000000000000:{name}")
}

impl Runner {
    /// The SQS event source mapping `m` of `function`: poll, invoke with
    /// each batch, delete what the answer lets go, dead-letter what the
    /// queue's redrive policy moves.
    pub(super) async fn poll_queue(self: Arc<Self>, function: String, m: SqsMapping) {
        let idle = Duration::from_millis(self.args.poll_interval_ms.max(50));
        let timeout = self.timeout(&function);
        info!(%function, queue = %m.queue, batch_size = m.batch_size, "SQS event source mapping polling");
        loop {
            let _work = self.start_work().await;
            let (got, next) = self.queues.receive(&m.queue, m.batch_size);
            self.dead_letter(&m.queue, &got);
            if got.batch.is_empty() {
                let wait = next.map_or(idle, |at| {
                    Duration::from_millis(at.saturating_sub(now_ms()))
                });
                tokio::time::sleep(wait.min(idle)).await;
                continue;
            }
            let event =
                sqs::sqs_event(&got.batch, &queue_arn(&self.region, &m.queue), &self.region);
            self.count(format!("{function} (sqs batches)"));
            let outcome = self
                .invoke(&function, Bytes::from(event.to_string()), timeout)
                .await;
            let done = sqs::to_delete(&m, &got.batch, &invocation(&outcome));
            if done.len() < got.batch.len() {
                warn!(%function, queue = %m.queue, received = got.batch.len(), deleted = done.len(),
                    "messages not processed; received again after the visibility timeout");
            }
            self.queues.delete(&m.queue, &done);
        }
    }

    /// Log what `queue` dropped, and append what it dead-lettered to
    /// `--dead-letter-file` (one body per line, as `whimbrel replay` reads).
    fn dead_letter(&self, queue: &str, got: &Received) {
        for m in &got.expired {
            error!(queue, message_id = %m.id, "message older than the queue's retention, deleted");
        }
        for m in &got.dead_lettered {
            let file = &self.args.dead_letter_file;
            error!(queue, message_id = %m.id, receives = m.receive_count, file = %file.display(),
                "message moved to the dead-letter queue");
            let line = m.body.replace('\n', " ").into_bytes();
            if let Err(e) = super::on_failure::append_line(file, line) {
                error!(error = %e, file = %file.display(), "cannot write the dead-letter file");
            }
        }
    }
}

/// How the mapping reads an invocation's outcome.
fn invocation(outcome: &Outcome) -> Invocation {
    match outcome {
        Outcome::Answered(body) if body.is_empty() => Invocation::Answered(serde_json::Value::Null),
        Outcome::Answered(body) => Invocation::Answered(
            // Not JSON: an invalid response, a complete failure.
            serde_json::from_slice(body).unwrap_or(serde_json::Value::Bool(false)),
        ),
        _ => Invocation::FunctionError,
    }
}
