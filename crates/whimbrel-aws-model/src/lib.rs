//! What Whimbrel relies on AWS to do, modelled once and with no I/O, so
//! that `whimbrel local` (which stands in for AWS on a laptop) and the
//! simulation (which stands in for it under faults) cannot disagree:
//!
//! * [`esm`]: the decisions of a DynamoDB stream event source mapping:
//!   batches, partial batch responses, retries up to
//!   `MaximumRetryAttempts`, `BisectBatchOnFunctionError`,
//!   `MaximumRecordAgeInSeconds`, giving records up to the on-failure
//!   destination;
//! * [`sqs`]: an SQS standard queue (visibility timeout, receive counts,
//!   the redrive policy to a dead-letter queue, retention) and the Lambda
//!   SQS event source mapping's partial batch responses;
//! * [`template`]: the one reader of `template.yaml`, which yields those
//!   mappings' settings and each function's timeout, memory, async invoke
//!   settings and schedule.
//!
//! No AWS SDK, no tokio, no clock: the caller reads the stream, invokes,
//! waits and passes in the template's text.

#![warn(missing_docs)]

pub mod esm;
pub mod sqs;
pub mod template;
