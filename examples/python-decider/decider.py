"""An episodic Whimbrel decider in Python (docs/shapes.md section 7).

Deciders are Lambdas in any language: this one is served by AWS's Lambda
runtime interface client for Python (awslambdaric), locally as on Lambda:

    AWS_LAMBDA_RUNTIME_API=<host:port/path> python -m awslambdaric decider.handler

It answers both requests a decider receives:
- `workflow_started` (the start): the first decisions;
- `decision` (each episode): the open nodes, markers and the events no
  decision has seen; it answers with decisions.

The workflow: check a status; if it is not ready, wait 2 s and check again;
complete with the number of checks once it is ready. Nothing is replayed:
the decider reads the events it is shown and decides.
"""

import os

STEP = os.environ.get("EPISODE_STEP_LAMBDA", "episode-step")


def lambda_node(name, input_value):
    return {"name": name, "lambda": STEP, "input": input_value}


def schedule(*nodes):
    return {"type": "schedule", "activities": list(nodes)}


def start(request):
    """The first decisions: the first check."""
    return {"decisions": [schedule(lambda_node("check-1", {"check": 1}))]}


def decide(request):
    """One episode: what each ended node calls for."""
    decisions = []
    for event in request.get("events", []):
        if event.get("kind") != "activity_ended":
            continue
        node = event.get("node", "")
        if event.get("state") != "COMPLETED":
            reason = f"{node} ended {event.get('state')}: {event.get('reason', '')}"
            return {"decisions": [{"type": "fail_workflow", "reason": reason}]}
        if node.startswith("check-"):
            k = int(node[len("check-"):])
            if (event.get("output") or {}).get("ready"):
                done = {"type": "complete_workflow", "result": {"checks": k}}
                return {"decisions": [done]}
            decisions.append(schedule({"name": f"wait-{k}", "wait": {"seconds": 2}}))
        elif node.startswith("wait-"):
            k = int(node[len("wait-"):]) + 1
            decisions.append(schedule(lambda_node(f"check-{k}", {"check": k})))
    return {"decisions": decisions}


def handler(event, context):
    """The Lambda entry point."""
    kind = event.get("type")
    if kind == "workflow_started":
        return start(event)
    if kind == "decision":
        return decide(event)
    raise ValueError(f"not a decider request: type {kind!r}")
