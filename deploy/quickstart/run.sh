#!/usr/bin/env bash
# The quickstart: Kafka + a standalone worker + a file → topic → file pipeline deployed over REST.
# Ctrl-C stops everything cleanly. QUICKSTART_SECONDS=N stops by itself after N seconds.
set -euo pipefail

# State goes under the directory it is started from (`make quickstart`: the checkout).
DIR=.sluice/quickstart
KAFKA_PORT=${KAFKA_PORT:-9092}
REST_PORT=${REST_PORT:-8083}
REST=http://127.0.0.1:$REST_PORT
# The worker's state.dir; connectors may use only its data folder (the default connector.allowed.paths).
DATA=$DIR/data
mkdir -p "$DATA"
rm -f "$DATA/input.txt" "$DATA/output.txt" "$DIR/offsets.json"
: > "$DATA/input.txt"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

WORKER_PID=""
FEEDER_PID=""
cleanup() {
  trap - INT TERM EXIT
  trap '' PIPE  # a closed terminal or pipe must not cut the clean-up short
  say "Stopping" || true
  [[ -n $FEEDER_PID ]] && kill "$FEEDER_PID" 2>/dev/null || true
  if [[ -n $WORKER_PID ]] && kill -0 "$WORKER_PID" 2>/dev/null; then
    kill -TERM "$WORKER_PID"; wait "$WORKER_PID" 2>/dev/null || true
    echo "worker stopped (offsets committed)" || true
  fi
  sluice dev down --port "$KAFKA_PORT" || true
}
trap cleanup EXIT
trap 'cleanup; exit 0' INT TERM  # Ctrl-C is how a user ends the quickstart: a clean exit

say "Starting Kafka (KRaft, loopback)"
sluice dev up --port "$KAFKA_PORT"
BOOTSTRAP=127.0.0.1:$KAFKA_PORT

cat > "$DIR/worker.properties" <<PROPS
bootstrap.servers=$BOOTSTRAP
listeners=http://127.0.0.1:$REST_PORT
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
offset.storage.file.filename=$DIR/offsets.json
offset.flush.interval.ms=2000
# The worker's state; connector.allowed.paths is unset, so the file connectors may read and write
# only in <state.dir>/data (relative paths count from the worker's directory).
state.dir=$PWD/$DIR
# No config.providers: \${env:...}, \${file:...} and \${dir:...} placeholders are refused until declared,
# e.g. config.providers=env with config.providers.env.param.allowlist.pattern=QUICKSTART_.*
PROPS

say "Starting a standalone worker (REST on $REST)"
# setsid: Ctrl-C reaches only this script, which then stops the worker once, gracefully.
setsid sluice standalone "$DIR/worker.properties" > "$DIR/worker.log" 2>&1 &
WORKER_PID=$!
for _ in $(seq 1 100); do
  curl -sf "$REST/health" >/dev/null 2>&1 && break
  kill -0 "$WORKER_PID" 2>/dev/null || { cat "$DIR/worker.log"; exit 1; }
  sleep 0.2
done
curl -s "$REST/"; echo

say "Deploying a FileStreamSource (input.txt → topic quickstart-lines)"
(set -x; curl -s -X POST -H 'Content-Type: application/json' "$REST/connectors" -d @- <<JSON
{"name": "lines-in", "config": {"connector.class": "FileStreamSource", "file": "$DATA/input.txt", "topic": "quickstart-lines"}}
JSON
); echo

say "Deploying a FileStreamSink (topic quickstart-lines → output.txt)"
(set -x; curl -s -X POST -H 'Content-Type: application/json' "$REST/connectors" -d @- <<JSON
{"name": "lines-out", "config": {"connector.class": "FileStreamSink", "file": "$DATA/output.txt", "topics": "quickstart-lines"}}
JSON
); echo

say "Connector status"
curl -s "$REST/connectors?expand=status"; echo

say "Writing a line a second to $DATA/input.txt; lines arriving in $DATA/output.txt (Ctrl-C to stop)"
( i=1; while true; do echo "hello from sluice, line $i at $(date +%T)" >> "$DATA/input.txt"; i=$((i+1)); sleep 1; done ) &
FEEDER_PID=$!

touch "$DATA/output.txt"
if [[ -n ${QUICKSTART_SECONDS:-} ]]; then
  timeout "$QUICKSTART_SECONDS" tail -n +1 -f "$DATA/output.txt" || true
  say "$(wc -l < "$DATA/output.txt") line(s) arrived"
else
  tail -n +1 -f "$DATA/output.txt"
fi
