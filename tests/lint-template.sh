#!/usr/bin/env bash
# Lint template.yaml offline (no AWS account, no SAM CLI, no Docker).
#
#   bash tests/lint-template.sh                 # from the repository root
#   VENV=/path/to/venv bash tests/lint-template.sh
#
# 1. cfn-lint on template.yaml as written. cfn-lint needs no SAM translator:
#    it merges Globals and checks AWS::Serverless::* against its own SAM
#    schemas. Two blind spots of that (cfn-lint 1.x): an `Events` entry that
#    holds an unresolvable intrinsic (every !GetAtt of a stream or queue here)
#    is not validated at all, and the IAM action check (W3037) is switched off
#    for any template with the SAM transform.
# 2. Hence, when aws-sam-translator is importable by the venv's python: run
#    the real SAM transform offline (as `sam validate` does, local CodeUri
#    replaced by a dummy S3 URI) and cfn-lint the resulting CloudFormation,
#    which covers the event source mappings, the generated roles and every IAM
#    action. Skipped with a notice otherwise; REQUIRE_SAM_TRANSFORM=1 makes a
#    missing translator an error.
#
# Exits non-zero on any cfn-lint finding (error or warning) or transform error.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${VENV:-.local/venv}"
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"
CFN_LINT="$VENV/bin/cfn-lint"
PYTHON="$VENV/bin/python"

if [[ ! -x "$CFN_LINT" ]]; then
    echo "lint-template: $CFN_LINT not found (create the venv with cfn-lint, or set VENV)" >&2
    exit 2
fi

echo "lint-template: $("$CFN_LINT" --version), region $AWS_DEFAULT_REGION"

# `--regions` takes several values: `--` keeps the file name from being read as
# one (without it cfn-lint lints nothing). cfn-lint exits non-zero whenever it
# reports a finding.
"$CFN_LINT" --regions "$AWS_DEFAULT_REGION" -- template.yaml </dev/null
echo "lint-template: template.yaml clean"

if ! "$PYTHON" -c 'import samtranslator' 2>/dev/null; then
    msg="SAM transform check skipped: aws-sam-translator not importable by $PYTHON"
    if [[ "${REQUIRE_SAM_TRANSFORM:-0}" == 1 ]]; then
        echo "lint-template: $msg" >&2
        exit 2
    fi
    echo "lint-template: $msg (pip install aws-sam-translator into the venv to enable)"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$PYTHON" - template.yaml "$tmp/template.json" <<'PY'
import json
import os
import sys

from samtranslator.public.exceptions import InvalidDocumentException
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class NoIamLookup:
    """Offline: no AWS managed policy is looked up by name (the template names none)."""

    def load(self):
        return {}


src, dst = sys.argv[1], sys.argv[2]
with open(src) as f:
    template = yaml_parse(f.read())

# What `sam package` uploads is replaced by a dummy S3 URI, as `sam validate` does.
for resource in template.get("Resources", {}).values():
    props = resource.get("Properties") or {}
    if resource.get("Type") == "AWS::Serverless::Function":
        code_uri = props.get("CodeUri", template.get("Globals", {}).get("Function", {}).get("CodeUri"))
        if not (isinstance(code_uri, str) and code_uri.startswith("s3://")):
            props["CodeUri"] = "s3://lint-template/code.zip"
            resource["Properties"] = props

pseudo = {
    "AWS::Region": os.environ["AWS_DEFAULT_REGION"],
    "AWS::Partition": "aws",
    "AWS::AccountId": "123456789012",
    "AWS::StackName": "lint-template",
}
try:
    output = transform(template, pseudo, NoIamLookup())
except InvalidDocumentException as err:
    for cause in err.causes:
        print(f"lint-template: SAM transform: {cause.message}", file=sys.stderr)
    sys.exit(1)

with open(dst, "w") as f:
    json.dump(output, f, indent=1)
print(f"lint-template: SAM transform ok, {len(output['Resources'])} CloudFormation resources")
PY

"$CFN_LINT" --regions "$AWS_DEFAULT_REGION" -- "$tmp/template.json" </dev/null
echo "lint-template: transformed template clean"
