#!/usr/bin/env bash
# Redrive end to end on a private local stack (its own ports and
# .stack-redrive/): every function is down when a workflow is requested, so
# the stream mapping (MaximumRetryAttempts 0 here) gives the request's
# record up at once: its on-failure record goes to the emulated
# StreamFailureQueue, whose SQS event source mapping invokes the
# stream-redrive function, which fails too while the functions are down
# (the message comes back after the visibility timeout, 5 s here). The
# functions come back; the redrive function reads the record back from
# the stream and starts the workflow, which must end COMPLETED with nobody
# running `whimbrel replay` (design.md § 8.6).
#
#   bash tests/e2e-redrive.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export WHIMBREL_STACK_DIR=$PWD/.stack-redrive
export WHIMBREL_DDB_PORT=${WHIMBREL_DDB_PORT:-18400}
export WHIMBREL_WATCH_PORT=${WHIMBREL_WATCH_PORT:-19400}
export WHIMBREL_FRONT_PORT=${WHIMBREL_FRONT_PORT:-19401}
export WHIMBREL_MAXIMUM_RETRY_ATTEMPTS=0 WHIMBREL_VISIBILITY_TIMEOUT_SECONDS=5
# An invocation of a function whose instances are down waits this long.
export WHIMBREL_FUNCTION_TIMEOUT_SECONDS=15
STACK=$WHIMBREL_STACK_DIR
WB=${CARGO_TARGET_DIR:-target}/debug/whimbrel
fail() { echo "e2e-redrive: FAILED: $*" >&2; tail -40 "$STACK/local.log" >&2 || true; exit 1; }

bash scripts/stack.sh down > /dev/null
rm -rf "$STACK"
trap 'bash scripts/stack.sh down > /dev/null' EXIT
bash scripts/stack.sh up > "$STACK.up.log" 2>&1 || { cat "$STACK.up.log"; fail "stack did not come up"; }
set -a; . "$STACK/env"; set +a

bash scripts/stack.sh stop-functions
ID=$("$WB" start wordcount --input '{"text": "one two two three three three"}' | awk '$1 == "workflow_exec_id" {print $2}')
echo "e2e-redrive: requested $ID with every function down"
for _ in $(seq 1 120); do
  [[ -s $STACK/on-failure.jsonl ]] && break
  sleep 1
done
[[ -s $STACK/on-failure.jsonl ]] || fail "the mapping gave nothing up"
echo "e2e-redrive: the request's record was given up: $(head -c 200 "$STACK/on-failure.jsonl")"
# At least one redrive invocation fails while the functions are down.
for _ in $(seq 1 120); do
  grep -q "messages not processed" "$STACK/local.log" && break
  sleep 1
done
grep -q "messages not processed" "$STACK/local.log" || fail "no redrive attempt failed while the functions were down"
bash scripts/stack.sh start-functions
echo "e2e-redrive: functions back"
state=
for _ in $(seq 1 180); do
  state=$("$WB" status "$ID" 2>/dev/null | awk 'NR == 1 {print $3}') || true
  [[ $state == COMPLETED ]] && break
  sleep 1
done
[[ $state == COMPLETED ]] || { "$WB" status "$ID" || true; fail "$ID is ${state:-unknown}, not COMPLETED"; }
grep -q '"redriven"\|redriven' "$STACK/functions.log" || fail "the redrive function logged no redrive"
[[ ! -s $STACK/dead-letter.jsonl ]] || fail "messages were dead-lettered: $(cat "$STACK/dead-letter.jsonl")"
echo "e2e-redrive: $ID COMPLETED after its given-up request was redriven"
echo "e2e-redrive: 1 passed, 0 failed"
