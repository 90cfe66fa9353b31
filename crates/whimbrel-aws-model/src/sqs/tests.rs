use super::*;

fn queue(max_receives: Option<u32>) -> Queue {
    Queue::new(QueueConfig {
        visibility_timeout: Duration::from_secs(720),
        message_retention: Duration::from_secs(3600),
        redrive: max_receives.map(|n| RedrivePolicy {
            dead_letter_queue: "Dlq".into(),
            max_receive_count: n,
        }),
        ..QueueConfig::new("Q")
    })
}

fn mapping(report: bool) -> SqsMapping {
    SqsMapping {
        queue: "Q".into(),
        batch_size: 10,
        report_batch_item_failures: report,
    }
}

#[test]
fn a_received_message_is_invisible_for_the_visibility_timeout() {
    let mut q = queue(None);
    q.send("m1", "b", 1_000);
    let r = q.receive(1_000, 10);
    assert_eq!(r.batch.len(), 1);
    assert_eq!(r.batch[0].receive_count, 1);
    assert_eq!(r.batch[0].first_receive_ms, Some(1_000));
    assert!(q.receive(1_000 + 719_999, 10).batch.is_empty());
    assert_eq!(q.next_visible_ms(), Some(1_000 + 720_000));
    let again = q.receive(1_000 + 720_000, 10);
    assert_eq!(again.batch[0].receive_count, 2);
    assert_eq!(again.batch[0].first_receive_ms, Some(1_000));
    assert!(q.delete("m1"));
    assert!(q.is_empty() && q.next_visible_ms().is_none());
}

#[test]
fn a_message_moves_to_the_dead_letter_queue_after_max_receive_count() {
    let mut q = queue(Some(2));
    q.send("m1", "b", 0);
    let mut now = 0;
    for n in 1..=2 {
        let r = q.receive(now, 10);
        assert_eq!(r.batch[0].receive_count, n);
        now += 720_000;
    }
    let r = q.receive(now, 10);
    assert!(r.batch.is_empty());
    assert_eq!(r.dead_lettered.len(), 1);
    assert_eq!(r.dead_lettered[0].id, "m1");
    assert!(q.is_empty());
}

#[test]
fn messages_past_retention_are_dropped_and_batches_are_bounded() {
    let mut q = queue(None);
    q.send("old", "b", 0);
    q.send("a", "b", 3_000_000);
    q.send("b", "b", 3_000_001);
    let r = q.receive(3_600_000, 1);
    assert_eq!(
        r.expired.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["old"]
    );
    assert_eq!(
        r.batch.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    assert_eq!(q.len(), 2);
}

#[test]
fn partial_batch_responses_delete_what_succeeded() {
    let mut q = queue(None);
    for id in ["m1", "m2", "m3"] {
        q.send(id, "b", 0);
    }
    let batch = q.receive(0, 10).batch;
    let failed = |ids: &[&str]| json!({"batchItemFailures": ids.iter().map(|i| json!({"itemIdentifier": i})).collect::<Vec<_>>()});
    let del = |report, outcome: Invocation| to_delete(&mapping(report), &batch, &outcome);
    let all = vec!["m1", "m2", "m3"];
    assert_eq!(
        del(true, Invocation::Answered(failed(&["m2"]))),
        vec!["m1", "m3"]
    );
    assert_eq!(del(true, Invocation::Answered(failed(&[]))), all);
    assert_eq!(del(true, Invocation::Answered(Value::Null)), all);
    assert_eq!(del(true, Invocation::Answered(json!({}))), all);
    assert_eq!(
        del(
            true,
            Invocation::Answered(json!({"batchItemFailures": null}))
        ),
        all
    );
    // Complete failures: an unknown or empty id, a bad key, no JSON object.
    assert!(del(true, Invocation::Answered(failed(&["m9"]))).is_empty());
    assert!(del(true, Invocation::Answered(failed(&[""]))).is_empty());
    assert!(del(
        true,
        Invocation::Answered(json!({"batchItemFailures": [{"id": "m1"}]}))
    )
    .is_empty());
    assert!(del(true, Invocation::Answered(json!("ok"))).is_empty());
    assert!(del(true, Invocation::FunctionError).is_empty());
    // Without ReportBatchItemFailures any answer is a success.
    assert_eq!(del(false, Invocation::Answered(failed(&["m2"]))), all);
    assert!(del(false, Invocation::FunctionError).is_empty());
}

#[test]
fn the_event_has_the_lambda_sqs_shape() {
    let mut q = queue(None);
    q.send("m1", "{\"x\":1}", 5_000);
    let batch = q.receive(6_000, 10).batch;
    let e = sqs_event(&batch, "arn:aws:sqs:us-east-1:000000000000:Q", "us-east-1");
    let r = &e["Records"][0];
    assert_eq!(r["messageId"], "m1");
    assert_eq!(r["body"], "{\"x\":1}");
    assert_eq!(r["eventSource"], "aws:sqs");
    assert_eq!(r["eventSourceARN"], "arn:aws:sqs:us-east-1:000000000000:Q");
    assert_eq!(r["attributes"]["ApproximateReceiveCount"], "1");
    assert_eq!(r["attributes"]["SentTimestamp"], "5000");
    assert_eq!(r["attributes"]["ApproximateFirstReceiveTimestamp"], "6000");
    assert_eq!(r["receiptHandle"], "m1#1");
}

#[test]
fn the_template_reader_yields_queues_and_sqs_mappings() {
    let yaml = r#"
Resources:
  StreamFailureQueue:
    Type: AWS::SQS::Queue
    Properties:
      MessageRetentionPeriod: 1209600
      VisibilityTimeout: 720
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt StreamFailureDeadLetterQueue.Arn
        maxReceiveCount: 5
  StreamFailureDeadLetterQueue:
    Type: AWS::SQS::Queue
  StreamRedriveFunction:
    Type: AWS::Serverless::Function
    Metadata:
      BuildProperties:
        Binary: whimbrel-stream-redrive
    Properties:
      Timeout: 120
      Events:
        GivenUpBatches:
          Type: SQS
          Properties:
            Queue: !GetAtt StreamFailureQueue.Arn
            BatchSize: 1
            FunctionResponseTypes: [ReportBatchItemFailures]
"#;
    let t = crate::template::Template::parse(yaml, "").unwrap();
    let (f, m, q) = t.sqs_mappings().next().unwrap();
    assert_eq!(f.binary, "whimbrel-stream-redrive");
    assert_eq!(
        m,
        &SqsMapping {
            queue: "StreamFailureQueue".into(),
            batch_size: 1,
            report_batch_item_failures: true
        }
    );
    assert_eq!(q.visibility_timeout, Duration::from_secs(720));
    assert_eq!(q.message_retention, Duration::from_secs(1_209_600));
    assert_eq!(
        q.redrive,
        Some(RedrivePolicy {
            dead_letter_queue: "StreamFailureDeadLetterQueue".into(),
            max_receive_count: 5
        })
    );
    let dlq = &t.queues["StreamFailureDeadLetterQueue"];
    assert_eq!(dlq.visibility_timeout, Duration::from_secs(30));
    assert_eq!(dlq.redrive, None);
}

#[test]
fn the_repository_template_redrives_given_up_batches_and_wakes_the_monitor() {
    let text = include_str!("../../../../template.yaml");
    let t = crate::template::Template::parse(text, "").unwrap();
    let found: Vec<_> = t.sqs_mappings().collect();
    assert_eq!(found.len(), 2);
    for (f, m, q) in found {
        assert!(m.report_batch_item_failures, "{}", f.binary);
        // AWS's advice: at least six times the function's timeout.
        assert!(q.visibility_timeout >= f.timeout * 6, "{}", f.binary);
        match f.binary.as_str() {
            "whimbrel-stream-redrive" => assert!(q.redrive.is_some()),
            // The timer queue (design.md 9): a lost wake-up waits for a
            // tick, so no dead-letter queue.
            "whimbrel-heartbeat-monitor" => assert!(q.redrive.is_none()),
            other => panic!("unexpected SQS mapping on {other}"),
        }
    }
}

#[test]
fn a_delayed_message_is_not_received_before_its_delay() {
    let mut q = queue(None);
    q.send_delayed("m1", "b", 1_000, 3);
    assert!(q.receive(3_999, 10).batch.is_empty());
    assert_eq!(q.next_visible_ms(), Some(4_000));
    assert_eq!(q.receive(4_000, 10).batch.len(), 1);
    let mut q = queue(None);
    q.send_delayed("m2", "b", 0, 10_000);
    assert_eq!(
        q.next_visible_ms(),
        Some(MAX_DELAY_SECONDS * 1000),
        "capped at 15 minutes"
    );
}
