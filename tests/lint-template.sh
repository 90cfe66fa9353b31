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
# 3. With the transform too: every AWS::CloudWatch::Dashboard's DashboardBody
#    (built with intrinsics, which cfn-lint does not look into) is resolved,
#    parameters at their defaults and every condition true, then false, and
#    must parse as JSON with widgets.
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

# cfn-lint does not look inside a DashboardBody built with intrinsics. Resolve
# it (parameters at their defaults, every condition true, then every condition
# false) and parse it as JSON.
import re

params = output.get("Parameters", {})
resources = output["Resources"]


def lookup(name):
    if name in pseudo:
        return pseudo[name]
    if name in params:
        return str(params[name].get("Default", "lint-" + name))
    if name.split(".")[0] in resources:
        return "lint-" + name.replace(".", "-")
    raise ValueError(f"unknown name {name}")


def resolve(node, cond):
    if isinstance(node, str):
        return node
    if isinstance(node, dict) and len(node) == 1:
        (fn, arg), = node.items()
        if fn == "Ref":
            return lookup(arg)
        if fn == "Fn::GetAtt":
            return lookup(".".join(arg) if isinstance(arg, list) else arg)
        if fn == "Fn::If":
            return resolve(arg[1] if cond else arg[2], cond)
        if fn == "Fn::Join":
            return arg[0].join(resolve(x, cond) for x in arg[1])
        if fn == "Fn::Sub":
            text, local = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])

            def sub(m):
                name = m.group(1)
                if name.startswith("!"):
                    return "${" + name[1:] + "}"
                return resolve(local[name], cond) if name in local else lookup(name)

            return re.sub(r"\$\{([^}]+)\}", sub, text)
    raise ValueError(f"cannot resolve {json.dumps(node)[:80]}")


dashboards = 0
for name, resource in resources.items():
    if resource.get("Type") != "AWS::CloudWatch::Dashboard":
        continue
    for cond in (True, False):
        try:
            body = json.loads(resolve(resource["Properties"]["DashboardBody"], cond))
        except ValueError as err:
            print(f"lint-template: {name} DashboardBody (conditions {cond}): {err}", file=sys.stderr)
            sys.exit(1)
        if not body.get("widgets"):
            print(f"lint-template: {name} DashboardBody has no widgets", file=sys.stderr)
            sys.exit(1)
    dashboards += 1
print(f"lint-template: dashboard bodies parse as JSON ({dashboards})")
PY

"$CFN_LINT" --regions "$AWS_DEFAULT_REGION" -- "$tmp/template.json" </dev/null
echo "lint-template: transformed template clean"
