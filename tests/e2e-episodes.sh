#!/usr/bin/env bash
# Deciders consulted as the workflow runs (design.md section 10, issue 24),
# end to end on a private local stack (its own ports and .stack-episodes/):
# the examples' decider (examples/src/episodes.rs) as a real Lambda under
# cargo lambda watch, its activity `episode-step`, two `whimbrel worker`s
# and the Python decider under AWS's runtime interface client. Checks:
#  1. image processing, as in the Flow framework's example: 20 images;
#     each `download-i` runs on the shared list `images` and returns its
#     host's task list; the decider schedules `thumbnail-i` there, so every
#     thumbnail runs on the worker that downloaded its image (from each
#     node's `worker` and output);
#  2. a polling loop: check, wait 2 s, check again; COMPLETED on the fifth
#     check, each timer firing no earlier than 2 s after its check ended;
#  3. a branch on a result, both ways: an order under the threshold ships
#     at once; one over it waits for an `approve` signal, then ships;
#  4. continue-as-new: 500 episodes, continuing as new every 50: a chain
#     of 10 executions, each COMPLETED, the last with {"episodes": 500};
#  5. the Python decider (examples/python-decider): its unit tests, and
#     the requests the engine sent the Rust polling decider (recorded by
#     crates/whimbrel-core/tests/it/episodes_dynamodb.rs) answered the same
#     way by it, run under AWS's runtime interface client (awslambdaric)
#     against a Runtime API (cargo lambda watch refuses to invoke a
#     function that is not a binary of the Cargo project).
set -euo pipefail
cd "$(dirname "$0")/.."
export WHIMBREL_STACK_DIR=$PWD/.stack-episodes
export WHIMBREL_DDB_PORT=${WHIMBREL_DDB_PORT:-18500}
export WHIMBREL_WATCH_PORT=${WHIMBREL_WATCH_PORT:-19500}
export WHIMBREL_FRONT_PORT=${WHIMBREL_FRONT_PORT:-19501}
S=$WHIMBREL_STACK_DIR
WB=${CARGO_TARGET_DIR:-$PWD/target}/debug/whimbrel
PY=${VENV:-$PWD/.local/venv}/bin/python
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  bash scripts/stack.sh down
}
trap cleanup EXIT
fail() { echo "e2e-episodes: FAILED: $*" >&2; tail -30 "$S"/local.log >&2 || true; exit 1; }
bash scripts/stack.sh up > "$S.up.log" 2>&1 || { cat "$S.up.log"; fail "stack did not start"; }
set -a; . "$S/env"; set +a
start() { "$WB" start "$1" --input "$2" | awk '$1 == "workflow_exec_id" {print $2}'; }
status_json() { "$WB" status "$1" --output json > "$S/$1.json" 2> /dev/null || true; }
# Wait until workflow $1 has ended (at most $2 s); its status JSON in $S.
wait_end() {
  local deadline=$((SECONDS + ${2:-180}))
  while ((SECONDS < deadline)); do
    status_json "$1"
    python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["workflow"]["state"] in ("RUNNING","REQUESTED"))' "$S/$1.json" 2> /dev/null && return 0
    sleep 1
  done
  return 1
}
for w in images polling orders marathon; do
  "$WB" register "$w" --lambda episodes-decider > /dev/null
done

# 4 first: it takes longest, and runs beside the others.
MARATHON=$(start marathon '{"total": 500}')

# 1. Image processing: two workers, each on its host's list and the shared one.
for host in a b; do
  DL="echo '{\"host\": \"$host\", \"task_list\": \"host-$host\"}'"
  TH="echo '{\"made_by\": \"$host\"}'"
  "$WB" worker --task-list images --task-list "host-$host" --name "worker-$host" --idle-exit 60 \
    --exec "case \$WHIMBREL_ACTIVITY_NAME in download-*) $DL ;; *) $TH ;; esac" \
    > "$S/worker-$host.out" 2> "$S/worker-$host.log" &
  PIDS+=($!)
done
IMAGES=$(start images '{"images": 20}')
wait_end "$IMAGES" 240 || fail "images did not end"
python3 - "$S/$IMAGES.json" <<'PY' || fail "a thumbnail did not run where its image was downloaded"
import json, sys
doc = json.load(open(sys.argv[1])); wf = doc["workflow"]
assert wf["state"] == "COMPLETED", (wf["state"], wf.get("error"))
acts = {a["activity_name"]: a for a in doc["activities"]}
assert len(acts) == 40, sorted(acts)
hosts = set()
for i in range(20):
    d, t = acts[f"download-{i}"], acts[f"thumbnail-{i}"]
    assert d["state"] == t["state"] == "COMPLETED", (d["state"], t["state"])
    host = d["output"]["host"]
    assert t["task_list"] == f"host-{host}", (i, t["task_list"])
    assert t["output"]["made_by"] == host, (i, d["output"], t["output"])
    assert d["worker"] == t["worker"] == f"worker-{host}", (i, d["worker"], t["worker"])
    hosts.add(host)
print(f"e2e-episodes: images COMPLETED; 20 thumbnails each on the worker that downloaded its image (hosts {sorted(hosts)})")
PY

# 2. The polling loop.
POLL=$(start polling '{}')
wait_end "$POLL" 120 || fail "polling did not end"
python3 - "$S/$POLL.json" <<'PY' || fail "the polling loop is wrong"
import json, sys
doc = json.load(open(sys.argv[1])); wf = doc["workflow"]
assert wf["state"] == "COMPLETED", (wf["state"], wf.get("error"))
assert wf["result"] == {"checks": 5}, wf["result"]
acts = {a["activity_name"]: a for a in doc["activities"]}
assert sorted(acts) == sorted([f"check-{k}" for k in range(1, 6)] + [f"wait-{k}" for k in range(1, 5)]), sorted(acts)
for k in range(1, 5):
    fired = acts[f"wait-{k}"]["output"]["fired_at"]
    checked = acts[f"check-{k}"]["end_time_epoch"]
    assert fired >= checked + 2, (k, checked, fired)
print("e2e-episodes: polling COMPLETED on the fifth check, each wait at least 2 s")
PY

# 3. The branch, both ways.
SMALL=$(start orders '{"items": 2}')
BIG=$(start orders '{"items": 9}')
wait_end "$SMALL" 60 || fail "the small order did not end"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); w=d["workflow"]; assert w["state"]=="COMPLETED", w["state"]; assert "approval" not in [a["activity_name"] for a in d["activities"]]' "$S/$SMALL.json" || fail "the small order did not ship at once"
for _ in $(seq 1 60); do
  status_json "$BIG"
  grep -q '"approval"' "$S/$BIG.json" && break
  sleep 0.5
done
grep -q '"ship"' "$S/$BIG.json" && fail "the big order shipped without its approval"
"$WB" signal "$BIG" approve --input '{"by": "ana"}' > /dev/null
wait_end "$BIG" 60 || fail "the big order did not end"
python3 - "$S/$BIG.json" <<'PY' || fail "the big order is wrong"
import json, sys
doc = json.load(open(sys.argv[1])); wf = doc["workflow"]
assert wf["state"] == "COMPLETED", (wf["state"], wf.get("error"))
assert wf["result"] == {"shipped": True, "approved": {"by": "ana"}}, wf["result"]
print("e2e-episodes: orders: under the threshold shipped at once; over it waited for approve, then shipped")
PY

# 5. The Python decider: its tests, then the engine's recorded requests
# answered under awslambdaric (cargo lambda watch serves only the Cargo
# project's binaries, so it cannot be invoked on this stack).
(cd examples/python-decider && "$PY" -m unittest test_decider) 2> "$S/py-unittest.log" || { cat "$S/py-unittest.log"; fail "Python decider tests"; }
(cd examples/python-decider && "$PY" serve_under_ric.py) > "$S/python-decider.log" 2>&1 || { cat "$S/python-decider.log"; fail "the Python decider under awslambdaric"; }
echo "e2e-episodes: the Python decider: $(tail -1 "$S/python-decider.log")"

# 4. The marathon's chain.
ID=$MARATHON; N=0
while :; do
  wait_end "$ID" 600 || fail "marathon execution $N ($ID) did not end"
  NEXT=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); w=d["workflow"]; assert w["state"]=="COMPLETED", (w["state"], w.get("error")); print(w.get("continued_as") or "")' "$S/$ID.json") || fail "marathon execution $N did not complete"
  N=$((N + 1))
  [[ -z $NEXT ]] && break
  ID=$NEXT
done
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); w=d["workflow"]; assert w["result"]=={"episodes": 500}, w["result"]' "$S/$ID.json" || fail "the marathon's last result"
[[ $N == 10 ]] || fail "the marathon ran $N executions, not 10"
echo "e2e-episodes: marathon: 500 episodes in a chain of 10 executions, each COMPLETED"
# `whimbrel show` follows the chain from any run (design.md § 10.6), with
# each run's decisions among its nodes' transitions.
"$WB" show "$MARATHON" --output json > "$S/marathon-show.json" || fail "show of the marathon"
python3 - "$S/marathon-show.json" "$MARATHON" "$ID" <<'PY' || fail "show does not follow the marathon's chain"
import json, sys
doc = json.load(open(sys.argv[1])); first, last = sys.argv[2], sys.argv[3]
assert doc["workflow_exec_id"] == first, doc["workflow_exec_id"]
chain = doc["chain"]
assert len(chain) == 10, len(chain)
assert chain[0]["workflow_exec_id"] == first and chain[-1]["workflow_exec_id"] == last
assert chain[0]["continued_from"] is None and chain[-1]["continued_as"] is None
for a, b in zip(chain, chain[1:]):
    assert a["continued_as"] == b["workflow_exec_id"], (a["continued_as"], b["workflow_exec_id"])
    assert b["continued_from"] == a["workflow_exec_id"]
decisions = [r for run in chain for r in run["timeline"] if r["actor"] == "decider"]
assert len(decisions) >= 500, len(decisions)
assert all(r["to"] == "COMMITTED" for r in decisions), [r for r in decisions if r["to"] != "COMMITTED"][:3]
for run in chain:
    t = run["timeline"]
    assert t[-1]["activity"] is None and t[-1]["to"] == "COMPLETED", t[-1]
    closes = ("continue_as_new", "complete_workflow")
    assert t[-2]["actor"] == "decider" and t[-2]["detail"] in closes, t[-2]
print(f"e2e-episodes: show follows the chain of 10 from its first run, with its {len(decisions)} decisions")
PY
RUNS=$("$WB" show "$ID" | grep -c '^run [0-9]* of 10 of the chain$') || true
[[ $RUNS == 10 ]] || fail "show of the last run printed $RUNS runs of the chain, not 10"
"$WB" show "$ID" --no-follow --output json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert "chain" not in d' || fail "show --no-follow printed the chain"
echo "e2e-episodes: 5 passed, 0 failed"
