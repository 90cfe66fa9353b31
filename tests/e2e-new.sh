#!/usr/bin/env bash
# README's "Your first workflow" as a new user runs it: the block between
# its tutorial markers, run as it is (bash -eu, each command in turn), from
# a fresh directory, on a private local stack (its own ports, the
# project's own .stack/). It must print the greeting and COMPLETED. Then
# the project's template.yaml, which `sam deploy` would take as it is,
# passes cfn-lint.
#
# The project builds into this checkout's target directory (CARGO_TARGET_DIR
# exported, as a user sharing builds would), so its Whimbrel crates are
# built once.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export PATH=$CARGO_TARGET_DIR/debug:$PATH
export WHIMBREL_DDB_PORT=${WHIMBREL_DDB_PORT:-18600}
export WHIMBREL_WATCH_PORT=${WHIMBREL_WATCH_PORT:-19600}
export WHIMBREL_FRONT_PORT=${WHIMBREL_FRONT_PORT:-19601}
W=$ROOT/.stack-new
rm -rf "$W"
mkdir -p "$W/here"
cleanup() { if [[ -d $W/hello ]]; then make -C "$W/hello" down > /dev/null 2>&1 || true; fi; }
trap cleanup EXIT
fail() { echo "e2e-new: FAILED: $*" >&2; tail -40 "$W/tutorial.log" >&2; tail -20 "$W/hello/.stack/local.log" >&2 2>/dev/null || true; exit 1; }

python3 - README.md "$W/tutorial.sh" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"<!-- tutorial:begin[^>]*-->\s*```sh\n(.*?)```\s*<!-- tutorial:end -->", text, re.S)
assert m, "README.md has no tutorial block"
open(sys.argv[2], "w").write("set -eu\n" + m.group(1))
PY
echo "e2e-new: running README's tutorial ($(grep -c . "$W/tutorial.sh") lines) in $W/here"
(cd "$W/here" && bash "$W/tutorial.sh") > "$W/tutorial.log" 2>&1 || fail "a tutorial command failed"
grep -q '"greeting": "Hello, world!"' "$W/tutorial.log" || fail "no greeting in the result"
grep -q '^workflow hello::.*COMPLETED' "$W/tutorial.log" || fail "the workflow did not COMPLETE"
echo "e2e-new: the tutorial's workflow COMPLETED with its greeting"
"${VENV:-$ROOT/.local/venv}/bin/cfn-lint" --regions us-east-1 -- "$W/hello/template.yaml" < /dev/null || fail "cfn-lint on the project's template"
echo "e2e-new: the project's template.yaml is clean (cfn-lint)"
echo "e2e-new: 2 passed, 0 failed"
