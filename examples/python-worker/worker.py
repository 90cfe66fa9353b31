#!/usr/bin/env python3
"""A Whimbrel task-list worker in plain Python (boto3 + the standard library).

It does what the Rust `Worker` does (crates/whimbrel-core/src/worker.rs),
as docs/workers.md states it:

1. Claim: invoke the engine's claim function (`--claim-function`, default
   WHIMBREL_CLAIM_FUNCTION or `whimbrel-task-claim`; the stack's output
   TaskClaimFunctionName) with {"task_lists": [list], "worker": name}. It
   answers {"task": <launch payload with the attempt token> | null}. Back
   off 0.1 s doubling to 5 s while idle. The worker's role thus writes no
   activity item beyond its heartbeat (TaskListWorkerPolicy).
   With `--claim-in-process` (a process holding the engine's grant, as the
   Full Logic API) it claims row by row instead: Query the list's shards of
   `task_list_shard-task_queued_epoch-index`, re-read each candidate, and
   claim it with the UpdateItem of `claim_task_update`.
2. Run the handler (built in, or `--exec CMD`) while a background thread
   heartbeats as an activity does (a GetItem of the state and token hash,
   then an UpdateItem of `heartbeat_time(_epoch)` only): CANCELLED_RUNNING
   stops the work and is acknowledged with CANCEL; a task no longer ours
   (timed out, retried) is dropped silently.
3. Report COMPLETED or FAILED: one PutItem into `{prefix}activity_event`
   carrying the attempt and its token.

A worker that dies is caught by the heartbeat or start-to-close timeout and
the activity is retried per its policy (docs/retries.md).
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from decimal import Decimal

import boto3
from botocore.exceptions import BotoCoreError, ClientError

TASK_LIST_INDEX = "task_list_shard-task_queued_epoch-index"
TASK_LIST_SHARDS = 4  # engine/attempts.rs
INDEX_SHARDS = 8  # store/mod.rs: shards of the due index
TOKEN_NAMESPACE = uuid.UUID("5f1c2a4e-9b0d-4e6b-8a35-7d21c0f49e12")  # ids.rs
# Fallbacks of the engine's defaults; the engine stores both on the item.
DEFAULT_START_TO_CLOSE = 3600  # WHIMBREL_START_TO_CLOSE_SECONDS
DEFAULT_HEARTBEAT_TIMEOUT = 300  # WHIMBREL_HEARTBEAT_TIMEOUT_SECONDS


def shard_of(activity_exec_id):
    """FNV-1a (32-bit) of the id's UTF-8 bytes, modulo 8 (store::shard_of)."""
    h = 0x811C9DC5
    for b in activity_exec_id.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h % INDEX_SHARDS


def task_list_shard(task_list, activity_exec_id):
    return f"{task_list}#{shard_of(activity_exec_id) % TASK_LIST_SHARDS}"


def token_hash(token):
    """`attempt_token_hash`: the UUID v5 of the token (ids::token_hash)."""
    return str(uuid.uuid5(TOKEN_NAMESPACE, token))


def date_list(epoch):
    t = datetime.fromtimestamp(epoch, timezone.utc)
    return [t.year, t.month, t.day, t.hour, t.minute, t.second]


def plain(v):
    """json.dumps default: DynamoDB numbers (Decimal) as JSON numbers."""
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    raise TypeError(f"{type(v).__name__} is not JSON")


def dynamo(value):
    """A JSON value as boto3 stores it: floats become Decimal."""
    return json.loads(json.dumps(value, default=plain), parse_float=Decimal)


def running_due(item, now):
    """The due marker of the claimed RUNNING state (deadline.rs
    next_deadline): the earliest of start-to-close, the heartbeat timeout
    (when enabled) and schedule-to-close (when set)."""
    due = [now + int(item.get("timeout_seconds") or DEFAULT_START_TO_CLOSE)]
    if item.get("heartbeat_enabled"):
        t = item.get("heartbeat_timeout_seconds") or DEFAULT_HEARTBEAT_TIMEOUT
        due.append(now + int(t))
    if item.get("schedule_to_close_seconds") is not None and item.get("first_queued_epoch") is not None:
        due.append(int(item["first_queued_epoch"]) + int(item["schedule_to_close_seconds"]))
    return min(due)


def claim_request(item, token_hash_, worker, now):
    """The UpdateItem of claim_task_update, as boto3 keyword arguments."""
    aid = item["activity_exec_id"]
    event_id = f"claim:{aid}:{item['attempt']}"
    sets = {"version": int(item.get("version", 0)) + 1, "state": "RUNNING", "attempt_token_hash": token_hash_,
            "worker": worker, "launch": 1, "last_event_id": event_id,
            "launched_time": date_list(now), "launched_time_epoch": now,
            "start_time": date_list(now), "start_time_epoch": now}
    if item.get("heartbeat_enabled"):
        sets.update(heartbeat_time=date_list(now), heartbeat_time_epoch=now)
    sets.update(due_epoch=running_due(item, now), due_shard=shard_of(aid))
    entry = {"transition": "RUNNING", "state": "RUNNING", "at_epoch": now, "event_id": event_id}
    names = {f"#{k}": k for k in [*sets, "history", "task_list_shard", "task_queued_epoch", "next_attempt_epoch"]}
    values = {f":{k}": v for k, v in sets.items()}
    values.update({":v_read": int(item.get("version", 0)), ":queued": "QUEUED", ":empty": [], ":entry": [entry]})
    update = ("SET " + ", ".join(f"#{k} = :{k}" for k in sets)
              + ", #history = list_append(if_not_exists(#history, :empty), :entry)"
              + " REMOVE #task_list_shard, #task_queued_epoch, #next_attempt_epoch")
    return dict(Key={"activity_exec_id": aid, "workflow_exec_id": item["workflow_exec_id"]},
                UpdateExpression=update, ExpressionAttributeNames=names, ExpressionAttributeValues=values,
                ConditionExpression="#version = :v_read AND #state = :queued AND attribute_exists("
                "#task_list_shard) AND attribute_not_exists(#attempt_token_hash)", ReturnValues="ALL_NEW")


def example_handler(payload, stop):
    """The built-in handler: echoes what it got. `input.sleep_seconds` makes
    it work that long (stopping early when told); `input.fail` fails it."""
    inp = payload["input"] if isinstance(payload["input"], dict) else {}
    if stop.wait(float(inp.get("sleep_seconds", 0))):
        return None, "stopped"
    if "fail" in inp:
        return None, str(inp["fail"])
    return {"by": "python", "input": payload["input"], "prerequisites": payload["prerequisites"]}, None


# What a command inherits from the worker's environment, as `whimbrel
# worker`: what a shell needs, never the worker's AWS credentials or
# settings unless passed on by name (--pass-env).
INHERITED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL",
                 "LC_CTYPE", "LC_MESSAGES", "TZ", "TMPDIR", "TERM")


def command_env(environ, passed=()):
    """The environment of a command: of `environ`, the names in
    INHERITED_ENV or in `passed`."""
    return {k: v for k, v in environ.items() if k in INHERITED_ENV or k in passed}


def exec_handler(cmd, passed=()):
    """`--exec CMD`: the payload JSON on stdin, the output JSON from stdout
    (other text becomes {"stdout": text}); exit code n != 0 is FAILED with
    "EXIT_n: <last stderr line>" (killed by signal s: n = 128 + s)."""
    def run(payload, stop):
        proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env=command_env(os.environ, passed))
        got = {}
        talk = threading.Thread(target=lambda: got.update(
            zip(("out", "err"), proc.communicate(json.dumps(payload, default=plain)))))
        talk.start()
        while talk.is_alive():
            if stop.wait(0.2):
                os.killpg(proc.pid, signal.SIGTERM)
                talk.join(5)
                if talk.is_alive():
                    os.killpg(proc.pid, signal.SIGKILL)
                talk.join()
                return None, "stopped"
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        if code != 0:
            last = (got.get("err") or "").strip().splitlines()[-1:]
            return None, f"EXIT_{code}: {last[0]}" if last else f"EXIT_{code}"
        text = got.get("out") or ""
        try:
            return json.loads(text, parse_float=Decimal), None
        except ValueError:
            return {"stdout": text}, None
    return run


HEARTBEAT_READS = ["activity_exec_id", "workflow_exec_id", "state", "attempt_token_hash",
                   "heartbeat_enabled", "require_tokens"]


class Worker:
    def __init__(self, task_list, name, prefix="whimbrel_", endpoint_url=None, region=None, handler=None,
                 claim_function=None, claim_in_process=False, lambda_client=None):
        db = boto3.resource("dynamodb", endpoint_url=endpoint_url, region_name=region)
        self.execs = db.Table(f"{prefix}activity_exec")
        # Resources are not thread-safe: the heartbeat thread has its own.
        beats = boto3.resource("dynamodb", endpoint_url=endpoint_url, region_name=region)
        self.beats = beats.Table(self.execs.name)
        self.events = db.Table(f"{prefix}activity_event")
        self.db, self.task_list, self.name = db, task_list, name
        self.handler = handler or example_handler
        self.stats = dict(claimed=0, completed=0, failed=0, abandoned=0, lost_claims=0)
        self.failed_check = self.execs.meta.client.exceptions.ConditionalCheckFailedException
        self.claim_in_process = claim_in_process
        self.claim_function = claim_function or os.environ.get("WHIMBREL_CLAIM_FUNCTION") or "whimbrel-task-claim"
        # Lambda's endpoint is the environment's (AWS_ENDPOINT_URL_LAMBDA locally), not DynamoDB's.
        self.lambdas = lambda_client or (None if claim_in_process else boto3.client("lambda", region_name=region))

    def key(self, item):
        return {"activity_exec_id": item["activity_exec_id"], "workflow_exec_id": item["workflow_exec_id"]}

    def claim(self):
        """Claim the oldest claimable task: its launch payload, or None."""
        if self.claim_in_process:
            got = self.claim_row()
            return self.payload(*got) if got else None
        r = self.lambdas.invoke(FunctionName=self.claim_function, InvocationType="RequestResponse",
                                Payload=json.dumps({"task_lists": [self.task_list], "worker": self.name}))
        body = json.loads(r["Payload"].read() or b"null")
        if r.get("FunctionError"):
            raise ClaimRefused(f"{self.claim_function}: {body}")
        self.stats["lost_claims"] += int(body.get("lost_claims", 0))
        return body.get("task")

    def candidates(self, now):
        found = []
        for k in range(TASK_LIST_SHARDS):
            found += self.execs.query(
                IndexName=TASK_LIST_INDEX, Limit=5,
                KeyConditionExpression="task_list_shard = :s AND task_queued_epoch <= :now",
                ExpressionAttributeValues={":s": f"{self.task_list}#{k}", ":now": now})["Items"]
        return sorted(found, key=lambda i: i["task_queued_epoch"])

    def claim_row(self):
        """The in-process claim, row by row: (claimed item, token) or None."""
        for c in self.candidates(int(time.time())):
            item = self.execs.get_item(Key=self.key(c), ConsistentRead=True).get("Item")
            if (not item or item.get("state") != "QUEUED" or "task_list_shard" not in item
                    or "attempt_token_hash" in item):
                continue  # the index lags: claimed or cancelled already
            token = uuid.uuid4().hex
            try:
                req = claim_request(item, token_hash(token), self.name, int(time.time()))
                return self.execs.update_item(**req)["Attributes"], token
            except self.failed_check:
                self.stats["lost_claims"] += 1  # another worker won it
        return None

    def payload(self, item, token):
        """The launch payload (Engine::launch_payload) of an in-process claim."""
        table, prerequisites = self.execs.name, {}
        keys = [{"activity_exec_id": p, "workflow_exec_id": item["workflow_exec_id"]}
                for p in item.get("prerequisites", [])]
        while keys:  # BatchGetItem, consistent, 100 keys a request
            r = self.db.batch_get_item(RequestItems={table: {"Keys": keys[:100], "ConsistentRead": True}})
            for p in r["Responses"].get(table, []):
                prerequisites[p["activity_name"]] = p.get("output")
            keys = keys[100:] + r.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])
        p = {"version": 1, "activity_exec_id": item["activity_exec_id"], "activity_name": item["activity_name"],
             "workflow_exec_id": item["workflow_exec_id"], "workflow_name": item["workflow_name"],
             "attempt": item["attempt"], "launch": item.get("launch", 1), "input": item.get("input"),
             "prerequisites": prerequisites, "attempt_token": token}
        if item.get("heartbeat_enabled"):
            p["heartbeat_timeout_seconds"] = item.get("heartbeat_timeout_seconds") or DEFAULT_HEARTBEAT_TIMEOUT
        if item.get("timeout_seconds") is not None:
            p["timeout_seconds"] = item["timeout_seconds"]
        return p

    def heartbeat(self, p):
        """The activity's state if this attempt is still live, else None.
        As Activity::heartbeat, within the activity role's attributes: a
        GetItem of HEARTBEAT_READS, the token checked here, then, while
        RUNNING with heartbeats enabled, an UpdateItem of
        `heartbeat_time(_epoch)` only."""
        seen = self.beats.get_item(Key=self.key(p), ConsistentRead=True,
                                   ProjectionExpression=", ".join(f"#a{i}" for i in range(len(HEARTBEAT_READS))),
                                   ExpressionAttributeNames={f"#a{i}": a for i, a in enumerate(HEARTBEAT_READS)}
                                   ).get("Item")
        if not seen or seen.get("attempt_token_hash") != token_hash(p["attempt_token"]):
            return None
        if seen.get("state") == "RUNNING" and seen.get("heartbeat_enabled"):
            now = int(time.time())
            try:
                self.beats.update_item(
                    Key=self.key(p), ConditionExpression="attribute_exists(activity_exec_id)",
                    UpdateExpression="SET heartbeat_time_epoch = :now, heartbeat_time = :when",
                    ExpressionAttributeValues={":now": now, ":when": date_list(now)})
            except self.failed_check:
                return None
        return seen.get("state")

    def report(self, p, transition, output=None, error=None):
        now = int(time.time())
        row = {"activity_event_id": f"{p['activity_exec_id']}::{uuid.uuid4()}",
               "activity_exec_id": p["activity_exec_id"], "transition": transition,
               "when": date_list(now), "when_epoch": now, "source": f"worker:{self.name}",
               "attempt": p["attempt"], "attempt_token": p["attempt_token"],
               "activity_name": p["activity_name"], "workflow_exec_id": p["workflow_exec_id"],
               "workflow_name": p["workflow_name"]}
        if output is not None or transition == "COMPLETED":
            row["output"] = dynamo(output)
        if error is not None:
            row["error"] = error
        # RowRetentionDays: the TTL attribute of the write-once tables.
        days = int(os.environ.get("WHIMBREL_ROW_RETENTION_DAYS") or 0)
        if days > 0:
            row["expires_at_epoch"] = now + days * 86400
        self.events.put_item(Item=row, ConditionExpression="attribute_not_exists(activity_event_id)")

    def run_task(self, p):
        stop, done, why = threading.Event(), threading.Event(), []
        every = max(1, int(p["heartbeat_timeout_seconds"]) // 3) if "heartbeat_timeout_seconds" in p else 30

        def beat():
            while not done.wait(every):
                try:
                    state = self.heartbeat(p)
                except (ClientError, BotoCoreError) as e:
                    log(f"heartbeat failed, will try again: {e}")
                    continue
                if state != "RUNNING":
                    why.append("cancelled" if state == "CANCELLED_RUNNING" else "lost")
                    stop.set()
                    return

        beating = threading.Thread(target=beat, daemon=True)
        beating.start()
        try:
            output, error = self.handler(p, stop)
        except Exception as e:  # a crashing handler fails the attempt
            output, error = None, f"{type(e).__name__}: {e}"
        done.set()
        beating.join()  # no heartbeat after the report
        try:
            if stop.is_set():
                self.stats["abandoned"] += 1
                if why == ["cancelled"]:
                    self.report(p, "CANCEL", error="cancel acknowledged by the worker")
                else:
                    log(f"{p['activity_exec_id']}: task taken from this worker; stopped it")
            elif error is None:
                self.stats["completed"] += 1
                self.report(p, "COMPLETED", output=output)
            else:
                self.stats["failed"] += 1
                self.report(p, "FAILED", error=error)
        except (ClientError, BotoCoreError) as e:
            # The heartbeat or start-to-close timeout catches it.
            log(f"{p['activity_exec_id']}: report failed: {e}")

    def run(self, max_tasks=None, idle_exit=None):
        wait, idle_since = 0.1, time.monotonic()
        while max_tasks is None or self.stats["claimed"] < max_tasks:
            try:
                got = self.claim()
            except (ClientError, BotoCoreError, ClaimRefused) as e:
                log(f"poll failed: {e}")
                got = None
            if got:
                self.stats["claimed"] += 1
                self.run_task(got)
                wait, idle_since = 0.1, time.monotonic()
                continue
            if idle_exit is not None and time.monotonic() - idle_since >= idle_exit:
                break
            time.sleep(wait)
            wait = min(wait * 2, 5.0)
        return self.stats


class ClaimRefused(Exception):
    """The claim function answered an error (a list it does not serve, a
    malformed request): its message says why."""


def log(text):
    print(f"worker: {text}", file=sys.stderr, flush=True)


def main(argv=None):
    a = argparse.ArgumentParser(description="Claim and run the tasks of a Whimbrel task list (docs/workers.md).")
    a.add_argument("--task-list", required=True)
    a.add_argument("--table-prefix", default=os.environ.get("WHIMBREL_TABLE_PREFIX", "whimbrel_"))
    a.add_argument("--endpoint-url", default=os.environ.get("WHIMBREL_ENDPOINT_URL"),
                   help="DynamoDB endpoint (default: WHIMBREL_ENDPOINT_URL, else boto3's AWS_ENDPOINT_URL*)")
    a.add_argument("--region")
    a.add_argument("--name", default=f"{socket.gethostname()}:{os.getpid()}", help="worker identity")
    a.add_argument("--max-tasks", type=int)
    a.add_argument("--idle-exit", type=float, metavar="SECONDS")
    a.add_argument("--exec", dest="cmd", metavar="CMD", help="run CMD per task: payload on stdin, output on stdout")
    a.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                   help="pass this variable of the worker's environment on to CMD (repeatable)")
    a.add_argument("--claim-function", help="the engine's claim function (default: WHIMBREL_CLAIM_FUNCTION, "
                   "else whimbrel-task-claim; deployed: the stack's output TaskClaimFunctionName)")
    a.add_argument("--claim-in-process", action="store_true",
                   help="claim row by row with the engine's own grant instead (Full Logic API)")
    o = a.parse_args(argv)
    w = Worker(o.task_list, o.name, o.table_prefix, o.endpoint_url, o.region,
               exec_handler(o.cmd, o.pass_env) if o.cmd else None,
               claim_function=o.claim_function, claim_in_process=o.claim_in_process)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # print the summary on a plain kill too
    try:
        w.run(o.max_tasks, o.idle_exit)
    except KeyboardInterrupt:
        pass
    print(json.dumps(w.stats), flush=True)


if __name__ == "__main__":
    main()
