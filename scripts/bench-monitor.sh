#!/usr/bin/env bash
# `make bench-monitor`: one heartbeat monitor tick over many RUNNING
# activities, a few of them stale (what it reads should grow with the stale
# ones, not with all of them), on a fresh private DynamoDB Local (in
# memory). `whimbrel bench-monitor` starts the workflows,
# applies RUNNING and heartbeats through the Activity helper in-process,
# then ticks once and prints the items the tick read.
#   BENCH_MONITOR_ACTIVITIES (default 100000), BENCH_MONITOR_STALE (10)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=$PWD/.stack-bench-monitor
PORT=${WHIMBREL_DDB_PORT:-28100}
mkdir -p "$DIR"
bash scripts/dynamodb-local.sh install
cargo build --quiet --locked -p whimbrel-cli
trap 'bash scripts/dynamodb-local.sh stop "$DIR/ddb.pid"' EXIT
bash scripts/dynamodb-local.sh stop "$DIR/ddb.pid" > /dev/null 2>&1 || true
bash scripts/dynamodb-local.sh start "$PORT" "$DIR/ddb.pid" "$DIR/ddb.log"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 RUST_LOG=error
"${CARGO_TARGET_DIR:-target}"/debug/whimbrel --endpoint-url "http://127.0.0.1:$PORT" bench-monitor \
  --activities "${BENCH_MONITOR_ACTIVITIES:-100000}" --stale "${BENCH_MONITOR_STALE:-10}" "$@"
