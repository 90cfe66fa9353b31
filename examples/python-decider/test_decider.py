"""The Python decider's logic against requests recorded from the engine
(the shapes of docs/shapes.md section 7)."""

import json
import os
import unittest

import decider

# The requests the engine sent the Rust polling decider in
# crates/whimbrel-core/tests/it/episodes_dynamodb.rs, and its answers (ids and
# times made constant; that test fails when the requests change shape).
RECORDED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recorded-polling.json")


def canonical(answer):
    """An answer without what the shape defaults: version 1, no
    prerequisites, an empty lambda."""
    out = {k: v for k, v in answer.items() if not (k == "version" and v == 1)}
    for d in out.get("decisions", []):
        for node in d.get("activities", []):
            if node.get("depends_on") == []:
                del node["depends_on"]
    return out

STARTED = {"version": 1, "type": "workflow_started", "workflow_exec_id": "pypolling::1",
           "workflow_name": "pypolling", "workflow_request_id": "pypolling::r", "input": None}


def episode(*events):
    return {"version": 1, "type": "decision", "workflow_exec_id": "pypolling::1",
            "workflow_name": "pypolling", "decision_id": "pypolling::1::d2::a1",
            "input": None, "open": [], "markers": {}, "events": list(events)}


def ended(seq, node, output=None, state="COMPLETED"):
    event = {"seq": seq, "kind": "activity_ended", "at_epoch": 1_700_000_000 + seq,
             "node": node, "state": state}
    if output is not None:
        event["output"] = output
    return event


class DeciderTest(unittest.TestCase):
    def test_start_schedules_the_first_check(self):
        answer = decider.handler(STARTED, None)
        node = answer["decisions"][0]["activities"][0]
        self.assertEqual(node["name"], "check-1")

    def test_a_check_not_ready_waits_two_seconds(self):
        answer = decider.handler(episode(ended(1, "check-1", {"ready": False})), None)
        self.assertEqual(answer["decisions"][0]["activities"][0],
                         {"name": "wait-1", "wait": {"seconds": 2}})

    def test_a_timer_firing_checks_again(self):
        answer = decider.handler(episode(ended(2, "wait-1", {"fired_at": 1})), None)
        self.assertEqual(answer["decisions"][0]["activities"][0]["name"], "check-2")

    def test_a_ready_check_completes_with_the_count(self):
        answer = decider.handler(episode(ended(9, "check-5", {"ready": True})), None)
        self.assertEqual(answer["decisions"],
                         [{"type": "complete_workflow", "result": {"checks": 5}}])

    def test_a_failed_node_fails_the_workflow(self):
        answer = decider.handler(episode(ended(3, "check-2", state="FAILED")), None)
        self.assertEqual(answer["decisions"][0]["type"], "fail_workflow")

    def test_the_engines_recorded_requests_get_the_rust_deciders_answers(self):
        with open(RECORDED) as f:
            recorded = json.load(f)
        self.assertEqual(len(recorded), 10)  # the start and nine episodes
        for i, pair in enumerate(recorded):
            got = decider.handler(pair["request"], None)
            self.assertEqual(canonical(got), canonical(pair["answer"]), f"request {i}")

    def test_a_request_of_another_type_is_an_error(self):
        with self.assertRaises(ValueError):
            decider.handler({"type": "nope"}, None)


if __name__ == "__main__":
    unittest.main()
