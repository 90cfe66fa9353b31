#!/usr/bin/env bash
# Retries, task-list workers and timeouts end to end on a private local
# stack (its own ports and .stack-workers/): real Lambda activities through
# cargo lambda watch, real `whimbrel worker` processes, the Python boto3
# worker, the monitor of `whimbrel local`. Checks:
#  1. an activity that fails twice then succeeds COMPLETES on attempt 3,
#     `whimbrel status` shows the backoff delays (2 s, then 4 s), and the
#     tables show each next attempt launched never before its time (how
#     soon after is printed: make bench measures latency, and
#     timers_dynamodb.rs proves the wake-up on a virtual clock);
#  2. a `no_retry_on` error fails at once (attempt 1, workflow FAILED);
#  3. 3 `whimbrel worker` processes drain a 200-activity task list with no
#     double claim, and it still COMPLETES when one worker is killed mid-run;
#  4. an `execution_timeout_seconds` ends a workflow FAILED with the reason;
#  5. the Python worker (examples/python-worker) completes a workflow;
#  6. durable timers (`wait` nodes): 30 parallel waits of 2-6 s, one chained
#     after another, one `until` a time: each fires once, never early, by
#     the monitor (`timer-fired:`), and the lateness is printed; a timer of
#     an hour is cancelled with its workflow;
#  7. signals (`signal` nodes): an approval workflow (prepare -> wait for
#     `approve`, 8 s timeout -> publish) COMPLETES with `whimbrel signal`,
#     the signal's input reaching publish, and FAILS when no signal comes
#     (the wait TIMED_OUT); a signal for the ended workflow is refused;
#  8. a concurrency limit: a 100-wide fan-out with `max_concurrency` 5
#     (activities of 0.8 s) COMPLETES, and both the tables sampled while it
#     runs (the workflow item's `slots_used`: one item, so a true sample; a
#     count of in-flight items read one by one can see a slot's old and new
#     holder both) and the history afterwards show at most 5 in flight (and
#     5 at some point: the limit, not the machine, bounded it);
#  9. child workflows (`workflow` nodes): a parent starts four children;
#     one COMPLETES (its result is the node's output), one FAILS (the node
#     FAILS with its reason, the parent FAILS), and the failure cancels the
#     other two nodes at once: the child of the `cancel` one is CANCELLED,
#     the `abandon` one's runs on; `status` links parent and children;
# 10. redrive: a workflow whose middle activity fails on its first attempt
#     (no retry policy) FAILS; `whimbrel redrive` takes it to COMPLETED with
#     the same exec id, and the history shows its completed activity did
#     not run again and the failed one ran once more.
set -euo pipefail
cd "$(dirname "$0")/.."
export WHIMBREL_STACK_DIR=$PWD/.stack-workers
export WHIMBREL_DDB_PORT=${WHIMBREL_DDB_PORT:-18100}
export WHIMBREL_WATCH_PORT=${WHIMBREL_WATCH_PORT:-19100}
export WHIMBREL_FRONT_PORT=${WHIMBREL_FRONT_PORT:-19101}
S=$WHIMBREL_STACK_DIR
WB=${CARGO_TARGET_DIR:-$PWD/target}/debug/whimbrel
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  bash scripts/stack.sh down
}
trap cleanup EXIT
# A failure names itself and leaves the stack's log in place (its tail
# would bury the reason in the summary that make test shows).
fail() { echo "e2e-workers: FAILED: $* (the stack's log: $S/local.log)" >&2; exit 1; }
bash scripts/stack.sh up > "$S.up.log" 2>&1 || { cat "$S.up.log"; fail "stack did not start"; }
set -a; . "$S/env"; set +a
D=tests/e2e-workers
start() { "$WB" start "$1" | awk '$1 == "workflow_exec_id" {print $2}'; }
wait_end() { timeout "${2:-300}" "$WB" result "$1" --wait > "$S/$1.result" 2> "$S/$1.err" || true; "$WB" status "$1" > "$S/$1.status"; }
state_of() { awk 'NR == 1 {print $3}' "$S/$1.status"; }

# 1. Retries with backoff.
s1() {
"$WB" register flaky --definition "$D/flaky.json" > /dev/null
ID=$(start flaky); wait_end "$ID"
[[ $(state_of "$ID") == COMPLETED ]] || { cat "$S/$ID.status"; fail "flaky did not complete"; }
grep -Eq '^flaky +COMPLETED +3 ' "$S/$ID.status" || { cat "$S/$ID.status"; fail "flaky not completed on attempt 3"; }
grep -Eq 'attempt 1 +FAILED .*\(backoff 2s\) +Busy: attempt 1 of 2 fails' "$S/$ID.status" || { cat "$S/$ID.status"; fail "attempt 1 and its 2 s backoff not shown"; }
grep -Eq 'attempt 2 +FAILED .*\(backoff 4s\) +Busy: attempt 2 of 2 fails' "$S/$ID.status" || { cat "$S/$ID.status"; fail "attempt 2 and its 4 s backoff not shown"; }
grep -q '"attempt": 3' "$S/$ID.result" || { cat "$S/$ID.result"; fail "result is not attempt 3's output"; }
"$WB" status "$ID" --output json > "$S/flaky-status.json"
python3 - "$S/flaky-status.json" <<'PY' || fail "a retry's backoff was not kept to the second"
import json, sys
history = json.load(open(sys.argv[1]))["activities"][0]["history"]
late = []
for i, h in enumerate(history):
    if h.get("next_attempt_epoch") is None:
        continue
    launch = next(x for x in history[i + 1:] if "launcher:" in x["event_id"])
    late.append(launch["at_epoch"] - h["next_attempt_epoch"])
    # The delay measured from the tables: the failure to the next launch.
    print(f"e2e-workers: backoff {h['next_attempt_epoch'] - h['at_epoch']} s, next attempt launched {launch['at_epoch'] - h['at_epoch']} s after the failure")
# Never early. How late is load's (make test's parts side by side on 2
# slow cores launched a few 5-8 s late, CI 2026-12-07); that each is
# launched at its second by a wake-up is proven on a virtual clock
# (timers_dynamodb.rs), and make bench measures the lateness. The bound
# only catches a retry that waited for some later event to launch.
assert len(late) == 2 and all(0 <= x <= 30 for x in late), late
PY
echo "e2e-workers: flaky COMPLETED on attempt 3 after backoffs of 2 s and 4 s, neither launched early"
}

# 2. no_retry_on.
s2() {
"$WB" register fatal --definition "$D/fatal.json" > /dev/null
ID=$(start fatal); wait_end "$ID"
[[ $(state_of "$ID") == FAILED ]] || { cat "$S/$ID.status"; fail "fatal did not fail"; }
grep -Eq '^fatal +FAILED +1 ' "$S/$ID.status" || { cat "$S/$ID.status"; fail "fatal was retried"; }
echo "e2e-workers: a no_retry_on error FAILED at once on attempt 1"
}

# 3. A pool of 3 workers drains 200 tasks; one is killed mid-run.
s3() {
python3 - "$S/pool.json" <<'PY'
import json, sys
acts = [{"name": f"t{i}", "task_list": "pool", "input": {"n": i},
         "heartbeat_timeout_seconds": 10, "retry": {"max_attempts": 3, "interval_seconds": 1}}
        for i in range(200)]
json.dump({"activities": acts}, open(sys.argv[1], "w"))
PY
"$WB" register pool --definition "$S/pool.json" > /dev/null
ID=$(start pool)
DOUBLE='python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({\"double\": d[\"n\"] * 2}))"'
for w in 1 2 3; do
  # Worker 1 is slow (5 s per task): killed 1 s into its first task, it
  # dies holding an attempt, which the heartbeat timeout must recover.
  if [[ $w == 1 ]]; then SLEEP=5; else SLEEP=0.1; fi
  "$WB" worker --task-list pool --name "w$w" --idle-exit 60 --exec "sleep $SLEEP; $DOUBLE" \
    > "$S/worker$w.out" 2> "$S/worker$w.log" &
  PIDS+=($!)
done
# The worker logs each claim (`task claimed`); CI 2026-12-07 showed that
# without it the kill fell wherever the 20 s wait ended, which may be
# between two tasks: then nothing is held and nothing is retried.
for _ in $(seq 1 300); do grep -q "task claimed" "$S/worker1.log" 2>/dev/null && break; sleep 0.2; done
grep -q "task claimed" "$S/worker1.log" || fail "worker 1 claimed no task in 60 s"
sleep 1
kill -KILL "${PIDS[0]}"
echo "e2e-workers: killed worker 1 (pid ${PIDS[0]}) mid-run"
# 200 tasks, each a shell and a Python process: 127 s with make test's
# other parts and a busy core beside it here; CI's slower machine passed
# 300 s (2026-12-07).
wait_end "$ID" 900
[[ $(state_of "$ID") == COMPLETED ]] || { cat "$S/$ID.status" | head -20; fail "pool did not complete"; }
"$WB" status "$ID" --output json > "$S/pool-status.json"
HELD=$(grep -o 't[0-9]*::' "$S/worker1.log" | tail -1 | tr -d :)
python3 - "$S/pool-status.json" "$S/$ID.result" "$HELD" <<'PY' || fail "pool outcome is wrong"
import json, sys
doc = json.load(open(sys.argv[1])); result = json.load(open(sys.argv[2]))
acts = doc["activities"]
assert len(acts) == 200 and all(a["state"] == "COMPLETED" for a in acts)
for a in acts:
    claims = [h for h in a["history"] if h["event_id"].startswith("claim:")]
    # One claim per attempt, never two: the claim is a conditional write.
    attempts = [h["event_id"].rsplit(":", 1)[1] for h in claims]
    assert len(attempts) == len(set(attempts)) == a["attempt"], (a["activity_name"], attempts)
    assert a["output"] == {"double": int(a["activity_name"][1:]) * 2}, a["output"]
assert len(result) == 200
retried = [a["activity_name"] for a in acts if a["attempt"] > 1]
assert sys.argv[3] in retried, ("the task the killed worker held was not retried", sys.argv[3], retried)
print("e2e-workers: pool COMPLETED; the killed worker's task", retried, "timed out and COMPLETED on attempt 2")
PY
for p in "${PIDS[@]:1}"; do wait "$p" || true; done
cat "$S"/worker2.out "$S"/worker3.out
}

# 4. Execution timeout.
s4() {
"$WB" register deadline --definition "$D/deadline.json" > /dev/null
ID=$(start deadline); wait_end "$ID" 300
[[ $(state_of "$ID") == FAILED ]] || { cat "$S/$ID.status"; fail "deadline did not fail"; }
grep -q "error: execution timeout: not finished within 5s" "$S/$ID.status" || { cat "$S/$ID.status"; fail "reason not shown"; }
grep -Eq '^waits +CANCELLED' "$S/$ID.status" || { cat "$S/$ID.status"; fail "the waiting activity was not cancelled"; }
echo "e2e-workers: execution_timeout_seconds ended deadline FAILED with the reason"
}

# 5. The Python worker: its protocol tests, then a real workflow.
s5() {
WHIMBREL_TEST_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB "${VENV:-.local/venv}/bin/python3" -m unittest -q \
  examples/python-worker/test_worker.py 2> "$S/py-unittest.log" || { cat "$S/py-unittest.log"; fail "Python worker protocol tests"; }
echo "e2e-workers: Python worker protocol tests: $(tail -1 "$S/py-unittest.log")"
"$WB" register pychain --definition "$D/pychain.json" > /dev/null
ID=$(start pychain)
PY=${VENV:-.local/venv}/bin/python3
"$PY" examples/python-worker/worker.py --task-list py --name py1 --idle-exit 15 \
  --endpoint-url "$AWS_ENDPOINT_URL_DYNAMODB" > "$S/py.out" 2> "$S/py.log" &
PIDS+=($!)
wait_end "$ID"
[[ $(state_of "$ID") == COMPLETED ]] || { cat "$S/$ID.status" "$S/py.log"; fail "the Python worker did not complete pychain"; }
echo "e2e-workers: the Python worker COMPLETED pychain: $(tr -d '\n ' < "$S/$ID.result" | head -c 200)"
}

# 6. Durable timers.
s6() {
python3 - "$S/timers.json" <<'PY'
import datetime, json, sys
acts = [{"name": f"t{i}", "wait": {"seconds": 2 + i % 5}} for i in range(30)]
acts.append({"name": "then", "wait": {"seconds": 1}, "depends_on": ["t0"]})
until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=8)
acts.append({"name": "until", "wait": {"until": until.strftime("%Y-%m-%dT%H:%M:%SZ")}})
json.dump({"activities": acts}, open(sys.argv[1], "w"))
PY
"$WB" register timers --definition "$S/timers.json" > /dev/null
ID=$(start timers); wait_end "$ID" 300
[[ $(state_of "$ID") == COMPLETED ]] || { cat "$S/$ID.status"; fail "timers did not complete"; }
"$WB" status "$ID" --output json > "$S/timers-status.json"
python3 - "$S/timers-status.json" <<'PY' || fail "timers fired wrongly"
import json, sys
acts = json.load(open(sys.argv[1]))["activities"]
late = []
for a in acts:
    due = a.get("wait_until_epoch") or a["start_time_epoch"] + a["wait_seconds"]
    fired = [h for h in a["history"] if h["state"] == "COMPLETED"]
    assert len(fired) == 1 and fired[0]["event_id"].startswith("timer-fired:"), a["history"]
    assert a["output"]["fired_at"] >= due, (a["activity_name"], a["output"], due)
    assert "attempt_token_hash" not in a and a.get("launch", 0) == 0, a
    # An `until` already past when its node started (a slow start on a
    # loaded machine) is due at its start.
    late.append(a["end_time_epoch"] - max(due, a["start_time_epoch"]))
late.sort()
p90 = late[len(late) * 9 // 10]
print(f"e2e-workers: {len(acts)} timers fired once, none early; lateness p50 {late[len(late) // 2]} s, p90 {p90} s, max {late[-1]} s")
# Never early, each once. The lateness is printed, not bounded tightly:
# under make test's four parts side by side on 2 slow cores, CI measured
# p50 3 s and p90 8 s by load alone (2026-12-07). That a timer fires at its
# second (a tick's look-ahead, a wake-up) is proven on a virtual clock
# (timers_dynamodb.rs), and make bench measures p50/p99 unloaded. The
# bound only catches a timer left to some later event.
assert late[0] >= 0 and late[-1] <= 30, late
PY
printf '%s' '{"activities": [{"name": "hour", "wait": {"seconds": 3600}}, {"name": "after", "wait": {"seconds": 0}, "depends_on": ["hour"]}]}' > "$S/hour.json"
"$WB" register hour --definition "$S/hour.json" > /dev/null
ID=$(start hour)
for _ in $(seq 1 60); do "$WB" status "$ID" > "$S/$ID.status" 2>/dev/null && grep -Eq '^hour +RUNNING' "$S/$ID.status" && break; sleep 0.5; done
grep -Eq '^hour +RUNNING' "$S/$ID.status" || { cat "$S/$ID.status"; fail "the hour's timer is not RUNNING"; }
grep -Eq '^  hour +fires at [0-9:]{8} \(wait 3600s\)' "$S/$ID.status" || { cat "$S/$ID.status"; fail "status does not show when the timer fires"; }
"$WB" cancel "$ID" > /dev/null
wait_end "$ID" 300
[[ $(state_of "$ID") == CANCELLED ]] || { cat "$S/$ID.status"; fail "the cancelled timer's workflow is not CANCELLED"; }
grep -Eq '^hour +CANCELLED' "$S/$ID.status" || { cat "$S/$ID.status"; fail "the hour's timer was not cancelled"; }
echo "e2e-workers: a timer of an hour was CANCELLED with its workflow"
}

# 7. Signals: an approval workflow, signalled and not.
s7() {
"$WB" register approval --definition "$D/approval.json" > /dev/null
# publish echoes its launch payload: the prerequisites' outputs.
"$WB" worker --task-list publish --name pub --idle-exit 30 --stdin payload --exec cat \
  > "$S/publish.out" 2> "$S/publish.log" &
PIDS+=($!)
ID=$(start approval)
for _ in $(seq 1 60); do "$WB" status "$ID" > "$S/$ID.status" 2>/dev/null && grep -Eq '^approval +RUNNING' "$S/$ID.status" && break; sleep 0.25; done
grep -Eq '^  approval +"approve": waiting \(times out at [0-9:]{8}\)' "$S/$ID.status" || { cat "$S/$ID.status"; fail "status does not show the signal wait"; }
"$WB" signal "$ID" approve --input '{"by": "ana"}' --id ana-1 --wait 60 > "$S/signal.out" || fail "whimbrel signal"
"$WB" signal "$ID" approve --input '{"by": "bo"}' --id ana-1 > /dev/null 2>&1 && fail "a duplicate signal id was sent twice"
wait_end "$ID" 300
[[ $(state_of "$ID") == COMPLETED ]] || { cat "$S/$ID.status"; fail "the signalled approval did not complete"; }
grep -Eq '^  approval +"approve": received at [0-9:]{8} \(id ana-1\)' "$S/$ID.status" || { cat "$S/$ID.status"; fail "status does not show the signal received"; }
"$WB" status "$ID" --output json > "$S/approval-status.json"
python3 - "$S/approval-status.json" <<'PY' || fail "the signal's input did not reach publish"
import json, sys
acts = {a["activity_name"]: a for a in json.load(open(sys.argv[1]))["activities"]}
assert acts["approval"]["output"] == {"by": "ana"}, acts["approval"]
done = [h for h in acts["approval"]["history"] if h["state"] == "COMPLETED"]
assert len(done) == 1 and done[0]["event_id"].startswith("signal:"), done
assert acts["publish"]["output"]["prerequisites"]["approval"] == {"by": "ana"}, acts["publish"]["output"]
PY
echo "e2e-workers: approval COMPLETED by \`whimbrel signal\`; its input reached publish"
ID=$(start approval); wait_end "$ID" 300
[[ $(state_of "$ID") == FAILED ]] || { cat "$S/$ID.status"; fail "the unsignalled approval did not fail"; }
grep -Eq '^approval +TIMED_OUT' "$S/$ID.status" || { cat "$S/$ID.status"; fail "the signal wait did not time out"; }
grep -Eq '^publish +CANCELLED' "$S/$ID.status" || { cat "$S/$ID.status"; fail "publish ran without approval"; }
"$WB" signal "$ID" approve > /dev/null 2>&1 && fail "a signal for an ended workflow was sent"
echo "e2e-workers: approval without a signal TIMED_OUT and FAILED the workflow"
}

# 8. A concurrency limit.
s8() {
python3 - "$S/limited.json" <<'PY'
import json, sys
acts = [{"name": f"n{i:03}", "lambda": "whimbrel-noop", "input": {"sleep_ms": 800}} for i in range(100)]
json.dump({"max_concurrency": 5, "activities": acts}, open(sys.argv[1], "w"))
PY
"$WB" register limited --definition "$S/limited.json" > /dev/null
ID=$(start limited)
python3 - "$WB" "$ID" <<'PY' || fail "the limit was exceeded, or the fan-out did not finish"
import json, subprocess, sys, time
wb, wf = sys.argv[1], sys.argv[2]
in_flight = ("QUEUED", "PREPARING", "RUNNING", "CANCELLED_RUNNING")
peak, read, samples, deadline = 0, 0, 0, time.time() + 180
while time.time() < deadline:
    out = subprocess.run([wb, "status", wf, "--output", "json"], capture_output=True)
    if out.returncode != 0:  # not started yet
        time.sleep(0.2)
        continue
    doc = json.loads(out.stdout)
    peak = max(peak, doc["workflow"].get("slots_used", 0))
    read = max(read, sum(a["state"] in in_flight for a in doc["activities"]))
    if samples == 5:
        text = subprocess.run([wb, "status", wf], capture_output=True, text=True).stdout
        assert "slots: " in text and " of 5 in use" in text, text
    samples += 1
    if doc["workflow"]["state"] in ("COMPLETED", "FAILED", "CANCELLED"):
        break
    time.sleep(0.2)
assert doc["workflow"]["state"] == "COMPLETED", doc["workflow"]["state"]
import os
json.dump(doc, open(os.path.join(os.environ["WHIMBREL_STACK_DIR"], "limited-status.json"), "w"))
# The history: each attempt in flight from its claim (QUEUED) to its end
# (the attempt's FAILED or TIMED_OUT, or the activity's end), whole
# seconds, half open (a slot is handed on after the end). An attempt that
# failed waits for its retry holding no slot.
ENDS = ("COMPLETED", "FAILED", "TIMED_OUT", "CANCELLED")
spans = []
for a in doc["activities"]:
    start = None
    for h in a["history"]:
        if h["state"] == "QUEUED" and start is None:
            start = h["at_epoch"]
        elif h["state"] in ENDS and start is not None:
            spans.append((start, h["at_epoch"], a["activity_name"]))
            start = None
    if start is not None:
        spans.append((start, a["end_time_epoch"], a["activity_name"]))
def at(t):
    return [n for s, e, n in spans if s <= t < e]
worst, when = max((len(at(t)), t) for t in range(min(s for s, _, _ in spans), max(e for _, e, _ in spans) + 1))
print(f"e2e-workers: limited COMPLETED; at most {peak} slots used over {samples} samples of the workflow item ({read} in flight counted item by item), at most {worst} by the history (at {when}: {at(when)})")
assert peak <= 5 and worst <= 5, (peak, worst)
assert peak >= 4, f"only {peak} in flight at once: the limit was not what bounded it"
PY
}

# 9. Child workflows.
s9() {
for w in family thumbs-ok thumbs-bad slow; do "$WB" register "$w" --definition "$D/$w.json" > /dev/null; done
ID=$(start family); wait_end "$ID" 300
[[ $(state_of "$ID") == FAILED ]] || { cat "$S/$ID.status"; fail "the parent of a failed child did not fail"; }
"$WB" status "$ID" --output json > "$S/family.json"
grep -Eq '^  ok +thumbs-ok::[0-9a-f-]{36} COMPLETED$' "$S/$ID.status" || { cat "$S/$ID.status"; fail "status does not link the children"; }
python3 - "$WB" "$S/family.json" <<'PY' || fail "the children did not end as their policies say"
import json, subprocess, sys
wb, doc = sys.argv[1], json.load(open(sys.argv[2]))
acts = {a["activity_name"]: a for a in doc["activities"]}
states = {n: a["state"] for n, a in acts.items()}
assert states == {"prepare": "COMPLETED", "ok": "COMPLETED", "bad": "FAILED", "slow": "CANCELLED",
                  "kept": "CANCELLED", "publish": "CANCELLED"}, states
assert "ended FAILED" in acts["bad"]["error"] and "Broken" in acts["bad"]["error"], acts["bad"]["error"]
def child(node):
    out = subprocess.run([wb, "status", node, "--output", "json"], capture_output=True, text=True)
    return json.loads(out.stdout)["workflow"]
def child_id(name):
    text = subprocess.run([wb, "status", doc["workflow"]["workflow_exec_id"]], capture_output=True, text=True).stdout
    return next(l.split()[1] for l in text.splitlines() if l.startswith(f"  {name} "))
ok = child(child_id("ok"))
assert ok["state"] == "COMPLETED" and acts["ok"]["output"] == ok["result"], (ok, acts["ok"]["output"])
assert ok["parent"]["workflow_exec_id"] == doc["workflow"]["workflow_exec_id"], ok
import time
for _ in range(40):
    slow, kept = child(child_id("slow")), child(child_id("kept"))
    if slow["state"] == "CANCELLED":
        break
    time.sleep(0.25)
assert slow["state"] == "CANCELLED", slow
assert kept["state"] == "RUNNING", kept
print(f"e2e-workers: family FAILED with its failed child; ok's result {acts['ok']['output']}; slow's child CANCELLED, kept's child still RUNNING")
subprocess.run([wb, "cancel", kept["workflow_exec_id"]], check=True, capture_output=True)
PY
}

# 10. Redrive.
s10() {
"$WB" register redriven --definition "$D/redriven.json" > /dev/null
ID=$(start redriven); wait_end "$ID" 300
[[ $(state_of "$ID") == FAILED ]] || { cat "$S/$ID.status"; fail "the first run did not fail"; }
"$WB" redrive "$ID" --wait 300 > "$S/redrive.out" || fail "whimbrel redrive"
"$WB" status "$ID" > "$S/$ID.status"
[[ $(state_of "$ID") == COMPLETED ]] || { cat "$S/redrive.out" "$S/$ID.status"; fail "the redriven workflow did not complete"; }
"$WB" status "$ID" --output json > "$S/redriven.json"
python3 - "$S/redriven.json" <<'PY' || fail "the history does not show the redrive as it should"
import json, sys
acts = {a["activity_name"]: a for a in json.load(open(sys.argv[1]))["activities"]}
def launches(name):
    return [h for h in acts[name]["history"] if h["event_id"].startswith("launcher:") and h["state"] == "QUEUED"]
assert len(launches("prepare")) == 1, acts["prepare"]["history"]
assert len(launches("once")) == 2, acts["once"]["history"]
assert [h["transition"] for h in acts["once"]["history"]].count("REDRIVE") == 1, acts["once"]["history"]
assert acts["once"]["output"] == {"attempt": 2}, acts["once"]["output"]
assert len(launches("publish")) == 1, acts["publish"]["history"]
print("e2e-workers: redriven COMPLETED; prepare ran once, once ran twice (attempt 2), publish once")
PY
}

# The sections are independent workflows of the one stack: they run side by
# side, each in its own subshell with its own log (and its own workers,
# stopped when it ends), and their logs are shown in order. The script's
# time is its longest section's, not their sum.
# E2E_SECTIONS="3 8" runs only those (a quicker loop while working on one).
read -ra SECTIONS <<< "${E2E_SECTIONS:-1 2 3 4 5 6 7 8 9 10}"
declare -A SPID
for n in "${SECTIONS[@]}"; do
  ( PIDS=(); trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT; t=$SECONDS
    "s$n"; echo "e2e-workers: section $n took $((SECONDS - t)) s" ) > "$S/section-$n.log" 2>&1 &
  SPID[$n]=$!
done
failed=()
for n in "${SECTIONS[@]}"; do
  if wait "${SPID[$n]}"; then cat "$S/section-$n.log"; else cat "$S/section-$n.log"; echo "e2e-workers: section $n FAILED"; failed+=("$n"); fi
done
# Last, so that the tail make test shows has each failed section's reason.
for n in "${failed[@]}"; do echo "e2e-workers: section $n ended:"; tail -8 "$S/section-$n.log" | cut -c1-400; done
[[ ${#failed[@]} == 0 ]] || { echo "e2e-workers: $((${#SECTIONS[@]} - ${#failed[@]})) passed, failed: sections ${failed[*]}"; exit 1; }
echo "e2e-workers: ${#SECTIONS[@]} passed, 0 failed"
