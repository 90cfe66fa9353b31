#!/usr/bin/env bash
# The local stack (design.md § 6), on 127.0.0.1 only:
#   DynamoDB Local (DynamoDB + Streams)      :$WHIMBREL_DDB_PORT   (8000)
#   whimbrel lambda-apis (Lambda Invoke and Runtime APIs)
#                                            :$WHIMBREL_WATCH_PORT (9000)
#   whimbrel instances (the functions' processes, functions.log)
#   whimbrel local (stream mappings, schedule, Invoke API front)
#                                            :$WHIMBREL_FRONT_PORT (9001)
# Usage: scripts/stack.sh up|down|env|stop-functions|start-functions|start-local
# (stop-functions and start-functions stop and start the functions'
# processes alone, as an outage of every function would: tests/e2e-redrive.sh;
# start-local starts the runner alone, without the build, install and
# warm-up of `up`, once `up` has started the rest: tests/e2e-chaos.sh
# restarts a killed runner so)
# PID files and logs live in .stack/ (git-ignored); `down` stops exactly the
# processes `up` started, by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STACK=${WHIMBREL_STACK_DIR:-$ROOT/.stack}
VENV=${VENV:-$ROOT/.local/venv}
DDB_PORT=${WHIMBREL_DDB_PORT:-8000}
WATCH_PORT=${WHIMBREL_WATCH_PORT:-9000}
FRONT_PORT=${WHIMBREL_FRONT_PORT:-9001}
CONCURRENCY=${WHIMBREL_LAMBDA_CONCURRENCY:-16}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

# WHIMBREL_LAUNCH_EVENT_AGE_SECONDS: how long the launch targets' async
# queue keeps an invoke (the template's LaunchEventAgeSeconds, which
# `whimbrel local` is given too, so the two agree: the engine never launches
# again what the queue still holds). 60 s here, so a lost launch is
# launched again within two minutes; `make bench` runs with the deployed
# default, 21600, as its backlogs (10,000 launches) wait longer than that.
stack_env() {
  cat <<ENV
AWS_ACCESS_KEY_ID=test
AWS_SECRET_ACCESS_KEY=test
AWS_REGION=us-east-1
AWS_DEFAULT_REGION=us-east-1
AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$DDB_PORT
AWS_ENDPOINT_URL_DYNAMODB_STREAMS=http://127.0.0.1:$DDB_PORT
AWS_ENDPOINT_URL_LAMBDA=http://127.0.0.1:$FRONT_PORT
AWS_ENDPOINT_URL_SQS=http://127.0.0.1:$FRONT_PORT
WHIMBREL_TIMER_QUEUE_URL=http://127.0.0.1:$FRONT_PORT/000000000000/TimerQueue
WHIMBREL_TABLE_PREFIX=${WHIMBREL_TABLE_PREFIX:-whimbrel_}
WHIMBREL_HEARTBEAT_TIMEOUT_SECONDS=${WHIMBREL_HEARTBEAT_TIMEOUT_SECONDS:-300}
WHIMBREL_QUEUED_REDRIVE_SECONDS=${WHIMBREL_QUEUED_REDRIVE_SECONDS:-120}
WHIMBREL_LAUNCH_EVENT_AGE_SECONDS=${WHIMBREL_LAUNCH_EVENT_AGE_SECONDS:-60}
WHIMBREL_REQUIRE_TOKENS=${WHIMBREL_REQUIRE_TOKENS:-true}
# The monitor ticks every 5 s here (whimbrel local's --monitor-interval-seconds):
# each tick sleeps to the markers due within its interval (design.md 9).
WHIMBREL_MONITOR_LOOKAHEAD_SECONDS=${WHIMBREL_MONITOR_LOOKAHEAD_SECONDS:-5}
WHIMBREL_VISIBILITY_TIMEOUT_SECONDS=${WHIMBREL_VISIBILITY_TIMEOUT_SECONDS:-30}
WHIMBREL_METRICS_FILE=$STACK/metrics.jsonl
WHIMBREL_PRICE_TRANSACTIONS=${WHIMBREL_PRICE_TRANSACTIONS:-false}
RUST_LOG=${RUST_LOG:-info}
ENV
}

wait_port() { # port name pidfile seconds
  local port=$1 name=$2 pidfile=$3 secs=${4:-60}
  for _ in $(seq 1 $((secs * 5))); do
    if (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then return 0; fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "error: $name exited; see $STACK/$name.log" >&2; tail -20 "$STACK/$name.log" >&2; return 1
    fi
    sleep 0.2
  done
  echo "error: $name did not listen on 127.0.0.1:$port within ${secs}s; see $STACK/$name.log" >&2
  return 1
}

start() { # name cmd...
  local name=$1; shift
  local pidfile="$STACK/$name.pid"
  if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "==> $name already running (pid $(cat "$pidfile"))"; return 0
  fi
  # setsid: its own process group, so `down` can stop its children too.
  setsid "$@" > "$STACK/$name.log" 2>&1 < /dev/null &
  echo $! > "$pidfile"
  echo "==> $name started (pid $!, log $STACK/$name.log)"
}

# Whether pid runs: a zombie (exited, not yet reaped by init, which here
# can take seconds) counts as stopped.
running() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $st != Z* ]]; }

stop() { # name
  local pidfile="$STACK/$1.pid"
  [[ -f $pidfile ]] || return 0
  local pid; pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do running "$pid" || break; sleep 0.05; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    echo "==> $1 stopped (pid $pid)"
  fi
  rm -f "$pidfile"
}

start_functions() {
  start functions "$CARGO_TARGET_DIR/debug/whimbrel" instances --count "$CONCURRENCY" \
    --lambda-upstream "http://127.0.0.1:$WATCH_PORT"
}

# The runner, `--warm $1` (0: none; a warm-up invokes the heartbeat
# monitor before the front listens: a restarted runner's would relaunch into
# a front not listening yet).
start_local() {
  start local "$CARGO_TARGET_DIR/debug/whimbrel" local --listen "127.0.0.1:$FRONT_PORT" --warm "$1" \
    --function-concurrency "$CONCURRENCY" \
    --parameter-overrides "LaunchEventAgeSeconds=$WHIMBREL_LAUNCH_EVENT_AGE_SECONDS" \
    --lambda-upstream "http://127.0.0.1:$WATCH_PORT" --on-failure-file "$STACK/on-failure.jsonl" \
    --dead-letter-file "$STACK/dead-letter.jsonl"
  wait_port "$FRONT_PORT" local "$STACK/local.pid" 180
}

up() {
  mkdir -p "$STACK"
  bash scripts/venv.sh
  bash scripts/dynamodb-local.sh install
  stack_env > "$STACK/env"
  set -a; . "$STACK/env"; set +a
  # `make test` builds everything once before its parts start their
  # stacks (WHIMBREL_STACK_PREBUILT=1): a build here would only wait for
  # the cargo lock another part holds.
  if [[ -z ${WHIMBREL_STACK_PREBUILT:-} ]]; then
    echo "==> building the workspace"
    cargo build --quiet --locked --workspace --bins
  fi
  bash scripts/dynamodb-local.sh start "$DDB_PORT" "$STACK/ddb.pid" "$STACK/ddb.log"
  local wb="$CARGO_TARGET_DIR/debug/whimbrel"
  "$wb" install > "$STACK/install.log"
  "$wb" register wordcount --lambda wordcount-decider
  "$wb" register bench-chain --definition examples/bench-chain.json
  "$wb" register bench-fan --definition examples/bench-fan.json
  "$wb" register bench-fan-1000 --definition examples/bench-fan-1000.json
  "$wb" register bench-warm --definition examples/bench-warm.json
  # Too wide for a static definition's 400 KB item: planned by a decider
  # from the request input ({"width": N}).
  "$wb" register bench-fan-wide --lambda bench-fan-decider
  # `whimbrel lambda-apis` serves the Lambda Invoke and Runtime APIs for
  # every function of the template (WHIMBREL_TEMPLATE: a project made by
  # `whimbrel new` nests this stack's); `whimbrel instances` starts
  # $CONCURRENCY processes of every function from the built binaries (no
  # `cargo run` per function), apart from the runner as Lambda's instances
  # are apart from its pollers; the runner invokes each function once
  # (--warm) before its front listens.
  start lambda-apis "$wb" lambda-apis --listen "127.0.0.1:$WATCH_PORT"
  wait_port "$WATCH_PORT" lambda-apis "$STACK/lambda-apis.pid" 60
  start_functions
  start_local 1
  echo "==> stack up: DynamoDB 127.0.0.1:$DDB_PORT, functions 127.0.0.1:$WATCH_PORT, Invoke API front 127.0.0.1:$FRONT_PORT"
  echo "    environment for clients: set -a; . $STACK/env; set +a"
}

down() {
  stop local; stop functions; stop lambda-apis
  stop watch # a stack started before `whimbrel lambda-apis` (cargo lambda watch)
  bash scripts/dynamodb-local.sh stop "$STACK/ddb.pid"
  stop moto # a stack started before the switch to DynamoDB Local
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) stack_env ;;
  stop-functions) stop functions ;;
  start-functions) set -a; . "$STACK/env"; set +a; start_functions ;;
  start-local) set -a; . "$STACK/env"; set +a; start_local 0 ;;
  *) echo "usage: $0 up|down|env|stop-functions|start-functions|start-local" >&2; exit 2 ;;
esac
