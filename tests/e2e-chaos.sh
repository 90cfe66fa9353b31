#!/usr/bin/env bash
# Chaos end to end on a private local stack (its own ports and .stack-chaos/):
# N wordcount workflows run while `whimbrel local --chaos` drops, duplicates
# and delays async invokes and delivers stream batches again; mid-run the
# runner is killed (SIGKILL, by its PID file) and started again, and must
# resume from its shard checkpoints. Every workflow must reach its
# fault-free end state, COMPLETED, within the timeout, and every kind of
# chaos action must have happened (else the run proves nothing about it).
#
#   bash tests/e2e-chaos.sh [-n N] [--seed S] [--timeout S] [--kill-after-batches B | --no-kill]
#
#   -n N                   workflows (default 5)
#   --seed S               chaos seed (default 4, whose run has every kind of
#                          action; WHIMBREL_CHAOS_SEED)
#   --timeout S            seconds to wait for every workflow after the restart (default 600)
#   --kill-after-batches B kill the runner once it has processed B stream
#                          batches (default 6: more than 5 requests can take,
#                          so with -n 5 both mappings have a checkpoint)
#   --no-kill              do not kill and restart the runner (to tell its effect apart)
#
# What costs time is the same from run to run, so the run's length is:
#  - chaos decides from the seed and what an event is, not when it comes:
#    a launch by its activity, attempt, launch number, input and
#    prerequisites' outputs (not its run's ids), a batch by its table and
#    place in its shard's poller (the first runner's or the restarted one's).
#    Each workflow counts a text of its own, so its launches are events of
#    their own. At most WHIMBREL_CHAOS_MAX_ACTIONS (default here 20) actions
#    of each kind per runner.
#  - The kill is at a point of the run, not of the clock: after its B-th
#    batch the runner starts no new work, lets the work under way end,
#    logs "CHAOS paused" and waits (whimbrel local
#    --chaos-pause-after-batches). Nothing it accepted dies with it; it is
#    started again alone (stack.sh start-local: no build, no warm-up).
#  - A dropped launch waits out the relaunch window, here 20 s: the longer
#    of WHIMBREL_QUEUED_REDRIVE_SECONDS and WHIMBREL_LAUNCH_EVENT_AGE_SECONDS
#    (the stack's default event age, 60 s, would set it otherwise).
#  - The states are polled every second.
# The chaos rates are whimbrel local's defaults unless WHIMBREL_CHAOS_*_RATE
# say otherwise.
# Prints a summary (states, chaos actions, restart and resume times) and
# exits 0 only if every workflow COMPLETED and every kind of action happened.
# Function timeouts are the template's and include the queueing for one of
# the stack's instances: on a crowded machine a large N can fail on
# timeouts rather than on chaos.
set -euo pipefail
cd "$(dirname "$0")/.."
N=5
SEED=${WHIMBREL_CHAOS_SEED:-4}
TIMEOUT=600
KILL_AFTER_BATCHES=6
while [[ $# -gt 0 ]]; do
  case $1 in
    -n|--workflows) N=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --kill-after-batches) KILL_AFTER_BATCHES=$2; shift 2 ;;
    --no-kill) KILL_AFTER_BATCHES=; shift ;;
    -h|--help) sed -n '2,44p' "$0"; exit 0 ;;
    *) echo "e2e-chaos: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "e2e-chaos: -n wants a positive integer" >&2; exit 2; }
[[ -z $KILL_AFTER_BATCHES || $KILL_AFTER_BATCHES =~ ^[1-9][0-9]*$ ]] ||
  { echo "e2e-chaos: --kill-after-batches wants a positive integer" >&2; exit 2; }

export WHIMBREL_STACK_DIR=$PWD/.stack-chaos
# Below Linux's ephemeral range (32768-60999): a port in it can be taken
# by an outgoing connection's local end between the check below and the
# bind (seen: cargo lambda watch failed with "Address in use" on 49000).
export WHIMBREL_DDB_PORT=${WHIMBREL_DDB_PORT:-18200}
export WHIMBREL_WATCH_PORT=${WHIMBREL_WATCH_PORT:-19200}
export WHIMBREL_FRONT_PORT=${WHIMBREL_FRONT_PORT:-19201}
export WHIMBREL_QUEUED_REDRIVE_SECONDS=${WHIMBREL_QUEUED_REDRIVE_SECONDS:-20}
export WHIMBREL_LAUNCH_EVENT_AGE_SECONDS=${WHIMBREL_LAUNCH_EVENT_AGE_SECONDS:-20}
export WHIMBREL_CHAOS=1 WHIMBREL_CHAOS_SEED=$SEED
export WHIMBREL_CHAOS_MAX_ACTIONS=${WHIMBREL_CHAOS_MAX_ACTIONS:-20}
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
# The first runner only pauses (the restarted one must not).
env ${KILL_AFTER_BATCHES:+WHIMBREL_CHAOS_PAUSE_AFTER_BATCHES=$KILL_AFTER_BATCHES} bash scripts/stack.sh up
set -a; . "$STACK/env"; set +a

echo "==> starting $N wordcount workflows (chaos seed $SEED)"
# Workflow $1's text: as long as the default one (README.md), its own
# words on every line, so every chunk and count differs between workflows.
text() {
  awk -v w="$1" 'BEGIN { for (i = 1; i <= 960; i++)
    printf "workflow %s line %d: the quick brown fox jumps over the lazy dog\n", w, i }'
}
: > "$STACK/workflows"
for i in $(seq 1 "$N"); do
  text "$i" > "$STACK/text-$i"
  "$WB" start wordcount --input-file "$STACK/text-$i" --source "e2e-chaos $i" \
    | awk '$1 == "workflow_exec_id" {print $2}' >> "$STACK/workflows"
done
START=$(date +%s.%N)
since() { python3 -c "print(f'{$(date +%s.%N) - $1:.1f}')"; }

ENDED='^(COMPLETED|FAILED|CANCELLED)$'
states() { # prints one "id state" line per workflow; one that ended (in $STACK/states) is not asked again
  while read -r id; do
    state=$(awk -v id="$id" -v ended="$ENDED" '$1 == id && $2 ~ ended {print $2}' "$STACK/states" 2>/dev/null || true)
    if [[ -z $state ]]; then
      state=$("$WB" status "$id" --output json 2>/dev/null \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["workflow"]["state"])' 2>/dev/null || echo UNKNOWN)
    fi
    echo "$id $state"
  done < "$STACK/workflows"
}
summary() { awk '{c[$2]++} END {for (s in c) printf "%s=%d ", s, c[s]; print ""}'; }

KILLED=$(date +%s.%N)
if [[ -n $KILL_AFTER_BATCHES ]]; then
  for _ in $(seq 1 600); do
    if grep -q "CHAOS paused" "$STACK/local.log"; then break; fi
    sleep 0.2
  done
  if grep -q "CHAOS paused" "$STACK/local.log"; then
    echo "==> runner paused after $KILL_AFTER_BATCHES stream batches, $(since "$START") s after the starts, nothing under way"
  else
    echo "e2e-chaos: the runner did not pause after $KILL_AFTER_BATCHES batches within 120 s; killing it where it is"
  fi
  echo "==> before the kill: $(states | summary)"
  PID=$(cat "$STACK/local.pid")
  kill -KILL -- "-$PID" 2>/dev/null || kill -KILL "$PID"
  while kill -0 "$PID" 2>/dev/null; do sleep 0.1; done
  KILLED=$(date +%s.%N)
  echo "==> runner killed (SIGKILL, pid $PID)"
  cp "$STACK/local.log" "$STACK/local.before-kill.log"
  cp "$STACK/checkpoints.json" "$STACK/checkpoints.at-kill.json" 2>/dev/null || true
  # The runner alone, with the same settings but the pause.
  bash scripts/stack.sh start-local > "$STACK/restart.log" 2>&1 || { cat "$STACK/restart.log"; exit 1; }
  echo "==> runner restarted (pid $(cat "$STACK/local.pid")), listening $(since "$KILLED") s after the kill"
fi
DEADLINE=$(( $(date +%s) + TIMEOUT ))
rm -f "$STACK/states"
last=
while :; do
  states > "$STACK/states.new"
  mv "$STACK/states.new" "$STACK/states"
  if awk -v ended="$ENDED" '$2 !~ ended {exit 1}' "$STACK/states"; then break; fi
  if (( $(date +%s) >= DEADLINE )); then
    echo "==> timeout after ${TIMEOUT}s: $(summary < "$STACK/states")"
    break
  fi
  now=$(summary < "$STACK/states")
  [[ $now == "$last" ]] || echo "    $(since "$START")s: $now"
  last=$now
  sleep 1
done
ELAPSED=$(since "$START")

VACUOUS=0
python3 - "$STACK" "$KILLED" "$ELAPSED" "$WHIMBREL_FRONT_PORT" "$SEED" <<'PY' || VACUOUS=1
import json, re, sys, urllib.request
from datetime import datetime
stack, killed, elapsed, port, seed = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
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
missing = []
for k, pat in kinds.items():
    b, a = sum(pat in l for l in before), sum(pat in l for l in after)
    print(f"  {k:32} {b} + {a}")
    if b + a == 0:
        missing.append(k)
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
if missing:
    print(f"e2e-chaos: no {', no '.join(missing)} with seed {seed}: the run proves nothing about them; choose another --seed")
    sys.exit(1)
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
[[ $FAILED -eq 0 && $VACUOUS -eq 0 ]]
