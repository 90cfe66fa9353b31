#!/usr/bin/env bash
# `make check`: the inner loop, a subset of `make test` for the change at
# hand (90 s after a one-line change to whimbrel-rules, 2 cores):
#  - the rules crate's tests and the engine's (whimbrel-core's unit tests
#    and its integration tests against one DynamoDB Local this script
#    starts, on its own port), under cargo-nextest;
#  - 100 seeded simulation schedules under faults (seeds 1-100;
#    CHECK_SIM_SCHEDULES=n for more), on every core.
# It builds only what those need. `make test` runs everything (the CLI,
# the handlers, the 500 schedules, end to end and chaos) and is what CI
# runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh
bash scripts/dynamodb-local.sh install
VENV=${VENV:-.local/venv}
export PATH="$PWD/$VENV/bin:$PATH"
OUT=$PWD/.stack-check
mkdir -p "$OUT"
SECONDS=0

echo "==> building the rules, the engine and their tests, and the simulation"
cargo build --locked -p whimbrel-sim --bins
cargo nextest run --locked -p whimbrel-rules -p whimbrel-core --no-run --cargo-quiet
built=$SECONDS

DDB_PORT=${WHIMBREL_CHECK_DDB_PORT:-18310}
stop_ddb() { bash scripts/dynamodb-local.sh stop "$OUT/ddb.pid" > /dev/null 2>&1 || true; }
trap stop_ddb EXIT
bash scripts/dynamodb-local.sh start "$DDB_PORT" "$OUT/ddb.pid" "$OUT/ddb.log"
export WHIMBREL_TEST_DYNAMODB=http://127.0.0.1:$DDB_PORT

echo "==> ${CHECK_SIM_SCHEDULES:-100} simulation schedules"
"${CARGO_TARGET_DIR:-target}/debug/whimbrel-sim" --first-seed 1 --schedules "${CHECK_SIM_SCHEDULES:-100}"
echo "==> the rules' and the engine's tests"
cargo nextest run --locked -p whimbrel-rules -p whimbrel-core --no-fail-fast --cargo-quiet --test-threads "${CHECK_TEST_THREADS:-6}"
echo "==> built in ${built} s, checked in ${SECONDS} s"
