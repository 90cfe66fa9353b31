"""Tests of worker.py against a real DynamoDB API (DynamoDB Local).

The tables are created with the keys and GSIs of
crates/whimbrel-core/src/install.rs (a fresh prefix per run), and the task
items are shaped as the engine leaves a task-list activity after
`queue_update` (crates/whimbrel-core/src/engine/attempts.rs). The expected
claim is `claim_task_update` in the same file, attribute by attribute.

Run (from the repository root; any free port):

    bash scripts/dynamodb-local.sh start 8765 /tmp/ddb.pid /tmp/ddb.log
    WHIMBREL_TEST_DYNAMODB=http://127.0.0.1:8765 \\
        .local/venv/bin/python -m unittest -v examples/python-worker/test_worker.py
    bash scripts/dynamodb-local.sh stop /tmp/ddb.pid

Any Python 3 with boto3 will do; the tests are skipped without
WHIMBREL_TEST_DYNAMODB.
"""

import json
import os
import subprocess
import sys
import threading
import time
import unittest
import uuid
from decimal import Decimal

import boto3

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import worker  # noqa: E402

ENDPOINT = os.environ.get("WHIMBREL_TEST_DYNAMODB")
HERE = os.path.dirname(os.path.abspath(__file__))
ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
for k, v in ENV.items():
    os.environ.setdefault(k, v)
PREFIX = f"pyworker{uuid.uuid4().hex[:8]}_"

# These attributes are what claim_task_update writes; every other one must
# be left as it was.
CLAIM_SETS = {"version", "state", "attempt_token_hash", "worker", "launch", "last_event_id",
              "launched_time", "launched_time_epoch", "start_time", "start_time_epoch",
              "heartbeat_time", "heartbeat_time_epoch", "history", "due_epoch", "due_shard"}
CLAIM_REMOVES = {"task_list_shard", "task_queued_epoch", "next_attempt_epoch"}


def create_tables(client):
    """activity_exec and activity_event as install::definitions makes them."""
    def gsi(name, hash_, range_=None, keys_only=True):
        keys = [{"AttributeName": hash_, "KeyType": "HASH"}]
        if range_:
            keys.append({"AttributeName": range_, "KeyType": "RANGE"})
        return {"IndexName": name, "KeySchema": keys,
                "Projection": {"ProjectionType": "KEYS_ONLY" if keys_only else "ALL"}}
    client.create_table(
        TableName=f"{PREFIX}activity_exec", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "activity_exec_id", "KeyType": "HASH"},
                   {"AttributeName": "workflow_exec_id", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in [
            ("activity_exec_id", "S"), ("workflow_exec_id", "S"), ("activity_name", "S"),
            ("due_shard", "N"), ("due_epoch", "N"), ("task_list_shard", "S"), ("task_queued_epoch", "N")]],
        GlobalSecondaryIndexes=[
            gsi("workflow_exec_id-activity_name-index", "workflow_exec_id", "activity_name", keys_only=False),
            gsi("due_shard-due_epoch-index", "due_shard", "due_epoch"),
            gsi("task_list_shard-task_queued_epoch-index", "task_list_shard", "task_queued_epoch")])
    client.create_table(
        TableName=f"{PREFIX}activity_event", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "activity_event_id", "KeyType": "HASH"},
                   {"AttributeName": "activity_exec_id", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "activity_event_id", "AttributeType": "S"},
                              {"AttributeName": "activity_exec_id", "AttributeType": "S"}],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
        GlobalSecondaryIndexes=[gsi("activity_exec_id-index", "activity_exec_id")])
    for t in ("activity_exec", "activity_event"):
        client.get_waiter("table_exists").wait(TableName=f"{PREFIX}{t}")


def queued_task(task_list, name, queued_at, heartbeat=None, timeout=60, version=3, **more):
    """A task-list activity as the engine leaves it after queue_update: the
    REQUESTED item of engine/items.rs (serde_dynamo omits None fields),
    then QUEUED, attempt 1, in the task-list index, version + 1."""
    aid = f"{name}::{uuid.uuid4()}"
    item = {
        "activity_exec_id": aid, "workflow_exec_id": f"wf::{uuid.uuid4()}", "workflow_name": "wf",
        "activity_name": name, "state": "QUEUED", "lambda": "", "task_list": task_list,
        "launch": 0, "attempt": 1, "require_tokens": False,
        "heartbeat_enabled": heartbeat is not None, "timeout_seconds": timeout,
        "heartbeat_time_epoch": -1, "start_time_epoch": -1, "prerequisites": [], "dependents": [],
        "pending_dependency_count": 0, "version": version, "input": {"n": 1, "x": Decimal("0.5")},
        "first_queued_epoch": queued_at, "scheduled_epoch": queued_at,
        "task_list_shard": worker.task_list_shard(task_list, aid), "task_queued_epoch": queued_at,
        "last_event_id": f"launcher:{aid}:1",
        "history": [{"transition": "QUEUED", "state": "QUEUED", "at_epoch": queued_at,
                     "event_id": f"launcher:{aid}:1"}],
    }
    if heartbeat is not None:
        item["heartbeat_timeout_seconds"] = heartbeat
    item.update(more)
    return item


@unittest.skipUnless(ENDPOINT, "set WHIMBREL_TEST_DYNAMODB=http://127.0.0.1:PORT (DynamoDB Local)")
class WorkerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        db = boto3.resource("dynamodb", endpoint_url=ENDPOINT)
        create_tables(db.meta.client)
        cls.execs = db.Table(f"{PREFIX}activity_exec")
        cls.events = db.Table(f"{PREFIX}activity_event")

    def worker(self, task_list, name="w1"):
        return worker.Worker(task_list, name, PREFIX, ENDPOINT, claim_in_process=True)

    def put(self, item):
        self.execs.put_item(Item=item)
        return item

    def get(self, item):
        return self.execs.get_item(Key={"activity_exec_id": item["activity_exec_id"],
                                        "workflow_exec_id": item["workflow_exec_id"]},
                                   ConsistentRead=True)["Item"]

    def rows(self, item):
        found = self.events.scan()["Items"]
        return [r for r in found if r["activity_exec_id"] == item["activity_exec_id"]]

    def run_cli(self, task_list, *args, until=None):
        """worker.py as a process; `until(proc)` runs while it works."""
        proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker.py"), "--task-list", task_list,
             "--table-prefix", PREFIX, "--endpoint-url", ENDPOINT, "--name", "cli",
             "--max-tasks", "1", "--idle-exit", "20", "--claim-in-process", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV})
        if until:
            until(proc)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        return json.loads(out.strip().splitlines()[-1])

    def wait_running(self, item):
        for _ in range(100):
            now = self.get(item)
            if now["state"] == "RUNNING":
                return now
            time.sleep(0.1)
        self.fail("never claimed")

    def test_shard_and_token_hash_agree_with_rust(self):
        # FNV-1a 32-bit reference vectors, then the vectors of
        # docs/workers.md (asserted on the Rust side by tests/it/docs_shapes.rs).
        self.assertEqual(worker.shard_of("a"), 0xE40C292C % 8)
        self.assertEqual(worker.shard_of("foobar"), 0xBF9CF968 % 8)
        self.assertEqual(worker.shard_of(""), 0x811C9DC5 % 8)
        self.assertEqual(worker.task_list_shard("resize", "a"), "resize#0")
        merge = "merge::3073c528-a75b-52da-b0f1-b3fade72a32c"
        self.assertEqual((worker.shard_of(merge), worker.task_list_shard("resize", merge)), (3, "resize#3"))
        self.assertEqual(worker.token_hash("4c7e1a9f2b3d4e56a8f0c1d2e3b4a596"),
                         "12795d9d-976e-5375-865d-a94409e499ab")

    def test_oldest_task_is_claimed_first_and_future_ones_wait(self):
        tl, now = f"tl-{uuid.uuid4().hex[:6]}", int(time.time())
        tasks, shards = [], set()
        while len(tasks) < 3:  # three different shards of the list
            t = queued_task(tl, f"t{len(tasks)}", now - 30 + 10 * len(tasks))
            if t["task_list_shard"] not in shards:
                shards.add(t["task_list_shard"])
                tasks.append(t)
        for t in reversed(tasks):
            self.put(t)
        self.put(queued_task(tl, "later", now + 3600))  # a retry's delay
        w = self.worker(tl)
        got = [w.claim_row()[0]["activity_name"] for _ in range(3)]
        self.assertEqual(got, ["t0", "t1", "t2"])
        self.assertIsNone(w.claim_row())

    def test_two_concurrent_claims_of_one_task_one_wins(self):
        tl = f"tl-{uuid.uuid4().hex[:6]}"
        task = self.put(queued_task(tl, "race", int(time.time()) - 5))
        read = self.get(task)
        gate, won, lost = threading.Barrier(2), [], []

        def claim(name):
            w = self.worker(tl, name)
            req = worker.claim_request(read, worker.token_hash(name), name, int(time.time()))
            gate.wait()
            try:
                w.execs.update_item(**req)
                won.append(name)
            except w.failed_check:
                lost.append(name)
        threads = [threading.Thread(target=claim, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual((len(won), len(lost)), (1, 1))
        self.assertEqual(self.get(task)["worker"], won[0])
        # Whole polls racing for one task: exactly one claims it.
        task = self.put(queued_task(tl, "race2", int(time.time()) - 5))
        workers, results = [self.worker(tl, n) for n in ("c", "d")], {}
        gate = threading.Barrier(2)

        def poll(w):
            gate.wait()
            results[w.name] = w.claim_row()
        threads = [threading.Thread(target=poll, args=(w,)) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [n for n, r in results.items() if r]
        self.assertEqual(len(winners), 1, results)
        self.assertEqual(self.get(task)["worker"], winners[0])

    def test_the_claim_sets_what_claim_task_update_sets(self):
        tl, now = f"tl-{uuid.uuid4().hex[:6]}", int(time.time())
        for heartbeat in (6, None):
            before = self.put(queued_task(tl, "claimed", now - 5, heartbeat=heartbeat, timeout=60))
            w = self.worker(tl, "host-1:42")
            item, token = w.claim_row()
            at = int(item["start_time_epoch"])
            self.assertLessEqual(abs(at - int(time.time())), 2)
            aid = before["activity_exec_id"]
            want = {"version": before["version"] + 1, "state": "RUNNING",
                    "attempt_token_hash": worker.token_hash(token), "worker": "host-1:42",
                    "launch": 1, "last_event_id": f"claim:{aid}:1",
                    "launched_time": worker.date_list(at), "launched_time_epoch": at,
                    "start_time": worker.date_list(at), "start_time_epoch": at,
                    "history": before["history"] + [{"transition": "RUNNING", "state": "RUNNING",
                                                     "at_epoch": at, "event_id": f"claim:{aid}:1"}],
                    # RUNNING: min(heartbeat, start-to-close) (deadline.rs)
                    "due_epoch": at + (heartbeat or 60), "due_shard": worker.shard_of(aid)}
            if heartbeat:
                want.update(heartbeat_time=worker.date_list(at), heartbeat_time_epoch=at)
            for k, v in want.items():
                self.assertEqual(item[k], v, k)
            for k in CLAIM_REMOVES:
                self.assertNotIn(k, item)
            for k in set(before) - CLAIM_SETS - CLAIM_REMOVES:
                self.assertEqual(item[k], before[k], k)
            self.assertEqual(set(item) - set(before), set(want) - set(before))
            self.assertEqual(item["heartbeat_time_epoch"], at if heartbeat else -1)
        # schedule-to-close bounds the due marker when it comes first.
        t = self.put(queued_task(tl, "s2c", now - 100, timeout=600, schedule_to_close_seconds=130))
        item, _ = self.worker(tl).claim_row()
        self.assertEqual(item["activity_exec_id"], t["activity_exec_id"])
        self.assertEqual(item["due_epoch"], now + 30)

    def test_completed_row_carries_the_token_and_prerequisite_outputs(self):
        tl, now = f"tl-{uuid.uuid4().hex[:6]}", int(time.time())
        task = queued_task(tl, "merge", now - 5, heartbeat=30)
        pre = {**queued_task(tl, "count", now - 60), "state": "COMPLETED", "output": {"words": 42}}
        del pre["task_list_shard"], pre["task_queued_epoch"]
        pre["workflow_exec_id"] = task["workflow_exec_id"]
        self.put(pre)
        task["prerequisites"] = [pre["activity_exec_id"]]
        self.put(task)
        stats = self.run_cli(tl)
        self.assertEqual(stats, {"claimed": 1, "completed": 1, "failed": 0, "abandoned": 0, "lost_claims": 0})
        [row] = self.rows(task)
        item = self.get(task)
        self.assertEqual(row["transition"], "COMPLETED")
        self.assertEqual(worker.token_hash(row["attempt_token"]), item["attempt_token_hash"])
        self.assertEqual((row["attempt"], row["source"]), (1, "worker:cli"))
        self.assertTrue(row["activity_event_id"].startswith(task["activity_exec_id"] + "::"))
        self.assertEqual(row["output"], {"by": "python", "input": {"n": 1, "x": Decimal("0.5")},
                                         "prerequisites": {"count": {"words": 42}}})
        self.assertEqual(len(row["when"]), 6)
        for k in ("activity_name", "workflow_exec_id", "workflow_name"):
            self.assertEqual(row[k], task[k])

    def test_exec_output_from_stdout_and_exit_code_failure(self):
        tl, now = f"tl-{uuid.uuid4().hex[:6]}", int(time.time())
        ok = self.put(queued_task(tl, "ok", now - 5))
        cmd = ("python3 -c 'import json,sys; p=json.load(sys.stdin); "
               "print(json.dumps({\"n\": p[\"input\"][\"n\"] + 1.5, \"attempt\": p[\"attempt\"]}))'")
        self.assertEqual(self.run_cli(tl, "--exec", cmd)["completed"], 1)
        [row] = self.rows(ok)
        self.assertEqual(row["output"], {"n": Decimal("2.5"), "attempt": 1})
        bad = self.put(queued_task(tl, "bad", now - 5))
        stats = self.run_cli(tl, "--exec", "echo first >&2; echo 'disk full' >&2; exit 3")
        self.assertEqual(stats["failed"], 1)
        [row] = self.rows(bad)
        self.assertEqual((row["transition"], row["error"]), ("FAILED", "EXIT_3: disk full"))

    def test_a_command_gets_no_credentials_unless_passed_on(self):
        worker_env = {"PATH": "/usr/bin", "HOME": "/root", "AWS_ACCESS_KEY_ID": "AKIA",
                      "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "token",
                      "WHIMBREL_TABLE_PREFIX": "whimbrel_", "MY_SETTING": "1"}
        self.assertEqual(sorted(worker.command_env(worker_env)), ["HOME", "PATH"])
        self.assertEqual(sorted(worker.command_env(worker_env, ["MY_SETTING"])),
                         ["HOME", "MY_SETTING", "PATH"])
        tl, now = f"tl-{uuid.uuid4().hex[:6]}", int(time.time())
        task = self.put(queued_task(tl, "env", now - 5))
        cmd = "echo \"{\\\"key\\\": \\\"${AWS_SECRET_ACCESS_KEY:-none}\\\"}\""
        self.assertEqual(self.run_cli(tl, "--exec", cmd)["completed"], 1)
        [row] = self.rows(task)
        self.assertEqual(row["output"], {"key": "none"})

    def test_cancel_stops_the_command_and_is_acknowledged(self):
        tl = f"tl-{uuid.uuid4().hex[:6]}"
        task = self.put(queued_task(tl, "long", int(time.time()) - 5, heartbeat=3))
        started = time.monotonic()

        def cancel(proc):
            self.wait_running(task)
            self.execs.update_item(Key={k: task[k] for k in ("activity_exec_id", "workflow_exec_id")},
                                   UpdateExpression="SET #s = :c", ExpressionAttributeNames={"#s": "state"},
                                   ExpressionAttributeValues={":c": "CANCELLED_RUNNING"})
        stats = self.run_cli(tl, "--exec", "sleep 30", until=cancel)
        self.assertLess(time.monotonic() - started, 15)
        self.assertEqual((stats["claimed"], stats["abandoned"]), (1, 1))
        [row] = self.rows(task)
        self.assertEqual(row["transition"], "CANCEL")
        self.assertEqual(worker.token_hash(row["attempt_token"]), self.get(task)["attempt_token_hash"])

    def test_a_task_taken_away_is_dropped_silently(self):
        tl = f"tl-{uuid.uuid4().hex[:6]}"
        task = self.put(queued_task(tl, "lost", int(time.time()) - 5, heartbeat=3,
                                    input={"sleep_seconds": 30}))

        def retried_elsewhere(proc):
            claimed = self.wait_running(task)
            for _ in range(50):  # heartbeats land (every second)
                if self.get(task)["heartbeat_time_epoch"] > claimed["start_time_epoch"]:
                    break
                time.sleep(0.1)
            else:
                self.fail("no heartbeat")
            self.execs.update_item(Key={k: task[k] for k in ("activity_exec_id", "workflow_exec_id")},
                                   UpdateExpression="SET attempt_token_hash = :h",
                                   ExpressionAttributeValues={":h": worker.token_hash("someone else")})
        stats = self.run_cli(tl, until=retried_elsewhere)
        self.assertEqual((stats["abandoned"], stats["completed"]), (1, 0))
        self.assertEqual(self.rows(task), [])

    def test_heartbeat_without_heartbeats_only_reads(self):
        tl = f"tl-{uuid.uuid4().hex[:6]}"
        self.put(queued_task(tl, "quiet", int(time.time()) - 5))
        w = self.worker(tl)
        p = w.claim()
        item = self.get(p)
        self.assertEqual(w.heartbeat(p), "RUNNING")
        self.assertIsNone(w.heartbeat({**p, "attempt_token": "stale"}))
        self.assertEqual(self.get(item)["heartbeat_time_epoch"], -1)
        self.assertNotIn("heartbeat_time", self.get(item))

    def test_heartbeat_writes_its_time_only(self):
        tl = f"tl-{uuid.uuid4().hex[:6]}"
        self.put(queued_task(tl, "beating", int(time.time()) - 5, heartbeat=30))
        w = self.worker(tl)
        p = w.claim()
        before = self.get(p)
        time.sleep(1.1)
        self.assertEqual(w.heartbeat(p), "RUNNING")
        after = self.get(p)
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        self.assertEqual(changed, {"heartbeat_time", "heartbeat_time_epoch"})

    def test_a_claim_through_the_claim_function(self):
        """The default claim: one synchronous invoke of the engine's claim
        function (a stand-in Lambda client here; the real function runs in
        tests/e2e-workers.sh), whose answer is the payload. A refusal is
        the function's error, raised with its message."""
        class Body:
            def __init__(self, value):
                self.value = value

            def read(self):
                return json.dumps(self.value).encode()

        class Lambdas:
            def __init__(self, answers):
                self.answers, self.calls = answers, []

            def invoke(self, **kw):
                self.calls.append(kw)
                return self.answers.pop(0)
        task = {"activity_exec_id": "a::1", "attempt_token": "t"}
        lambdas = Lambdas([{"Payload": Body({"task": task, "lost_claims": 2})},
                           {"Payload": Body({"task": None})},
                           {"Payload": Body({"errorMessage": "task list \"x\" is not served"}),
                            "FunctionError": "Unhandled"}])
        w = worker.Worker("pool", "w9", PREFIX, ENDPOINT, claim_function="claims", lambda_client=lambdas)
        self.assertEqual(w.claim(), task)
        self.assertEqual(w.stats["lost_claims"], 2)
        self.assertIsNone(w.claim())
        with self.assertRaisesRegex(worker.ClaimRefused, "is not served"):
            w.claim()
        self.assertEqual(lambdas.calls[0]["FunctionName"], "claims")
        self.assertEqual(lambdas.calls[0]["InvocationType"], "RequestResponse")
        self.assertEqual(json.loads(lambdas.calls[0]["Payload"]), {"task_lists": ["pool"], "worker": "w9"})


if __name__ == "__main__":
    unittest.main()
