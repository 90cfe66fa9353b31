#!/usr/bin/env python3
"""Write the bad-input corpus: one AWS event per file, and MANIFEST.

    python3 tests/bad-input/generate.py

Every file is what the Lambda service would hand to one of the three
functions (a DynamoDB stream event in the aws_lambda_events shape, or an
EventBridge Scheduled Event), except the `unparseable` ones, which are not
JSON at all. MANIFEST says, per file, which function gets it and what must
happen; README.md describes the format and the placeholders the test
(crates/whimbrel-core/tests/it/bad_input.rs) substitutes.

The files are generated so that every record has a distinct SequenceNumber
and the expectations sit next to the input that causes them; edit this
script, not the JSON, and run it again.
"""

import hashlib
import json
import os
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------- DynamoDB JSON


def S(v):
    return {"S": v}


def N(v):
    return {"N": str(v)}


def L(*vs):
    return {"L": list(vs)}


def M(**kv):
    return {"M": kv}


def Mraw(d):
    return {"M": d}


def BOOL(v):
    return {"BOOL": v}


NULL = {"NULL": True}
DROP = object()  # drop this attribute from the default image


def when_list(sec=33):
    return L(N(2026), N(11), N(22), N(0), N(13), N(sec))


def repeat(unit, count):
    """Placeholder the test expands into `unit` repeated `count` times."""
    return "{{REPEAT:%d:%s}}" % (count, unit)


KB400 = 400 * 1024

# ---------------------------------------------------------------- envelopes

SEQ = [4960000000000000000300000]


def next_seq():
    SEQ[0] += 1000
    return str(SEQ[0])


def stable_uuid(name):
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "whimbrel-bad-input/" + name))


def arn(table):
    return (
        "arn:aws:dynamodb:us-east-1:000000000000:table/%s/stream/2026-11-22T00:00:00.000"
        % table
    )


EVENT_TABLE = "whimbrel_activity_event"
REQUEST_TABLE = "whimbrel_workflow_request"


def stream_record(name, image, *, table=EVENT_TABLE, event_name="INSERT", keys=None,
                  key_attrs=("activity_event_id", "activity_exec_id"), drop=(),
                  dynamodb_drop=(), record_over=None, dynamodb_over=None,
                  old_image=None, source_arn=None):
    """One Lambda stream record (Records[] element) for NewImage `image`."""
    if keys is None:
        keys = {k: image[k] for k in key_attrs if isinstance(image, dict) and k in image}
    ddb = {
        "ApproximateCreationDateTime": 1795306413,
        "Keys": keys,
        "NewImage": image,
        "SequenceNumber": next_seq(),
        "SizeBytes": 420,
        "StreamViewType": "NEW_IMAGE",
    }
    if old_image is not None:
        ddb["OldImage"] = old_image
    for k in dynamodb_drop:
        ddb.pop(k, None)
    if dynamodb_over:
        ddb.update(dynamodb_over)
    rec = {
        "eventID": hashlib.md5(name.encode()).hexdigest(),
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": ddb,
        "eventSourceARN": source_arn if source_arn is not None else arn(table),
    }
    for k in drop:
        rec.pop(k, None)
    if record_over:
        rec.update(record_over)
    return rec


def event_image(name, transition="RUNNING", exec_id="{{ACTIVITY_EXEC_ID}}", event_id=None,
                **attrs):
    """An activity event row as the Activity helper writes it, then `attrs`
    over it (DROP removes one)."""
    img = {
        "activity_event_id": S(event_id if event_id is not None
                               else "%s::%s" % (exec_id, stable_uuid(name))),
        "activity_exec_id": S(exec_id),
        "transition": transition if isinstance(transition, dict) else S(transition),
        "when": when_list(),
        "when_epoch": N(1795306413),
        "source": S("bad-input corpus"),
    }
    if transition is DROP:
        del img["transition"]
    for k, v in attrs.items():
        if v is DROP:
            img.pop(k, None)
        else:
            img[k] = v
    return img


def request_image(name, workflow_name="nobody", request_id=None, **attrs):
    """A request row as a client writes it; workflow_name may be a raw
    attribute value (dict) or DROP."""
    prefix = workflow_name if isinstance(workflow_name, str) else "x"
    img = {
        "workflow_request_id": request_id if isinstance(request_id, dict) else S(
            request_id if request_id is not None else "%s::%s" % (prefix, stable_uuid(name))),
        "workflow_name": workflow_name if isinstance(workflow_name, dict) else S(workflow_name),
        "when": when_list(31),
        "when_epoch": N(1795306411),
        "source": S("bad-input corpus"),
    }
    if workflow_name is DROP:
        del img["workflow_name"]
    if request_id is DROP:
        del img["workflow_request_id"]
    for k, v in attrs.items():
        if v is DROP:
            img.pop(k, None)
        else:
            img[k] = v
    return img


def scheduled(**over):
    ev = {
        "version": "0",
        "id": "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "000000000000",
        "time": "2026-11-22T00:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:000000000000:rule/whimbrel-heartbeat-monitor"],
        "detail": {},
    }
    for k, v in over.items():
        k = k.replace("_", "-")
        if v is DROP:
            ev.pop(k, None)
        else:
            ev[k] = v
    return ev


# ---------------------------------------------------------------- the cases

CASES = []  # (category, file, function, expect, reason, what, content)


def case(category, file, function, expect, reason, what, content):
    assert file.endswith(".json"), file
    assert all(c[1] != file for c in CASES), file
    CASES.append((category, file, function, expect, reason, what, content))


def ae(category, file, expect, reason, what, image=None, **rec_kw):
    """A one-record activity-event stream file."""
    if image is None:
        image = event_image(file)
    content = {"Records": [stream_record(file, image, **rec_kw)]}
    case(category, file, "activity-event", expect, reason, what, content)


def wr(category, file, expect, reason, what, image=None, **rec_kw):
    """A one-record workflow-request stream file."""
    if image is None:
        image = request_image(file)
    rec_kw.setdefault("table", REQUEST_TABLE)
    rec_kw.setdefault("key_attrs", ("workflow_request_id", "workflow_name"))
    content = {"Records": [stream_record(file, image, **rec_kw)]}
    case(category, file, "workflow-request", expect, reason, what, content)


def hb(category, file, expect, reason, what, content):
    case(category, file, "heartbeat-monitor", expect, reason, what, content)


NOT_RECORD = "not a DynamoDB stream record"
MALFORMED = "malformed row "
NOT_ALLOWED_RUNNING = "{{ACTIVITY_EXEC_ID}}: transition RUNNING is not allowed from RUNNING"
NO_RECORDS = "invalid invocation payload: no Records array"
NOT_EB = "invalid invocation payload: not an EventBridge event"


def raw(category, file, function, what, data):
    """A file that is not JSON (bytes)."""
    case(category, file, function, "unparseable", "", what, data)


# --- 1. payload: not JSON at all (the runtime's LambdaEvent<Value> fails) ---
good_running = json.dumps({"Records": [stream_record("payload-truncated-stream.json",
                                                     event_image("payload-truncated-stream.json"))]},
                          indent=2)
raw("payload", "payload-truncated-stream.json", "activity-event",
    "a stream event cut off in the middle of NewImage", good_running[: len(good_running) // 2].encode())
sched = json.dumps(scheduled(), indent=2)
raw("payload", "payload-truncated-scheduled.json", "heartbeat-monitor",
    "a Scheduled Event cut off after detail-type", sched[: sched.index('"source"')].encode())
raw("payload", "payload-empty-file.json", "activity-event", "zero bytes", b"")
raw("payload", "payload-whitespace-only.json", "workflow-request", "only whitespace", b"  \n\t\n")
raw("payload", "payload-invalid-utf8.json", "activity-event",
    "raw bytes 0xFF 0xFE inside the transition string (not UTF-8)",
    good_running.replace('"RUNNING"', '"RUN\udcff\udcfeNING"').encode("utf-8", "surrogateescape"))
raw("payload", "payload-lone-surrogate.json", "activity-event",
    "a \\ud800 escape with no low surrogate in the transition (not a Unicode scalar)",
    good_running.replace('"RUNNING"', '"RUNNING\\ud800"').encode())
raw("payload", "payload-nesting-300.json", "activity-event",
    "output nested 300 JSON arrays deep: past serde_json's recursion limit (128)",
    good_running.replace('"source": {', '"output": {"L": %s}, "source": {' % ("[" * 300 + "]" * 300)).encode())
raw("payload", "payload-trailing-garbage.json", "activity-event",
    "a valid event followed by a second top-level value", (good_running + "\n{}\n").encode())
raw("payload", "payload-single-quotes.json", "workflow-request",
    "JSON-like text with single quotes (a Python repr pasted as the payload)",
    b"{'Records': [{'eventName': 'INSERT'}]}")
raw("payload", "payload-nan-literal.json", "activity-event",
    "a bare NaN literal for ApproximateCreationDateTime",
    good_running.replace('"ApproximateCreationDateTime": 1795306413', '"ApproximateCreationDateTime": NaN').encode())
raw("payload", "payload-utf16-bom.json", "heartbeat-monitor",
    "the Scheduled Event encoded as UTF-16 with a BOM", sched.encode("utf-16"))

# --- 2. payload: JSON, but not the function's event (PayloadError) ---
case("payload", "payload-json-null.json", "activity-event", "payload-error", NO_RECORDS,
     "the JSON value null", None)
case("payload", "payload-json-number.json", "workflow-request", "payload-error", NO_RECORDS,
     "a bare number", 42)
case("payload", "payload-json-array.json", "activity-event", "payload-error", NO_RECORDS,
     "the Records array itself as the payload, without the object",
     [stream_record("payload-json-array.json", event_image("payload-json-array.json"))])
case("payload", "payload-records-object.json", "activity-event", "payload-error", NO_RECORDS,
     "Records is an object, not an array",
     {"Records": {"0": stream_record("payload-records-object.json", event_image("payload-records-object.json"))}})
case("payload", "payload-records-string.json", "workflow-request", "payload-error", NO_RECORDS,
     "Records is a string", {"Records": "INSERT"})
case("payload", "payload-records-null.json", "activity-event", "payload-error", NO_RECORDS,
     "Records is null", {"Records": None})
case("payload", "payload-records-lowercase.json", "activity-event", "payload-error", NO_RECORDS,
     "the key is 'records', not 'Records'",
     {"records": [stream_record("payload-records-lowercase.json", event_image("payload-records-lowercase.json"))]})
case("payload", "payload-records-empty.json", "activity-event", "empty", "",
     "Records is an empty array: a batch of nothing", {"Records": []})
case("payload", "payload-scheduled-to-activity.json", "activity-event", "payload-error", NO_RECORDS,
     "the Scheduled Event sent to the activity-event function", scheduled())
case("payload", "payload-scheduled-to-request.json", "workflow-request", "payload-error", NO_RECORDS,
     "the Scheduled Event sent to the workflow-request function", scheduled())
case("payload", "payload-stream-to-monitor.json", "heartbeat-monitor", "payload-error", NOT_EB,
     "a valid activity-event stream event sent to the heartbeat monitor",
     {"Records": [stream_record("payload-stream-to-monitor.json", event_image("payload-stream-to-monitor.json"))]})

# --- 3. record envelope: records that are not DynamoDB stream records ---
case("record", "record-null.json", "activity-event", "rejected", NOT_RECORD,
     "a null entry in Records", {"Records": [None]})
case("record", "record-string.json", "activity-event", "rejected", NOT_RECORD,
     "a string entry in Records", {"Records": ["INSERT"]})
case("record", "record-sqs-message.json", "activity-event", "rejected", NOT_RECORD,
     "an SQS message record (the on-failure queue's payload replayed into the function)",
     {"Records": [{
         "messageId": "059f36b4-87a3-44ab-83d2-661975830a7d",
         "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a...",
         "body": json.dumps({"requestContext": {"condition": "RetryAttemptsExhausted"}}),
         "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1795306413000"},
         "messageAttributes": {},
         "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
         "eventSource": "aws:sqs",
         "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:whimbrel-activity-event-dlq",
         "awsRegion": "us-east-1"}]})
case("record", "record-kinesis.json", "activity-event", "rejected", NOT_RECORD,
     "a Kinesis stream record",
     {"Records": [{
         "kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": "1",
                     "sequenceNumber": "49590338271490256608559692538361571095921575989136588898",
                     "data": "SGVsbG8sIHRoaXMgaXMgYSB0ZXN0Lg==", "approximateArrivalTimestamp": 1795306413.0},
         "eventSource": "aws:kinesis", "eventVersion": "1.0",
         "eventID": "shardId-000000000006:49590338271490256608559692538361571095921575989136588898",
         "eventName": "aws:kinesis:record", "invokeIdentityArn": "arn:aws:iam::000000000000:role/x",
         "awsRegion": "us-east-1",
         "eventSourceARN": "arn:aws:kinesis:us-east-1:000000000000:stream/whimbrel_activity_event"}]})
case("record", "record-s3.json", "workflow-request", "rejected", NOT_RECORD,
     "an S3 ObjectCreated record (eventName and awsRegion, but no dynamodb)",
     {"Records": [{
         "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
         "eventTime": "2026-11-22T00:00:00.000Z", "eventName": "ObjectCreated:Put",
         "s3": {"bucket": {"name": "whimbrel_workflow_request", "arn": "arn:aws:s3:::whimbrel_workflow_request"},
                "object": {"key": "request.json", "size": 1024}}}]})
ae("record", "record-no-eventid.json", "rejected", NOT_RECORD,
   "no eventID", drop=("eventID",))
ae("record", "record-no-awsregion.json", "rejected", NOT_RECORD,
   "no awsRegion", drop=("awsRegion",))
ae("record", "record-no-dynamodb.json", "rejected", NOT_RECORD,
   "no dynamodb object", drop=("dynamodb",))
ae("record", "record-dynamodb-string.json", "rejected", NOT_RECORD,
   "dynamodb is a JSON string holding the object", record_over={"dynamodb": "{\"NewImage\": {}}"})
ae("record", "record-no-sizebytes.json", "rejected", NOT_RECORD,
   "no dynamodb.SizeBytes", dynamodb_drop=("SizeBytes",))
ae("record", "record-creation-time-iso.json", "rejected", NOT_RECORD,
   "ApproximateCreationDateTime as an ISO 8601 string",
   dynamodb_over={"ApproximateCreationDateTime": "2026-11-22T00:13:33Z"})
ae("record", "record-creation-time-huge.json", "rejected", NOT_RECORD,
   "ApproximateCreationDateTime 1e20 seconds (no such date)",
   dynamodb_over={"ApproximateCreationDateTime": 1e20})
ae("record", "record-creation-time-negative.json", "rejected", NOT_ALLOWED_RUNNING,
   "ApproximateCreationDateTime -86400 (1969): the envelope is accepted, the row is judged "
   "(RUNNING of an activity already RUNNING)",
   dynamodb_over={"ApproximateCreationDateTime": -86400})
ae("record", "record-image-not-object.json", "rejected", NOT_RECORD,
   "NewImage is a list", dynamodb_over={"NewImage": [S("RUNNING")]})
ae("record", "record-attribute-two-types.json", "rejected", NOT_RECORD,
   "transition has two type tags {S, N}",
   image=event_image("record-attribute-two-types.json", transition={"S": "RUNNING", "N": "1"}))
ae("record", "record-attribute-unknown-type.json", "rejected", NOT_RECORD,
   "transition has the unknown type tag X",
   image=event_image("record-attribute-unknown-type.json", transition={"X": "RUNNING"}))
ae("record", "record-attribute-no-type.json", "rejected", NOT_RECORD,
   "transition is a bare JSON string, not DynamoDB JSON",
   image=event_image("record-attribute-no-type.json") | {"transition": "RUNNING"})
ae("record", "record-no-newimage.json", "rejected", "NewImage has no string activity_exec_id",
   "INSERT with Keys only (a KEYS_ONLY stream view)",
   dynamodb_drop=("NewImage",), dynamodb_over={"StreamViewType": "KEYS_ONLY"})
ae("record", "record-newimage-null.json", "rejected", "NewImage has no string activity_exec_id",
   "NewImage is null", dynamodb_over={"NewImage": None})
ae("record", "record-keys-disagree.json", "rejected",
   "unknown activity exec work::00000000-0000-4000-8000-000000000000",
   "Keys name the real activity, NewImage an unknown one: NewImage is what counts",
   image=event_image("record-keys-disagree.json", exec_id="work::00000000-0000-4000-8000-000000000000"),
   keys={"activity_event_id": S("{{ACTIVITY_EXEC_ID}}::" + stable_uuid("k")),
         "activity_exec_id": S("{{ACTIVITY_EXEC_ID}}")})
ae("record", "record-no-sequence-number.json", "rejected", NOT_ALLOWED_RUNNING,
   "no SequenceNumber (nothing to name in a batch item failure): judged like any record",
   dynamodb_drop=("SequenceNumber",))

# --- 4. event name: only INSERT is processed ---
ae("event-name", "event-name-modify.json", "skipped", "",
   "MODIFY of an event row (the table is write-once): ignored",
   image=event_image("event-name-modify.json", transition="COMPLETED", output=M(n=N(1))),
   event_name="MODIFY", old_image=event_image("event-name-modify.json"))
ae("event-name", "event-name-remove.json", "skipped", "",
   "REMOVE: OldImage only, no NewImage", event_name="REMOVE",
   dynamodb_drop=("NewImage",), old_image=event_image("event-name-remove.json", transition="COMPLETED"),
   dynamodb_over={"StreamViewType": "OLD_IMAGE"})
ae("event-name", "event-name-lowercase.json", "skipped", "",
   "eventName 'insert' (lower case) is not INSERT",
   image=event_image("event-name-lowercase.json", transition="COMPLETED", output=M(n=N(1))),
   event_name="insert")
ae("event-name", "event-name-unknown.json", "skipped", "",
   "eventName 'UPSERT'",
   image=event_image("event-name-unknown.json", transition="COMPLETED", output=M(n=N(1))),
   event_name="UPSERT")
ae("event-name", "event-name-missing.json", "rejected", NOT_RECORD,
   "no eventName", drop=("eventName",))
ae("event-name", "event-name-null.json", "rejected", NOT_RECORD,
   "eventName null", record_over={"eventName": None})
wr("event-name", "request-modify.json", "skipped", "",
   "MODIFY of a request row", event_name="MODIFY",
   image=request_image("request-modify.json", workflow_name="corpus"))
wr("event-name", "request-remove.json", "skipped", "",
   "REMOVE of a request row", event_name="REMOVE", dynamodb_drop=("NewImage",),
   old_image=request_image("request-remove.json", workflow_name="corpus"))

# --- 5. source table: eventSourceARN ---
FROM = "record from table "
ae("table", "table-foreign-orders.json", "rejected", FROM + "orders, expected {{PREFIX}}activity_event",
   "a well-formed RUNNING row, but from table orders (a mapping on the wrong stream)",
   table="orders")
ae("table", "table-request-table-to-activity.json", "rejected",
   FROM + "{{PREFIX}}workflow_request, expected {{PREFIX}}activity_event",
   "an activity event row whose ARN is the workflow_request table's stream",
   table=REQUEST_TABLE)
ae("table", "table-suffix.json", "rejected", FROM + "{{PREFIX}}activity_event_v2, expected",
   "table whimbrel_activity_event_v2: a longer name is another table",
   table=EVENT_TABLE + "_v2")
ae("table", "table-case.json", "rejected", FROM + "Whimbrel_Activity_Event, expected",
   "table Whimbrel_Activity_Event: names are case-sensitive",
   table="Whimbrel_Activity_Event")
ae("table", "table-no-arn.json", "rejected", "record without a table eventSourceARN",
   "no eventSourceARN", drop=("eventSourceARN",))
ae("table", "table-arn-null.json", "rejected", "record without a table eventSourceARN",
   "eventSourceARN null", record_over={"eventSourceARN": None})
ae("table", "table-arn-sqs.json", "rejected", "record without a table eventSourceARN",
   "an SQS queue ARN", source_arn="arn:aws:sqs:us-east-1:000000000000:whimbrel_activity_event")
ae("table", "table-arn-empty-name.json", "rejected", FROM + ", expected",
   "ARN with an empty table name (table//stream/...)",
   source_arn="arn:aws:dynamodb:us-east-1:000000000000:table//stream/2026-11-22T00:00:00.000")
ae("table", "table-arn-other-account.json", "rejected", NOT_ALLOWED_RUNNING,
   "the same table name in another account and region: the ARN check compares the table name "
   "only, so the row is judged (RUNNING of an activity already RUNNING)",
   source_arn="arn:aws:dynamodb:eu-west-1:999999999999:table/whimbrel_activity_event/stream/2026-11-22T00:00:00.000")
wr("table", "table-event-table-to-request.json", "rejected",
   FROM + "{{PREFIX}}activity_event, expected {{PREFIX}}workflow_request",
   "a request row whose ARN is the activity_event table's stream", table=EVENT_TABLE)
wr("table", "table-foreign-to-request.json", "rejected",
   FROM + "orders, expected {{PREFIX}}workflow_request",
   "a request row from table orders", table="orders")
case("table", "table-activity-event-to-request.json", "workflow-request", "rejected",
     FROM + "{{PREFIX}}activity_event, expected {{PREFIX}}workflow_request",
     "a valid activity-event stream event sent to the workflow-request function",
     {"Records": [stream_record("table-activity-event-to-request.json",
                                event_image("table-activity-event-to-request.json", transition="COMPLETED",
                                            output=M(n=N(1))))]})

# --- 6. attribute types of an event row ---
def ty(file, what, reason=MALFORMED, **attrs):
    ae("types", file, "rejected", reason, what, image=event_image(file, **attrs))

ty("types-transition-number.json", "transition is N", transition=N(4))
ty("types-transition-list.json", "transition is L [S RUNNING]", transition=L(S("RUNNING")))
ty("types-transition-null.json", "transition is NULL", transition=NULL)
ty("types-transition-bool.json", "transition is BOOL true", transition=BOOL(True))
ty("types-transition-stringset.json", "transition is SS [RUNNING]", transition={"SS": ["RUNNING"]})
ty("types-transition-missing.json", "no transition attribute", transition=DROP)
ty("types-exec-id-number.json", "activity_exec_id is N", reason="NewImage has no string activity_exec_id",
   activity_exec_id=N(1))
ty("types-exec-id-stringset.json", "activity_exec_id is SS",
   reason="NewImage has no string activity_exec_id", activity_exec_id={"SS": ["{{ACTIVITY_EXEC_ID}}"]})
ty("types-exec-id-missing.json", "no activity_exec_id", reason="NewImage has no string activity_exec_id",
   activity_exec_id=DROP)
ty("types-event-id-number.json", "activity_event_id is N", activity_event_id=N(7))
ty("types-event-id-missing.json", "no activity_event_id", activity_event_id=DROP)
ty("types-when-string.json", "when is S 'yesterday at noon'", when=S("yesterday at noon"))
ty("types-when-list-of-strings.json", "when is a list of six S", when=L(*[S(x) for x in "2026 11 22 0 13 33".split()]))
ty("types-when-map.json", "when is M {year, month, ...}", when=M(year=N(2026), month=N(11)))
ty("types-when-epoch-string.json", "when_epoch is S", when_epoch=S("1795306413"))
ty("types-when-epoch-not-number.json", "when_epoch is N 'soon'", when_epoch=N("soon"))
ty("types-attempt-string.json", "attempt is S '1'", attempt=S("1"))
ty("types-attempt-negative.json", "attempt is N -1", attempt=N(-1))
ty("types-attempt-too-big.json", "attempt is N 4294967296 (past u32)", attempt=N(4294967296))
ty("types-attempt-fraction.json", "attempt is N 1.5", attempt=N("1.5"))
ty("types-manual-string.json", "manual is S 'true'", manual=S("true"))
ty("types-error-number.json", "error is N", transition="FAILED", error=N(500))
ty("types-error-map.json", "error is M", transition="FAILED", error=M(code=S("E1")))
ty("types-token-number.json", "attempt_token is N", attempt_token=N(12345))
ty("types-tracing-id-number.json", "workflow_exec_id (tracing) is N", workflow_exec_id=N(1))
ty("types-source-list.json", "source is L", source=L(S("a"), S("b")))
ty("types-output-binary.json",
   "COMPLETED whose output is a B (binary) attribute: not JSON", transition="COMPLETED",
   output={"B": "AAECAwQ="})
ty("types-output-nested-binary.json",
   "COMPLETED whose output map holds a binary set deep inside", transition="COMPLETED",
   output=M(files=M(raw={"BS": ["AAEC", "AwQF"]})))
ty("types-output-bad-number.json", "COMPLETED whose output holds N 'twelve'",
   transition="COMPLETED", output=M(count=N("twelve")))

# --- 7. transition names ---
def tr(file, transition, reason, what, exec_id="{{ACTIVITY_EXEC_ID}}", **attrs):
    ae("transition", file, "rejected", reason, what,
       image=event_image(file, transition=transition, exec_id=exec_id, **attrs))

UNKNOWN = 'unknown transition "'
tr("transition-lowercase.json", "running", UNKNOWN + 'running"', "lower-case 'running'")
tr("transition-lowercase-completed.json", "completed", UNKNOWN + 'completed"',
   "lower-case 'completed' with an output", output=M(n=N(1)))
tr("transition-titlecase.json", "Completed", UNKNOWN + 'Completed"', "'Completed'", output=M(n=N(1)))
tr("transition-unknown.json", "EXPLODE", UNKNOWN + 'EXPLODE"', "'EXPLODE'")
tr("transition-empty.json", "", UNKNOWN + '"', "empty string")
tr("transition-leading-space.json", " RUNNING", UNKNOWN + ' RUNNING"', "' RUNNING'")
tr("transition-trailing-newline.json", "RUNNING\n", UNKNOWN + 'RUNNING\\n"', "'RUNNING' + newline")
tr("transition-nul.json", "RUN\u0000NING", UNKNOWN + 'RUN\\0NING"', "a NUL inside the name")
tr("transition-state-name.json", "CANCELLED", UNKNOWN + 'CANCELLED"',
   "a state name (CANCELLED) instead of the transition CANCEL")
tr("transition-hyphen.json", "TIMED-OUT", UNKNOWN + 'TIMED-OUT"', "'TIMED-OUT'")
tr("transition-unicode-lookalike.json", "RUNNİNG", UNKNOWN + 'RUNNİNG"',
   "'RUNNİNG' with a dotted capital I (U+0130)")
tr("transition-400kb.json", repeat("X", KB400), UNKNOWN + "XXXXXXXX", "a 400 KB transition name")
tr("transition-timed-out-by-client.json", "TIMED_OUT",
   "{{ACTIVITY_EXEC_ID}}: transition TIMED_OUT from RUNNING may not be requested by Client",
   "a client asking for TIMED_OUT (only the monitor may)")
tr("transition-queued-by-client.json", "QUEUED",
   "{{ACTIVITY_EXEC_ID}}: transition QUEUED is not allowed from RUNNING",
   "a client asking for QUEUED (the launcher's)")
tr("transition-ready-by-client.json", "READY",
   "{{ACTIVITY_EXEC_ID}}: transition READY is not allowed from RUNNING", "READY from a client")
tr("transition-preparing-after-running.json", "PREPARING",
   "{{ACTIVITY_EXEC_ID}}: transition PREPARING is not allowed from RUNNING", "PREPARING after RUNNING")
tr("transition-running-twice.json", "RUNNING", NOT_ALLOWED_RUNNING,
   "a second RUNNING (another event id) for a RUNNING activity")
tr("transition-running-never-launched.json", "RUNNING",
   "{{REQUESTED_ACTIVITY_EXEC_ID}}: transition RUNNING: the activity (REQUESTED) has no launched attempt",
   "RUNNING for an activity still REQUESTED (waiting for its prerequisite)",
   exec_id="{{REQUESTED_ACTIVITY_EXEC_ID}}")
tr("transition-completed-never-launched.json", "COMPLETED",
   "{{REQUESTED_ACTIVITY_EXEC_ID}}: transition COMPLETED: the activity (REQUESTED) has no launched attempt",
   "COMPLETED for an activity still REQUESTED: refused at once, not parked",
   exec_id="{{REQUESTED_ACTIVITY_EXEC_ID}}", output=M(n=N(1)))
tr("transition-failed-terminal.json", "FAILED",
   "{{DONE_ACTIVITY_EXEC_ID}}: activity is in terminal state COMPLETED; transition FAILED can never apply",
   "FAILED for an activity that COMPLETED (its workflow too)", exec_id="{{DONE_ACTIVITY_EXEC_ID}}",
   error=S("late failure"))
tr("transition-cancel-terminal.json", "CANCEL",
   "{{DONE_ACTIVITY_EXEC_ID}}: activity is in terminal state COMPLETED; transition CANCEL can never apply",
   "CANCEL for a COMPLETED activity", exec_id="{{DONE_ACTIVITY_EXEC_ID}}")
tr("transition-completed-terminal.json", "COMPLETED",
   "{{DONE_ACTIVITY_EXEC_ID}}: activity is in terminal state COMPLETED; transition COMPLETED can never apply",
   "a second COMPLETED (another event id, another output) for a COMPLETED activity",
   exec_id="{{DONE_ACTIVITY_EXEC_ID}}", output=M(forged=BOOL(True)))

# --- 8. ids ---
def idc(file, reason, what, exec_id="{{ACTIVITY_EXEC_ID}}", event_id=None, transition="COMPLETED", **attrs):
    attrs.setdefault("output", M(n=N(1)) if transition == "COMPLETED" else DROP)
    ae("ids", file, "rejected", reason, what,
       image=event_image(file, transition=transition, exec_id=exec_id, event_id=event_id, **attrs))

UNKNOWN_EXEC = "unknown activity exec "
idc("ids-exec-unknown.json", UNKNOWN_EXEC + "work::00000000-0000-4000-8000-00000000dead",
    "a well-formed activity_exec_id that no workflow has", exec_id="work::00000000-0000-4000-8000-00000000dead")
idc("ids-exec-other-workflow.json", UNKNOWN_EXEC,
    "the activity name 'work' with the uuid of another workflow's activity exec id "
    "(work of a workflow never started)",
    exec_id="work::" + stable_uuid("another workflow"))
idc("ids-exec-name-only.json", UNKNOWN_EXEC + "work", "activity_exec_id 'work' (the name, no uuid)",
    exec_id="work")
idc("ids-exec-is-workflow-id.json", UNKNOWN_EXEC + "{{WORKFLOW_EXEC_ID}}",
    "the workflow exec id where the activity exec id belongs", exec_id="{{WORKFLOW_EXEC_ID}}")
idc("ids-exec-uppercase-uuid.json", UNKNOWN_EXEC,
    "the real activity exec id with its uuid in upper case (keys are exact)",
    exec_id="{{ACTIVITY_EXEC_ID_UPPER}}")
idc("ids-exec-separator-only.json", UNKNOWN_EXEC + "::", "activity_exec_id '::'", exec_id="::")
idc("ids-exec-whitespace.json", UNKNOWN_EXEC, "activity_exec_id of three spaces", exec_id="   ")
idc("ids-exec-control-chars.json", UNKNOWN_EXEC,
    "the real id with a BEL and a NUL in front", exec_id="\u0007\u0000{{ACTIVITY_EXEC_ID}}")
idc("ids-exec-trailing-space.json", UNKNOWN_EXEC + "{{ACTIVITY_EXEC_ID}} ",
    "the real id plus a trailing space", exec_id="{{ACTIVITY_EXEC_ID}} ")
idc("ids-exec-empty.json", "Query: invalid request",
    "activity_exec_id '' (DynamoDB refuses an empty key value; only a crafted invoke carries one)",
    exec_id="")
idc("ids-exec-400kb.json", "activity_event_id is",
    "a 400 KB activity_exec_id: DynamoDB refuses a hash key over 2048 bytes (ValidationException); "
    "its event id, which starts with it, is refused before any read", exec_id=repeat("a", KB400))
idc("ids-event-empty.json", "activity_event_id is empty; expected (activity_exec_id)::(uuid)",
    "activity_event_id ''", event_id="")
idc("ids-event-whitespace.json", "activity_event_id is empty; expected (activity_exec_id)::(uuid)",
    "activity_event_id of spaces and a tab", event_id="  \t ")
idc("ids-event-400kb.json", "activity_event_id is",
    "COMPLETED (with an output) whose activity_event_id is 400 KB (a crafted invoke: a hash key is "
    "at most 2048 bytes): the id would go into the activity item twice (last_event_id, history), "
    "so no write can ever succeed; any reason, but never a retry", event_id=repeat("e", KB400))
idc("ids-event-other-form-judged.json", NOT_ALLOWED_RUNNING,
    "activity_event_id 'evt-42' (not (activity_exec_id)::(uuid)): accepted as an id, "
    "then judged (RUNNING of a RUNNING activity)", event_id="evt-42", transition="RUNNING")
idc("ids-event-other-activity-prefix.json", NOT_ALLOWED_RUNNING,
    "activity_event_id prefixed with another activity's exec id: accepted as an id, then judged",
    event_id="{{DONE_ACTIVITY_EXEC_ID}}::" + stable_uuid("x"), transition="RUNNING")
ae("ids", "ids-event-replays-last-event.json", "applied-nochange", "",
   "a COMPLETED with a forged token reusing the activity's last_event_id (the id of the RUNNING "
   "that was applied; readable on the item): taken as a redelivery of that event, nothing changes",
   image=event_image("ids-event-replays-last-event.json", transition="COMPLETED", event_id="{{LAST_EVENT_ID}}",
                     output=M(forged=BOOL(True)), attempt=N(1), attempt_token=S("forged")))
ae("ids", "ids-event-replays-engine-step.json", "applied-nochange", "",
   "a COMPLETED whose activity_event_id is the engine's own claim id (launcher:1, in the "
   "activity's history): taken as an event applied earlier, nothing changes",
   image=event_image("ids-event-replays-engine-step.json", transition="COMPLETED",
                     event_id="launcher:1", output=M(forged=BOOL(True))))
idc("ids-tracing-other-workflow.json",
    "{{DONE_ACTIVITY_EXEC_ID}}: attempt token does not match the live attempt (stale or forged)",
    "another workflow's (finished) activity named with this workflow's ids and token in the tracing "
    "fields: the activity_exec_id decides, and the token does not match it",
    exec_id="{{DONE_ACTIVITY_EXEC_ID}}", workflow_exec_id=S("{{WORKFLOW_EXEC_ID}}"),
    activity_name=S("work"), workflow_name=S("corpus"), attempt=N(1), attempt_token=S("{{TOKEN}}"))
idc("ids-token-of-other-activity.json",
    "{{GUARDED_ACTIVITY_EXEC_ID}}: attempt token does not match the live attempt (stale or forged)",
    "an event naming another activity of the same workflow, carrying this activity's token",
    exec_id="{{GUARDED_ACTIVITY_EXEC_ID}}", attempt=N(1), attempt_token=S("{{TOKEN}}"))

# --- 9. tokens and attempts ---
def tok(file, reason, what, exec_id="{{ACTIVITY_EXEC_ID}}", transition="COMPLETED", **attrs):
    attrs.setdefault("output", M(n=N(1)) if transition == "COMPLETED" else DROP)
    ae("tokens", file, "rejected", reason, what,
       image=event_image(file, transition=transition, exec_id=exec_id, **attrs))

NO_MATCH = "{{ACTIVITY_EXEC_ID}}: attempt token does not match the live attempt (stale or forged)"
tok("tokens-forged.json", NO_MATCH, "COMPLETED with a made-up token",
    attempt=N(1), attempt_token=S("0123456789abcdef0123456789abcdef"))
tok("tokens-empty.json", NO_MATCH, "COMPLETED with an empty token", attempt=N(1), attempt_token=S(""))
tok("tokens-hash-as-token.json", NO_MATCH,
    "COMPLETED carrying the item's attempt_token_hash (readable by anyone who can read the item) as the token",
    attempt=N(1), attempt_token=S("{{TOKEN_HASH}}"))
tok("tokens-uppercase.json", NO_MATCH, "the live token in upper case",
    attempt=N(1), attempt_token=S("{{TOKEN_UPPER}}"))
tok("tokens-with-newline.json", NO_MATCH, "the live token followed by a newline",
    attempt=N(1), attempt_token=S("{{TOKEN}}\n"))
tok("tokens-400kb.json", NO_MATCH, "a 400 KB token", attempt=N(1), attempt_token=S(repeat("t", KB400)))
tok("tokens-failed-forged.json", NO_MATCH, "FAILED with a forged token and no attempt number",
    transition="FAILED", error=S("forged failure"), attempt_token=S("forged"))
tok("tokens-cancel-forged.json", NO_MATCH, "CANCEL with a forged token", transition="CANCEL",
    attempt_token=S("forged"))
tok("tokens-attempt-2.json", "{{ACTIVITY_EXEC_ID}}: report for attempt 2; the live attempt is 1",
    "the live token with attempt 2 (no second attempt exists)", attempt=N(2), attempt_token=S("{{TOKEN}}"))
tok("tokens-attempt-0.json", "{{ACTIVITY_EXEC_ID}}: report for attempt 0; the live attempt is 1",
    "attempt 0, tokenless", attempt=N(0))
tok("tokens-attempt-max.json", "{{ACTIVITY_EXEC_ID}}: report for attempt 4294967295; the live attempt is 1",
    "attempt 4294967295 (u32::MAX)", attempt=N(4294967295))
tok("tokens-stale-attempt.json",
    "{{RETRIED_ACTIVITY_EXEC_ID}}: report for attempt 1; the live attempt is 2",
    "COMPLETED from attempt 1 (with its token) after attempt 1 failed and attempt 2 runs",
    exec_id="{{RETRIED_ACTIVITY_EXEC_ID}}", attempt=N(1), attempt_token=S("{{STALE_TOKEN}}"))
tok("tokens-stale-token-live-attempt.json",
    "{{RETRIED_ACTIVITY_EXEC_ID}}: attempt token does not match the live attempt (stale or forged)",
    "attempt 1's token with the live attempt's number 2",
    exec_id="{{RETRIED_ACTIVITY_EXEC_ID}}", attempt=N(2), attempt_token=S("{{STALE_TOKEN}}"))
tok("tokens-required-missing.json",
    "{{GUARDED_ACTIVITY_EXEC_ID}}: this activity requires the attempt token",
    "a tokenless COMPLETED for an activity whose plan sets require_tokens",
    exec_id="{{GUARDED_ACTIVITY_EXEC_ID}}", attempt=N(1))
tok("tokens-required-other-token.json",
    "{{GUARDED_ACTIVITY_EXEC_ID}}: attempt token does not match the live attempt (stale or forged)",
    "require_tokens activity, COMPLETED with another activity's live token",
    exec_id="{{GUARDED_ACTIVITY_EXEC_ID}}", attempt=N(1), attempt_token=S("{{TOKEN}}"))
tok("tokens-never-launched.json",
    "{{REQUESTED_ACTIVITY_EXEC_ID}}: attempt token does not match the live attempt (stale or forged)",
    "a REQUESTED activity (no attempt claimed) sent RUNNING with another activity's token",
    exec_id="{{REQUESTED_ACTIVITY_EXEC_ID}}", transition="RUNNING", attempt=N(0), attempt_token=S("{{TOKEN}}"))

# --- 10. sizes, nesting and odd values that apply (each on a fresh world) ---
def app(file, reason, what, exec_id="{{ACTIVITY_EXEC_ID}}", transition="COMPLETED", event_id=None, rec_kw=None, **attrs):
    ae("accepted", file, "applied", reason, what,
       image=event_image(file, transition=transition, exec_id=exec_id, event_id=event_id, **attrs),
       **(rec_kw or {}))

def nest(depth, leaf):
    v = leaf
    for i in range(depth):
        v = Mraw({"d%d" % (depth - i): v})
    return v

app("accepted-output-too-large.json",
    "ACTIVITY_EXEC_ID FAILED OUTPUT_TOO_LARGE: COMPLETED output is 100011 bytes; at most 100000 bytes are allowed",
    "COMPLETED with a 100,011-byte output: recorded as FAILED with the reason, not retried",
    output=M(blob=S(repeat("o", 100000))))
app("accepted-output-400kb.json",
    "ACTIVITY_EXEC_ID FAILED OUTPUT_TOO_LARGE: COMPLETED output is",
    "COMPLETED with an output string of 399 KB (the row itself near 400 KB)",
    output=S(repeat("o", 399 * 1024)))
app("accepted-error-400kb.json", "ACTIVITY_EXEC_ID FAILED " + "e" * 64,
    "FAILED with a 400 KB error: applied, the error cut to 2048 bytes", transition="FAILED",
    error=S(repeat("e", KB400)))
app("accepted-cancel-error-400kb.json", "ACTIVITY_EXEC_ID CANCELLED_RUNNING",
    "a client CANCEL of a RUNNING activity with a 400 KB reason", transition="CANCEL",
    error=S(repeat("c", KB400)))
app("accepted-output-deep.json", "ACTIVITY_EXEC_ID COMPLETED",
    "COMPLETED with an output of 31 nested maps, the deepest an item attribute may be",
    output=nest(31, S("leaf")))
app("accepted-output-control-chars.json", "ACTIVITY_EXEC_ID COMPLETED",
    "COMPLETED whose output strings hold NUL, ESC, U+2028, a BOM and an emoji",
    output=M(text=S("a\u0000b\u001b[31mc\u2028d\ufeffe\U0001f426")))
app("accepted-event-id-other-form.json", "ACTIVITY_EXEC_ID COMPLETED",
    "COMPLETED whose activity_event_id is 'evt-42' (not (activity_exec_id)::(uuid)): accepted, as "
    "the references only recommend the form", event_id="evt-42", output=M(n=N(1)))
app("accepted-when-epoch-negative.json", "ACTIVITY_EXEC_ID COMPLETED",
    "COMPLETED with when_epoch -62135596800 and a year-1 date list: when is informational",
    when_epoch=N(-62135596800), when=L(N(1), N(1), N(1), N(0), N(0), N(0)), output=M(n=N(1)))
app("accepted-when-epoch-huge.json", "ACTIVITY_EXEC_ID COMPLETED",
    "COMPLETED with when_epoch 9.9e125 (DynamoDB's largest number) and an impossible date list",
    when_epoch=N("9.9999999999999999999999999999999999999E+125"),
    when=L(N(99999), N(13), N(32), N(25), N(61), N(61)), output=M(n=N(1)))
app("accepted-when-empty.json", "ACTIVITY_EXEC_ID COMPLETED",
    "COMPLETED with when = [] and no when_epoch", when=L(), when_epoch=DROP, output=M(n=N(1)))
app("accepted-tracing-contradicts.json", "ACTIVITY_EXEC_ID COMPLETED",
    "COMPLETED whose tracing fields (workflow_exec_id, activity_name, workflow_name) name another "
    "workflow's activity: they are for tracing only, the activity_exec_id decides",
    workflow_exec_id=S("{{DONE_WORKFLOW_EXEC_ID}}"), activity_name=S("done"),
    workflow_name=S("finished"), output=M(n=N(1)))
app("accepted-unknown-attributes.json", "ACTIVITY_EXEC_ID COMPLETED",
    "COMPLETED with attributes the row type does not have (state, plan, version): ignored",
    state=S("COMPLETED"), plan=M(activities=L()), version=N(99), output=M(n=N(1)))
app("accepted-output-big-number.json", "ACTIVITY_EXEC_ID COMPLETED",
    "COMPLETED whose output holds a 38-digit number (DynamoDB's precision)",
    output=M(n=N("12345678901234567890123456789012345678")))
app("accepted-output-sets.json", "ACTIVITY_EXEC_ID COMPLETED",
    "COMPLETED whose output holds a string set and a number set (not JSON types: read as lists)",
    output=M(tags={"SS": ["a", "b"]}, sizes={"NS": ["1", "2.5"]}))
app("accepted-sink-output-deep.json", "SOLO_ACTIVITY_EXEC_ID COMPLETED",
    "COMPLETED of a workflow's only activity (its sink) with an output of 31 nested maps (the "
    "deepest a row may hold): the workflow's result would hold it one level deeper",
    exec_id="{{SOLO_ACTIVITY_EXEC_ID}}", output=nest(31, S("leaf")))

# --- 11. workflow requests ---
def req(file, expect, reason, what, workflow_name="nobody", request_id=None, **attrs):
    wr("requests", file, expect, reason, what,
       image=request_image(file, workflow_name=workflow_name, request_id=request_id, **attrs))

NOT_REG = 'workflow "%s" is not registered in {{PREFIX}}workflow_lambda'
req("requests-unknown-workflow.json", "failed-workflow", NOT_REG % "nobody",
    "a request for a workflow that is not registered")
req("requests-definition-attribute.json", "failed-workflow", NOT_REG % "nobody",
    "an unknown workflow whose request row carries a `definition` (a plan): the engine never takes "
    "a plan from the request",
    definition=M(activities=L(M(name=S("evil"), **{"lambda": S("arn:aws:lambda:us-east-1:999999999999:function:evil")}))))
req("requests-plan-and-lambda-attributes.json", "failed-workflow", NOT_REG % "nobody",
    "an unknown workflow whose row carries `plan` and `lambda` (a decider)",
    plan=M(version=N(1), activities=L(M(name=S("x"), **{"lambda": S("noop")}))),
    **{"lambda": S("evil-decider")})
req("requests-plan-in-input.json", "failed-workflow", NOT_REG % "nobody",
    "an unknown workflow whose input is a plan",
    input=M(version=N(1), activities=L(M(name=S("x"), **{"lambda": S("noop")}))))
req("requests-name-uppercase.json", "failed-workflow", NOT_REG % "CORPUS",
    "'CORPUS' for the registered 'corpus'", workflow_name="CORPUS")
req("requests-name-trailing-space.json", "failed-workflow", NOT_REG % "corpus ",
    "'corpus ' (trailing space)", workflow_name="corpus ")
req("requests-name-control-char.json", "failed-workflow", 'workflow "\\0corpus" is not registered',
    "a NUL before 'corpus'", workflow_name="\u0000corpus")
req("requests-name-separator.json", "failed-workflow", NOT_REG % "corpus::evil",
    "'corpus::evil' (contains the id separator)", workflow_name="corpus::evil")
req("requests-name-empty.json", "rejected", "workflow_name is empty", "workflow_name ''",
    workflow_name="", request_id="::" + stable_uuid("empty-name"))
req("requests-name-whitespace.json", "rejected", "workflow_name is empty", "workflow_name of spaces",
    workflow_name="   ")
req("requests-name-number.json", "rejected", MALFORMED, "workflow_name is N", workflow_name=N(7))
req("requests-name-missing.json", "rejected", MALFORMED, "no workflow_name", workflow_name=DROP)
req("requests-name-400kb.json", "rejected", "workflow_name is 409600 bytes; at most 128 are allowed",
    "a 400 KB workflow_name (the exec id, a hash key, would pass 2048 bytes)",
    workflow_name=repeat("n", KB400), request_id="r-" + stable_uuid("n400"))
req("requests-id-empty.json", "rejected", "workflow_request_id is empty; expected (workflow_name)::(uuid)",
    "workflow_request_id ''", request_id="")
req("requests-id-whitespace.json", "rejected", "workflow_request_id is empty",
    "workflow_request_id of spaces", request_id="    ")
req("requests-id-number.json", "rejected", "NewImage has no string workflow_request_id",
    "workflow_request_id is N", request_id=N(1))
req("requests-id-missing.json", "rejected", "NewImage has no string workflow_request_id",
    "no workflow_request_id", request_id=DROP)
req("requests-id-400kb.json", "rejected", "workflow_request_id is",
    "a 400 KB workflow_request_id: the exec item would pass 400 KB", request_id=repeat("i", KB400))
req("requests-source-400kb.json", "rejected", "PutItem: invalid request",
    "an unknown workflow with a 409,400-byte source: the row fits in 400 KB, the exec item that "
    "copies it does not, so no FAILED exec can record why", source=S(repeat("s", 409400)))
req("requests-input-too-large.json", "failed-workflow", "workflow input is 64011 bytes; at most 64000",
    "an unknown workflow with a 64,011-byte input", input=M(text=S(repeat("i", 64000))))
req("requests-input-too-large-registered.json", "failed-workflow", "workflow input is 64011 bytes",
    "the registered workflow with a 64,011-byte input: FAILED before any activity exists",
    workflow_name="corpus", input=M(text=S(repeat("i", 64000))))
req("requests-input-deep.json", "failed-workflow", NOT_REG % "nobody",
    "an unknown workflow with an input of 31 nested maps", input=nest(31, N(1)))
req("requests-input-binary.json", "rejected", MALFORMED,
    "input holds a B (binary) attribute: not JSON", input=M(raw={"B": "AAEC"}))
req("requests-when-string.json", "rejected", MALFORMED, "when is S", when=S("now"))
req("requests-when-epoch-negative.json", "failed-workflow", NOT_REG % "nobody",
    "when_epoch -1e12: informational", when_epoch=N(-1000000000000))
req("requests-when-epoch-huge.json", "failed-workflow", NOT_REG % "nobody",
    "when_epoch 1e125: informational", when_epoch=N("1E+125"))
req("requests-manual-string.json", "rejected", MALFORMED, "manual is S 'true'", manual=S("true"))
req("requests-manual-garbage.json", "skipped", "",
    "manual = true on a request for an unregistered workflow: a Full Logic API row, never started "
    "by the function", manual=BOOL(True))
req("requests-replay-tampered-input.json", "applied-nochange", "",
    "the running workflow's own request redelivered with another input: the exec exists, "
    "nothing is started again", workflow_name="corpus", request_id="{{WORKFLOW_REQUEST_ID}}",
    input=M(tampered=BOOL(True)))
req("requests-replay-other-name.json", "rejected", 'workflow_request_id is not scoped to workflow_name "nobody"',
    "the running workflow's request id with the name 'nobody': its id is scoped to another workflow",
    request_id="{{WORKFLOW_REQUEST_ID}}")
req("requests-unknown-attributes.json", "failed-workflow", NOT_REG % "nobody",
    "an unknown workflow whose row carries state, result, error: ignored",
    state=S("COMPLETED"), result=M(ok=BOOL(True)), error=S("none"))

# --- 12. Scheduled Events ---
DT = 'invalid invocation payload: detail-type '
hb("scheduled", "scheduled-detail-type-lowercase.json", "payload-error",
   DT + '"scheduled event" is not "Scheduled Event"', "detail-type 'scheduled event'",
   scheduled(detail_type="scheduled event"))
hb("scheduled", "scheduled-detail-type-trailing-space.json", "payload-error",
   DT + '"Scheduled Event " is not', "detail-type with a trailing space",
   scheduled(detail_type="Scheduled Event "))
hb("scheduled", "scheduled-detail-type-s3.json", "payload-error", DT + '"Object Created"',
   "an S3 EventBridge notification (detail-type Object Created)",
   scheduled(detail_type="Object Created", source="aws.s3",
             detail={"bucket": {"name": "b"}, "object": {"key": "k"}}))
hb("scheduled", "scheduled-detail-type-number.json", "payload-error", NOT_EB,
   "detail-type is a number", scheduled(detail_type=1))
hb("scheduled", "scheduled-detail-type-missing.json", "payload-error", NOT_EB,
   "no detail-type", scheduled(detail_type=DROP))
hb("scheduled", "scheduled-detail-type-underscore.json", "payload-error", NOT_EB,
   "the key is detail_type (snake case), not detail-type", scheduled(detail_type=DROP) | {"detail_type": "Scheduled Event"})
hb("scheduled", "scheduled-source-missing.json", "payload-error", NOT_EB, "no source",
   scheduled(source=DROP))
hb("scheduled", "scheduled-detail-missing.json", "payload-error", NOT_EB, "no detail",
   scheduled(detail=DROP))
hb("scheduled", "scheduled-time-garbage.json", "payload-error", NOT_EB, "time 'yesterday'",
   scheduled(time="yesterday"))
hb("scheduled", "scheduled-resources-string.json", "payload-error", NOT_EB,
   "resources is a string, not a list", scheduled(resources="arn:aws:events:us-east-1:000000000000:rule/x"))
hb("scheduled", "scheduled-account-number.json", "payload-error", NOT_EB, "account is a number",
   scheduled(account=123456789012))
hb("scheduled", "scheduled-version-number.json", "payload-error", NOT_EB, "version is the number 0",
   scheduled(version=0))
hb("scheduled", "scheduled-source-other.json", "tick", "",
   "source aws.s3 with detail-type Scheduled Event: source is not checked; a tick is harmless",
   scheduled(source="aws.s3"))
hb("scheduled", "scheduled-other-rule.json", "tick", "",
   "resources name another rule in another account", scheduled(resources=["arn:aws:events:eu-west-1:999999999999:rule/other"]))
hb("scheduled", "scheduled-time-far-future.json", "tick", "",
   "time 9999-12-31: the tick uses the clock, not the event's time",
   scheduled(time="9999-12-31T23:59:59Z"))
hb("scheduled", "scheduled-time-epoch-start.json", "tick", "", "time 1970-01-01",
   scheduled(time="1970-01-01T00:00:00Z"))
hb("scheduled", "scheduled-detail-string.json", "tick", "", "detail is a string",
   scheduled(detail="{}"))
hb("scheduled", "scheduled-detail-null.json", "tick", "", "detail is null", scheduled(detail=None))
hb("scheduled", "scheduled-detail-400kb.json", "tick", "", "detail holds a 400 KB string",
   scheduled(detail={"pad": repeat("p", KB400)}))
hb("scheduled", "scheduled-extra-fields.json", "tick", "",
   "unknown top-level fields (replay-name, Records) beside a valid Scheduled Event",
   scheduled() | {"replay-name": "x", "Records": []})
hb("scheduled", "scheduled-nulls.json", "tick", "", "id, account, time, region, resources null",
   scheduled(id=None, account=None, time=None, region=None, resources=None))


# ---------------------------------------------------------------- write

def main():
    for name in os.listdir(HERE):
        if name.endswith(".json"):
            os.remove(os.path.join(HERE, name))
    lines = [
        "# Bad-input corpus: what must happen to each file (see README.md).",
        "# Generated by generate.py. Columns: category, file, function, expect, then the",
        "# expected reason (a stable prefix; alternatives separated by ' || '; '-' = none)",
        "# up to ' # ', then what the file is.",
        "",
    ]
    width = max(len(c[1]) for c in CASES)
    for category, file, function, expect, reason, what, content in CASES:
        path = os.path.join(HERE, file)
        if isinstance(content, bytes):
            with open(path, "wb") as f:
                f.write(content)
        else:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(content, f, indent=2, ensure_ascii=False)
                f.write("\n")
        assert " # " not in reason, file
        lines.append("%-11s %-*s %-17s %-16s %s # %s" % (
            category, width, file, function, expect, reason if reason else "-", what))
    with open(os.path.join(HERE, "MANIFEST"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("%d cases" % len(CASES))


if __name__ == "__main__":
    main()
