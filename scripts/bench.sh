#!/usr/bin/env bash
# `make bench`: cost and latency on the local stack (not part of the tests).
#  - a chain of 10 no-op activities and a fan-out/fan-in of 100 (start ->
#    100 parallel -> join), each after a warm-up run so cargo lambda watch's
#    first process start is not measured;
#  - DynamoDB requests per activity by operation, counted by the engine's
#    store (WHIMBREL_METRICS_FILE), Lambda invocations per activity (counted
#    by whimbrel local), wall time insert -> end, on-demand cost;
#  - release binary sizes of the three functions.
set -euo pipefail
cd "$(dirname "$0")/.."
export WHIMBREL_STACK_DIR=${WHIMBREL_STACK_DIR:-$PWD/.stack}
trap 'bash scripts/stack.sh down' EXIT
bash scripts/stack.sh up
set -a; . "$WHIMBREL_STACK_DIR/env"; set +a
WB=${CARGO_TARGET_DIR:-target}/debug/whimbrel
FRONT=http://127.0.0.1:${WHIMBREL_FRONT_PORT:-9001}
bench() { "$WB" bench "$1" --front "$FRONT" --metrics-file "$WHIMBREL_METRICS_FILE"; }
echo "==> warm-up"
bench bench-fan > /dev/null
for wf in bench-chain bench-fan; do
  echo; echo "==================== $wf ===================="
  bench "$wf"
done
echo; echo "==================== release binary sizes ===================="
cargo build --release --quiet -p whimbrel-workflow-request -p whimbrel-activity-event -p whimbrel-heartbeat-monitor
for b in whimbrel-workflow-request whimbrel-activity-event whimbrel-heartbeat-monitor; do
  printf "  %-30s %8d KiB\n" "$b" $(( $(stat -c %s "${CARGO_TARGET_DIR:-target}/release/$b") / 1024 ))
done
