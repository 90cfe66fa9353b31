#!/usr/bin/env bash
# `make bench`: cost and latency on the local stack (not part of the tests).
#  - a chain of 10 no-op activities and fan-out/fan-ins of 100 and 1,000 (start ->
#    N parallel -> join; the cost per activity should not grow with N),
#    after a warm-up run of 16 parallel no-ops (DynamoDB Local in memory,
#    fresh for this run), then 1,000 wide with 1 KB inputs and outputs,
#    and 10,000 wide (BENCH_FAN_WIDTH);
#  - DynamoDB requests per activity by operation, counted by the engine's
#    store (WHIMBREL_METRICS_FILE), Lambda invocations per activity (counted
#    by whimbrel local), wall time insert -> end, on-demand cost;
#  - 1,000 timers: cost per timer, and their lateness (p50, p99) from the
#    tables;
#  - 100 signal waits, each signalled (an execution keeps at most 100 signals, docs/limits.md § 3): cost per signal, latency (p50, p99);
#  - a limited fan-out: 100 no-ops, max_concurrency 5: cost per activity;
#  - 50 child workflows of one no-op: cost per child, the child's start
#    latency from the tables;
#  - a redrive of a chain of 20 whose last activity failed once: its cost
#    and time from the redrive row to COMPLETED;
#  - one 100-record stream batch through the activity-event handler, one
#    item at a time and 16 at once (whimbrel bench-batch);
#  - the three release functions: size, zipped as a Lambda `bootstrap`, and
#    start-to-ready time against a stub Runtime API (scripts/startup.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# BENCH_ONLY="bench-chain episodic" (or with commas) runs those rows only,
# after the warm-up; unset, every row.
ROWS="bench-chain bench-fan bench-fan-1000 fan-wide fan-10000 timers limited signals children redrive episodic batch release"
BENCH_ONLY=${BENCH_ONLY:-}
BENCH_ONLY=${BENCH_ONLY//,/ }
for r in $BENCH_ONLY; do
  [[ " $ROWS " == *" $r "* ]] || { echo "BENCH_ONLY: no row $r (rows: $ROWS)" >&2; exit 2; }
done
# A private, fresh stack (own ports and folder), so figures do not depend on
# what a `make up` stack already holds.
export WHIMBREL_STACK_DIR=$PWD/.stack-bench
export WHIMBREL_DDB_PORT=${WHIMBREL_DDB_PORT:-28000}
export WHIMBREL_WATCH_PORT=${WHIMBREL_WATCH_PORT:-29000}
export WHIMBREL_FRONT_PORT=${WHIMBREL_FRONT_PORT:-29001}
# Transactions priced by AWS's rules (DynamoDB Local reports a flat 4 units
# per table per transaction; crates/whimbrel-core/src/store/priced.rs).
export WHIMBREL_PRICE_TRANSACTIONS=true
# The launch targets' async event age as deployed (the template's default,
# six hours): a 10,000-wide fan-out's launches wait in the async queue
# longer than the local stack's 60 s, and the engine must not launch again
# what the queue still holds (scripts/stack.sh).
export WHIMBREL_LAUNCH_EVENT_AGE_SECONDS=${WHIMBREL_LAUNCH_EVENT_AGE_SECONDS:-21600}
trap 'bash scripts/stack.sh down' EXIT
bash scripts/stack.sh down > /dev/null
rm -f "$WHIMBREL_STACK_DIR/metrics.jsonl"
bash scripts/stack.sh up
set -a; . "$WHIMBREL_STACK_DIR/env"; set +a
WB=${CARGO_TARGET_DIR:-target}/debug/whimbrel
FRONT=http://127.0.0.1:$WHIMBREL_FRONT_PORT
bench() { "$WB" bench "$@" --front "$FRONT" --metrics-file "$WHIMBREL_METRICS_FILE"; }
want() { [[ -z ${BENCH_ONLY:-} || " $BENCH_ONLY " == *" $1 "* ]]; }
echo "==> warm-up"
bench bench-warm > /dev/null
for wf in bench-chain bench-fan bench-fan-1000; do
  want "$wf" || continue
  echo; echo "==================== $wf ===================="
  bench "$wf"
done
# What payloads cost: 1,000 wide with 1 KB inputs and outputs (the join's
# launch then passes 1 MB: outputs go by reference).
if want fan-wide; then
echo; echo "==================== bench-fan-wide: 1000 wide, 1 KB inputs and outputs ===================="
bench bench-fan-wide --input '{"width": 1000, "input_bytes": 1000, "output_bytes": 1000}'
fi
# What width costs: a 10,000-wide fan-out/fan-in, too wide for a static
# definition's item (planned by bench-fan-decider; BENCH_FAN_WIDTH=0 skips
# it).
WIDE=${BENCH_FAN_WIDTH:-10000}
if [[ $WIDE -gt 0 ]] && want fan-10000; then
  echo; echo "==================== bench-fan-wide: $WIDE wide ===================="
  bench bench-fan-wide --input "{\"width\": $WIDE}" --timeout-seconds "${BENCH_FAN_TIMEOUT:-3600}"
fi
# Timers (design.md 9): 1,000 wait nodes of 5 to 65 s (read ahead by a
# tick, or woken by the timer queue): cost per timer, then their lateness
# from the tables (end_time_epoch - fire time), p50 and p99.
if want timers; then
echo; echo "==================== bench-timers: 1000 timers of 5-65 s ===================="
python3 - "$WHIMBREL_STACK_DIR/bench-timers.json" <<'PY'
import json, sys
acts = [{"name": f"t{i}", "wait": {"seconds": 5 + i % 61}} for i in range(1000)]
json.dump({"activities": acts}, open(sys.argv[1], "w"))
PY
"$WB" register bench-timers --definition "$WHIMBREL_STACK_DIR/bench-timers.json" > /dev/null
bench bench-timers --timeout-seconds 600
ID=$("$WB" start bench-timers | awk '$1 == "workflow_exec_id" {print $2}')
"$WB" result "$ID" --wait > /dev/null
"$WB" status "$ID" --output json > "$WHIMBREL_STACK_DIR/bench-timers-status.json"
python3 - "$WHIMBREL_STACK_DIR/bench-timers-status.json" <<'PY'
import json, sys
acts = json.load(open(sys.argv[1]))["activities"]
late = sorted(a["end_time_epoch"] - (a["start_time_epoch"] + a["wait_seconds"]) for a in acts)
pick = lambda q: late[min(len(late) - 1, int(q * len(late)))]
print(f"timer lateness over {len(late)} timers: p50 {pick(0.5)} s, p99 {pick(0.99)} s, max {late[-1]} s, early {sum(x < 0 for x in late)}")
PY
fi
# A limited fan-out (design.md 9.3): 100 no-ops, at most 5 at a time: what
# the slot writes on the workflow item cost per activity, against the
# unlimited bench-fan.
if want limited; then
echo; echo "==================== bench-limited: 100 wide, max_concurrency 5 ===================="
python3 - "$WHIMBREL_STACK_DIR/bench-limited.json" <<'PY'
import json, sys
acts = [{"name": f"n{i:03}", "lambda": "whimbrel-noop"} for i in range(100)]
json.dump({"max_concurrency": 5, "activities": acts}, open(sys.argv[1], "w"))
PY
"$WB" register bench-limited --definition "$WHIMBREL_STACK_DIR/bench-limited.json" > /dev/null
bench bench-limited --timeout-seconds 600
fi
# Signals (design.md 9.2): 100 signal waits, each sent its own signal by a
# client (boto3 PutItem, as any client would) once the workflow runs: the
# engine's cost per signal (the client's PutItem is not counted, as a
# start request's is not), and the latency from the put to the wait's
# COMPLETED (end_time_epoch, whole seconds).
if want signals; then
echo; echo "==================== bench-signals: 100 signal waits, each signalled ===================="
python3 - "$WHIMBREL_STACK_DIR/bench-signals.json" <<'PY'
import json, sys
acts = [{"name": f"s{i}", "signal": f"go{i}", "timeout_seconds": 600} for i in range(100)]
json.dump({"activities": acts}, open(sys.argv[1], "w"))
PY
"$WB" register bench-signals --definition "$WHIMBREL_STACK_DIR/bench-signals.json" > /dev/null
bench bench-signals --timeout-seconds 600 > "$WHIMBREL_STACK_DIR/bench-signals.out" &
BENCH_PID=$!
ID=
for _ in $(seq 1 120); do
  ID=$("$WB" list --state RUNNING --since-seconds 300 | awk '$1 ~ /^bench-signals::/ {print $1; exit}')
  [[ -n $ID ]] && break; sleep 0.5
done
[[ -n $ID ]] || { echo "bench-signals did not start"; exit 1; }
"${VENV:-.local/venv}/bin/python3" - "$ID" "${WHIMBREL_TABLE_PREFIX:-whimbrel_}signal" <<'PY'
import os, sys, time, boto3
wf, table = sys.argv[1], sys.argv[2]
db = boto3.client("dynamodb", endpoint_url=os.environ["AWS_ENDPOINT_URL_DYNAMODB"])
for i in range(100):
    now = time.time()
    db.put_item(TableName=table, Item={
        "workflow_exec_id": {"S": wf}, "signal_key": {"S": f"go{i}#b{i}"},
        "name": {"S": f"go{i}"}, "signal_id": {"S": f"b{i}"},
        "when_epoch": {"N": str(int(now))},
        "input": {"M": {"sent_ms": {"N": str(int(now * 1000))}}}})
PY
wait "$BENCH_PID"; cat "$WHIMBREL_STACK_DIR/bench-signals.out"
"$WB" status "$ID" --output json > "$WHIMBREL_STACK_DIR/bench-signals-status.json"
python3 - "$WHIMBREL_STACK_DIR/bench-signals-status.json" <<'PY'
import json, sys
acts = json.load(open(sys.argv[1]))["activities"]
lat = sorted(a["end_time_epoch"] - a["output"]["sent_ms"] // 1000 for a in acts)
pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
print(f"signal latency (put -> COMPLETED, whole seconds) over {len(lat)} signals: p50 {pick(0.5)} s, p99 {pick(0.99)} s, max {lat[-1]} s")
PY
fi
# Child workflows (design.md 9.5): a parent of 50 child nodes, each
# starting bench-child (one no-op). `whimbrel bench` counts every
# function's requests until the parent ends, the children's included, so
# its "per activity" is per child workflow (its node in the parent, its
# request row, its start, its no-op, its end told to the parent). Then,
# from the tables (whole seconds): the node's RUNNING -> the child's
# start, and the child's end -> the node's COMPLETED.
if want children; then
echo; echo "==================== bench-children: 50 child workflows of one no-op ===================="
python3 - "$WHIMBREL_STACK_DIR/bench-child.json" "$WHIMBREL_STACK_DIR/bench-children.json" <<'PY'
import json, sys
json.dump({"activities": [{"name": "work", "lambda": "whimbrel-noop"}]}, open(sys.argv[1], "w"))
acts = [{"name": f"c{i:02}", "workflow": "bench-child", "input": {"i": i}} for i in range(50)]
json.dump({"activities": acts}, open(sys.argv[2], "w"))
PY
"$WB" register bench-child --definition "$WHIMBREL_STACK_DIR/bench-child.json" > /dev/null
"$WB" register bench-children --definition "$WHIMBREL_STACK_DIR/bench-children.json" > /dev/null
bench bench-children --timeout-seconds 600 | tee "$WHIMBREL_STACK_DIR/bench-children.out"
ID=$(awk '$1 == "workflow" {print $2; exit}' "$WHIMBREL_STACK_DIR/bench-children.out")
"$WB" status "$ID" --output json > "$WHIMBREL_STACK_DIR/bench-children-status.json"
"${VENV:-.local/venv}/bin/python3" - "$WHIMBREL_STACK_DIR/bench-children-status.json" "$ID" "${WHIMBREL_TABLE_PREFIX:-whimbrel_}workflow_exec" <<'PY'
import json, os, sys, boto3
nodes = {a["activity_exec_id"]: a for a in json.load(open(sys.argv[1]))["activities"]}
db = boto3.client("dynamodb", endpoint_url=os.environ["AWS_ENDPOINT_URL_DYNAMODB"])
children, kw = [], {}
while True:
    page = db.scan(TableName=sys.argv[3], FilterExpression="#p.workflow_exec_id = :p",
                   ExpressionAttributeNames={"#p": "parent"},
                   ExpressionAttributeValues={":p": {"S": sys.argv[2]}}, **kw)
    children += page["Items"]
    if "LastEvaluatedKey" not in page: break
    kw = {"ExclusiveStartKey": page["LastEvaluatedKey"]}
start, end = [], []
for c in children:
    node = nodes[c["parent"]["M"]["activity_exec_id"]["S"]]
    running = min(h["at_epoch"] for h in node["history"] if h["state"] == "RUNNING")
    start.append(int(c["start_time_epoch"]["N"]) - running)
    end.append(node["end_time_epoch"] - int(c["end_time_epoch"]["N"]))
def line(what, xs):
    xs = sorted(xs); pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]
    print(f"{what} over {len(xs)} children (whole seconds): p50 {pick(0.5)} s, p99 {pick(0.99)} s, max {xs[-1]} s")
line("child start latency (node RUNNING -> child start)", start)
line("child end -> node COMPLETED", end)
PY
fi
# Redrive (design.md 9.4): a chain of 20 no-ops whose last fails on its
# first attempt, with no retry, so the workflow FAILs; then `whimbrel bench
# --redrive` inserts the redrive request and measures from that row to
# COMPLETED: the redrive reads the 20 activities, counts the 19 COMPLETED
# ones anew and runs the last again.
if want redrive; then
echo; echo "==================== bench-redrive: a chain of 20 no-ops, the last failing once, redriven ===================="
python3 - "$WHIMBREL_STACK_DIR/bench-redrive.json" <<'PY'
import json, sys
acts = [{"name": f"n{i:02}", "lambda": "whimbrel-noop"} for i in range(1, 21)]
for a, b in zip(acts, acts[1:]): b["depends_on"] = [a["name"]]
acts[-1]["input"] = {"fail_attempts": 1, "error": "Flaky"}
json.dump({"activities": acts}, open(sys.argv[1], "w"))
PY
"$WB" register bench-redrive --definition "$WHIMBREL_STACK_DIR/bench-redrive.json" > /dev/null
ID=$("$WB" start bench-redrive | awk '$1 == "workflow_exec_id" {print $2}')
timeout 120 "$WB" result "$ID" --wait > /dev/null 2>&1 || true
STATE=$("$WB" status "$ID" | awk 'NR == 1 {print $3}')
[[ $STATE == FAILED ]] || { echo "bench-redrive: the first run ended ${STATE:-unknown}, not FAILED"; exit 1; }
bench bench-redrive --redrive "$ID" --timeout-seconds 120
fi
# An episodic chain of 10 (design.md 10): the examples' `marathon`
# decider schedules each step when the last ends, so every activity costs
# a decision (an append, a start, the decider's Invoke, a commit, the
# node's creation): its cost per activity against bench-chain's, and the
# decider's Invoke round trip (DecisionLatencyMs, from the functions' EMF
# lines) over the decisions of this stack's run.
if want episodic; then
echo; echo "==================== bench-episodic: an episodic chain of 10 ===================="
"$WB" register marathon --lambda episodes-decider > /dev/null
bench marathon --input '{"total": 10}' --timeout-seconds 300
python3 - "$WHIMBREL_STACK_DIR/functions.log" <<'PY'
import json, sys
vals = []
for line in open(sys.argv[1], errors="replace"):
    i = line.find('{"_aws"')
    if i < 0:
        continue
    try:
        v = json.loads(line[i:]).get("DecisionLatencyMs")
    except ValueError:
        continue
    vals += v if isinstance(v, list) else [v] if v is not None else []
vals.sort()
pick = lambda q: vals[min(len(vals) - 1, int(q * len(vals)))]
print(f"decision latency (the decider's Invoke) over {len(vals)} decisions: p50 {pick(0.5):.1f} ms, p99 {pick(0.99):.1f} ms")
PY
fi
if want batch; then
echo; echo "==================== one stream batch, items one at a time and concurrently ===================="
# In-process through handlers::activity_events, on this stack's DynamoDB
# Local under its own table prefix (the stack's functions never see it).
RUST_LOG=error "$WB" --endpoint-url "$AWS_ENDPOINT_URL_DYNAMODB" --table-prefix benchbatch_ bench-batch --runs 5
fi
if want release; then
echo; echo "==================== release functions: size and start-up ===================="
cargo build --release --quiet --locked -p whimbrel-workflow-request -p whimbrel-activity-event -p whimbrel-heartbeat-monitor
python3 scripts/startup.py "${CARGO_TARGET_DIR:-target}"/release/whimbrel-{workflow-request,activity-event,heartbeat-monitor}
fi
