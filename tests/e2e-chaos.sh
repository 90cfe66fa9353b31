#!/usr/bin/env bash
# Chaos end to end on a private local stack (its own ports and .stack-chaos/):
# N wordcount workflows run while `whimbrel local --chaos` drops, duplicates
# and delays async invokes and delivers stream batches again; mid-run the
# runner is killed (SIGKILL, by its PID file) and started again, and must
# resume from its shard checkpoints. Every workflow must reach its
# fault-free end state, COMPLETED, within the timeout.
#
#   bash tests/e2e-chaos.sh [-n N] [--seed S] [--timeout S] [--kill-after S | --no-kill]
#
#   -n N           workflows (default 5)
#   --seed S       chaos seed (default 42; WHIMBREL_CHAOS_SEED)
#   --timeout S    seconds to wait for every workflow after the restart (default 600)
#   --kill-after S kill the runner S seconds after the starts (default: as soon
#                  as both mappings have checkpointed a batch, i.e. when the
#                  first activity events are processed; at the latest after 120 s)
#   --no-kill      do not kill and restart the runner (to tell its effect apart)
#
# The chaos rates are whimbrel local's defaults unless WHIMBREL_CHAOS_*_RATE
# say otherwise. The relaunch window is shortened (WHIMBREL_QUEUED_REDRIVE_SECONDS,
# default here 20) so dropped launches are relaunched within the run.
# Prints a summary (states, chaos actions, restart and resume times) and
# exits 0 only if every workflow COMPLETED. Not part of scripts/test.sh yet.
# Function timeouts are the template's and include the queueing for one of
# the stack's instances: on a crowded machine a large N can fail on
# timeouts rather than on chaos.
set -euo pipefail
cd "$(dirname "$0")/.."
N=5
SEED=${WHIMBREL_CHAOS_SEED:-42}
TIMEOUT=600
KILL_AFTER=auto
while [[ $# -gt 0 ]]; do
  case $1 in
    -n|--workflows) N=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --kill-after) KILL_AFTER=$2; shift 2 ;;
    --no-kill) KILL_AFTER=; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "e2e-chaos: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "e2e-chaos: -n wants a positive integer" >&2; exit 2; }

export WHIMBREL_STACK_DIR=$PWD/.stack-chaos
# Below Linux's ephemeral range (32768-60999): a port in it can be taken
# by an outgoing connection's local end between the check below and the
# bind (seen: cargo lambda watch failed with "Address in use" on 49000).
export WHIMBREL_DDB_PORT=${WHIMBREL_DDB_PORT:-18200}
export WHIMBREL_WATCH_PORT=${WHIMBREL_WATCH_PORT:-19200}
export WHIMBREL_FRONT_PORT=${WHIMBREL_FRONT_PORT:-19201}
export WHIMBREL_QUEUED_REDRIVE_SECONDS=${WHIMBREL_QUEUED_REDRIVE_SECONDS:-20}
export WHIMBREL_CHAOS=1 WHIMBREL_CHAOS_SEED=$SEED
STACK=$WHIMBREL_STACK_DIR
WB=${CARGO_TARGET_DIR:-target}/debug/whimbrel

# Whatever a previous run of this script left (stopped by its PID files),
# then a fresh stack directory: no checkpoints from an older stream.
bash scripts/stack.sh down > /dev/null
rm -rf "$STACK"
# A port already taken would make this run talk to another stack (stack.sh
# only waits for something to listen): refuse instead.
for port in "$WHIMBREL_DDB_PORT" "$WHIMBREL_WATCH_PORT" "$WHIMBREL_FRONT_PORT"; do
  if (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
    echo "e2e-chaos: port $port is in use (another stack?); choose others with WHIMBREL_DDB_PORT, WHIMBREL_WATCH_PORT, WHIMBREL_FRONT_PORT" >&2
    exit 2
  fi
done
trap 'bash scripts/stack.sh down' EXIT
bash scripts/stack.sh up
set -a; . "$STACK/env"; set +a

echo "==> starting $N wordcount workflows (chaos seed $SEED)"
: > "$STACK/workflows"
for i in $(seq 1 "$N"); do
  "$WB" start wordcount --input '{"chunks": 8}' --source "e2e-chaos $i" \
    | awk '$1 == "workflow_exec_id" {print $2}' >> "$STACK/workflows"
done
START=$(date +%s)

states() { # prints one "id state" line per workflow
  while read -r id; do
    state=$("$WB" status "$id" --output json 2>/dev/null \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["workflow"]["state"])' 2>/dev/null || echo UNKNOWN)
    echo "$id $state"
  done < "$STACK/workflows"
}
summary() { awk '{c[$2]++} END {for (s in c) printf "%s=%d ", s, c[s]; print ""}'; }

KILLED=$(date +%s.%N)
if [[ -n $KILL_AFTER ]]; then
  if [[ $KILL_AFTER == auto ]]; then
    # Mid-run: as soon as both shards have a checkpoint (the first activity
    # events are processed when the counts start).
    for _ in $(seq 1 240); do
      if python3 - "$STACK/checkpoints.json" <<'PY' 2>/dev/null; then break; fi
import json, sys
streams = json.load(open(sys.argv[1]))["streams"]
done = [a for a, shards in streams.items() if any(c.get("sequence_number") for c in shards.values())]
sys.exit(0 if len(done) >= 2 else 1)
PY
      sleep 0.5
    done
  else
    sleep "$KILL_AFTER"
  fi
  echo "==> before the kill: $(states | summary)"
  PID=$(cat "$STACK/local.pid")
  kill -KILL -- "-$PID" 2>/dev/null || kill -KILL "$PID"
  while kill -0 "$PID" 2>/dev/null; do sleep 0.1; done
  KILLED=$(date +%s.%N)
  echo "==> runner killed (SIGKILL, pid $PID)"
  cp "$STACK/local.log" "$STACK/local.before-kill.log"
  cp "$STACK/checkpoints.json" "$STACK/checkpoints.at-kill.json" 2>/dev/null || true
  # `up` starts only what is not running: the runner, with the same settings.
  bash scripts/stack.sh up > "$STACK/restart.log" 2>&1 || { cat "$STACK/restart.log"; exit 1; }
  LISTENING=$(date +%s.%N)
  echo "==> runner restarted (pid $(cat "$STACK/local.pid")), listening $(python3 -c "print(f'{$LISTENING - $KILLED:.1f}')") s after the kill"
fi
DEADLINE=$(( $(date +%s) + TIMEOUT ))
while :; do
  states > "$STACK/states"
  if ! awk '$2 !~ /^(COMPLETED|FAILED|CANCELLED)$/ {exit 1}' "$STACK/states"; then
    if (( $(date +%s) >= DEADLINE )); then
      echo "==> timeout after ${TIMEOUT}s: $(summary < "$STACK/states")"
      break
    fi
    echo "    $(( $(date +%s) - START ))s: $(summary < "$STACK/states")"
    sleep 5
    continue
  fi
  break
done
ELAPSED=$(( $(date +%s) - START ))

python3 - "$STACK" "$KILLED" "$ELAPSED" "$WHIMBREL_FRONT_PORT" <<'PY'
import json, re, sys, urllib.request
from datetime import datetime
stack, killed, elapsed, port = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
ansi = re.compile(r"\x1b\[[0-9;]*m")
def lines(name):
    try:
        return [ansi.sub("", l) for l in open(f"{stack}/{name}", errors="replace")]
    except FileNotFoundError:
        return []
def ts(line):
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", line)
    return datetime.fromisoformat(m.group(1)).timestamp() if m else None
before, after = lines("local.before-kill.log"), lines("local.log")
kinds = {
    "async invokes dropped": "CHAOS dropping async invoke",
    "async invokes duplicated": "CHAOS duplicating async invoke",
    "async invokes delayed": "CHAOS delaying async invoke",
    "stream batches delivered again": "CHAOS delivering a successful stream batch again",
}
print("chaos actions (before kill + after restart):")
for k, pat in kinds.items():
    print(f"  {k:32} {sum(pat in l for l in before)} + {sum(pat in l for l in after)}")
resumed = [l for l in after if "resuming shard after its checkpoint" in l]
started = next((ts(l) for l in after if "front listening" in l), None)
print(f"shards resumed from a checkpoint after the restart: {len(resumed)}")
for l in resumed:
    t = ts(l)
    m = re.search(r"function=(\S+).*after=(\S+)", l)
    if t and m:
        print(f"  {m.group(1)} after {m.group(2)}: {t - killed:.1f} s after the kill" + (f", {t - started:.2f} s after the runner started" if started else ""))
if not resumed:
    print("  none: the runner read its shards from the start again")
onfail = lines("on-failure.jsonl")
print(f"on-failure records: {len(onfail)}")
for l in onfail[:5]:
    r = json.loads(l)
    print(f"  {r['requestContext']['condition']} {r['requestContext']['functionArn'].split(':')[-1]} {r['DDBStreamBatchInfo']['batchSize']} records")
try:
    c = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/whimbrel/invocations", timeout=5))
    print("invocations since the restart:", ", ".join(f"{k}={v}" for k, v in c.items()))
except Exception as e:
    print("invocation counters unavailable:", e)
print(f"elapsed since the starts: {elapsed} s")
PY

FAILED=0
while read -r id state; do
  if [[ $state != COMPLETED ]]; then
    FAILED=$((FAILED + 1))
    echo "e2e-chaos: $id ended $state (expected COMPLETED)"
    "$WB" status "$id" | sed 's/^/    /' || true
  fi
done < "$STACK/states"
echo "e2e-chaos: $((N - FAILED)) passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
