//! The event source mapping settings, read from `template.yaml` (the one
//! place they are defined, embedded at compile time) by the one reader of
//! the template, [`whimbrel_aws_model::template`], which `whimbrel local`
//! uses too, so the simulation gives up on records exactly when AWS would.

use std::ops::Deref;

use whimbrel_aws_model::sqs::{QueueConfig, SqsMapping};
use whimbrel_aws_model::template::{StreamMapping, Template};

/// The settings of the template's DynamoDB stream event source mappings.
/// The simulation runs both streams with one set of settings, so the
/// template's mappings must agree on everything but their table (`table`
/// is left empty). Dereferences to the mapping's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct EsmSettings(pub StreamMapping);

impl Deref for EsmSettings {
    type Target = StreamMapping;

    fn deref(&self) -> &StreamMapping {
        &self.0
    }
}

const TEMPLATE: &str = include_str!("../../../template.yaml");

/// `template.yaml`, read once per process: every schedule reads the same
/// settings, and reading the YAML took a fifth of a schedule's time.
///
/// Panics if the template cannot be read (a test would fail).
fn template() -> &'static Template {
    static PARSED: std::sync::OnceLock<Template> = std::sync::OnceLock::new();
    PARSED.get_or_init(|| Template::parse(TEMPLATE, "").unwrap_or_else(|e| panic!("{e}")))
}

impl EsmSettings {
    /// The settings of the stream mappings in `template.yaml`.
    ///
    /// Panics if the template does not define them (a test would fail).
    pub fn from_template() -> Self {
        Self::of(template())
    }

    /// Read a template's text (parameters at their defaults).
    ///
    /// Panics if the template cannot be read, has no stream mapping, or
    /// its mappings differ in anything but the table.
    pub fn parse(text: &str) -> Self {
        Self::of(&Template::parse(text, "").unwrap_or_else(|e| panic!("{e}")))
    }

    /// The stream mappings' settings of a template read.
    ///
    /// Panics as [`Self::parse`] does.
    fn of(template: &Template) -> Self {
        let mut mappings = template.stream_mappings().map(|(_, m)| StreamMapping {
            table: String::new(),
            ..m.clone()
        });
        let first = mappings
            .next()
            .expect("template: a DynamoDB stream mapping");
        for other in mappings {
            assert_eq!(
                other, first,
                "template: the simulation runs every stream with the same mapping settings"
            );
        }
        EsmSettings(first)
    }
}

/// The maximum event age, seconds, of activity functions deployed as
/// `template.yaml` deploys its example activities
/// (`EventInvokeConfig.MaximumEventAgeInSeconds` of `wordcount-count`).
///
/// Panics if the template has no such function (a test would fail).
pub fn activity_max_event_age() -> i64 {
    let f = template()
        .function("wordcount-count")
        .expect("template: the example activity wordcount-count");
    f.async_config.maximum_event_age.as_secs() as i64
}

/// The timeout, seconds, of the engine function whose binary is
/// `function` in `template.yaml` (its `Timeout`, or `Globals`').
///
/// Panics if the template has no such function (a test would fail).
pub fn function_timeout(function: &str) -> i64 {
    let f = template()
        .function(function)
        .unwrap_or_else(|| panic!("template: the function {function}"));
    f.timeout.as_secs() as i64
}

/// The redrive function's SQS event source mapping and its queue (the
/// stream mappings' on-failure destination), from `template.yaml`.
///
/// Panics if the template has none (a test would fail).
pub fn redrive_settings() -> (SqsMapping, QueueConfig) {
    // The redrive function's own mapping: the monitor's timer queue
    // mapping comes first in function name order (seed 2400 found the
    // on-failure queue modelled with the timer queue's settings).
    let (_, mapping, queue) = template()
        .sqs_mappings()
        .find(|(f, _, _)| f.binary == "whimbrel-stream-redrive")
        .expect(
            "template: the redrive function's SQS event source mapping of the on-failure queue",
        );
    (mapping.clone(), queue.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The on-failure queue as `template.yaml` sets it (not the timer
    /// queue, whose mapping comes first by function name).
    #[test]
    fn the_on_failure_queue_is_the_redrive_functions() {
        let (_, queue) = redrive_settings();
        assert_eq!(queue.logical_id, "StreamFailureQueue");
        assert_eq!(queue.visibility_timeout, Duration::from_secs(1800));
        assert_eq!(queue.redrive.as_ref().map(|r| r.max_receive_count), Some(5));
    }

    #[test]
    fn the_template_sets_bounded_retries_and_record_age() {
        let s = EsmSettings::from_template();
        assert_eq!(s.maximum_retry_attempts, Some(10));
        assert_eq!(s.maximum_record_age, Some(Duration::from_secs(3600)));
        assert!(s.bisect_batch_on_function_error);
        assert!(s.report_batch_item_failures);
        // BatchSize: !Ref StreamBatchSize, the parameter's default.
        assert_eq!(s.batch_size, 100);
    }

    #[test]
    fn the_template_keeps_activity_events_as_long_as_lambda_by_default() {
        // LaunchEventAgeSeconds' default, Lambda's own.
        let age = whimbrel_aws_model::template::AWS_DEFAULT_ASYNC_EVENT_AGE_SECONDS as i64;
        assert_eq!(activity_max_event_age(), age);
    }
}
