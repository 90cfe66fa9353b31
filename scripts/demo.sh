#!/usr/bin/env bash
# The main job: bring the local stack up, insert one whimbrel_workflow_request
# row for `wordcount`, show live progress until it ends, print the final
# activity table and result, bring the stack down.
#   scripts/demo.sh            exits 0 only if the workflow COMPLETED
#   scripts/demo.sh --failure  one `count` fails: exits 0 only if the
#                              workflow FAILED with `merge` CANCELLED
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-}
KEEP=${WHIMBREL_KEEP_STACK:-}
[[ -n $KEEP ]] || trap 'scripts/stack.sh down' EXIT
STACK=${WHIMBREL_STACK_DIR:-$PWD/.stack}
scripts/stack.sh up
set -a; . "$STACK/env"; set +a
WB=${CARGO_TARGET_DIR:-target}/debug/whimbrel
if [[ $MODE == --failure ]]; then
  INPUT='{"chunks": 8, "fail_chunk": 3}'
  WANT=FAILED
else
  INPUT='{"chunks": 8}'
  WANT=COMPLETED
fi
echo "==> whimbrel start wordcount --input '$INPUT'"
OUT=$("$WB" start wordcount --input "$INPUT")
echo "$OUT"
ID=$(awk '$1 == "workflow_exec_id" {print $2}' <<< "$OUT")
echo "==> whimbrel status $ID --watch"
timeout "${WHIMBREL_DEMO_TIMEOUT:-300}" "$WB" status "$ID" --watch || echo "demo: still running after ${WHIMBREL_DEMO_TIMEOUT:-300}s" >&2
"$WB" status "$ID" > "$STACK/demo-status.txt"
STATE=$(awk 'NR == 1 {print $3}' "$STACK/demo-status.txt")
if [[ $STATE != "$WANT" ]]; then
  echo "demo: workflow ended $STATE, expected $WANT" >&2
  exit 1
fi
if [[ $MODE == --failure ]] && ! grep -Eq '^merge +CANCELLED' "$STACK/demo-status.txt"; then
  echo "demo: merge is not CANCELLED" >&2
  exit 1
fi
echo "$ID" > "$STACK/demo-workflow-id"
echo "demo: workflow $STATE as expected"
