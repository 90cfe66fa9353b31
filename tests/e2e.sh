#!/usr/bin/env bash
# End to end on a private local stack (its own ports and .stack-e2e/):
# wordcount runs to COMPLETED with the right result, then the failure run
# ends FAILED with merge CANCELLED and the reason shown by `whimbrel status`.
set -euo pipefail
cd "$(dirname "$0")/.."
export WHIMBREL_STACK_DIR=$PWD/.stack-e2e
export WHIMBREL_DDB_PORT=${WHIMBREL_DDB_PORT:-18000}
export WHIMBREL_WATCH_PORT=${WHIMBREL_WATCH_PORT:-19000}
export WHIMBREL_FRONT_PORT=${WHIMBREL_FRONT_PORT:-19001}
export WHIMBREL_KEEP_STACK=1
trap 'bash scripts/stack.sh down' EXIT
WB=${CARGO_TARGET_DIR:-target}/debug/whimbrel
fail() { echo "e2e: FAILED: $*" >&2; tail -30 "$WHIMBREL_STACK_DIR"/local.log >&2 || true; exit 1; }

bash scripts/demo.sh > "$WHIMBREL_STACK_DIR.demo.log" 2>&1 || { cat "$WHIMBREL_STACK_DIR.demo.log"; fail "wordcount did not complete"; }
set -a; . "$WHIMBREL_STACK_DIR/env"; set +a
ID=$(cat "$WHIMBREL_STACK_DIR/demo-workflow-id")
"$WB" status "$ID" --output json > "$WHIMBREL_STACK_DIR/result.json"
python3 - "$WHIMBREL_STACK_DIR/result.json" <<'PY' || fail "wordcount result is wrong"
import json, re, sys
doc = json.load(open(sys.argv[1]))
acts = doc["activities"]
assert len(acts) == 9, len(acts)
assert all(a["state"] == "COMPLETED" for a in acts), [a["state"] for a in acts]
merge = doc["result"]["merge"]
assert merge["chunks"] == 8, merge
assert len(merge["top"]) == 20, merge["top"]
# The default text is README.md: the merged total equals a direct count.
words = [w.strip("'") for w in re.split(r"[^\w']|_", open("README.md").read())]
words = [w for w in words if w]
assert merge["total_words"] == len(words), (merge["total_words"], len(words))
counts = [c for _, c in merge["top"]]
assert counts == sorted(counts, reverse=True), counts
print("e2e: wordcount COMPLETED,", merge["total_words"], "words,", merge["distinct_words"], "distinct")
PY

bash scripts/demo.sh --failure > "$WHIMBREL_STACK_DIR.failure.log" 2>&1 || { cat "$WHIMBREL_STACK_DIR.failure.log"; fail "failure run did not end as expected"; }
grep -q "error: activity count-3 FAILED: simulated failure" "$WHIMBREL_STACK_DIR/demo-status.txt" || { cat "$WHIMBREL_STACK_DIR/demo-status.txt"; fail "failure reason not shown"; }
echo "e2e: failure run FAILED with merge CANCELLED and the reason shown"
echo "e2e: 2 passed, 0 failed"
